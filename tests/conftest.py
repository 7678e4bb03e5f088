from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

from registry_gen.settings import Settings
from tests.realworld.corpus import cache_root
from tests.registry_api.helpers import STARTED
from tests.user_api.pg_server import PostgresServer, start_postgres_or_skip

# Hypothesis keeps its example database and caches (constants, unicode data) in ./.hypothesis, the
# checkout, by default: kept with the other test caches instead, where failing examples are still
# replayed on the next run, and the checkout guard below covers .hypothesis too.
set_hypothesis_home_dir(cache_root() / "hypothesis")

_state_schemas = itertools.count()

# What a registry-gen run with the built-in defaults writes into its working folder: a test that
# lets one of them land in the checkout (a default `data_dir`, a config without its folders) leaks
# accounts, trees or state into the developer's copy, which the next `make run` then serves.
CHECKOUT_OUTPUTS = ("data", "public", "public.state", "state", ".public.lock", ".hypothesis")
_ROOT = Path(__file__).resolve().parent.parent
_outputs_before: set[Path] = set()


def checkout_outputs(root: Path) -> set[Path]:
    """Every file and folder under the checkout's output folders (the folders themselves included)."""
    found = set()
    for name in CHECKOUT_OUTPUTS:
        top = root / name
        if top.exists() or top.is_symlink():
            found.add(top)
            found.update(top.rglob("*") if top.is_dir() else ())
    return found


# The modules that take longest (minutes each in a clean-checkout `make test --durations=0`) run
# first: `make test` hands each xdist worker whole modules (--dist loadscope) in collection order,
# so none of them starts last and leaves the other worker idle while it runs. Only the order
# changes; every other module keeps its place after these.
LONGEST_FIRST = (
    "tests/realworld/test_conformance.py",
    "tests/mirror/test_jest_through_mirror.py",
    "tests/registry_api/test_no_write_lost.py",
    "tests/hostile/test_crash.py",
    "tests/user_api/test_schemathesis.py",
    "tests/storage/test_s3_faults.py",
    "tests/registry_api/test_api_object_store.py",
    "tests/bench/test_bench_scaleout.py",
    "tests/upgrade/test_upgrade_from_b384b22.py",
    "tests/mirror/test_serve_mirror.py",
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Moves the LONGEST_FIRST modules to the front, in that order (a stable sort: the same order
    on every xdist worker, which must collect identical lists)."""
    rank = {module: place for place, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(LONGEST_FIRST)))


def pytest_runtest_setup(item: pytest.Item) -> None:
    STARTED.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test's report carries what its `registry-gen serve` processes logged (their last
    lines, access lines left out): the traceback behind a 500 is only there."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and call.when == "call":
        for number, server in enumerate(STARTED, 1):
            logged = [line for line in server.output if not line.startswith("127.0.0.1 ")]
            report.sections.append((f"registry-gen serve {number} logged", "".join(logged[-80:])))


def pytest_sessionstart(session: pytest.Session) -> None:
    _outputs_before.update(checkout_outputs(_ROOT))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fails the run when it left new files in the checkout's data/, public/, state or .hypothesis folders."""
    if hasattr(session.config, "workerinput"):  # xdist: the controller checks once, after every worker
        return
    new = checkout_outputs(_ROOT) - _outputs_before
    leaked = sorted(str(path.relative_to(_ROOT)) for path in new if path.parent not in new)  # a new folder, not its files
    if leaked:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = "tests left files in the checkout (a default data_dir/out_dir relative to the working folder?): " + ", ".join(leaked)
        if reporter is not None:
            reporter.write_line(f"error: {message}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings over an empty content/ and public/ in a temp folder."""
    content = tmp_path / "content"
    content.mkdir()
    return Settings(content_dir=content, out_dir=tmp_path / "public", base_url="http://127.0.0.1:9/", data_dir=tmp_path / "data")


@pytest.fixture(scope="session")
def state_postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL (Debian's) for the tests of the state on PostgreSQL; each test takes a
    fresh schema of it (`postgres_state_url`)."""
    server = start_postgres_or_skip()
    try:
        yield server
    finally:
        server.stop()


def postgres_state_url(server: PostgresServer) -> str:
    """The URL of a new, empty schema of `server` (isolation without a database per test)."""
    import psycopg

    schema = f"state_{next(_state_schemas)}_{os.getpid()}"
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return server.url(schema=schema)


@pytest.fixture(params=["sqlite", "postgres"])
def any_state_settings(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """`settings` with the state on the embedded default, then on PostgreSQL (the contract's
    conformance: a store-level test runs on both)."""
    if request.param == "sqlite":
        return settings
    return settings.with_updates(database_url=postgres_state_url(request.getfixturevalue("state_postgres")))
