"""The engine: source text in, a result out (new text, findings, diff); it never prints.

`ampfix.engine.api` holds the public functions; they are re-exported here, where users import them.
"""

from ampfix.engine.api import (INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE, Finding, Options, SourceResult, check_source,
                               fix_source)

__all__ = ["INTERNAL_ERROR_CODE", "SYNTAX_ERROR_CODE", "Finding", "Options", "SourceResult", "check_source",
           "fix_source"]
