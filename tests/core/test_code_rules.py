"""The code rules of the developers' guide that a machine can check: no function over 60 lines
(data literals excepted), no private (`_name`) import across modules, no nested route handlers,
and `registry_gen` never imports `user_api`."""

from __future__ import annotations

import ast
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
