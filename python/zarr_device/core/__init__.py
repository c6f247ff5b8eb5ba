"""The core API a user calls, which ``zarr_device`` itself re-exports: arrays (``array``:
``Array``), groups and opening nodes (``group``: ``Group``, ``open``, ``open_array``,
``open_group``, ``create_group``), creating arrays (``create``), what arrays and groups share
(``nodes``: paths, open and create modes, JSON documents), their attributes (``attributes``),
NumPy selections as the engine's (start, step, count) (``selection``) and reads of many arrays at
once (``many``: ``read_many``, ``iter_many``). core may import ``zarr_device.io``,
``zarr_device.basics``, ``zarr_device.errors`` and the engine, nothing of the integrations or
tools."""
