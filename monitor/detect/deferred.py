"""State snapshots for a checkpoint, each built when the store reads it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any


class DeferredStates(MutableMapping[str, Any]):
    """Snapshots keyed for the state table, built one at a time as they are read.

    A checkpoint over ten thousand segments would otherwise build every segment's snapshot
    before writing the first: some 70 MB of short-lived dicts at once, a peak that resident
    memory keeps after it. The store reads a chunk, writes it and drops it, so the peak is
    one chunk's. Nothing moves the detectors between the snapshot and the commit (both run
    on the pipeline's thread), so a value built late equals one built early; and since a
    value is built anew on every read, a retried commit writes the same state again.

    >>> states = DeferredStates()
    >>> counter = {"n": 0}
    >>> states.defer("a", lambda: {"version": 1, "n": counter["n"]})
    >>> states["b"] = {"version": 1}
    >>> counter["n"] = 5
    >>> dict(states)
    {'a': {'version': 1, 'n': 5}, 'b': {'version': 1}}
    """

    __slots__ = ("_build",)

    def __init__(self) -> None:
        self._build: dict[str, Callable[[], Any]] = {}

    def defer(self, key: str, build: Callable[[], Any]) -> None:
        """``key``'s snapshot is ``build()``, called whenever it is read."""
        self._build[key] = build

    def __setitem__(self, key: str, value: Any) -> None:
        self._build[key] = _Const(value)

    def __delitem__(self, key: str) -> None:
        del self._build[key]

    def update(self, other: Mapping[str, Any]) -> None:  # type: ignore[override]
        if isinstance(other, DeferredStates):
            self._build.update(other._build)
        else:
            for key, value in other.items():
                self[key] = value

    def __getitem__(self, key: str) -> Any:
        return self._build[key]()

    def __iter__(self) -> Iterator[str]:
        return iter(self._build)

    def __len__(self) -> int:
        return len(self._build)

    def __repr__(self) -> str:
        return f"DeferredStates({len(self)} keys)"


class _Const:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self) -> Any:
        return self.value
