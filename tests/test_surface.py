"""Frozen surface: the Provider protocol an out-of-tree backend implements,
the package's export list, and the unset reading of every provider and Ollama
configuration row against the spec's Default column."""

from __future__ import annotations

import inspect

import pytest

import vaelii_llm
from vaelii_llm import config, protocol

PROVIDER_METHODS = {
    "complete": "(self, request: 'Request') -> 'Response'",
    "stream": "(self, request: 'Request') -> 'AsyncGenerator[StreamItem, None]'",
    "aclose": "(self) -> 'None'",
    "__aenter__": "(self) -> 'Self'",
    "__aexit__": (
        "(self, exc_type: 'type[BaseException] | None', exc: 'BaseException | None', "
        "tb: 'TracebackType | None') -> 'None'"
    ),
}


def test_provider_method_set_is_frozen() -> None:
    declared = {
        name
        for name, member in vars(protocol.Provider).items()
        if inspect.isfunction(member) and not name.startswith("_abc")
        and name not in {"__init__", "_proto_hook", "__subclasshook__"}
    }
    assert declared == set(PROVIDER_METHODS)


@pytest.mark.parametrize(("name", "signature"), sorted(PROVIDER_METHODS.items()))
def test_provider_signatures_are_frozen(name: str, signature: str) -> None:
    assert str(inspect.signature(getattr(protocol.Provider, name))) == signature


def test_complete_and_aclose_are_coroutines_stream_is_not() -> None:
    assert inspect.iscoroutinefunction(protocol.Provider.complete)
    assert inspect.iscoroutinefunction(protocol.Provider.aclose)
    assert not inspect.iscoroutinefunction(protocol.Provider.stream)


def test_package_exports_are_frozen() -> None:
    assert sorted(vaelii_llm.__all__) == sorted(
        [
            "Block", "Message", "OpaqueBlock", "Provider", "RedactedThinkingBlock", "Request",
            "Response", "TextBlock", "ThinkingBlock", "ToolResultBlock", "ToolSchema",
            "ToolUseBlock", "Usage", "__version__", "config", "engine", "errors", "kb", "pool",
            "providers", "tools",
        ]
    )
    for name in vaelii_llm.__all__:
        assert getattr(vaelii_llm, name) is not None


SPEC_DEFAULTS = {
    "VAELII_LLM_PROVIDER": None,
    "VAELII_OLLAMA_HOST": "http://localhost:11434",
    "OLLAMA_HOST": None,
    "VAELII_OLLAMA_MODEL": "phi4:14b",
    "VAELII_OLLAMA_GENERATION_MODEL": "qwen3-coder:30b",
    "VAELII_OLLAMA_NUM_CTX": "8192",
    "VAELII_OLLAMA_KEEP_ALIVE": "30m",
    "VAELII_OLLAMA_HOSTS": None,
    "ANTHROPIC_API_KEY": None,
    "ANTHROPIC_AUTH_TOKEN": None,
    "ANTHROPIC_BASE_URL": "https://api.anthropic.com",
    "VAELII_LLM_LIVE": None,
}


def test_configuration_table_matches_the_spec_defaults() -> None:
    assert {s.name: s.default for s in config.SWITCHES} == SPEC_DEFAULTS


def test_unset_provider_and_ollama_rows_read_as_their_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in SPEC_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    assert config.provider_kind() == "stub"
    assert config.ollama_host() == SPEC_DEFAULTS["VAELII_OLLAMA_HOST"]
    assert config.ollama_model() == SPEC_DEFAULTS["VAELII_OLLAMA_MODEL"]
    assert config.ollama_generation_model() == SPEC_DEFAULTS["VAELII_OLLAMA_GENERATION_MODEL"]
    assert str(config.ollama_num_ctx()) == SPEC_DEFAULTS["VAELII_OLLAMA_NUM_CTX"]
    assert config.ollama_keep_alive() == SPEC_DEFAULTS["VAELII_OLLAMA_KEEP_ALIVE"]
    assert config.ollama_hosts() is None
