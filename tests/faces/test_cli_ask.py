"""``vaelii-llm ask``, ``vote``'s progress line and ``warm``'s timing.

A loopback Ollama (tests/support/fake_ollama.py) plays a model that asks for
``kb_query`` and answers from the engine's result (tests/support/kb_model.py); the
command runs in a thread (or a subprocess) while the fake serves on the test's
loop.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from collections.abc import AsyncIterator
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.cli_runs import run_cli
from tests.support.fake_ollama import FakeOllama
from tests.support.kb_model import ANSWER
from tests.support.kb_model import GOAL
from tests.support.kb_model import NAMES
from tests.support.kb_model import QUESTION
from tests.support.kb_model import ollama_keeps_asking
from tests.support.kb_model import ollama_reader
from tests.support.kb_model import ollama_truncated
from tests.support.loopback import refused_url
from vaelii_llm import cli
from vaelii_llm.cli import _drawing as _cli_drawing

TOOLS_MODEL = "llama3.2"  # the fake's model with the tools capability


def ollama_env(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    for name in list(os.environ):
        if name.startswith(("VAELII_", "ANTHROPIC_", "OLLAMA_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "ollama")
    monkeypatch.setenv("VAELII_OLLAMA_HOST", url)
    monkeypatch.setenv("VAELII_OLLAMA_MODEL", TOOLS_MODEL)


@pytest.fixture
async def reader() -> AsyncIterator[FakeOllama]:
    server = await FakeOllama(script=ollama_reader).start()
    try:
        yield server
    finally:
        await server.stop()


async def test_ask_prints_the_call_then_the_answer_from_the_engine_result(
    reader: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's must-show, as an installed command: a real subprocess."""
    ollama_env(monkeypatch, reader.url)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vaelii_llm.cli",
        "ask",
        QUESTION,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = out.decode().splitlines()
    assert (proc.returncode, err.decode()) == (0, "")
    assert lines[0] == f'-> kb_query {{"goal": "{GOAL}"}}'
    assert lines[1].startswith("   ok: [{:bindings {?who Muffet}")
    assert lines[2:] == [ANSWER]
    tool_message = reader.bodies[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert all(f"?who {name}" in tool_message["content"] for name in NAMES)
    assert reader.bodies[1]["stream"] is True


async def test_ask_streams_the_answer_as_it_arrives(
    reader: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each word is written (and flushed) as its delta arrives, not once at the end."""
    ollama_env(monkeypatch, reader.url)
    writes: list[str] = []

    class Recorder(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

    monkeypatch.setattr(sys, "stdout", Recorder())
    code = await asyncio.to_thread(cli.main, ["ask", QUESTION])
    assert code == 0
    words = writes[writes.index("   ok: " + writes[1][7:]) + 1 :]
    assert "".join(words).strip() == ANSWER
    assert len([w for w in words if w.strip()]) == len(ANSWER.split())


async def test_ask_json_is_one_object_with_answer_calls_stop_reason_and_usage(
    reader: FakeOllama, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ollama_env(monkeypatch, reader.url)
    code, out, err = await run_cli(capsys, "ask", QUESTION, "--json")
    assert (code, err) == (0, "")
    [line] = out.splitlines()
    got = json.loads(line)
    assert got["answer"] == ANSWER
    assert (got["stop_reason"], got["stopped"], got["turns"]) == ("end_turn", "answered", 2)
    [call] = got["tool_calls"]
    assert (call["name"], call["input"], call["ok"]) == ("kb_query", {"goal": GOAL}, True)
    assert "?who ItsyBitsy" in call["result"]
    assert got["usage"]["input_tokens"] == 2 * 26  # the fake counts 26 per turn
    assert got["usage"]["prompt_eval_count"] == 2 * 26


async def test_ask_reads_the_kb_file_it_is_given(
    reader: FakeOllama,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    ollama_env(monkeypatch, reader.url)
    path = tmp_path / "tiny.edn"
    path.write_text("(in-context CxWell)\n(afraidOf MissMuffet Boris)\n")
    code, out, _ = await run_cli(capsys, "ask", QUESTION, "--kb", str(path), "--json")
    assert code == 0
    assert json.loads(out)["answer"] == "Miss Muffet is afraid of Boris."


def test_ask_with_nothing_configured_says_so_in_one_line_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VAELII_LLM_PROVIDER", raising=False)
    code = cli.main(["ask", QUESTION])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith("stub-only: only the stub can answer: nothing is configured")
    assert "VAELII_LLM_PROVIDER" in line
    assert "vaelii-llm status" in line


@pytest.mark.parametrize("traced", [False, True], ids=["plain", "traced"])
async def test_ask_on_a_backend_that_fell_back_says_so_in_one_line_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], traced: bool
) -> None:
    ollama_env(monkeypatch, refused_url())
    if traced:  # a traced fallback is still the stub
        from opentelemetry.sdk.trace import TracerProvider

        from vaelii_llm import telemetry

        telemetry.enable(TracerProvider())
    try:
        code, out, err = await run_cli(capsys, "ask", QUESTION)
    finally:
        if traced:
            from vaelii_llm import telemetry

            telemetry.disable()
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith("llm-unreachable: Ollama at ")


@pytest.mark.parametrize(
    ("script", "argv", "code", "message"),
    [
        (ollama_truncated, (), 4, "truncated: the answer ran into max_tokens"),
        (
            ollama_keeps_asking,
            ("--max-turns", "2"),
            5,
            "turn limit: the model was still asking for tools after 2 turns",
        ),
        (
            ollama_keeps_asking,
            ("--max-tool-calls", "1"),
            5,
            "budget: max_tool_calls reached after 2 turns (raise --max-tool-calls)",
        ),
    ],
    ids=["max_tokens", "turn-limit", "tool-call-budget"],
)
async def test_ask_reports_a_truncation_and_a_turn_limit_with_their_own_codes(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    script: Callable[[dict[str, Any]], list[dict[str, Any]]],
    argv: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    server = await FakeOllama(script=script).start()
    try:
        ollama_env(monkeypatch, server.url)
        got, _, err = await run_cli(capsys, "ask", QUESTION, *argv)
    finally:
        await server.stop()
    assert got == code
    assert err.splitlines()[-1].startswith(message)


async def test_ask_reports_a_refusal_with_its_own_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Messages API is the backend that refuses: its loopback fake streams a refusal."""
    import random

    from tests.support.anthropic_fake import FakeMessagesAPI
    from tests.support.anthropic_fake import generate
    from tests.support.loopback import serve

    fake = FakeMessagesAPI(
        transcript=generate(random.Random(7), kinds=["text"], stop_reason="refusal", unknown=False),
        caching=True,  # usage counted from the prompt, the tools in it, as the API counts
    )
    async with serve(fake.app()) as url:
        for name in list(os.environ):
            if name.startswith(("VAELII_", "ANTHROPIC_")):
                monkeypatch.delenv(name)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        code, out, err = await run_cli(capsys, "ask", QUESTION, "--provider", "anthropic", "--json")
    assert (code, err.splitlines()[:-1]) == (3, [])
    assert json.loads(out)["stopped"] == "refusal"
    assert err.splitlines()[-1] == "refused: the model declined to answer"


def test_ask_help_documents_every_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["ask", "--help"])
    out = capsys.readouterr().out
    for code in (
        "0    done: an answer",
        "2    the configured backend cannot answer",
        "3    `ask`: the model refused",
        "4    `ask`: the answer was truncated",
        "5    `ask`: the turn limit",
    ):
        assert code in out
    assert "--kb" in out


def test_ask_refuses_a_turn_limit_below_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "ollama")
    monkeypatch.setenv("VAELII_OLLAMA_HOST", "http://127.0.0.1:9")
    with pytest.raises(SystemExit) as exited:
        cli.main(["ask", QUESTION, "--max-turns", "0"])
    assert exited.value.code == 2
    assert "--max-turns takes at least 1, got 0" in capsys.readouterr().err


