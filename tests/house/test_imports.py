"""Importing the package loads no HTTP library, no EDN reader, no backend and no
framework a face serves (mcp, pydantic-ai); a backend and its first turn load
nothing but aiohttp, msgspec and the package's own modules, and what loads on
first use is listed here, once (:data:`ON_FIRST_USE`)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

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
    assert "vaelii_llm.telemetry._content" not in loaded


def test_protocol_and_config_modules_name_no_vendor_library() -> None:
    modules = loaded_after("import vaelii_llm._protocol, vaelii_llm.errors, vaelii_llm.config")
    assert offenders(modules) == []


def test_the_integrations_package_and_the_command_import_no_framework() -> None:
    modules = loaded_after("import vaelii_llm.integrations, vaelii_llm.cli")
    assert "vaelii_llm.integrations" in modules
    assert [m for m in modules if m.split(".")[0] in FRAMEWORKS] == []
    assert [m for m in modules if m.startswith("vaelii_llm.integrations.")] == []


ON_FIRST_USE = {
    "jiter": "a tool call cut by the token budget, read leniently",
    "edn_format": "the EDN reader: a knowledge base's files",
    "opentelemetry": "telemetry.enable (the otel extra)",
    "uvicorn": "the MCP server over HTTP",
    "h11": "the MCP server over HTTP",
    "resource": "the MCP server's open-files bound",
    "vaelii_llm.kb": "the embedded knowledge-base engine",
    "vaelii_llm.telemetry": "a provider handed out by selection or a vote pool",
    "vaelii_llm.telemetry._content": "telemetry that records content",
    "vaelii_llm.pool": "the vote pool: `vaelii-llm vote`, a pool built from configuration",
    "vaelii_llm._switch_check": "checking a selection's switches",
    "vaelii_llm._files": "a document or image read from a file",
    "vaelii_llm.integrations": "the faces: MCP, pydantic-ai",
    "vaelii_llm.providers.anthropic._stream": "a streamed Messages API turn",
}
"""Every module the package imports inside a function, on first use rather
than when it or a backend is imported, and what uses it: the one list (the
AST check below keeps it whole; the import-time check keeps each off a
backend's first turn)."""

IMPORT_TIME_STDLIB: set[str] = set()
"""The standard modules a backend's first turn loads that aiohttp and msgspec
do not: none (the records are msgspec Structs, not dataclasses, whose
decorator writes each class's methods at import)."""

LIBRARY = Path(__file__).resolve().parents[2] / "vaelii_llm"

_FIRST_TURNS = r"""
import asyncio, re
from vaelii_llm import Message, Request
from vaelii_llm.providers import anthropic, ollama, openai, openai_responses, stub

ANSWERS = {
    b"/api/chat": b'{"model":"m","message":{"role":"assistant","content":"Yes."},'
    b'"done":true,"done_reason":"stop"}',
    b"/v1/chat/completions": b'{"choices":[{"message":{"content":"Yes."},'
    b'"finish_reason":"stop"}]}',
    b"/v1/messages": b'{"type":"message","content":[{"type":"text","text":"Yes."}],'
    b'"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}',
    b"/v1/responses": b'{"object":"response","status":"completed","output":[{"type":'
    b'"message","role":"assistant","content":[{"type":"output_text","text":"Yes."}]}]}',
}

async def answer(reader, writer):
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            await reader.readexactly(length)
            body = ANSWERS[head.split()[1]]
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
    except asyncio.IncompleteReadError:
        writer.close()  # the client closed its kept connection

async def main():
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    url = "http://127.0.0.1:%d" % server.sockets[0].getsockname()[1]
    ask = Request(messages=[Message(role="user", content="hi")], max_tokens=16)
    providers = [
        stub.provider(script=["Yes."]),
        ollama.provider(host=url, model="m"),
        openai.provider(base_url=url + "/v1", api_key="k", model="m"),
        anthropic.provider(credential="k", base_url=url),
        openai_responses.provider(base_url=url + "/v1", api_key="k", model="m"),
    ]
    for provider in providers:
        async with provider:
            answered = await provider.complete(ask)
            assert answered.content[0].text == "Yes.", answered

asyncio.run(main())
"""
"""One whole turn on each built-in backend, each answered by a loopback
server of plain asyncio (nothing this test's subject does not load itself)."""


class _Run:
    """What a program loaded: every module (``sys.modules`` at its end) and
    ``python -X importtime``'s account, which shows who imported what."""

    def __init__(self, code: str) -> None:
        probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
        run = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", probe],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert "Traceback" not in run.stderr, run.stderr[-2000:]
        self.modules: list[str] = json.loads(run.stdout.strip().splitlines()[-1])
        self.importtime = [
            line for line in run.stderr.splitlines() if line.startswith("import time:")
        ]

    def why(self, modules: Iterable[str]) -> str:
        """Who imported each of ``modules``: its import-time line and its
        importers' (importtime prints a module before its importer, which is
        the next line below it indented less)."""
        names = [line.split("|")[-1] for line in self.importtime]
        chains = []
        for n, name in enumerate(names):
            if name.strip() not in modules:
                continue
            chain, depth = [name.strip()], len(name) - len(name.lstrip())
            for later in names[n + 1 :]:
                if len(later) - len(later.lstrip()) < depth:
                    chain.append(later.strip())
                    depth = len(later) - len(later.lstrip())
            chains.append(" <- ".join(chain))
        return "\n".join(chains) or "(imported through importlib, so not in importtime's account)"


def test_every_backends_first_turn_loads_only_aiohttp_msgspec_and_the_package() -> None:
    """An import-time dependency creeping back (a third-party module, a
    standard one not listed, or one of :data:`ON_FIRST_USE`) fails here."""
    floor = set(_Run("import aiohttp, asyncio, msgspec, re").modules)
    run = _Run(_FIRST_TURNS)
    loaded = run.modules
    assert "vaelii_llm.providers.openai_responses" in loaded
    more = {m for m in loaded if m not in floor and m.split(".")[0] != "vaelii_llm"}
    assert more == IMPORT_TIME_STDLIB, run.why(more - IMPORT_TIME_STDLIB)
    lazy = {m for m in loaded if any(m == x or m.startswith(x + ".") for x in ON_FIRST_USE)}
    assert lazy == set(), run.why(lazy)


def _imports_in_functions() -> dict[str, str]:
    """Each module the library imports inside a function, and where first."""
    found: dict[str, str] = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    names = [alias.name for alias in inner.names]
                elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                    names = [inner.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name, str(path.relative_to(LIBRARY.parent)))
    return found


def test_each_module_imported_on_first_use_is_listed_once() -> None:
    """A module the library imports inside a function is either loaded by a
    backend's first turn anyway (imported there to break a cycle, or to be
    read late) or listed in :data:`ON_FIRST_USE`; and nothing listed is stale."""
    loaded = set(_Run(_FIRST_TURNS).modules)

    def listed(name: str) -> bool:
        return any(name == x or name.startswith(x + ".") for x in ON_FIRST_USE)

    found = _imports_in_functions()
    unlisted = {
        name: where for name, where in found.items() if not listed(name) and name not in loaded
    }
    assert unlisted == {}
    stale = [x for x in ON_FIRST_USE if not any(n == x or n.startswith(x + ".") for n in found)]
    assert stale == []


def test_no_backend_imports_telemetry() -> None:
    """Telemetry wraps a provider at the edge that hands it out (selection,
    the vote pools, through :mod:`vaelii_llm._handout`): no module under
    ``vaelii_llm/providers/`` imports it, at the top or inside a function
    (#61: ``HTTPProvider.__init__`` and the stub patched themselves)."""
    root = Path(__file__).resolve().parents[2] / "vaelii_llm" / "providers"
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if node.value.startswith("vaelii_llm.") else []
            if any(
                n == "vaelii_llm.telemetry" or n.startswith("vaelii_llm.telemetry.") for n in names
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == []
