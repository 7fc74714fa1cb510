"""Against a real far end nobody here wrote: llama.cpp's ``llama-server`` and
SmolLM2-135M (``tests/real/llama_server.py``), the Messages API, Chat Completions
and Responses API wires it serves, the official clients beside ours.

The ``real`` lane (``VAELII_LLM_LIVE=1 pytest -m real``, a lane of ``.ci/run``); the README's
test command deselects it. Greedy decoding, so every turn is repeatable.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import aiohttp
import anthropic as anthropic_sdk
import msgspec
import openai as openai_sdk
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer
from llama_server import TOOL_TEMPLATE
from llama_server import LlamaServer
from llama_server import worked_exchanges

import vaelii_llm
from tests.support.redis_server import RedisServer
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import agent
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm.errors import LLMBadAnswer
from vaelii_llm.errors import LLMError
from vaelii_llm.errors import LLMTimeout
from vaelii_llm.pool import Pool
from vaelii_llm.pool import pool_from_config
from vaelii_llm.pool import vote
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import openai
from vaelii_llm.providers import openai_responses

pytestmark = [pytest.mark.real, pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

MODEL = "smollm2"
LONG = "Write a very long story about a dragon, in many chapters."


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[LlamaServer]:
    async with LlamaServer(parallel=2) as running:
        yield running


WIRES: dict[str, Callable[[str], Any]] = {
    "openai": lambda base: openai.provider(base_url=base + "/v1", model=MODEL),
    "anthropic": lambda base: anthropic.provider(base_url=base, credential="sk-none", model=MODEL),
    "openai-responses": lambda base: openai_responses.provider(base_url=base + "/v1", model=MODEL),
}


def ask(text: str, **fields: Any) -> Request:
    return Request(messages=[Message(role="user", content=text)], **fields)


async def streamed(provider: Any, request: Request) -> Response:
    async with aclosing(provider.stream(request)) as items:
        last = None
        async for item in items:
            last = item
    assert isinstance(last, Response)
    return last


def _text(response: Response) -> str:
    return "".join(getattr(block, "text", "") for block in response.content)


@pytest.mark.parametrize("wire", WIRES)
async def test_complete_and_stream_answer_the_same(server: LlamaServer, wire: str) -> None:
    request = ask("Name three colours.", max_tokens=40)
    async with WIRES[wire](server.base) as model:
        whole = await model.complete(request)
        flowed = await streamed(model, request)
    assert _text(whole)
    assert _text(whole) == _text(flowed)
    assert whole.stop_reason == flowed.stop_reason
    assert whole.usage.input_tokens == flowed.usage.input_tokens
    assert whole.usage.output_tokens == flowed.usage.output_tokens


@pytest.mark.parametrize("wire", WIRES)
async def test_a_turn_cut_at_max_tokens_reads_as_max_tokens_on_every_wire(
    server: LlamaServer, wire: str
) -> None:
    """The server answers the Responses wire ``completed`` for a cut too; the
    turn still reads ``max_tokens``, as on the other two wires (#60)."""
    request = ask("Name three colours.", max_tokens=5)
    async with WIRES[wire](server.base) as model:
        whole = await model.complete(request)
        flowed = await streamed(model, request)
    for answer in (whole, flowed):
        assert (answer.stop_reason, answer.usage.output_tokens) == ("max_tokens", 5)


async def test_the_chat_completions_wire_reads_as_the_official_client_does(
    server: LlamaServer,
) -> None:
    request = ask("Name three colours.", max_tokens=40)
    async with WIRES["openai"](server.base) as model:
        ours = await model.complete(request)
    async with openai_sdk.AsyncOpenAI(base_url=server.base + "/v1", api_key="none") as client:
        theirs = await client.chat.completions.create(
            model=MODEL,
            max_tokens=40,
            messages=[{"role": "user", "content": "Name three colours."}],
        )
    assert theirs.usage is not None
    assert _text(ours) == theirs.choices[0].message.content
    assert ours.vendor_stop_reason == theirs.choices[0].finish_reason
    assert (ours.usage.input_tokens, ours.usage.output_tokens) == (
        theirs.usage.prompt_tokens,
        theirs.usage.completion_tokens,
    )


async def test_the_responses_wire_reads_as_the_official_client_does(
    server: LlamaServer,
) -> None:
    request = ask("Name three colours.", max_tokens=40)
    async with WIRES["openai-responses"](server.base) as model:
        ours = await model.complete(request)
        counted = await model.count_tokens(request)
    async with openai_sdk.AsyncOpenAI(base_url=server.base + "/v1", api_key="none") as client:
        theirs = await client.responses.create(
            model=MODEL,
            max_output_tokens=40,
            store=False,
            input=[{"role": "user", "content": "Name three colours."}],
        )
    assert theirs.usage is not None
    assert _text(ours) == theirs.output_text
    reason = theirs.incomplete_details.reason if theirs.incomplete_details else None
    assert ours.vendor_stop_reason == (reason or theirs.status)
    assert (ours.usage.input_tokens, ours.usage.output_tokens) == (
        theirs.usage.input_tokens,
        theirs.usage.output_tokens,
    )
    assert counted == ours.usage.input_tokens


async def test_the_messages_api_wire_reads_as_the_official_client_does(
    server: LlamaServer,
) -> None:
    request = ask("Name three colours.", max_tokens=40)
    async with WIRES["anthropic"](server.base) as model:
        ours = await model.complete(request)
        counted = await model.count_tokens(request)
    client = anthropic_sdk.AsyncAnthropic(base_url=server.base, api_key="sk-none")
    async with client:
        theirs = await client.messages.create(
            model=MODEL,
            max_tokens=40,
            messages=[{"role": "user", "content": "Name three colours."}],
        )
    assert _text(ours) == "".join(b.text for b in theirs.content if b.type == "text")
    assert ours.vendor_stop_reason == theirs.stop_reason
    usage = theirs.usage
    whole_prompt = (
        usage.input_tokens
        + (usage.cache_read_input_tokens or 0)
        + (usage.cache_creation_input_tokens or 0)
    )
    assert (ours.usage.input_tokens, ours.usage.output_tokens) == (
        whole_prompt,
        usage.output_tokens,
    )
    assert counted == ours.usage.input_tokens


async def test_one_prompt_reads_the_same_on_both_wires_cached_or_not(server: LlamaServer) -> None:
    """The second identical turn is read from the server's prompt cache: the
    Chat Completions wire counts the cached part in ``prompt_tokens``, the
    Messages API leaves it out of ``input_tokens``; ``Usage`` means one thing
    (on the Responses wire too: its whole prompt is the same count)."""
    request = ask("Say hello to the reader, please, in a friendly way.", max_tokens=8)
    seen: dict[str, list[tuple[int | None, int | None]]] = {}
    for wire, make in WIRES.items():
        async with make(server.base) as model:
            turns = [await model.complete(request) for _ in range(2)]
        seen[wire] = [(t.usage.input_tokens, t.usage.cache_read_input_tokens) for t in turns]
    assert seen["openai"][1][0] == seen["anthropic"][1][0] == seen["openai"][0][0]
    assert seen["openai-responses"][1][0] == seen["openai"][0][0]
    assert (seen["openai"][1][1] or 0) > 0
    assert (seen["anthropic"][1][1] or 0) > 0
    assert (seen["openai-responses"][1][1] or 0) > 0


async def _slots_free_after(server: LlamaServer, seconds: float) -> bool:
    await asyncio.sleep(seconds)
    return not any(await asyncio.to_thread(server.slots))


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("mode", ["complete", "stream"])
async def test_a_deadline_ends_the_turn_on_time_and_frees_the_slot(
    server: LlamaServer, wire: str, mode: str
) -> None:
    """``timeout_ms`` holds within 10% on a long generation, and the server
    stops generating: a stream's slot is free within 0.5 s (its next write
    fails); a non-streamed turn's within the server's own one-second check
    for a closed client (``HTTP_POLLING_SECONDS`` in its ``server-context.cpp``),
    read once, later, since any ``/slots`` answer restarts that second."""
    request = ask(LONG, max_tokens=3000, timeout_ms=1000)
    async with WIRES[wire](server.base) as model:
        started = time.monotonic()
        turn = model.complete(request) if mode == "complete" else streamed(model, request)
        with pytest.raises(LLMTimeout):
            await turn
        took = time.monotonic() - started
        assert 1.0 <= took <= 1.1, took
        assert await _slots_free_after(server, 0.5 if mode == "stream" else 1.5)


@pytest.mark.parametrize("wire", WIRES)
async def test_a_stream_left_early_under_aclosing_frees_the_slot(
    server: LlamaServer, wire: str
) -> None:
    request = ask(LONG, max_tokens=3000, timeout_ms=60_000)
    async with (
        WIRES[wire](server.base) as model,
        aclosing(model.stream(request, deltas=True)) as items,
    ):
        async for _ in items:
            break  # the first few words: the text is still flowing
    assert await _slots_free_after(server, 0.5)


@pytest.mark.parametrize("wire", WIRES)
async def test_forty_streams_abandoned_at_their_first_delta_leave_no_later_turn_failing(
    server: LlamaServer, wire: str
) -> None:
    """A one-host pool, forty turns alternating: a stream left at its first
    delta (its connection closed, never handed on), then a whole turn, each
    at once after the last. Every whole turn answers: none is sent on a
    connection the server has closed (#51; before the fix 2 to 3 of them
    failed LLMUnreachable, "closed the connection before answering")."""
    failures: list[BaseException] = []
    async with Pool([WIRES[wire](server.base)]) as pool:
        for turn in range(40):
            try:
                async with pool.provider() as model:
                    if turn % 2 == 0:
                        request = ask(LONG, max_tokens=3000, timeout_ms=60_000)
                        async with aclosing(model.stream(request, deltas=True)) as items:
                            async for _ in items:
                                break
                    else:
                        answer = await model.complete(ask("Say yes.", max_tokens=2))
                        assert answer.usage.output_tokens
            except LLMError as exc:
                failures.append(exc)
    assert failures == []
    assert await _slots_free_after(server, 0.5)


async def test_a_stream_that_stalls_past_stall_ms_ends_as_a_stall(server: LlamaServer) -> None:
    """A bound below the real model's time to its first token ends the turn
    as a stall, long before its budget; one above it answers."""
    async with WIRES["openai"](server.base) as model:
        with pytest.raises(LLMTimeout) as caught:
            await streamed(model, ask(LONG, max_tokens=3000, timeout_ms=60_000, stall_ms=1))
        answered = await streamed(model, ask("Say yes.", max_tokens=4, stall_ms=30_000))
    assert caught.value.phase == "stall"
    assert answered.first_chunk_ms is not None


async def test_a_vote_over_the_real_model_counts_every_turn(server: LlamaServer) -> None:
    """Asked plainly, this model answers in prose (no vote); the vote's
    default system prompt gets a yes or a no first on every turn."""
    async with Pool([openai.provider(base_url=server.base + "/v1", model=MODEL)]) as pool:
        result = await vote(pool, "Is a spider an insect?", votes=3)
    assert result.failed == 0
    assert result.tally["yes"] + result.tally["no"] == 3, result
    assert result.verdict in ("yes", "no")


async def test_structured_output_parses_against_its_schema(server: LlamaServer) -> None:
    class Animal(msgspec.Struct, forbid_unknown_fields=True):
        name: str
        legs: int

    schema = msgspec.json.schema(Animal)
    request = ask("Describe a spider as JSON.", max_tokens=60, format=schema)
    async with WIRES["openai"](server.base) as model:
        answer = await model.complete(request)
    parsed = msgspec.json.decode(_text(answer), type=Animal)
    assert parsed.name
    assert parsed.legs >= 0
    assert json.loads(_text(answer)).keys() == {"name", "legs"}


class Animal(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    legs: int


@pytest.mark.parametrize("wire", WIRES)
async def test_a_typed_answer_is_a_struct_on_every_wire(server: LlamaServer, wire: str) -> None:
    """(#62) The answer decodes into the Struct on each wire, whole and
    streamed (partial values first, the Struct last). The schema goes out as
    each wire's format field; this llama-server holds the model to it on Chat
    Completions only (it reads no ``text.format`` nor ``output_config``), so
    the prompt asks for the JSON in words too, which a 135M model copies."""
    request = ask('Repeat this JSON exactly: {"name": "spider", "legs": 8}', max_tokens=60)
    async with WIRES[wire](server.base) as model:
        whole = await vaelii_llm.answer(model, request, into=Animal, retries=0)
        async with aclosing(vaelii_llm.answer(model, request, into=Animal).stream()) as parts:
            seen = [part async for part in parts]
    assert whole == Animal(name="spider", legs=8)
    assert seen[-1] == whole
    assert all(isinstance(part, dict) for part in seen[:-1])
    assert len(seen) > 2
    assert seen[-2] == {"name": "spider", "legs": 8}


@pytest.mark.parametrize("wire", WIRES)
async def test_a_typed_answer_that_never_fits_is_asked_again_then_refused(
    server: LlamaServer, wire: str
) -> None:
    """The real model's answer lacks a field: it is asked again with the
    error shown, and past ``retries`` the typed error holds both attempts. On
    Chat Completions the server's grammar holds the model to the schema
    instead, so the answer fits."""
    request = ask('Repeat this JSON exactly: {"name": "spider"}', max_tokens=60)
    async with WIRES[wire](server.base) as model:
        if wire == "openai":
            held = await vaelii_llm.answer(model, request, into=Animal, retries=0)
            assert isinstance(held, Animal)
            return
        with pytest.raises(LLMBadAnswer) as caught:
            await vaelii_llm.answer(model, request, into=Animal, retries=1)
    assert len(caught.value.attempts) == 2
    assert all("legs" in error for _, error in caught.value.attempts)
    assert caught.value.cut is False


async def test_fifty_turns_one_after_another_reuse_one_connection(server: LlamaServer) -> None:
    """Keep-alive on a real server: the provider's connection is reused turn
    after turn (the server sees one client port for all of them)."""
    ports: set[int] = set()

    def mine(pid: int) -> set[int]:
        """Our process's client ports to the server, from the kernel's socket table."""
        listed = subprocess.run(
            ["ss", "-tnpH", "state", "established", "dst", f"127.0.0.1:{server.port}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return {
            int(line.split()[2].rsplit(":", 1)[1])
            for line in listed.splitlines()
            if f"pid={pid}," in line
        }

    async with WIRES["openai"](server.base) as model:
        for _ in range(50):
            answer = await model.complete(ask("Say yes.", max_tokens=2))
            assert answer.usage.output_tokens
            ports |= mine(os.getpid())
    assert len(ports) == 1, ports


@pytest.mark.parametrize("kind", ["openai", "openai-responses"])
async def test_a_vote_over_two_real_servers_never_exceeds_a_host_s_limit(kind: str) -> None:
    """``host*1`` on each of two real servers: while 8 votes run, neither
    server ever has more than one slot generating, and both are used."""
    async with LlamaServer(parallel=2) as one, LlamaServer(parallel=2) as two:
        spec = f"{one.base}/v1*1,{two.base}/v1*1"
        most = {one.port: 0, two.port: 0}
        done = asyncio.Event()

        async def watch() -> None:
            while not done.is_set():
                for running in (one, two):
                    busy = sum(await asyncio.to_thread(running.slots))
                    most[running.port] = max(most[running.port], busy)
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        try:
            async with await pool_from_config(spec, kind=kind, model=MODEL) as vp:
                results = await vote(vp, "Is a spider an insect?", votes=8)
        finally:
            done.set()
            await watcher
    assert results.failed == 0
    assert results.tally["yes"] + results.tally["no"] == 8, results
    assert most == {one.port: 1, two.port: 1}, most


async def test_the_command_votes_from_the_real_model(server: LlamaServer) -> None:
    env = {
        **os.environ,
        "VAELII_LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": server.base + "/v1",
        "VAELII_OPENAI_MODEL": MODEL,
    }
    command = [sys.executable, "-m", "vaelii_llm.cli"]
    voted = await asyncio.to_thread(
        subprocess.run,
        [*command, "vote", "Is a spider an insect?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert voted.returncode == 0, voted.stderr
    words = voted.stdout.split()
    assert words[:2] in (["verdict:", "yes"], ["verdict:", "no"]), voted.stdout
    assert "failed: 0 of 3" in voted.stdout, voted.stdout


async def _most_busy_while(server: LlamaServer, work: Any) -> tuple[Any, int]:
    """``work`` awaited while ``server``'s slots are read; the most seen busy at once."""
    most = 0
    task = asyncio.ensure_future(work)
    while not task.done():
        most = max(most, sum(await asyncio.to_thread(server.slots)))
        await asyncio.sleep(0.01)
    return await task, most


async def _commands(
    env: dict[str, str], *argv: list[str]
) -> list[subprocess.CompletedProcess[str]]:
    async def one(args: list[str]) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run, args, env=env, capture_output=True, text=True, timeout=180, check=False
        )

    return list(await asyncio.gather(*(one(args) for args in argv)))


async def test_two_processes_sharing_slots_in_redis_hold_one_host_s_limit() -> None:
    """Two ``vaelii-llm vote`` processes, one host of two slots given as
    ``host*1``, the slots shared through a real Redis: the server never has
    more than one slot generating, though it could run two."""
    async with LlamaServer(parallel=2) as host, RedisServer() as redis:
        env = {
            **os.environ,
            "VAELII_LLM_PROVIDER": "openai",
            "VAELII_OPENAI_HOSTS": f"{host.base}/v1*1",
            "OPENAI_BASE_URL": host.base + "/v1",
            "VAELII_OPENAI_MODEL": MODEL,
            "VAELII_POOL_REDIS_URL": redis.url,
        }
        vote_ = [sys.executable, "-m", "vaelii_llm.cli", "vote", "--votes", "4", "Is fire hot?"]
        done, most = await _most_busy_while(host, _commands(env, vote_, vote_))
    for finished in done:
        assert finished.returncode == 0, finished.stderr
        assert "failed: 0 of 4" in finished.stdout, finished.stdout
    assert most == 1


async def test_the_command_asks_the_real_model(server: LlamaServer) -> None:
    env = {
        **os.environ,
        "VAELII_LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": server.base + "/v1",
        "VAELII_OPENAI_MODEL": MODEL,
    }
    question = "Reply with exactly one word: yes or no. Is fire hot?"
    asked = [sys.executable, "-m", "vaelii_llm.cli", "ask", question]
    (done,) = await _commands(env, asked)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1].strip(".,!").lower() in {"yes", "no"}, done.stdout


async def test_the_web_example_answers_from_the_real_model(
    server: LlamaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The web example as configured by its environment (its own provider
    factory, not one the test hands it), asked over HTTP."""
    from tests.support.web_example import web_backend  # the example, loaded once for every test

    monkeypatch.setenv("VAELII_LLM_PROVIDER", "openai")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base + "/v1")
    monkeypatch.setenv("VAELII_OPENAI_MODEL", MODEL)
    question = {"question": "Reply with exactly one word: yes or no. Is fire hot?"}
    async with (
        TestServer(web_backend.make_app(), host="127.0.0.1") as app,
        aiohttp.ClientSession() as session,
        session.post(app.make_url("/ask"), json=question) as answered,
    ):
        got = await answered.json()
    assert answered.status == 200, got
    assert got["answer"] != web_backend.STUB_ANSWER
    assert got["answer"].split()[-1].strip(".,!").lower() in {"yes", "no"}, got


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tool_server() -> AsyncIterator[LlamaServer]:
    async with LlamaServer(parallel=1, chat_template=TOOL_TEMPLATE) as running:
        yield running


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("deltas", [False, True], ids=["whole", "deltas"])
async def test_the_agent_loop_makes_a_real_tool_call_and_reads_its_result(
    tool_server: LlamaServer, wire: str, deltas: bool
) -> None:
    toolset = tools.Toolset(kb.sample())
    question = Message(role="user", content="What is Muffet?")
    first = Request(
        messages=[*worked_exchanges(), question],
        tools=toolset.schemas(only=[tools.op_of("kb_types_of")]),
        max_tokens=100,
    )
    seen: list[str] = []
    async with WIRES[wire](tool_server.base) as model:
        result = await agent.run(
            model, toolset, first, deltas=deltas, on_event=lambda e: seen.append(type(e).__name__)
        )
    assert [(c.name, c.input, c.ok) for c in result.tool_calls] == [
        ("kb_types_of", {"term": "Muffet"}, True)
    ]
    assert "Spider" in result.tool_calls[0].result  # the KB's own answer
    assert (result.stopped, result.turns) == ("answered", 2)
    # "spider" is in no worked exchange: the answer was read from the call's result.
    assert "spider" in result.answer.lower()
    assert "ToolCallStarted" in seen
    assert "ToolCallFinished" in seen
    if deltas:
        assert "ToolInputArrived" in seen


# -- #48 item 5: SmolLM2's own template renders no tools; nothing drops them silently --


async def test_a_template_that_renders_no_tools_is_said_not_answered_around(
    server: LlamaServer,
) -> None:
    """The default server runs SmolLM2's own chat template, which renders no
    tools: its /props says so, `ask` says so once before the turn on both wires
    (and the model still answers), and the agent loop, sent every KB tool
    anyway, says once that they were ignored."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.base + "/props") as answered,
    ):
        props = await answered.json()
    assert props["chat_template_caps"]["supports_tools"] is False

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VAELII_", "ANTHROPIC_", "OPENAI_", "OLLAMA_"))
    }
    for wire, switches in {
        "openai": {"OPENAI_BASE_URL": server.base + "/v1"},
        "openai-responses": {"OPENAI_BASE_URL": server.base + "/v1"},
        "anthropic": {"ANTHROPIC_BASE_URL": server.base, "ANTHROPIC_API_KEY": "sk-none"},
    }.items():
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "vaelii_llm.cli", "ask", "Who is Miss Muffet afraid of?"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "VAELII_LLM_PROVIDER": wire, **switches},
        )
        assert done.returncode == 0, (wire, done.stderr)
        assert done.stdout.strip(), wire  # answered, without the KB
        assert done.stderr.startswith(
            f"no-tools: the server at {server.base} renders no tools with its chat template"
        ), (wire, done.stderr)
        assert "tools-ignored" not in done.stderr  # said once

    toolset = tools.Toolset(kb.sample())
    for wire in WIRES:
        seen: list[agent.Event] = []
        first = agent.request("Who is Miss Muffet afraid of?", toolset, max_tokens=32)
        async with WIRES[wire](server.base) as model:
            result = await agent.run(model, toolset, first, on_event=seen.append)
        ignored = [event for event in seen if isinstance(event, agent.ToolsIgnored)]
        assert len(ignored) == 1, (wire, seen)
        assert ignored[0].input_tokens < ignored[0].tools_floor
        assert result.tool_calls == []


