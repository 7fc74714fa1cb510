"""Building a KB: from EDN, from the shipped sample, from a generator, from a snapshot.

EDN layout read by `load_edn` (top-level forms, in order):

* ``(in-context CxNursery)`` makes CxNursery the context of the sentences after it
  (before the first one, sentences go to ``CxBase``);
* any other list is a sentence stored in the current context;
* ``{:context CxNursery :sentences [(...) (...)]}`` stores its sentences in that
  context and leaves the current context as it was.

A whole file is read with ONE ``edn_format.loads`` call (the text wrapped in ``[ ]``):
edn_format rebuilds its lexer and parser on every call (~0.9 ms each), so reading form
by form would cost more than the parsing.

A snapshot (`save` / `open`) is msgpack (msgspec): the term table, the row columns as
raw arrays and each context's index as three flat arrays, so reopening does no
per-sentex Python work beyond rebuilding one dict entry per index key.
"""

from __future__ import annotations

import codecs
import os
import re
import sys
from array import array
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any
from typing import Final

import msgspec

from vaelii_llm._files import FileRefused
from vaelii_llm._files import read_regular
from vaelii_llm.kb import _args as arg
from vaelii_llm.kb._store import DEFAULT_CONTEXT
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._store import _Ctx
from vaelii_llm.kb._store import edn_module
from vaelii_llm.kb._store import is_symbol
from vaelii_llm.kb._store import symbol
from vaelii_llm.kb._types import MAX_NESTING
from vaelii_llm.kb._types import EngineRefusal
from vaelii_llm.kb._types import too_deep
from vaelii_llm.kb._writes import _assert

__all__ = ["load_edn", "open", "sample", "save", "synthetic"]

SNAPSHOT_FORMAT: Final = "vaelii-kb/1"
_sample_forms: list[Any] | None = None


MAX_EDN_FILE_BYTES: Final = 16 * 1024 * 1024
"""The largest EDN file `load_edn` reads (its size checked before a byte is read).
Parsing holds some 40 bytes of memory per byte of text (2.4 MB of sentences: +100 MB,
measured), so a 16 MiB file already costs some 700 MB; a bigger KB goes in as
several files, or as a snapshot (`save` / `open`)."""

_LAYOUT_DEPTH: Final = 2
"""The brackets the layout puts around a sentence (``{:sentences [ … ]}``): a file
may nest that much deeper than :data:`MAX_NESTING`, the cap on a sentence."""


def _read_forms(text: str, origin: str) -> list[Any]:
    at = too_deep(text, MAX_NESTING + _LAYOUT_DEPTH)
    if at is not None:
        raise EngineRefusal(
            "malformed-sentence",
            f"{origin}, {_line_col(text, at)}: a form is nested deeper than {MAX_NESTING}",
        )
    try:
        forms = edn_module().loads("[" + text + "\n]")
    except Exception as exc:
        raise EngineRefusal(
            "malformed-sentence",
            f"{origin} is not readable EDN: {_where_unreadable(text, exc)}"[:300],
        ) from None
    return list(forms)


def _line_col(text: str | bytes, at: int) -> str:
    """Where offset ``at`` of ``text`` is, as a person counts: line and column from 1."""
    newline = "\n" if isinstance(text, str) else b"\n"
    line = text.count(newline, 0, at) + 1  # type: ignore[arg-type]
    return f"line {line}, column {at - text.rfind(newline, 0, at)}"  # type: ignore[arg-type]


_CLOSES: Final = {")": "(", "]": "[", "}": "{"}
_LEXPOS: Final = re.compile(r"LexToken\(\w+,'(.*?)',\d+,(\d+)\)|lexpos (\d+)")


