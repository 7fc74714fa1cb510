"""The refusal tree: one class per spec row, typed data, bounded messages."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from vaelii_llm import errors

SPEC_TYPES = {
    "llm-api-error": errors.LLMApiError,
    "llm-bad-answer": errors.LLMBadAnswer,
    "llm-bad-credential": errors.LLMBadCredential,
    "llm-bad-hosts": errors.LLMBadHosts,
    "llm-bad-response": errors.LLMBadResponse,
    "llm-bad-switch": errors.LLMBadSwitch,
    "llm-closed": errors.LLMClosed,
    "llm-encode": errors.LLMEncode,
    "llm-no-credential": errors.LLMNoCredential,
    "llm-pool-timeout": errors.LLMPoolTimeout,
    "llm-timeout": errors.LLMTimeout,
    "llm-unreachable": errors.LLMUnreachable,
    "llm-unsupported": errors.LLMUnsupported,
}


def test_every_spec_row_has_one_class_under_llm_error() -> None:
    for kind, cls in SPEC_TYPES.items():
        assert cls.type == kind
        assert issubclass(cls, errors.LLMError)
    exported = {getattr(errors, n) for n in errors.__all__}
    subclasses = {c for c in exported if isinstance(c, type) and issubclass(c, errors.LLMError)}
    assert subclasses - {errors.LLMError} == set(SPEC_TYPES.values())


def test_the_error_type_literal_names_every_class_and_nothing_else() -> None:
    assert set(get_args(errors.ErrorType)) == {"llm-error", *SPEC_TYPES}


def test_the_drawing_shows_the_tree_as_it_is() -> None:
    doc = errors.__doc__ or ""
    drawn = list(re.finditer(r"^[ │├└─]*(LLM\w+)", doc, re.MULTILINE))
    names = [m.group(1) for m in drawn]
    assert sorted(names) == sorted(["LLMError", *(c.__name__ for c in SPEC_TYPES.values())])
    # Each class is drawn one level (four columns) right of its base, below it.
    column = {m.group(1): m.start(1) - m.start(0) for m in drawn}
    row = {m.group(1): i for i, m in enumerate(drawn)}
    for cls in SPEC_TYPES.values():
        base = cls.__bases__[0]  # LLMBadSwitch is a ValueError too, drawn under LLMError
        assert column[cls.__name__] == column[base.__name__] + 4, cls.__name__
        assert row[cls.__name__] > row[base.__name__], cls.__name__


def test_a_pool_timeout_is_a_timeout_of_the_acquire_phase() -> None:
    err = errors.LLMPoolTimeout("the vote pool", 250)
    assert isinstance(err, errors.LLMTimeout)
    assert (err.type, err.phase, err.timeout_ms) == ("llm-pool-timeout", "acquire", 250)
    assert str(err) == (
        "the vote pool did not free a provider inside its acquire_timeout_ms (250 ms); "
        "raise acquire_timeout_ms, or give the pool more hosts or calls per host"
    )


@pytest.mark.parametrize(
    ("phase", "said"),
    [
        ("headers", "did not answer"),
        ("body", "did not finish its answer"),
        ("connection", "no connection to Ollama at http://h:1 came free"),
        ("stall", "stalled: no content for 900 ms (stall_ms), after 0 content chunks"),
    ],
)
def test_a_timeout_names_its_phase(phase: errors.TimeoutPhase, said: str) -> None:
    """Each phase's message says what ran out and what to raise (#60)."""
    err = errors.LLMTimeout("Ollama at http://h:1", 900, phase)
    assert err.phase == phase
    assert said in str(err)
    assert set(get_args(errors.TimeoutPhase)) == {
        "connection",
        "headers",
        "body",
        "stall",
        "acquire",
    }


def test_closed_names_what_closed_and_when() -> None:
    assert str(errors.LLMClosed("the stub")) == "the stub is closed"
    waited = errors.LLMClosed("the vote pool", waited=True)
    assert waited.waited
    assert str(waited) == "the vote pool closed while this call waited for a provider"


def test_api_error_keeps_whole_body_and_quotes_only_an_excerpt() -> None:
    body = "<html>" + "x" * 300_000 + "</html>"
    err = errors.LLMApiError("the Messages API", 502, body)
    assert err.status == 502
    assert err.body == body
    assert len(str(err)) < errors.EXCERPT_CHARS + 100
    assert "502" in str(err)


def test_bad_response_keeps_text_and_excerpt() -> None:
    text = "not json " * 10_000
    err = errors.LLMBadResponse("Ollama", "answered a body that is not JSON", text)
    assert err.text == text
    assert err.excerpt == text[: errors.EXCERPT_CHARS] + "…"
    assert len(str(err)) < errors.EXCERPT_CHARS + 100


