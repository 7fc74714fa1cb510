"""The command and the examples as a new user met them in round four (issue
#60), run as the installed ``vaelii-llm`` (and ``python examples/NAME.py``) in
a subprocess against loopback fakes: each mistake names its fix, a failure
leads with its cause, and one table of exit statuses holds for every command.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import generate
from tests.support.cli_runs import MCP_TOOLS_SERVER
from tests.support.cli_runs import NO_TOOLS_PROPS
from tests.support.cli_runs import clean_env
from tests.support.cli_runs import command
from tests.support.cli_runs import no_tools_line
from tests.support.cli_runs import run_command as run
from tests.support.cli_runs import run_process
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_openai_responses import FakeResponses
from tests.support.fake_openai_responses import Item
from tests.support.fake_openai_responses import Turn
from tests.support.kb_model import echoer
from tests.support.kb_model import keeps_asking
from tests.support.loopback import refused_url
from tests.support.loopback import serve
from tests.support.polling import until
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import cli
from vaelii_llm import errors
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import openai_responses

SECRET = "sk-ant-round-four-SECRET"
DROP_V1 = (
    "drop the trailing /v1 from the base URL (ANTHROPIC_BASE_URL, or base_url=): "
    "the Messages API adds /v1/messages itself; the OpenAI wires are the ones that want /v1"
)


def answering_api() -> FakeMessagesAPI:
    transcript = generate(random.Random(60), kinds=["text"], stop_reason="end_turn")
    transcript.message["content"] = [{"type": "text", "text": "Yes."}]
    return FakeMessagesAPI(transcript=transcript)


# -- 1. ANTHROPIC_BASE_URL ending in /v1 ---------------------------------------------


@pytest.mark.usefixtures("_no_ambient_credential")
async def test_a_python_callers_404_under_a_base_url_ending_in_v1_names_the_fix() -> None:
    async with answering_api() as fake:
        request = Request(messages=[Message(role="user", content="Hi")], max_tokens=16)
        async with anthropic.provider(base_url=fake.url + "/v1", credential=SECRET) as model:
            with pytest.raises(errors.LLMApiError) as caught:
                await model.complete(request)
        async with anthropic.provider(base_url=fake.url, credential=SECRET) as model:
            answered = await model.complete(request)  # the same server, the right URL
    assert caught.value.status == 404
    assert str(caught.value).startswith(f"the Messages API at {fake.url}/v1 answered HTTP 404: ")
    assert str(caught.value).endswith(f"; {DROP_V1}")
    assert answered.stop_reason == "end_turn"


async def test_status_ask_and_vote_say_drop_the_trailing_v1() -> None:
    async with answering_api() as fake:
        env = clean_env(
            VAELII_LLM_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=fake.url + "/v1",
            ANTHROPIC_API_KEY=SECRET,
        )
        status = await run(env, "status")
        ask = await run(env, "ask", "Who is afraid of spiders?")
        vote = await run(env, "vote", "Is a spider an insect?")
    cause = (
        f"llm-api-error: the Messages API at {fake.url}/v1 answered HTTP 404: "
        "'404: Not Found'; " + DROP_V1
    )
    code, out, err = status
    assert (code, err) == (2, "")
    assert out.splitlines()[:3] == [
        "configured: anthropic",
        "answering:  stub",
        f"why:        {cause}",
    ]
    assert ask == (2, "", cause + "\n")
    code, out, err = vote
    assert (code, err) == (2, cause + "\n")
    assert fake.seen == []  # no turn was sent to the wrong path's 404
    assert SECRET not in out + err + status[1]


# -- 3. one table of exit statuses, every row run -------------------------------------


def messages_env(url: str) -> dict[str, str]:
    return clean_env(
        VAELII_LLM_PROVIDER="anthropic", ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY=SECRET
    )


def ollama_env(url: str) -> dict[str, str]:
    return clean_env(
        VAELII_LLM_PROVIDER="ollama", VAELII_OLLAMA_HOST=url, VAELII_OLLAMA_MODEL="llama3.2"
    )


def stopping(stop_reason: str) -> FakeMessagesAPI:
    transcript = generate(random.Random(60), kinds=["text"], stop_reason=stop_reason)
    return FakeMessagesAPI(transcript=transcript)


async def exit_0() -> None:
    async with answering_api() as fake:
        env = messages_env(fake.url)
        assert (await run(env, "ask", "Are you there?"))[0] == 0
        assert (await run(env, "status"))[0] == 0
        assert (await run(env, "vote", "Is it?"))[:2] == (
            0,
            "verdict: yes  tally: yes 3, no 0  failed: 0 of 3\n",
        )
    assert (await run(clean_env(), "call", "kb_types_of", '{"term": "Muffet"}'))[0] == 0


async def exit_1() -> None:
    async with FakeMessagesAPI(status=500) as failing:  # it answers its probe, then 500s
        env = messages_env(failing.url)
        ask = await run(env, "ask", "Are you there?")
        vote = await run(env, "vote", "Is it?")
    assert ask[0] == vote[0] == 1
    assert ask[2].startswith(f"llm-api-error: the Messages API at {failing.url} answered HTTP 500")
    assert vote[2].startswith("vote-failed: every turn failed: llm-api-error: ")
    bad_kb = await run(clean_env(VAELII_LLM_PROVIDER="stub"), "ask", "q", "--kb", "/nowhere.edn")
    refused = await run(clean_env(), "call", "kb_types_of", "{}")
    assert (bad_kb[0], refused[0]) == (1, 1)


async def exit_2() -> None:
    env = messages_env(refused_url())
    for argv in (["status"], ["ask", "q"], ["vote", "q"]):  # one answer from every command
        code, _, err = await run(env, *argv)
        assert code == 2, (argv, err)
        assert (err or "llm-unreachable: ").startswith("llm-unreachable: "), argv
    assert (await run(clean_env(), "ask", "q", "--max-turns", "0"))[0] == 2


async def exit_ask(fake: FakeMessagesAPI, *argv: str) -> int:
    async with fake:
        return (await run(messages_env(fake.url), "ask", "q", *argv))[0]


async def exit_3() -> None:
    assert await exit_ask(stopping("refusal")) == 3


async def exit_4() -> None:
    assert await exit_ask(stopping("max_tokens")) == 4


async def exit_5() -> None:
    async with FakeOllama(script=keeps_asking) as fake:
        code, _, err = await run(ollama_env(fake.url), "ask", "q", "--max-turns", "1")
    assert code == 5, err


async def exit_6() -> None:
    async with FakeOllama(script=echoer) as fake:
        code, _, err = await run(
            ollama_env(fake.url),
            "ask",
            "die then say it",
            "--no-kb",
            "--mcp",
            " ".join(MCP_TOOLS_SERVER),
        )
    assert code == 6, err


async def exit_130() -> None:
    fake = answering_api()
    fake.stalled = True
    async with fake:
        proc = await asyncio.create_subprocess_exec(
            *command(),
            "ask",
            "q",
            env=messages_env(fake.url),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        waited = asyncio.ensure_future(proc.wait())
        await until(lambda: bool(fake.seen), waited)  # the turn is on the wire
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        fake.released.set()
    assert (proc.returncode, err.decode()) == (130, "interrupted\n")


ROWS = {0: exit_0, 1: exit_1, 2: exit_2, 3: exit_3, 4: exit_4, 5: exit_5, 6: exit_6, 130: exit_130}


def test_every_row_of_the_exit_table_has_its_run() -> None:
    assert [status for status, _ in cli.EXIT_STATUSES] == list(ROWS)


@pytest.mark.usefixtures("ctrl_c_reaches_children")  # row 130 ends `ask` with SIGINT
@pytest.mark.parametrize("status", list(ROWS))
async def test_each_exit_status_is_what_the_table_says(status: int) -> None:
    await ROWS[status]()


async def test_ask_help_lists_no_tools_under_0_not_2() -> None:
    code, out, _ = await run(clean_env(), "ask", "--help")
    assert code == 0
    table = out[out.index("exit status (every command):") :]
    two = table[table.index("  2    ") : table.index("  3    ")]
    assert "chat template" not in two
    assert "no-tools" in table[table.index("  130  ") :]
    assert "(without the knowledge base; exit 0)" in " ".join(out.split())


# -- 4. a failure leads with its cause ------------------------------------------------


async def test_an_unreachable_configured_backend_leads_with_llm_unreachable() -> None:
    url = refused_url()
    env = clean_env(VAELII_LLM_PROVIDER="openai", OPENAI_BASE_URL=url + "/v1")
    code, out, err = await run(env, "ask", "q")
    assert (code, out) == (2, "")
    assert err.startswith(f"llm-unreachable: the Chat Completions API at {url}/v1 is unreachable")
    assert "stub" not in err  # the user configured openai and never chose the stub
    code, out, err = await run(env, "ask", "q", "--json")
    failure = json.loads(out)
    assert (code, failure["error"], failure["exit"]) == (2, "llm-unreachable", 2)
    assert err == f"llm-unreachable: {failure['message']}\n"
    nothing = await run(clean_env(), "ask", "q")  # the stub by default: that is the cause
    assert nothing[0] == 2
    assert nothing[2].startswith("stub-only: only the stub can answer: nothing is configured")


# -- 5. a whole-turn timeout on the command, and every timeout names what to raise ----


async def test_ask_and_vote_take_timeout_ms_and_name_what_to_raise() -> None:
    posted: list[str] = []
    released = asyncio.Event()

    async def silent_turns(request: web.Request) -> web.Response:
        if request.method == "POST":  # a turn: no answer until the test ends
            posted.append(request.path)
            await released.wait()
        return web.json_response({"error": "no such route"}, status=404)  # the probe answers

    async with serve(silent_turns) as url:
        env = messages_env(url)
        ask = await run(env, "ask", "q", "--timeout-ms", "1500")
        vote = await run(env, "vote", "q", "--votes", "1", "--timeout-ms", "1500")
        stalled = await run(env, "ask", "q", "--stall-ms", "1500")
        released.set()
    said = (
        f"the Messages API at {url} did not answer inside the turn's 1500 ms; "
        "raise timeout_ms (--timeout-ms) for a model this slow to start"
    )
    assert (ask[0], ask[2]) == (1, f"llm-timeout: {said}\n")
    assert (vote[0], vote[2]) == (1, f"vote-failed: every turn failed: llm-timeout: {said}\n")
    assert (stalled[0], stalled[2]) == (
        1,
        (
            f"llm-timeout: the Messages API at {url} stalled: no content for 1500 ms "
            "(stall_ms), after 0 content chunks; raise stall_ms (--stall-ms) for a model "
            "that pauses this long\n"
        ),
    )
    assert posted == ["/v1/messages"] * 3


async def test_timeout_ms_is_on_the_help_of_ask_and_vote() -> None:
    for command_name in ("ask", "vote"):
        code, out, _ = await run(clean_env(), command_name, "--help")
        assert code == 0
        assert "--timeout-ms TIMEOUT_MS" in out
        assert "(default 60000)" in " ".join(out.split())


# -- 6. a cut answer on the Responses wire --------------------------------------------


def _answered_with(output_tokens: int, *items: Item) -> Callable[[dict[str, Any]], Turn]:
    """A server answering ``completed``, as llama.cpp's does at the cap too."""
    usage = {"input_tokens": 9, "output_tokens": output_tokens, "total_tokens": 9 + output_tokens}
    return lambda _body: Turn(items=list(items), usage=usage)


