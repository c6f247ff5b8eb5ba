"""Dask: the zarr-python plug-in in every worker process of a ``dask.distributed`` cluster.

Each worker has its own zarr-python config, so :func:`zarr_device.enable` in the client does not
reach it. :class:`EnableOnWorkers` switches the plug-in on in each worker as it starts (and in
workers that join later), with the same arguments::

    import dask.array as da
    from dask.distributed import Client
    import zarr_device
    from zarr_device.dask import EnableOnWorkers

    client = Client(cluster)
    client.register_plugin(EnableOnWorkers(like="numpy"))
    with zarr_device.enable(like="numpy"):
        x = da.from_zarr("data.zarr")      # zarr.Array with the engine's codec pipeline
    x.sum().compute()                      # chunks read by the engine, in the workers

zarr-python arrays opened with the plug-in on keep it when dask sends them to a worker (the
pipeline is rebuilt there from the array's metadata and store); arrays the workers open
themselves follow the workers' config, which this plug-in sets. :class:`zarr_device.Array`
pickles as its store and path (``da.from_array(zarr_device.open_array(...), chunks=...)``).
"""

from __future__ import annotations

from typing import Any

from distributed import WorkerPlugin

from zarr_device.io.devices import DeviceLike
from zarr_device.zarr_plugin import disable, enable

__all__ = ["EnableOnWorkers"]


class EnableOnWorkers(WorkerPlugin):
    """A worker plugin that calls :func:`zarr_device.enable` with these arguments in every worker
    (``client.register_plugin(EnableOnWorkers(...))``), and :func:`zarr_device.disable` when the
    worker closes."""

    name = "zarr_device.enable"

    def __init__(self, device: DeviceLike = "cpu", like: str | None = None, *, strict: bool = False) -> None:
        self.device = device
        self.like = like
        self.strict = strict

    def setup(self, worker: Any) -> None:
        enable(self.device, self.like, strict=self.strict)

    def teardown(self, worker: Any) -> None:
        disable()

    def __repr__(self) -> str:
        return f"EnableOnWorkers(device={self.device!r}, like={self.like!r}, strict={self.strict})"
