"""Charts of benchmark results: GB/s by chunk size, readers side by side (warm and cold), zarr-device
against the other readers, and scaling with threads. ``zarr-device bench --plot`` and the
repository's ``python -m bench plot`` and ``report`` all draw with these, from records of one
shape:

    {"loader" or "case": str, "gbps": float, "cache": "warm" | "cold",
     "chunk_bytes": int (optional), "threads": int (optional), "codec", "part", ... (optional)}

The machine's limits, measured in the same run as the reads, come as cases named
``limits/NAME`` (``limits/h2d_pinned``); a script that measures a group of reads per codec names
those cases ``CODEC/WAY`` (``zstd/one call``). ``arranged`` turns both into plain fields, for the
charts and for ``bench/report.py``'s tables.

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
    "CHARTS",
    "LIMIT_NOTE",
    "MATPLOTLIB_MISSING",
    "PART_TITLES",
    "arranged",
    "chart_names",
    "codec_label",
    "gbps_of",
    "limit_of",
    "plot_by_chunk_size",
    "plot_loaders",
    "plot_records",
    "plot_threads",
    "plot_versus",
    "reader_of",
    "require_matplotlib",
    "title_of",
]

Record = Mapping[str, Any]

MATPLOTLIB_MISSING = "plotting needs matplotlib, which is not installed: pip install matplotlib"

# Fields that tell one series of a chart from another when the records differ in them; the
# measured quantities (gbps, chunk_bytes, threads, cache) are the axes, not the series.
SERIES_FIELDS = ("series", "codec", "written_by", "store", "read", "policy", "where", "part")

# The charts plot_records draws, by the suffix of their file names, and what each shows.
CHARTS = {
    "chunks": "GB/s by chunk size, warm",
    "loaders": "readers side by side",
    "versus": "zarr-device against the other readers, warm",
    "threads": "scaling with threads, warm",
}

# The limits the GPU scripts measure beside their reads (bench/bench_common.py, child_limits).
LIMIT_LABELS = {
    "h2d_pinned": "host -> GPU copy, pinned",
    "h2d_pageable": "host -> GPU copy, pageable",
    "page_cache_to_pinned": "page cache -> pinned",
    "disk_to_pinned_cold": "disk -> pinned",
    "both_at_once": "page cache -> pinned while copying to the GPU",
    "one_get_partial_values_call": "one get_partial_values call for every key",
}
_WARM_LIMITS = ("page_cache_to_pinned", "h2d_pinned")
_COLD_LIMITS = ("disk_to_pinned_cold",)
LIMIT_NOTE = ("limit: the slower of page cache -> pinned and the pinned copy to the GPU (warm), or "
              "disk -> pinned (cold), measured in the same run on the stored bytes; reads count "
              "decoded bytes, so a compressed read can pass its limit")

# What the scripts of the suites measure, for the panels of a chart holding several.
PART_TITLES = {
    "bench_gpu.py": "read onto the GPU",
    "bench_gpu_write.py": "written from a CUDA tensor",
    "bench_many.py": "a state dict onto the GPU",
}

_CODEC_WORDS = frozenset({"none", "plain", "bytes", "zstd", "blosc", "lz4", "gzip", "zlib", "crc32c",
                          "shuffle"})
_OURS = "zarr-device"


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
    """``what``, then the machine (GPU, CPU and cores) and the date, for a chart's title."""
    parts: list[str] = []
    if machine:
        if machine.get("gpu"):
            parts.append(str(machine["gpu"]))
        cpu = str(machine.get("cpu") or "unknown CPU")
        cores = machine.get("cores")
        parts.append(f"{cores} cores of {cpu}" if cores else cpu)
    if date:
        parts.append(date[:10])
    return what + ("\n" + "; ".join(parts) if parts else "")


def reader_of(record: Record) -> str:
    """What a record measured: its reader (loader) or case."""
    return str(record.get("loader") or record.get("case") or "?")