@pytest.mark.parametrize("mode", ["complete", "stream"])
async def test_a_completed_turn_at_the_cap_reads_as_max_tokens(mode: str) -> None:
    text = Item("message", ["red, green", " and"])
    call = Item("function_call", ['{"term": ', '"Muffet"}'], name="kb_types_of", call_id="c1")
    cases = [  # output tokens, items, the neutral reason
        (5, [text], "max_tokens"),  # at the cap and no other word: cut
        (4, [text], "end_turn"),  # under it: whole
        (5, [call], "tool_use"),  # a whole call is a reason of its own
    ]
    for used, items, expected in cases:
        async with FakeResponses(script=_answered_with(used, *items)) as fake:
            request = Request(messages=[Message(role="user", content="Colours?")], max_tokens=5)
            async with openai_responses.provider(base_url=fake.base_url, model="m") as model:
                if mode == "complete":
                    answer = await model.complete(request)
                else:
                    async with contextlib.aclosing(model.stream(request)) as flow:
                        answer = [item async for item in flow][-1]
        assert isinstance(answer, Response)
        assert (answer.stop_reason, answer.vendor_stop_reason) == (expected, "completed")
        assert fake.bodies[-1]["max_output_tokens"] == 5


# -- 2. every example that offers tools says once when they are dropped ----------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def example(name: str, env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    """``python examples/NAME.py ARGV`` in a subprocess."""
    return await run_process(env, sys.executable, str(EXAMPLES / f"{name}.py"), *argv)


