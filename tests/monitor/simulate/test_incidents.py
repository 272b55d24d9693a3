from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.simulate.exceptions import SimulationError
from monitor.simulate.incidents import KINDS, Incident


def test_parse_examples_from_the_brief() -> None:
    inc = Incident.parse("revision_change:route=creative-writing,at=2h,factor=0.85")
    assert (inc.kind, inc.route, inc.at_s, inc.duration_s, inc.factor) == (
        "revision_change", "creative-writing", 7200.0, None, 0.85,
    )
    assert inc.end_s == float("inf")
    inc = Incident.parse("silence:route=chat,at=30m,for=10m")
    assert (inc.kind, inc.route, inc.at_s, inc.duration_s, inc.end_s) == (
        "silence", "chat", 1800.0, 600.0, 2400.0,
    )


def test_change_kinds_parse_and_round_trip() -> None:
    inc = Incident.parse("draft_change:route=code-assistant,at=26h,factor=1.15,revision=d2")
    assert (inc.kind, inc.factor, inc.revision) == ("draft_change", 1.15, "d2")
    assert Incident.parse(str(inc)) == inc
    inc = Incident.parse("draft_length:route=creative-writing,at=2h,k=5")
    assert inc.k == 5 and isinstance(inc.k, int) and str(inc).endswith(",k=5")
    assert Incident.parse("draft_length:route=chat").param("k") == KINDS["draft_length"][1]["k"]
    assert Incident.parse("draft_change:route=chat").param("factor") == 0.85
    # a fine-tune that leaves acceptance alone, and one that improves it
    assert Incident.parse("revision_change:route=chat,at=1h,factor=1").param("factor") == 1.0
    assert Incident.parse("revision_change:route=chat,at=1h,factor=1.1").factor == 1.1


def test_defaults_come_from_the_kind() -> None:
    inc = Incident.parse("eviction:route=code-assistant,at=1h")
    assert inc.share is None and inc.param("share") == KINDS["eviction"][1]["share"]
    assert Incident.parse("error_spike:route=*,rate=0.5").param("rate") == 0.5
    assert Incident.parse("silence:route=chat").at_s == 0.0


def test_every_kind_parses_with_its_parameters() -> None:
    for kind, (_, params) in KINDS.items():
        sample = {"revision": "r9", "k": 7}
        extra = "".join(f",{k}={sample.get(k, 0.5)}" for k in params)
        inc = Incident.parse(f"{kind}:route=chat,at=90s,for=1d{extra}")
        assert inc.kind == kind and inc.duration_s == 86400
        assert Incident.parse(str(inc)) == inc


@pytest.mark.parametrize(
    "text",
    [
        "meltdown:route=chat",  # unknown kind
        "silence:at=5m",  # no route
        "silence",  # no route
        "silence:route=chat,at=soon",  # bad duration
        "silence:route=chat,for=0s",  # empty window
        "silence:route=chat,factor=0.5",  # parameter of another kind
        "eviction:route=chat,share=1.5",  # out of range
        "revision_change:route=chat,factor=-1",
        "revision_change:route=chat,factor=abc",
        "draft_change:route=chat,factor=2.5",  # beyond any plausible better draft
        "draft_change:route=chat,k=5",  # draft_length's parameter
        "draft_length:route=chat,k=0",
        "draft_length:route=chat,k=2.5",
        "draft_length:route=chat,k=64",
        "draft_length:route=chat,factor=0.9",  # no drift by definition
        "silence:route=chat,colour=red",  # unknown key
        "silence:route=chat,at=1m,at=2m",  # repeated key
        "silence:route=chat,at",  # not key=value
    ],
)
def test_bad_specs_are_rejected_with_a_reason(text: str) -> None:
    with pytest.raises(SimulationError) as info:
        Incident.parse(text)
    assert str(info.value)


@given(
    st.sampled_from(sorted(KINDS)),
    st.text(st.characters(blacklist_characters=",=:", blacklist_categories=("Cs", "Cc", "Z")),
            min_size=1, max_size=20),
    st.integers(0, 10**6),
    st.none() | st.integers(1, 10**6),
)
def test_str_round_trips(kind: str, route: str, at: int, duration: int | None) -> None:
    inc = Incident(kind=kind, route=route, at_s=float(at),
                   duration_s=None if duration is None else float(duration))
    assert Incident.parse(str(inc)) == inc
