"""What every sub-rewrite is given (`_Rewrite`): the shape, and what the sub-rewrites before it have planned."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ampfix.core.locations import first_line
from ampfix.families.apex.rewrite.shape import _Shape
from ampfix.families.apex.rewrite.tree import _Tree
from ampfix.families.apex.rewrite.vocabulary import Splices, _NATIVE


@dataclass
class _Rewrite:
    """The shape, and what the sub-rewrites have planned so far."""

    tree: _Tree
    shape: _Shape
    splices: Splices = field(default_factory=list)
    region_splices: Splices = field(default_factory=list)  # the forward passes re-indented
    messages: dict[int, str] = field(default_factory=dict)  # id(ref) -> what became of the use
    flags: list[str] = field(default_factory=list)  # the flags that guard apex's calls
    steps: list[ast.Expr] = field(default_factory=list)  # the `optimizer.step()` statements
    branch_steps: list[ast.Expr] = field(default_factory=list)  # steps whose `if` steps otherwise in its other branch
    regions: list[tuple[int, int]] = field(default_factory=list)  # the forward passes' lines, put under autocast
    # id() of the blocks holding a scale_loss, and where the forward pass of the next one there starts
    forward_blocks: dict[int, int] = field(default_factory=dict)
    backward_statements: list[ast.stmt] = field(default_factory=list)  # what each scale_loss became
    # several optimizers: the one optimizer a scale_loss was given (a GAN's alternating steps), by id() of its statement
    backward_optimizers: dict[int, str] = field(default_factory=dict)
    unscaled_steps: set[int] = field(default_factory=set)  # the lines of the steps a clip unscales before
    unscaled_at: list[int] = field(default_factory=list)  # the lines gradients are unscaled before
    evaluation: list[ast.With] = field(default_factory=list)  # the `no_grad` blocks given the autocast
    hand_offs: list[ast.stmt] = field(default_factory=list)  # inference: the statements handing the model on
    unsafe_notes: list[str] = field(default_factory=list)  # what changes beyond O1's meaning (--unsafe-fixes)
    no_forward: list[str] = field(default_factory=list)  # the methods whose scale_loss has no forward pass before it
    torch_imported_at: int | None = None  # the line of the module-level statement that becomes `import torch`

    def __post_init__(self) -> None:
        self.flags.extend(self.shape.flags)

    @property
    def enabled(self) -> str | None:
        """The `enabled=` of the scaler and autocast: initialize's own, a flag, or `bool(COND)` for the `if COND:`
        that guarded initialize (an `if` tests truthiness; torch.autocast takes a bool only, not `args.fp16 = 1`)."""
        shape = self.shape
        if shape.ran_flag:
            return shape.ran_flag
        if shape.enabled is None:
            return None
        text = self.tree.text(shape.enabled)
        return f"bool({text})" if shape.enabled is shape.condition else text

    @property
    def scaler_args(self) -> str:
        keywords = self.shape.opt_level.scaler_keywords or (
            self.shape.scaler_settings.keywords if self.shape.scaler_settings is not None else "")
        return self.shape.device + (f", enabled={self.enabled}" if self.enabled is not None else "") + (
            f", {keywords}" if keywords else "")

    @property
    def autocast(self) -> str:
        """autocast as the rewrite writes it; in a trainer's methods, its condition as they test it."""
        shape = self.shape
        condition = shape.method_condition
        enabled_text = self.enabled if condition is None else f"bool({self.tree.text(condition)})"
        # the step half, or the caller of a set-up function: whether the set-up enabled it
        if shape.split is not None and not shape.split.set_up or shape.returned is not None:
            enabled_text = f"{shape.scaler}.is_enabled()"
        enabled = f", enabled={enabled_text})" if enabled_text is not None else ")"
        return f"{shape.spell(_NATIVE.autocast)}({shape.device}, dtype={shape.spell(shape.dtype)}" + enabled

    def line_splice(self, before: ast.stmt | int, text: str) -> None:
        """`text`, indented as `before` (a statement, or a line number), inserted as a line before it."""
        line = before if isinstance(before, int) else before.lineno
        at = self.tree.index.line_start(line if isinstance(before, int) else first_line(before))
        self.splices.append((at, at, f"{self.tree.indent(line)}{text}{self.shape.newline}"))