def test_bad_response_accepts_bytes_that_are_not_utf8() -> None:
    err = errors.LLMBadResponse("x", "sent junk", b"\xff\xfe" * 1000)
    assert "\ufffd" in err.text
    assert len(str(err)) < errors.EXCERPT_CHARS + 60


def test_bad_credential_names_the_header_never_the_value() -> None:
    err = errors.LLMBadCredential("x-api-key")
    assert err.header == "x-api-key"
    assert "x-api-key" in str(err)


def test_timeout_carries_its_budget() -> None:
    err = errors.LLMTimeout("Ollama at http://h:1", 1500)
    assert err.timeout_ms == 1500
    assert "1500" in str(err)


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [("abc", 5, "abc"), ("abcdef", 3, "abc…"), (b"\xe2\x82\xac" * 3, 2, "€€…"), ("", 3, "")],
)
def test_excerpt(text: str | bytes, limit: int, expected: str) -> None:
    assert errors.excerpt(text, limit) == expected


def test_excerpt_of_a_huge_bytes_body_decodes_only_the_slice() -> None:
    body = b"a" * (64 * 1024 * 1024)
    assert errors.excerpt(body) == "a" * errors.EXCERPT_CHARS + "…"


def test_the_docs_error_table_has_one_row_per_class() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "errors.md").read_text()
    rows = dict(re.findall(r"^\| `(llm-[a-z-]+)` \| \[`(LLM\w+)`\]", page, re.MULTILINE))
    spec = {kind: cls.__name__ for kind, cls in SPEC_TYPES.items()}
    assert rows == {"llm-error": "LLMError", **spec}  # the base row, then the spec's


def _subclasses(cls: type[errors.LLMError]) -> set[type[errors.LLMError]]:
    found = set(cls.__subclasses__())
    return found.union(*(_subclasses(c) for c in found))


OVERLOADED = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
INVALID = '{"type":"error","error":{"type":"invalid_request_error","message":"no"}}'

RETRYABLE: list[tuple[errors.LLMError, bool]] = [
    (errors.LLMApiError("far", 408, ""), True),
    (errors.LLMBadAnswer("Animal", [("x", "not JSON")], "no answer matched its schema"), False),
    (errors.LLMApiError("far", 409, ""), True),
    (errors.LLMApiError("far", 429, ""), True),
    (errors.LLMApiError("far", 500, ""), True),
    (errors.LLMApiError("far", 503, ""), True),
    (errors.LLMApiError("far", 529, ""), True),
    (errors.LLMApiError("far", 200, OVERLOADED), True),
    (errors.LLMApiError("far", 200, INVALID), False),
    (errors.LLMApiError("far", 200, "not json"), False),
    (errors.LLMApiError("far", 400, OVERLOADED), False),
    (errors.LLMApiError("far", 401, ""), False),
    (errors.LLMApiError("far", 403, ""), False),
    (errors.LLMApiError("far", 404, ""), False),
    (errors.LLMBadCredential("x-api-key"), False),
    (errors.LLMBadHosts("empty"), False),
    (errors.LLMBadResponse("far", "answered junk", "junk"), False),
    (errors.LLMBadSwitch("VAELII_X", "holds a control character"), False),
    (errors.LLMClosed("far"), False),
    (errors.LLMEncode("scripted", "far"), False),
    (errors.LLMNoCredential("nowhere"), False),
    (errors.LLMTimeout("far", 10, "body"), True),
    (errors.LLMPoolTimeout("far", 10), True),
    (errors.LLMUnreachable("far", "refused"), True),
    (errors.LLMUnsupported("far", "counting"), False),
]


@pytest.mark.parametrize(("error", "expected"), RETRYABLE, ids=repr)
def test_every_error_says_whether_a_retry_can_cure_it(
    error: errors.LLMError, expected: bool
) -> None:
    assert error.retryable is expected


def test_an_error_inside_a_200_keeps_its_status_and_is_marked_by_its_type() -> None:
    err = errors.LLMApiError("far", 200, OVERLOADED)
    assert (err.status, err.retryable) == (200, True)
    assert "HTTP 200" in str(err)


def test_the_retryable_table_covers_every_subclass() -> None:
    assert {type(e) for e, _ in RETRYABLE} == _subclasses(errors.LLMError)


RAISE = {
    "connection": "raise the provider's max_connections, or timeout_ms (--timeout-ms)",
    "headers": "raise timeout_ms (--timeout-ms) for a model this slow to start",
    "body": "raise timeout_ms (--timeout-ms), or ask for fewer max_tokens",
    "stall": "raise stall_ms (--stall-ms) for a model that pauses this long",
    "acquire": "raise acquire_timeout_ms, or give the pool more hosts or calls per host",
}


@pytest.mark.parametrize("phase", get_args(errors.TimeoutPhase))
def test_every_timeout_names_what_to_raise(phase: errors.TimeoutPhase) -> None:
    assert str(errors.LLMTimeout("Ollama at http://h:1", 900, phase)).endswith("; " + RAISE[phase])
