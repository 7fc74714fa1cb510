"""The ``vaelii-llm`` command: a thin shell over the library, holding no logic of its own.

``status``  which backend answers now, and for Ollama what the model can do
``config``  every switch with the value it reads now (credentials only as set/unset)
``tools``   the tool schemas a model is offered, derived from the engine
``call``    run one tool call against the sample KB (or an EDN file)
``vote``    a majority yes/no vote over the configured pool (the stub's when no host)
``warm``    load the configured backend's model and hold it resident
``mcp``     serve the read surface to an MCP host (stdio, or streamable HTTP)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from vaelii_llm import __version__, config, errors
from vaelii_llm.kb.types import EngineRefusal

__all__ = ["main"]

SECRET_SWITCHES = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"})


def _print_config() -> int:
    for switch in config.SWITCHES:
        raw = os.environ.get(switch.name)
        if switch.name in SECRET_SWITCHES:
            shown = "set" if raw and raw.strip() else "unset"
        elif raw is None:
            shown = f"unset (default {switch.default})" if switch.default else "unset"
        else:
            shown = repr(config.hide_userinfo(raw))
        print(f"{switch.name:32} {shown}")
    return 0


async def _status() -> int:
    from vaelii_llm import providers

    kind = config.provider_kind()
    active = await providers.active_kind()
    print(f"configured: {kind}\nanswering:  {active}")
    if kind == "ollama":
        from vaelii_llm.providers import ollama

        model = config.ollama_model()
        print(f"host:       {ollama.base_url()}\nmodel:      {model}")
        if active == "ollama":
            caps = sorted(await ollama.capabilities(model))
            print(f"capabilities: {', '.join(caps)}")
            print(f"tools:      {'yes' if await ollama.supports_tools(model) else 'no'}")
            print(f"context:    {await ollama.context_length(model)}")
    return 0


def _print_tools(as_json: bool) -> int:
    import msgspec

    from vaelii_llm import tools

    listed = tools.schemas()
    if as_json:
        print(msgspec.json.format(msgspec.json.encode(listed)).decode())
    else:
        for schema in listed:
            first = schema.description.strip().splitlines()[0] if schema.description else ""
            print(f"{schema.name:28} {first}")
    return 0


async def _call(name: str, raw_input: str, kb_path: str | None, limit: int) -> int:
    from vaelii_llm import kb, tools

    try:
        arguments: Any = json.loads(raw_input) if raw_input else None
    except json.JSONDecodeError as exc:
        print(f"the input is not JSON: {exc}", file=sys.stderr)
        return 2
    base = kb.load_edn(kb_path) if kb_path else kb.sample()
    result = await tools.call(base, name, arguments, max_result_chars=limit)
    print(result.text)
    return 0 if result.ok else 1


async def _vote(question: str, votes: int) -> int:
    from vaelii_llm import pool

    if config.provider_kind() == "ollama":
        voters = await pool.pool_from_config()
    else:
        print("VAELII_LLM_PROVIDER is not ollama: the stub votes (it answers nothing)")
        voters = pool.stub_pool()
    async with voters:
        outcome = await pool.vote(voters, question, votes=votes)
    print(f"verdict: {outcome.verdict}  votes: {outcome.votes}  failed: {outcome.failed}")
    return 0


async def _warm() -> int:
    from vaelii_llm import providers

    result = await providers.warm()
    print("nothing to warm" if result is None else "resident")
    return 0


def _mcp(kb_path: str | None, http: str | None) -> int:
    """Serve the KB's read surface as an MCP server: stdio, or streamable HTTP."""
    try:
        from vaelii_llm.integrations import mcp as mcp_face
    except ImportError as exc:
        print(f"the mcp face needs: pip install 'vaelii-llm[mcp]' ({exc})", file=sys.stderr)
        return 2
    from vaelii_llm import kb, tools

    toolset = tools.Toolset(kb.load_edn(kb_path) if kb_path else kb.sample())
    address = None if http is None else mcp_face.parse_address(http)
    try:
        if address is None:
            asyncio.run(mcp_face.serve_stdio(toolset))
        else:
            asyncio.run(mcp_face.serve_http(toolset, *address))
    except KeyboardInterrupt:
        return 130
    return 0


def _add_mcp_parser(commands: Any) -> None:
    mcp_cmd = commands.add_parser("mcp", help="serve the read surface to an MCP host")
    mcp_cmd.add_argument("--kb", dest="kb_path", help="an EDN file to serve, not the sample KB")
    mcp_cmd.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP instead of stdio (host 127.0.0.1 unless named)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vaelii-llm",
        description="Talk to a model, let it read a knowledge base, or take a yes/no vote.",
    )
    parser.add_argument("--version", action="version", version=f"vaelii-llm {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("status", help="which backend answers now, and what its model can do")
    commands.add_parser("config", help="every switch and the value it reads now")
    tools_cmd = commands.add_parser("tools", help="the tools a model is offered")
    tools_cmd.add_argument("--json", action="store_true", help="print the full schemas")
    call = commands.add_parser("call", help="run one tool call against a KB")
    call.add_argument("tool", help="a tool name, e.g. kb_query")
    call.add_argument(
        "input", nargs="?", default="", help='a JSON object, e.g. \'{"goal": "(isa ?x Mammal)"}\''
    )
    call.add_argument("--kb", dest="kb_path", help="an EDN file to load instead of the sample KB")
    call.add_argument("--max-chars", type=int, default=4000, help="bound on the printed result")
    vote = commands.add_parser("vote", help="a majority yes/no vote over the pool")
    vote.add_argument("question")
    vote.add_argument("--votes", type=int, default=3)
    commands.add_parser("warm", help="load the configured model and hold it resident")
    _add_mcp_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the return value is the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "config":
            return _print_config()
        if args.command == "tools":
            return _print_tools(args.json)
        if args.command == "status":
            return asyncio.run(_status())
        if args.command == "call":
            return asyncio.run(_call(args.tool, args.input, args.kb_path, args.max_chars))
        if args.command == "vote":
            return asyncio.run(_vote(args.question, args.votes))
        if args.command == "warm":
            return asyncio.run(_warm())
        if args.command == "mcp":
            return _mcp(args.kb_path, args.http)
    except errors.LLMError as exc:
        print(f"{exc.type}: {exc}", file=sys.stderr)
        return 1
    except EngineRefusal as exc:  # its message starts with its type
        print(exc, file=sys.stderr)
        return 1
    except (ValueError, TypeError) as exc:  # a setting or an argument the library refused
        print(f"error: {exc}", file=sys.stderr)
        return 2
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
