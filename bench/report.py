"""``python -m bench report [--check]``: the generated parts of BENCHMARKS.md, from the suites'
results kept in ``bench/results/`` (SUITE.json, as ``python -m bench run`` writes them).

BENCHMARKS.md holds the text people write (what an area measures, what is not met yet, the
decisions) and, between two markers, what this command writes:

    <!-- results: SUITE -->
    (a table for each script of the suite and each setting it ran with, the machine, the date
    and the command, and the charts)
    <!-- end results -->

One command brings every table and chart up to the results committed beside them; ``--check``
(run by the tests) fails when BENCHMARKS.md says something else than its results. A new run is
committed by copying its SUITE.json into ``bench/results/`` and running this again; the history
of the figures is the history of those files.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zarr_device.basics.sizes import format_bytes
from zarr_device.tools.bench_plots import CHARTS as CHART_KINDS
from zarr_device.tools.bench_plots import (LIMIT_NOTE, PART_TITLES, arranged, chart_names, codec_label, gbps_of,
                                           limit_of, reader_of)

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")
DOCUMENT = os.path.join(ROOT, "BENCHMARKS.md")
CHARTS = os.path.join(ROOT, "docs", "images", "bench")

_BLOCK = re.compile(r"(<!-- results: (?P<suite>[\w-]+) -->\n)(?P<body>.*?)(<!-- end results -->)", re.S)

Record = Mapping[str, Any]

# What names a row (the reader) and what the columns are made of; every other field a record
# carries with a text value (data type, writer) or a size tells one table from another. A codec
# does too where the columns are chunk sizes or thread counts; where they are warm and cold, each
# codec has columns of its own in one table.
_ROW = ("loader", "case")
# (A note and a layout's name describe one record: its chunk size is a column, its series a setting.)
_NOT_SETTINGS = {*_ROW, "gbps", "warm_gbps", "cold_gbps", "cache", "chunk_bytes", "threads", "part", "limit", "note",
                 "layout", "latency_ms", "chunks_per_s"}


def figure_of(record: Record) -> float | None:
    """What a table shows of a record: its chunks per second where it counts chunks (reads of
    tiny chunks, where GB/s says nothing), else its GB/s; None where it has no finite, positive
    one."""
    if "chunks_per_s" in record:
        return gbps_of({"gbps": record["chunks_per_s"]})
    return gbps_of(record)


def _unit_of(records: Sequence[Record]) -> str:
    return "chunks/s" if any("chunks_per_s" in r for r in records) else "GB/s"


def _formatted(value: float, unit: str) -> str:
    return f"{value:,.0f}" if unit == "chunks/s" else f"{value:.2f}"


@dataclass(frozen=True)
class Table:
    """The records of one script run with one setting, as rows of readers (or of the limits
    measured in the same run, where ``limits``)."""

    part: str
    setting: tuple[tuple[str, str], ...]
    records: tuple[Record, ...]
    limits: bool = False


def _setting_of(record: Record) -> tuple[tuple[str, str], ...]:
    by_cache = "chunk_bytes" not in record and "threads" not in record
    setting = []
    for key, value in record.items():
        if key in _NOT_SETTINGS or value is None or isinstance(value, bool) or (by_cache and key == "codec"):
            continue
        if isinstance(value, str):
            setting.append((key, value))
        elif key.endswith("_bytes") and isinstance(value, int):
            setting.append((key, format_bytes(value)))
    return tuple(sorted(setting))


def tables_of(records: Sequence[Record]) -> list[Table]:
    """The records with a GB/s figure (arranged: see bench_plots.arranged) grouped by script and
    setting, in the order they came, each script's limits after its readers; runs that name
    their thread count (a scaling series) apart from those that do not."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...], bool, bool], list[Record]] = {}
    for record in arranged(records):
        if figure_of(record) is None:
            continue
        # Thread counts are columns of their own table, but rows where the columns are latencies.
        scaling = "threads" in record and "latency_ms" not in record
        key = (str(record.get("part", "")), _setting_of(record), scaling, "limit" in record)
        groups.setdefault(key, []).append(record)
    parts = list(dict.fromkeys(part for part, _, _, _ in groups))
    keys = sorted(groups, key=lambda k: (parts.index(k[0]), k[3]))  # a stable sort: else as they came
    return [Table(k[0], k[1], tuple(groups[k]), k[3]) for k in keys]


