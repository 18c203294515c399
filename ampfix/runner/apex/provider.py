"""Provides ``apex`` and ``apex.amp`` to a script when no installed apex has them.

Runs in the child, torch-free (installed before the script starts). The finder sits last on
``sys.meta_path``: an installed apex, and an ``apex.amp`` an old apex still ships, are found first
and win. When nothing provides ``apex``, an empty ``apex`` package stands in, with ``apex.amp``
imported into it (``import apex; apex.amp.initialize(...)`` works as with the old apex); when an
installed apex lacks ``amp`` (apex deleted it in 2025), ``from apex import amp`` and ``import
apex.amp`` get the emulation; ``apex.parallel`` likewise gets its single-process stand-ins
(:mod:`apex_parallel`: NVIDIA's own examples import it unconditionally), and ``apex.fp16_utils``,
``apex.optimizers`` and ``apex.multi_tensor_apply`` get their names (:mod:`others`: ``to_python_float`` is
apex's own, a call of any other fails as not emulated). The rest of apex is not emulated: its import is recorded
and fails as it would.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
from types import FrameType, ModuleType

from ampfix.runner.apex import others
from ampfix.runner.config import RUNNER_DIR
from ampfix.runner.trace.observe import Recorder, Site
from ampfix.runner.trace.patching import replace

PACKAGE, AMP, PARALLEL = "apex", "apex.amp", "apex.parallel"


class ApexProvider(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    @classmethod
    def install(cls, recorder: Recorder) -> None:
        sys.meta_path.append(cls(recorder))

    def find_spec(self, fullname, path, target=None):
        if fullname in (PACKAGE, AMP, PARALLEL, *others.NAMES):
            return importlib.util.spec_from_loader(fullname, self, is_package=fullname == PACKAGE)
        if fullname.startswith(PACKAGE + "."):
            self._recorder.unemulated_use(
                f"{fullname} (not installed; ampfix emulates only apex.amp's O1, apex.parallel and "
                f"the names of {', '.join(others.NAMES)})",
                _importing_site(),
            )
        return None

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        if module.__name__ == PACKAGE:
            module.__doc__ = ("Stand-in for NVIDIA apex (not installed): only apex.amp and apex.parallel, "
                              "emulated by ampfix run.")
            replace(module, "amp", importlib.import_module(AMP))
            return
        if module.__name__ == PARALLEL:
            # torch: only when the script asks for apex.parallel
            from ampfix.runner.apex import parallel as apex_parallel

            self._recorder.emulated_use(apex_parallel.IMPORTED, _importing_site())
            apex_parallel.populate(module, self._recorder)
            return
        if module.__name__ in others.NAMES:
            others.populate(module, self._recorder)
            return
        from ampfix.runner.apex import amp as apex_amp  # torch: only when the script asks for apex.amp

        apex_amp.populate(module, self._recorder)


def _importing_site() -> Site:
    """The import statement's line: the first frame outside the import machinery and the runner."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(("<frozen", RUNNER_DIR)) and "importlib" not in filename.split(os.sep)[-2:-1]:
            return Site(filename, frame.f_lineno)
        frame = frame.f_back
    return Site("<unknown>", 0)
