"""How Python reads a source file's bytes: the one place the encoding is detected."""

from __future__ import annotations

import io
import tokenize

# What decoding a file that is not valid source text raises: a bad coding cookie (SyntaxError),
# an unknown codec (LookupError), bytes not valid in the encoding.
DECODE_ERRORS = (SyntaxError, UnicodeDecodeError, LookupError)


def decode_source(data: bytes) -> tuple[str, str]:
    """(the text, its encoding) as Python reads the file: a BOM or a coding cookie, else UTF-8.

    The encoding is "utf-8-sig" when there is a BOM: decoding drops it, encoding restores it.
    Raises one of DECODE_ERRORS.
    """
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding
