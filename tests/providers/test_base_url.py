"""A base URL is read once, where a provider or a probe is built, into one
:class:`~vaelii_llm._base_url.BaseURL` every later step reads: the
request URLs, the name messages show (a password cut), the host a wire's
choices key on, the path a 404's hint keys on."""

from __future__ import annotations

from urllib import parse

import pytest

from vaelii_llm import _base_url
from vaelii_llm._base_url import BaseURL
from vaelii_llm._base_url import api_base
from vaelii_llm._base_url import ollama_base
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers import openai_responses


def test_an_api_base_is_kept_as_written_and_shown_without_its_password() -> None:
    assert api_base("https://me:pw@API.OpenAI.com/v1/") == BaseURL(
        url="https://me:pw@API.OpenAI.com/v1",
        shown="https://API.OpenAI.com/v1",
        host="api.openai.com",
        path="/v1",
    )
    assert api_base("https://gw.example/v1").at("/models") == "https://gw.example/v1/models"


def test_what_no_parser_reads_has_no_host_and_is_not_refused_here() -> None:
    unread = api_base("http://[::1/v1")
    assert (unread.url, unread.host, unread.path) == ("http://[::1/v1", "", "")


def test_an_ollama_host_is_read_as_ollama_reads_one() -> None:
    assert ollama_base("::1") == BaseURL("http://[::1]:11434", "http://[::1]:11434", "::1", "")
    assert ollama_base("https://gw/ollama/").url == "https://gw:443/ollama"
    with pytest.raises(ValueError, match="carries a user:password"):
        ollama_base("http://me:pw@gpu1")


@pytest.mark.parametrize(
    "build",
    [
        lambda url: ollama.provider(host=url),
        lambda url: openai.provider(base_url=url),
        lambda url: openai_responses.provider(base_url=url),
        lambda url: anthropic.provider(credential="sk-ant-x", base_url=url),
    ],
    ids=["ollama", "openai", "openai-responses", "anthropic"],
)
def test_building_a_provider_parses_its_base_url_once(
    build: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = parse.urlsplit

    def counted(url: str, *args: object, **kwargs: object) -> parse.SplitResult:
        calls.append(url)
        return real(url, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_base_url, "urlsplit", counted)
    built = build("http://gpu1.example:8000/v1")  # type: ignore[operator]
    assert len(calls) == 1
    codec = built._codec
    assert codec.url.startswith("http://gpu1.example:")
    assert codec.endpoint.label.endswith(f"at {codec.shown_url}")
