"""Quickstart: one turn on the configured provider (the stub by default), complete and streamed.

Run ``python examples/quickstart.py``. Set ``VAELII_LLM_PROVIDER=ollama`` (with an
Ollama running) or ``anthropic`` (with a credential) to reach a real model; an
unreachable backend falls back to the stub with a warning.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing

from vaelii_llm import Message, Request, Response, providers


async def main() -> None:
    request = Request(
        messages=[Message(role="user", content="Is a spider an insect? Answer yes or no first.")],
        max_tokens=256,
        timeout_ms=60_000,
    )
    stub_script = {"script": ["No. A spider is an arachnid: eight legs, two body parts."] * 2}
    model = await providers.provider(stub=stub_script)
    async with model:
        response = await model.complete(request)
        print("complete:", response.stop_reason, [block.type for block in response.content])
        for block in response.content:
            if block.type == "text":
                print("  ", getattr(block, "text", ""))
        async with aclosing(model.stream(request)) as items:
            async for item in items:
                if isinstance(item, Response):
                    print("stream ended:", item.stop_reason, "same as complete:", item == response)
                else:
                    print("stream block:", item.type)


if __name__ == "__main__":
    asyncio.run(main())
