"""Frozen surface: the Provider protocol an out-of-tree backend implements,
the single-sourced version, every module's export list resolving, and the
unset reading of every provider and Ollama configuration row against the
spec's Default column. (The public export lists are frozen in
test_exported_members.py.)"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import tomllib
from pathlib import Path
from typing import get_args

import pytest

import vaelii_llm
from vaelii_llm import _backends
from vaelii_llm import _protocol as protocol
from vaelii_llm import config

ROOT = Path(__file__).resolve().parents[2]
PROVIDER_METHODS = {
    "complete": "(self, request: 'Request') -> 'Response'",
    "stream": (
        "(self, request: 'Request', *, deltas: 'bool' = False) "
        "-> 'AsyncGenerator[StreamItem, None]'"
    ),
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
        if inspect.isfunction(member)
        and not name.startswith("_abc")
        and name not in {"__init__", "_proto_hook", "__subclasshook__"}
    }
    assert declared == set(PROVIDER_METHODS)


@pytest.mark.parametrize(("name", "signature"), sorted(PROVIDER_METHODS.items()))
def test_provider_signatures_are_frozen(name: str, signature: str) -> None:
    assert str(inspect.signature(getattr(protocol.Provider, name))) == signature


def test_the_neutral_vocabulary_and_the_delta_items_are_frozen() -> None:
    assert get_args(protocol.StopReason) == (
        "end_turn",
        "tool_use",
        "max_tokens",
        "stop_sequence",
        "refusal",
        "pause_turn",
    )
    deltas = get_args(protocol.Delta)
    assert {cls.__name__: (cls.type, cls.__struct_fields__) for cls in deltas} == {
        "TextDelta": ("text_delta", ("index", "text")),
        "ThinkingDelta": ("thinking_delta", ("index", "thinking")),
        "ToolUseStart": ("tool_use_start", ("index", "id", "name")),
        "ToolInputDelta": ("tool_input_delta", ("index", "partial_json")),
    }
    response_fields = protocol.Response.__struct_fields__
    assert {"stop_reason", "vendor_stop_reason", "usage", "extra"} <= set(response_fields)
    assert {"first_chunk_ms", "longest_gap_ms"} <= set(response_fields)  # measured (#51)
    assert "stall_ms" in protocol.Request.__struct_fields__
    assert {"input_tokens", "output_tokens", "extra"} <= set(protocol.Usage.__struct_fields__)


def test_complete_and_aclose_are_coroutines_stream_is_not() -> None:
    assert inspect.iscoroutinefunction(protocol.Provider.complete)
    assert inspect.iscoroutinefunction(protocol.Provider.aclose)
    assert not inspect.iscoroutinefunction(protocol.Provider.stream)


def test_the_version_is_written_once_and_the_build_reads_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]  # (and the readme: setup.py)
    source = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = source.rpartition(".")
    assert getattr(importlib.import_module(module), name) == vaelii_llm.__version__
    # A line assigning a version literal anywhere else would be a second place.
    literal = re.compile(
        r"""^\s*\w*VERSION\w*\s*(?::[^=]*)?=\s*["']\d+\.\d+""", re.IGNORECASE | re.MULTILINE
    )
    written = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "vaelii_llm").rglob("*.py")
        if literal.search(path.read_text())
    ]
    assert written == ["vaelii_llm/_version.py"]


def test_every_switch_is_read_by_name_through_its_one_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One public reader: read(name) is the row's reader, whatever the environment says.
    assert set(config.__all__) == {"SWITCHES", "Switch", "provider_kind", "read"}
    monkeypatch.setenv("VAELII_OLLAMA_NUM_CTX", "4096")
    monkeypatch.setenv("VAELII_LLM_PROVIDER", " OpenAI ")
    monkeypatch.setenv("OLLAMA_HOST", "gpu9:1234")
    monkeypatch.delenv("VAELII_OLLAMA_HOST", raising=False)
    for switch in config.SWITCHES:
        assert config.read(switch.name) == switch.reader(), switch.name
    assert config.read("VAELII_OLLAMA_NUM_CTX") == 4096
    assert config.read("VAELII_LLM_PROVIDER") == "openai"
    assert config.read("OLLAMA_HOST") == "gpu9:1234"
    with pytest.raises(KeyError, match="VAELII_OLLAMA_MODEL"):
        config.read("VAELII_OLAMA_MODEL")


