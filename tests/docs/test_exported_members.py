"""Every public module's export list, frozen.

A public module is one whose dotted path has no ``_``-prefixed part; every
other module is an implementation detail. A name added to or dropped from any
public ``__all__``, or a public module added or removed, fails here, so the
surface changes only on purpose (httpx's ``tests/test_exported_members.py``
and anyio's ``tests/test_all_attributes.py`` do the same).

Run as a script, it prints the count of public names per module and in all.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import vaelii_llm

EXPORTS: dict[str, str] = {
    "vaelii_llm": (
        "Block Cache Delta DocumentBlock ImageBlock Message OpaqueBlock Provider ProviderBase "
        "RedactedThinkingBlock Request Response StopReason StreamItem TextBlock TextDelta "
        "ThinkingBlock ThinkingDelta ToolInputDelta ToolResultBlock ToolSchema ToolUseBlock "
        "ToolUseStart Usage "
        "__version__ agent config engine errors kb pool providers tools"
    ),
    "vaelii_llm.agent": (
        "AgentResult Event Stopped TextArrived ToolCall ToolCallFinished ToolCallStarted "
        "ToolInputArrived ToolsIgnored "
        "events request run together"
    ),
    "vaelii_llm.cli": "main",
    "vaelii_llm.config": "SWITCHES Switch provider_kind read",
    "vaelii_llm.engine": ("Context Engine Handle Options Sentence Term embedded irreversible op"),
    "vaelii_llm.errors": (
        "EXCERPT_CHARS ErrorType LLMApiError LLMBadCredential LLMBadHosts LLMBadResponse "
        "LLMBadSwitch LLMClosed LLMEncode LLMError LLMNoCredential LLMPoolTimeout LLMTimeout "
        "LLMUnreachable LLMUnsupported TimeoutPhase"
    ),
    "vaelii_llm.integrations": "",
    "vaelii_llm.integrations.mcp": "DEFAULT_PORT serve_http serve_stdio server",
    "vaelii_llm.integrations.mcp_client": "McpServerError McpToolset",
    "vaelii_llm.integrations.pydantic_ai": "KBToolset VaeliiModel",
    "vaelii_llm.kb": "EngineRefusal KB load_edn open sample save synthetic",
    "vaelii_llm.pool": "ASK_YES_NO Pool Vote hosts pool_from_config read_yes_no stub_pool vote",
    "vaelii_llm.providers": (
        "Backend Option active_kind available generation_provider provider register "
        "tools_dropped unavailable_reason warm"
    ),
    "vaelii_llm.providers.anthropic": (
        "AnthropicProvider Credential DEFAULT_EFFORT DEFAULT_MODEL available provider "
        "unavailable_reason"
    ),
    "vaelii_llm.providers.ollama": (
        "OllamaProvider available base_url capabilities context_length "
        "generation_provider provider supports_tools unavailable_reason version warm"
    ),
    "vaelii_llm.providers.openai": "OpenAIProvider available models provider unavailable_reason",
    "vaelii_llm.providers.openai_responses": (
        "OpenAIResponsesProvider available models provider unavailable_reason"
    ),
    "vaelii_llm.providers.stub": "StubProvider available provider",
    "vaelii_llm.telemetry": "Instrumented disable enable enabled instrument",
    "vaelii_llm.tools": (
        "HOST_PATH_OPS MAX_LIMIT ToolResult ToolSource Toolset UNBOUNDED_OPS WRITE_OPS call "
        "op_of prefixed read_ops schema schemas tool_name"
    ),
}


def public_modules() -> list[str]:
    """The package and every submodule with no private part in its path."""
    found = (info.name for info in pkgutil.walk_packages(vaelii_llm.__path__, "vaelii_llm."))
    return [
        "vaelii_llm",
        *sorted(n for n in found if not any(p.startswith("_") for p in n.split("."))),
    ]


def test_the_public_modules_are_the_frozen_ones() -> None:
    assert public_modules() == sorted(EXPORTS, key=lambda n: (n != "vaelii_llm", n))


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_each_public_export_list_is_frozen(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == EXPORTS[name].split()
    assert len(module.__all__) == len(set(module.__all__)), "a name is listed twice"
    for attr in module.__all__:
        assert getattr(module, attr) is not None


def test_no_public_name_is_private() -> None:
    named = [f"{m}.{n}" for m, names in EXPORTS.items() for n in names.split()]
    assert [
        n for n in named if n.rsplit(".", 1)[1].startswith("_") and not n.endswith("__version__")
    ] == []


if __name__ == "__main__":
    counts = {name: len(names.split()) for name, names in EXPORTS.items()}
    for name, count in counts.items():
        print(f"{count:4d}  {name}")
    print(f"{sum(counts.values()):4d}  public names in {len(counts)} modules")
