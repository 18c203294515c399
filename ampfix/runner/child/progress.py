"""A long run's progress of its own, on a terminal: every ``PROGRESS_EVERY_S`` seconds, one line on stderr
with the optimizer steps so far and their rate, between the script's own lines.

Only the process that runs the script, and only when its stderr is a terminal: a pipe, a CI log or
``verify``'s captured sides get nothing (the summary at the end has the duration and the rate).
"""

from __future__ import annotations

import _thread
import sys
import time
from typing import Any

PROGRESS_EVERY_S = 30.0


def start(recorder: Any, stream: Any = None) -> bool:
    """Report ``recorder``'s steps on ``stream`` (stderr) from a thread of its own; whether it does."""
    stream = sys.stderr if stream is None else stream
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):
        return False
    # A bare thread, as for the SIGTERM watch: not a threading.Thread the script could see or wait for.
    _thread.start_new_thread(_report, (recorder, stream, time.monotonic()))
    return True


def progress_line(steps: int, seconds: float) -> str:
    rate = f" ({steps / seconds:.3g} steps/s)" if steps and seconds > 0 else ""
    return f"ampfix run: {steps} optimizer steps after {seconds:.0f} s{rate}"


def _report(recorder: Any, stream: Any, started: float) -> None:
    while True:
        time.sleep(PROGRESS_EVERY_S)
        try:
            stream.write(progress_line(recorder.optimizer_steps, time.monotonic() - started) + "\n")
            stream.flush()
        except (OSError, ValueError):  # the terminal went away, or the stream was closed at exit
            return
