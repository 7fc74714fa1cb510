"""The command as a new user meets it (issue #25): every failure names what
failed, where, and the next step, in one line, with the documented status.

Each test is one numbered item of the issue; loopback servers (tests/support/fake_ollama.py)
and ports nobody listens on stand in for the user's machine.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support.fake_ollama import FakeOllama
from tests.support.kb_model import QUESTION
from tests.support.kb_model import ollama_reader
from tests.support.loopback import refused_url
from vaelii_llm import cli
from vaelii_llm import kb
from vaelii_llm import tools


def clear_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for name in list(os.environ):
        if name.startswith(("VAELII_", "ANTHROPIC_", "OLLAMA_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(cli.main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
async def reader() -> AsyncIterator[FakeOllama]:
    server = await FakeOllama(script=ollama_reader).start()
    try:
        yield server
    finally:
        await server.stop()


# -- 1. a backend that cannot answer says why, where, and what to do -------------------


async def test_ask_on_a_dead_ollama_names_the_host_the_cause_and_the_next_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = refused_url()
    clear_env(monkeypatch, VAELII_LLM_PROVIDER="ollama", VAELII_OLLAMA_HOST=url)
    code, out, err = await run_cli(capsys, "ask", QUESTION)
    line = one_line(err)
    assert (code, out) == (2, "")
    assert line.startswith(f"llm-unreachable: Ollama at {url} is unreachable: could not connect")
    assert line.endswith("start Ollama there (`ollama serve`) or point VAELII_OLLAMA_HOST at one")
    assert "set VAELII_LLM_PROVIDER=ollama" not in line  # it is set: never ask for it again


async def test_status_says_why_the_stub_answers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = refused_url()
    clear_env(monkeypatch, VAELII_LLM_PROVIDER="ollama", VAELII_OLLAMA_HOST=url)
    code, out, _ = await run_cli(capsys, "status")
    assert code == 2
    assert out.splitlines()[:3] == [
        "configured: ollama",
        "answering:  stub",
        out.splitlines()[2],
    ]
    assert out.splitlines()[2].startswith(f"why:        llm-unreachable: Ollama at {url}")


def test_status_exits_2_when_the_configured_backend_cannot_answer() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAELII_", "OPENAI_"))}
    url = refused_url()
    env.update(VAELII_LLM_PROVIDER="openai", OPENAI_BASE_URL=f"{url}/v1")
    done = subprocess.run(
        [sys.executable, "-m", "vaelii_llm.cli", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2, done
    answering, why = done.stdout.splitlines()[1:3]
    assert answering == "answering:  stub"
    assert why.startswith(f"why:        llm-unreachable: the Chat Completions API at {url}/v1")
    assert "Ollama" not in done.stdout
    help_page = subprocess.run(
        [sys.executable, "-m", "vaelii_llm.cli", "status", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "exit status (every command):" in help_page.stdout


async def test_ask_with_a_credential_holding_a_newline_names_the_header_not_the_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clear_env(monkeypatch, VAELII_LLM_PROVIDER="anthropic", ANTHROPIC_API_KEY="sk-ab\ncd-secret")
    code, out, err = await run_cli(capsys, "ask", QUESTION)
    line = one_line(err)
    assert (code, out) == (2, "")
    assert line.startswith(
        "llm-bad-credential: the credential for the x-api-key header holds a control character"
    )
    assert "a pasted newline?" in line
    assert "secret" not in line


async def test_a_registered_backend_without_a_reason_still_gets_a_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A kind whose module has no ``unavailable_reason`` says its probe said no."""
    from vaelii_llm import providers

    (tmp_path / "frontdoor_never.py").write_text(
        "async def available():\n    return False\n\ndef provider():\n    raise AssertionError\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    providers.register(providers.Backend("frontdoor-never", "frontdoor_never"))
    assert await providers.unavailable_reason("frontdoor-never") == (
        "frontdoor-never says it cannot answer now (its available() probe said no)"
    )
    assert await providers.unavailable_reason("stub") is None


# -- 2. the tools capability is checked before tools are sent ---------------------------


async def test_ask_on_a_model_without_tools_names_models_that_have_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], reader: FakeOllama
) -> None:
    clear_env(monkeypatch, VAELII_LLM_PROVIDER="ollama", VAELII_OLLAMA_HOST=reader.url)
    code, out, err = await run_cli(capsys, "ask", QUESTION)  # the default model, phi4:14b
    assert (code, out) == (2, "")
    assert one_line(err) == (
        "no-tools: the Ollama model phi4:14b cannot call tools (it can: completion); "
        "set VAELII_OLLAMA_MODEL to one that can, e.g. llama3.2, qwen3 or mistral-nemo "
        "(`ollama pull llama3.2`)"
    )
    assert reader.bodies == []  # no chat turn was sent


