"""The shape of a migration rule. Rules are data; `ampfix.analysis` applies them."""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class Target:
    new: str  # qualified name in torch.amp
    device: str | None = None  # "cuda" or "cpu": the device the old name implied
    # A module: its object has no drop-in twin as a value (`return torch.cuda.amp`), only as a path.
    module: bool = False


@dataclass(frozen=True)
class Example:
    before: str
    after: str | None = None  # None: left unchanged (reported or not deprecated)
    unsafe_fixes: bool = False


@dataclass(frozen=True)
class Rule:
    code: str
    title: str
    min_torch: TorchVersion | None  # None: there is nothing to migrate to
    # old qualified name -> its torch.amp twin; None where there is no twin.
    symbols: dict[str, Target | None]
    shape: CallShape | None = None  # None: a pure rename, valid in every context
    examples: tuple[Example, ...] = field(default=(), repr=False)

    @property
    def fixable(self) -> bool:
        return any(target is not None for target in self.symbols.values())
