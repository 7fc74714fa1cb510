"""The command on the Messages API wire and with bad switches (issue #48), run as the
installed ``vaelii-llm`` in a subprocess: the Messages API wire answers
``status``, ``ask`` and ``vote`` as the other backends do, a bad switch value
is named before any I/O, and a subcommand's stray argument shows that
subcommand's usage. Loopback fakes (tests/support/anthropic_fake.py) and ports nobody
listens on stand in for the user's machine.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import generate
from tests.support.cli_runs import NO_TOOLS_PROPS
from tests.support.cli_runs import clean_env
from tests.support.cli_runs import command
from tests.support.cli_runs import no_tools_line
from tests.support.cli_runs import run_command as run
from tests.support.loopback import refused_url
from tests.support.loopback import serve

SECRET = "sk-ant-round-three-SECRET"


async def test_a_dead_messages_api_host_reads_as_one_that_cannot_answer() -> None:
    url = refused_url()
    env = clean_env(
        VAELII_LLM_PROVIDER="anthropic", ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY=SECRET
    )
    code, out, err = await run(env, "status")
    lines = out.splitlines()
    assert (code, err) == (2, "")
    assert lines[:2] == ["configured: anthropic", "answering:  stub"]
    assert lines[2].startswith(
        f"why:        llm-unreachable: the Messages API at {url} is unreachable"
    )
    assert lines[2].endswith(
        "start the server there or point ANTHROPIC_BASE_URL at one that serves /v1/messages"
    )
    assert lines[3:] == [f"base URL:   {url}", "model:      claude-opus-5-5"]
    code, out, err = await run(env, "ask", "Who is afraid of spiders?")
    assert (code, out) == (2, "")  # as Ollama and the Chat Completions wire: only the stub could
    assert err.startswith(f"llm-unreachable: the Messages API at {url} is unreachable")
    code, out, err = await run(env, "vote", "Is a spider an insect?")
    assert code == 2  # as ask: every turn failed, and the probe says the host cannot answer
    assert out == "verdict: abstain  tally: yes 0, no 0  failed: 3 of 3\n"
    assert err.startswith(f"llm-unreachable: the Messages API at {url} is unreachable")
    assert SECRET not in out + err


async def test_status_on_a_live_messages_api_host_shows_its_base_url_and_model() -> None:
    async with serve(FakeMessagesAPI().app()) as url:
        env = clean_env(
            VAELII_LLM_PROVIDER="anthropic", ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY=SECRET
        )
        code, out, err = await run(env, "status")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "configured: anthropic",
        "answering:  anthropic",
        f"base URL:   {url}",
        "model:      claude-opus-5-5",
    ]


# -- 2. a vote on the Messages API wire -----------------------------------------------


def yes_transcript() -> FakeMessagesAPI:
    transcript = generate(random.Random(48), kinds=["text"], stop_reason="end_turn")
    transcript.message["content"] = [{"type": "text", "text": "Yes, by this fake."}]
    return FakeMessagesAPI(transcript=transcript)


async def test_vote_runs_on_the_messages_api_host() -> None:
    fake = yes_transcript()
    async with serve(fake.app()) as url:
        env = clean_env(
            VAELII_LLM_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=url,
            ANTHROPIC_API_KEY=SECRET,
            VAELII_ANTHROPIC_MODEL="smollm2",  # a local server's own model (item 8)
        )
        code, out, err = await run(env, "vote", "Is this a test?", "--votes", "3")
    assert (code, out, err) == (0, "verdict: yes  tally: yes 3, no 0  failed: 0 of 3\n", "")
    assert len(fake.seen) == 3
    assert {seen.headers["x-api-key"] for seen in fake.seen} == {SECRET}
    assert {seen.body["model"] for seen in fake.seen} == {"smollm2"}


async def test_vote_help_says_it_runs_on_every_model_backend() -> None:
    code, out, _ = await run(clean_env(), "vote", "--help")
    assert code == 0
    assert "It runs on every model backend" in out
    assert "the Messages API's ANTHROPIC_BASE_URL too" in out
    assert "not one with hosts" not in out


# -- 3. a bad switch value is named, exits 2, before any I/O ---------------------------


async def test_a_bad_switch_value_is_named_and_nothing_is_sent() -> None:
    hits: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"data": []})

    async with serve(anything) as url:
        host_port = url.removeprefix("http://")
        cases = [
            (
                {"VAELII_LLM_PROVIDER": "nonsense"},
                (
                    "bad-switch: VAELII_LLM_PROVIDER names no backend (it is 'nonsense'); "
                    "set it to anthropic, ollama, openai, openai-responses or stub"
                ),
            ),
            (
                {"VAELII_LLM_PROVIDER": "openai", "OPENAI_BASE_URL": "htp:/bad url"},
                (
                    "bad-switch: OPENAI_BASE_URL is not a URL a client can reach: its scheme is "
                    "'htp', not http or https; set it to http(s)://HOST[:PORT][/PATH]"
                ),
            ),
            (
                {
                    "VAELII_LLM_PROVIDER": "openai",
                    "OPENAI_BASE_URL": f"http://me:{SECRET}@{host_port}/v 1",
                },
                (
                    "bad-switch: OPENAI_BASE_URL is not a URL a client can reach: it holds "
                    "whitespace; set it to http(s)://HOST[:PORT][/PATH]"
                ),
            ),
            (
                {"VAELII_LLM_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": f"{url}:99999"},
                (
                    "bad-switch: ANTHROPIC_BASE_URL is not a URL a client can reach: its host or "
                    "port does not read (a port is a whole number up to 65535); "
                    "set it to http(s)://HOST[:PORT][/PATH]"
                ),
            ),
            (
                {"VAELII_LLM_PROVIDER": "ollama", "VAELII_OLLAMA_HOST": "ftp://" + host_port},
                (
                    "bad-switch: VAELII_OLLAMA_HOST is not a URL a client can reach: its scheme "
                    "is 'ftp', not http or https; set it to http(s)://HOST[:PORT][/PATH]"
                ),
            ),
        ]
        for env, line in cases:
            for argv in (["status"], ["ask", "q"], ["vote", "q"]):
                code, out, err = await run(clean_env(**env), *argv)
                assert (code, out, err) == (2, "", line + "\n"), (env, argv)
        code, out, err = await run(clean_env(), "ask", "q", "--provider", "Bogus")
        assert (code, err) == (
            2,
            (
                "bad-switch: --provider names no backend (it is 'bogus'); "
                "set it to anthropic, ollama, openai, openai-responses or stub\n"
            ),
        )
        code, _, err = await run(
            clean_env(VAELII_LLM_PROVIDER="openai", VAELII_OPENAI_HOSTS=f"{url}*x"), "vote", "q"
        )
        assert (code, err) == (
            2,
            (
                "bad-switch: VAELII_OPENAI_HOSTS will not read: a host's *n must be a whole number "
                f"of calls: '{url}*x'\n"
            ),
        )
    assert hits == []  # refused before any probe or turn


async def test_a_library_caller_is_told_the_variable_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from vaelii_llm import providers

    monkeypatch.setenv("VAELII_LLM_PROVIDER", "nonsense")
    with pytest.raises(ValueError, match=r"^VAELII_LLM_PROVIDER names no backend"):
        await providers.provider()


# -- 4. a subcommand's stray argument shows that subcommand's usage --------------------


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["ask", "--bogus", "x"], "usage: vaelii-llm ask "),
        (["status", "extra"], "usage: vaelii-llm status "),
        (["call", "kb_query", "{}", "--nope"], "usage: vaelii-llm call "),
    ],
)
async def test_a_stray_argument_shows_the_subcommands_usage(argv: list[str], usage: str) -> None:
    code, out, err = await run(clean_env(), *argv)
    assert (code, out) == (2, "")
    assert err.startswith(usage), err
    name = argv[0]
    assert err.splitlines()[-1].startswith(f"vaelii-llm {name}: error: unrecognized arguments: ")


# -- 9. small things: an empty --kb file, a remote MCP server that is not there -------


@pytest.mark.parametrize("text", ["", "  \n;; only a comment\n"])
async def test_a_kb_file_holding_no_sentence_is_refused(tmp_path: Path, text: str) -> None:
    empty = tmp_path / "empty.edn"
    empty.write_text(text)
    for argv in (
        ["call", "kb_term_count", "{}", "--kb", str(empty)],
        ["ask", "q", "--provider", "stub", "--kb", str(empty)],
    ):
        code, out, err = await run(clean_env(), *argv)
        assert (code, out) == (1, ""), argv
        assert err == (
            f"bad-kb: {empty} holds no sentence; name an EDN file of sentences, "
            "e.g. (isa Muffet Spider)\n"
        )


async def test_a_remote_mcp_server_that_is_not_there_is_not_reached_not_started() -> None:
    url = refused_url() + "/mcp"
    code, out, err = await run(clean_env(), "tools", "--mcp-http", url)
    assert (code, out) == (1, "")
    where = url.removeprefix("http://").removesuffix("/mcp")
    assert err.startswith(f"mcp-server: the MCP server '{where}' could not be reached: ")
    assert err.endswith("; is it running at that URL?\n")
    assert "started" not in err


# -- 5. tools a far end drops are never dropped silently -------------------------------


async def test_a_server_whose_template_renders_no_tools_is_said_once_before_the_turn() -> None:
    from tests.support.fake_openai import FakeOpenAI

    chat = await FakeOpenAI(props=NO_TOOLS_PROPS).start()
    messages = yes_transcript()
    messages.props = NO_TOOLS_PROPS
    try:
        code, out, err = await run(
            clean_env(VAELII_LLM_PROVIDER="openai", OPENAI_BASE_URL=chat.base_url), "ask", "q"
        )
        assert (code, err) == (0, no_tools_line(chat.url)), err  # once: no tools-ignored line after
        assert out.strip()  # the model still answered
        assert len(chat.bodies) == 1
        async with serve(messages.app()) as url:
            env = clean_env(
                VAELII_LLM_PROVIDER="anthropic", ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY=SECRET
            )
            code, out, err = await run(env, "ask", "q")
        assert (code, err) == (0, no_tools_line(url)), err
        assert out.strip()
        assert len(messages.seen) == 1
    finally:
        await chat.stop()


async def test_an_answer_whose_input_tokens_could_not_hold_the_tools_says_so_once() -> None:
    """No /props here (a server that does not say): the usage shows it, as
    llama-server's 74 input tokens for a 29 KB request did."""
    from tests.support.fake_openai import FakeOpenAI

    chat = await FakeOpenAI().start()  # every turn reads 31 prompt tokens, tools or not
    try:
        env = clean_env(VAELII_LLM_PROVIDER="openai", OPENAI_BASE_URL=chat.base_url)
        code, out, err = await run(env, "ask", "Who is afraid of spiders?")
        assert (code, out) == (0, "Hello! How are you today?\n")
        [line] = err.splitlines()
        assert line.startswith("tools-ignored: the far end ignored the ")
        assert "tool(s) it was offered: it read 31 input tokens, where the tools alone" in line
        assert line.endswith("Ollama: a model with the tools capability)")
        code, out, err = await run(env, "ask", "Who is afraid of spiders?", "--json")
        assert code == 0
        assert err.splitlines() == [line]  # said with --json too, on stderr
        assert json.loads(out)["answer"] == "Hello! How are you today?"
        assert len(chat.bodies) == 2
        assert all(len(body["tools"]) > 20 for body in chat.bodies)
    finally:
        await chat.stop()


