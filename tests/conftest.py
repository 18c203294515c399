import sys
from pathlib import Path

import pytest

# Let test modules import the helpers that live next to them (fixture_cases, ...) in any import mode.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)



@pytest.fixture(autouse=True)
def _cache_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite never touches the developer's ~/.cache: ampfix's cache of the project walks' answers goes to a
    folder of the session (its CLI subprocesses inherit the variable); a test of the cache points it elsewhere."""
    monkeypatch.setenv("AMPFIX_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ampfix-cache"))