def _columns(table: Table) -> tuple[str, list[Any], Callable[[Record], Any]]:
    """The heading, the values and the key of the table's columns: chunk sizes, else thread
    counts, else codec and cache (warm and cold)."""
    records = table.records
    if any("latency_ms" in r for r in records):
        def by_latency(r: Record) -> Any:
            return r.get("latency_ms")
        return "latency", sorted({by_latency(r) for r in records}, key=lambda v: v or 0), by_latency
    if any("chunk_bytes" in r for r in records):
        def by_chunk(r: Record) -> Any:
            return (r.get("chunk_bytes"), r.get("cache", "warm"))
        values = sorted({by_chunk(r) for r in records}, key=lambda v: (v[0] or 0, v[1] != "warm"))
        return "chunk", values, by_chunk
    if any("threads" in r for r in records):
        def by_threads(r: Record) -> Any:
            return r.get("threads")
        return "threads", sorted({by_threads(r) for r in records}, key=lambda v: v or 0), by_threads

    codecs = list(dict.fromkeys(r.get("codec") for r in records))

    def by_cache(r: Record) -> Any:
        return (r.get("codec"), r.get("cache", "warm"))
    return "cache", sorted({by_cache(r) for r in records}, key=lambda v: (codecs.index(v[0]), v[1] != "warm")), by_cache


def _column_title(kind: str, value: Any, caches: set[str], codecs: set[Any]) -> str:
    if kind == "chunk":
        size, cache = value
        name = format_bytes(size) if isinstance(size, int) else "-"
        return f"{name} {cache}" if len(caches) > 1 else name
    if kind == "threads":
        return f"{value} threads" if value != 1 else "1 thread"
    if kind == "latency":
        return f"{value:g} ms added" if value else "no latency added"
    codec, cache = value
    words = [codec_label(codec)] if len(codecs) > 1 and codec is not None else []
    if len(caches) > 1 or not words:
        words.append(str(cache))
    return ", ".join(words)


def _ratio_row(label: str, values: Sequence[Any], ratio: Callable[[Any], str]) -> str:
    return f"| {label} | " + " | ".join(ratio(v) for v in values) + " |"


def render_table(table: Table, limits: Sequence[Record] = ()) -> str:
    """A Markdown table: a row per reader, its best GB/s in each column; where zarr-device and
    others ran in the same columns, the ratio of zarr-device's best to the best other's; where
    ``limits`` (arranged records of the limits measured in the same run) give the column's
    limit, the best reader's share of it."""
    kind, values, key = _columns(table)
    caches = {str(r.get("cache", "warm")) for r in table.records}
    codecs = {r.get("codec") for r in table.records}
    unit = _unit_of(table.records)
    rows: dict[str, dict[Any, float]] = {}
    for record in table.records:
        figure = figure_of(record)
        assert figure is not None
        label = reader_of(record)
        if kind == "latency" and "threads" in record:
            label += f", {record['threads']} thread{'s' if record['threads'] != 1 else ''}"
        cells = rows.setdefault(label, {})
        cells[key(record)] = max(cells.get(key(record), 0.0), figure)
    setting = [f"{k.replace('_', ' ')} {v}" for k, v in table.setting]
    if kind == "cache" and len(codecs) == 1 and None not in codecs:
        setting.insert(0, f"codec {next(iter(codecs))}")
    if table.limits:
        what = ": limits measured in the same run"
    else:
        what = f": {PART_TITLES[table.part]}" if table.part in PART_TITLES else ""
    lines = [f"`{table.part}`{what}" + "".join(f", {s}" for s in setting) + f" ({unit})", ""]
    titles = [_column_title(kind, v, caches, codecs) for v in values]
    heading = "limit" if table.limits else "reader" if all(r.get("loader") for r in table.records) else "case"
    lines.append(f"| {heading} | " + " | ".join(titles) + " |")
    lines.append("|---|" + "---|" * len(titles))
    for label, cells in rows.items():
        lines.append(f"| {label} | " + " | ".join(
            _formatted(cells[v], unit) if v in cells else "" for v in values) + " |")
    if table.limits:
        return "\n".join(lines)
    ours = {label for label in rows if label.startswith("zarr-device")}

    def best(v: Any, labels: Callable[[str], bool]) -> float | None:
        return max((cells[v] for label, cells in rows.items() if labels(label) and v in cells), default=None)

    if ours and len(ours) < len(rows):
        def versus(v: Any) -> str:
            best_ours, best_other = best(v, lambda label: label in ours), best(v, lambda label: label not in ours)
            return f"{best_ours / best_other:.2f}x" if best_ours and best_other else ""
        lines.append(_ratio_row("zarr-device / best other", values, versus))
    if kind == "cache" and limits:
        def share(v: Any) -> str:
            limit = limit_of(limits, v[0], str(v[1]))
            top = best(v, lambda label: label in ours) if ours else best(v, lambda label: True)
            return f"{top / limit:.1%}" if top and limit else ""
        if any(share(v) for v in values):
            lines.append(_ratio_row("zarr-device / limit" if ours else "best / limit", values, share))
    return "\n".join(lines)


