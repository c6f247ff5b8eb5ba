"""The documentation site builds without a warning, and what it links to is there.

The site (mkdocs.yml, docs/) is built with ``mkdocs build --strict`` into a temporary folder, then
read as files: every page of the nav is an HTML file; every internal link, stylesheet,
script and image of every built page names a file of the site (and, for a link into a page, an
anchor that page has); the search index lists every page. The configuration page's tables are
generated from the engine's settings table as the site is built, so every setting must appear.
Then the pages are loaded in a headless Chromium from a loopback server, which checks what the
files alone cannot: the theme renders, and every request a page makes (stylesheets, scripts,
images, the search index) is answered.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote, urlsplit

import pytest

pytest.importorskip("mkdocs", reason="mkdocs is not installed (requirements-dev.txt lists it)")

import yaml  # noqa: E402 - installed with mkdocs

REPOSITORY = Path(__file__).resolve().parents[2]
CONFIG = REPOSITORY / "mkdocs.yml"


class _Links(HTMLParser):
    """The references (href, src) and the ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.references: list[tuple[str, str]] = []  # (tag, reference)
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("id", "name"):
            if values.get(name) and (name == "id" or tag == "a"):
                self.ids.add(str(values[name]))
        for name in ("href", "src"):
            if values.get(name) is not None:
                self.references.append((tag, str(values[name])))


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _nav_pages(nav: Any) -> Iterator[str]:
    """The Markdown files the nav lists, however deeply nested."""
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from _nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from _nav_pages(value)


def _html_name(markdown: str) -> str:
    # use_directory_urls is off (mkdocs.yml), so page.md is built as page.html.
    return markdown[: -len(".md")] + ".html"


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # the theme's notice, not a build warning
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG), "-d", str(folder)],
        cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=600,
    )
    # --strict turns every warning into a failed build; say which, rather than the exit code.
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert not warnings, "\n".join(warnings)
    return folder


def test_use_directory_urls_is_off(config: dict[str, Any]) -> None:
    # The checks below map page.md to page.html, and the built site is read from files.
    assert config.get("use_directory_urls") is False


def test_every_nav_page_is_built(site: Path, config: dict[str, Any]) -> None:
    pages = list(_nav_pages(config["nav"]))
    assert pages, "mkdocs.yml has no nav"
    missing = [p for p in pages if not (site / _html_name(p)).is_file()]
    assert not missing, f"pages of the nav not built: {missing}"


def test_every_docs_page_is_in_the_nav(config: dict[str, Any]) -> None:
    # A page left out of the nav is published but found by no one.
    pages = set(_nav_pages(config["nav"]))
    written = {p.name for p in (REPOSITORY / "docs").glob("*.md")}
    assert written <= pages, f"pages of docs/ missing from the nav: {sorted(written - pages)}"


def test_internal_links_and_images_resolve(site: Path) -> None:
    pages = {page: _parse(page) for page in site.rglob("*.html")}
    broken: list[str] = []
    for page, parsed in pages.items():
        for tag, reference in parsed.references:
            parts = urlsplit(reference)
            if parts.scheme or reference.startswith("//"):
                continue  # another site: not this test's to reach
            path = unquote(parts.path)
            if not path:
                target = page
            elif path.startswith("/"):  # from the site's root, as 404.html links (served anywhere)
                target = (site / path.lstrip("/")).resolve()
            else:
                target = (page.parent / path).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(site)}: <{tag}> {reference!r}"
            if not target.is_file() or not target.resolve().is_relative_to(site.resolve()):
                broken.append(f"{where} names no file of the site")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if fragment not in ids:
                    broken.append(f"{where}: {target.relative_to(site)} has no id {fragment!r}")
    assert not broken, "\n".join(broken)


