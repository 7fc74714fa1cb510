"""vaelii_llm._edn: the safe reader and the bounded, lazy writer."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import string
import subprocess
import sys
import uuid
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import edn_format
import msgspec
import pytest
from edn_format import Keyword
from edn_format import Symbol
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.support.hypothesis_helpers import recursive
from vaelii_llm import _edn as edn
from vaelii_llm._edn import CUT_MARKER
from vaelii_llm._edn import MAX_DEPTH
from vaelii_llm._edn import EDNRefusal

# -- strategies ------------------------------------------------------------------------

_RESERVED = {"nil", "true", "false"}
_FIRST = string.ascii_letters
_REST = string.ascii_letters + string.digits + "*+!_?<>=.-"
# The strings of [a-zA-Z][a-zA-Z0-9*+!_?<>=.-]{0,12}, drawn without from_regex,
# which took a quarter of these properties' time.
_names = st.builds(
    str.__add__, st.sampled_from(_FIRST), st.text(alphabet=_REST, max_size=12)
).filter(lambda name: name not in _RESERVED)
symbols = _names.map(Symbol)
keywords = _names.map(Keyword)
texts = st.text(alphabet=st.characters(codec=None), max_size=40)  # surrogates included
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    texts,
    symbols,
    keywords,
)
hashables = recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(tuple), st.frozensets(inner, max_size=4)
    ),
    max_leaves=12,
)
values = recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.lists(inner, max_size=6).map(tuple),
        st.dictionaries(hashables, inner, max_size=5),
        st.frozensets(hashables, max_size=5),
    ),
    max_leaves=40,
)


def _endless(kind: str, seed: Any) -> Iterator[Any]:
    if kind == "count":
        return itertools.count()
    if kind == "cycle":
        return itertools.cycle([seed, Symbol("x")])
    if kind == "repeat":
        return itertools.repeat(seed)
    return ({Keyword("n"): itertools.count()} for _ in itertools.count())


def _infinite(seed: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(["count", "cycle", "repeat", "nested"]).map(
        lambda kind: _endless(kind, seed)
    )


lazy_values = values.flatmap(
    lambda seed: st.one_of(
        st.just(seed),
        _infinite(seed),
        st.lists(_infinite(seed), min_size=1, max_size=3),
        _infinite(seed).map(lambda it: {Keyword("answers"): it}),
    )
)


# -- writing ---------------------------------------------------------------------------


# One draw serves both properties of a value: drawing it is most of their cost.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.integers(min_value=0, max_value=200))
def test_whole_values_round_trip_and_a_cut_is_a_prefix_of_the_whole(
    value: Any, max_chars: int
) -> None:
    whole = edn.write(value, 10**7)
    assert not whole.cut
    assert edn_format.loads(whole.text) == value
    assert edn.read(whole.text) == value

    written = edn.write(value, max_chars)
    if written.cut:
        prefix = written.text[: -len(CUT_MARKER)] if max_chars >= len(CUT_MARKER) else ""
        assert len(prefix) == max(0, max_chars - len(CUT_MARKER))  # the marker's room
        assert whole.text.startswith(prefix)
        assert len(whole.text) > max_chars
    else:
        assert written.text == whole.text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lazy_values, st.integers(min_value=0, max_value=300))
def test_output_never_exceeds_the_bound(value: Any, max_chars: int) -> None:
    written = edn.write(value, max_chars)
    assert len(written.text) <= max_chars  # the marker included
    if written.cut and max_chars < len(CUT_MARKER):
        assert written.text == CUT_MARKER[:max_chars]  # what of the marker fits
    else:
        assert written.cut == written.text.endswith(CUT_MARKER)


def test_exact_fit_is_not_cut() -> None:
    value = [Symbol("a"), "bc", 12, (Symbol("d"),), "e" * 100]
    whole = edn.write(value, 1000).text
    assert edn.write(value, len(whole)) == (whole, False)
    shorter = edn.write(value, len(whole) - 1)
    assert shorter.cut
    assert len(shorter.text) == len(whole) - 1  # the marker takes its room from the text
    assert shorter.text == whole[: len(whole) - 1 - len(CUT_MARKER)] + CUT_MARKER


def test_one_long_write_takes_only_the_room_left() -> None:
    long_name = Symbol("x" * 100_000)
    room = 50 + len(CUT_MARKER)
    written = edn.write([long_name, "y" * 100_000], room)
    assert written.text == "[" + "x" * 49 + CUT_MARKER
    written = edn.write(["y" * 100_000], room)
    assert written.text == '["' + "y" * 48 + CUT_MARKER


@pytest.mark.parametrize(
    "answer",
    [itertools.count(), itertools.cycle([1, Symbol("a")]), itertools.repeat((Symbol("x"),))],
    ids=["count", "cycle", "repeat"],
)
def test_infinite_answers_print_and_return(answer: Iterator[Any]) -> None:
    written = edn.write(answer, 4000)
    assert written.cut
    assert len(written.text) == 4000
    assert written.text.endswith(CUT_MARKER)


def test_nested_infinite_structures() -> None:
    rows = ({Keyword("row"): n, Keyword("cols"): itertools.count()} for n in itertools.count())
    written = edn.write(rows, 200)
    assert written.cut
    assert written.text.startswith("[{:row 0, :cols [0 1 2")
    cyc = itertools.cycle([itertools.repeat(Symbol("z"))])
    assert edn.write(cyc, 100).text.startswith("[[z z z")


def test_realizes_only_what_it_prints_and_closes_the_source() -> None:
    pulled = 0
    closed = False

    def records() -> Iterator[dict[Keyword, int]]:
        nonlocal pulled, closed
        try:
            for n in range(10**6):
                pulled += 1
                yield {Keyword("handle"): n}
        finally:
            closed = True

    written = edn.write(records(), 300)
    assert written.cut
    # realized as far as the bound reaches (the marker's room included), one past it
    reach = edn.write([{Keyword("handle"): n} for n in range(100)], 10**6).text[:300]
    assert pulled <= reach.count(":handle") + 1
    assert written.text.count(":handle") < pulled < 40
    assert closed


def test_deep_values_do_not_recurse() -> None:
    deep: list[Any] = []
    cursor = deep
    for _ in range(200_000):
        child: list[Any] = []
        cursor.append(child)
        cursor = child
    written = edn.write(deep, 100 + len(CUT_MARKER))
    assert written.text == "[" * 100 + CUT_MARKER
    nested_tuple: Any = ()
    for _ in range(50_000):
        nested_tuple = (nested_tuple,)
    assert edn.write(nested_tuple, 10).cut


def test_records_project_to_keyword_maps_lazily() -> None:
    class Sentex(msgspec.Struct, frozen=True):
        handle: int
        sentence: tuple[Any, ...]
        in_context: Symbol

    @dataclasses.dataclass
    class Binding:
        var_name: str
        value: Any

    fetched: list[str] = []

    class Spy(msgspec.Struct):
        first: int
        second: int

        def __getattribute__(self, name: str) -> Any:
            fetched.append(name)
            return super().__getattribute__(name)

    record = Sentex(1, (Symbol("isa"), Symbol("Muffet"), Symbol("Spider")), Symbol("CxWell"))
    assert edn.write(record, 1000).text == (
        "{:handle 1, :sentence (isa Muffet Spider), :in-context CxWell}"
    )
    assert edn.write(Binding("?x", Symbol("Muffet")), 100).text == (
        '{:var-name "?x", :value Muffet}'
    )
    fetched.clear()
    edn.write(Spy(1, 2), len("{:first 1"))
    assert "second" not in fetched


def test_a_tagged_record_prints_its_tag_first() -> None:
    # msgspec encodes a tagged Struct's tag; the projection keeps it, so a record
    # says what it is (the engine's cut record reads {:kind "cut", :reason ...}).
    class Note(msgspec.Struct, frozen=True, tag_field="kind", tag="note"):
        text_of: str

    assert edn.write(Note("hi"), 100).text == '{:kind "note", :text-of "hi"}'
    assert edn.write([Note("a")], 100).text == '[{:kind "note", :text-of "a"}]'


def test_other_atoms() -> None:
    when = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)
    ident = uuid.UUID("f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
    value = [Decimal("1.5"), Fraction(22, 7), ident, when, float("inf"), float("-inf")]
    text = edn.write(value, 1000).text
    assert edn_format.loads(text) == value
    assert edn.write(float("nan"), 10).text == "##NaN"
    assert edn.write(b"ab", 10).text == "\"b'ab'\""
    assert edn.write(object, 100).text == "\"<class 'object'>\""
    assert edn.write(range(3), 10).text == "[0 1 2]"
    assert edn.write({1: 2}.keys(), 10).text == "#{1}"
    huge = 7**20_000  # past str()'s digit limit
    text = edn.write(huge, 10**6).text
    assert text.startswith("0x")
    assert int(text, 16) == huge


def test_strings_escape_and_round_trip() -> None:
    awkward = 'q"b\\s\n\t\r\x00\x1f\x7f\x85\u2028\ud800\U0001f600 \\u0041 \\N{BULLET}'
    text = edn.write(awkward, 1000).text
    assert "\n" not in text
    assert edn_format.loads(text) == awkward


def test_a_source_that_raises_propagates_and_is_closed() -> None:
    closed = False

    def failing() -> Iterator[int]:
        nonlocal closed
        try:
            yield 1
            raise LookupError("engine refusal mid-answer")
        finally:
            closed = True

    with pytest.raises(LookupError):
        edn.write([failing()], 100)
    assert closed


# -- reading ---------------------------------------------------------------------------


def test_reads_one_form() -> None:
    assert edn.read("(isa ?x Spider)") == (Symbol("isa"), Symbol("?x"), Symbol("Spider"))
    assert edn.read("CxWell") == Symbol("CxWell")
    assert edn.read("{:max-depth 3 :limit 10}") == {Keyword("max-depth"): 3, Keyword("limit"): 10}
    assert edn.read(' "Muffet" ; a comment') == "Muffet"


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        (None, "edn-not-a-string"),
        (3, "edn-not-a-string"),
        (["(a)"], "edn-not-a-string"),
        ({"a": 1}, "edn-not-a-string"),
        ("(" * 100_000, "edn-too-long"),
        ("(" * 10_000 + ")" * 10_000, "edn-too-deep"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "edn-too-deep"),
        ("#foo 1", "edn-unknown-tag"),
        ("#=(eval 1)", "edn-syntax"),
        ("(a", "edn-syntax"),
        (")", "edn-syntax"),
        ('"abc', "edn-syntax"),
        ('"\\xZZ"', "edn-syntax"),
        ("9" * 5000, "edn-syntax"),
        ("", "edn-empty"),
        ("  ; nothing", "edn-empty"),
        ("(a) (b)", "edn-trailing"),
        ("^:meta x", "edn-metadata"),
        ("[1 ^:meta x]", "edn-metadata"),
    ],
)
def test_refusals(text: object, refusal: str) -> None:
    with pytest.raises(EDNRefusal) as info:
        edn.read(text, "goal")
    assert info.value.type == refusal
    assert "goal" in str(info.value)


def test_depth_bound_is_exact_and_ignores_strings() -> None:
    at_bound = "(" * MAX_DEPTH + ")" * MAX_DEPTH
    assert edn.read(at_bound) is not None
    in_string = '"' + "(" * 10_000 + '"'
    assert edn.read(in_string) == "(" * 10_000
    commented = "; " + "(" * 10_000 + "\n(a)"
    assert edn.read(commented) == (Symbol("a"),)


def test_deep_input_is_refused_at_the_depth_bound() -> None:
    # Unbalanced on purpose: a reader that parsed the whole text first would
    # refuse the imbalance; this one stops at the bound, and says so.
    with pytest.raises(EDNRefusal, match=f"deeper than {MAX_DEPTH} brackets"):
        edn.read("(" * 30_000 + ")" * 2_000)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), st.text(alphabet='()[]{}#:"\\;^ ax1.-/', max_size=200)))
def test_any_text_reads_or_is_refused(text: str) -> None:
    refusal: EDNRefusal | None = None
    try:
        edn.read(text)
    except EDNRefusal as exc:
        refusal = exc
    assert refusal is None or refusal.type.startswith("edn-")


def test_import_does_not_load_edn_format() -> None:
    code = (
        "import sys, vaelii_llm._edn as e; assert 'edn_format' not in sys.modules;"
        " print(e.write([1, 'a'], 100).text)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == '[1 "a"]'
