"""Every public module's export list, frozen: the table tests/docs/test_exported_members.py
holds the package to and tests/docs/test_docs.py holds the reference pages to."""

from __future__ import annotations

EXPORTS: dict[str, str] = {
    "vaelii_llm": (
        "Block Cache Delta DocumentBlock ImageBlock Message OpaqueBlock Provider ProviderBase "
        "RedactedThinkingBlock Request Response StopReason StreamItem TextBlock TextDelta "
        "ThinkingBlock ThinkingDelta ToolInputDelta ToolResultBlock ToolSchema ToolUseBlock "
        "ToolUseStart Usage "
        "__version__ agent answer config engine errors kb pool providers tools"
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
        "EXCERPT_CHARS ErrorType LLMApiError LLMBadAnswer LLMBadCredential LLMBadHosts "
        "LLMBadResponse LLMBadSwitch LLMClosed LLMEncode LLMError LLMNoCredential LLMPoolTimeout "
        "LLMTimeout LLMUnreachable LLMUnsupported TimeoutPhase"
    ),
    "vaelii_llm.integrations": "",
    "vaelii_llm.integrations.mcp": "DEFAULT_PORT serve_http serve_stdio server",
    "vaelii_llm.integrations.mcp_client": "McpServerError McpToolset",
    "vaelii_llm.integrations.pydantic_ai": "KBToolset VaeliiModel",
    "vaelii_llm.kb": "EngineRefusal KB load_edn open sample save synthetic",
    "vaelii_llm.pool": "ASK_YES_NO Pool Vote hosts pool_from_config read_yes_no stub_pool vote",
    "vaelii_llm.providers": (
        "Backend active_kind available generation_provider provider register "
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
    "vaelii_llm.telemetry": "disable enable enabled instrument",
    "vaelii_llm.tools": (
        "HOST_PATH_OPS MAX_LIMIT ToolResult ToolSource Toolset UNBOUNDED_OPS WRITE_OPS call "
        "op_of prefixed read_ops schema schemas tool_name"
    ),
}