# -- vote and warm ------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_vote_draws_no_progress_when_stderr_is_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.fake_ollama import chunk
    from tests.support.fake_ollama import final

    server = await FakeOllama(script=lambda body: [chunk("Yes."), final()]).start()
    try:
        ollama_env(monkeypatch, server.url)
        code = await asyncio.to_thread(cli.main, ["vote", "q"])
    finally:
        await server.stop()
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out == "verdict: yes  tally: yes 3, no 0  failed: 0 of 3\n"


async def test_vote_over_a_loopback_host_counts_its_answers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.fake_ollama import chunk
    from tests.support.fake_ollama import final

    server = await FakeOllama(
        script=lambda body: [chunk("No, it is an arachnid."), final()]
    ).start()
    try:
        ollama_env(monkeypatch, server.url)
        monkeypatch.setenv("VAELII_OLLAMA_HOSTS", f"{server.url}*2")
        monkeypatch.setattr(sys, "stderr", Terminal())
        code = await asyncio.to_thread(cli.main, ["vote", "Is a spider an insect?"])
        drawn = sys.stderr.getvalue()
    finally:
        await server.stop()
    assert code == 0
    assert [part for part in drawn.split("\r") if part] == [
        "votes 1/3: yes 0, no 1, failed 0",
        "votes 2/3: yes 0, no 2, failed 0",
        "votes 3/3: yes 0, no 3, failed 0\n",
    ]
    assert capsys.readouterr().out.splitlines()[-1] == (
        "verdict: no  tally: yes 0, no 3  failed: 0 of 3"
    )


