"""Progress of long work (saves, loads, converts, the CLI's commands): one kind of tqdm bar, on
stderr, shown only where stderr is a terminal, so logs and pipes stay clean."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, Union

__all__ = ["Progress", "wanted", "bar", "progress_bar"]

#: What a ``progress=`` argument takes: True (a bar), False (none), None (a bar when stderr is a
#: terminal) or a callable told of each step (bytes, for data).
Progress = Union[bool, None, Callable[[int], object]]


def wanted(progress: Progress) -> bool:
    """Whether ``progress`` asks for steps to be reported at all."""
    if progress is None:
        return sys.stderr.isatty()
    return callable(progress) or bool(progress)


def bar(total: int, desc: str, *, quiet: bool = False, unit: str = "B") -> Any:
    """A tqdm bar on stderr: hidden when ``quiet`` and when stderr is not a terminal. Use it as a
    context manager; ``update(n)`` reports ``n`` more steps."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", unit_divisor=1024,
                disable=True if quiet else None, leave=False, file=sys.stderr, dynamic_ncols=True)


@contextlib.contextmanager
def progress_bar(total: int, progress: Progress, desc: str) -> Iterator[Callable[[int], object]]:
    """The function to call with each step's bytes: ``progress`` itself when it is callable, a
    bar's when :func:`wanted`, else one that does nothing."""
    if callable(progress):
        yield progress
    elif not wanted(progress):
        yield lambda _: None
    else:
        with bar(total, desc) as shown:
            yield shown.update
