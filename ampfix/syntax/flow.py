"""Where a value goes in its module: a name referenced without a call (`amp_autocast = torch.cuda.amp.autocast`)
followed through assignments, conditional expressions (`x if cond else nullcontext`), keyword `functools.partial`s,
attributes of `self` read in the methods of its class, arguments of the module's own functions (by keyword and
by position), and returns of its plain functions (to the calls of what they return), to every place it is called;
or to the first place it goes that cannot be followed (an escape: returned by a method, passed to a function neither
of the module nor of another module of the project, stored where it cannot be read back). And the reads of a
class's name, each followed to the constructions it reaches (`constructions`): the question a GradScaler subclass
asks of its module and of the project's other modules; and the reads of a function's name to the calls of what it
returns (`results`).

Read from the module's syntax: the walk's chains and scopes (`ampfix.syntax.bindings`) and each node's parent. A
name at the top of the module (a variable, a function whose value it returns) is read by other modules too: given
the project (`ampfix.core.project.ProjectModules`), their calls are asked of it, followed there the same way;
without it, such a name is an escape. So is a value passed to a function another module of the project defines
(`from engine import train_one_epoch`): that function's calls of its parameter are asked of the project.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ampfix.core.project import Calls, ProjectModules
from ampfix.syntax.bindings import ChainRef, Scope, Walker, attribute_chain, spelled_imports
from ampfix.syntax.parents import Parents

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# A value returned by a function: the calls of the function (each a place it reaches), and those of other modules.
_Returned = tuple[list[tuple[ast.expr, "Scope"]], "Calls | None"]
_LIMIT = 200  # places followed for one value: beyond, it is an escape (said so)


@dataclass(frozen=True)
class Flow:
    calls: tuple[ast.Call, ...]  # every call of the value found
    escape: str | None  # where the value goes that cannot be followed (for a message), or None: every use is a call
    # Calls in the project's other modules, of what a function of this module returns (`get_autocast(p)()`), as
    # `path:line`; and the first of them that passes an argument by position.
    remote: tuple[str, ...] = ()
    remote_positional: str | None = None


class _Module:
    """The module's facts a flow reads, each gathered once (`ModuleFlows`)."""

    def __init__(self, tree: ast.Module, walker: Walker, parents: Parents) -> None:
        self.walker, self.parent_of = walker, parents.of
        self.loads: dict[str, list[ChainRef]] = {}
        self.scopes: dict[int, Scope] = {}  # id(def) -> the scope of its body
        for ref in walker.chains:
            if ref.role != "store":
                self.loads.setdefault(ref.parts[0], []).append(ref)
            if ref.scope.node is not None:
                self.scopes[id(ref.scope.node)] = ref.scope
        self.nonlocal_names = {name for node in ast.walk(tree) if isinstance(node, ast.Nonlocal) for name in node.names}
        # Each string literal's first line: an attribute named by a string (`getattr(self, "amp_cm")`) is read
        # where no chain shows it.
        self.strings: dict[str, int] = {}
        for literal in walker.literals:
            if isinstance(literal.value, str):
                self.strings.setdefault(literal.value, literal.lineno)


