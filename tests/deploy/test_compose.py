"""docker-compose.yml: validated by docker-compose itself (no Docker engine needed), its
wiring cross-checked with the Prometheus, Alertmanager and Grafana files, and the small
shell and Python snippets it runs inside containers executed here for real.

``docker-compose`` comes from Debian (``scripts/system-packages``): missing is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from tests.deploy import DEPLOY, REPO, load_yaml

COMPOSE = REPO / "docker-compose.yml"
TOKEN = "test-token-4f1c9a"
REQUIRED = {"SPECWATCH_API_TOKEN": TOKEN, "GRAFANA_ADMIN_PASSWORD": "test-admin-pw"}
SERVICES = {"kafka", "postgres", "specwatch", "prometheus", "alertmanager", "grafana"}
SINK_VARS = ("SPECWATCH_SLACK_WEBHOOK_URL", "SPECWATCH_PAGERDUTY_ROUTING_KEY",
             "SPECWATCH_ALERTMANAGER_URL", "SPECWATCH_WEBHOOK_URL")


def compose(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """docker-compose on the repo's file with exactly ``env`` (no .env file, no caller
    environment leaking in)."""
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is not installed: run scripts/system-packages"
    env_file = tmp_path / "empty.env"
    env_file.write_text("", encoding="utf-8")
    full_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **(env or {})}
    return subprocess.run(
        [binary, "--env-file", str(env_file), "--project-directory", str(REPO),
         "-f", str(COMPOSE), *args],
        capture_output=True, text=True, env=full_env, timeout=120, check=False)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The resolved configuration, as ``docker-compose config`` prints it."""
    res = compose(tmp_path_factory.mktemp("compose"), "config", env=REQUIRED)
    assert res.returncode == 0, res.stderr
    return yaml.safe_load(res.stdout)


def unescape(s: str) -> str:
    """What the container sees of a compose string: ``$$`` is a literal ``$``."""
    return s.replace("$$", "$")


def env_of(config: dict, service: str) -> dict[str, str]:
    env = config["services"][service].get("environment", {})
    return {k: ("" if v is None else str(v)) for k, v in env.items()}


def binds(config: dict, service: str) -> dict[str, str]:
    """Container path -> host path of a service's bind mounts."""
    out = {}
    for v in config["services"][service].get("volumes", []):
        src, dst = v.split(":")[:2]
        if src.startswith("/"):
            out[dst] = src
    return out


def container_to_host(config: dict, service: str, path: str) -> Path:
    for dst, src in binds(config, service).items():
        if path == dst or path.startswith(dst.rstrip("/") + "/"):
            return Path(src) / os.path.relpath(path, dst)
    raise AssertionError(f"{path} is not mounted into {service}")


def tmpfs_dirs(svc: dict) -> list[str]:
    """Mount points of a service's tmpfs entries (``/path:options``)."""
    return [t.split(":")[0] for t in svc.get("tmpfs", [])]


def flag(command: list[str], name: str) -> str:
    [value] = [c.split("=", 1)[1] for c in command if c.startswith(name + "=")]
    return value


# --- docker-compose itself ---------------------------------------------------------------

def test_config_is_valid(tmp_path: Path) -> None:
    res = compose(tmp_path, "config", "-q", env=REQUIRED)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_required_secrets_stop_the_config(tmp_path: Path, missing: str) -> None:
    env = {k: v for k, v in REQUIRED.items() if k != missing}
    res = compose(tmp_path, "config", "-q", env=env)
    assert res.returncode != 0
    assert f"set {missing}" in res.stderr


