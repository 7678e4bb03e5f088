from __future__ import annotations

from pathlib import Path

import pytest

from registry_gen.settings import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings over an empty content/ and public/ in a temp folder."""
    content = tmp_path / "content"
    content.mkdir()
    return Settings(content_dir=content, out_dir=tmp_path / "public", base_url="http://127.0.0.1:9/", data_dir=tmp_path / "data")
