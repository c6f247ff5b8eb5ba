"""Tools: the ``zarr-device`` command (``cli/``, one module per command), the Zarr-to-Zarr rewrite
behind ``zarr_device.convert`` and ``zarr-device convert`` (``zarr_to_zarr``), what every
conversion shares (``conversion_shared``, which the checkpoint conversions of
``zarr_device.torch.interop`` use too), and the store check and repair behind ``zarr-device fsck``
(``store_check``). Tools may import every other layer: core, io, basics, and the integrations
(``zarr_device.torch``, inside the functions that need it, so that the tools work without
PyTorch). In the package, only ``zarr_device`` itself (for ``convert`` and ``ConvertSummary``)
and ``zarr_device.torch.interop`` (for ``conversion_shared``, which imports nothing above core)
import from here; this file imports nothing, so that importing one tool does not import the
others."""
