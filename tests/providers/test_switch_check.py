"""A bad switch value named before any I/O (issue #48 item 3): the variable
and the fault, never the value (a URL may carry a password)."""

from __future__ import annotations

import pytest

from vaelii_llm import _switch_check

PASSWORD = "pw-SECRET-48"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/v1",
        "https://api.anthropic.com",
        f"https://gw:{PASSWORD}@gw.example.com/v1",
        "http://[::1]:8000/v1",
    ],
)
def test_a_url_a_client_can_reach_has_no_flaw(url: str) -> None:
    assert _switch_check.url_flaw(url) is None


@pytest.mark.parametrize("host", ["localhost", "gpu1:11434", "::1", "[::1]:11434", "http://h:1"])
def test_an_ollama_host_may_name_no_scheme_and_no_port(host: str) -> None:
    assert _switch_check.url_flaw(host, scheme_optional=True) is None


@pytest.mark.parametrize(
    ("url", "flaw"),
    [
        ("htp:/bad url", "its scheme is 'htp', not http or https"),
        ("127.0.0.1:8080/v1", "it names no scheme (http:// or https://)"),
        ("api.example.com/v1", "it names no scheme (http:// or https://)"),
        ("ftp://h/v1", "its scheme is 'ftp', not http or https"),
        (f"http://me:{PASSWORD}@h:80/v 1", "it holds whitespace"),
        (
            "http://h:99999/v1",
            "its host or port does not read (a port is a whole number up to 65535)",
        ),
        ("http://:8080/v1", "it names no host"),
    ],
)
def test_a_flaw_is_named_in_words_that_quote_no_password(url: str, flaw: str) -> None:
    assert _switch_check.url_flaw(url) == flaw
    assert PASSWORD not in flaw


def test_a_kind_is_quoted_only_when_it_is_a_plain_word() -> None:
    assert _switch_check.bad_kind("ollama", "VAELII_LLM_PROVIDER") is None
    pasted = _switch_check.bad_kind("sk-ant-" + "x" * 40, "VAELII_LLM_PROVIDER")
    assert pasted is not None
    assert "xxxx" not in pasted
    assert pasted.startswith(
        "VAELII_LLM_PROVIDER names no backend (it is a value of 47 characters)"
    )
