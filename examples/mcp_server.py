"""Serve your own knowledge base to an MCP host, read-only.

``python examples/mcp_server.py`` builds a small KB of its own, wraps it in a
:class:`vaelii_llm.tools.Toolset`, builds the MCP server from it
(:func:`vaelii_llm.integrations.mcp.server`) and talks to that server with the
official ``mcp`` client in this process: it lists the tools (read-only,
idempotent, closed-world), asks one read and tries a write, which is no tool.

``python examples/mcp_server.py --stdio`` serves the same KB over stdin/stdout,
which is what an MCP host launches. The model is the host's: point the host at
this script, e.g. in a desktop host's config::

    {"mcpServers": {"pets-kb": {"command": "python",
                                "args": ["/abs/path/examples/mcp_server.py", "--stdio"]}}}

To serve an EDN file with no code at all, ``vaelii-llm mcp --kb FILE`` does the
same (``--http 127.0.0.1:8765`` for the streamable-HTTP transport). Needs
``pip install 'vaelii-llm[mcp]'``: without it the script says so and exits 2.
"""

from __future__ import annotations

import sys

from _answering import run

from vaelii_llm import kb
from vaelii_llm import tools

try:
    import mcp.types as types
    from mcp import Client

    from vaelii_llm.integrations import mcp as mcp_face
except ImportError as missing:  # the extra is not installed: say how, as the command does
    if (missing.name or "").partition(".")[0] != "mcp":
        raise
    print(
        f"this example needs the mcp extra: pip install 'vaelii-llm[mcp]' ({missing})",
        file=sys.stderr,
    )
    raise SystemExit(2) from None

PETS = """
(isa Rex Dog)
(isa Tom Cat)
(genls Dog Mammal)
(genls Cat Mammal)
(chases Rex Tom)
"""


def pets_toolset() -> tools.Toolset:
    """The application's KB behind the read surface (here a few facts in EDN)."""
    return tools.Toolset(kb.load_edn(PETS))


def first_text(result: types.CallToolResult) -> str:
    block = result.content[0]
    return block.text if isinstance(block, types.TextContent) else repr(block)


async def demo() -> None:
    server = mcp_face.server(pets_toolset())
    async with Client(server) as client:
        listed = (await client.list_tools()).tools
        print(f"{len(listed)} read tools, e.g. {', '.join(t.name for t in listed[:4])}")
        hints = listed[0].annotations
        assert hints is not None
        print(
            f"annotations: readOnly={hints.read_only_hint} idempotent={hints.idempotent_hint} "
            f"openWorld={hints.open_world_hint}"
        )
        read = await client.call_tool("kb_types_of", {"term": "Rex"})
        print(f"kb_types_of Rex -> {first_text(read)} (isError={read.is_error})")
        write = await client.call_tool("kb_assert", {"sentence": "(isa Rex Cat)", "context": "X"})
        print(f"kb_assert -> isError={write.is_error}: {first_text(write)[:60]}...")


async def main() -> None:
    if "--stdio" in sys.argv[1:]:
        await mcp_face.serve_stdio(pets_toolset())
    else:
        await demo()


if __name__ == "__main__":
    sys.exit(run(main()))
