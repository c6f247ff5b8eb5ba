"""Charts of benchmark results: GB/s by chunk size, readers side by side (warm and cold), and
scaling with threads. ``zarr-device bench --plot`` and the repository's ``python -m bench plot``
both draw with these, from records of one shape:

    {"loader" or "case": str, "gbps": float, "cache": "warm" | "cold",
     "chunk_bytes": int (optional), "threads": int (optional), "codec", ... (optional)}

matplotlib is optional for the package: it is imported inside the functions that draw, and
``require_matplotlib`` says how to install it before any work is spent on a run that would plot.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zarr_device.basics.sizes import format_bytes
from zarr_device.errors import UsageError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "MATPLOTLIB_MISSING",
    "chart_names",
    "gbps_of",
    "plot_by_chunk_size",
    "plot_loaders",
    "plot_records",
    "plot_threads",
    "reader_of",
    "require_matplotlib",
    "title_of",
]

Record = Mapping[str, Any]

MATPLOTLIB_MISSING = "plotting needs matplotlib, which is not installed: pip install matplotlib"

# Fields that tell one series of a chart from another when the records differ in them; the
# measured quantities (gbps, chunk_bytes, threads, cache) are the axes, not the series.
SERIES_FIELDS = ("codec", "written_by", "store", "read", "policy", "where", "part")


def require_matplotlib() -> None:
    """Raises UsageError, saying how to install matplotlib, where it cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise UsageError(MATPLOTLIB_MISSING) from e


def _figure(width: float = 10.0, height: float = 4.8) -> Figure:
    require_matplotlib()
    import matplotlib

    # Agg draws to files without a display; set before anything else of matplotlib draws.
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def title_of(what: str, machine: Mapping[str, Any] | None, date: str | None) -> str:
    """``what``, then the machine (CPU, cores, GPU) and the date, for a chart's title."""
    parts: list[str] = []
    if machine:
        cpu = str(machine.get("cpu") or "unknown CPU")
        cores = machine.get("cores")
        parts.append(f"{cpu}, {cores} cores" if cores else cpu)
        if machine.get("gpu"):
            parts.append(str(machine["gpu"]))
    if date:
        parts.append(date[:10])
    return what + ("\n" + "; ".join(parts) if parts else "")


def reader_of(record: Record) -> str:
    """What a record measured: its reader (loader) or case."""
    return str(record.get("loader") or record.get("case") or "?")


def _varying(records: Sequence[Record], fields: Iterable[str]) -> list[str]:
    return [f for f in fields if len({str(r.get(f)) for r in records}) > 1]


def _series(records: Sequence[Record]) -> dict[str, list[Record]]:
    """The records by series: the reader's name, with whatever else varies among them."""
    extra = _varying(records, SERIES_FIELDS)
    out: dict[str, list[Record]] = {}
    for r in records:
        qualifiers = [f"{f.replace('_', ' ')} {r[f]}" for f in extra if r.get(f) is not None]
        label = ", ".join([reader_of(r), *qualifiers])
        out.setdefault(label, []).append(r)
    return out


def gbps_of(record: Record) -> float | None:
    """A record's GB/s, None where it has no finite, positive one."""
    value = record.get("gbps")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _measured(records: Iterable[Record]) -> list[Record]:
    return [r for r in records if gbps_of(r) is not None]


def _best_by(records: Iterable[Record], key: str) -> dict[int, float]:
    """The best GB/s at each value of ``key`` (an int field)."""
    best: dict[int, float] = {}
    for r in records:
        x, y = r.get(key), gbps_of(r)
        if isinstance(x, int) and not isinstance(x, bool) and x > 0 and y is not None:
            best[x] = max(best.get(x, 0.0), y)
    return best


def _lines_by(records: Sequence[Record], key: str) -> dict[str, dict[int, float]]:
    """The series measured warm at two values of ``key`` or more: their best GB/s at each."""
    warm = [r for r in _measured(records) if r.get("cache", "warm") == "warm" and key in r]
    lines = {label: _best_by(rs, key) for label, rs in _series(warm).items()}
    return {label: points for label, points in lines.items() if len(points) > 1}