MIXED_TURNS = 600


@pytest.mark.timeout(280)
async def test_six_hundred_turns_of_streams_whole_turns_and_abandoned_streams_all_answer(
    server: LlamaServer,
) -> None:
    """The server closes a stream's connection just after its last byte, though
    its head says ``Keep-Alive`` (#58). Six hundred turns, each at once after
    the last, on one provider, in a seeded random order: streams read to
    their end, whole turns and streams left at their first delta. Every one
    answers (on main the turn after a stream failed LLMUnreachable, "closed
    the connection before answering", 5 to 9 times in 60). Nothing is
    retried, so no request is sent twice."""
    rng = random.Random(58)
    counts = {"stream": 0, "whole": 0, "abandoned": 0}
    failures: list[tuple[int, str, BaseException]] = []
    async with WIRES["openai"](server.base) as model:
        for turn in range(MIXED_TURNS):
            kind = rng.choices(list(counts), weights=[4, 4, 2])[0]
            counts[kind] += 1
            try:
                if kind == "stream":
                    assert (await streamed(model, ask("Say yes.", max_tokens=4))).content
                elif kind == "whole":
                    assert (await model.complete(ask("Say yes.", max_tokens=2))).usage.output_tokens
                else:
                    request = ask(LONG, max_tokens=3000, timeout_ms=60_000)
                    async with aclosing(model.stream(request, deltas=True)) as items:
                        async for _ in items:
                            break
            except LLMError as exc:
                failures.append((turn, kind, exc))
    print(f"{MIXED_TURNS} turns {counts}: {len(failures)} failed")
    assert failures == []
    assert await _slots_free_after(server, 0.5)