def codec_label(codec: Any) -> str:
    """A codec as charts and tables name it: "none" is "uncompressed"."""
    return "uncompressed" if codec == "none" else str(codec)


def _is_codec(name: str) -> bool:
    return all(word in _CODEC_WORDS for word in name.split("+"))


def _part(record: Record) -> str:
    return str(record.get("part", ""))


def arranged(records: Iterable[Record]) -> list[dict[str, Any]]:
    """Copies of the records with what their names say moved into fields:

    - a case ``limits/NAME`` is a limit: ``limit`` is NAME and the case its label. A script that
      measures its limits once per codec writes them after that codec's reads, which the records
      give as ``CODEC/WAY``: such a limit takes the codec of the reads before it, in its part.
    - a case ``CODEC/WAY`` is the case WAY with ``codec`` CODEC.
    - a reader measured with one thread count only (no scaling series) names it in its label.
    """
    out: list[dict[str, Any]] = []
    codec_before: dict[str, str] = {}
    for record in records:
        r = dict(record)
        case = r.get("case")
        if r.get("loader") is None and isinstance(case, str) and "/" in case:
            head, tail = case.split("/", 1)
            if head == "limits":
                r["limit"] = tail
                r["case"] = LIMIT_LABELS.get(tail, tail.replace("_", " "))
                if r.get("codec") is None and _part(r) in codec_before:
                    r["codec"] = codec_before[_part(r)]
            elif _is_codec(head) and r.get("codec") is None:
                r["codec"], r["case"] = head, tail
                codec_before[_part(r)] = head
        out.append(r)
    counts: dict[tuple[str, str], set[Any]] = {}
    for r in out:
        if "threads" in r:
            counts.setdefault((_part(r), reader_of(r)), set()).add(r["threads"])
    for r in out:
        if "threads" in r and len(counts[(_part(r), reader_of(r))]) == 1:
            n = r.pop("threads")
            key = "loader" if r.get("loader") else "case"
            r[key] = f"{reader_of(r)}, {n} thread{'s' if n != 1 else ''}"
    return out


def limit_of(records: Iterable[Record], codec: Any, cache: str) -> float | None:
    """The limit of a read with ``codec`` (None: any) from the cache (warm) or the disk (cold),
    among arranged records of one part: warm, the slower of page cache -> pinned and the pinned
    copy to the GPU; cold, disk -> pinned. None where those were not measured."""
    names = _COLD_LIMITS if cache == "cold" else _WARM_LIMITS
    found: dict[str, float] = {}
    for r in records:
        name, gbps = r.get("limit"), gbps_of(r)
        if name in names and gbps is not None and r.get("codec") in (None, codec):
            found[str(name)] = max(found.get(str(name), 0.0), gbps)
    return min(found.values()) if found else None


def _varying(records: Sequence[Record], fields: Iterable[str]) -> list[str]:
    return [f for f in fields if len({str(r.get(f)) for r in records}) > 1]


def _series(records: Sequence[Record], fields: Sequence[str] = SERIES_FIELDS) -> dict[str, list[Record]]:
    """The records by series: the reader's name, with whatever else of ``fields`` varies among
    them."""
    extra = _varying(records, fields)
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


def _measured(records: Iterable[Record]) -> list[dict[str, Any]]:
    """The arranged records with a GB/s figure, but for those that count chunks a second (reads
    of tiny chunks, whose GB/s no chart of GB/s should show)."""
    return [r for r in arranged(records) if gbps_of(r) is not None and "chunks_per_s" not in r]


def _reads(records: Iterable[Record]) -> list[dict[str, Any]]:
    """The measured records that are not limits."""
    return [r for r in _measured(records) if r.get("limit") is None]


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
    warm = [r for r in _reads(records) if r.get("cache", "warm") == "warm" and key in r]
    lines = {label: _best_by(rs, key) for label, rs in _series(warm).items()}
    return {label: points for label, points in lines.items() if len(points) > 1}


