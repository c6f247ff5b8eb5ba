"""Adapters between the engine and array frameworks (allocation, DLPack, device pointers,
streams), one module per framework. Each imports its framework only when called, so that
``import zarr_device`` imports none of them."""