class ModuleFlows:
    """`follow(node, scope)`: the flow of the value of the expression `node`. `partial(func, scope)` says whether a
    callee is `functools.partial` (resolved by the caller, through the file's imports)."""

    def __init__(self, tree: ast.Module, walker: Walker, parents: Parents,
                 is_partial: Callable[[ast.expr, Scope], bool], project: ProjectModules | None = None) -> None:
        self._module = _Module(tree, walker, parents)
        self._is_partial = is_partial
        # Asked for the calls the project's other modules make of a top-level name of this module (a variable, or
        # what a function returns); None: no project to ask, so a value bound or returned there escapes.
        self._project = project

    def follow(self, node: ast.expr, scope: Scope) -> Flow:
        work: list[tuple[ast.expr, Scope]] = [(node, scope)]
        calls: list[ast.Call] = []
        remote: list[str] = []
        positional: str | None = None
        seen: set[int] = set()
        while work:
            if len(seen) > _LIMIT:
                return Flow(tuple(calls), f"it reaches more than {_LIMIT} places")
            node, scope = work.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            step = self._step(node, scope)
            if isinstance(step, str):
                return Flow(tuple(calls), step)
            if isinstance(step, ast.Call):
                calls.append(step)
            elif isinstance(step, tuple):  # returned: the calls of the function, here and in other modules
                work += step[0]
                if step[1] is not None:
                    remote += step[1].seen
                    positional = positional or step[1].positional
            else:
                work += step
        return Flow(tuple(sorted(calls, key=lambda c: (c.lineno, c.col_offset))), None, _places(remote), positional)

    def _named(self, name: str) -> Flow | None:
        named = self._module.strings.get(name)
        if named is None:
            return None
        return Flow((), f"a string on line {named} names `{name}` (`__all__`, `getattr`), which is not followed")

    def results(self, reads: list[tuple[ChainRef, int]], name: str) -> Flow:
        """Where the values calls of a function return go, from each of `reads` of its name (a chain and how many of
        its parts name it): each read must be a call, whose value is followed (`get_autocast(p)`, then `with
        autocast():`); any other read, or a string that is its name, is an escape."""
        named = self._named(name)
        if named is not None:
            return named
        flows: list[Flow] = []
        for ref, length in reads:
            call = self._module.parent_of(ref.node)
            if len(ref.parts) != length or not (isinstance(call, ast.Call) and call.func is ref.node):
                return Flow((), f"`{'.'.join(ref.parts)}` on line {ref.node.lineno} is read, not called")
            flows.append(self.follow(call, ref.scope))
        return _merged(flows)

    def constructions(self, reads: list[tuple[ChainRef, int]], name: str, types: bool = True) -> Flow:
        """Where a class's value goes from each of `reads` (a chain and how many of its parts name the class: 1 for
        `S`, 2 for `mod.S`): its calls (the constructions), or the first read that is neither a construction nor a
        type (`isinstance`, an annotation, a test against None). A string that is the class's name (`__all__`,
        `getattr(mod, "S")`), an attribute of the class, a subclass: escapes; and a type, where not `types` (a
        variable's value, which a partial will stand in for)."""
        named = self._named(name)
        if named is not None:
            return named
        flows: list[Flow] = []
        for ref, length in reads:
            if len(ref.parts) > length:
                return Flow((), f"`{'.'.join(ref.parts)}` on line {ref.node.lineno} reads an attribute of it")
            if ref.role == "none_test" or ref.role == "type" and types:
                continue
            if ref.role == "type":  # a value a partial stands in for: no type
                return Flow((), f"`{'.'.join(ref.parts)}` on line {ref.node.lineno} stands where a type is read")
            if ref.role == "base":
                return Flow((), f"a class on line {ref.node.lineno} derives from it")
            flows.append(self.follow(ref.node, ref.scope))
        return _merged(flows)

    def parameter(self, function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> Flow:
        """Where the value passed to `function`'s parameter `name` goes (asked by another module, which passes it):
        the calls of each read of the parameter in the function, or the first escape."""
        inner = self._module.scopes.get(id(function))
        if inner is None:  # no name is read in its body
            return Flow((), None)
        places = self._name_loads(name, inner, function.lineno)
        if isinstance(places, str):
            return Flow((), places)
        return _merged([self.follow(node, scope) for node, scope in places])

    def _step(self, node: ast.expr, scope: Scope) -> ast.Call | _Returned | list[tuple[ast.expr, Scope]] | str:
        """Where the value of `node` goes next: a call of it, the places it reaches, or the escape."""
        parent = self._module.parent_of(node)
        line = getattr(parent, "lineno", node.lineno)
        if isinstance(parent, ast.Call) and parent.func is node:
            return parent
        if (isinstance(parent, ast.IfExp) and node is not parent.test) or isinstance(parent, ast.BoolOp):
            return [(parent, scope)]  # `value if c else other`, `value or other`: either operand is the value
        if isinstance(parent, ast.keyword):  # `f(name=value)`: an argument of the call around it
            node, parent = parent.value, self._module.parent_of(parent)
        if isinstance(parent, ast.Call):
            if len(parent.args) == 1 and parent.args[0] is node and self._is_partial(parent.func, scope):
                return [(parent, scope)]  # `partial(value, k=v)`: its calls are the value's, with those keywords
            return self._argument(parent, node, scope)
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            places: list[tuple[ast.expr, Scope]] = []
            remote: Calls | None = None
            for target in targets:
                reached = self._stored(target, scope)
                if isinstance(reached, str):
                    return reached
                if isinstance(reached, tuple):  # a variable of the module: read here and in other modules
                    places += reached[0]
                    remote = _joined(remote, reached[1])
                else:
                    places += reached
            return (places, remote) if remote is not None else places
        if isinstance(parent, ast.Return):
            return self._returned(scope, line)
        return f"it is {_said(parent)} on line {line}"

    def _returned(self, scope: Scope, line: int) -> _Returned | str:
        """A value returned by a plain function (undecorated, no generator, not a method): the calls of the function,
        each a place the value reaches; where the function is bound at the top of the module, with the calls the
        project's other modules make of what it returns."""
        function, outer = scope.node, scope.parent
        said = f"it is returned on line {line}"
        if not isinstance(function, ast.FunctionDef) or function.decorator_list or outer is None \
                or outer.kind == "class" or any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(function)) \
                or outer.kind == "module" and self._project is None:  # no project: another module may call it
            return said
        name = function.name
        bindings = outer.bindings.get(name, [])
        if len(bindings) != 1 or bindings[0].value is not function:
            return f"{said}, by `{name}`, which is bound to several things"
        places: list[tuple[ast.expr, Scope]] = []
        for ref in self._module.loads.get(name, ()):
            if ref.scope.lookup(name)[0] is not outer:
                continue
            call = self._module.parent_of(ref.node)
            if len(ref.parts) > 1 or ref.in_string or not (isinstance(call, ast.Call) and call.func is ref.node):
                return f"{said}, by `{name}`, which is read, not called, on line {ref.node.lineno}"
            places.append((call, ref.scope))
        if outer.kind != "module":
            return places, None
        if name in self._module.strings:
            return f"{said}, by `{name}`, which a string on line {self._module.strings[name]} names"
        remote = self._project.result_calls(name) if self._project is not None else None
        if remote is None:  # the project cannot be read
            return f"{said}, by `{name}`, which another module may import"
        if remote.escape is not None:
            return f"{said}, by `{name}`; {remote.escape}"
        if not places and not remote.seen:  # called nowhere in the project: by code it does not hold, if at all
            return f"{said}, by `{name}`, which no module of the project calls"
        return places, remote

    def _stored(self, target: ast.expr, scope: Scope) -> _Returned | list[tuple[ast.expr, Scope]] | str:
        if isinstance(target, ast.Name):
            if scope.kind == "module" or target.id in scope.global_names:
                return self._module_variable(target.id, target.lineno)
            return self._name_loads(target.id, scope, target.lineno)
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            return self._attribute_loads(target, scope)
        return f"it is stored in `{ast.unparse(target)}` on line {target.lineno}, which is not followed"

    def _module_variable(self, name: str, line: int) -> _Returned | str:
        """A variable of the module (`amp_autocast = torch.cuda.amp.autocast` at its top): its reads in the module,
        and, asked of the project, in the modules that import it (`from .config import amp_autocast`)."""
        said = f"`{name}` is bound at the top of a module or class on line {line}, where another module may read it"
        if self._project is None:
            return said
        places = self._reads(name, self._module.walker.module_scope)
        if isinstance(places, str):
            return places
        if name in self._module.strings:
            return f"`{name}`, bound on line {line}, is named by a string on line {self._module.strings[name]}"
        remote = self._project.value_calls(name)
        if remote is None:  # the project cannot be read
            return said
        if remote.escape is not None:
            return f"`{name}` is bound at the top of the module on line {line}; {remote.escape}"
        if not places and not remote.seen:  # read nowhere in the project: by code it does not hold, if at all
            return said
        return places, remote

    def _name_loads(self, name: str, scope: Scope, line: int) -> list[tuple[ast.expr, Scope]] | str:
        """Every read of the variable `name` bound in `scope` (or the scope its `global` names)."""
        if name in scope.global_names or scope.kind != "function":
            return f"`{name}` is bound at the top of a module or class on line {line}, where another module may read it"
        if name in self._module.nonlocal_names:
            return f"`{name}` is named by a `nonlocal`, which is not followed"
        return self._reads(name, scope)

    def _reads(self, name: str, scope: Scope) -> list[tuple[ast.expr, Scope]] | str:
        """The reads of `name` that resolve to its binding in `scope`; why not, where one reads an attribute of it."""
        places: list[tuple[ast.expr, Scope]] = []
        for ref in self._module.loads.get(name, ()):
            if ref.scope.lookup(name)[0] is not scope:
                continue
            if len(ref.parts) > 1 or ref.in_string:
                return f"`{'.'.join(ref.parts)}` on line {ref.node.lineno} reads an attribute of it"
            places.append((ref.node, ref.scope))
        return places

    def _attribute_loads(self, target: ast.Attribute, scope: Scope) -> list[tuple[ast.expr, Scope]] | str:
        """`self.attr = value` in a method: every read of `.attr` in the module is `self.attr` in a method of the
        same class (`self` its first parameter); any other (another object's, a subclass's) is an escape."""
        assert isinstance(target.value, ast.Name)
        cls = _class_of_method(scope, target.value.id)
        where = f"`{ast.unparse(target)}` on line {target.lineno}"
        if cls is None:
            return f"it is stored in {where}, which is not an attribute of a method's `self`"
        named = self._module.strings.get(target.attr)
        if named is not None:
            return f"a string on line {named} names the attribute of {where} (`getattr`), which is not followed"
        places: list[tuple[ast.expr, Scope]] = []
        for refs in self._module.loads.values():
            for ref in refs:
                if target.attr not in ref.parts[1:]:
                    continue
                if ref.parts[1:] != (target.attr,) or _class_of_method(ref.scope, ref.parts[0]) is not cls \
                        or ref.scope.lookup(ref.parts[0])[0] is not ref.scope:
                    return f"`{'.'.join(ref.parts)}` on line {ref.node.lineno} reads {where} from outside its class"
                places.append((ref.node, ref.scope))
        return places

    def _argument(self, call: ast.Call, node: ast.expr, scope: Scope) -> _Returned | list[tuple[ast.expr, Scope]] | str:
        """The value passed to a function defined in the module: the reads of the parameter it binds; passed to a
        function another module of the project defines (`from engine import train_one_epoch`), the calls that
        function makes of it, asked of the project."""
        callee = _own_function(call.func, scope)
        name = ast.unparse(call.func)
        place = _argument_place(call, node)
        if callee is None:
            return self._remote_argument(call, scope, place, name)
        inner = self._module.scopes.get(id(callee))
        param = parameter_of(callee, *place) if place is not None else None
        if inner is None or param is None:
            return f"it is passed to `{name}` on line {call.lineno} where no parameter of it is known to take it"
        return self._name_loads(param, inner, call.lineno)

    def _remote_argument(self, call: ast.Call, scope: Scope, place: tuple[int | None, str | None] | None,
                         name: str) -> _Returned | str:
        said = f"it is passed to `{name}` on line {call.lineno}"
        imported = _imported_function(call.func, scope)
        remote = self._project.argument_calls(*imported, *place) \
            if self._project is not None and imported is not None and place is not None else None
        if remote is None:  # not a function of the project's modules, or no project to ask
            return f"{said}, which is not a function of this module"
        if remote.escape is not None:
            return f"{said}; {remote.escape}"
        return [], remote  # every call the function makes of it (none: it is never read there)


