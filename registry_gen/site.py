"""The HTML site: jinja2 pages rendered from site_template/ into `/-/web/` (pure rendering)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from registry_gen.names import package_dir
from registry_gen.settings import Settings

WEB_ROOT = "-/web"
DEFAULT_TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "site_template"


def template_dir(settings: Settings) -> Path:
    return settings.template_dir or DEFAULT_TEMPLATE_DIR


def template_fingerprint(settings: Settings) -> str:
    """Changes when any template changes, so the whole site is re-rendered."""
    digest = hashlib.sha256()
    folder = template_dir(settings)
    if folder.is_dir():
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=8)
def _environment(folder: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def package_folder(name: str) -> str:
    return f"{WEB_ROOT}/package/{package_dir(name)}"


def package_pages(packument: Mapping[str, Any], settings: Settings) -> dict[str, bytes]:
    env = _environment(str(template_dir(settings)))
    html = env.get_template("package.html").render(pkg=packument, settings=settings, web_root=WEB_ROOT)
    return {f"{package_folder(packument['name'])}/index.html": html.encode("utf-8")}


def index_pages(summaries: Sequence[Mapping[str, Any]], settings: Settings) -> dict[str, bytes]:
    env = _environment(str(template_dir(settings)))
    html = env.get_template("index.html").render(packages=summaries, settings=settings, web_root=WEB_ROOT)
    return {f"{WEB_ROOT}/index.html": html.encode("utf-8")}