async def test_ask_on_a_model_not_pulled_says_ollama_pull(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], reader: FakeOllama
) -> None:
    clear_env(
        monkeypatch,
        VAELII_LLM_PROVIDER="ollama",
        VAELII_OLLAMA_HOST=reader.url,
        VAELII_OLLAMA_MODEL="llama9:70b",
    )
    code, out, err = await run_cli(capsys, "ask", QUESTION)
    assert (code, out) == (2, "")
    assert one_line(err) == (
        f"no-tools: the Ollama at {reader.url} has no model 'llama9:70b': run "
        "`ollama pull llama9:70b` there, or set VAELII_OLLAMA_MODEL to one it has (`ollama list`)"
    )
    code, out, _ = await run_cli(capsys, "status")
    assert code == 0
    assert out.splitlines()[-1] == (
        f"missing:    the Ollama at {reader.url} has no model 'llama9:70b': run "
        "`ollama pull llama9:70b` there, or set VAELII_OLLAMA_MODEL to one it has (`ollama list`)"
    )


# -- 4. mcp --http takes a bare port; a port in use is one line -------------------------


def test_mcp_http_reads_a_bare_number_as_a_port() -> None:
    from vaelii_llm.integrations import mcp as mcp_face

    assert mcp_face.parse_address("18501") == ("127.0.0.1", 18501)


def test_mcp_on_a_port_in_use_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = cli.main(["mcp", "--http", str(port)])
    _, err = capsys.readouterr()
    assert code == 1
    line = one_line(err)
    assert line.startswith(f"cannot-listen: cannot listen on 127.0.0.1:{port}: ")
    assert line.endswith("name a free port (--http HOST:PORT, or --http :0 for any)")


# -- 6. a bad --kb file: the file, the line, and what is wrong --------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b"(isa Muffet Spider)\n(isa ItsyBitsy Spider\n",
            "is not readable EDN: line 2, column 1: the '(' opened here is never closed",
        ),
        (b"(isa Muffet Spider))\n", "is not readable EDN: line 1, column 20: ')' closes nothing"),
        (
            b"(isa Muffet [Spider)\n",
            "is not readable EDN: line 1, column 20: ')' closes the '[' at line 1, column 13",
        ),
        (
            b'; a ( in a comment\n(isa Muffet "Spider)\n',
            "is not readable EDN: line 2, column 13: a string opened here is never closed",
        ),
        (
            b"(isa Muffet Spider)\n(isa Fang \xff)\n",
            "is not UTF-8 text: byte 0xff at line 2, column 11; save it as UTF-8",
        ),
    ],
    ids=["unclosed", "stray-close", "mismatched", "unclosed-string", "not-utf8"],
)
def test_a_bad_kb_file_is_one_line_with_the_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "kb.edn"
    path.write_bytes(content)
    code = cli.main(["call", "kb_types_of", '{"term": "Muffet"}', "--kb", str(path)])
    _, err = capsys.readouterr()
    assert code == 1  # the scripts guide: a bad --kb file is 1
    assert one_line(err) == f"malformed-sentence: {path} {message}"


# -- 7. the EDN lexer's table stays out of an application's INFO log --------------------