def _places(found: list[str]) -> tuple[str, ...]:
    """Places in other modules (`path:line`), each once, by file and line (two arguments passed to one function of
    another module reach its calls twice)."""
    def key(place: str) -> tuple[str, int]:
        path, _, line = place.rpartition(":")
        return (path, int(line)) if line.isdigit() else (place, 0)

    return tuple(sorted(dict.fromkeys(found), key=key))


def _joined(first: Calls | None, second: Calls | None) -> Calls | None:
    if first is None or second is None:
        return first or second
    return Calls(first.seen + second.seen, first.positional or second.positional, first.escape or second.escape)


def _merged(flows: list[Flow]) -> Flow:
    """The flows of several reads as one: every call, here and elsewhere; the first escape."""
    calls = sorted((call for flow in flows for call in flow.calls), key=lambda c: (c.lineno, c.col_offset))
    escape = next((flow.escape for flow in flows if flow.escape is not None), None)
    return Flow(tuple(calls), escape, tuple(where for flow in flows for where in flow.remote),
                next((flow.remote_positional for flow in flows if flow.remote_positional), None))


_CONTAINERS = {ast.Dict: "a dict", ast.List: "a list", ast.Tuple: "a tuple", ast.Set: "a set"}


def _said(parent: ast.AST | None) -> str:
    """Where the value goes, for a message."""
    container = _CONTAINERS.get(type(parent))
    if container is not None:
        return f"put in {container}"
    text = ast.unparse(parent) if isinstance(parent, ast.expr) else ""
    return f"used in `{text}`" if text and len(text) <= 60 else f"used in a `{type(parent).__name__}`"


