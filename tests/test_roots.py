"""Roots the file does not import (issue 17, point 1): each read as its spelling names, or reported, never silent."""

from __future__ import annotations

from ampfix.engine import Options, check_source, fix_source


def _messages(source: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.message) for f in check_source(source).findings]


def test_a_star_import_may_provide_torch_and_the_message_says_so():
    source = "from models.common import *\nwith torch.cuda.amp.autocast(enabled=fp16):\n    pass\n"
    assert _messages(source) == [(2, "AMP001", "`torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "
                                  '"cuda" (`torch` not bound in this file; read as the module `torch` that the star '
                                  "import on line 1 may provide)")]


def test_dynamic_imports_are_read_as_the_module_they_name():
    source = 'th = __import__("torch.nn")\ntorch = importlib.import_module("torch")\nth.cuda.amp.GradScaler()\n'
    assert _messages(source) == [
        (3, "AMP002", '`torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with device "cuda" '
         "(`th` bound by `__import__('torch.nn')` on line 1)")]
    assert fix_source(source).new_source == source.replace("th.cuda.amp.GradScaler()", 'th.amp.GradScaler("cuda")')


def test_unresolved_roots_are_reported_with_the_reason():
    source = ("def build(th, enabled):\n    return th.cuda.amp.autocast(enabled)\n\n\n"
              "scaler = torch.cuda.amp.GradScaler()\n")
    assert _messages(source) == [
        (2, "AMP013", "`th.cuda.amp.autocast`: `th` is a parameter of `build`; if `th` is the `torch` module, this is "
         "the deprecated `torch.cuda.amp.autocast` (`torch.amp.autocast` instead)"),
        (5, "AMP013", "`torch.cuda.amp.GradScaler`: `torch` is not bound in this file; if `torch` is the `torch` "
         "module, this is the deprecated `torch.cuda.amp.GradScaler` (`torch.amp.GradScaler` instead)"),
    ]
    assert fix_source(source, Options(unsafe_fixes=True)).new_source == source


def test_a_star_import_does_not_make_another_name_torch():
    # `cuda` spelled bare is not the module `torch.cuda` by its spelling: reported, not rewritten.
    source = "from utils import *\nx = cuda.amp.custom_fwd(cast_inputs=None)\n"
    ((line, code, message),) = _messages(source)
    assert (line, code) == (2, "AMP013")
    assert message.startswith("`cuda.amp.custom_fwd`: `cuda` is not bound in this file (the star import on line 1 "
                              "may provide it); if `cuda` is the `torch.cuda` module")


def test_a_name_taken_from_another_module_is_reported_not_read_as_that_module():
    # thinc 8.1.10 re-exports torch from thinc/compat.py: `from ..compat import torch`, `from thinc.compat import torch`.
    source = "from thinc.compat import torch\nscaler = torch.cuda.amp.GradScaler()\n"
    assert _messages(source) == [
        (2, "AMP013", "`torch.cuda.amp.GradScaler`: `torch` is imported from `thinc.compat` on line 1, which the check "
         "cannot follow; if `torch` is the `torch` module, this is the deprecated `torch.cuda.amp.GradScaler` "
         "(`torch.amp.GradScaler` instead)")]
    assert fix_source(source, Options(unsafe_fixes=True)).new_source == source
    # A module imported by name is that module's (numpy has no cuda.amp); torch's own names are rewritten.
    assert _messages("import numpy as np\nx = np.cuda.amp.GradScaler()\n") == []
    assert [code for _, code, _ in _messages("from torch import cuda\nx = cuda.amp.GradScaler()\n")] == ["AMP002"]