def test_services_and_pinned_images(config: dict) -> None:
    services = config["services"]
    assert set(services) == SERVICES
    for name, svc in services.items():
        if "build" in svc:
            continue
        image = svc["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and re.fullmatch(r"v?\d+(\.\d+)*", tag), f"{name}: unpinned {image}"
    assert services["specwatch"]["build"]["context"] == str(REPO)
    assert set(config["volumes"]) >= {"kafka-data", "pg-data", "prometheus-data",
                                      "alertmanager-data", "grafana-data"}


def test_bind_mounts_exist(config: dict) -> None:
    for name in config["services"]:
        for dst, src in binds(config, name).items():
            assert Path(src).exists(), f"{name}: {src} (-> {dst}) is not in the repo"


def test_published_ports_default_to_loopback(config: dict, tmp_path: Path) -> None:
    want = {"specwatch": 9464, "prometheus": 9090, "alertmanager": 9093, "grafana": 3000}
    for name, port in want.items():
        assert f"127.0.0.1:{port}:{port}/tcp" in config["services"][name]["ports"], name
    assert "ports" not in config["services"]["postgres"]
    res = compose(tmp_path, "config", env={**REQUIRED, "GRAFANA_BIND": "0.0.0.0"})
    assert "0.0.0.0:3000:3000/tcp" in yaml.safe_load(res.stdout)["services"]["grafana"]["ports"]


# --- specwatch ---------------------------------------------------------------------------

def test_specwatch_migrates_then_serves_http(config: dict) -> None:
    svc = config["services"]["specwatch"]
    shell = svc["command"][-1]
    assert svc["command"][:2] == ["sh", "-c"]
    upgrade = shell.index("specwatch db upgrade --config /etc/specwatch/specwatch.yaml")
    run = shell.index("exec specwatch run --config /etc/specwatch/specwatch.yaml")
    assert upgrade < run and "&&" in shell[upgrade:run]  # no daemon on a failed migration
    assert re.search(r"run .*--http 0\.0\.0\.0:9464\b", shell)
    assert container_to_host(config, "specwatch", "/etc/specwatch/specwatch.yaml") == \
        REPO / "deploy" / "specwatch.yaml"
    for dep in ("kafka", "postgres"):
        assert svc["depends_on"][dep]["condition"] == "service_healthy"


def test_specwatch_environment(config: dict, tmp_path: Path) -> None:
    env = env_of(config, "specwatch")
    assert env["SPECWATCH_API_TOKEN"] == TOKEN
    assert env["SPECWATCH_DB_URL"].startswith("postgresql://specwatch:")
    assert env["SPECWATCH_DB_URL"].endswith("@postgres:5432/specwatch")
    assert env["SPECWATCH_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert set(SINK_VARS) <= set(env)
    assert env["SPECWATCH_ALERTMANAGER_URL"] == "http://alertmanager:9093"
    assert env["SPECWATCH_SLACK_WEBHOOK_URL"] == ""  # unset sinks stay off
    # explicitly empty turns the Alertmanager sink off; a value replaces the stack's one
    for value in ("", "http://am-0:9093,http://am-1:9093"):
        res = compose(tmp_path, "config", env={**REQUIRED, "SPECWATCH_ALERTMANAGER_URL": value})
        got = yaml.safe_load(res.stdout)["services"]["specwatch"]["environment"]
        assert (got["SPECWATCH_ALERTMANAGER_URL"] or "") == value


def test_specwatch_healthcheck_hits_healthz(config: dict) -> None:
    hc = config["services"]["specwatch"]["healthcheck"]
    assert hc["test"][0] == "CMD" and "/healthz" in hc["test"][-1]
    assert "start_period" in hc  # migrations run before the server listens


class _Healthz(BaseHTTPRequestHandler):
    status = 200
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:  # noqa: N802
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def healthz_server() -> Iterator[tuple[HTTPServer, type[_Healthz]]]:
    handler = type("Handler", (_Healthz,), {"status": 200, "seen": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server, handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (401, False), (503, False)])
def test_specwatch_healthcheck_runs(config: dict, healthz_server: tuple, status: int,
                                    healthy: bool) -> None:
    """The healthcheck's Python, run here against a stand-in /healthz on loopback."""
    server, handler = healthz_server
    handler.status = status
    code = unescape(config["services"]["specwatch"]["healthcheck"]["test"][-1])
    code = code.replace("127.0.0.1:9464", f"127.0.0.1:{server.server_address[1]}")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"SPECWATCH_API_TOKEN": TOKEN}, timeout=30, check=False)
    assert (res.returncode == 0) == healthy, res.stderr
    assert handler.seen == [("/healthz", f"Bearer {TOKEN}")]


