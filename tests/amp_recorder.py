"""Run fixture scripts under torch and record every AMP object they create, as JSON.

Usage: python tests/amp_recorder.py [--as-script] OUTPUT.json SCRIPT.py [SCRIPT.py ...]

`--as-script`: each script runs as `python SCRIPT.py` runs it, its own folder first on ``sys.path`` (a folder of
scripts that import each other: `from engine import train_one_epoch`); the modules it imported from that folder
are forgotten after it, so the next script imports its own.

The torch oracle (tests/test_equivalence.py) runs the ``.in.py`` files in one process and the ``.out.py``
files in another, then compares what each file recorded.

What is recorded is the *bound arguments* of the new-API entry points, which the deprecated ones call
(checked on torch 2.13's source):

- ``torch.amp.autocast_mode.autocast.__init__``: ``torch.cuda.amp.autocast.__init__`` and
  ``torch.cpu.amp.autocast.__init__`` call ``super().__init__("cuda"/"cpu", enabled=..., dtype=...,
  cache_enabled=...)``; ``torch.autocast`` and ``torch.amp.autocast`` are this very class.
  Patched on the class, so every subclass reaches it.
- ``torch.amp.grad_scaler.GradScaler.__init__``: ``torch.cuda.amp.GradScaler.__init__`` (and the cpu one)
  call ``super().__init__("cuda"/"cpu", init_scale=..., ...)``.
- ``custom_fwd`` / ``custom_bwd``: the old functions call
  ``functools.partial(torch.amp.custom_fwd, device_type="cuda")(...)``, i.e. they look the new function up
  as an attribute of the *package* ``torch.amp`` at call time; the new function, called without ``fwd``,
  returns ``functools.partial(custom_fwd, ...)`` which looks it up as a global of
  ``torch.amp.autocast_mode``. Both attributes are patched with the same wrapper.
  Only the call that actually decorates a function (``fwd``/``bwd`` not None) is recorded:
  ``@torch.cuda.amp.custom_fwd`` makes one call, ``@torch.amp.custom_fwd(device_type="cuda")`` makes two
  (a factory call, then the decoration), and the decoration is what matters.
- ``torch.amp.autocast_mode._cast``: the old ``torch.cuda.amp.autocast_mode._cast`` calls it through the
  module attribute. ``_cast`` recurses through the same global, so only the outermost call is recorded.
  The calls custom_fwd / custom_bwd themselves make (``_cast`` and ``autocast`` objects, in
  ``torch.amp.autocast_mode``) are their behaviour, not calls the script makes, and depend on whether
  autocast is really on: they are not recorded (``_INTERNAL``).

Probes, kept apart from the records (they describe what the objects do, which the device decides):
on entering an autocast, the dtype a linear layer returns inside it and the autocast dtype and cache setting
in force inside the region (``torch.get_autocast_dtype(device)``, ``torch.is_autocast_cache_enabled()``);
after a GradScaler is built, its ``is_enabled()``. They show that an AMP path moved to the CPU really runs in lower precision.

Normalisation: ``dtype=None`` for autocast means ``torch.get_autocast_dtype(device_type)`` (float16 for
cuda, bfloat16 for cpu unless the program changed it) and ``cache_enabled=None`` means
``torch.is_autocast_cache_enabled()``; both are replaced by the value they stand for at the time of the
call, because the old classes pass the concrete defaults. dtypes are recorded as strings, functions by
qualified name.

Each script runs through ``runpy.run_path(path, run_name="__main__")`` in a fresh namespace, with
``warnings.simplefilter("always")`` so every FutureWarning is seen; the FutureWarnings that mention
``torch.cuda.amp`` / ``torch.cpu.amp`` are reported. The script's stdout/stderr are swallowed. Between
scripts the records are cleared and torch's global autocast state is reset to its defaults, so the scripts
of one list do not see each other (the patches stay installed: they are stateless apart from the records).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import json
import os
import re
import runpy
import sys
import traceback
import warnings

import torch
import torch.amp
import torch.amp.autocast_mode
import torch.amp.grad_scaler

# The module whose own calls (custom_fwd / custom_bwd casting inputs, building autocasts) are not recorded.
_INTERNAL = "torch.amp.autocast_mode"
RECORDS: list[dict] = []
PROBES: list[dict] = []
_DEPRECATED = ("torch.cuda.amp", "torch.cpu.amp")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    qualname = getattr(value, "__qualname__", None)
    if callable(value) and isinstance(qualname, str):
        return f"<callable {getattr(value, '__module__', '?')}.{qualname}>"
    return f"<{type(value).__qualname__} {_ADDRESS.sub('', repr(value))}>"


def _bound(func, args, kwargs) -> dict:
    bound = inspect.signature(func).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _patch_autocast() -> None:
    cls = torch.amp.autocast_mode.autocast
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__") == _INTERNAL:
            self._ampfix_internal = True
            return original(self, *args, **kwargs)
        arguments = _bound(original, (self, *args), kwargs)
        arguments.pop("self")
        device = arguments["device_type"]
        if arguments["dtype"] is None and isinstance(device, str):
            arguments["dtype"] = torch.get_autocast_dtype(device)
        if arguments["cache_enabled"] is None:
            arguments["cache_enabled"] = torch.is_autocast_cache_enabled()
        RECORDS.append({"api": "autocast", **{k: _jsonable(v) for k, v in arguments.items()}})
        return original(self, *args, **kwargs)

    cls.__init__ = __init__
    enter = cls.__enter__

    @functools.wraps(enter)
    def __enter__(self):
        result = enter(self)
        if getattr(self, "_ampfix_internal", False):
            return result
        output = torch.nn.functional.linear(torch.ones(1, 2), torch.ones(2, 2))
        PROBES.append({"api": "autocast", "device_type": self.device, "enabled": self._enabled,
                       "dtype": str(self.fast_dtype), "linear_dtype": str(output.dtype),
                       # what is in force inside the region: a nested torch.amp.autocast(device) would take these
                       "region_dtype": str(torch.get_autocast_dtype(self.device)),
                       "region_cache_enabled": torch.is_autocast_cache_enabled()})
        return result

    cls.__enter__ = __enter__


def _patch_grad_scaler() -> None:
    cls = torch.amp.grad_scaler.GradScaler
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        arguments = _bound(original, (self, *args), kwargs)
        arguments.pop("self")
        RECORDS.append({"api": "GradScaler", **{k: _jsonable(v) for k, v in arguments.items()}})
        result = original(self, *args, **kwargs)
        PROBES.append({"api": "GradScaler", "device": self._device, "is_enabled": self.is_enabled()})
        return result

    cls.__init__ = __init__


def _patch_decorator_factory(name: str, fn_param: str) -> None:
    original = getattr(torch.amp.autocast_mode, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        arguments = _bound(original, args, kwargs)
        if arguments[fn_param] is not None:
            RECORDS.append({"api": name, **{k: _jsonable(v) for k, v in arguments.items()}})
        return original(*args, **kwargs)

    setattr(torch.amp.autocast_mode, name, wrapper)  # looked up by the partial the new function returns
    setattr(torch.amp, name, wrapper)  # looked up by the old torch.cuda.amp function, and by user code


def _patch_cast() -> None:
    original = torch.amp.autocast_mode._cast
    depth = 0

    @functools.wraps(original)
    def _cast(*args, **kwargs):
        nonlocal depth
        if depth == 0 and sys._getframe(1).f_globals.get("__name__") != _INTERNAL:
            arguments = _bound(original, args, kwargs)
            value = arguments.pop("value")
            RECORDS.append(
                {
                    "api": "_cast",
                    "value_type": type(value).__qualname__,
                    **{k: _jsonable(v) for k, v in arguments.items()},
                }
            )
        depth += 1
        try:
            return original(*args, **kwargs)
        finally:
            depth -= 1

    torch.amp.autocast_mode._cast = _cast


# The autocast state functions (AMP007-AMP009): each old per-device name and each device-generic one, as
# (operation, device or None: the device is the first argument, or "cuda" when the call gives none).
_STATE_FUNCTIONS = {
    **{f"get_autocast_{d}_dtype": ("get_dtype", dev) for d, dev in
       (("gpu", "cuda"), ("cpu", "cpu"), ("xla", "xla"), ("ipu", "ipu"))},
    **{f"set_autocast_{d}_dtype": ("set_dtype", dev) for d, dev in
       (("gpu", "cuda"), ("cpu", "cpu"), ("xla", "xla"), ("ipu", "ipu"))},
    **{f"is_autocast_{d}_enabled": ("is_enabled", d) for d in ("cpu", "xla", "ipu")},
    **{f"set_autocast_{d}_enabled": ("set_enabled", d) for d in ("cpu", "xla", "ipu")},
    "get_autocast_dtype": ("get_dtype", None),
    "set_autocast_dtype": ("set_dtype", None),
    "is_autocast_enabled": ("is_enabled", None),
    "set_autocast_enabled": ("set_enabled", None),
}
# The DeprecationWarning each old one gives (from C++): `torch.get_autocast_gpu_dtype() is deprecated. ...`
_STATE_DEPRECATED = re.compile(r"torch\.\w+\(\w*\) is deprecated\. Please use torch\.")


def _patch_state_functions() -> None:
    """Record the state read and written: the operation, the device it is for, the value set or returned."""
    for name, (op, device) in _STATE_FUNCTIONS.items():
        original = getattr(torch, name)

        def wrapper(*args, _original=original, _op=op, _device=device):
            result = _original(*args)
            caller = sys._getframe(1).f_globals
            if caller is globals() or caller.get("__name__") != "__main__":
                return result  # torch's own (autocast's __enter__) and the recorder's probes: not the script's
            rest = list(args)
            dev = _device
            if dev is None:  # the generic name: the device first, or CUDA with none (the one-argument forms)
                has_device = len(rest) == (1 if _op in ("get_dtype", "is_enabled") else 2)
                dev = rest.pop(0) if has_device else "cuda"
            value = rest[0] if _op.startswith("set") else result
            RECORDS.append({"api": "autocast_state", "op": _op, "device_type": dev, "value": _jsonable(value)})
            return result

        setattr(torch, name, wrapper)


def install() -> None:
    _patch_state_functions()
    _patch_autocast()
    _patch_grad_scaler()
    _patch_decorator_factory("custom_fwd", "fwd")
    _patch_decorator_factory("custom_bwd", "bwd")
    _patch_cast()


_DEFAULT_DTYPES = {dev: torch.get_autocast_dtype(dev) for dev in ("cpu", "cuda")}


def _reset_torch_state() -> None:
    for dev, dtype in _DEFAULT_DTYPES.items():
        torch.set_autocast_enabled(dev, False)
        torch.set_autocast_dtype(dev, dtype)
    torch.set_autocast_cache_enabled(True)
    torch.clear_autocast_cache()
    torch.manual_seed(0)


def run_one(path: str, as_script: bool = False) -> dict:
    _reset_torch_state()
    RECORDS.clear()  # after the reset, whose state calls are not the script's
    PROBES.clear()
    sink = io.StringIO()
    error = None
    argv = sys.argv
    sys.argv = [path]
    folder = os.path.dirname(os.path.abspath(path))
    before = set(sys.modules)
    if as_script:
        sys.path.insert(0, folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                runpy.run_path(path, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error = f"SystemExit({exc.code!r})"
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            error += "\n" + traceback.format_exc(limit=-3)
        finally:
            sys.argv = argv
            if as_script:
                sys.path.remove(folder)
                _forget_modules(set(sys.modules) - before, folder)
    deprecations = sorted(
        {
            str(w.message)
            for w in caught
            if (issubclass(w.category, FutureWarning) and any(d in str(w.message) for d in _DEPRECATED))
            or (issubclass(w.category, DeprecationWarning) and _STATE_DEPRECATED.search(str(w.message)))
        }
    )
    return {
        "records": list(RECORDS),
        "probes": list(PROBES),
        "deprecation_warnings": deprecations,
        "error": error,
        "output": sink.getvalue()[-2000:],
    }


def _forget_modules(names: set[str], folder: str) -> None:
    """Drop the modules of `names` loaded from below `folder` (a script's own modules, not torch's)."""
    below = os.path.join(folder, "")
    for name in names:
        if (getattr(sys.modules[name], "__file__", None) or "").startswith(below):
            del sys.modules[name]


def main(argv: list[str]) -> int:
    as_script = argv[:1] == ["--as-script"]
    out_json, *scripts = argv[as_script:]
    install()
    results = {script: run_one(script, as_script) for script in scripts}
    with open(out_json, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
