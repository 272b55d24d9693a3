"""monitor.heap: shared mappings are one object per distinct contents, and only while held."""

from __future__ import annotations

import copy
import gc
import pickle
import sys
import threading

import orjson
import pytest

from monitor import heap
from monitor.config import DetectionConfig
from monitor.detect.engine import Detection
from monitor.simulate import Simulator, scenario_config
from monitor.telemetry.parse import event_from_obj


def test_equal_contents_share_one_dict_with_interned_strings() -> None:
    a = heap.shared({"model": "".join(["qw", "en"]), "k": "4"})
    b = heap.shared({"model": "qwen", "k": "4"})
    assert a is b
    assert a == {"model": "qwen", "k": "4"}
    assert a["model"] is sys.intern("qwen")
    assert heap.shared({"model": "qwen", "k": "5"}) is not a
    # the same items in another order are another dict: a snapshot keeps its key order
    assert list(heap.shared({"k": "4", "model": "qwen"})) == ["k", "model"]


def test_a_shared_dict_is_dropped_once_nothing_holds_it() -> None:
    key = {"model": "held-by-no-one", "k": "1"}
    first = heap.shared(key)
    assert heap.shared(dict(key)) is first
    del first
    gc.collect()
    assert not any(dict(v) == key for v in heap._SHARED.values())
    assert heap.shared(key) == key


def test_threads_asking_at_once_get_one_dict() -> None:
    got: list[dict[str, str]] = []
    barrier = threading.Barrier(8)

    def ask() -> None:
        barrier.wait()
        got.append(heap.shared({"model": "raced", "k": "2"}))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(d) for d in got}) == 1


@pytest.mark.parametrize("change", [
    lambda d: d.__setitem__("k", "5"), lambda d: d.__delitem__("k"), lambda d: d.update(k="5"),
    lambda d: d.pop("k"), lambda d: d.popitem(), lambda d: d.clear(),
    lambda d: d.setdefault("new", "x"), lambda d: d.__ior__({"k": "5"}),
])
def test_a_shared_dict_refuses_every_change(change) -> None:
    d = heap.shared({"model": "frozen", "k": "4"})
    with pytest.raises(TypeError, match="shared by all its holders"):
        change(d)
    assert d == {"model": "frozen", "k": "4"}
    copy = dict(d)
    copy["k"] = "5"  # a copy is a plain dict
    assert heap.shared({"model": "frozen", "k": "4"}) == {"model": "frozen", "k": "4"}


def test_copies_of_a_shared_dict_are_plain_dicts() -> None:
    d = heap.shared({"model": "copied", "k": "4"})
    for made in (copy.copy(d), copy.deepcopy(d), pickle.loads(pickle.dumps(d))):
        assert type(made) is dict and made == d
        made["k"] = "5"
    assert d["k"] == "4"


def test_a_shared_dict_writes_plain_json() -> None:
    d = heap.shared({"model": "qwen", "k": "4"})
    assert orjson.loads(orjson.dumps(d)) == {"model": "qwen", "k": "4"}
    assert type(dict(d)) is dict


def _events() -> list:
    cfg = scenario_config("quiet", duration_s=1800, rate=6.0, seed=5,
                          start="2026-11-02T00:00:00Z")
    return [event_from_obj(o) for o in Simulator(cfg).events()]


def test_segments_of_one_setup_share_its_dict_before_and_after_a_restore() -> None:
    events = _events()
    detection = Detection(DetectionConfig())
    detection.load({})
    # the same model pair on another route: a second segment of the same setup
    twins = [e for e in events if e.route == "chat"][:50]
    for e in twins:
        e.route = "chat-copy"
    detection.observe(0, events + twins)
    segments = detection.view().segments
    by_route = {s.labels["route"]: s for s in segments.values()}
    assert by_route["chat"].setup is by_route["chat-copy"].setup
    assert len({id(s.setup) for s in segments.values()}) \
        == len({tuple(s.setup.items()) for s in segments.values()})

    states = {k: orjson.loads(orjson.dumps(v)) for k, v in detection.snapshot().items()}
    seg_states = [v for v in states.values() if v.get("kind") == "segment"]
    assert seg_states and all(type(v["setup"]) is dict for v in seg_states)
    restored = Detection(DetectionConfig())
    restored.load(states)
    again = {s.labels["route"]: s for s in restored.view().segments.values()}
    assert again["chat"].setup is again["chat-copy"].setup
    assert again["chat"].setup == by_route["chat"].setup
