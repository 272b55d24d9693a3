"""The proxy's metadata file: what it accepts, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.exceptions import ConfigError
from monitor.proxy.config import load_proxy_config

GOOD = """\
upstream: http://127.0.0.1:8080/
engine: llamacpp
routes:
  header: X-Tenant
  paths: {/a/: short, /a/b/: long}
  models: {writer: creative}
models:
  "*":
    target: {model: t, revision: 2026-10-28, tokenizer: tok}
    draft: {model: d, revision: 2026-09-30, tokenizer: tok, pinned_target_revision: 2026-09-15}
    spec: {method: draft_model, num_speculative_tokens: 3, params: {n_max: 3}}
  plain:
    target: {model: p, revision: "1", tokenizer: tok}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_file_with_overrides(tmp_path: Path) -> None:
    cfg = load_proxy_config(write(tmp_path, GOOD), {"routes.default": "chat", "listen": None,
                                                    "engine": "vllm"})
    assert cfg.upstream == "http://127.0.0.1:8080"
    assert cfg.engine == "vllm"  # the command line wins
    assert cfg.routes.default == "chat" and cfg.routes.header == "X-Tenant"
    assert cfg.model_meta("anything").target.revision == "2026-10-28"  # YAML date, as text
    assert cfg.model_meta("anything").draft.pinned_target_revision == "2026-09-15"
    assert cfg.model_meta("plain").spec is None
    assert [cfg.routes.route(None, p, None) for p in ("/a/b/x", "/a/x", "/x")] == [
        "long", "short", "chat"]
    assert cfg.routes.route(None, "/x", "writer") == "creative"


@pytest.mark.parametrize(("text", "message"), [
    ("models: {}\n", "no upstream"),
    ("upstream: ftp://x\n", r"at upstream: want an http\(s\) URL"),
    ("upstream: http://x\nbogus: 1\n", "at bogus: unknown key"),
    ("upstream: http://x\nengine: tgi\n", "at engine"),
    ("upstream: http://x\nroutes: {header: 'X Route'}\n", "not an HTTP header name"),
    ("upstream: http://x\nroutes: {paths: {code: c}}\n", "must start with /"),
    ("upstream: http://x\nmodels: {m: {target: {model: t, revision: r, tokenizer: k},\n"
     "  draft: {model: d, revision: r, tokenizer: k}}}\n", "a draft model speculates"),
    ("upstream: http://x\nmodels: {m: {target: {model: t, revision: r, tokenizer: k},\n"
     "  spec: {num_speculative_tokens: 0}}}\n", "models.m.spec.num_speculative_tokens"),
    ("upstream: http://x\nread_timeout: 5 parsecs\n", "at read_timeout"),
    ("- a list\n", "mapping at the top level"),
])
def test_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_proxy_config(write(tmp_path, text))


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="cannot read proxy config"):
        load_proxy_config("/nonexistent/proxy.yaml")
