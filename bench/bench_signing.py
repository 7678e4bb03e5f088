"""What registry signatures add to a full build (issue 17); goal ≤ 1.10× the unsigned build.

The added work is one ECDSA signature per version. The figure times exactly those calls (every
version of the synthetic registry, signed as the build signs them) against the CPU time of the
same full build unsigned, measured in this run; the note also gives an end-to-end comparison of
signed and unsigned full builds (interleaved, CPU time of the build and its workers), which on a
machine shared with other work swings by more than the figure itself.

Run alone with `python -m bench --only signing [--quick]`.
"""

from __future__ import annotations

import json
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.synthetic import SCALES, ensure_registry
from registry_gen.build import run_build
from registry_gen.keyring import load_signer, write_new_key
from registry_gen.settings import Settings

GOAL = 1.10
ROUNDS = 3


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _settings(content: Path, work: Path, key: Path | None) -> Settings:
    return Settings(content_dir=content, out_dir=work / "out", base_url="http://127.0.0.1:4873/", data_dir=work / "data", signing_key=key)


def _full_build_cpu(settings: Settings, keep: bool = False) -> float:
    """CPU seconds of one full build into a fresh tree (worker processes are reaped when the
    build ends, so their time is counted)."""
    shutil.rmtree(settings.out_dir, ignore_errors=True)
    started = _cpu_seconds()
    run_build(settings)
    spent = _cpu_seconds() - started
    if not keep:
        shutil.rmtree(settings.out_dir)
    return spent


def _versions(tree: Path) -> list[tuple[str, str, str]]:
    found = []
    for document in tree.rglob("index.html"):
        relative = document.relative_to(tree).parts
        if relative[0] == "-" or "-" in relative[:-1]:
            continue
        doc = json.loads(document.read_bytes())
        if not isinstance(doc.get("versions"), dict) or doc.get("_id") != doc.get("name"):
            continue  # a dist-tag document
        found.extend((doc["name"], v, d["dist"]["integrity"]) for v, d in doc["versions"].items())
    return found


def run(quick: bool) -> list[dict[str, Any]]:
    scale = 1_000 if quick else 10_000
    content = ensure_registry(SCALES[scale])
    with tempfile.TemporaryDirectory(prefix="bench-signing-") as folder:
        work = Path(folder)
        key = work / "signing.pem"
        write_new_key(key, _settings(content, work, None))
        _full_build_cpu(_settings(content, work, None))  # warm the page cache
        plain, signed = [], []
        for _ in range(ROUNDS):
            plain.append(_full_build_cpu(_settings(content, work, None)))
            signed.append(_full_build_cpu(_settings(content, work, key), keep=True))
        versions = _versions(work / "out")
        signer = load_signer(_settings(content, work, key))
        assert signer is not None
        started = time.process_time()
        for name, version, integrity in versions:
            signer.signature(name, version, integrity)
        signing = time.process_time() - started
    baseline = min(plain)
    return [
        {
            "figure": f"Signing every version of a full build, {scale:,} versions",
            "value": round(signing, 3),
            "unit": "CPU-s",
            "baseline": round(baseline, 3),
            "ratio": round((baseline + signing) / baseline, 3),
            "goal": f"≤ {GOAL}× the same full build unsigned",
            "note": (
                f"{len(versions):,} signatures, {signing / max(len(versions), 1) * 1e6:.0f} µs each (deterministic "
                f"ECDSA P-256); ratio = (unsigned build + signatures) / unsigned build, CPU time of the build and its "
                f"workers, best of {ROUNDS}; end to end, interleaved: signed {min(signed):.2f} CPU-s vs unsigned "
                f"{baseline:.2f} CPU-s (machine noise is of the same order)"
            ),
        }
    ]
