"""The detector base: declared parameters and state fields; snapshot and restore written once.

In the spirit of river's ``base.Base``: a detector declares its constructor parameters
(``PARAMS``, name -> conversion, in snapshot order) and the fields of its state (``STATE``,
one :class:`Field` per snapshot key), and inherits ``params()``, ``snapshot()`` and
``restore()``. A snapshot is ``{"kind", "version", "params", <state keys>...}``: the layout
every stored detector state already has, so stored JSON restores unchanged.

**Compact snapshots.** A detector that sets ``COMPACT`` (and a ``VERSION`` above the full
form's, which stays in ``READS``) leaves out of its snapshot every parameter equal to the
constructor's default and every state key whose JSON equals a fresh detector's with the same
parameters: a segment mostly warming up stores a few numbers, not some thirty empty fields.
``restore`` builds the fresh detector from the parameters (the constructor's defaults for the
missing ones) and sets only the keys present, so what was left out is exactly what was
equal: the restored detector goes on as the snapshotted one would. Nothing is rounded.

A detector that decides a rule names it (``rule = "..."``); its ``severity`` comes from the
rule catalogue (``monitor/rules.py``), never from the detector.

>>> class Counter(Detector):
...     KIND = "counter"
...     PARAMS = {"step": float}
...     STATE = (field("n"),)
...     def __init__(self, step: float = 1.0) -> None:
...         self._set_params(locals())
...         self._n = 0.0
...     def update(self) -> None:
...         self._n += self.step
>>> c = Counter(step=2); c.update()
>>> c.snapshot()
{'kind': 'counter', 'version': 1, 'params': {'step': 2.0}, 'n': 2.0}
>>> Counter.restore(c.snapshot()).snapshot() == c.snapshot()
True
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import orjson

from monitor import rules
from monitor.exceptions import StateVersionError
from monitor.versioned import require_version

__all__ = ["CHANGED", "FIRING", "ConditionDetector", "Detector", "Field", "field", "nested"]


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Field:
    """One snapshot key: the attribute it holds and how it is written and read back."""

    key: str
    attr: str
    dump: Callable[[Any], Any] = _same
    load: Callable[[Any], Any] = _same


def field(key: str, attr: str | None = None, *, load: Callable[[Any], Any] = _same,
          dump: Callable[[Any], Any] = _same) -> Field:
    """A state field stored as is; the attribute is ``_<key>`` unless named."""
    return Field(key, f"_{key}" if attr is None else attr, dump, load)


def nested(key: str, cls: Any, attr: str | None = None, *, optional: bool = False) -> Field:
    """A state field holding an object with its own ``snapshot()``/``restore()``."""
    if optional:
        return field(key, attr, dump=lambda v: None if v is None else v.snapshot(),
                     load=lambda d: None if d is None else cls.restore(d))
    return field(key, attr, dump=lambda v: v.snapshot(), load=cls.restore)


# The single-condition pair every rule detector keeps: ``changed`` is an attribute, not a
# property like ``firing``, since the engine reads it after every event.
FIRING = field("firing", load=bool)
CHANGED = field("changed", "changed", load=bool)


def _plain(value: Any) -> Any:
    # tuples are lists in JSON: the snapshot says so already, so a fresh and a restored
    # detector give equal snapshots
    return list(value) if isinstance(value, tuple) else value


_SCALAR_TYPES = (int, bool, str, type(None))


def same_json(value: Any, other: Any) -> bool:
    """Whether two JSON-ready values write the same JSON (so one may stand for the other).

    >>> same_json(0.0, 0.0), same_json(0.0, -0.0), same_json(1, 1.0), same_json([1, [2]], [1, [2]])
    (True, False, False, True)
    """
    kind = type(value)
    if kind is not type(other):
        return False
    if kind is float:
        # -0.0 == 0.0, yet they are two states (and NaN is never left out)
        return value == other and math.copysign(1.0, value) == math.copysign(1.0, other)
    if kind in _SCALAR_TYPES or kind is array:  # arrays: of ints (no -0.0), equal or not
        return bool(value == other)
    # ``==`` first: it tells most unequal containers apart at once (a length, a first
    # number); only equal ones are written out, to tell 0 from 0.0 and -0.0 inside
    return bool(value == other) and orjson.dumps(value) == orjson.dumps(other)


def without_same(data: Mapping[str, Any], fresh: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` without the keys whose value writes the same JSON as ``fresh``'s.

    >>> without_same({"a": 1, "b": 2.0, "c": -0.0, "d": [1]}, {"a": 1, "b": 2, "c": 0.0})
    {'b': 2.0, 'c': -0.0, 'd': [1]}
    """
    # ``!=`` first, in the comprehension: a value unequal to the fresh one is kept without a
    # call (a warm detector's fields mostly are); only equal ones need :func:`same_json`.
    missing = _MISSING
    return {k: v for k, v in data.items()
            if (f := fresh.get(k, missing)) is missing or v != f or not same_json(v, f)}


_MISSING: Any = object()


