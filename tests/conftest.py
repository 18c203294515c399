import sys
from pathlib import Path

# Let test modules import the helpers that live next to them (fixture_cases, ...) in any import mode.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
