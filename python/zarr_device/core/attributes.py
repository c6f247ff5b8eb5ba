"""The attributes of an array or group as a live mapping: every change is written through to the
store at once, never lost in a copy."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any

import zarr_device._core as _core
from zarr_device.errors import FormatError, UsageError
from zarr_device.core.nodes import check_attributes

__all__ = ["Attributes"]


def _to_json(values: Mapping[str, Any], what: str) -> str:
    # Checked where zarr.json holds attributes, by the parser that reads them back: a change
    # readers would refuse (too deep, not JSON) is refused before the document is rewritten.
    return check_attributes(values, f"the attributes of {what}")


class Attributes(MutableMapping[str, Any]):
    """The attributes of a node, as stored.

    Reading sees the attributes as they were when the node was opened or last changed through
    this object (:meth:`refresh` reads them again). Each change (``attrs[k] = v``,
    ``del attrs[k]``, :meth:`update`, :meth:`put`) is one atomic rewrite of the node's metadata
    document: the document is locked, read as it is now and rewritten with the change, so changes
    made meanwhile by other handles, threads or processes to other attributes are kept. A node
    opened read-only raises UsageError on any change.
    """

    def __init__(
        self,
        store: _core.Store,
        path: str,
        current: Mapping[str, Any],
        *,
        read_only: bool,
        what: str,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        if not isinstance(current, Mapping):  # a damaged or hostile document
            raise FormatError(f"{what}: its attributes are not a JSON object but {type(current).__name__}")
        self._store = store
        self._path = path
        self._current = dict(current)
        self._read_only = read_only
        self._what = what
        self._on_change = on_change
        # Orders this object's changes and the views they leave behind: threads sharing one node
        # see their own changes, and a later change's view never gives way to an earlier one's.
        self._mutex = threading.Lock()

    # -- reading ------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self._current[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current)

    def __len__(self) -> int:
        return len(self._current)

    def __repr__(self) -> str:
        return f"Attributes({self._current!r})"

    def asdict(self) -> dict[str, Any]:
        """A copy of the attributes as a plain dict."""
        return dict(self._current)

    def refresh(self) -> None:
        """Reads the attributes from the store again (to see other writers' changes)."""
        self._apply({}, [], replace=False)

    # -- changing -----------------------------------------------------------------------------
    def __setitem__(self, key: str, value: Any) -> None:
        self._apply({key: value}, [], replace=False)

    def __delitem__(self, key: str) -> None:
        self._apply({}, [key], replace=False, must_exist=True)

    def update(  # type: ignore[override]  # one write for the whole update, not one per key
        self, other: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), /, **kwargs: Any
    ) -> None:
        """Sets every given attribute in one write."""
        changes = dict(other)
        changes.update(kwargs)
        self._apply(changes, [], replace=False)

    def put(self, attributes: Mapping[str, Any]) -> None:
        """Replaces all attributes with ``attributes`` in one write."""
        self._apply(dict(attributes), [], replace=True)

    def clear(self) -> None:
        self.put({})

    def _apply(
        self, changes: dict[str, Any], removals: list[str], *, replace: bool, must_exist: bool = False
    ) -> None:
        with self._mutex:
            if must_exist and not all(k in self._current for k in removals):
                raise KeyError(next(k for k in removals if k not in self._current))
            self._apply_locked(changes, removals, replace=replace)
        if self._on_change is not None and (changes or removals or replace):
            self._on_change()

    def _apply_locked(self, changes: dict[str, Any], removals: list[str], *, replace: bool) -> None:
        for key in changes:
            if not isinstance(key, str):
                raise UsageError(f"attribute names must be strings, not {key!r}")
        if (changes or removals or replace) and self._read_only:
            raise UsageError(
                f"{self._what} is open read-only: its attributes cannot change (open it with "
                "mode='r+')"
            )
        if not (changes or removals or replace):
            # A refresh: read without writing (and without needing write access).
            text = _core.read_document(self._store, self._document_key())
            document = json.loads(text) if text is not None else {}
            stored = document.get("attributes", {}) if self._document_key().endswith("zarr.json") else document
            self._current = dict(stored) if isinstance(stored, dict) else {}
            return
        text = _to_json(changes, self._what)
        stored_text = _core.update_attributes(self._store, self._path, text, removals, replace)
        self._current = dict(json.loads(stored_text))

    def _document_key(self) -> str:
        prefix = f"{self._path}/" if self._path else ""
        if self._store.exists(prefix + "zarr.json"):
            return prefix + "zarr.json"
        return prefix + ".zattrs"
