"""Normalising NumPy-style basic selections into per-dimension (start, step, count) triples."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from zarr_device.errors import SelectionError

__all__ = ["BasicSelection", "normalize_selection"]


@dataclass(frozen=True)
class BasicSelection:
    """A selection resolved against a shape.

    ``slices`` holds one (start, step, count) triple per array dimension; ``shape`` is the shape of
    the result, without the dimensions that integers indexed away.
    """

    slices: tuple[tuple[int, int, int], ...]
    shape: tuple[int, ...]

    @property
    def full_shape(self) -> tuple[int, ...]:
        """The selection's extent in every dimension, indexed-away ones as 1."""
        return tuple(count for _, _, count in self.slices)


def normalize_selection(selection: Any, shape: tuple[int, ...]) -> BasicSelection:
    """Resolves ints (negative counted from the end), slices with step >= 1 and one Ellipsis."""
    items = selection if isinstance(selection, tuple) else (selection,)
    if sum(1 for item in items if item is Ellipsis) > 1:
        raise SelectionError("a selection can hold only one Ellipsis (...)")
    if Ellipsis in items:
        at = next(i for i, item in enumerate(items) if item is Ellipsis)
        fill = len(shape) - (len(items) - 1)
        if fill < 0:
            raise SelectionError(f"too many indices for an array of {len(shape)} dimensions")
        items = items[:at] + (slice(None),) * fill + items[at + 1 :]
    if len(items) > len(shape):
        raise SelectionError(
            f"too many indices ({len(items)}) for an array of {len(shape)} dimensions"
        )
    items = items + (slice(None),) * (len(shape) - len(items))

    slices: list[tuple[int, int, int]] = []
    result: list[int] = []
    for dim, (item, extent) in enumerate(zip(items, shape)):
        if isinstance(item, slice):
            try:
                start, stop, step = item.indices(extent)
            except (ValueError, TypeError) as e:
                raise SelectionError(f"invalid slice {item!r} in dimension {dim}: {e}") from None
            if step < 1:
                raise SelectionError(
                    f"slice step {step} in dimension {dim}: only steps >= 1 are supported"
                )
            count = max(0, (stop - start + step - 1) // step)
            slices.append((start if count else 0, step, count))
            result.append(count)
            continue
        if isinstance(item, bool):
            raise SelectionError(f"boolean index in dimension {dim} is not a basic selection")
        try:
            index = operator.index(item)
        except TypeError:
            raise SelectionError(
                f"unsupported index {item!r} in dimension {dim}: "
                "use integers, slices with step >= 1 and Ellipsis"
            ) from None
        if not -extent <= index < extent:
            raise SelectionError(
                f"index {index} is out of bounds for dimension {dim} of extent {extent}"
            )
        slices.append((index % extent, 1, 1))
    return BasicSelection(tuple(slices), tuple(result))
