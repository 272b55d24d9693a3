"""The daily policy job: learns on the window that ends at its scheduled hour, stores the
policy with its inputs' time ranges, and hands it to ``/metrics``; on both stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry, generate_latest

from monitor.exposition_policy import PolicyCollector
from monitor.policy.job import run_policy_job
from monitor.store import Checkpoint, Store
from tests.monitor.policy.records import T0, Slice, make_config, records

HOUR = 3600


def _fill(store: Store, hours: int) -> None:
    slices = [Slice(tags="lang=py", batch="1-1", survival=(0.9, 0.8, 0.7), m=0.1, plain=50),
              Slice(tags="lang=hs", batch="1-1", survival=(0.1, 0.01, 0.0), m=0.1, plain=50),
              Slice(tags="lang=py", batch="256+", survival=(0.9, 0.8, 0.7), m=0.9, plain=50)]
    store.commit(Checkpoint("job", slices={(r.key, r.series, r.hour): r.stats
                                            for r in records(slices, hours)}))


def test_the_job_stores_the_policy_of_its_window_and_exports_it(migrated_url: str) -> None:
    config = make_config()
    config = config.model_copy(update={"jobs": config.jobs.model_copy(
        update={"policy_window": 12 * HOUR})})
    end = datetime.fromtimestamp(T0 + 12 * HOUR + 1800, UTC)  # half past: the hour counts
    collector = PolicyCollector()
    with Store(migrated_url) as store:
        assert run_policy_job(store, config, end, collector.set) is None  # nothing yet
        assert store.policies() == []
        _fill(store, 14)  # two hours past the window's end: never read
        row = run_policy_job(store, config, end, collector.set)
        assert row is not None
        stored = store.policies()[0]
        since = datetime.fromtimestamp(T0, UTC)
        assert (stored["train_since"], stored["holdout_until"]) == (
            since, since + timedelta(hours=12))
        assert stored["train_until"] == since + timedelta(hours=8)
        assert stored["features"] == "tags,batch_size"
        doc = stored["document"]
        assert doc["holdout_window"]["until"].startswith(
            (since + timedelta(hours=12)).strftime("%Y-%m-%dT%H"))
        settings = {(s["features"]["tags"], s["features"]["batch_size"]):
                    s["setting"]["num_speculative_tokens"] for s in doc["slices"]}
        assert settings[("lang=hs", "1-1")] == 0 and settings[("lang=py", "1-1")] == 3
        assert settings[("lang=py", "256+")] == 0
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    assert 'batch="256+"' in text and "specwatch_policy_computed_timestamp_seconds" in text
    values = {line.split("batch=\"")[1].split("\"")[0]: float(line.rsplit(" ", 1)[1])
              for line in text.splitlines()
              if line.startswith("specwatch_policy_num_speculative_tokens{")}
    assert values["256+"] == 0.0 and values["1-1"] >= 1.0
    # a daemon restarting reads the policy in force back
    with Store(migrated_url) as store:
        again = PolicyCollector.for_store(store)
    registry = CollectorRegistry()
    registry.register(again)
    assert generate_latest(registry).decode() == text
