"""Every example runs: the quickstart (the README's first command) and the rest, on the
stub or against a loopback fake."""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from tests.support.doc_pages import load_example
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm import agent
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm.providers import stub

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_runs_on_the_stub_against_the_sample_kb() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAELII_", "ANTHROPIC_"))}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    lines = out.stdout.splitlines()
    assert any(line.startswith("  tool kb_query(") and "Muffet" in line for line in lines)
    assert any(line.startswith("  tool kb_types_of(") and "Spider" in line for line in lines)
    assert any(line.startswith("A: Miss Muffet is afraid of") for line in lines)
    assert "  done: stop_reason=end_turn" in lines
    assert lines[-1].startswith("vote: no")
    assert lines[1] == STUB_LINE  # a new user learns at once that no model answered
    assert out.stderr == ""


def test_quickstart_says_why_a_configured_backend_did_not_answer() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAELII_", "ANTHROPIC_"))}
    env.update(VAELII_LLM_PROVIDER="ollama", VAELII_OLLAMA_HOST="http://127.0.0.1:9")
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert out.stdout.splitlines()[1].startswith(
        "answering: the scripted stub, not a model (llm-unreachable: Ollama at "
        "http://127.0.0.1:9 is unreachable"
    )


def test_quickstart_on_anthropic_without_a_key_names_anthropic_only() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAELII_", "ANTHROPIC_"))}
    env.update(VAELII_LLM_PROVIDER="anthropic")
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    line = out.stdout.splitlines()[1]
    assert line.startswith("answering: the scripted stub, not a model (")
    assert "ANTHROPIC_API_KEY" in line
    assert "ollama" not in line.lower()
    assert "openai" not in line.lower()


# -- the other examples: each runs as a script, and does what its docstring says ----------

EXAMPLES = ROOT / "examples"


def stub_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VAELII_", "ANTHROPIC_", "OLLAMA_"))
    }


STUB_LINE = (
    "answering: the scripted stub, not a model (nothing is configured); "
    "`vaelii-llm status` says what to set"
)
"""The first line of every example that asks a model, when the stub answers."""


def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        env=env or stub_env(),
        timeout=120,
        check=True,
    )
    assert out.stderr == ""
    return out.stdout.splitlines()


# Examples that run no model of their own: the model is the MCP host's.
HOST_MODEL = {"mcp_server.py": "The model is the host's"}


def test_every_example_says_what_it_shows_and_how_to_point_it_at_a_real_model() -> None:
    for path in sorted(EXAMPLES.glob("[!_]*.py")):  # _answering.py is their shared helper
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc, path.name
        assert f"python examples/{path.name}" in doc, path.name
        assert HOST_MODEL.get(path.name, "VAELII_LLM_PROVIDER") in doc, path.name
        text = path.read_text()  # asyncio.run, through _answering.run where it offers Ctrl-C's line
        assert "asyncio.run(" in text or "sys.exit(run(main(" in text, path.name


def test_agent_loop_runs_on_the_stub_against_the_sample_kb() -> None:
    answering, *lines = run_example("agent_loop")
    assert answering == STUB_LINE
    assert lines[0].startswith("  tool kb_query {'goal': '(afraidOf MissMuffet ?who)'} -> ok")
    assert lines[1].startswith("  tool kb_types_of {'term': 'Muffet'} -> ok")
    assert lines[2].startswith("A: Miss Muffet is afraid of")
    assert lines[3] == "stopped: answered"