async def test_warm_reports_how_long_the_load_took(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], reader: FakeOllama
) -> None:
    ollama_env(monkeypatch, reader.url)
    monkeypatch.setenv("VAELII_OLLAMA_GENERATION_MODEL", TOOLS_MODEL)
    code, out, _ = await run_cli(capsys, "warm")
    assert code == 0
    line = out.strip()
    assert line.startswith("resident: the load took ")
    seconds = float(line.split("took ")[1].split(" s")[0])
    assert 0 <= seconds < 60
    assert line.endswith("(the host spent 0.00 s loading the model)")  # 1334875 ns


async def test_text_before_a_tool_call_ends_its_line_before_the_call_is_printed() -> None:
    from vaelii_llm import agent
    from vaelii_llm import kb
    from vaelii_llm import tools
    from vaelii_llm.providers import stub

    out = io.StringIO()
    printer = _cli_drawing.AskPrinter(out)
    model = stub.provider(
        script=[
            {"text": "Let me look.", "tool": "kb_types_of", "input": {"term": "Muffet"}},
            "A spider.",
        ]
    )
    await agent.run(model, tools.Toolset(kb.sample()), "q", deltas=True, on_event=printer)
    printer.end()
    lines = out.getvalue().splitlines()
    assert lines[0] == "Let me look."
    assert lines[1] == '-> kb_types_of {"term": "Muffet"}'
    assert lines[2].startswith("   ok: [Animal Arachnid")
    assert lines[3:] == ["A spider."]
    assert out.getvalue().endswith("\n")


async def test_ask_stall_ms_bounds_each_turn_of_the_loop(
    reader: FakeOllama, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--stall-ms`` becomes the first turn's ``Request.stall_ms`` (#51); a
    stall is a typed failure, exit 1, named as such."""
    from vaelii_llm import Request
    from vaelii_llm import agent
    from vaelii_llm.errors import LLMTimeout

    asked: list[object] = []

    async def stalled(_model: object, question: object, **_options: object) -> object:
        asked.append(question)
        raise LLMTimeout("Ollama", 300, "stall", chunks=2)

    ollama_env(monkeypatch, reader.url)
    monkeypatch.setattr(agent, "run", stalled)
    code, _out, err = await run_cli(capsys, "ask", QUESTION, "--stall-ms", "300")
    [first] = asked
    assert isinstance(first, Request)
    assert first.stall_ms == 300
    assert first.tools  # the loop's first turn, tools and all
    assert code == 1
    assert "stalled: no content for 300 ms" in err
    asked.clear()
    await run_cli(capsys, "ask", QUESTION)
    assert asked == [QUESTION]
    with pytest.raises(SystemExit):
        cli.main(["ask", QUESTION, "--stall-ms", "0"])
    assert "--stall-ms takes at least 1, got 0" in capsys.readouterr().err
    # (#58) 401 digits were a traceback (OverflowError): refused in words, exit 2
    with pytest.raises(SystemExit) as exited:
        cli.main(["ask", QUESTION, "--stall-ms", "9" * 401])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--stall-ms takes at most 604800000, got 99999" in err
    assert "Traceback" not in err
    assert len(err.splitlines()[-1]) < 200
