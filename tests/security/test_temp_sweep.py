"""Temp files left by a killed write are swept when serve starts (issue 13, Low)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.registry_api.helpers import RegistryProcess, tarball

pytestmark = pytest.mark.slow


def test_serve_removes_temp_files_of_killed_writes_and_nothing_else(tmp_path: Path) -> None:
    content, public = tmp_path / "content", tmp_path / "public"
    (content / "pkg").mkdir(parents=True)
    (content / "pkg" / "pkg-1.0.0.tgz").write_bytes(tarball("pkg", "1.0.0"))
    leftovers = [content / "pkg" / ".pkg-1.1.0.tgz.k2j4h_9a.tmp", content / "pkg" / ".registry-meta.json.a1b2c3d4.tmp"]
    (public / "pkg").mkdir(parents=True)
    leftovers.append(public / "pkg" / ".index.html.zz99yy88.tmp")
    kept = [content / "pkg" / ".notes.tmp", content / "pkg" / "README.tmp"]
    for path in leftovers + kept:
        path.write_bytes(b"half a write")
    process = RegistryProcess(tmp_path).start()
    try:
        assert not any(path.exists() for path in leftovers)
        assert all(path.exists() for path in kept)
        assert any("removed 3 temp file(s)" in line for line in process.output)
    finally:
        process.stop()