# --- Prometheus --------------------------------------------------------------------------

def test_prometheus_wiring(config: dict) -> None:
    svc = config["services"]["prometheus"]
    command = svc["command"]
    assert command[0] == "/bin/prometheus"
    cfg_path = container_to_host(config, "prometheus", flag(command, "--config.file"))
    assert cfg_path == DEPLOY / "prometheus" / "prometheus.yml"
    cfg = load_yaml(cfg_path)
    for rules in cfg["rule_files"]:  # relative to the config file, inside the mount
        assert (cfg_path.parent / rules).is_file(), rules
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    [target] = jobs["specwatch"]["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host in config["services"]
    assert f"--http 0.0.0.0:{port}" in config["services"]["specwatch"]["command"][-1]
    [am] = cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am.split(":")[0] in config["services"]
    assert f"127.0.0.1:{am.split(':')[1]}" in " ".join(
        config["services"]["alertmanager"]["healthcheck"]["test"])
    assert flag(command, "--storage.tsdb.path") in [
        v.split(":")[1] for v in svc["volumes"] if v.startswith("prometheus-data:")]
    assert env_of(config, "prometheus")["SPECWATCH_API_TOKEN"] == TOKEN


def test_prometheus_token_file_is_written_where_the_scrape_reads_it(config: dict) -> None:
    svc = config["services"]["prometheus"]
    cfg = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    token_file = cfg["scrape_configs"][0]["authorization"]["credentials_file"]
    assert os.path.dirname(token_file) in tmpfs_dirs(svc)  # in memory, never on a volume
    # Prometheus runs as nobody: a fresh tmpfs mount point must be writable for it
    assert all("mode=1777" in t for t in svc["tmpfs"])
    assert token_file in unescape(svc["entrypoint"][2])


def run_entrypoint(entrypoint: list[str], command: list[str], tmp_path: Path,
                   dirs: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A service's entrypoint script run by /bin/sh here, with its tmpfs directories moved
    under ``tmp_path`` and ``command`` in place of the server."""
    assert entrypoint[:2] == ["/bin/sh", "-c"]
    script = unescape(entrypoint[2])
    for d in dirs:
        script = script.replace(d, str(tmp_path / d.strip("/").replace("/", "_")))
        (tmp_path / d.strip("/").replace("/", "_")).mkdir()
    return subprocess.run(["/bin/sh", "-c", script, *entrypoint[3:], *command],
                          capture_output=True, text=True, timeout=30, check=False,
                          env={"PATH": os.environ["PATH"], **env})


PRINT_ENV = [sys.executable, "-c",
             "import os, sys; print(sorted(k for k in os.environ if 'URL' in k or 'KEY' in k "
             "or 'TOKEN' in k)); print(sys.argv[1:])", "--flag=1"]


def test_prometheus_entrypoint_writes_the_token(config: dict, tmp_path: Path) -> None:
    svc = config["services"]["prometheus"]
    res = run_entrypoint(svc["entrypoint"], PRINT_ENV, tmp_path, tmpfs_dirs(svc),
                         {"SPECWATCH_API_TOKEN": TOKEN})
    assert res.returncode == 0, res.stderr
    token = tmp_path / "run_specwatch" / "api_token"
    assert token.read_text() == TOKEN  # no trailing newline: it is the whole credential
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    # the server gets its arguments, and the token no longer in its environment
    assert res.stdout.splitlines() == ["[]", "['--flag=1']"]


def test_prometheus_entrypoint_refuses_to_start_without_a_token(config: dict,
                                                                tmp_path: Path) -> None:
    svc = config["services"]["prometheus"]
    res = run_entrypoint(svc["entrypoint"], PRINT_ENV, tmp_path, tmpfs_dirs(svc), {})
    assert res.returncode != 0
    assert "--flag=1" not in res.stdout


# --- Alertmanager ------------------------------------------------------------------------

def test_alertmanager_wiring(config: dict) -> None:
    svc = config["services"]["alertmanager"]
    command = svc["command"]
    assert command[0] == "/bin/alertmanager"
    cfg_path = container_to_host(config, "alertmanager", flag(command, "--config.file"))
    assert cfg_path == DEPLOY / "alertmanager" / "alertmanager.yml"
    cfg = load_yaml(cfg_path)
    script = unescape(svc["entrypoint"][2])
    files = [c[k] for r in cfg["receivers"] for kind in ("slack_configs", "pagerduty_configs")
             for c in r.get(kind, []) for k in ("api_url_file", "routing_key_file") if k in c]
    assert len(files) == 2
    for f in files:
        assert os.path.dirname(f) in tmpfs_dirs(svc) and f in script, f


@pytest.mark.parametrize(("env", "slack", "pagerduty"), [
    # by default Prometheus's alerts go where specwatch's own go
    ({"SPECWATCH_SLACK_WEBHOOK_URL": "https://hooks.example/sw",
      "SPECWATCH_PAGERDUTY_ROUTING_KEY": "pd-sw"}, "https://hooks.example/sw", "pd-sw"),
    # their own variables win
    ({"SPECWATCH_SLACK_WEBHOOK_URL": "https://hooks.example/sw",
      "ALERTMANAGER_SLACK_WEBHOOK_URL": "https://hooks.example/ops",
      "ALERTMANAGER_PAGERDUTY_ROUTING_KEY": "pd-ops"}, "https://hooks.example/ops", "pd-ops"),
    ({}, "", ""),
])
def test_alertmanager_entrypoint_writes_receiver_secrets(
        config: dict, tmp_path: Path, env: dict[str, str], slack: str, pagerduty: str) -> None:
    svc = config["services"]["alertmanager"]
    res = run_entrypoint(svc["entrypoint"], PRINT_ENV, tmp_path, tmpfs_dirs(svc), env)
    assert res.returncode == 0, res.stderr
    d = tmp_path / "run_alertmanager"
    assert (d / "slack_webhook_url").read_text() == slack
    assert (d / "pagerduty_routing_key").read_text() == pagerduty
    for f in d.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert res.stdout.splitlines() == ["[]", "['--flag=1']"]


def test_alertmanager_is_a_single_replica_without_gossip(config: dict) -> None:
    assert "--cluster.listen-address=" in config["services"]["alertmanager"]["command"]


# --- Grafana -----------------------------------------------------------------------------

def test_grafana_wiring(config: dict) -> None:
    svc = config["services"]["grafana"]
    env = env_of(config, "grafana")
    assert env["GF_SECURITY_ADMIN_PASSWORD"] == REQUIRED["GRAFANA_ADMIN_PASSWORD"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    provisioning = DEPLOY / "grafana" / "provisioning"
    for kind in ("datasources", "dashboards"):
        assert container_to_host(config, "grafana", f"/etc/grafana/provisioning/{kind}") == \
            provisioning / kind
    [provider] = load_yaml(provisioning / "dashboards" / "specwatch.yml")["providers"]
    dashboards = container_to_host(config, "grafana", provider["options"]["path"])
    assert (dashboards / "specwatch.json").is_file()
    home = container_to_host(config, "grafana", env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert home == DEPLOY / "grafana" / "dashboards" / "specwatch.json"
    [ds] = [d for d in load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
            if d["type"] == "prometheus"]
    host_port = ds["url"].removeprefix("http://")
    assert host_port.split(":")[0] in config["services"]
    assert f"127.0.0.1:{host_port.split(':')[1]}/-/ready" in " ".join(
        config["services"]["prometheus"]["healthcheck"]["test"])
    assert svc["depends_on"]["prometheus"]["condition"] == "service_started"