class Detector:
    """Declared parameters and state; see the module docstring."""

    # No instance dict of its own: a subclass with ``__slots__`` holds only its slots (one
    # per segment and detector, by the ten thousand).
    __slots__ = ()

    KIND: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    # Snapshots leave out what equals a fresh detector's (see the module docstring); the
    # versions ``restore`` reads (the full form's among them) are in READS.
    COMPACT: ClassVar[bool] = False
    READS: ClassVar[tuple[int, ...]] = ()
    PARAMS: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}
    STATE: ClassVar[tuple[Field, ...]] = ()
    # a COMPACT detector's (snapshot ``params``, fresh twin's state), once snapshotted
    _compact: tuple[dict[str, Any], dict[str, Any]] | None
    rule: ClassVar[str]
    severity: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        rule = cls.__dict__.get("rule")
        if isinstance(rule, str):
            cls.severity = rules.severity(rule)

    def _set_params(self, values: Mapping[str, Any]) -> None:
        """Set every declared parameter from ``values`` (the constructor's ``locals()``)."""
        for name, convert in self.PARAMS.items():
            setattr(self, name, convert(values[name]))
        if self.COMPACT:
            # set with the parameters, so every instance has its attributes in one order
            self._compact = None

    def params(self) -> dict[str, Any]:
        """The constructor's arguments, JSON-ready: ``cls(**params())`` is a fresh twin."""
        return {name: _plain(getattr(self, name)) for name in self.PARAMS}

    @classmethod
    def _from_params(cls, params: dict[str, Any]) -> Self:
        return cls(**params)

    def _state(self) -> dict[str, Any]:
        return {f.key: f.dump(getattr(self, f.attr)) for f in self.STATE}

    def _set_state(self, data: dict[str, Any]) -> None:
        # a key left out of a compact snapshot keeps the fresh detector's value
        for f in self.STATE:
            if f.key in data:
                setattr(self, f.attr, f.load(data[f.key]))

    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-ready data; ``restore(snapshot())`` continues identically."""
        if not self.COMPACT:
            return {"kind": self.KIND, "version": self.VERSION, "params": self.params(),
                    **self._state()}
        params, fresh = self._compact_params()
        return {"kind": self.KIND, "version": self.VERSION, "params": dict(params),
                **without_same(self._state(), fresh)}

    def _compact_params(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """A compact snapshot's ``params`` and the state of a fresh twin, looked up once per
        detector: parameters are set by the constructor only, and a checkpoint snapshots
        every segment's detectors, so neither is written out and compared again."""
        found = self._compact
        if found is None:
            found = self._compact = _compact_of(type(self), self.params())
        return found

    @classmethod
    def restore(cls, data: dict[str, Any]) -> Self:
        """Rebuild from :meth:`snapshot` output (refusing another kind or version)."""
        version = data.get("version")
        if data.get("kind") != cls.KIND or version not in (cls.VERSION, *cls.READS):
            require_version(data, cls.KIND, cls.VERSION)  # raises, with the usual message
        if version != cls.VERSION or not cls.COMPACT:
            cls._require_whole(data)
        params = dict(data["params"])
        if cls.COMPACT and version == cls.VERSION:
            params = {**_fresh_of(cls, {})[0], **params}
        det = cls._from_params(params)
        det._set_state(data)
        return det

    @classmethod
    def _require_whole(cls, data: dict[str, Any]) -> None:
        """A full (not compact) snapshot holds every state key: refuse one that does not."""
        missing = [f.key for f in cls.STATE if f.key not in data]
        if missing:
            raise StateVersionError(f"{cls.KIND} state version {data.get('version')} lacks "
                                    f"{', '.join(missing)}")


# (class, parameters' JSON) -> (the constructor's default parameters, a fresh detector's
# state), both JSON-ready: what a compact snapshot leaves out. Segments of one configuration
# share their parameters, so this holds a handful of entries.
_FRESH: dict[tuple[type, bytes], tuple[dict[str, Any], dict[str, Any]]] = {}

# (class, parameters' JSON) -> (a compact snapshot's ``params``, a fresh twin's state):
# shared by every detector of one configuration.
_COMPACT: dict[tuple[type, bytes], tuple[dict[str, Any], dict[str, Any]]] = {}


def _compact_of(cls: type[Detector], params: dict[str, Any]) -> tuple[dict[str, Any],
                                                                    dict[str, Any]]:
    key = (cls, orjson.dumps(params))
    found = _COMPACT.get(key)
    if found is None:
        defaults, fresh = _fresh_of(cls, params)
        found = _COMPACT[key] = (without_same(params, defaults), fresh)
    return found


def _fresh_of(cls: type[Detector], params: Mapping[str, Any]) -> tuple[dict[str, Any],
                                                                       dict[str, Any]]:
    key = (cls, orjson.dumps(params))
    found = _FRESH.get(key)
    if found is None:
        defaults = cls().params() if not params else _fresh_of(cls, {})[0]
        fresh = cls._from_params({**defaults, **params}) if params else cls()
        # through JSON: the cache never aliases a live detector's state
        found = _FRESH[key] = (orjson.loads(orjson.dumps(defaults)),
                               orjson.loads(orjson.dumps(fresh._state())))
    return found


class ConditionDetector(Detector):
    """A detector of one rule's condition, read by the engine after every update."""

    _firing: bool = False
    # True only right after the update on which ``firing`` flipped. An attribute, not a
    # property like ``firing``: the engine reads it after every event.
    changed: bool = False

    def _set_params(self, values: Mapping[str, Any]) -> None:
        super()._set_params(values)
        # Instance attributes from the start, in one order for every instance: the per-event
        # reads and writes stay on Python's fast path for instance attributes.
        self._firing = False
        self.changed = False

    @property
    def firing(self) -> bool:
        return self._firing
