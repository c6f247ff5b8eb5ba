"""The writers of the golden fixtures, which scripts/make_golden.py runs: deterministic values
(``values``), the golden directory and its manifest entries (``fixtures``), and the cases each
reference implementation writes (``zarr_python_cases``, ``tensorstore_cases``)."""
