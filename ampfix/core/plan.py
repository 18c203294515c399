"""The plan vocabulary: what the planners decide and the applier is handed (edits keyed by the character
span of the `ast` node each was decided on, findings, the error codes of `ampfix.core.errors`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CallEdit:
    device: str  # source text of the device expression
    device_position: int | None  # insert as a positional argument at this index...
    device_keyword: str | None  # ...or as this keyword after the last positional
    keywords_for_positionals: tuple[str, ...] = ()  # name the i-th positional argument
    added_keywords: tuple[tuple[str, str], ...] = ()  # (keyword, source text) appended after the arguments


@dataclass(frozen=True)
class ChainEdit:
    new_dotted: str | None = None  # replace the dotted name; None: keep it (its import changes)
    call: CallEdit | None = None  # edit the arguments of the call whose callee this is
    decorator_call: str | None = None  # bare decorator: append "(<this>)"
    partial_args: str | None = None  # wrap as functools.partial(<name>, <this>)
    # The first argument of a `functools.partial(<name>, <keywords>)`: insert this device after it.
    partial_device: str | None = None
    # With `partial_device`: keywords appended to that partial, (keyword, source text) (the old defaults it lacks).
    partial_keywords: tuple[tuple[str, str], ...] = ()

    @property
    def changes_text(self) -> bool:
        return bool(self.new_dotted or self.call or self.decorator_call or self.partial_args or self.partial_device)


@dataclass(frozen=True)
class ImportEdit:
    # `import a.b as c, d`: new dotted name per alias index (missing: unchanged).
    renamed_aliases: dict[int, str] = field(default_factory=dict)
    removed_aliases: tuple[int, ...] = ()  # duplicates of an import already there
    # `from M import ...`: the new module for the migrated aliases, and the alias indices that
    # stay with the old module (a split: they move to a new statement after this one).
    new_module: str | None = None
    kept_aliases: tuple[int, ...] = ()
    # `from M import old as y`: the names imported instead, per alias index (the `as` name stays).
    renamed_names: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ValueEdit:
    text: str  # an expression that replaces a literal (a device argument)


@dataclass(frozen=True)
class Splice:
    """Replace the edit's span with this text, as text (`ampfix.families.apex.rewrite`, which checks itself that no
    comment or string is cut). Other edits may sit between splices, never across one (`ampfix.engine.apply`)."""

    text: str


@dataclass(frozen=True)
class Edit:
    """One change, at the [start, end) character span of the ast node it was decided on."""

    start: int
    end: int
    line: int  # 1-based, for messages
    node: str  # the LibCST node type that must be found there: Name, Attribute, SimpleString, Import, ImportFrom
    text: str  # what that node spells: the dotted name (NFKC), the string's value; "" for imports
    change: ChainEdit | ImportEdit | ValueEdit | Splice | str  # a string edit is the new literal


@dataclass(frozen=True)
class PlannedFinding:
    line: int
    col: int  # 0-based, in characters
    code: str
    message: str
    fixable: bool
    unsafe: bool
    will_fix: bool
    suggestion: str | None = None
    # Fixed with no text of its own changed: a use that follows its moved import under its own word
    # (`GradScaler` after `from torch.cuda.amp import GradScaler` became `from torch.amp import ...`).
    follows: bool = False


@dataclass
class Plan:
    findings: list[PlannedFinding]
    edits: list[Edit]
    # The top-level statements as [start, end) ranges of whole lines (`ampfix.core.locations.statement_groups`).
    statements: list[tuple[int, int]]
    # Statements added after the opening imports (`import functools`, the module's device name): the
    # offset they go at (a line boundary outside every statement) and their text, line breaks included.
    head_at: int | None = None
    head_text: str = ""

    @property
    def has_edits(self) -> bool:
        return bool(self.edits)


def free_name(tree: ast.Module, base: str) -> str:
    """`base`, else `base_2`, `base_3`, ...: the first that is none of the module's names."""
    taken = _identifiers(tree)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def _identifiers(tree: ast.Module) -> set[str]:
    """Every name the module binds or reads, in any scope: a new module-level name must be none of them."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names
