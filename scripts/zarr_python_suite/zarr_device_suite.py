"""A pytest plug-in that runs zarr-python's own test suite with the zarr-device plug-in on
(scripts/zarr-python-suite.sh loads it with ``-p zarr_device_suite``).

* At start, ``zarr_device.enable(like="numpy")`` (or on the device and framework that
  ``ZARR_DEVICE_SUITE_DEVICE`` and ``ZARR_DEVICE_SUITE_LIKE`` name) sets zarr-python's config;
  the values it set are also written into the config's defaults, which ``zarr.config.reset()``
  (zarr-python's fixture runs it before and after every test) falls back to, and exported as
  ``ZARR_*`` variables for the processes tests start: every array any test opens gets the
  DevicePipeline.
* Every engine read and write, and every fall back to zarr-python's codecs, is counted, and so is
  each test that starts (its fixtures set up) with the pipeline in force; the summary says how
  many arrays the engine served and how many fell back (and why), and the run fails when a test
  started without the pipeline or the engine served nothing.
* The tests named in the expected-failures file (``ZARR_DEVICE_SUITE_EXPECTED``, one
  ``node id  # reason`` a line) are marked ``xfail(strict=True)``: they must fail (a test that
  passes again must leave the list), and any other failure fails the run. A reason that starts
  with ``skip:`` skips the test instead: for tests that cannot end (a pool waiting on workers
  that die at import) while this package is installed.
* ``ZARR_DEVICE_SUITE_BASELINE=zarr-gpu`` runs the suite without the plug-in, under zarr-python's
  own GPU mode (the buffers ``zarr.config.enable_gpu()`` names, held the same way): what
  zarr-python's tests do with GPU buffers before the plug-in changes anything, to compare a run
  with the plug-in on CuPy buffers against (tests written for host buffers fail in both).
"""

from __future__ import annotations

import os
import re
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_PIPELINE_CLASS = "zarr_device.zarr_plugin.pipeline.DevicePipeline"


