"""A codec per file kind: the file's bytes as the source text the engine reads, and the engine's
result back as the file's new text. Pure: no file is read or written here (ampfix.io.files does).

A Python file's source is its text (here). A notebook's source is its code cells joined as one
module; its decoded form keeps the map back to the cells (ampfix.io.notebooks, the notebook codec).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ampfix.syntax.encoding import DECODE_ERRORS, decode_source
from ampfix.syntax.prefilter import ApexSpellings, SpelledNames, Spellings, could_hold_use, mentions_apex

READ_ERROR_CODE = "AMP902"  # a file or folder that cannot be read (or is not a regular file)
WRITE_ERROR_CODE = "AMP903"  # a rewrite that could not be written: the file is left as it was
PYTHON_SUFFIX = ".py"
NOTEBOOK_SUFFIX = ".ipynb"


class DecodeError(Exception):
    """Bytes that are not a file of the codec's kind: reported with `code`, the file left as it is."""

    def __init__(self, message: str, code: str = READ_ERROR_CODE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Converted:
    """The engine's result in the file's terms."""

    __slots__ = ("findings", "new_text", "error")

    def __init__(self, findings: tuple[Finding, ...], new_text: str | None, error: str | None = None) -> None:
        self.findings = findings
        self.new_text = new_text  # the file's new text; None: nothing to write
        self.error = error


if TYPE_CHECKING:  # the codecs' interface, for the type checker: classes cost start-up (every commit)
    from ampfix.engine import Finding, SourceResult

    class Decoded(Protocol):
        @property
        def text(self) -> str:
            """The file's text: what a diff shows."""
            ...

        @property
        def encoding(self) -> str:
            """How the new text becomes bytes."""
            ...

        @property
        def source(self) -> str:
            """What the engine reads."""
            ...

        def converted(self, result: SourceResult) -> Converted:
            """The engine's result (from `source`) in the file's terms."""
            ...

    class Codec(Protocol):
        def could_hold(self, data: bytes, retargets: bool) -> bool:
            """False only if the file cannot hold a use the run looks at (then it is never decoded)."""
            ...

        def decode(self, data: bytes, retargets: bool = False) -> Decoded:
            """Raises DecodeError. `retargets`: the run also looks at uses already on the new API
            (what `could_hold` is told), for a codec that filters parts of a file."""
            ...


class PythonText:
    __slots__ = ("text", "encoding")

    def __init__(self, text: str, encoding: str) -> None:
        self.text = text
        self.encoding = encoding

    @property
    def source(self) -> str:
        return self.text

    def converted(self, result: SourceResult) -> Converted:
        if result.error is not None or not result.changed:
            return Converted(result.findings, None, result.error)
        return Converted(result.findings, result.new_source)


# Every name the pre-filter searches for beside `amp` and apex (`ampfix.families.SPELLED_NAMES` and
# `RETARGET_NAMES`, derived from the rules) holds this part, as tests/test_prefilter.py checks. An ASCII file
# without it, without `apex`/`Apex`, and without a coding cookie that could spell them otherwise, cannot spell
# them: it is searched for `amp` only, and the rule data is not imported (the pre-commit hook's common case).
NAMES_PART = b"autocast"
_NO_SPELLINGS = Spellings(SpelledNames(()), SpelledNames(()), ApexSpellings((), (), ()))


def _spellings(data: bytes) -> Spellings:
    if data.isascii() and NAMES_PART not in data and b"coding" not in data and not mentions_apex(data):
        return _NO_SPELLINGS
    from ampfix.families import SPELLINGS

    return SPELLINGS


class PythonCodec:
    def could_hold(self, data: bytes, retargets: bool) -> bool:
        return could_hold_use(data, retargets, _spellings(data))

    def decode(self, data: bytes, retargets: bool = False) -> PythonText:
        try:
            return PythonText(*decode_source(data))
        except DECODE_ERRORS as error:
            raise DecodeError(f"not valid in its declared encoding: {error}") from None


PYTHON = PythonCodec()
SUFFIXES = (PYTHON_SUFFIX, NOTEBOOK_SUFFIX)  # what a folder's walk takes
