"""Faces for the agent frameworks an application already runs.

Each submodule is an optional extra and imports its framework only when it is
imported itself, so ``import vaelii_llm.integrations`` loads neither:

``mcp``          the read surface as a Model Context Protocol server (``vaelii-llm[mcp]``)
``mcp_client``   any MCP server's tools as a toolset for the agent loop (``vaelii-llm[mcp]``)
``pydantic_ai``  a pydantic-ai ``Model`` over any Provider, and the read surface as a
                 pydantic-ai toolset (``vaelii-llm[pydantic-ai]``)
"""

from __future__ import annotations

__all__: list[str] = []
