"""Apply a `Plan` with LibCST, touching only the statements that change.

The analysis numbers statements in pre-order and, inside each statement, the dotted names whose
head is a torch-bound name, in source order. LibCST's tree has the same statements in the same
order (a `SimpleStatementLine` holds one or more of them), so this transformer counts the same way,
skips every statement subtree with nothing to change (most of the file: that is what keeps
rewrite close to LibCST's bare parse-and-print), and checks, name by name, that it is looking at
what the analysis saw. Any disagreement raises `PlanMismatch`: the file is then left untouched.
"""

from __future__ import annotations

import bisect

import libcst as cst
from libcst import MaybeSentinel

from ampfix.analysis import CallEdit, ChainEdit, ImportEdit, Plan


class PlanMismatch(Exception):
    """The CST does not match what the analysis planned: an internal error, never a guess."""


_STATEMENT_TYPES = (cst.BaseSmallStatement, cst.BaseCompoundStatement)
_STATEMENT_LINES = (cst.SimpleStatementLine, cst.SimpleStatementSuite)


def apply_plan(module: cst.Module, plan: Plan) -> cst.Module:
    applier = _Applier(plan)
    new_module = module.visit(applier)
    applier.check_complete()
    if plan.needs_functools:
        new_module = _insert_functools_import(new_module)
    return new_module


def _dotted(node: cst.BaseExpression) -> str | None:
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


