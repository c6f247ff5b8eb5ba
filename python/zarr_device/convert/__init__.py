"""Conversions: the Zarr-to-Zarr rewrite behind ``zarr_device.convert`` and ``zarr-device convert``
(``zarr_to_zarr``), and what every conversion shares (``shared``: the summary, the source as one
tree of nodes, the destination's checks), which the checkpoint conversions of
``zarr_device.torch.interop`` use too. They import core, io and basics; the integrations and the
tools import them. The one import upwards is ``zarr_to_zarr.convert`` handing a checkpoint source
to ``zarr_device.torch.interop``, inside the call, since PyTorch is optional. This file imports
nothing, so that importing one conversion does not import the other."""
