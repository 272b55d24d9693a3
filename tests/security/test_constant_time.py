"""The token comparison is constant-time: every presented credential goes through
``hmac.compare_digest`` as a SHA-256 digest (so equal lengths whatever was sent), and nothing
in ``monitor/api/auth.py`` compares a secret with ``==``, ``!=``, ``in`` or ``startswith``."""

from __future__ import annotations

import ast
import hashlib
import hmac
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import monitor.api.auth as auth
from monitor.api.app import create_app
from tests.monitor.api import bare_store
from tests.security import API_TOKEN, TestClient

PRESENTED = {
    "right": API_TOKEN,
    "wrong, same length": API_TOKEN[:-1] + "Z",
    "wrong, shorter": API_TOKEN[:5],
    "wrong, longer": API_TOKEN * 3,
    "empty": "",
}
# Names under which auth.py holds a secret or something derived from one.
SECRET_NAMES = ("token", "credential", "expected", "digest", "secret", "header")


class Spy:
    """``hmac.compare_digest`` that records its arguments and answers as the real one."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any]] = []
        self.real: Callable[[Any, Any], bool] = hmac.compare_digest

    def __call__(self, a: Any, b: Any) -> bool:
        self.calls.append((a, b))
        return self.real(a, b)


@pytest.mark.parametrize("presented", list(PRESENTED.values()), ids=list(PRESENTED))
def test_every_request_is_judged_by_compare_digest(
    monkeypatch: pytest.MonkeyPatch, presented: str
) -> None:
    spy = Spy()
    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    store = bare_store()
    try:
        client = TestClient(create_app(store, registry=CollectorRegistry(), token=API_TOKEN))
        r = client.get("/metrics", headers={"Authorization": f"Bearer {presented}"})
    finally:
        store.close()
    assert r.status_code == (200 if presented == API_TOKEN else 401)
    # Exactly one comparison, of the presented token's digest against the configured one's:
    # 32 bytes each, whatever the lengths sent, so the time says nothing about either.
    assert spy.calls == [(hashlib.sha256(presented.encode()).digest(),
                          hashlib.sha256(API_TOKEN.encode()).digest())]
    assert all(len(a) == len(b) == 32 for a, b in spy.calls)


def _named(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _named(node.func) + "(" + ",".join(_named(a) for a in node.args) + ")"
    if isinstance(node, ast.Subscript):
        return _named(node.value)
    return ""


def secret_comparisons(source: str) -> list[str]:
    """``==``/``!=``/``in``/``is`` comparisons, and ``startswith``/``endswith``/``find``
    calls, that touch a name holding a secret (or something derived from one): each of them
    returns as soon as a byte differs."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(
                isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn | ast.Is | ast.IsNot)
                for op in node.ops):
            names = [_named(x).lower() for x in (node.left, *node.comparators)]
            # `x is None` tests presence, not content.
            if all(isinstance(x, ast.Constant) and x.value is None for x in node.comparators):
                continue
            if any(s in n for n in names for s in SECRET_NAMES):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith", "find", "index") and \
                any(s in _named(node.func.value).lower() for s in SECRET_NAMES):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_secret_is_compared_with_an_early_exit_operator() -> None:
    assert secret_comparisons(inspect.getsource(auth)) == []


@pytest.mark.parametrize("bad", [
    "def ok(header, token): return header == token",
    "def ok(credentials, expected): return credentials != expected",
    "def ok(h, self): return h in self._expected",
    "def ok(token, h): return h.split()[1] == token",
    "def ok(header, t): return header.startswith(t)",
])
def test_the_ast_check_finds_early_exit_comparisons(bad: str) -> None:
    assert secret_comparisons(bad), bad


def test_the_configured_token_is_kept_only_as_a_digest() -> None:
    middleware = auth.BearerAuth(app=lambda *a: None, token=API_TOKEN)  # type: ignore[arg-type]
    kept = [v for v in vars(middleware).values() if isinstance(v, str | bytes)]
    assert API_TOKEN not in [v.decode() if isinstance(v, bytes) and v.isascii() else v
                             for v in kept]
    assert hashlib.sha256(API_TOKEN.encode()).digest() in kept