# -- 6. a long wait in `ask` shows on a terminal ---------------------------------------


async def test_ask_shows_how_long_it_has_waited_on_a_terminal_and_erases_it() -> None:
    from tests.support.fake_ollama import FakeOllama
    from tests.support.fake_ollama import chunk
    from tests.support.fake_ollama import final
    from tests.support.terminal import run_on_terminal

    server = await FakeOllama(
        script=lambda body: [chunk(""), chunk("Nobody is."), final()],
        chunk_delay=1.5,  # a busy server: its first word comes late
    ).start()
    try:
        env = clean_env(
            VAELII_LLM_PROVIDER="ollama",
            VAELII_OLLAMA_HOST=server.url,
            VAELII_OLLAMA_MODEL="llama3.2",
        )
        code, out, shown = await run_on_terminal([*command(), "ask", "q"], env)
        assert (code, out) == (0, "Nobody is.\n"), shown
        drawn = re.findall(r"\r\x1b\[K([^\r]*)", shown)
        assert drawn[0] == "waiting for the model: 1 s", shown
        assert drawn[-1] == ""  # erased before the answer printed
        piped = await run(env, "ask", "q")
        assert piped == (0, "Nobody is.\n", "")  # not a terminal: nothing drawn
    finally:
        await server.stop()
