"""Stores and moving data: the stores the engine reads and writes (``stores``), devices
(``devices``: ``device=`` parsed into a ``DeviceSpec``), where a read lands and where a write comes
from (``transfers``, through one adapter per framework in ``adapters/``), reads onto devices
through a bounded host staging (``staged_reads``), directory trees written whole or not at all
(``atomic_trees``, placed with the renames of ``renames``) and what killed writers leave beside
them (``leftover_trees``), and how an array names its stored chunks (``chunk_keys``). io may
import ``zarr_device.basics``, ``zarr_device.errors`` and the engine (``zarr_device._core``),
nothing of core, the integrations or tools."""
