import sys
from pathlib import Path

# Let test modules import the helpers that live next to them (fixture_cases, ...) in any import mode.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


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