class _Applier(cst.CSTTransformer):
    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan
        self.edited = plan.edited_statements()
        self.next_stmt = 0
        self.stmt_stack: list[int] = []
        self.chain_counts: dict[int, int] = {}
        self.string_counts: dict[int, int] = {}
        self.skip_names: set[int] = set()
        self.node_edits: dict[int, ChainEdit] = {}
        self.string_nodes: dict[int, str] = {}
        self.applied = 0
        self.split_lines: dict[int, cst.ImportFrom] = {}  # id(original ImportFrom) -> kept part

    # statement bookkeeping ---------------------------------------------------------------------
    def has_edit_in(self, start: int, end: int) -> bool:
        i = bisect.bisect_left(self.edited, start)
        return i < len(self.edited) and self.edited[i] < end

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _STATEMENT_LINES):
            count = len(node.body)
            if not self.has_edit_in(self.next_stmt, self.next_stmt + count):
                self.next_stmt += count
                return False
        elif isinstance(node, _STATEMENT_TYPES):
            index = self.next_stmt
            if index >= len(self.plan.stmt_end):
                raise PlanMismatch("more statements than the analysis saw")
            end = self.plan.stmt_end[index]
            self.stmt_stack.append(index)
            self.next_stmt = index + 1
            if not self.has_edit_in(index, end):
                self.next_stmt = end
                return False
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        result = super().on_leave(original_node, updated_node)
        if isinstance(original_node, _STATEMENT_TYPES):
            self.stmt_stack.pop()
        return result

    def check_complete(self) -> None:
        if self.next_stmt != len(self.plan.stmt_end):
            raise PlanMismatch(f"saw {self.next_stmt} statements, the analysis {len(self.plan.stmt_end)}")
        planned = len(self.plan.chain_edits) + len(self.plan.string_edits) + len(self.plan.import_edits)
        if self.applied != planned:
            raise PlanMismatch(f"applied {self.applied} of {planned} planned edits")

    # names that are not expressions in Python's ast -------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.skip_names.add(id(node.name))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.skip_names.add(id(node.name))

    def visit_Param(self, node: cst.Param) -> None:
        self.skip_names.add(id(node.name))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.skip_names.add(id(node.keyword))

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self.skip_names.add(id(node.name.name))

    def visit_Global(self, node: cst.Global) -> bool:
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        return False

    def visit_MatchAs(self, node: cst.MatchAs) -> None:
        if node.name is not None:
            self.skip_names.add(id(node.name))

    def visit_MatchStar(self, node: cst.MatchStar) -> None:
        if node.name is not None:
            self.skip_names.add(id(node.name))

    def visit_MatchMapping(self, node: cst.MatchMapping) -> None:
        if node.rest is not None:
            self.skip_names.add(id(node.rest))

    def visit_MatchKeywordElement(self, node: cst.MatchKeywordElement) -> None:
        self.skip_names.add(id(node.key))

    # dotted names --------------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> bool:
        text = _dotted(node)
        if text is None:
            self.skip_names.add(id(node.attr))
            return True
        if text.partition(".")[0] in self.plan.heads:
            self.count_chain(node, text)
        return False

    def visit_Name(self, node: cst.Name) -> bool:
        if id(node) not in self.skip_names and node.value in self.plan.heads:
            self.count_chain(node, node.value)
        return False

    def count_chain(self, node: cst.BaseExpression, text: str) -> None:
        if not self.stmt_stack:
            raise PlanMismatch(f"`{text}` outside any statement")
        stmt = self.stmt_stack[-1]
        ordinal = self.chain_counts.get(stmt, 0)
        self.chain_counts[stmt] = ordinal + 1
        expected = self.plan.chain_texts.get(stmt)
        if expected is None:
            return
        if ordinal >= len(expected) or expected[ordinal] != text:
            raise PlanMismatch(f"statement {stmt}: name {ordinal} is `{text}`, the analysis saw {expected}")
        edit = self.plan.chain_edits.get((stmt, ordinal))
        if edit is not None:
            self.node_edits[id(node)] = edit
            self.applied += 1

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        return self.replace_chain(original_node, updated_node)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.replace_chain(original_node, updated_node)

    def replace_chain(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        edit = self.node_edits.get(id(original))
        if edit is None:
            return updated
        result = updated
        if edit.new_dotted is not None:
            result = cst.parse_expression(edit.new_dotted).with_changes(lpar=updated.lpar, rpar=updated.rpar)
        if edit.partial_args is not None:
            bare = result.with_changes(lpar=(), rpar=())
            partial = cst.parse_expression(f"functools.partial(_, {edit.partial_args})")
            assert isinstance(partial, cst.Call)
            args = [partial.args[0].with_changes(value=bare), *partial.args[1:]]
            result = partial.with_changes(args=args, lpar=updated.lpar, rpar=updated.rpar)
        return result

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        edit = self.node_edits.get(id(original_node.func))
        if edit is None or edit.call is None:
            return updated_node
        return updated_node.with_changes(args=_edit_arguments(updated_node, edit.call))

    def leave_Decorator(self, original_node: cst.Decorator, updated_node: cst.Decorator) -> cst.Decorator:
        edit = self.node_edits.get(id(original_node.decorator))
        if edit is None or edit.decorator_call is None:
            return updated_node
        call = cst.parse_expression(f"_({edit.decorator_call})")
        assert isinstance(call, cst.Call)
        return updated_node.with_changes(decorator=call.with_changes(func=updated_node.decorator))

    # strings -------------------------------------------------------------------------------
    def visit_SimpleString(self, node: cst.SimpleString) -> bool:
        self.count_string(node, node.evaluated_value)
        return False

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> bool:
        self.count_string(node, node.evaluated_value)
        return False

    def count_string(self, node: cst.BaseString, value: object) -> None:
        if not isinstance(value, str) or "amp" not in value or not self.stmt_stack:
            return
        stmt = self.stmt_stack[-1]
        ordinal = self.string_counts.get(stmt, 0)
        self.string_counts[stmt] = ordinal + 1
        expected = self.plan.string_values.get(stmt)
        if expected is None:
            return
        if ordinal >= len(expected) or expected[ordinal] != value:
            raise PlanMismatch(f"statement {stmt}: string {ordinal} differs from the analysis")
        new_literal = self.plan.string_edits.get((stmt, ordinal))
        if new_literal is not None:
            self.string_nodes[id(node)] = new_literal
            self.applied += 1

    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        new_literal = self.string_nodes.get(id(original_node))
        return updated_node if new_literal is None else updated_node.with_changes(value=new_literal)

    # imports -------------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import):
        edit = self.import_edit()
        if edit is None:
            return updated_node
        names = list(updated_node.names)
        for i, new_name in edit.renamed_aliases.items():
            names[i] = names[i].with_changes(name=_dotted_node(new_name))
        kept = [name for i, name in enumerate(names) if i not in edit.removed_aliases]
        if not kept:
            return cst.RemoveFromParent()
        return updated_node.with_changes(names=_without_trailing_comma(kept, names))

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
        edit = self.import_edit()
        if edit is None or edit.new_module is None:
            return updated_node
        if not edit.kept_aliases:
            return updated_node.with_changes(module=_dotted_node(edit.new_module))
        if isinstance(updated_node.names, cst.ImportStar):
            raise PlanMismatch("a star import cannot be split")
        names = list(updated_node.names)
        migrated = [n for i, n in enumerate(names) if i not in edit.kept_aliases]
        kept = [n for i, n in enumerate(names) if i in edit.kept_aliases]
        self.split_lines[id(original_node)] = updated_node.with_changes(
            names=_without_trailing_comma(kept, names), lpar=None, rpar=None,
            whitespace_after_import=cst.SimpleWhitespace(" "),
        )
        return updated_node.with_changes(module=_dotted_node(edit.new_module),
                                         names=_without_trailing_comma(migrated, names))

    def import_edit(self) -> ImportEdit | None:
        edit = self.plan.import_edits.get(self.stmt_stack[-1])
        if edit is not None:
            self.applied += 1
        return edit

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine,
                                  updated_node: cst.SimpleStatementLine):
        splits = [self.split_lines.pop(id(s)) for s in original_node.body if id(s) in self.split_lines]
        if not splits:
            return updated_node
        extra = [cst.SimpleStatementLine(body=[kept]) for kept in splits]
        return cst.FlattenSentinel([updated_node, *extra])

    def leave_SimpleStatementSuite(self, original_node: cst.SimpleStatementSuite,
                                   updated_node: cst.SimpleStatementSuite):
        body: list[cst.BaseSmallStatement] = []
        for original, updated in zip(original_node.body, updated_node.body):
            body.append(updated)
            kept = self.split_lines.pop(id(original), None)
            if kept is not None:
                body.append(kept)
        return updated_node.with_changes(body=body)