def test_images_are_the_sites_own(site: Path) -> None:
    # Images resolve by the check above only when they are the site's own files: one fetched
    # from another site would show nothing offline and is not checked there.
    external = [
        f"{page.relative_to(site)}: {reference}"
        for page in site.rglob("*.html")
        for tag, reference in _parse(page).references
        if tag == "img" and (urlsplit(reference).scheme or reference.startswith("//"))
    ]
    assert not external, "\n".join(external)


def test_search_index_lists_every_page(site: Path, config: dict[str, Any]) -> None:
    index_file = site / "search" / "search_index.json"
    assert index_file.is_file(), "the search plugin wrote no index"
    index = json.loads(index_file.read_text(encoding="utf-8"))
    locations = {entry["location"].split("#")[0] or "index.html" for entry in index["docs"]}
    missing = [p for p in _nav_pages(config["nav"]) if _html_name(p) not in locations]
    assert not missing, f"pages missing from the search index: {missing}"


def test_configuration_page_lists_every_setting(site: Path) -> None:
    import zarr_device._core as core

    text = (site / "configuration.html").read_text(encoding="utf-8")
    assert "settings-table" not in text and "environment-table" not in text, "a marker was left"
    for row in core.settings_table():
        assert row["variable"] in text and f'id="{row["name"]}"' in text, row["name"]
    for row in core.environment_variables():
        assert row["variable"] in text, row["variable"]


def test_readme_links_resolve() -> None:
    # The README is read on the repository's page, where its links name files of the repository
    # (docs/*.md, BENCHMARKS.md), not of the built site.
    readme = REPOSITORY / "README.md"
    links = re.findall(r"\]\(([^)\s]+)\)", readme.read_text(encoding="utf-8"))
    assert links, "the README links to no page"
    broken = [
        link
        for link in links
        if not urlsplit(link).scheme
        and not (REPOSITORY / unquote(urlsplit(link).path)).is_file()
    ]
    assert not broken, f"README.md links to files that do not exist: {broken}"


def _chromium() -> str | None:
    """A headless Chromium of this machine (scripts/setup.sh installs chromium-headless-shell
    where the distribution has it)."""
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class _Served:
    """The built site served on a loopback port, recording each request's path and status."""

    def __init__(self, root: Path) -> None:
        import functools
        import http.server
        import threading

        self.requests: list[tuple[str, int]] = []
        served = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                served.requests.append((urlsplit(self.path).path, int(code)))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_pages_load_in_a_browser(site: Path, config: dict[str, Any]) -> None:
    # What the HTML parse above cannot see: the pages as a browser loads them, with the theme's
    # scripts run, their stylesheets, images and the search index fetched (the search worker
    # asks for search/search_index.json as a page loads).
    browser = _chromium()
    if browser is None:
        pytest.skip("no headless Chromium (apt-get install chromium-headless-shell)")
    served = _Served(site)
    try:
        for page in _nav_pages(config["nav"]):
            html = _html_name(page)
            done = subprocess.run(
                [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--virtual-time-budget=5000", "--dump-dom", served.url + html],
                capture_output=True, text=True, timeout=120,
            )
            assert done.returncode == 0, f"{html}: {browser} failed: {done.stderr[-2000:]}"
            # The rendered DOM holds the page's own text inside the theme's content area.
            assert 'class="md-content' in done.stdout, f"{html}: the theme did not render"
    finally:
        served.close()
    failed = sorted({(path, code) for path, code in served.requests if code >= 400})
    assert not failed, f"requests that failed while the pages loaded: {failed}"
    asked = {path for path, _ in served.requests}
    assert "/search/search_index.json" in asked, "no page loaded the search index"
    images = {
        "/" + str((site / html).parent.joinpath(unquote(urlsplit(ref).path)).resolve()
                  .relative_to(site.resolve()))
        for html in (_html_name(p) for p in _nav_pages(config["nav"]))
        for tag, ref in _parse(site / html).references
        if tag == "img" and not urlsplit(ref).scheme
    }
    assert images <= asked, f"images the pages show that the browser did not load: {images - asked}"