def _where_unreadable(text: str, exc: Exception) -> str:
    """Why edn_format refused ``text``, with a line and column: a bracket left
    open or closing nothing (found by a scan that skips strings, comments and
    character literals), else the place the reader stopped at."""
    opened: list[tuple[str, int]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                return f"{_line_col(text, i)}: a string opened here is never closed"
            i = end
        elif ch == ";":
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
        elif ch == "\\":
            i += 1  # a character literal: \( is no bracket
        elif ch in "([{":
            opened.append((ch, i))
        elif ch in _CLOSES:
            if not opened:
                return f"{_line_col(text, i)}: {ch!r} closes nothing"
            opener, at = opened.pop()
            if opener != _CLOSES[ch]:
                return (
                    f"{_line_col(text, i)}: {ch!r} closes the {opener!r} at {_line_col(text, at)}"
                )
        i += 1
    if opened:
        opener, at = opened[-1]
        return f"{_line_col(text, at)}: the {opener!r} opened here is never closed"
    found = _LEXPOS.search(str(exc))
    if found is None:
        return f"{type(exc).__name__}: {exc}"
    pos = int(found.group(2) or found.group(3)) - 1  # the text was read inside "[ ]"
    return f"{_line_col(text, max(pos, 0))}: the reader stopped here ({type(exc).__name__})"


def _is_path(x: str | os.PathLike[str]) -> bool:
    """A path-like, or a one-line string with no form in it: no EDN text of
    sentences lacks a bracket, so a missing file is refused, not parsed."""
    if not isinstance(x, str):
        return True
    return "\n" not in x and not any(bracket in x for bracket in "([{")


def load_edn(path_or_text: str | os.PathLike[str], into: KB | None = None) -> KB:
    """Read sentences from an EDN file (a path) or EDN text into `into` (a new KB).

    See the module docstring for the layout. A path must name a regular file of at
    most `MAX_EDN_FILE_BYTES` (a FIFO, a device or a bigger file is refused,
    `bad-path`, before a byte is read); the reading blocks, so a coroutine calls
    this through ``asyncio.to_thread``. A malformed form is refused
    (`EngineRefusal`, naming the form's position); forms before it stay stored.
    """
    if _is_path(path_or_text):
        p = Path(path_or_text)
        try:
            data = read_regular(p, MAX_EDN_FILE_BYTES, "a KB file")
        except FileRefused as exc:
            raise EngineRefusal("bad-path", str(exc)) from None
        # the mark some editors open a UTF-8 file with says only that: skipped
        skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
        try:
            text = data[skip:].decode("utf-8")
        except UnicodeDecodeError as exc:
            at = exc.start + skip
            where = _line_col(data, at)
            raise EngineRefusal(
                "malformed-sentence",
                f"{p} is not UTF-8 text: byte 0x{data[at]:02x} at {where}; save it as UTF-8",
            ) from None
        origin = str(p)
    else:
        text = str(path_or_text).removeprefix("\ufeff")  # a byte-order mark, decoded
        origin = "the EDN text"
    return _load_forms(_read_forms(text, origin), origin, into)


def _load_forms(forms: Iterable[Any], origin: str, into: KB | None) -> KB:
    kb = KB() if into is None else into
    edn = edn_module()
    in_context = symbol("in-context")
    ctx_key, sent_key = edn.Keyword("context"), edn.Keyword("sentences")
    current = kb.intern(symbol(DEFAULT_CONTEXT))
    with kb._wlock:
        for i, form in enumerate(forms):
            try:
                if type(form) is tuple and form and form[0] == in_context:
                    if len(form) != 2:
                        raise EngineRefusal(
                            "malformed-sentence", "(in-context Name) takes one name"
                        )
                    current = kb.intern(arg.context_symbol(form[1]))
                elif type(form) is tuple:
                    _assert(kb, form, current)
                elif isinstance(form, dict) or hasattr(form, "keys"):
                    if ctx_key not in form:  # say what was found: a map, not a context form
                        keys = " ".join(edn.dumps(key) for key in form)[:60] or "none"
                        raise EngineRefusal(
                            "malformed-context",
                            f"found a map with no :context key (its keys: {keys}); a map "
                            "here is a context form, {:context CxWell :sentences [(isa "
                            "Muffet Spider)]}, and a sentence is a list, (isa Muffet Spider)",
                        )
                    cid = kb.intern(arg.context_symbol(form.get(ctx_key)))
                    for s in form.get(sent_key) or ():
                        _assert(kb, s, cid)
                else:
                    raise EngineRefusal(
                        "malformed-sentence", f"{form!r} is neither a sentence nor a context form"
                    )
            except EngineRefusal as exc:
                reason = str(exc).removeprefix(f"{exc.type}: ")
                raise EngineRefusal(
                    exc.type, f"{origin}, form {i + 1}: {reason}", **exc.data
                ) from None
    return kb


def sample() -> KB:
    """A fresh copy of the shipped sample KB (nursery rhymes, animals, who fears whom).

    The file is parsed once per process; each call builds a new, independent KB.
    """
    global _sample_forms
    if _sample_forms is None:
        text = resources.files("vaelii_llm.kb").joinpath("data/sample.edn").read_text("utf-8")
        _sample_forms = _read_forms(text, "sample.edn")
    return _load_forms(_sample_forms, "sample.edn", None)


def synthetic(n: int, *, context: str = "CxSynthetic") -> KB:
    """A KB of exactly `n` sentexes for benchmarks and tests, built without EDN.

    99% of them sit in `context`; the rest in ``CxSynthSide`` (which inherits from it).
    Entities ``E0 .. E{m-1}`` (m = n // 10, at least 10) each get about ten sentences as
    subject: one ``(isa Ei Tj)`` and ``(relK Ei Ej)`` for K in 1..9, so a lookup with
    one bound entity matches about ten sentexes whatever `n` is.
    """
    if n < 0:
        raise EngineRefusal("bad-argument", "n must be >= 0")
    kb = KB()
    m = max(10, n // 10)
    k = max(5, min(1000, n // 1000))
    sym = edn_module().Symbol
    ent = [kb.intern(sym(f"E{i}")) for i in range(m)]
    typ = [kb.intern(sym(f"T{j}")) for j in range(k)]
    preds = [kb.intern(sym("isa"))] + [kb.intern(sym(f"rel{j}")) for j in range(1, 10)]
    main = kb.intern(sym(context))
    side = kb.intern(sym("CxSynthSide"))
    n_side = n // 100 if n >= 200 else 0
    n_main = n - n_side - (1 if n_side else 0)

    def rows(start: int, stop: int) -> Iterable[tuple[int, ...]]:
        isa = preds[0]
        for i in range(start, stop):
            e = ent[i % m]
            j = (i // m) % 10
            if j == 0:
                yield (isa, e, typ[(i // m // 10 + i) % k])
            else:
                yield (preds[j], e, ent[(i * 7919 + j) % m])

    kb.bulk_add(main, rows(0, n_main))
    if n_side:
        kb.add(side, (kb.sid("genlCtx"), side, main))
        kb.bulk_add(side, rows(n_main, n_main + n_side))
    return kb


# -- snapshots ---------------------------------------------------------------------


def _pack_term(x: object) -> tuple[str, Any]:
    if is_symbol(x):
        return ("s", str(x))
    if type(x) is bool:
        return ("b", x)
    if type(x) is int:
        return ("i", x)
    if type(x) is float:
        return ("f", x)
    return ("t", x)


def save(kb: KB, path: str | os.PathLike[str]) -> None:
    """Write a binary snapshot (msgpack) of `kb` to `path`; `open` reads it back."""
    with kb._wlock:
        ctxs = []
        for cid, c in kb._contexts.items():
            keys = array("q", c.keys)
            lens = array("q")
            flat = array("q")
            for v in c.keys.values():
                if isinstance(v, int):
                    lens.append(1)
                    flat.append(v)
                else:
                    lens.append(len(v))
                    flat.extend(v)
            ctxs.append(
                [cid, keys.tobytes(), lens.tobytes(), flat.tobytes(), c.all.tobytes(), c.live]
            )
        doc = {
            "format": SNAPSHOT_FORMAT,
            "byteorder": sys.byteorder,
            "terms": [_pack_term(t) for t in kb.terms],
            "flat": kb._flat.tobytes(),
            "ends": kb._ends.tobytes(),
            "ctx": kb._ctx.tobytes(),
            "state": bytes(kb._state),
            "contexts": ctxs,
            "retract_ticks": list(kb._retract_ticks.items()),
            "derived": [[h, list(s)] for h, s in kb._derived.items()],
            "scratch": sorted(kb._scratch),
        }
        data = msgspec.msgpack.encode(doc)
    Path(path).write_bytes(data)


def open(path: str | os.PathLike[str]) -> KB:
    """Read a snapshot written by `save` into a new KB; a file that is not one,
    or a damaged one, is refused ``bad-path``."""
    try:
        return _open(path)
    except EngineRefusal:
        raise
    except Exception as exc:  # a damaged snapshot: missing fields, wrong shapes
        raise EngineRefusal(
            "bad-path", f"{path} holds a damaged snapshot ({type(exc).__name__})"
        ) from None


def _open(path: str | os.PathLike[str]) -> KB:
    try:
        doc = msgspec.msgpack.decode(Path(path).read_bytes())
    except (OSError, msgspec.DecodeError) as exc:
        raise EngineRefusal("bad-path", f"cannot read a snapshot from {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT:
        raise EngineRefusal("bad-path", f"{path} is not a {SNAPSHOT_FORMAT} snapshot")
    if doc["byteorder"] != sys.byteorder:
        raise EngineRefusal("bad-path", f"{path} was written on a {doc['byteorder']}-endian host")
    sym = edn_module().Symbol
    kb = KB()  # interns the special predicates first, as every KB (and so the saved one) did
    for tag, v in doc["terms"]:
        kb.intern(sym(v) if tag == "s" else v)
    if len(kb.terms) != len(doc["terms"]):
        raise EngineRefusal("bad-path", f"{path} holds a corrupt term table")
    kb._flat = array("i", doc["flat"])
    kb._ends = array("q", doc["ends"])
    kb._ctx = array("i", doc["ctx"])
    kb._state = bytearray(doc["state"])
    for cid, keys_b, lens_b, flat_b, all_b, live in doc["contexts"]:
        c = _Ctx()
        c.nested = None  # the duplicate index of nested sentences: built at the first write
        keys, lens, flat = array("q", keys_b), array("q", lens_b), array("q", flat_b)
        d = c.keys
        off = 0
        for key, ln in zip(keys, lens, strict=True):
            d[key] = flat[off] if ln == 1 else flat[off : off + ln]
            off += ln
        c.all = array("q", all_b)
        c.live = live
        kb._contexts[cid] = c
    kb._retract_ticks = dict(doc["retract_ticks"])
    kb._derived = {h: tuple(s) for h, s in doc["derived"]}
    kb._scratch = set(doc["scratch"])
    # derived tables: only the special predicates' rows are replayed
    for name in ("genlCtx", "implies", "arity", "isa", "genls"):
        pid = kb.sid(name)
        for cid, c in kb._contexts.items():
            for h in c.mentioning(pid, 0):
                if kb._state[h - 1] == 1:
                    kb._note_special(h, cid, kb.row(h), added=True)
    return kb