SCRIPTS = {
    "answers": [
        {"tool": "kb_query", "input": {"goal": "(afraidOf MissMuffet ?who)"}},
        {"tool": "kb_assert", "input": {"sentence": "(isa Me Spider)"}},
        "Three spiders.",
    ],
    "refuses": [{"tool": "kb_types_of", "input": {"term": "Muffet"}}, {"refusal": "No"}],
    "truncated": [{"text": "Miss Muffet is", "stop_reason": "max_tokens"}],
    "keeps asking": [{"tool": "kb_sentex_count", "input": {}}] * 5,
    "pauses": [Response(content=[TextBlock(text="hm")], stop_reason="pause_turn"), "Fang."],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
async def test_the_hand_written_loop_and_the_library_loop_agree(name: str) -> None:
    example = load_example("agent_loop")
    toolset = tools.Toolset(kb.sample())
    by_hand_model = stub.provider(script=SCRIPTS[name])
    library_model = stub.provider(script=SCRIPTS[name])
    answer, stopped, calls = await example.tool_loop(by_hand_model, toolset, "q", max_turns=3)
    result = await agent.run(library_model, toolset, "q", max_turns=3)
    assert (answer, stopped) == (result.answer, result.stopped)
    assert calls == [
        f"{c.name} {c.input} -> {'ok' if c.ok else 'refused'}" for c in result.tool_calls
    ]
    assert [r.messages for r in by_hand_model.requests()] == [
        r.messages for r in library_model.requests()
    ]


def test_structured_output_decodes_the_stub_answer_into_its_struct() -> None:
    answering, line = run_example("structured_output")
    assert answering == STUB_LINE
    assert line.startswith("Creature(name='Muffet', types=['Animal', 'Arachnid'")


async def test_the_stub_answer_of_structured_output_holds_the_kb_facts() -> None:
    example = load_example("structured_output")
    toolset = tools.Toolset(kb.sample())
    creature = msgspec.json.decode(example.STUB_ANSWER, type=example.Creature)
    types = (await toolset.call("kb_types_of", {"term": "Muffet"})).text
    fears = (await toolset.call("kb_query", {"goal": "(afraidOf ?who Muffet)"})).text
    assert creature.types == types.strip("[]").split()
    assert creature.feared_by == re.findall(r"\?who (\w+)\}", fears)


async def test_structured_output_sends_the_schema_to_a_loopback_ollama(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fake fills the schema from the facts in the prompt: a model's job, done plainly."""
    from tests.support.fake_ollama import FakeOllama
    from tests.support.fake_ollama import chunk
    from tests.support.fake_ollama import final

    example = load_example("structured_output")

    def fill(body: dict[str, Any]) -> list[dict[str, Any]]:
        prompt = body["messages"][-1]["content"]
        answer = {
            "name": "Muffet",
            "types": re.search(r"types: \[(.*?)\]", prompt).group(1).split(),  # type: ignore[union-attr]
            "feared_by": re.findall(r"\?who (\w+)\}", prompt),
        }
        return [chunk(json.dumps(answer)), final()]

    server = await FakeOllama(script=fill).start()
    try:
        for name in stub_env().keys() ^ os.environ.keys():
            monkeypatch.delenv(name)
        monkeypatch.setenv("VAELII_LLM_PROVIDER", "ollama")
        monkeypatch.setenv("VAELII_OLLAMA_HOST", server.url)
        creature = await example.describe("Muffet")
    finally:
        await server.stop()
    schema = msgspec.json.schema(example.Creature)
    assert server.bodies[0]["format"] == schema["$defs"]["Creature"]  # the top definition
    assert creature == msgspec.json.decode(example.STUB_ANSWER, type=example.Creature)


def test_vote_runs_on_the_stub_with_a_progress_line_per_turn() -> None:
    lines = run_example("vote")
    assert lines[0] == (
        "answering: the scripted stub, not a model "
        "(a pool spreads over a model backend (ollama, anthropic, openai, openai-responses), "
        "not 'stub')"
    )
    assert lines[1].startswith("voting over 2 provider token(s)")
    assert [line.split(":")[0] for line in lines[2:5]] == ["  1/3 in", "  2/3 in", "  3/3 in"]
    assert lines[5] == "verdict: no  tally: yes 1, no 2  failed: 0 of 3"  # as the command (#48)


async def test_vote_runs_over_configured_loopback_hosts() -> None:
    from tests.support.fake_ollama import FakeOllama
    from tests.support.fake_ollama import chunk
    from tests.support.fake_ollama import final

    server = await FakeOllama(script=lambda body: [chunk("Yes, by this fake."), final()]).start()
    try:
        env = {
            **stub_env(),
            "VAELII_LLM_PROVIDER": "ollama",
            "VAELII_OLLAMA_HOSTS": f"{server.url}*3",
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(EXAMPLES / "vote.py"),
            "Is this a test?",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await server.stop()
    lines = out.decode().splitlines()
    assert (proc.returncode, err) == (0, b"")
    assert lines[:2] == [
        "answering: ollama hosts, real models",
        "voting over 3 provider token(s): Is this a test?",
    ]
    assert lines[-1] == "verdict: yes  tally: yes 3, no 0  failed: 0 of 3"
    assert len(server.bodies) == 3


def test_vision_answers_about_its_image_on_the_stub() -> None:
    assert run_example("vision") == [STUB_LINE, "A red square on a white background."]


async def run_vision(env: dict[str, str], *args: str) -> tuple[int | None, str, str]:
    """vision.py as a subprocess, while this loop serves its loopback far end."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / "vision.py"),
        *args,
        env={**stub_env(), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


PNG_B64 = base64.b64encode((EXAMPLES / "red_square.png").read_bytes()).decode()


async def test_vision_sends_the_image_to_a_loopback_messages_api(tmp_path: Path) -> None:
    from aiohttp.test_utils import TestServer

    from tests.support.anthropic_fake import FakeMessagesAPI
    from tests.support.anthropic_fake import Transcript

    message = {
        "id": "msg_vision",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-5-5",
        "content": [{"type": "text", "text": "A red square, by this fake."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 90, "output_tokens": 8},
    }
    api = FakeMessagesAPI(transcript=Transcript(events=[], message=message))
    server = TestServer(api.app(), host="127.0.0.1", port=0)
    await server.start_server()
    big = tmp_path / "big.png"  # over the API's 5 MB per image, base64-encoded
    big.write_bytes((EXAMPLES / "red_square.png").read_bytes() + bytes(4 * 1024 * 1024))
    env = {
        "VAELII_LLM_PROVIDER": "anthropic",
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": str(server.make_url("")).rstrip("/"),
    }
    try:
        answered = await run_vision(env)
        refused = await run_vision(env, str(big))
    finally:
        await server.close()
    assert answered == (0, "answering: anthropic, a real model\nA red square, by this fake.\n", "")
    [seen] = api.seen  # the refused image never left the machine
    image, question = seen.body["messages"][0]["content"]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
    }
    assert question["text"].startswith("What shape is in this image")
    code, out, err = refused
    assert (code, out) == (1, "answering: anthropic, a real model\n")
    assert err.startswith("llm-encode: the Messages API at http://127.0.0.1:")
    assert "over the Messages API's 5 MB per image" in err


async def test_vision_sends_the_image_to_a_loopback_ollama() -> None:
    from tests.support.fake_ollama import MODEL
    from tests.support.fake_ollama import FakeOllama
    from tests.support.fake_ollama import chunk
    from tests.support.fake_ollama import final

    server = await FakeOllama(script=lambda body: [chunk("Red. A square."), final()]).start()
    env = {
        "VAELII_LLM_PROVIDER": "ollama",
        "VAELII_OLLAMA_HOST": server.url,
        "VAELII_OLLAMA_MODEL": MODEL,
    }
    try:
        answered = await run_vision(env)
    finally:
        await server.stop()
    assert answered == (0, "answering: ollama, a real model\nRed. A square.\n", "")
    [body] = server.bodies
    [message] = body["messages"]
    assert message["images"] == [PNG_B64]
    assert message["content"].startswith("What shape is in this image")


@pytest.mark.usefixtures("ctrl_c_reaches_children")
async def test_web_backend_serves_on_the_stub_and_closes_its_provider_on_ctrl_c() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / "web_backend.py"),
        "--port",
        "0",
        env=stub_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        first = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert first.startswith("listening on http://127.0.0.1:")
        url = first.split()[-1]
        async with aiohttp.ClientSession() as session:
            async with session.post(url + "/ask", json={"question": "Who?"}) as resp:
                got = await resp.json()
                assert resp.status == 200
            async with session.post(url + "/ask/stream", json={"question": "Who?"}) as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                stream = await resp.text()
            async with session.post(url + "/ask", data=b"[1, 2]") as resp:
                assert (resp.status, (await resp.json())["error"]) == (400, "bad-request")
    finally:
        proc.send_signal(signal.SIGINT)
        rest, err = await asyncio.wait_for(proc.communicate(), 60)
    example = load_example("web_backend")
    assert got["answer"] == example.STUB_ANSWER
    assert (got["stop_reason"], got["tool_calls"]) == ("end_turn", [])
    assert stream.startswith("event: text\ndata: ")
    assert "event: final\ndata: " in stream
    assert rest.decode().splitlines()[-1] == "provider closed"
    assert proc.returncode == 130  # Ctrl-C's status, as every example's (#60)
    assert b"Traceback" not in err


# -- an example whose extra is missing says how to install it (issue #34 item 10) --------

BLOCKED_RUN = """
import importlib.abc, runpy, sys

blocked, script = sys.argv[1:3]

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
sys.argv = [script]
sys.path.insert(0, script.rpartition("/")[0])  # as `python script` puts its folder first
runpy.run_path(script, run_name="__main__")
"""
"""Runs an example as ``python examples/NAME.py`` does, with one top-level package
refusing to import, as it does where its extra is not installed."""


@pytest.mark.parametrize(
    ("example", "blocked", "extra"),
    [("mcp_server", "mcp", "mcp"), ("pydantic_ai_agent", "pydantic_ai", "pydantic-ai")],
)
def test_an_example_without_its_extra_prints_the_install_hint_and_exits_2(
    example: str, blocked: str, extra: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN, blocked, str(EXAMPLES / f"{example}.py")],
        capture_output=True,
        text=True,
        env=stub_env(),
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, "")
    [line] = done.stderr.splitlines()
    assert line.startswith(
        f"this example needs the {extra} extra: pip install 'vaelii-llm[{extra}]'"
    )
    assert "Traceback" not in done.stderr


# -- #48 item 6: structured output cut at max_tokens, and a long wait on a terminal ----


async def test_structured_output_cut_at_max_tokens_says_so_and_exits_1() -> None:
    """A busy server's answer stopped at max_tokens is no whole JSON object:
    the example reads the stop reason first, never msgspec's DecodeError."""
    from tests.support.fake_ollama import FakeOllama
    from tests.support.fake_ollama import chunk
    from tests.support.fake_ollama import final

    server = await FakeOllama(
        script=lambda body: [
            chunk('{"name": "Muffet", "types": ["Anim'),
            final(done_reason="length"),
        ]
    ).start()
    try:
        env = {**stub_env(), "VAELII_LLM_PROVIDER": "ollama", "VAELII_OLLAMA_HOST": server.url}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(EXAMPLES / "structured_output.py"),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await server.stop()
    assert proc.returncode == 1
    assert out.decode() == "answering: ollama, a real model\n"
    assert err.decode() == (
        "the answer was cut at max_tokens (512) before its JSON object closed; "
        "raise max_tokens, or ask a model that answers more briefly\n"
    )


async def test_structured_output_shows_its_wait_then_the_tokens_on_a_terminal() -> None:
    from tests.support.fake_ollama import FakeOllama
    from tests.support.fake_ollama import chunk
    from tests.support.fake_ollama import final
    from tests.support.terminal import run_on_terminal

    answer = json.loads(load_example("structured_output").STUB_ANSWER)
    text = json.dumps(answer)
    server = await FakeOllama(
        script=lambda body: [chunk(""), chunk(text[:20]), chunk(text[20:]), final()],
        chunk_delay=1.5,  # a server slow to begin, then slow to go on
    ).start()
    try:
        env = {**stub_env(), "VAELII_LLM_PROVIDER": "ollama", "VAELII_OLLAMA_HOST": server.url}
        code, out, shown = await run_on_terminal(
            [sys.executable, str(EXAMPLES / "structured_output.py")], env
        )
    finally:
        await server.stop()
    assert code == 0, shown
    assert out.splitlines()[1].startswith("Creature(name='Muffet'")
    # redrawn each second: the wait first, then the tokens as they come
    drawn = re.findall(r"\r\x1b\[K([^\r]*)", shown)
    assert drawn[0] == "waiting for the model: 1 s", drawn
    assert re.fullmatch(r"the model is answering: \d+ s, [12] token\(s\) in", drawn[-2]), drawn
    assert drawn[-1] == ""  # erased: the terminal is left clean
