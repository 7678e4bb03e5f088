"""The code rules of the developers' guide that a machine can check: no function over 60 lines
(data literals excepted), no private (`_name`) import across modules, no nested route handlers,
and `registry_gen` never imports `user_api`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("registry_gen", "user_api")
MAX_LINES = 60
# Functions that are one data literal (the OpenAPI document's schemas and paths).
DATA_LITERALS = {"user_api/openapi.py:_schemas", "user_api/openapi.py:build_openapi"}


def _modules() -> list[tuple[str, ast.Module]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found.append((str(path.relative_to(ROOT)), ast.parse(path.read_text(encoding="utf-8"))))
    return found


def test_no_function_is_longer_than_sixty_lines() -> None:
    long = [
        f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"  # type: ignore[operator]
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_LINES  # type: ignore[operator]
        and f"{name}:{node.name}" not in DATA_LITERALS
    ]
    assert long == []


def test_no_private_name_is_imported_from_another_module() -> None:
    private = [
        f"{name}: from {node.module} import {alias.name}"
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert private == []


def test_registry_gen_never_imports_user_api() -> None:
    offending = [
        name
        for name, tree in _modules()
        if name.startswith("registry_gen/")
        for node in ast.walk(tree)
        if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("user_api"))
        or (isinstance(node, ast.Import) and any(a.name.startswith("user_api") for a in node.names))
    ]
    assert offending == []


def test_route_handlers_are_module_level_functions(tmp_path: Path) -> None:
    from user_api.registry_routes import ROUTES

    nested = [r.handler.__qualname__ for r in ROUTES if "<locals>" in r.handler.__qualname__]
    assert nested == [] and len(ROUTES) > 20
    from registry_gen.settings import Settings
    from user_api.app import create_user_app
    from user_api.store import open_user_store

    store = open_user_store(Settings(data_dir=tmp_path))
    try:
        app = create_user_app(Settings(), store)
        handlers = [route.callback.__qualname__ for route in app.routes]
        assert [h for h in handlers if "<locals>" in h] == [] and len(handlers) >= 8
    finally:
        store.close()


# The state contract (registry_gen.state): SQL and the state's databases stay behind it, and in the
# user stores of user_api (accounts, tokens, groups), which have a contract of their own.
STATE_PACKAGE = "registry_gen/state/"
USER_STORES = {
    "user_api/store_sqlite.py", "user_api/store_postgres.py", "user_api/sqlstore.py", "user_api/store_hooks.py", "user_api/store_shared.py",
    "user_api/store_audit.py", "user_api/grams.py", "user_api/groups.py", "user_api/store_migrate.py",
}
DATABASE_MODULES = {"sqlite3", "psycopg", "psycopg_pool"}
SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TEMP\s+)?(TABLE|INDEX)|DROP\s+TABLE|PRAGMA\s+\w+)\b", re.S | re.I)
MAX_MODULE_LINES = 900
DATA_LITERAL_MODULES: set[str] = set()  # modules that are one data literal may pass MAX_MODULE_LINES
MAX_RUN_LINES = 700


def _outside_the_stores(name: str) -> bool:
    return not name.startswith(STATE_PACKAGE) and name not in USER_STORES


def test_no_module_outside_the_state_and_the_user_stores_holds_sql() -> None:
    found = []
    for name, tree in _modules():
        if not _outside_the_stores(name):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [f"{name}:{node.lineno} import {a.name}" for a in node.names if a.name.split(".")[0] in DATABASE_MODULES]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in DATABASE_MODULES:
                found.append(f"{name}:{node.lineno} from {node.module} import ...")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("execute", "executemany", "executescript"):
                found.append(f"{name}:{node.lineno} .{node.func.attr}(...)")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
                found.append(f"{name}:{node.lineno} SQL text {node.value[:40]!r}")
    assert found == []


def test_the_sql_rule_sees_what_it_forbids() -> None:
    """The rule above would catch each form (a guard against a rule that passes by seeing nothing)."""
    source = 'import sqlite3\nfrom psycopg import sql\ndb.execute(q)\nQ = "SELECT name FROM packages"\nR = "insert nothing"\n'
    tree = ast.parse(source)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "execute"]
    texts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and SQL.search(n.value)]
    assert calls and texts == ["SELECT name FROM packages"]


def test_modules_stay_small_and_the_build_sequencer_shorter() -> None:
    sizes = {str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines()) for path in (ROOT / "registry_gen").rglob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES and name not in DATA_LITERAL_MODULES} == {}
    assert sizes["registry_gen/build/run.py"] < MAX_RUN_LINES
    assert not (ROOT / "registry_gen" / "build.py").exists()  # the build is a package of phases


PHASES = {"detect", "read_content", "plan_changes", "write_changes", "write_everything", "write_indexes"}
# What more than one phase may be handed: the stores behind the contract, and frozen values.
SHARED_BY_PHASES = {"settings": "Settings", "context": "BuildContext", "detected": "Detected", "state": "", "cache": ""}


def _phase_inputs(sequencer: ast.FunctionDef) -> dict[str, set[str]]:
    """name -> the phases handed it, or a part of it, in the sequencer's calls."""
    handed: dict[str, set[str]] = {}
    for call in ast.walk(sequencer):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in PHASES:
            for argument in [*call.args, *(k.value for k in call.keywords)]:
                for node in ast.walk(argument):
                    if isinstance(node, ast.Name):
                        handed.setdefault(node.id, set()).add(call.func.id)
    return handed


def test_the_builds_phases_share_no_run_object() -> None:
    """run.py sequences the phases, passing values: it defines no class (a shared working set),
    hands no two phases the same object unless it is a store or frozen, and sets no attribute of
    what a phase returned."""
    import dataclasses

    from registry_gen.build.context import BuildContext
    from registry_gen.build.detect import Detected
    from registry_gen.settings import Settings
    from registry_gen.state.records import BuildStart

    tree = ast.parse((ROOT / "registry_gen" / "build" / "run.py").read_text(encoding="utf-8"))
    assert [node.name for node in tree.body if isinstance(node, ast.ClassDef)] == []
    sequencer = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_build_in_transaction")
    handed = _phase_inputs(sequencer)
    assert set(handed) & {"detected", "context", "state"} and len(PHASES & {p for ps in handed.values() for p in ps}) == len(PHASES)
    assert {name: sorted(phases) for name, phases in handed.items() if len(phases) > 1 and name not in SHARED_BY_PHASES} == {}
    assert all(dataclasses.fields(kind) and kind.__dataclass_params__.frozen for kind in (Settings, BuildContext, Detected, BuildStart))  # type: ignore[attr-defined]
    set_attributes = [ast.unparse(t) for n in ast.walk(sequencer) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                      for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, (ast.Attribute, ast.Subscript))]  # fmt: skip
    assert set_attributes == []
