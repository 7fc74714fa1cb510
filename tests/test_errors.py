"""The refusal tree: one class per spec row, typed data, bounded messages."""

from __future__ import annotations

import pytest

from vaelii_llm import errors

SPEC_TYPES = {
    "llm-api-error": errors.LLMApiError,
    "llm-bad-credential": errors.LLMBadCredential,
    "llm-bad-hosts": errors.LLMBadHosts,
    "llm-bad-response": errors.LLMBadResponse,
    "llm-encode": errors.LLMEncode,
    "llm-no-credential": errors.LLMNoCredential,
    "llm-timeout": errors.LLMTimeout,
    "llm-unreachable": errors.LLMUnreachable,
}


def test_every_spec_row_has_one_class_under_llm_error() -> None:
    for kind, cls in SPEC_TYPES.items():
        assert cls.type == kind
        assert issubclass(cls, errors.LLMError)
    exported = {getattr(errors, n) for n in errors.__all__}
    subclasses = {c for c in exported if isinstance(c, type) and issubclass(c, errors.LLMError)}
    assert subclasses - {errors.LLMError} == set(SPEC_TYPES.values())


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
