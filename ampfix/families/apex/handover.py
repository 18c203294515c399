"""Why apex.amp used in a method of one class, with initialize in a function that hands that class a flag through
its constructor (espnet's updaters: `train` calls initialize and `BPTTUpdater(..., use_apex=use_apex)`, whose
`update_core` tests `self.use_apex` around scale_loss), is reported and not rewritten, and what to do by hand.

The scaler would have to live in the object, made in its `__init__` from that flag. That changes what the flag means
to every caller of the class, and the callers in other modules cannot be seen: one that ran apex's initialize itself
(espnet's asr_mix, mt and st do, for asr.py's `CustomUpdater`) would get a GradScaler over apex's optimizer, whose
float32 master gradients (O2) only scale_loss fills: no step would change the weights, silently. A rewrite that is
right only for the callers in the file is not made."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Handover:
    """`function` gives `klass` the flag that `method` tests: `tested` (`self.use_apex`), assigned in `__init__`
    from its parameter `parameter`, given `given` (`use_apex=use_apex`) by the call on `line`."""

    method: str
    klass: str
    function: str
    line: int
    given: str
    parameter: str
    tested: str

    def reason(self, opt_level: ast.expr | None, loss: str, optimizer: str) -> str:
        """Why not, and what by hand; `loss` and `optimizer`: what the method gives scale_loss."""
        level = ""
        if opt_level is not None and not isinstance(opt_level, ast.Constant):
            level = (f"; opt_level `{ast.unparse(opt_level)}` is not a literal: a run with O0 (plain float32, loss "
                     "scale 1) must get the flag false, or the scaler and autocast turn mixed precision on")
        return (f"in `{self.method}`: apex.amp is used with no initialize in that function (initialize is in "
                f"`{self.function}`, which hands `{self.klass}` its flag on line {self.line}, `{self.given}`, tested "
                f"in `{self.method}` as `{self.tested}`): the scaler would have to be made in `{self.klass}.__init__` "
                f"from that flag, which changes what the flag means to every caller of `{self.klass}`, those in other "
                "modules too (one that ran apex's initialize itself would get a GradScaler over apex's optimizer: "
                "under O2, whose float32 gradients only scale_loss fills, no step would change the weights); by "
                f"hand, with every caller: `self.scaler = torch.amp.GradScaler(\"cuda\", enabled={self.parameter})` "
                f"in `__init__`, the forward pass in `{self.method}` under `torch.autocast(\"cuda\", "
                f"dtype=torch.float16, enabled={self.tested})`, `self.scaler.scale({loss}).backward()`, "
                f"`self.scaler.step({optimizer})` then `self.scaler.update()`, initialize and its import removed from "
                f"`{self.function}`; O1 also ran the other forward passes (evaluation) in float16{level}")


def handover(parent_of: Callable[[ast.AST], ast.AST | None], method: ast.AST, import_node: ast.ImportFrom,
             initializing: Sequence[ast.AST],
             names_class: Callable[[ast.Name, ast.ClassDef], bool]) -> Handover | None:
    """The flag `method` (a plain method, its `from apex import amp` alone under `if self.<flag>:`) is handed by one
    of `initializing` (the functions that call initialize) through its class's constructor, or None.
    `names_class`: the name resolves to the class (the module's one binding of it)."""
    klass = parent_of(method)
    klass = klass if isinstance(klass, ast.ClassDef) and method in klass.body else None
    if klass is None or not isinstance(method, ast.FunctionDef) or not method.args.args:
        return None
    guard = parent_of(import_node)  # `if self.<flag>:` holding the import directly
    test = guard.test if isinstance(guard, ast.If) and import_node in guard.body else None
    self_name = method.args.args[0].arg
    if not (isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == self_name):
        return None
    init = next((s for s in klass.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    parameter = _assigned_from_parameter(init, test.attr) if init is not None else None
    if init is None or parameter is None:
        return None
    for function in initializing:
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and names_class(call.func, klass):
                given = _argument(call, init, parameter)
                if given is not None:
                    return Handover(method.name, klass.name, getattr(function, "name", "?"), call.lineno, given,
                                    parameter, f"{self_name}.{test.attr}")
    return None


def _assigned_from_parameter(init: ast.FunctionDef, attribute: str) -> str | None:
    """The parameter of `__init__` that its own body assigns to `self.<attribute>` (`self.use_apex = use_apex`)."""
    self_name = init.args.args[0].arg if init.args.args else None
    parameters = {a.arg for a in (*init.args.args[1:], *init.args.kwonlyargs)}
    for statement in init.body:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            continue
        target, value = statement.targets[0], statement.value
        pairs = list(zip(target.elts, value.elts)) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
            and len(target.elts) == len(value.elts) else [(target, value)]  # `self.a, self.flag = a, flag`
        for one, given in pairs:
            if isinstance(one, ast.Attribute) and one.attr == attribute and isinstance(one.value, ast.Name) \
                    and one.value.id == self_name and isinstance(given, ast.Name) and given.id in parameters:
                return given.id
    return None


def _argument(call: ast.Call, init: ast.FunctionDef, parameter: str) -> str | None:
    """How `call` gives `parameter`, as a keyword (`use_apex=use_apex`, a positional argument too), or None."""
    keyword = next((k for k in call.keywords if k.arg == parameter), None)
    if keyword is not None:
        return f"{parameter}={ast.unparse(keyword.value)}"
    names = [a.arg for a in init.args.args]
    position = names.index(parameter) - 1 if parameter in names else -1  # the call's arguments after self
    if 0 <= position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        return f"{parameter}={ast.unparse(call.args[position])}"
    return None