@pytest.mark.parametrize("name", ["quickstart", "agent_loop", "pydantic_ai_agent"])
async def test_an_example_says_once_that_the_server_drops_its_tools(name: str) -> None:
    async with FakeOpenAI(props=NO_TOOLS_PROPS) as chat:
        env = clean_env(VAELII_LLM_PROVIDER="openai", OPENAI_BASE_URL=chat.base_url)
        _, out, err = await example(name, env)
    said = [line + "\n" for line in err.splitlines() if line.startswith("no-tools: ")]
    assert said == [no_tools_line(chat.url)], err
    assert "answering: openai, a real model\n" in out
    assert chat.bodies  # the model still answered


async def test_the_web_example_says_at_start_that_the_server_drops_its_tools() -> None:
    async with FakeOpenAI(props=NO_TOOLS_PROPS) as chat:
        env = clean_env(VAELII_LLM_PROVIDER="openai", OPENAI_BASE_URL=chat.base_url)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(EXAMPLES / "web_backend.py"),
            "--port",
            "0",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 60)).decode() for _ in range(3)]
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.communicate(), 60)
    assert lines[1] == "answering: openai\n" or lines[1].startswith("answering: openai")
    assert lines[2] == no_tools_line(chat.url)


# -- 7. smaller words -----------------------------------------------------------------