def _versus_parts(records: Sequence[Record]) -> dict[str, list[dict[str, Any]]]:
    """The parts where zarr-device and another reader read the same data (one layout: no chunk
    size or thread series), warm: their records of zarr-device and of the others (not
    zarr-device's own variants, such as zarr-device-direct)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in _reads(records):
        if (r.get("cache", "warm") == "warm" and r.get("loader") and "chunk_bytes" not in r
                and "threads" not in r):
            out.setdefault(_part(r), []).append(r)
    chosen = {}
    for part, rs in out.items():
        names = {reader_of(r) for r in rs}
        others = {n for n in names if not n.startswith(_OURS)}
        if _OURS in names and others:
            chosen[part] = [r for r in rs if reader_of(r) == _OURS or reader_of(r) in others]
    return chosen


def chart_names(records: Sequence[Record]) -> list[str]:
    """The charts plot_records draws of these records, by the suffix of their file names."""
    names = []
    if _lines_by(records, "chunk_bytes"):
        names.append("chunks")
    if _reads(records):
        names.append("loaders")
    if _versus_parts(records):
        names.append("versus")
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


GBPS_LABEL = "GB/s (10^9 bytes/s)"


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
    # Past ten lines the default colours repeat: a line style and marker of its own for each ten.
    styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D")]
    for index, (label, points) in enumerate(sorted(lines.items())):
        xs = sorted(points)
        values.update(xs)
        style, marker = styles[index // 10 % len(styles)]
        axes.plot(xs, [points[x] for x in xs], linestyle=style, marker=marker, label=label)
    axes.set_xscale("log", base=2)
    ticks = sorted(values)
    axes.set_xticks(ticks, [label_of(x) for x in ticks], rotation=30)
    axes.minorticks_off()
    axes.set_xlabel(axis_label)
    axes.set_ylabel(GBPS_LABEL + ", warm")
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


def _panel_title(part: str, several: bool) -> str:
    if not part:
        return ""
    what = PART_TITLES.get(part)
    return f"{what}\n({part})" if what else (part if several else "")


def _figure_legend(figure: Figure) -> None:
    """One legend for the figure's panels, under them: each name once."""
    seen: dict[str, Any] = {}
    for axes in figure.axes:
        for handle, label in zip(*axes.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    # As many columns as the figure's width holds at the longest name (about 0.075 in a letter).
    column = 0.6 + 0.075 * max((len(label) for label in seen), default=1)
    columns = max(1, min(len(seen), int(figure.get_figwidth() / column)))
    figure.legend(list(seen.values()), list(seen), loc="outside lower center", fontsize="small",
                  ncols=columns, frameon=False)


def _panels(figure: Figure, weights: Sequence[float]) -> list[Axes]:
    grid = figure.add_gridspec(1, len(weights), width_ratios=list(weights))
    return [figure.add_subplot(grid[0, i]) for i in range(len(weights))]


def _bar_labels(axes: Axes, xs: Sequence[float], values: Sequence[float | None], *, size: float,
                texts: Sequence[str] | None = None, rotation: float = 0) -> None:
    for i, (x, v) in enumerate(zip(xs, values)):
        if v:
            text = texts[i] if texts is not None else (f"{v:.1f}" if v >= 1 else f"{v:.2f}")
            # On a white ground: a limit's line may cross the label.
            axes.annotate(text, (x, v), xytext=(0, 2), textcoords="offset points", ha="center",
                          va="bottom", fontsize=size, rotation=rotation,
                          bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.8})


