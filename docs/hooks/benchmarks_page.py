"""Publishes the repository's BENCHMARKS.md as the page benchmarks-record.md.

The record lives at the repository's root, beside the code whose figures it holds, and mkdocs
reads pages from docs/ only. Generating the page from the file on every build, rather than
keeping a copy in docs/, means the site always shows the record as committed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

RECORD = Path(__file__).resolve().parents[2] / "BENCHMARKS.md"
PAGE = "benchmarks-record.md"


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    # The record's charts are in docs/images/ (a path from the repository's root, where the file
    # lives); the page is at the site's root, beside images/.
    content = RECORD.read_text(encoding="utf-8").replace("](docs/images/", "](images/")
    files.append(File.generated(config, PAGE, content=content))
    return files
