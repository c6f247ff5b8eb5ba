"""The basics every other layer of zarr_device stands on, none of which moves data: Zarr data type
names and their NumPy dtypes (``numpy_dtypes``), which values a write may cast (``casting``), byte
sizes written as text (``sizes``), the engine's I/O settings (``config``: ``IoConfig``,
``get_config``, ``set_config``) and the one kind of progress bar (``progress``). These import
nothing of the package beyond each other, the engine (``zarr_device._core``) and
``zarr_device.errors``; every other layer (io, core, the integrations, tools) may import them."""