def _class_of_method(scope: Scope, receiver: str) -> ast.ClassDef | None:
    """The class whose method `scope` is, where `receiver` is the method's first parameter."""
    function, parent = scope.node, scope.parent
    if not isinstance(function, _FUNCTIONS) or parent is None or parent.kind != "class":
        return None
    args = [*function.args.posonlyargs, *function.args.args]
    if not args or args[0].arg != receiver or function.decorator_list:
        return None
    return parent.node if isinstance(parent.node, ast.ClassDef) else None


def _own_function(func: ast.expr, scope: Scope) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The def a plain name callee is bound to, where every binding of that name is that one def."""
    if not isinstance(func, ast.Name):
        return None
    bindings = scope.lookup(func.id)[1]
    values = {id(b.value) for b in bindings}
    if len(values) != 1 or not isinstance(bindings[0].value, _FUNCTIONS) or bindings[0].value.decorator_list:
        return None  # a decorator may pass the arguments on as it likes
    return bindings[0].value


def _imported_function(func: ast.expr, scope: Scope) -> tuple[int, str, str] | None:
    """What a callee spelled through one import statement names, as `from <"." * level><module> import <name>`
    would bind it: (level, module, name). `train_one_epoch` after `from engine import train_one_epoch`, or
    `engine.train_one_epoch` after `import engine`."""
    if isinstance(func, ast.Name):
        parts: tuple[str, ...] = (func.id,)
    elif isinstance(func, ast.Attribute):
        attributes, head = attribute_chain(func)
        if not isinstance(head, ast.Name):
            return None
        parts = (head.id, *attributes)
    else:
        return None
    bindings = scope.lookup(parts[0])[1]
    imports = {id(b.imported_by): b.imported_by for b in bindings if b.imported_by is not None}
    if len(imports) != 1 or any(b.kind != "import" or b.guards or b.inferred for b in bindings):
        return None
    node = next(iter(imports.values())).node
    return next(((level, module, part) for level, module, part, count in spelled_imports(node, parts)
                 if count == len(parts)), None)


def _argument_place(call: ast.Call, node: ast.expr) -> tuple[int | None, str | None] | None:
    """Where `node` is passed in `call`: (its position, None) or (None, its keyword); None where a `*args` or a
    `**kwargs` hides which parameter it binds."""
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(kw.arg is None for kw in call.keywords):
        return None
    for i, arg in enumerate(call.args):
        if arg is node:
            return i, None
    return next(((None, keyword.arg) for keyword in call.keywords if keyword.value is node), None)


def parameter_of(function: ast.FunctionDef | ast.AsyncFunctionDef, position: int | None,
                 keyword: str | None) -> str | None:
    """The parameter of `function` an argument at `position`, or passed as `keyword`, binds (None: `*args`,
    `**kwargs`, unknown)."""
    args = function.args
    if position is not None:
        positional = [*args.posonlyargs, *args.args]
        return positional[position].arg if position < len(positional) else None
    named = [a.arg for a in (*args.args, *args.kwonlyargs)]
    return keyword if keyword in named else None
