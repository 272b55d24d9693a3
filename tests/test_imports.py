"""Every module imports, no import circle, no arrow from a lower layer up, and SQL only
inside the store package.

The graph is read from the source (AST), not from ``sys.modules``: an edge is any ``import``
or ``from ... import`` at module level *or inside a function* (a lazy import still closes a
circle, only later), resolved to the module it names (``from pkg import mod`` is an edge to
``pkg.mod``, ``from pkg import name`` to ``pkg``). Imports under ``if TYPE_CHECKING:`` are
left out: they never run. Dynamic imports (``importlib.import_module("...")``, as in
``monitor/store/__init__.py``'s lazy names) are not seen.

``migrations/env.py`` is in the graph but not imported: Alembic's ``context`` exists only
while Alembic runs it, and importing it elsewhere fails by design.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("monitor", "alerts", "migrations")
NOT_IMPORTED = {
    "migrations.env": "runs Alembic's migration context at import",
    "monitor.__main__": "runs the command line at import",
}


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({_path(self.source)}:{self.line})"


def _path(module: str) -> str:
    base = ROOT.joinpath(*module.split("."))
    return str((base / "__init__.py" if base.is_dir() else base.with_suffix(".py"))
               .relative_to(ROOT))


def module_names() -> dict[str, Path]:
    """Every module of :data:`PACKAGES` and its file."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            # migrations/versions holds revision scripts, not importable modules
            if not all(p.isidentifier() for p in parts):
                continue
            out[".".join(parts)] = path
    return out


def _type_checking_blocks(tree: ast.Module) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:``."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else (
                test.attr if isinstance(test, ast.Attribute) else None)
            if name == "TYPE_CHECKING":
                for child in node.body:
                    hidden.update(id(n) for n in ast.walk(child))
    return hidden


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, source: str, is_package: bool, known: Iterable[str]) -> list[Edge]:
    """The edges from ``module`` to modules in ``known`` (see the module doc)."""
    known = set(known)
    tree = ast.parse(source)
    hidden = _type_checking_blocks(tree)
    edges = []
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            # "import monitor.store.db" runs monitor.store.db; an unknown name is a third
            # party module, or an attribute of its nearest known parent
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                edges.append(Edge(module, target, node.lineno))
    return edges


def import_graph() -> dict[str, list[Edge]]:
    modules = module_names()
    return {
        name: imports_of(name, path.read_text(encoding="utf-8"), path.name == "__init__.py",
                         modules)
        for name, path in modules.items()
    }


@dataclass(frozen=True, slots=True)
class Circle:
    """A strongly connected set of modules, and one shortest circle of imports through it."""

    members: list[str]
    edges: list[Edge]

    def __str__(self) -> str:
        return (f"import circle through {len(self.members)} modules "
                f"({', '.join(self.members)}); one of its circles:\n"
                + "\n".join(f"  {e}" for e in self.edges))


def cycles(graph: Mapping[str, Iterable[Edge]]) -> list[Circle]:
    """One :class:`Circle` per strongly connected component with more than one module
    (Tarjan's algorithm, iterative: the graph has a few hundred nodes)."""
    succ = {n: sorted({e.target: e for e in edges}.values(), key=lambda e: e.target)
            for n, edges in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in sorted(succ):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            out = succ.get(node, [])
            if i < len(out):
                work.append((node, i + 1))
                nxt = out[i].target
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:  # node is done: pass its low link up to its caller
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return [Circle(c, _circle(c, succ)) for c in sorted(components)]


def _circle(component: list[str], succ: Mapping[str, list[Edge]]) -> list[Edge]:
    """A shortest circle through the component's first module (breadth-first)."""
    members = set(component)
    start = component[0]
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in succ[node]:
                if edge.target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, came[path[0].source])
                    return path
                if edge.target in members and edge.target not in came:
                    came[edge.target] = edge
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"no circle in component {component}")


def _describe(circles: list[Circle]) -> str:
    return "\n".join(str(c) for c in circles)