class _Counts:
    """Engine calls and fall backs, and the arrays (pipelines) behind them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.pipelines = 0
        self.engine_arrays = 0
        self.fallback_arrays = 0
        self.reasons: Counter[str] = Counter()
        self.tests_in_force = 0
        self.tests_without: list[str] = []
        self.tests_own_pipeline: list[str] = []

    def call(self, kind: str, pipeline: Any, served: bool) -> None:
        with self.lock:
            self.calls[f"{kind} {'engine' if served else 'fallback'}"] += 1
            flag = "_suite_engine" if served else "_suite_fallback"
            if not getattr(pipeline, flag, False):
                setattr(pipeline, flag, True)
                if served:
                    self.engine_arrays += 1
                else:
                    self.fallback_arrays += 1

    def fallback(self, reason: str) -> None:
        # Reasons name data types, arrays and shapes; grouped without them.
        group = re.sub(r"data type \S+", "data type ...", reason)
        group = re.sub(r"'[^']*' in \S+ \(shape [^)]*\)", "...", group)
        with self.lock:
            self.reasons[group] += 1


_counts = _Counts()


def _count(kind: str, method: Callable[..., bool]) -> Callable[..., bool]:
    def counted(self: Any, *args: Any, **kwargs: Any) -> bool:
        served = method(self, *args, **kwargs)
        _counts.call(kind, self, served)
        return served

    return counted


def _install_counters() -> None:
    from zarr_device.zarr_plugin.pipeline import DevicePipeline

    init = DevicePipeline.__init__
    fall_back = DevicePipeline._fall_back  # noqa: SLF001

    def counted_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        with _counts.lock:
            _counts.pipelines += 1

    def counted_fall_back(self: Any, reason: str, batch: Any) -> bool:
        _counts.fallback(reason)
        return fall_back(self, reason, batch)

    def counted_box(kind: str, method: Any) -> Any:
        def counted(self: Any, *args: Any, **kwargs: Any) -> bool:
            # A box declined goes on to the batch path, which counts it (engine or fallback).
            served = bool(method(self, *args, **kwargs))
            if served:
                _counts.call(f"{kind} box", self, True)
            return served

        return counted

    DevicePipeline.__init__ = counted_init  # type: ignore[method-assign]
    DevicePipeline._fall_back = counted_fall_back  # type: ignore[method-assign]  # noqa: SLF001
    DevicePipeline._read_engine = _count("read", DevicePipeline._read_engine)  # type: ignore[method-assign]  # noqa: SLF001
    DevicePipeline._write_engine = _count("write", DevicePipeline._write_engine)  # type: ignore[method-assign]  # noqa: SLF001
    DevicePipeline.read_box = counted_box("read", DevicePipeline.read_box)  # type: ignore[method-assign]
    DevicePipeline.write_box = counted_box("write", DevicePipeline.write_box)  # type: ignore[method-assign]


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": 1} as {"a": {"b": 1}} (the shape of zarr-python's config defaults)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, last = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def _baseline() -> bool:
    mode = os.environ.get("ZARR_DEVICE_SUITE_BASELINE", "")
    if mode not in ("", "zarr-gpu"):
        raise pytest.UsageError(f"ZARR_DEVICE_SUITE_BASELINE={mode!r}: 'zarr-gpu' or unset")
    return mode == "zarr-gpu"


def _enable_for_the_session() -> dict[str, Any]:
    import zarr
    from donfig.config_obj import update as donfig_update  # type: ignore[import-untyped]

    import zarr_device
    from zarr_device.zarr_plugin.enable import _CONFIG_KEYS  # the keys enable() sets

    if _baseline():
        chosen: dict[str, Any] = {"buffer": "zarr.buffer.gpu.Buffer", "ndbuffer": "zarr.buffer.gpu.NDBuffer"}
    else:
        # ZARR_DEVICE_SUITE_DEVICE / _LIKE: the device and framework the suite runs on (the CPU
        # and NumPy unless told; "cuda:0" and "cupy" on a GPU machine).
        zarr_device.enable(os.environ.get("ZARR_DEVICE_SUITE_DEVICE", "cpu"),
                           like=os.environ.get("ZARR_DEVICE_SUITE_LIKE", "numpy"))
        chosen = {key: zarr.config.get(key) for key in _CONFIG_KEYS}
    # reset() is clear() + refresh(): zarr-python's defaults (config.defaults[0], which some tests
    # read) again, then the environment. Both carry the plug-in's settings from here on.
    donfig_update(zarr.config.defaults[0], _nested(chosen), priority="new")
    for key, value in chosen.items():
        os.environ["ZARR_" + key.upper().replace(".", "__")] = str(value)
    zarr.config.reset()
    return chosen


def _expected_failures() -> dict[str, str]:
    path = os.environ.get("ZARR_DEVICE_SUITE_EXPECTED")
    if not path:
        return {}
    expected: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        node, _, reason = line.partition("#")
        node = node.strip()
        if node:
            expected[node] = reason.strip() or "expected difference"
    return expected


_chosen: dict[str, Any] = {}
_expected: dict[str, str] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    # Before zarr-python's conftests are imported: some list the registered data types at import
    # (enable() registers zarr_device's), so the run does not depend on which paths it was given.
    _install_counters()
    _chosen.update(_enable_for_the_session())
    _expected.update(_expected_failures())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", "ignore::zarr_device.zarr_plugin.pipeline.FallbackWarning")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seen = set()
    for item in items:
        reason = _expected.get(item.nodeid)
        if reason is not None:
            seen.add(item.nodeid)
            if reason.startswith("skip:"):  # a test that cannot end with the package installed
                item.add_marker(pytest.mark.skip(reason=f"zarr-device: {reason[5:].strip()}"))
            else:
                item.add_marker(pytest.mark.xfail(reason=f"zarr-device: {reason}", strict=True))
    missing = sorted(set(_expected) - seen)
    # The script runs whole modules: then every listed test must be there (a renamed test must
    # not leave a stale entry). Runs of a few tests by hand skip the check.
    if missing and os.environ.get("ZARR_DEVICE_SUITE_CHECK_LIST"):
        raise pytest.UsageError("expected failures not collected (renamed or removed?):\n  " + "\n  ".join(missing))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """Counts the tests that start, fixtures set up (zarr-python's config reset among them), with
    the plug-in's pipeline in force."""
    import zarr

    if _baseline():
        return
    path = zarr.config.get("codec_pipeline.path")
    if path == _PIPELINE_CLASS:
        _counts.tests_in_force += 1
    elif _chose_zarr_pipeline(path):
        _counts.tests_own_pipeline.append(item.nodeid)
    else:
        _counts.tests_without.append(item.nodeid)


def _chose_zarr_pipeline(path: Any) -> bool:
    """Whether the test itself set one of zarr-python's own pipelines (zarr-python 3.4's tests of
    its BatchedCodecPipeline and SyncCodecPipeline do, with ``zarr.config.set``): the config's
    defaults, which every reset falls back to, still name the plug-in's, so nothing lost it."""
    import zarr

    defaults = zarr.config.defaults[0].get("codec_pipeline", {})
    return defaults.get("path") == _PIPELINE_CLASS and str(path).startswith("zarr.")


@pytest.fixture
def benchmark() -> Callable[..., Any]:
    """zarr-python's benchmarks (tests/benchmarks) run once each, untimed, as zarr-python's own
    configuration runs them (pytest-benchmark with --benchmark-disable)."""

    class Untimed:
        def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)

        def pedantic(
            self,
            function: Callable[..., Any],
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
            setup: Callable[[], Any] | None = None,
            **_: Any,
        ) -> Any:
            # pytest-benchmark's: setup() may return the (args, kwargs) of the call.
            made = setup() if setup is not None else None
            if made is not None:
                args, kwargs = made
            return function(*args, **(kwargs or {}))

    return Untimed()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    write = terminalreporter.write_line
    terminalreporter.section("zarr-device plug-in")
    write(f"pipeline: {_chosen.get('codec_pipeline.path')}")
    write(
        f"tests run with it in force: {_counts.tests_in_force}; without: {len(_counts.tests_without)}; "
        f"with a zarr-python pipeline the test chose itself: {len(_counts.tests_own_pipeline)}"
    )
    for nodeid in _counts.tests_without[:20]:
        write(f"  without: {nodeid}")
    write(f"arrays (DevicePipeline instances): {_counts.pipelines}")
    write(f"arrays the engine served: {_counts.engine_arrays}; arrays that fell back: {_counts.fallback_arrays}")
    write("calls: " + ", ".join(f"{k} {v}" for k, v in sorted(_counts.calls.items())))
    for reason, n in _counts.reasons.most_common(12):
        write(f"  fall back x{n}: {reason} ...")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _baseline():
        return
    engine_calls = sum(
        _counts.calls[f"{kind} engine"] for kind in ("read", "read box", "write", "write box")
    )
    if _counts.tests_without:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nzarr-device plug-in: {len(_counts.tests_without)} tests ran without the plug-in's pipeline")
    if session.testscollected > 50 and engine_calls == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print("\nzarr-device plug-in: the engine served no read or write: the plug-in was not in force")
