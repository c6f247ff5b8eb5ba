"""Writes the settings into docs/configuration.md as the site is built.

The engine's table (cpp/src/basics/settings.cpp, read through ``zarr_device._core``) is the one
home of every setting's name, environment variable, default, valid values and documentation.
The page is generated from it on every build, in place of its two markers, so that it cannot
disagree with the package it documents; a build whose page lacks a marker fails rather than
publishing a page without its tables.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# The package is imported from the source tree (the compiled module lies beside it), as the
# API reference's mkdocstrings handler reads it.
_PYTHON = Path(__file__).resolve().parents[2] / "python"
if str(_PYTHON) not in sys.path:
    sys.path.insert(0, str(_PYTHON))

PAGE = "configuration.md"
SETTINGS_MARKER = "<!-- settings-table:"
ENVIRONMENT_MARKER = "<!-- environment-table:"


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table: a pipe would end the cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _values(row: dict[str, Any]) -> str:
    if row["choices"]:
        return ", ".join(f'`"{c}"`' for c in row["choices"])
    from zarr_device.basics.sizes import format_bytes

    low, high = row["minimum"], row["maximum"]
    if row["kind"] == "size":  # written as the settings take them: 2MiB, not 2097152
        low, high = format_bytes(low), format_bytes(high)
        text = f"{low} to {high}" if row["maximum"] < 2**63 else f"{low} or more"
    else:
        text = f"{low} to {high}"
    if row["zero_is_automatic"]:
        text = f"0 (automatic), or {text}"
    return text


def settings_markdown() -> str:
    import zarr_device._core as core

    rows = core.settings_table()
    lines = [
        "| setting | environment variable | default | values |",
        "|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| [`{row['name']}`](#{row['name']}) | `{row['variable']}` "
            f"| `{row['default_text']}` | {_cell(_values(row))} |"
        )
    for row in rows:
        lines += ["", f"### {row['name']}", "", row["doc"]]
    return "\n".join(lines)


def environment_markdown() -> str:
    import zarr_device._core as core

    lines = ["| variable | what it does |", "|---|---|"]
    for row in core.environment_variables():
        lines.append(f"| `{row['variable']}` | {_cell(row['doc'])} |")
    return "\n".join(lines)


def _replace_marker(markdown: str, marker: str, generated: str) -> str:
    start = markdown.find(marker)
    if start < 0:
        raise ValueError(f"docs/{PAGE} lacks its marker {marker!r}")
    end = markdown.index("-->", start) + len("-->")
    return markdown[:start] + generated + markdown[end:]


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    markdown = _replace_marker(markdown, SETTINGS_MARKER, settings_markdown())
    return _replace_marker(markdown, ENVIRONMENT_MARKER, environment_markdown())