def chart_names(records: Sequence[Record]) -> list[str]:
    """The charts plot_records draws of these records, by the suffix of their file names."""
    names = []
    if _lines_by(records, "chunk_bytes"):
        names.append("chunks")
    if _measured(records):
        names.append("loaders")
    if _lines_by(records, "threads"):
        names.append("threads")
    return names


def _legend(axes: Axes) -> None:
    # Beside the plot, not on it: the series' names are long and the lines cross.
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _save(figure: Figure, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=120)
    return path


def _plot_lines(records: Sequence[Record], key: str, label_of: Callable[[int], str],
                axis_label: str, title: str, path: str) -> str | None:
    """GB/s by the records' ``key`` (log 2 axis), a line per reader, warm reads; None (nothing
    written) unless some reader was measured at two values of it or more."""
    lines = _lines_by(records, key)
    if not lines:
        return None
    figure = _figure()
    axes = figure.add_subplot()
    values: set[int] = set()
    for label, points in sorted(lines.items()):
        xs = sorted(points)
        values.update(xs)
        axes.plot(xs, [points[x] for x in xs], marker="o", label=label)
    axes.set_xscale("log", base=2)
    ticks = sorted(values)
    axes.set_xticks(ticks, [label_of(x) for x in ticks], rotation=30)
    axes.minorticks_off()
    axes.set_xlabel(axis_label)
    axes.set_ylabel("GB/s (10^9 bytes/s)")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    _legend(axes)
    axes.set_title(title, fontsize="medium")
    return _save(figure, path)


def plot_by_chunk_size(records: Sequence[Record], title: str, path: str) -> str | None:
    """GB/s by chunk size, a line per reader, warm reads; None (nothing written) unless some
    reader was measured at two chunk sizes or more."""
    return _plot_lines(records, "chunk_bytes", lambda x: format_bytes(x).replace(" ", ""),
                       "chunk size", title, path)


def plot_loaders(records: Sequence[Record], title: str, path: str) -> str | None:
    """Each reader's best GB/s as bars, warm and cold side by side; None where nothing was
    measured."""
    measured = _measured(records)
    if not measured:
        return None
    best: dict[str, dict[str, float]] = {}
    for label, rs in _series(measured).items():
        for r in rs:
            cache = "cold" if r.get("cache") == "cold" else "warm"
            value = gbps_of(r) or 0.0
            best.setdefault(label, {})[cache] = max(best.get(label, {}).get(cache, 0.0), value)
    labels = sorted(best, key=lambda label: -best[label].get("warm", 0.0))
    caches = [c for c in ("warm", "cold") if any(c in best[label] for label in labels)]
    figure = _figure(max(6.0, 0.6 * len(labels) + 3.0), 5.2)
    axes = figure.add_subplot()
    width = 0.8 / len(caches)
    for k, cache in enumerate(caches):
        xs = [i + (k - (len(caches) - 1) / 2) * width for i in range(len(labels))]
        axes.bar(xs, [best[label].get(cache, 0.0) for label in labels], width, label=cache)
    axes.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize="small")
    axes.set_ylabel("GB/s (10^9 bytes/s), best")
    axes.grid(True, axis="y", alpha=0.3)
    _legend(axes)
    axes.set_title(title, fontsize="medium")
    return _save(figure, path)


def plot_threads(records: Sequence[Record], title: str, path: str) -> str | None:
    """GB/s by thread count, a line per reader, warm reads; None unless some reader was
    measured with two thread counts or more."""
    return _plot_lines(records, "threads", str, "threads", title, path)


def plot_records(records: Sequence[Record], name: str, out_dir: str, *,
                 machine: Mapping[str, Any] | None = None, date: str | None = None) -> list[str]:
    """Every chart the records allow, as ``out_dir/NAME-chunks.png``, ``-loaders.png`` and
    ``-threads.png``, titled with the machine and date; the paths written."""
    charts = (
        ("chunks", plot_by_chunk_size, "GB/s by chunk size"),
        ("loaders", plot_loaders, "readers, warm and cold"),
        ("threads", plot_threads, "scaling with threads"),
    )
    written = []
    for suffix, draw, what in charts:
        title = title_of(f"{name}: {what}", machine, date)
        path = draw(records, title, os.path.join(out_dir, f"{name}-{suffix}.png"))
        if path is not None:
            written.append(path)
    return written