def machine_line(document: Mapping[str, Any]) -> str:
    """The machine, the date and the command of a suite's run, in one sentence."""
    machine = document.get("machine") or {}
    parts = []
    if machine.get("gpu"):
        parts.append(str(machine["gpu"]))
    cpu = machine.get("cpu")
    cores = machine.get("cores")
    if cpu or cores:
        parts.append(f"{cores} cores of {cpu}" if cpu and cores else str(cpu or f"{cores} cores"))
    memory = machine.get("memory_bytes")
    if isinstance(memory, int):
        parts.append(format_bytes(memory) + " of memory")
    date = str(document.get("date") or "")
    try:
        date = datetime.datetime.fromisoformat(date).date().isoformat()
    except ValueError:
        pass
    command = document.get("command") or "not recorded"
    quick = " (`--quick`: small sizes)" if document.get("quick") else ""
    return f"Machine: {', '.join(parts) or 'not recorded'}; {date or 'no date'}; `{command}`{quick}."


def render_suite(document: Mapping[str, Any], charts: Sequence[str]) -> str:
    """What stands between a suite's markers: its tables, its machine line, its charts (paths
    relative to the repository's root)."""
    name = str(document.get("suite", "?"))
    if document.get("skipped"):
        return f"*{name}: not run ({document['skipped']}).*\n\n{machine_line(document)}\n"
    tables = tables_of(document.get("results") or [])
    if not tables:
        return f"*{name}: no results.*\n\n{machine_line(document)}\n"
    out = []
    shares = False
    for table in tables:
        # The limits measured by the same script, with the table's setting or a part of it.
        limits = [r for other in tables if other.limits and other.part == table.part
                  and set(other.setting) <= set(table.setting) for r in other.records]
        text = render_table(table, limits)
        shares = shares or "/ limit |" in text
        out.append(text + "\n")
    if shares:
        out.append(LIMIT_NOTE[0].upper() + LIMIT_NOTE[1:] + ".\n")
    out.append(machine_line(document) + "\n")
    for chart in charts:
        kind = os.path.splitext(os.path.basename(chart))[0].rsplit("-", 1)[-1]
        out.append(f"![{name}: {CHART_KINDS.get(kind, kind)}]({chart})\n")
    return "\n".join(out)


def _load(suite: str, results: str) -> dict[str, Any] | None:
    path = os.path.join(results, f"{suite}.json")
    try:
        with open(path) as f:
            document: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return None
    return document


def regenerate(text: str, results: str, *, draw: bool, charts_dir: str = CHARTS,
               root: str = ROOT) -> tuple[str, list[str]]:
    """``text`` with each results block rewritten from ``results``/SUITE.json; the problems found
    (a block whose results are missing). Charts are drawn into ``charts_dir`` when ``draw``; their
    names are the same either way, so a check without drawing compares the same text."""
    problems: list[str] = []

    def block(match: re.Match[str]) -> str:
        suite = match.group("suite")
        document = _load(suite, results)
        if document is None:
            problems.append(f"results: {suite}: no {suite}.json in {results}")
            return match.group(0)
        charts: list[str] = []
        if not document.get("skipped"):
            from zarr_device.tools.bench_plots import plot_records

            names = chart_names(document.get("results") or [])
            if draw:
                plot_records(document.get("results") or [], suite, charts_dir,
                             machine=document.get("machine"), date=document.get("date"))
            charts = [os.path.relpath(os.path.join(charts_dir, f"{suite}-{n}.png"), root)
                      for n in names]
        return match.group(1) + "\n" + render_suite(document, charts) + "\n" + match.group(4)

    return _BLOCK.sub(block, text), problems


def report(*, check: bool, document: str = DOCUMENT, results: str = RESULTS,
           charts_dir: str = CHARTS, log: Callable[[str], Any] = print) -> int:
    """Rewrites ``document``'s results blocks (or, with ``check``, says whether they are what the
    results make); the exit status."""
    with open(document, encoding="utf-8") as f:
        text = f.read()
    blocks = len(_BLOCK.findall(text))
    if check:
        made, problems = regenerate(text, results, draw=False, charts_dir=charts_dir)
    else:
        from zarr_device.tools.bench_plots import require_matplotlib

        require_matplotlib()
        made, problems = regenerate(text, results, draw=True, charts_dir=charts_dir)
    for problem in problems:
        log(f"{document}: {problem}")
    if check:
        if made != text:
            log(f"{document} is not what {results} make: run `python -m bench report`")
            return 1
        log(f"{document}: {blocks} results blocks, as {results} make them")
        return 1 if problems else 0
    if made != text:
        with open(document, "w", encoding="utf-8") as f:
            f.write(made)
    log(f"{document}: {blocks} results blocks written from {results}")
    return 1 if problems else 0
