"""Importing the package loads no HTTP library, no EDN reader, no backend and no
framework a face serves (mcp, pydantic-ai)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("aiohttp", "edn_format", "anyio", "anthropic", "ollama", "mcp", "mcp_types", "pydantic_ai")
FRAMEWORKS = ("mcp", "mcp_types", "pydantic_ai", "uvicorn", "starlette")
BACKENDS = (
    "vaelii_llm.providers.ollama",
    "vaelii_llm.providers.anthropic",
    "vaelii_llm._transport",
)


def loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def offenders(modules: list[str]) -> list[str]:
    return [
        m
        for m in modules
        if m.split(".")[0] in HEAVY or any(m == b or m.startswith(b + ".") for b in BACKENDS)
    ]


def test_import_vaelii_llm_loads_nothing_heavy() -> None:
    modules = loaded_after("import vaelii_llm")
    assert "vaelii_llm" in modules
    assert offenders(modules) == []


def test_import_providers_and_choosing_the_stub_loads_no_backend() -> None:
    code = (
        "import asyncio, vaelii_llm\n"
        "from vaelii_llm import providers\n"
        "asyncio.run(providers.provider('stub'))\n"
    )
    assert offenders(loaded_after(code)) == []


def test_checking_the_bag_for_the_stub_imports_no_other_backend_and_no_aiohttp() -> None:
    # Options only other backends take are checked against their records, not their modules.
    code = (
        "import sys, asyncio\n"
        "from vaelii_llm import providers\n"
        "asyncio.run(providers.provider('stub', host='x', credential='y'))\n"
        "asyncio.run(providers.available('stub', base_url='u', timeout_ms=1))\n"
    )
    loaded = [m for m in loaded_after(code) if m.startswith(("aiohttp", "vaelii_llm.providers."))]
    assert loaded == ["vaelii_llm.providers.stub"]


def test_a_backend_and_its_first_turn_load_no_engine_and_no_edn() -> None:
    """What a turn needs loads without the knowledge-base engine or the EDN
    writer, telemetry's content capture included (loaded only when content is
    recorded): a model-only program never pays for them."""
    code = (
        "import asyncio\n"
        "from vaelii_llm import Message, Request, telemetry\n"
        "from vaelii_llm.providers import anthropic, ollama, openai, openai_responses, stub\n"
        "async def main():\n"
        "    async with stub.provider(script=['Yes.']) as model:\n"
        "        await model.complete(Request(messages=[Message(role='user', content='hi')]))\n"
        "asyncio.run(main())\n"
    )
    loaded = loaded_after(code)
    assert "vaelii_llm.providers.anthropic" in loaded
    engine = ("vaelii_llm.kb", "vaelii_llm.engine", "vaelii_llm._edn", "edn_format")
    assert [m for m in loaded if m.startswith(engine)] == []
    assert "vaelii_llm._telemetry_content" not in loaded


def test_protocol_and_config_modules_name_no_vendor_library() -> None:
    modules = loaded_after("import vaelii_llm._protocol, vaelii_llm.errors, vaelii_llm.config")
    assert offenders(modules) == []


def test_the_integrations_package_and_the_command_import_no_framework() -> None:
    modules = loaded_after("import vaelii_llm.integrations, vaelii_llm.cli")
    assert "vaelii_llm.integrations" in modules
    assert [m for m in modules if m.split(".")[0] in FRAMEWORKS] == []
    assert [m for m in modules if m.startswith("vaelii_llm.integrations.")] == []
