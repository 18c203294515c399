"""The pre-filter: can this file hold a deprecated AMP use? Decided on its bytes, without parsing.

Why the word `amp` is enough. Every deprecated name lies under `torch.cuda.amp` or `torch.cpu.amp`
(`ampfix.families.TORCH_AMP.roots`). The analysis resolves names statically, from what the file
spells: it follows imports and attribute chains, not `getattr` or other modules' re-exports (a head
that a star import may provide, or that `__import__("torch")` binds, is read as the module it spells only
where the chain below it spells the deprecated path, and so `amp`). So a use reaches the component `amp`
only by spelling it as a name, in an import or in a chain:

    import torch.cuda.amp as m          from torch.cuda.amp import autocast, GradScaler
    from torch.cuda import amp          from torch.cuda.amp.autocast_mode import autocast
    torch.cuda.amp.autocast()           th.cuda.amp.GradScaler()       (import torch as th)
    cuda.amp.custom_fwd                 (from torch import cuda)

A name is an identifier token, so the source holds `amp` with no letter, digit or underscore on
either side: `use_amp`, `amp_dtype`, `sample` and `clamp` do not count, `.amp`, ` amp` and `amp.` do.
The names a deprecated import binds (`autocast`, `GradScaler`, `custom_fwd`, `m` above) need no
search of their own: the import that binds them spells `amp`. String literals that name a
deprecated path (`"torch.cuda.amp.autocast"`, string annotations) spell it too.

Two spellings of the name `amp` are not the bytes `amp`, and both are caught:
- Python normalises identifiers (NFKC): `torch.cuda.ａｍｐ` is `torch.cuda.amp`. A file with
  non-ASCII bytes is normalised and searched again.
- A declared encoding may spell ASCII letters otherwise (UTF-7: `+AGE-mp` is `amp`). A file with a
  coding cookie is decoded and searched again.

NVIDIA apex (`ampfix.families.apex.rules`): `import apex` / `from apex...` spell `apex`, and the framework settings
that select it spell `"apex"` or `ApexOptimWrapper`, so a file holding `apex` or `Apex` is kept too. (DeepSpeed's
config key `"amp"` spells the name `amp`.)

Deprecated names outside those namespaces (`torch.get_autocast_gpu_dtype`, AMP007) are spelled by their own
last part: `torch.X`, `th.X`, `from torch import X as Y` all spell `X`. Those words are the rules' own
(`Family.spelled_names`, handed in as `SpelledNames`): one search for the part they share (`_autocast_`),
at memchr speed, then the words themselves as identifiers.

Deliberately not caught (and not caught by `ampfix.engine.check_source`, which applies the same
test): a string literal whose value contains `amp` only through escapes or implicit concatenation
(`"torch.cuda.\\x61mp"`, `"torch.cuda.a" "mp"`). These are not spellings a person writes.
"""

from __future__ import annotations

import re
import unicodedata
from typing import AnyStr

# `amp` followed by a non-word character: a literal prefix, so the search runs at memchr speed
# (`\bamp\b` is ~12x slower: the regex engine tries the boundary at every byte). The character
# before is checked by hand.
_AMP_END_BYTES = re.compile(rb"amp\b")
_AMP_END = re.compile(r"amp\b")
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
# PEP 263: a comment on one of the first two lines.
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)


class SpelledNames:
    """Identifiers that a use spells where it spells no deprecated root, and the longest part they all share."""

    __slots__ = ("names", "anchor", "_anchor_bytes", "_patterns")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.anchor = _shared_part(names)
        self._anchor_bytes = self.anchor.encode("ascii")
        # Compiled on the first file that holds the anchor: most runs (a commit's files) never need them.
        self._patterns: tuple[re.Pattern[str], re.Pattern[bytes]] | None = None

    def spelled_in(self, text: str | bytes) -> bool:
        """Is one of the names an identifier of `text` (ASCII words in bytes)?"""
        if not self.names:
            return False
        if isinstance(text, bytes):
            return self._anchor_bytes in text and self._compiled()[1].search(text) is not None
        return self.anchor in text and self._compiled()[0].search(text) is not None

    def _compiled(self) -> tuple[re.Pattern[str], re.Pattern[bytes]]:
        if self._patterns is None:
            pattern = rf"(?<!\w)(?:{'|'.join(map(re.escape, self.names))})(?!\w)"
            self._patterns = (re.compile(pattern), re.compile(pattern.encode("ascii")))
        return self._patterns


