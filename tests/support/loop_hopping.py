"""One provider used from several event loops, run by tests/docs/test_deploy.py
in a child process under ``-W error`` (an unclosed session or
connector there is a ``ResourceWarning`` on stderr, which the test refuses).

``python tests/support/loop_hopping.py KIND LOOP URL``: ``KIND`` is ``turns`` (three
``asyncio.run`` turns, then ``aclose`` in a fourth) or ``pydantic-ai``
(``run_sync`` then ``run`` on one ``VaeliiModel``); ``LOOP`` is ``asyncio``
or ``uvloop``; ``URL`` is a fake Ollama's. Prints one line per answer.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable
from collections.abc import Coroutine
from typing import Any

from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm.providers import ollama


def runner(loop: str) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop

    def run(main: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=factory) as each:  # asyncio.run, on this loop
            return each.run(main)

    return run


def turns(run: Callable[[Coroutine[Any, Any, Any]], Any], url: str) -> None:
    provider = ollama.provider(host=url)
    request = Request(messages=[Message(role="user", content="hi")], max_tokens=8)

    def text(response: Response) -> str:
        return "".join(b.text for b in response.content if isinstance(b, TextBlock))

    async def turn() -> str:
        return text(await provider.complete(request))

    async def streamed() -> str:
        items = [item async for item in provider.stream(request)]
        assert isinstance(items[-1], Response)
        return text(items[-1])

    for main in (turn, streamed, turn):
        print("answer:", run(main()), flush=True)
    run(provider.aclose())
    print("closed:", provider.closed, flush=True)


def pydantic_ai(run: Callable[[Coroutine[Any, Any, Any]], Any], url: str) -> None:
    from pydantic_ai import Agent

    from vaelii_llm.integrations.pydantic_ai import VaeliiModel

    provider = ollama.provider(host=url)
    agent = Agent(VaeliiModel(provider))
    print("answer:", agent.run_sync("hi").output, flush=True)
    print("answer:", run(agent.run("hi again")).output, flush=True)
    run(provider.aclose())
    print("closed:", provider.closed, flush=True)


if __name__ == "__main__":
    kind, loop, url = sys.argv[1:4]
    (turns if kind == "turns" else pydantic_ai)(runner(loop), url)
    gc.collect()  # anything left unclosed warns now, while stderr is watched