# (importer prefix, imported prefix, why the arrow is wrong)
FORBIDDEN = [
    ("monitor.store", "alerts",
     "the store is below alerting: shared types live in monitor/ (alert_record, silence)"),
    ("monitor.config", "monitor.sources", "the config is the lowest layer"),
    ("monitor.config", "monitor.scrape", "the config is the lowest layer"),
    ("alerts", "monitor.detect.state", "alerting is below detection's state"),
]


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(graph: Mapping[str, Iterable[Edge]],
               rules: Iterable[tuple[str, str, str]] = FORBIDDEN) -> list[str]:
    """Every edge from a module under an importer prefix to one under its imported prefix."""
    rules = list(rules)
    return [f"{edge}: {why}"
            for edges in graph.values() for edge in edges
            for importer, imported, why in rules
            if _under(edge.source, importer) and _under(edge.target, imported)]


# -- the checks, each shown able to fail ---------------------------------------------------


def _graph(*edges: tuple[str, str]) -> dict[str, list[Edge]]:
    graph: dict[str, list[Edge]] = {}
    for line, (a, b) in enumerate(edges, 1):
        graph.setdefault(a, []).append(Edge(a, b, line))
        graph.setdefault(b, [])
    return graph


def test_the_cycle_finder_finds_a_circle_and_names_its_lines() -> None:
    graph = _graph(("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"))
    found = cycles(graph)
    assert [[(e.source, e.target) for e in c.edges] for c in found] == [
        [("a", "b"), ("b", "c"), ("c", "a")], [("d", "e"), ("e", "d")]]
    assert str(found[1]).endswith("(d, e); one of its circles:\n  d -> e (d.py:5)\n"
                                  "  e -> d (e.py:6)")
    assert cycles(_graph(("a", "b"), ("b", "c"), ("a", "c"))) == []


def test_the_ast_reader_sees_lazy_and_relative_imports_but_not_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import monitor.store.db\n"
        "from . import sibling\n"
        "from .sibling import name\n"
        "if TYPE_CHECKING:\n"
        "    from monitor.hidden import X\n"
        "def f():\n"
        "    from monitor.lazy import thing\n"
    )
    known = {"monitor", "monitor.store", "monitor.store.db", "monitor.pkg", "monitor.pkg.sibling",
             "monitor.pkg.mod", "monitor.hidden", "monitor.lazy"}
    edges = imports_of("monitor.pkg.mod", source, False, known)
    assert [(e.target, e.line) for e in edges] == [
        ("monitor.store.db", 2), ("monitor.pkg.sibling", 3), ("monitor.pkg.sibling", 4),
        ("monitor.lazy", 8)]


def test_the_layering_check_catches_an_upward_arrow() -> None:
    graph = _graph(("monitor.store.alerting", "alerts.silences"),
                   ("alerts.silences", "monitor.silence"))
    assert violations(graph) == [
        "monitor.store.alerting -> alerts.silences (monitor/store/alerting.py:1): "
        + FORBIDDEN[0][2]]


# -- the tree --------------------------------------------------------------------------------


def test_every_module_imports() -> None:
    failed = []
    for name in module_names():
        if name in NOT_IMPORTED:
            continue
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - report every module that fails, not the first
            failed.append(f"{name}: {type(e).__name__}: {e}")
    assert not failed, "modules that do not import:\n" + "\n".join(failed)


def test_the_graph_covers_every_module_pkgutil_finds() -> None:
    """The AST walk reads the same modules the import system sees."""
    found = set()
    for package in ("monitor", "alerts"):
        pkg = importlib.import_module(package)
        found.add(package)
        found |= {m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".")}
    assert found <= set(module_names()), sorted(found - set(module_names()))


def test_no_import_circle() -> None:
    circles = cycles(import_graph())
    assert not circles, _describe(circles)


@pytest.mark.parametrize("rule", FORBIDDEN, ids=lambda r: f"{r[0]}-not-{r[1]}")
def test_no_arrow_up(rule: tuple[str, str, str]) -> None:
    found = violations(import_graph(), [rule])
    assert not found, "\n".join(found)


# Outside these packages a module may catch SQLAlchemy's errors, never build a statement.
SQL_PACKAGES = ("monitor.store", "migrations")
SQL_ALLOWED_ELSEWHERE = ("sqlalchemy.exc",)