def _shared_part(names: tuple[str, ...]) -> str:
    """The longest substring of every name ('' if none, or no names)."""
    if not names:
        return ""
    first = min(names, key=len)
    for size in range(len(first), 0, -1):
        for start in range(len(first) - size + 1):
            part = first[start:start + size]
            if all(part in name for name in names):
                return part
    return ""


def could_hold_deprecated_use(source: str | bytes, names: SpelledNames) -> bool:
    """False only if the source cannot hold a deprecated use (see the module's docstring); `names`: the
    deprecated names outside the deprecated namespaces."""
    if isinstance(source, bytes):
        return _bytes_could_hold(source, names)
    if _has_amp_name(source) or names.spelled_in(source) or mentions_apex(source):
        return True
    if source.isascii():
        return False
    normalized = unicodedata.normalize("NFKC", source)
    return _has_amp_name(normalized) or names.spelled_in(normalized) or mentions_apex(normalized)


def mentions_apex(text: str | bytes) -> bool:
    """Does the text spell `apex` or `Apex` (see the docstring)? One search for `pex`, rare in code, then
    the letter before it: two plain searches cost twice as much on a tree without apex."""
    if isinstance(text, bytes):
        return _follows(text, b"pex", (ord("a"), ord("A")))
    return _follows(text, "pex", ("a", "A"))


def _follows(text: AnyStr, needle: AnyStr, letters: tuple[object, ...]) -> bool:
    """Is `needle` in `text` right after one of `letters`?"""
    i = text.find(needle)
    while i != -1:
        if i and text[i - 1] in letters:
            return True
        i = text.find(needle, i + 3)
    return False


def _bytes_could_hold(data: bytes, names: SpelledNames) -> bool:
    for match in _AMP_END_BYTES.finditer(data):
        start = match.start()
        if start == 0 or data[start - 1] not in _WORD_BYTES:
            return True
    if names.spelled_in(data) or mentions_apex(data):
        return True
    ascii_only = data.isascii()
    if ascii_only and not _COOKIE.search(data, 0, _end_of_second_line(data)):
        return False  # plain ASCII read as UTF-8: the bytes are the text
    from ampfix.syntax.encoding import DECODE_ERRORS, decode_source

    try:
        text, _ = decode_source(data)
    except DECODE_ERRORS:
        return False  # not Python source; never parsed
    return could_hold_deprecated_use(text, names)


def _end_of_second_line(data: bytes) -> int:
    first = data.find(b"\n")
    if first == -1:
        return len(data)
    second = data.find(b"\n", first + 1)
    return len(data) if second == -1 else second


def _has_amp_name(text: str) -> bool:
    for match in _AMP_END.finditer(text):
        start = match.start()
        if start == 0:
            return True
        before = text[start - 1]
        if not (before.isalnum() or before == "_"):  # exactly `\w` for str patterns
            return True
    return False


# Under a device target (`--device cpu|auto`, `--device-expr`), code already on torch.amp is
# looked at too (AMP006). Each of its names is spelled through `amp` (`torch.amp.X`, `from torch
# import amp`), except `torch.autocast` (and `torch.is_autocast_enabled`, AMP008...), spelled through the part
# their names share (`autocast`, `retarget_names.anchor`): a file holding those letters anywhere is parsed as
# well (a superset of the names, searched again in the decoded, normalised text).
def could_hold_use(source: str | bytes, retargets: bool, names: SpelledNames,
                   retarget_names: SpelledNames) -> bool:
    """False only if the source cannot hold a use that the run (device target or not) looks at."""
    if could_hold_deprecated_use(source, names):
        return True
    anchor = retarget_names.anchor
    if not retargets or not anchor:
        return False
    if isinstance(source, bytes):
        if anchor.encode("ascii") in source:
            return True
        if source.isascii() and not _COOKIE.search(source, 0, _end_of_second_line(source)):
            return False
        from ampfix.syntax.encoding import DECODE_ERRORS, decode_source

        try:
            source, _ = decode_source(source)
        except DECODE_ERRORS:
            return False
    return anchor in source or (not source.isascii() and anchor in unicodedata.normalize("NFKC", source))