SPEC_DEFAULTS = {
    "VAELII_LLM_PROVIDER": None,
    "VAELII_OLLAMA_HOST": "http://localhost:11434",
    "OLLAMA_HOST": None,
    "VAELII_OLLAMA_MODEL": "phi4:14b",
    "VAELII_OLLAMA_GENERATION_MODEL": "qwen3-coder:30b",
    "VAELII_OLLAMA_NUM_CTX": "8192",
    "VAELII_OLLAMA_KEEP_ALIVE": "30m",
    "OLLAMA_API_KEY": None,
    "VAELII_OLLAMA_HOSTS": None,
    "VAELII_POOL_REDIS_URL": None,
    "ANTHROPIC_API_KEY": None,
    "ANTHROPIC_AUTH_TOKEN": None,
    "ANTHROPIC_BASE_URL": "https://api.anthropic.com",
    "VAELII_ANTHROPIC_MODEL": None,
    "OPENAI_BASE_URL": "https://api.openai.com/v1",
    "OPENAI_API_KEY": None,
    "VAELII_OPENAI_MODEL": None,
    "VAELII_OPENAI_HOSTS": None,
    "VAELII_OPENAI_SEND_REASONING": None,
    "VAELII_PROMPT_CACHE": "1",
    "VAELII_LLM_LIVE": None,
    "VAELII_LLM_OTEL": None,
}


def test_configuration_table_matches_the_spec_defaults() -> None:
    assert {s.name: s.default for s in config.SWITCHES} == SPEC_DEFAULTS


def test_unset_provider_and_ollama_rows_read_as_their_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in SPEC_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    assert config.provider_kind() == "stub"
    assert _backends.ollama_host() == SPEC_DEFAULTS["VAELII_OLLAMA_HOST"]
    assert _backends.ollama_model() == SPEC_DEFAULTS["VAELII_OLLAMA_MODEL"]
    assert _backends.ollama_generation_model() == SPEC_DEFAULTS["VAELII_OLLAMA_GENERATION_MODEL"]
    assert str(_backends.ollama_num_ctx()) == SPEC_DEFAULTS["VAELII_OLLAMA_NUM_CTX"]
    assert _backends.ollama_keep_alive() == SPEC_DEFAULTS["VAELII_OLLAMA_KEEP_ALIVE"]
    assert _backends.ollama_hosts() is None
    assert _backends.openai_base_url() == SPEC_DEFAULTS["OPENAI_BASE_URL"]
    assert _backends.openai_api_key() is None
    assert _backends.openai_model() is None
    assert _backends.anthropic_model() is None
    assert _backends.openai_hosts() is None
    assert config.pool_redis_url() is None


