import os
import sys
from pathlib import Path

import pytest

# Let test modules import the helpers that live next to them (fixture_cases, ...) in any import mode.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """The suite never touches the developer's ~/.cache: ampfix's cache of the project walks' answers goes to a
    folder of the session. Set before collection, so that an environment a test module copies when imported
    (test_precommit's `ENV`, for the hooks pre-commit runs) holds it too, as every CLI subprocess does; a test of
    the cache points it elsewhere (monkeypatch)."""
    import tempfile

    config.stash[_CACHE] = os.environ["AMPFIX_CACHE_DIR"] = tempfile.mkdtemp(prefix="ampfix-test-cache-")
    _compile_ampfix()


def _compile_ampfix() -> None:
    """Writes the bytecode of ampfix's modules (those not current) before any test starts a Python that imports
    them. The suite starts hundreds (the CLI, the runner's parents and children); where the environment sets
    PYTHONDONTWRITEBYTECODE none of them writes it, and each compiled ampfix again: 0.8 s of CPU for a `check`
    of one file, 0.2 s with the bytecode (an installed ampfix has it: pip compiles what it installs)."""
    import compileall

    import ampfix

    compileall.compile_dir(Path(ampfix.__file__).resolve().parent, quiet=1, workers=1)


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    folder = config.stash.get(_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_finish(session) -> None:
    """A selected test module with slow work to prepare (`prepare_in_background(session)`: the runner modules'
    torch jobs, tests/runner_jobs.py; test_precommit's pip install) starts it now, in threads, in the order the
    modules run, so that it overlaps the tests that run first (which use one core, or wait on nothing)."""
    started = set()
    for item in session.items:
        module = getattr(item, "module", None)
        prepare = getattr(module, "prepare_in_background", None)
        if prepare is not None and module not in started:
            started.add(module)
            prepare(session)


def pytest_sessionfinish(session, exitstatus) -> None:
    import runner_jobs

    runner_jobs.shutdown()