async def test_a_blank_hosts_switch_says_to_unset_it() -> None:
    env = clean_env(VAELII_LLM_PROVIDER="openai", VAELII_OPENAI_HOSTS="")
    assert await run(env, "vote", "q") == (
        2,
        "",
        (
            "bad-switch: VAELII_OPENAI_HOSTS is blank: no hosts, so every vote would wait out its "
            "acquire timeout; unset VAELII_OPENAI_HOSTS to vote on the one configured host, or "
            "list hosts as host[*n],...\n"
        ),
    )


async def test_a_map_in_a_kb_file_is_named_as_a_map(tmp_path: Path) -> None:
    path = tmp_path / "facts.edn"
    path.write_text("(isa Rex Dog)\n{:a 1}\n")
    said = (
        f"malformed-context: {path}, form 2: found a map with no :context key (its keys: :a); "
        "a map here is a context form, {:context CxWell :sentences [(isa Muffet Spider)]}, "
        "and a sentence is a list, (isa Muffet Spider)\n"
    )
    env = clean_env(VAELII_LLM_PROVIDER="stub")
    assert await run(env, "ask", "q", "--kb", str(path)) == (1, "", said)
    assert await run(env, "call", "kb_sentex_count", "{}", "--kb", str(path)) == (1, "", said)


async def test_no_tools_under_no_kb_does_not_speak_of_the_kb() -> None:
    async with FakeOpenAI(props=NO_TOOLS_PROPS) as chat:
        env = clean_env(VAELII_LLM_PROVIDER="openai", OPENAI_BASE_URL=chat.base_url)
        code, out, err = await run(env, "ask", "q", "--no-kb", "--mcp", " ".join(MCP_TOOLS_SERVER))
    assert (code, err) == (0, no_tools_line(chat.url))
    assert "KB" not in err
    assert "without the tools it is offered" in err
    assert out.strip()


async def test_config_says_when_a_value_falls_back_to_the_default() -> None:
    for value, shown in [
        ("lots", "'lots' (not usable: the default 8192 is used)"),
        ("0", "'0' (not usable: the default 8192 is used)"),
        ("4096", "'4096'"),
    ]:
        code, out, _ = await run(clean_env(VAELII_OLLAMA_NUM_CTX=value), "config")
        assert code == 0
        [line] = [line for line in out.splitlines() if line.startswith("VAELII_OLLAMA_NUM_CTX ")]
        assert line == f"{'VAELII_OLLAMA_NUM_CTX':32} {shown}"


async def test_agent_loop_cut_at_max_tokens_says_what_to_do() -> None:
    async with stopping("max_tokens") as fake:
        code, out, err = await example("agent_loop", messages_env(fake.url))
    assert code == 1
    assert out.splitlines()[-1] == "stopped: max_tokens"
    assert err == (
        "the answer was cut at max_tokens (1024): raise max_tokens in the Request, "
        "or ask for a shorter answer\n"
    )


