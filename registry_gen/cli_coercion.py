"""Typer's conversion of parsed values, minus pydantic where a value needs none.

typer 0.29 builds a pydantic `TypeAdapter` for every parameter a command line reaches, even one
left at its default (None), and importing pydantic costs 60-170 ms: more than all the rest of a
no-change `registry-gen build` (issue 15, goal 2: start-up <= 0.12 s). `install()` makes typer
build its converters on first real use instead: a value left out stays None (what typer's
converter returns for it), a text value of a `str` or plain `Path` parameter becomes what typer's
adapter would make of it (a `Path` after the same checks, through typer's own `coerce_cli_path`;
a refused one is refused by typer's converter, so the message is its own), and every other value (a number, a choice, a list, a flag read from the environment) goes through
typer's own converter, built then.

This leans on typer's coercion contract (`typer.core.build_runtime_param`, `RuntimeParam`,
`TypeDescriptor`): typer is pinned to an exact version and tests/core/test_cli_startup.py checks
that both converters agree, so an upgrade that changes the contract fails there first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer.core
from typer._click.exceptions import BadParameter
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param, resolve_type_descriptor
from typer._param_types import coerce_cli_path

typer_converter = build_runtime_param  # typer's own: imports pydantic and builds an adapter


class DeferredParam(RuntimeParam):
    """Converts like typer's converter for the same annotation and options, which it builds only
    for values that need it. (No dataclass of its own: its fields are RuntimeParam's.)"""

    @property
    def descriptor(self) -> TypeDescriptor:
        return resolve_type_descriptor(self.annotation, self.parameter_info)

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and is_plain_text(self.descriptor):
            if self.annotation is str:
                return value
            try:  # typer's adapter makes a Path of the text first, then checks that Path
                return coerce_cli_path(Path(value), self.parameter_info, path_type=Path, param=param, ctx=ctx)
            except BadParameter:
                pass  # refused: typer's own converter says why, in its words (it quotes the text given)
        return typer_converter(self.descriptor).coerce(value, param=param, ctx=ctx)


def is_plain_text(descriptor: TypeDescriptor) -> bool:
    """A parameter whose text value typer's adapter passes through (`str`) or only wraps in a
    `Path` after the path checks: no custom parser, no file to open, no other path type."""
    info = descriptor.parameter_info
    if info.parser is not None or descriptor.file_annotation is not None:
        return False
    return descriptor.annotation is str or (descriptor.annotation is Path and info.path_type is None)


def deferred_converter(descriptor: TypeDescriptor) -> RuntimeParam:
    return DeferredParam(descriptor.parameter_info, descriptor.annotation)


def install() -> None:
    """From now on typer's parameters get a `DeferredParam` (idempotent)."""
    typer.core.build_runtime_param = deferred_converter  # type: ignore[attr-defined]
