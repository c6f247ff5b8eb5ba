"""Tools: the ``zarr-device`` command (``cli/``, one module per command) and the store check and
repair behind ``zarr-device fsck`` (``store_check``, ``store_walk``). Tools may import every other
layer: core, io, basics, the conversions and the integrations (``zarr_device.torch``, inside the
functions that need it, so that the tools work without PyTorch). Nothing in the package imports
from here; this file imports nothing, so that importing one tool does not import the others."""