def plot_loaders(records: Sequence[Record], title: str, path: str) -> str | None:
    """Each reader's best GB/s as bars, a group per reader: a bar for each codec, warm and cold
    (cold hatched); where the records hold the limits measured in the same run, those as
    lines. A panel for each script (part) of the records. None where nothing was measured."""
    rows = _measured(records)
    reads = [r for r in rows if r.get("limit") is None]
    if not reads:
        return None
    parts = list(dict.fromkeys(_part(r) for r in reads))
    codecs = list(dict.fromkeys(r.get("codec") for r in reads))
    colors = {codec: f"C{i}" for i, codec in enumerate(codecs)}
    panels = []
    for part in parts:
        mine = [r for r in reads if _part(r) == part]
        groups = _series(mine, [f for f in SERIES_FIELDS if f not in ("codec", "part")])
        bars = sorted(dict.fromkeys((r.get("codec"), "cold" if r.get("cache") == "cold" else "warm")
                                    for r in mine),
                      key=lambda b: (codecs.index(b[0]), b[1] != "warm"))
        best: dict[tuple[str, Any, str], float] = {}
        for label, rs in groups.items():
            for r in rs:
                key = (label, r.get("codec"), "cold" if r.get("cache") == "cold" else "warm")
                best[key] = max(best.get(key, 0.0), gbps_of(r) or 0.0)
        limits = [r for r in rows if r.get("limit") is not None and _part(r) == part]
        panels.append((part, list(groups), bars, best, limits))
    weights = [len(labels) * len(bars) + 2.0 for _, labels, bars, _, _ in panels]
    figure = _figure(min(18.0, max(7.0, 0.3 * sum(weights) + 4.0)), 5.6)
    several = len(panels) > 1
    for axes, (part, labels, bars, best, limits) in zip(_panels(figure, weights), panels):
        width = 0.8 / len(bars)
        many = len(labels) * len(bars) > 12
        for k, (codec, cache) in enumerate(bars):
            xs = [i + (k - (len(bars) - 1) / 2) * width for i in range(len(labels))]
            values = [best.get((label, codec, cache)) for label in labels]
            name = ", ".join(n for n in (codec_label(codec) if codec is not None else "", cache) if n)
            axes.bar(xs, [v or 0.0 for v in values], width, color=colors[codec],
                     alpha=0.45 if cache == "cold" else 1.0, hatch="//" if cache == "cold" else None,
                     edgecolor=colors[codec], label=name)
            _bar_labels(axes, xs, values, size=6.5 if many else 8, rotation=90 if many else 0)
        # One line for each limit: for each codec where the script measured them per codec.
        shared = all(r.get("codec") is None for r in limits)
        lines = dict.fromkeys((None if shared else codec, cache) for codec, cache in bars)
        for codec, cache in lines:
            limit = limit_of(limits, codec, cache)
            if limit is None:
                continue
            which = f", {codec_label(codec)} run" if codec is not None else ""
            axes.axhline(limit, color="0.35" if codec is None else colors[codec],
                         linestyle=":" if cache == "cold" else "--", linewidth=1.2,
                         label=f"limit ({cache}{which}): {limit:.1f}")
        axes.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize="small")
        axes.set_ylabel(GBPS_LABEL + ", best")
        axes.set_ylim(0, axes.get_ylim()[1] * 1.08)
        axes.grid(True, axis="y", alpha=0.3)
        axes.set_title(_panel_title(part, several), fontsize="medium")
    _figure_legend(figure)
    figure.suptitle(title, fontsize="medium")
    return _save(figure, path)


