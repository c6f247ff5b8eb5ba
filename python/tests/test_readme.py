"""The Python snippets of README.md and of every docs/*.md page, run as a reader would paste
them.

Every ```python block of README.md and of each page of docs/ runs. The blocks of one section (the
text under one ``#`` or ``##`` heading of one file) run in their order in one shared namespace, in
a fresh temporary working directory: a section's snippets must create what they open. Each
section is one test, named after its file and its heading (``README.md:onto-a-gpu``,
``docs/zarr-plugin.md:zarr-python-plug-in``); a failure points at the file's own line.

Conventions, the same in every file:

- ``<!-- gpu -->`` on the line just before a ```python fence (an HTML comment, invisible once
  rendered) marks a block that needs a CUDA GPU. It runs where ``zarr_device.cuda_device_count()
  > 0``; elsewhere it is skipped with a reason. A section holding such a block also carries the
  ``gpu`` marker, so ``pytest -m gpu`` (scripts/test-gpu.sh) runs it.
- ``<!-- s3 -->`` the same way marks a block that talks to S3: its section runs against the
  tests' S3 server (s3_server.py; skipped without it), with the endpoint, region and credentials
  in the environment as S3 clients read them (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...).
  The server's bucket is named ``data``.
- ``<!-- script -->`` marks a block shown as a whole script (a ``__main__`` guard, its own
  imports): it runs as ``python script.py`` in the section's directory, in a process of its own,
  as a reader would run it (multiprocessing's spawned workers import it, which ``exec`` inside
  pytest never shows).
- Sections that talk to S3 run twice, as a reader who runs them again would: what they create
  must be created again without an error.
- A block that imports torch, cupy, jax, xarray or dask, or reads with ``like="torch"``, ``"cupy"`` or
  ``"jax"``, is skipped with a reason where that package cannot be imported.

A skipped block skips the rest of its section too (later blocks may build on it); the blocks
before it have run by then, and their failures fail the test.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# JAX would otherwise take most of the GPU's memory the first time it is used (see test_gpu.py).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import pytest

import zarr_device as zd

REPOSITORY = Path(__file__).resolve().parents[2]
README = REPOSITORY / "README.md"
# The README, then the site's pages (docs/*.md; docs/hooks holds no pages).
DOCUMENTS = [README, *sorted((REPOSITORY / "docs").glob("*.md"))]
GPU_MARKER = "<!-- gpu -->"
S3_MARKER = "<!-- s3 -->"
SCRIPT_MARKER = "<!-- script -->"
OPTIONAL_PACKAGES = ("torch", "cupy", "jax", "xarray", "dask")
_IMPORT = re.compile(r"^\s*(?:import|from)\s+(" + "|".join(OPTIONAL_PACKAGES) + r")\b", re.M)
_LIKE = re.compile(r"""\blike\s*=\s*["'](""" + "|".join(OPTIONAL_PACKAGES) + r""")["']""")


@dataclass
class Block:
    line: int  # the file's line of the block's first line of code (1-based)
    code: str
    gpu: bool
    s3: bool = False
    script: bool = False

    def packages(self) -> list[str]:
        found = set(_IMPORT.findall(self.code)) | set(_LIKE.findall(self.code))
        return [p for p in OPTIONAL_PACKAGES if p in found]


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    path: Path = README  # the Markdown file the section is in

    @property
    def where(self) -> str:
        """The file as the tests name it: README.md, docs/cli.md."""
        return self.path.relative_to(REPOSITORY).as_posix()

    @property
    def gpu(self) -> bool:
        return any(b.gpu for b in self.blocks)


def readme_sections(text: str, path: Path = README) -> list[Section]:
    """The sections of a Markdown text (from the file ``path``) that hold ```python blocks, in
    order."""
    sections: list[Section] = []
    title = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("```"):
            info = stripped[3:].strip().lower()
            start = i + 1
            i = start
            while i < len(lines) and lines[i].strip() != "```":
                i += 1
            if info == "python":
                previous = next((l.strip() for l in reversed(lines[:start - 1]) if l.strip()), "")
                if not sections or sections[-1].title != title:
                    sections.append(Section(title, path=path))
                code = "\n".join(lines[start:i]) + "\n"
                sections[-1].blocks.append(
                    Block(start + 1, code, previous == GPU_MARKER, previous == S3_MARKER,
                          previous == SCRIPT_MARKER)
                )
        elif re.match(r"#{1,2} ", lines[i]):
            title = lines[i].lstrip("#").strip()
        i += 1
    return sections


SECTIONS = [
    section
    for document in DOCUMENTS
    for section in readme_sections(document.read_text(encoding="utf-8"), document)
]


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "top"


def _skip_reason(block: Block) -> str | None:
    if block.gpu and zd.cuda_device_count() == 0:
        return "needs a CUDA GPU (marked <!-- gpu -->); zarr_device sees none"
    for package in block.packages():
        try:
            importlib.import_module(package)
        except ImportError as e:
            return f"needs {package}, which cannot be imported here ({e})"
    return None


def test_readme_has_python_snippets() -> None:
    found = {s.path for s in SECTIONS}
    assert README in found, f"no ```python blocks found in {README}"
    assert len(found) > 1, "no ```python blocks found in docs/*.md"


def test_section_ids_are_unique() -> None:
    # Two sections of one file with one heading would share a test id and hide each other.
    ids = [_test_id(s) for s in SECTIONS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def _test_id(section: Section) -> str:
    return f"{section.where}:{_slug(section.title)}"


@pytest.mark.parametrize(
    "section",
    [
        pytest.param(s, id=_test_id(s), marks=[pytest.mark.gpu] if s.gpu else [])
        for s in SECTIONS
    ],
)
def test_readme_section(
    section: Section, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.chdir(tmp_path)
    if any(b.s3 for b in section.blocks):
        server = request.getfixturevalue("s3_server")
        if not server.running:
            server.start()
        for name, value in {
            "AWS_ENDPOINT_URL": server.endpoint,
            "AWS_ACCESS_KEY_ID": server.access_key,
            "AWS_SECRET_ACCESS_KEY": server.secret_key,
            "AWS_REGION": server.region,
            "AWS_ALLOW_HTTP": "true",  # the test server speaks plain HTTP on loopback
        }.items():
            monkeypatch.setenv(name, value)
    for _ in range(2 if any(b.s3 for b in section.blocks) else 1):
        _run_section(section, tmp_path)


def _run_section(section: Section, folder: Path) -> None:
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    for n, block in enumerate(section.blocks):
        reason = _skip_reason(block)
        if reason is not None:
            pytest.skip(
                f"{section.where}:{block.line} ({section.title!r}, block {n + 1} of "
                f"{len(section.blocks)}, {n} run before it) {reason}"
            )
        # Padded so that tracebacks give the file's line numbers.
        source = "\n" * (block.line - 1) + block.code
        if block.script:
            script = folder / f"{section.path.stem}_{block.line}.py"
            script.write_text(source, encoding="utf-8")
            done = subprocess.run([sys.executable, str(script)], cwd=folder, capture_output=True,
                                  text=True, timeout=600)
            assert done.returncode == 0, f"{section.where}:{block.line} as a script: {done.stderr[-4000:]}"
            continue
        exec(compile(source, str(section.path), "exec"), namespace)  # noqa: S102 - the file's own code
