"""The pure engine: source text in, result (new text, findings, diff) out. Never prints."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ampfix.core.errors import INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE
from ampfix.core.options import Options
from ampfix.syntax.prefilter import could_hold_use

if TYPE_CHECKING:  # the plan's classes load with the planners, not where kept findings are replayed
    from ampfix.core.plan import Plan, PlannedFinding
    from ampfix.core.project import ProjectModules


@dataclass(frozen=True)
class Finding:
    line: int  # 1-based
    col: int  # 1-based, in characters
    code: str
    message: str
    fixable: bool  # a fix exists (safe, or unsafe when `unsafe` is set)
    unsafe: bool = False
    fixed: bool = False  # the fix is applied in SourceResult.new_source
    suggestion: str | None = None
    # In a notebook: the 1-based cell (`line` and `col` are within it), and the line of the
    # notebook file that holds the cell's line (where CI annotations point).
    cell: int | None = None
    file_line: int | None = None
    # Fixed, with no text of its own changed: a use that follows its moved import under its own word. Not a
    # fix a reviewer sees in the diff: the summary counts it apart.
    follows: bool = False


@dataclass(frozen=True)
class SourceResult:
    source: str
    new_source: str
    findings: tuple[Finding, ...] = ()
    error: str | None = None  # set when the source could not be processed; new_source == source then

    @property
    def changed(self) -> bool:
        return self.new_source != self.source

    def diff(self, path: str = "<string>") -> str:
        """A unified diff that `git apply` / `patch -p1` accept."""
        import difflib

        lines = difflib.unified_diff(_diff_lines(self.source), _diff_lines(self.new_source),
                                     fromfile=f"a/{path}", tofile=f"b/{path}")
        # A last line without a newline gets git's marker; without it the next line would be glued on.
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                       for line in lines)


def _diff_lines(text: str) -> list[str]:
    """Lines as git and patch count them: only "\n" ends one (str.splitlines would also split on
    form feeds and other separators, and the diff would not apply)."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def check_source(source: str, options: Options = Options(), project: ProjectModules | None = None) -> SourceResult:
    """Find every deprecated AMP use; change nothing."""
    return _process(source, options, rewrite=False, project=project)


def fix_source(source: str, options: Options = Options(), project: ProjectModules | None = None) -> SourceResult:
    """Rewrite every deprecated AMP use that can be rewritten safely; report the rest."""
    return _process(source, options, rewrite=True, project=project)


def _process(source: str, options: Options, rewrite: bool, project: ProjectModules | None = None) -> SourceResult:
    # The rule data only once a file is read: the files a run passes over never load it.
    from ampfix.families import SPELLINGS

    if not could_hold_use(source, options.retargets, SPELLINGS) and not _reads_apex_switch(options, project):
        return SourceResult(source, source)
    from ampfix.syntax.suppressions import scan_when_asked

    suppressions = scan_when_asked(source)
    if suppressions.skip_file:
        return SourceResult(source, source)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError) as error:  # RecursionError: nested past what ast builds
        line = getattr(error, "lineno", None) or 1
        col = getattr(error, "offset", None) or 1
        message = f"cannot parse: {getattr(error, 'msg', error)}"
        return SourceResult(source, source, (Finding(line, col, SYNTAX_ERROR_CODE, message, False),), message)
    from ampfix.engine.pipeline import analyze

    plan = analyze(tree, source, options, suppressions.within(tree), project)
    findings = tuple(_finding(f, applied=rewrite) for f in plan.findings if options.reports(f.code))
    if not rewrite or not plan.has_edits:
        return SourceResult(source, source, findings)
    try:
        new_source = _rewrite(source, plan, options)
    except Exception as error:  # noqa: BLE001 - any failure leaves the file untouched, reported
        message = f"internal error, file left unchanged: {type(error).__name__}: {error}"
        unfixed = tuple(_finding(f, applied=False) for f in plan.findings if options.reports(f.code))
        line = getattr(error, "line", 1)  # a PlanMismatch names the statement it was caught in
        return SourceResult(source, source, (*unfixed, Finding(line, 1, INTERNAL_ERROR_CODE, message, False)), message)
    return SourceResult(source, new_source, findings)


def _rewrite(source: str, plan: Plan, options: Options) -> str:
    from ampfix.engine.apply import apply_plan

    new_source = apply_plan(source, plan, options.line_length, options.formatted)
    # Never hand back text that does not parse: the caller would write it.
    ast.parse(new_source)
    return new_source


def _finding(planned: PlannedFinding, applied: bool) -> Finding:
    return Finding(
        line=planned.line,
        col=planned.col + 1,
        code=planned.code,
        message=planned.message,
        fixable=planned.fixable,
        unsafe=planned.unsafe,
        fixed=applied and planned.will_fix,
        suggestion=planned.suggestion,
        follows=planned.follows,
    )


def _reads_apex_switch(options: Options, project: ProjectModules | None) -> bool:
    """Under --unsafe-fixes, a file that spells no use yet compares the members of an enum that switches the
    project's apex.amp uses (`ProjectModules.switch_reader`): its comparisons are rewritten with them."""
    return options.unsafe_fixes and project is not None and project.switch_reader()