MODULES = [
    "vaelii_llm._answers",
    "vaelii_llm._backends",
    "vaelii_llm._version",
    "vaelii_llm._protocol",
    "vaelii_llm._streams",
    "vaelii_llm._closing",
    "vaelii_llm._declare",
    "vaelii_llm._handout",
    "vaelii_llm.telemetry._content",
    "vaelii_llm.cli._drawing",
    "vaelii_llm._media",
    "vaelii_llm._files",
    "vaelii_llm.errors",
    "vaelii_llm.config",
    "vaelii_llm._switch_check",
    "vaelii_llm._switches",
    "vaelii_llm.providers",
    "vaelii_llm.providers.stub",
    "vaelii_llm.providers._bearer",
    "vaelii_llm._base_url",
    "vaelii_llm.pool._hosts",
    "vaelii_llm.providers._http",
    "vaelii_llm.providers._one_model",
    "vaelii_llm.providers._turn",
    "vaelii_llm.providers._props",
    "vaelii_llm.providers.ollama",
    "vaelii_llm.providers.ollama._assemble",
    "vaelii_llm.providers.ollama._chat",
    "vaelii_llm.providers.ollama._probes",
    "vaelii_llm.providers.ollama._provider",
    "vaelii_llm.providers.ollama._status",
    "vaelii_llm.providers.anthropic",
    "vaelii_llm.providers.anthropic._cache",
    "vaelii_llm.providers.anthropic._codec",
    "vaelii_llm.providers.anthropic._credentials",
    "vaelii_llm.providers.anthropic._decode",
    "vaelii_llm.providers.anthropic._encode",
    "vaelii_llm.providers.anthropic._status",
    "vaelii_llm.providers.anthropic._stream",
    "vaelii_llm.providers.openai",
    "vaelii_llm.providers.openai._assemble",
    "vaelii_llm.providers.openai._chat",
    "vaelii_llm.providers.openai._key",
    "vaelii_llm.providers.openai._probes",
    "vaelii_llm.providers.openai._provider",
    "vaelii_llm.providers.openai._server",
    "vaelii_llm.providers.openai._shared",
    "vaelii_llm.providers.openai._status",
    "vaelii_llm.providers.openai_responses",
    "vaelii_llm.providers.openai._responses_assemble",
    "vaelii_llm.providers.openai._responses_codec",
    "vaelii_llm.providers.openai._responses_provider",
    "vaelii_llm.providers.openai._responses_request",
    "vaelii_llm._transport",
    "vaelii_llm._transport.boundary",
    "vaelii_llm._transport.send",
    "vaelii_llm._transport.sessions",
    "vaelii_llm._transport.settings",
    "vaelii_llm._transport.urls",
    "vaelii_llm._transport.withheld",
    "vaelii_llm._transport.aiohttp_private",
    "vaelii_llm._timers",
    "vaelii_llm._wire",
    "vaelii_llm._wire.sse",
    "vaelii_llm._wire.ndjson",
    "vaelii_llm.pool",
    "vaelii_llm.pool._pool",
    "vaelii_llm.pool._rates",
    "vaelii_llm.pool._vote",
    "vaelii_llm.pool._redis_slots",
    "vaelii_llm.pool._redis_scripts",
    "vaelii_llm.pool._redis_limits",
    "vaelii_llm.pool._slots",
    "vaelii_llm.engine",
    "vaelii_llm.tools",
    "vaelii_llm.tools._schemas",
    "vaelii_llm.tools._args",
    "vaelii_llm._edn",
    "vaelii_llm._json_walk",
    "vaelii_llm.kb",
    "vaelii_llm.cli",
    "vaelii_llm.integrations",
    "vaelii_llm.integrations.mcp",
    "vaelii_llm.integrations.mcp_client",
    "vaelii_llm.integrations._mcp_stdio",
    "vaelii_llm.integrations.pydantic_ai",
    "vaelii_llm.agent",
    "vaelii_llm.telemetry",
]


@pytest.mark.parametrize("name", MODULES)
def test_every_module_declares_an_export_list_that_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    missing = [attr for attr in exported if not hasattr(module, attr)]
    assert missing == [], f"{name}.__all__ names what it lacks: {missing}"


def test_every_public_module_of_the_package_is_listed_above() -> None:
    found = {
        info.name
        for info in pkgutil.walk_packages(vaelii_llm.__path__, "vaelii_llm.")
        if not info.name.startswith("vaelii_llm.kb.")  # the engine's insides; kb exports them
        and not info.name.endswith(".__main__")  # `python -m`: running it runs the command
    }
    assert found == set(MODULES)