def test_reading_edn_logs_nothing_at_info() -> None:
    script = (
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "from vaelii_llm import kb, tools\n"
        "kb.load_edn('(isa Muffet Spider)')\n"
        "from vaelii_llm import _edn; _edn.read('(isa Muffet Spider)')\n"
        "print('read')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert (done.stdout, done.stderr) == ("read\n", "")


def test_a_caller_who_asks_for_the_lexer_log_gets_it(caplog: pytest.LogCaptureFixture) -> None:
    lexer = logging.getLogger("edn_format.edn_lex")
    level = lexer.level
    lexer.setLevel(logging.INFO)
    try:
        with caplog.at_level(logging.INFO, logger="edn_format.edn_lex"):
            kb.load_edn("(isa Muffet Spider)")
    finally:
        lexer.setLevel(level)
    assert any(r.name == "edn_format.edn_lex" for r in caplog.records)


# -- 8. vote: a dead host leads with its cause and exits 2, as ask (#60) ---------------


async def test_vote_on_a_dead_host_says_why_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = refused_url()
    clear_env(monkeypatch, VAELII_LLM_PROVIDER="ollama", VAELII_OLLAMA_HOSTS=url)
    code, out, err = await run_cli(capsys, "vote", "Is a spider an insect?")
    assert code == 2
    assert out == "verdict: abstain  tally: yes 0, no 0  failed: 3 of 3\n"
    line = one_line(err)
    assert line.startswith(f"llm-unreachable: Ollama at {url}")
    assert line.endswith("start Ollama there (`ollama serve`) or point VAELII_OLLAMA_HOSTS at one")


async def test_vote_on_a_model_not_pulled_says_ollama_pull(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], reader: FakeOllama
) -> None:
    clear_env(
        monkeypatch,
        VAELII_LLM_PROVIDER="ollama",
        VAELII_OLLAMA_HOSTS=reader.url,
        VAELII_OLLAMA_MODEL="nothere",
    )
    code, _, err = await run_cli(capsys, "vote", "Is a spider an insect?")
    assert code == 2
    assert one_line(err) == (
        f"cannot-answer: the Ollama at {reader.url} has no model 'nothere': "
        "run `ollama pull nothere` there, or set VAELII_OLLAMA_MODEL to one it has (`ollama list`)"
    )


def test_vote_whose_probes_pass_prints_the_first_turns_own_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def run() -> tuple[int, str]:
        server = await FakeOllama(mode="bad_gateway").start()
        try:
            clear_env(monkeypatch, VAELII_LLM_PROVIDER="ollama", VAELII_OLLAMA_HOSTS=server.url)
            code = await asyncio.to_thread(cli.main, ["vote", "Is a spider an insect?"])
        finally:
            await server.stop()
        return code, server.url

    code, url = asyncio.run(run())
    line = one_line(capsys.readouterr().err)
    assert code == 1
    prefix = "vote-failed: every turn failed: "
    assert line.startswith(prefix)
    kind, _, said = line.removeprefix(prefix).partition(": ")
    assert kind.startswith("llm-")
    assert url in said
    assert "502" in said
    assert "probes" not in line


def test_vote_help_names_no_one_backend() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "vaelii_llm.cli", "vote", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "Ollama" not in done.stdout
    assert "the first turn's own error does (exit 1)" in done.stdout


def test_vote_with_nothing_configured_exits_2_as_ask_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clear_env(monkeypatch)
    assert cli.main(["vote", "q"]) == 2
    assert cli.main(["ask", "q"]) == 2
    vote_line, ask_line = capsys.readouterr().err.splitlines()
    assert vote_line.startswith("stub-only: only the stub can answer: ")
    assert ask_line.startswith("stub-only: only the stub can answer: ")


# -- 9. kb_query's schema admits exactly the shapes the dispatcher takes ---------------

SAMPLE_VALUE = {"integer": 1, "array": ["(isa Muffet Spider)"], "object": {}, "string": "Muffet"}


SHAPE_REFUSALS = ("missing-argument", "unexpected-argument")