def plot_versus(records: Sequence[Record], title: str, path: str) -> str | None:
    """zarr-device against the other readers of the same data, warm: a group of bars for each
    codec, each bar labelled with its GB/s and zarr-device's with its multiple of the best other;
    the limit measured in the same run as a line. A panel for each script (part) where both ran;
    None where none did."""
    chosen = _versus_parts(records)
    if not chosen:
        return None
    limits = [r for r in _measured(records) if r.get("limit") is not None]
    readers = list(dict.fromkeys(reader_of(r) for rs in chosen.values() for r in rs))
    readers.sort(key=lambda name: name != _OURS)
    # zarr-device in the first colour, the others each in one of their own across the panels.
    colors = {name: f"C{i}" for i, name in enumerate(readers)}
    panels = []
    for part, rs in chosen.items():
        codecs = list(dict.fromkeys(r.get("codec") for r in rs))
        names = [n for n in readers if any(reader_of(r) == n for r in rs)]
        best: dict[tuple[Any, str], float] = {}
        for r in rs:
            key = (r.get("codec"), reader_of(r))
            best[key] = max(best.get(key, 0.0), gbps_of(r) or 0.0)
        panels.append((part, codecs, names, best))
    weights = [len(codecs) * (len(names) + 1.0) for _, codecs, names, _ in panels]
    figure = _figure(min(16.0, max(7.0, 0.55 * sum(weights) + 3.0)), 5.0)
    several = len(panels) > 1
    for axes, (part, codecs, names, best) in zip(_panels(figure, weights), panels):
        width = 0.8 / len(names)
        for k, name in enumerate(names):
            xs = [i + (k - (len(names) - 1) / 2) * width for i in range(len(codecs))]
            values = [best.get((codec, name)) for codec in codecs]
            axes.bar(xs, [v or 0.0 for v in values], width, color=colors[name], label=name)
            texts = []
            for codec, v in zip(codecs, values):
                others = [x for (c, n), x in best.items() if c == codec and n != _OURS]
                text = f"{v:.1f}" if v and v >= 1 else f"{v or 0:.2f}"
                if name == _OURS and v and others:
                    text += f"\n{v / max(others):.1f}x"
                texts.append(text)
            _bar_labels(axes, xs, values, size=8, texts=texts)
        part_limits = [r for r in limits if _part(r) == part]
        shown = set()
        for codec in codecs:
            limit = limit_of(part_limits, codec, "warm")
            if limit is not None and round(limit, 1) not in shown:
                shown.add(round(limit, 1))
                axes.axhline(limit, color="0.35", linestyle="--", linewidth=1.2,
                             label=f"limit: {limit:.1f}")
        axes.set_xticks(range(len(codecs)), [codec_label(c) if c is not None else "" for c in codecs])
        axes.set_ylabel(GBPS_LABEL + ", warm, best")
        axes.set_ylim(0, axes.get_ylim()[1] * 1.12)
        axes.grid(True, axis="y", alpha=0.3)
        axes.set_title(_panel_title(part, several), fontsize="medium")
    _figure_legend(figure)
    figure.suptitle(title + "\nNx: zarr-device's GB/s over the best other reader's"
                    + ("; limit: the slower of page cache -> pinned and the pinned copy to the GPU"
                       if limits else ""), fontsize="medium")
    return _save(figure, path)


def plot_threads(records: Sequence[Record], title: str, path: str) -> str | None:
    """GB/s by thread count, a line per reader, warm reads; None unless some reader was
    measured with two thread counts or more."""
    return _plot_lines(records, "threads", str, "threads", title, path)


def plot_records(records: Sequence[Record], name: str, out_dir: str, *,
                 machine: Mapping[str, Any] | None = None, date: str | None = None) -> list[str]:
    """Every chart the records allow, as ``out_dir/NAME-SUFFIX.png`` for each suffix of CHARTS
    (``-chunks``, ``-loaders``, ``-versus``, ``-threads``), titled with the machine and date; the
    paths written."""
    draws: dict[str, Callable[[Sequence[Record], str, str], str | None]] = {
        "chunks": plot_by_chunk_size, "loaders": plot_loaders, "versus": plot_versus,
        "threads": plot_threads,
    }
    caches = {("cold" if r.get("cache") == "cold" else "warm") for r in _reads(records)}
    written = []
    for suffix, draw in draws.items():
        what = CHARTS[suffix]
        if suffix == "loaders":
            what += ", " + " and ".join(c for c in ("warm", "cold") if c in caches)
        title = title_of(f"{name}: {what}", machine, date)
        path = draw(records, title, os.path.join(out_dir, f"{name}-{suffix}.png"))
        if path is not None:
            written.append(path)
    return written
