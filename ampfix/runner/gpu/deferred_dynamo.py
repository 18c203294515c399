"""Imports ``torch._dynamo`` when the script uses the compiler, not when it makes its first optimizer.

torch's optimizers import ``torch._dynamo`` on their first call, eager or not: ``Optimizer.add_param_group``
(and ``zero_grad``, ``state_dict``, ``load_state_dict``) are ``@torch._disable_dynamo``, whose wrapper imports it
to ask for its disabled twin, and each ``step()`` calls ``torch._dynamo.graph_break()``. The import takes longer
than ``import torch`` itself (1.2 s of a 3.6 s run of ``fixtures/run/cnn_amp.py`` on a 2-core machine), in every
run, for a compiler most scripts never start.

Until the real module is imported nothing can be compiling, and those two calls mean nothing: in eager mode
``graph_break()`` does nothing, and a function's disabled twin runs it as it is (it only clears a frame
evaluation callback that no compiler has set). So a stand-in answers exactly those two: ``graph_break``, and
``disable`` when torch's own ``_disable_dynamo`` wrapper asks it (the function itself is handed back, and
the wrapper keeps it as the twin). Anything else asked of ``torch._dynamo`` (``torch.compile``, a script's own
``torch._dynamo.disable``, ``is_compiling``, ``import torch._dynamo.config``) imports the real module first, and the
functions handed back lose their kept twin, so that torch's wrapper asks the real compiler on their next call:
from then on torch runs as it does anywhere. What a script can tell apart is when the import happens (its side
effects, such as ``torch.manual_seed`` wrapped as a disabled function, come with it), not what any call does.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

NAME = "torch._dynamo"
# The attribute torch's `_disable_dynamo` wrapper keeps a function's disabled twin in.
TWIN_ATTRIBUTE = "__dynamo_disable"
_OWN = frozenset({"_torch", "_compile_file", "_lock", "_real", "_handed_back", "_finder", "_after_import"})


class DeferredDynamo(ModuleType):
    """What ``sys.modules["torch._dynamo"]`` holds until the real module is needed."""

    def __init__(self, torch: ModuleType) -> None:
        super().__init__(NAME)
        folder = os.path.join(os.path.dirname(torch.__file__ or ""), "_dynamo")
        # Set, not looked up: `import torch._dynamo.X` reads the parent's __path__ before any finder runs, and
        # _Submodules must be the first to see it (it imports the real module, which imports its own X).
        self.__path__ = [folder]
        # What code that walks sys.modules reads of each (the runner's own list of the script's modules at exit):
        # no reason to import the compiler.
        self.__file__ = os.path.join(folder, "__init__.py")
        self._torch = torch
        self._compile_file = os.path.abspath(torch._compile.__file__ or "")
        self._lock = threading.RLock()
        self._real: ModuleType | None = None
        self._handed_back: list[Any] = []  # functions the wrapper keeps as their own disabled twin
        self._finder = _Submodules(self)
        self._after_import: list[Callable[[], None]] = []  # what the runner changes in the real compiler
        self.graph_break = self._graph_break
        self.disable = self._disable

    def install(self) -> None:
        sys.modules[NAME] = self
        self._torch._dynamo = self  # type: ignore[attr-defined]  # torch binds it lazily: not in its stubs
        sys.meta_path.insert(0, self._finder)

    def real(self) -> ModuleType:
        with self._lock:
            if self._real is None:
                if sys.modules.get(NAME) is self:
                    del sys.modules[NAME]
                if self._torch.__dict__.get("_dynamo") is self:
                    del self._torch._dynamo
                if self._finder in sys.meta_path:
                    sys.meta_path.remove(self._finder)
                self._real = importlib.import_module(NAME)
                for function in self._handed_back:
                    function.__dict__.pop(TWIN_ATTRIBUTE, None)
                self._handed_back.clear()
                for callback in self._after_import:
                    callback()
            return self._real

    def after_import(self, callback: Callable[[], None]) -> None:
        """``callback()`` right after the real module is imported (at once if it already is)."""
        with self._lock:
            if self._real is None:
                self._after_import.append(callback)
                return
        callback()

    def __getattr__(self, name: str) -> Any:
        if name in _OWN:
            raise AttributeError(name)  # not set yet: __init__ is running
        return getattr(self.real(), name)

    def _graph_break(self, *args: Any, **kwargs: Any) -> Any:
        if self._real is None:
            return None  # eager: there is no graph to break
        return self._real.graph_break(*args, **kwargs)

    def _disable(self, fn: Any = None, *args: Any, **kwargs: Any) -> Any:
        if self._real is None and fn is not None and self._asked_by_torchs_wrapper():
            with self._lock:
                if self._real is None:
                    self._handed_back.append(fn)
                    return fn
        return self.real().disable(fn, *args, **kwargs)

    def _asked_by_torchs_wrapper(self) -> bool:
        caller = sys._getframe(2)  # 0: this, 1: _disable, 2: its caller
        return os.path.abspath(caller.f_code.co_filename) == self._compile_file


class _Submodules(importlib.abc.MetaPathFinder):
    """``import torch._dynamo.X`` while the stand-in is in place: the real module is imported first (it imports
    its own X), and X is then that module, not a second copy of it."""

    def __init__(self, deferred: DeferredDynamo) -> None:
        self._deferred = deferred

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(NAME + "."):
            return None
        self._deferred.real()
        existing = sys.modules.get(fullname)
        if existing is None:
            return None  # a submodule the real package does not import itself: the usual finders load it
        return importlib.machinery.ModuleSpec(fullname, _Existing(existing))


class _Existing(importlib.abc.Loader):
    def __init__(self, module: ModuleType) -> None:
        self._module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._module

    def exec_module(self, module: ModuleType) -> None:
        pass


def install(torch: ModuleType) -> None:
    """Right after ``import torch``, before the script's first optimizer; a torch that already imported its
    compiler (or has none: no ``torch._compile``) is left as it is."""
    if NAME in sys.modules or not hasattr(torch, "_compile"):
        return
    DeferredDynamo(torch).install()


def when_imported(callback: Callable[[], None]) -> None:
    """``callback()`` once the real ``torch._dynamo`` is imported: now if it is (or if torch has no stand-in, as
    :func:`install` leaves a torch without ``torch._compile``), else right after the stand-in imports it."""
    module = sys.modules.get(NAME)
    if isinstance(module, DeferredDynamo):
        module.after_import(callback)
    else:
        callback()
