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

NVIDIA apex (`ampfix.families.apex.rules`, handed in as `ApexSpellings`). Every apex name a rule lists lies below
one of apex's removed modules (`apex.amp`, `apex.parallel`, `apex.fp16_utils`), and a use spells the module's own
name as it spells each component of the name it resolves to: `from apex import parallel`, `apex.parallel.X`,
`import apex as a` then `a.parallel`, `from apex import *` then `parallel.X`. Where the module's name is a common
word (`torch.nn.parallel`), it counts only beside what binds it to apex: `apex.parallel` itself, `from apex import`,
`apex as`, or `__import__` (whose `"apex.x"` returns `apex`). The other names are spelled whole (mmengine's
`ApexOptimWrapper`, apex's optimizer attribute `_amp_stash`), and the framework settings that select apex spell their
value with its quotes (`"apex"`, which `import_module("apex")` spells too). Each of these holds `apex` or `Apex`:
a file without either is not searched for them. (DeepSpeed's config key `"amp"` and `apex.amp` spell the name
`amp`.) A file that only mentions apex (`is_apex_available()`, `from apex.optimizers import FusedAdam`) is dropped.

Deprecated names outside those namespaces (`torch.get_autocast_gpu_dtype`, AMP007) are spelled by their own
last part: `torch.X`, `th.X`, `from torch import X as Y` all spell `X`. Those words are the rules' own
(`Family.spelled_names`, handed in as `SpelledNames`): one search for the part they share (`_autocast_`),
at memchr speed, then the words themselves as identifiers.

Deliberately not caught (and not caught by `ampfix.engine.check_source`, which applies the same
test): a string literal whose value contains `amp` only through escapes or implicit concatenation
(`"torch.cuda.\\x61mp"`, `"torch.cuda.a" "mp"`), and an apex chain broken by a comment
(`(apex  # why` then `.parallel)`). These are not spellings a person writes.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, AnyStr, NamedTuple

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


class ApexSpellings:
    """What a use of apex's removed names spells beside `apex` (see the module's docstring): the removed modules'
    names (`parallel`), the names spelled whole (`ApexOptimWrapper`), the settings' values (`apex`, with quotes)."""

    __slots__ = ("modules", "names", "quoted", "_encoded", "_patterns")

    def __init__(self, modules: tuple[str, ...], names: tuple[str, ...], values: tuple[str, ...]) -> None:
        self.modules = modules
        self.names = names
        self.quoted = tuple(quote + value + quote for value in values for quote in "\"'")
        self._encoded = tuple(tuple(word.encode("ascii") for word in words) for words in (self.quoted, names, modules))
        # (module word, `apex.module`, what else binds apex, names): compiled on the first file that mentions apex
        self._patterns: dict[type, tuple[re.Pattern[Any], ...]] = {}

    def spelled_in(self, text: AnyStr) -> bool:
        """Could `text` (which mentions apex) hold a use of a removed apex name? Each pattern runs only where its
        words are in the text, and each begins with a literal word, so it is searched for at memchr speed."""
        if isinstance(text, bytes):
            quoted, names, modules = self._encoded
        else:
            quoted, names, modules = self.quoted, self.names, self.modules
        if any(word in text for word in quoted):
            return True
        module_word, dotted, binder, named = self._compiled(type(text))
        if any(word in text for word in names) and named.search(text) is not None:
            return True
        if not any(word in text for word in modules):
            return False
        if dotted.search(text) is not None:
            return True
        dynamic = b"__import__" in text if isinstance(text, bytes) else "__import__" in text
        return (dynamic or binder.search(text) is not None) and module_word.search(text) is not None

    def _compiled(self, kind: type) -> tuple[re.Pattern[Any], ...]:
        if kind not in self._patterns:
            gap, space = r"[\s\\]*", r"(?:[ \t]|\\\r?\n)+"  # `from apex import` is one logical line
            modules = "|".join(map(re.escape, self.modules)) or "(?!)"
            names = "|".join(map(re.escape, self.names)) or "(?!)"
            # the word first and what may not precede it after (`apex(?<!\wapex)`): a literal prefix
            sources = (rf"(?<!\w)(?:{modules})(?!\w)", rf"apex(?<!\wapex){gap}\.{gap}(?:{modules})(?!\w)",
                       rf"apex(?<!\wapex){space}(?:import|as)(?!\w)", rf"(?<!\w)(?:{names})(?!\w)")
            self._patterns[kind] = tuple(re.compile(p.encode("ascii") if kind is bytes else p) for p in sources)
        return self._patterns[kind]


class Spellings(NamedTuple):
    """The rules' words the pre-filter searches for beside `amp` (from `ampfix.families`)."""

    names: SpelledNames  # deprecated names no deprecated root spells
    retarget_names: SpelledNames  # what a device target looks at that no `amp` spells
    apex: ApexSpellings


def could_hold_deprecated_use(source: str | bytes, spellings: Spellings) -> bool:
    """False only if the source cannot hold a deprecated use (see the module's docstring)."""
    if isinstance(source, bytes):
        return _bytes_could_hold(source, spellings)
    if _has_amp_name(source) or _spells_other_names(source, spellings):
        return True
    if source.isascii():
        return False
    normalized = unicodedata.normalize("NFKC", source)
    return _has_amp_name(normalized) or _spells_other_names(normalized, spellings)


def _spells_other_names(text: AnyStr, spellings: Spellings) -> bool:
    return spellings.names.spelled_in(text) or (mentions_apex(text) and spellings.apex.spelled_in(text))


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


def _bytes_could_hold(data: bytes, spellings: Spellings) -> bool:
    for match in _AMP_END_BYTES.finditer(data):
        start = match.start()
        if start == 0 or data[start - 1] not in _WORD_BYTES:
            return True
    if _spells_other_names(data, spellings):
        return True
    ascii_only = data.isascii()
    if ascii_only and not _COOKIE.search(data, 0, _end_of_second_line(data)):
        return False  # plain ASCII read as UTF-8: the bytes are the text
    from ampfix.syntax.encoding import DECODE_ERRORS, decode_source

    try:
        text, encoding = decode_source(data)
    except DECODE_ERRORS:
        return False  # not Python source; never parsed
    if encoding in _UTF8:
        # The text's ASCII characters are the bytes searched above (where the bytes test saw a non-ASCII byte
        # beside a word, the text's test sees a letter or not: the bytes' is the wider): only the spellings NFKC
        # folds to ASCII (`ａｍｐ`) are left to find.
        if unicodedata.is_normalized("NFKC", text):
            return False
        normalized = unicodedata.normalize("NFKC", text)
        return _has_amp_name(normalized) or _spells_other_names(normalized, spellings)
    return could_hold_deprecated_use(text, spellings)


_UTF8 = ("utf-8", "utf-8-sig")  # as `tokenize.detect_encoding` names them


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
def could_hold_use(source: str | bytes, retargets: bool, spellings: Spellings) -> bool:
    """False only if the source cannot hold a use that the run (device target or not) looks at."""
    if could_hold_deprecated_use(source, spellings):
        return True
    anchor = spellings.retarget_names.anchor
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
