"""The shape of a migration rule. Rules are data; the engine's planners apply them."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from functools import cached_property

TorchVersion = tuple[int, int]


@dataclass(frozen=True)
class CallShape:
    """How the arguments of a call move from the old signature to the new one."""

    # Parameters of the old callable that may be passed positionally, in order.
    old_params: tuple[str, ...]
    # Where the device goes: a positional index among the arguments, or a keyword name.
    device_position: int | None = None
    device_keyword: str | None = None
    # The new signature puts other parameters where the old positionals were: name them.
    positionals_to_keywords: bool = False
    # A bare `@name` decorator may become `@name(<device>)` (custom_fwd/custom_bwd).
    bare_decorator_ok: bool = False
    # `functools.partial(new, <device>)` behaves like the old callable for every call,
    # so a non-called reference can be rewritten to it (an unsafe fix: the object is not the same).
    partial_keeps_meaning: bool = False
    # The new callable's default device (`torch.amp.GradScaler(device="cuda")`): a subclass rebased onto it
    # builds on that device where the old class built on another (a `torch.cpu.amp.GradScaler` subclass).
    device_default: str | None = None
    # Parameters holding a dtype chosen for CUDA: moving the call to the CPU makes float16 there
    # bfloat16 (CPU float16 autocast runs, but far slower, and some CPU ops refuse it).
    cuda_dtype_params: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    new: str  # qualified name in torch.amp
    device: str | None = None  # "cuda" or "cpu": the device the old name implied
    # A module: its object has no drop-in twin as a value (`return torch.cuda.amp`), only as a path.
    module: bool = False
    # The old name is gone from torch since this version (code using it runs only on older torch).
    old_removed_in: TorchVersion | None = None
    # The old callable's own defaults that the new one takes from the state in force instead (autocast's
    # dtype and cache_enabled): (parameter, qualified name or literal), written where that state may differ.
    old_defaults: tuple[tuple[str, str], ...] = ()


def partial_with_defaults(shape: CallShape, target: Target) -> bool:
    """Can a reference without a call become `functools.partial(new, <device>, <old defaults as keywords>)`?
    Where the positionals became keywords (autocast), a positional call of that partial raises TypeError
    (a second value for the first default) instead of binding to other parameters: it fails loudly."""
    return bool(target.old_defaults) and shape.positionals_to_keywords


@dataclass(frozen=True)
class Example:
    before: str
    after: str | None = None  # None: left unchanged
    unsafe_fixes: bool = False
    # Left unchanged and reported under this code; None with `after` None: nothing to report.
    reported: str | None = None
    device: str = "cuda"  # the device target (`--device`) the example is rewritten with
    target_torch: tuple[int, int] | None = None  # the declared target (`--target-torch`) it is rewritten at


@dataclass(frozen=True)
class Rule:
    code: str
    title: str
    min_torch: TorchVersion | None  # the oldest torch its fix runs on (--target-torch); None: nothing to migrate to
    # old qualified name -> its torch.amp twin; None where there is no twin.
    symbols: dict[str, Target | None]
    shape: CallShape | None = None  # None: a pure rename, valid in every context
    # Its names are already migrated: it only moves their literal "cuda" under a device target.
    device_target_only: bool = False
    examples: tuple[Example, ...] = field(default=(), repr=False)
    # What `rewrite` does where the symbols alone do not say (a rewrite of a whole pattern, not of a name).
    fix_note: str | None = None


@dataclass(frozen=True)
class Family:
    """One migration family: the deprecated namespaces, where they moved, and the rules that say how.

    Everything the analysis knows about torch's AMP API lives here or in the rules; another family
    (apex.amp) is another instance, not edits in the analysis.
    """

    package: str  # the top-level package whose imports can reach the deprecated names
    # deprecated namespace -> the namespace its twins live in
    roots: dict[str, str]
    # keywords that already give a call its device: such a call is left alone
    device_keywords: tuple[str, ...]
    rules: tuple[Rule, ...]
    # What a version guard tests: qualified names of the package's version (and everything below them)...
    version_names: tuple[str, ...] = ()
    # ...the names holding the release string itself, that a version parser reads (a version test
    # decided at the target compares one of them with a literal)...
    release_names: tuple[str, ...] = ()
    # ...and the distribution whose installed version `importlib.metadata.version(...)` reads.
    distribution: str | None = None
    # Names of the new API: a `try` that imports one of these falls back to the old API in its handlers.
    new_api: tuple[str, ...] = ()
    # Moving CUDA code elsewhere (`--device`): dtypes chosen for CUDA and what they become on the CPU...
    cpu_dtypes: dict[str, str] = field(default_factory=dict)
    # ...and the call that tells whether CUDA is there, for a device chosen when the code runs.
    cuda_available: str | None = None

    @cached_property
    def _symbols(self) -> dict[str, tuple[Rule, Target | None]]:
        return {name: (rule, target) for rule in self.rules for name, target in rule.symbols.items()}

    def owns(self, qname: str | None) -> bool:
        """Can `qname` lead to this family's names (it lies in the package)?"""
        return qname is not None and (qname == self.package or qname.startswith(self.package + "."))

    @cached_property
    def twin_namespace(self) -> str:
        """Where the twins live, for messages (`torch.amp`)."""
        return " / ".join(sorted(set(self.roots.values())))

    def is_version(self, qname: str | None) -> bool:
        return qname is not None and any(qname == v or qname.startswith(v + ".") for v in self.version_names)

    def is_new_api(self, qname: str | None) -> bool:
        return qname is not None and any(qname == n or qname.startswith(n + ".") for n in self.new_api)

    @cached_property
    def deprecated_names(self) -> frozenset[str]:
        """The deprecated names the rules list outside the roots (`torch.get_autocast_gpu_dtype`): each is
        a root of its own, for itself and what lies below it."""
        return frozenset(name for rule in self.rules if not rule.device_target_only for name in rule.symbols
                         if not any(name == root or name.startswith(root + ".") for root in self.roots))

    @cached_property
    def name_parts(self) -> frozenset[str]:
        """Every component of the roots and the rules' names (`torch`, `cuda`, `amp`, `autocast`, ...): the only
        names another module can bind to something that leads to the family's names."""
        return frozenset(part for name in (*self.roots, *self._symbols) for part in name.split("."))

    def spelled_names(self, *, device_target_only: bool = False) -> tuple[str, ...]:
        """The identifiers a use of the rules' names must spell where no deprecated root is spelled (the
        pre-filter's words): the last part of each deprecated name outside the roots, or with
        `device_target_only`, of each name those rules list that no `amp` component spells (`torch.autocast`)."""
        if device_target_only:
            names: Iterable[str] = (name for rule in self.rules if rule.device_target_only for name in rule.symbols
                                    if "amp" not in name.split("."))
        else:
            names = self.deprecated_names
        return tuple(sorted({name.rpartition(".")[2] for name in names}))

    def deprecated_root(self, qname: str) -> str | None:
        for root in self.roots:
            if qname == root or qname.startswith(root + "."):
                return root
        return longest_prefix(self.deprecated_names, qname)

    def imported_twin_name(self, qname: str) -> str | None:
        """The name to import instead of the imported `qname`, where its twin has another one
        (`get_autocast_gpu_dtype` -> `get_autocast_dtype`); None where it keeps its name (`autocast`)."""
        symbol = self.symbol(qname)
        if symbol is None or symbol[0] != qname or symbol[2] is None:
            return None
        new = symbol[2].new.rpartition(".")[2]
        return None if new == qname.rpartition(".")[2] else new

    def renamed(self, qname: str) -> str:
        """`qname` with its deprecated root replaced by the new one (unchanged outside the roots, and for a
        deprecated name outside them, whose twin is its rule's)."""
        root = self.deprecated_root(qname)
        return qname if root is None or root not in self.roots else self.roots[root] + qname[len(root):]

    def symbol(self, qname: str) -> tuple[str, Rule, Target | None] | None:
        """The longest prefix of `qname` that a rule names: (that name, its rule, its target)."""
        name = longest_prefix(self._symbols, qname)
        if name is None:
            return None
        rule, target = self._symbols[name]
        return name, rule, target

    def exists(self, qname: str) -> bool:
        """Does torch define `qname` below a deprecated root? Names below a module the rules list but
        that no rule names (apex's `amp.scale_loss` spelled `torch.cuda.amp.scale_loss`) do not."""
        symbol = self.symbol(qname)
        if symbol is None:
            return False
        name, _, target = symbol
        return name == qname or target is None or not target.module

    def missing_twin(self, qname: str, *, exact: bool = False) -> tuple[Rule | None, str] | None:
        """Why `qname` has nothing to move to, with the rule that lists it (None: not a name torch
        defines), or None when it has a twin. `exact`: `qname` itself must be a listed name, as an
        import binds it, not a member below one (`torch.cuda.amp.GradScaler.step`)."""
        symbol = self.symbol(qname)
        if symbol is None or not self.exists(qname):
            return None, self.unknown(qname)
        name, rule, target = symbol
        if target is None or (exact and name != qname):
            return rule, f"`{qname}` has no {self.twin_namespace} twin"
        return None

    def unknown(self, qname: str) -> str:
        """What to say of a name `exists` does not know: the members of a deprecated root are all
        listed in the rules; a submodule may have held private names the rules do not list."""
        parent = qname.rpartition(".")[0]
        if parent in self.roots or self.symbol(qname) is None:
            return f"`{qname}` is not a name {self.package} defines"
        return f"`{qname}` is not a name ampfix knows in `{parent}`"


def longest_prefix(names: Collection[str], qname: str) -> str | None:
    """The longest dotted prefix of `qname` (`qname` itself included) that `names` holds, or None: how every
    rule table is looked up, torch's and apex's."""
    if qname in names:
        return qname
    parts = qname.split(".")
    for n in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in names:
            return prefix
    return None
