from __future__ import annotations

import pytest

from monitor.simulate import KINDS, SCENARIOS, SimulationError, Simulator, scenario_config
from tests.monitor.simulate.shape import check_event


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_runs(name: str) -> None:
    config = scenario_config(name, duration_s=1200, rate=5, seed=1)
    assert config.duration_s == 1200
    events = list(Simulator(config).events())
    assert len(events) > 1000
    for e in events[::10]:
        check_event(e)
    # incidents sit inside the run, whatever its length
    assert all(0 <= i.at_s < 1200 for i in config.incidents)


def test_incident_scenarios_have_incidents_at_their_default_length() -> None:
    config = scenario_config("incidents")
    assert config.duration_s == 6 * 3600 and len(config.incidents) >= 3
    kinds = {i.kind for i in scenario_config("every-incident").incidents}
    assert kinds == {"revision_change", "tokenizer_swap", "eviction", "silence",
                     "speculation_off", "acceptance_shift", "error_spike", "batch_surge",
                     "draft_change", "draft_length"}
    # lossy_verifier shows only in v1.1 output hashes: it has a scenario of its own
    assert kinds == set(KINDS) - {"lossy_verifier"}
    assert {i.kind for i in scenario_config("lossy-verifier").incidents} == {"lossy_verifier"}
    assert scenario_config("quiet").incidents == ()


def test_overrides_win() -> None:
    config = scenario_config("noisy", duplicates=0.0, rate=7, seed=9)
    assert (config.duplicates, config.rate, config.seed) == (0.0, 7, 9)
    assert config.late > 0


def test_unknown_scenario() -> None:
    with pytest.raises(SimulationError, match="known"):
        scenario_config("nope")
