"""Package documents are files named index.html: hosts that label them text/html must not let a
browser run markup taken from a package's fields."""

from __future__ import annotations

import json

from registry_gen.build import run_build
from registry_gen.settings import Settings
from tests.support import make_tarball

HOSTILE = '<img src=x onerror="document.title=1">&<script>alert(1)</script>'


def test_json_documents_carry_no_raw_markup_and_parse_to_the_same_values(settings: Settings) -> None:
    make_tarball(
        settings.content_dir, "xss-probe", "1.0.0", keywords=[HOSTILE], author={"name": HOSTILE},
        files={"README.md": "# hi " + HOSTILE, "index.js": ""},
    )
    (settings.content_dir / "registry-meta.json").write_text(
        json.dumps({"name": "xss-probe", "maintainers": [{"name": "no-email"}], "deprecated": {"1.0.0": HOSTILE}})
    )
    result = run_build(settings)
    assert result.errors == []
    json_files = [
        p for p in settings.out_dir.rglob("*")
        if p.is_file() and ".registry-gen" not in p.parts and "web" not in p.parts and p.suffix not in (".gz", ".tgz")
    ]
    assert len(json_files) >= 5
    for path in json_files:
        raw = path.read_bytes()
        assert b"<" not in raw and b">" not in raw, path
    document = json.loads((settings.out_dir / "xss-probe" / "index.html").read_bytes())
    assert document["description"] == "xss-probe test package"
    assert document["keywords"] == [HOSTILE]
    assert document["versions"]["1.0.0"]["deprecated"] == HOSTILE
    assert HOSTILE in document["readme"]
    # A maintainer without an email (hand-written meta) still gets a page.
    page = (settings.out_dir / "-" / "web" / "package" / "xss-probe" / "index.html").read_text()
    assert "no-email" in page and "<script>alert(1)" not in page