def test_the_quickstart_and_the_pydantic_ai_docstrings_name_the_openai_wires() -> None:
    for name in ("quickstart", "pydantic_ai_agent"):
        text = (EXAMPLES / f"{name}.py").read_text()
        doc = " ".join(text[: text.index('"""', 3)].split())
        for said in ("openai", "openai-responses", "OPENAI_BASE_URL", "Chat Completions"):
            assert said in doc, (name, said)


MODEL_EXAMPLES = [
    ("quickstart", ()),
    ("agent_loop", ()),
    ("pydantic_ai_agent", ()),
    ("structured_output", ()),
    ("vision", ()),
    ("vote", ("Is it?",)),
]


@pytest.mark.usefixtures("ctrl_c_reaches_children")
@pytest.mark.parametrize(("name", "argv"), MODEL_EXAMPLES, ids=[n for n, _ in MODEL_EXAMPLES])
async def test_ctrl_c_ends_an_example_waiting_on_its_model_in_one_line(
    name: str, argv: tuple[str, ...]
) -> None:
    posted: list[str] = []
    released = asyncio.Event()

    async def silent_turns(request: web.Request) -> web.Response:
        if request.method == "POST":
            posted.append(request.path)
            await released.wait()
        return web.json_response({"error": "no such route"}, status=404)

    async with serve(silent_turns) as url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(EXAMPLES / f"{name}.py"),
            *argv,
            env=messages_env(url),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        waited = asyncio.ensure_future(proc.wait())
        await until(lambda: bool(posted), waited)  # a turn is on the wire
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        released.set()
    assert (proc.returncode, err.decode()) == (130, "interrupted\n")


@pytest.mark.usefixtures("ctrl_c_reaches_children")
async def test_ctrl_c_ends_the_mcp_and_web_examples_in_one_line() -> None:
    served = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / "mcp_server.py"),
        "--stdio",
        env=clean_env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert served.stdin is not None
    assert served.stdout is not None
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    served.stdin.write((json.dumps(hello) + "\n").encode())
    await served.stdin.drain()
    assert b'"id":1' in await asyncio.wait_for(served.stdout.readline(), 60)  # it serves
    served.send_signal(signal.SIGINT)
    # mcp reads stdin on a thread its cancellation waits for: the host's EOF ends that read
    served.stdin.close()
    _, err = await asyncio.wait_for(served.communicate(), 60)
    assert (served.returncode, err.decode()) == (130, "interrupted\n")

    web_example = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / "web_backend.py"),
        "--port",
        "0",
        env=clean_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert web_example.stdout is not None
    first = await asyncio.wait_for(web_example.stdout.readline(), 60)
    assert first.startswith(b"listening on ")
    web_example.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(web_example.communicate(), 60)
    assert web_example.returncode == 130
    assert out.decode().splitlines()[-1] == "provider closed"
    assert "Traceback" not in err.decode()


# -- 8. where the code and the specification still differed --------------------------

CONTROL_NUM_CTX = "81\x0192"
SAID_NUM_CTX = (
    "VAELII_OLLAMA_NUM_CTX holds a control character (U+0001) at character 3; a switch's "
    "value is one line of printable text (value withheld)"
)


async def test_num_ctx_with_a_control_character_is_a_typed_refusal_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vaelii_llm.providers import ollama

    async with FakeOllama(script=echoer) as fake:
        request = Request(messages=[Message(role="user", content="hi")], max_tokens=8)
        async with ollama.provider(host=fake.url, model="llama3.2") as model:
            monkeypatch.setenv("VAELII_OLLAMA_NUM_CTX", CONTROL_NUM_CTX)  # read as a turn begins
            with pytest.raises(errors.LLMBadSwitch) as refused:
                await model.complete(request)
            with pytest.raises(errors.LLMError):  # what a caller's loop catches around a turn
                await model.complete(request)
    assert (refused.value.type, refused.value.switch) == ("llm-bad-switch", "VAELII_OLLAMA_NUM_CTX")
    assert str(refused.value) == SAID_NUM_CTX
    assert isinstance(refused.value, ValueError)


async def test_the_command_names_a_bad_num_ctx_before_any_io() -> None:
    async with FakeOllama(script=echoer) as fake:
        env = {**ollama_env(fake.url), "VAELII_OLLAMA_NUM_CTX": CONTROL_NUM_CTX}
        for argv in (["status"], ["ask", "q"], ["vote", "q"]):
            assert await run(env, *argv) == (2, "", f"bad-switch: {SAID_NUM_CTX}\n"), argv
    assert fake.user_agents == []  # nothing was sent: not even a probe