def _dotted_node(dotted: str) -> cst.Attribute | cst.Name:
    node = cst.parse_expression(dotted)
    assert isinstance(node, (cst.Attribute, cst.Name))
    return node


def _without_trailing_comma(chosen: list[cst.ImportAlias], every: list[cst.ImportAlias]) -> list[cst.ImportAlias]:
    """Keep the user's commas, but the last chosen alias ends like the original last one."""
    if not chosen:
        return chosen
    last_original = every[-1]
    chosen = list(chosen)
    if chosen[-1] is not last_original:
        trailing = last_original.comma
        if isinstance(trailing, MaybeSentinel):
            chosen[-1] = chosen[-1].with_changes(comma=MaybeSentinel.DEFAULT)
        else:
            chosen[-1] = chosen[-1].with_changes(comma=trailing)
    return chosen


def _edit_arguments(call: cst.Call, edit: CallEdit) -> list[cst.Arg]:
    args = list(call.args)
    # Positional arguments, `*args` included, come before any keyword: the device keyword goes after them.
    positional_count = sum(1 for a in args if a.keyword is None and a.star != "**")
    for i, name in enumerate(edit.keywords_for_positionals):
        args[i] = args[i].with_changes(
            keyword=cst.Name(name),
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                  whitespace_after=cst.SimpleWhitespace("")),
        )
    device_value = cst.parse_expression(edit.device)
    if edit.device_keyword is not None:
        device_arg = cst.Arg(
            value=device_value, keyword=cst.Name(edit.device_keyword),
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                  whitespace_after=cst.SimpleWhitespace("")),
        )
        position = positional_count
    else:
        device_arg = cst.Arg(value=device_value)
        position = edit.device_position or 0
    return _insert_argument(args, position, device_arg)


def _insert_argument(args: list[cst.Arg], position: int, new: cst.Arg) -> list[cst.Arg]:
    # The new argument shares a line with its neighbour: the user's line breaks and comments
    # stay exactly where they were.
    separator = cst.SimpleWhitespace(" ")
    if position < len(args):
        args.insert(position, new.with_changes(comma=cst.Comma(whitespace_after=separator)))
        return args
    if args:  # appending after the last argument
        last = args[-1]
        if isinstance(last.comma, MaybeSentinel):
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(new)
        else:  # keep the user's trailing comma (and its line break) after the new last argument
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=separator))
            args.append(new.with_changes(comma=last.comma))
        return args
    return [new]


def _insert_functools_import(module: cst.Module) -> cst.Module:
    """`import functools` on the line after the imports that open the module (after its docstring).

    Written by hand rather than with LibCST's AddImportsVisitor, which also adds a blank line.
    """
    body = list(module.body)
    index = 0
    for i, statement in enumerate(body):
        if isinstance(statement, cst.SimpleStatementLine) and (
            all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)
            or (i == 0 and _is_docstring(statement))
        ):
            index = i + 1
        else:
            break
    new_line = cst.parse_statement("import functools\n")
    if index < len(body) and index == 0:
        # Comments just above the first statement stay above the code they describe.
        new_line = new_line.with_changes(leading_lines=body[0].leading_lines)
        body[0] = body[0].with_changes(leading_lines=())
    body.insert(index, new_line)
    return module.with_changes(body=body)


def _is_docstring(line: cst.SimpleStatementLine) -> bool:
    return len(line.body) == 1 and isinstance(line.body[0], cst.Expr) and isinstance(
        line.body[0].value, (cst.SimpleString, cst.ConcatenatedString))


__all__ = ["PlanMismatch", "apply_plan"]