def sql_imports(module: str, source: str) -> list[str]:
    """``module``'s imports of SQLAlchemy beyond its exceptions, as ``line: module``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        out += [f"{node.lineno}: {n}" for n in names
                if _under(n, "sqlalchemy") and not any(_under(n, a) for a in SQL_ALLOWED_ELSEWHERE)]
    return out


def test_the_sql_check_catches_a_query_outside_the_store() -> None:
    source = "from sqlalchemy.exc import SQLAlchemyError\nfrom sqlalchemy import select\n"
    assert sql_imports("monitor.flagoff", source) == ["2: sqlalchemy"]


def test_sql_only_inside_the_store_package() -> None:
    found = [f"{_path(name)}:{hit}" for name, path in module_names().items()
             if not any(_under(name, p) for p in SQL_PACKAGES)
             for hit in sql_imports(name, path.read_text(encoding="utf-8"))]
    assert not found, "SQLAlchemy used outside monitor/store/:\n" + "\n".join(found)


# What the command line must not import before a command needs it: each costs start-up time
# on every invocation (``specwatch ratios`` included). A lazy import made eager again fails
# here instead of silently slowing every command down.
CLI_LAZY = ("alembic", "yaml", "ctypes", "pydantic")


def test_the_command_line_imports_no_migration_or_yaml_machinery() -> None:
    code = ("import sys, monitor.cli\n"
            f"print(' '.join(m for m in {CLI_LAZY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    assert not out, f"import monitor.cli imports {out}: import them where they are used"


def test_opening_a_migrated_store_does_not_import_alembic(tmp_path: Path) -> None:
    """Every read command opens a Store, whose migration check reads the version row with
    plain SQL when the database is at the head (monitor/store/db.py)."""
    from monitor.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(url)
    code = ("import sys\n"
            "from monitor.store.store import Store\n"
            f"Store({url!r}).close()\n"
            "print('alembic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "False"


def test_reading_ratios_from_sqlite_imports_neither_the_postgresql_dialect_nor_the_orm(
        tmp_path: Path) -> None:
    """`specwatch ratios` on SQLite: the writers' dialect INSERTs (monitor/store/series_ids.py)
    import PostgreSQL's dialect only when a PostgreSQL database writes, and the schema is
    Core tables (monitor/store/tables.py): ``sqlalchemy.orm`` costs about 45 ms to import."""
    from monitor.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(url)
    code = ("import sys\n"
            "import monitor.cli\n"
            "from monitor.store.query import NARROW_COLUMNS, format_ratios, sketches_for\n"
            "from monitor.store.store import Store\n"
            f"store = Store({url!r})\n"
            "rows, latency = store.ratio_table(sketches_for(NARROW_COLUMNS))\n"
            "format_ratios(rows, 'table', columns=NARROW_COLUMNS, latency=latency)\n"
            "store.close()\n"
            "print('sqlalchemy.dialects.postgresql' in sys.modules,"
            " 'sqlalchemy.orm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "False False"


def test_specwatch_ratios_without_a_config_file_builds_no_config_model(tmp_path: Path) -> None:
    """The models of monitor/config.py (pydantic's) cost about 0.1 s to build: `specwatch
    ratios` without --config reads its store URL from --db, the environment or the default
    (monitor/config_env.py); with a file, the file is read and checked as every command
    checks it."""
    from monitor.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(url)
    config = tmp_path / "c.yaml"
    config.write_text(f"store:\n  url: {url}\n")
    code = ("import io, sys, contextlib\n"
            "import monitor.cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert monitor.cli.main(sys.argv[1:]) == 0\n"
            "print('pydantic' in sys.modules, 'monitor.config' in sys.modules)")
    for args, want in ((["--db", url], "False False"), (["--config", str(config)], "True True")):
        out = subprocess.run([sys.executable, "-c", code, "ratios", *args], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == want, args


@pytest.mark.parametrize("preset", [None, "3"])
def test_specwatch_ratios_starts_numpy_with_one_blas_thread_unless_told(
        tmp_path: Path, preset: str | None) -> None:
    """OpenBLAS's thread per core, started when numpy is imported, costs `specwatch ratios`
    CPU for nothing: the command asks for one thread before its first numpy import, and
    keeps a value the user set."""
    import os

    from monitor.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(url)
    code = ("import io, os, sys, contextlib\n"
            "import monitor.cli\n"
            "assert 'numpy' not in sys.modules\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    monitor.cli.main(['ratios', '--db', {url!r}])\n"
            "print('numpy' in sys.modules, os.environ.get('OPENBLAS_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env=env).stdout.strip()
    assert out == f"True {preset or 1}"
