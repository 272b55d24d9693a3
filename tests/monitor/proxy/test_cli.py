"""``specwatch proxy`` as a real process: serve, publish, report, stop on SIGTERM."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from monitor.broker import free_port
from monitor.cli import main
from tests.helpers import wait_for
from tests.monitor.proxy.conftest import DRAFT, SPEC, TARGET, Engine, read_events

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.broker
def test_proxy_command_serves_publishes_and_stops(engine: Engine, broker: Any,
                                                  tmp_path: Path) -> None:
    metadata = tmp_path / "proxy.yaml"
    metadata.write_text(json.dumps({  # JSON is YAML
        "engine": "llamacpp", "instance": "cli-pod",
        "models": {"*": {"target": TARGET, "draft": DRAFT, "spec": SPEC}}}))
    port, metrics_port = free_port(), free_port()
    topic = f"proxy-cli-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "proxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "monitor", "proxy", "--upstream", engine.url,
             "--listen", f"127.0.0.1:{port}", "--metadata", str(metadata),
             "--default-route", "cli-route", "--bootstrap", broker.bootstrap_servers,
             "--topic", topic, "--metrics-port", str(metrics_port)],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return httpx.get(url + "/blob", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=30, what="the proxy to answer")
        body = json.dumps({"model": "m", "seed": "cli1"}).encode()
        proxied = httpx.post(url + "/v1/chat/completions", content=body, timeout=30)
        direct = httpx.post(engine.url + "/v1/chat/completions", content=body, timeout=30)
        assert proxied.status_code == 200 and proxied.content == direct.content
        [event] = read_events(broker.bootstrap_servers, topic, 1)
        assert (event["route"], event["instance"]) == ("cli-route", "cli-pod")
        assert event["request_id"] == "chatcmpl-cli1"
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert 'specwatch_proxy_events_total{status="ok"} 1.0' in metrics
        assert "specwatch_publisher_sent_total 1.0" in metrics
    finally:
        proc.terminate()
        rc = proc.wait(30)
    text = log.read_text()
    assert rc == 0, text
    assert f"specwatch proxy on http://127.0.0.1:{port} -> {engine.url}" in text
    assert "1 event(s) sent, 0 dropped" in text


def test_proxy_command_without_upstream_is_a_clear_error(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    assert main(["proxy", "--listen", "127.0.0.1:0"]) == 2
    assert "no upstream (give --upstream URL" in capsys.readouterr().err


def test_shadow_flags_reach_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["proxy", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0",
                 "--shadow-upstream", "http://127.0.0.1:2", "--shadow-rate", "1.5"]) == 2
    assert "shadow_rate" in capsys.readouterr().err
    assert main(["proxy", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0",
                 "--shadow-upstream", "ftp://x"]) == 2
    assert "shadow_upstream" in capsys.readouterr().err