async def test_every_schema_admits_exactly_the_shapes_the_tool_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every combination of a tool's arguments: the published schema admits it
    exactly when the dispatcher takes it (a real call, refused or not by shape)."""
    assert await asyncio.to_thread(cli.main, ["tools", "--json"]) == 0
    published = {s["name"]: s["input_schema"] for s in json.loads(capsys.readouterr().out)}
    toolset = tools.Toolset(kb.sample())
    checked = 0
    for name, schema in published.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft7Validator.check_schema(schema)
        assert not {"anyOf", "oneOf", "allOf"} & set(schema)  # the Messages API refuses them
        validator = jsonschema.Draft202012Validator(schema)
        names = list(schema["properties"])
        for size in range(len(names) + 1):
            for given in itertools.combinations(names, size):
                sample = {
                    n: SAMPLE_VALUE[schema["properties"][n].get("type", "string")] for n in given
                }
                result = await toolset.call(name, sample)
                refused = result.text.startswith(SHAPE_REFUSALS)
                assert validator.is_valid(sample) == (not refused), (name, given, result.text)
                checked += 1
    assert checked > 100
    query = published["kb_query"]
    assert not jsonschema.Draft202012Validator(query).is_valid(
        {"goal": "(afraidOf MissMuffet ?who)", "opts": {"max-depth": 3}}
    )


def test_the_schema_list_is_byte_stable(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tools", "--json"]) == 0
    first = capsys.readouterr().out
    assert cli.main(["tools", "--json"]) == 0
    assert capsys.readouterr().out == first
    query = next(s for s in json.loads(first) if s["name"] == "kb_query")["input_schema"]
    assert query["not"] == {"anyOf": [{"required": ["opts"], "not": {"required": ["context"]}}]}


# -- 11. the smaller ones -------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["ask", "q", "--max-turns", "abc"],
            "argument --max-turns: --max-turns takes a whole number, got 'abc'",
        ),
        (
            ["call", "kb_types_of", "{}", "--max-chars", "-1"],
            "argument --max-chars: --max-chars takes at least 1, got -1",
        ),
        (["vote", "q", "--votes", "x"], "argument --votes: --votes takes a whole number, got 'x'"),
    ],
)
def test_a_bad_number_names_the_option_and_exits_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(message)


@pytest.mark.parametrize(
    "command", ["ask", "status", "config", "tools", "call", "vote", "warm", "mcp"]
)
def test_every_subcommand_help_says_what_it_does(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    page = capsys.readouterr().out
    usage, _, rest = page.partition("\n\n")
    description = rest.split("\n\n")[0]
    assert usage.startswith(f"usage: vaelii-llm {command}")
    assert not description.startswith(("positional arguments", "options")), page
    assert len(description) > 40, page


async def test_ask_json_prints_a_json_error_on_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = refused_url()
    clear_env(monkeypatch, VAELII_LLM_PROVIDER="ollama", VAELII_OLLAMA_HOST=url)
    code, out, err = await run_cli(capsys, "ask", QUESTION, "--json")
    failure: dict[str, Any] = json.loads(out)
    assert code == 2
    assert failure["error"] == "llm-unreachable"
    assert failure["exit"] == 2
    assert failure["message"].startswith(f"Ollama at {url} is unreachable: ")
    assert err == f"llm-unreachable: {failure['message']}\n"

    bad = await run_cli(capsys, "ask", QUESTION, "--json", "--kb", "/nonexistent/kb.edn")
    assert bad[0] == 1
    assert json.loads(bad[1]) == {
        "error": "bad-path",
        "message": "cannot read /nonexistent/kb.edn: No such file or directory",
        "exit": 1,
    }


async def test_ask_json_answers_one_object_on_success(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = await FakeOllama(script=ollama_reader).start()
    try:
        clear_env(
            monkeypatch,
            VAELII_LLM_PROVIDER="ollama",
            VAELII_OLLAMA_HOST=server.url,
            VAELII_OLLAMA_MODEL="llama3.2",
        )
        code, out, err = await run_cli(capsys, "ask", QUESTION, "--json")
    finally:
        await server.stop()
    assert (code, err) == (0, "")
    assert json.loads(out)["stopped"] == "answered"


def test_python_older_than_3_11_is_refused_in_words() -> None:
    """The import says what is needed, before any dependency fails on syntax."""
    script = (
        "import sys\n"
        "sys.version_info = (3, 10, 14, 'final', 0)\n"
        "try:\n"
        "    import vaelii_llm\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == "vaelii-llm needs Python 3.11 or newer; this is Python 3.10.14\n"


@pytest.mark.parametrize("kind", ["ollama", "anthropic"])
def test_each_reason_takes_what_its_probe_takes(kind: str) -> None:
    """Selection hands ``unavailable_reason`` the options declared for ``available``."""
    import importlib
    import inspect

    module = importlib.import_module(f"vaelii_llm.providers.{kind}")
    reason = inspect.signature(module.unavailable_reason).parameters
    probe = inspect.signature(module.available).parameters
    assert [(p.name, p.default) for p in reason.values()] == [
        (p.name, p.default) for p in probe.values()
    ]
