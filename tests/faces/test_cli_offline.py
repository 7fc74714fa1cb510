"""The command offline (issue #34 item 3): naming the stub runs on it, saying so,
and ``call`` reaches an MCP server's tools as ``ask`` offers them.

Each case runs in an environment with no backend configured. The stub's cases
and ``--help`` run ``python -m vaelii_llm.cli`` in a subprocess; the ``call``
cases and the ``ask`` that names an MCP server run :func:`vaelii_llm.cli.main`
in this process, so only the server is a child process and the ``mcp``
package is imported once.
tests/support/mcp_tools_server.py is the MCP server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli_runs import run_in_process as run
from vaelii_llm import cli
from vaelii_llm import tools

SERVER = (
    f"{sys.executable} {Path(__file__).resolve().parents[1] / 'support' / 'mcp_tools_server.py'}"
)
SERVER_TOOLS = ("echo", "picture", "fail", "boom", "hang", "huge", "die", "pid")


BACKEND_SWITCHES = ("VAELII_", "ANTHROPIC_", "OLLAMA_", "OPENAI_")


def command(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(BACKEND_SWITCHES)}
    return subprocess.run(
        [sys.executable, "-m", "vaelii_llm.cli", *argv],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=120,
    )


Ran = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Ran:
    """``cli.main`` in this process (tests/faces/test_cli.py's ``run``), with no backend
    configured: what it returned and printed, as :func:`command` gives it."""
    for name in list(os.environ):
        if name.startswith(BACKEND_SWITCHES):
            monkeypatch.delenv(name)

    def ran(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(argv), *run(capsys, *argv))

    return ran


def test_ask_with_the_stub_named_runs_on_it_and_says_so() -> None:
    done = command("ask", "--provider", "stub", "Who is Miss Muffet afraid of?")
    assert done.returncode == 0, done.stderr
    assert done.stderr == cli.STUB_SAYS + "\n"
    names = [schema.name for schema in tools.schemas()]
    assert done.stdout == (
        "The scripted stub answers; no model read the question. "
        f"It was offered {len(names)} tool(s): {', '.join(names)}.\n"
    )


def test_the_stub_named_in_the_environment_runs_too_and_unset_still_exits_2() -> None:
    named = command("ask", "q", "--json", VAELII_LLM_PROVIDER="stub")
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["answer"].startswith("The scripted stub answers")
    unset = command("ask", "q")
    assert unset.returncode == 2
    assert unset.stderr.startswith("stub-only: only the stub can answer: nothing is configured")


def test_ask_on_the_stub_offers_an_mcp_servers_tools_offline(offline: Ran) -> None:
    done = offline("ask", "--provider", "stub", "--no-kb", "--mcp", SERVER, "--json", "q")
    assert done.returncode == 0, done.stderr
    assert done.stderr == cli.STUB_SAYS + "\n"
    summary = json.loads(done.stdout)
    assert summary["answer"].endswith(
        f"It was offered {len(SERVER_TOOLS)} tool(s): {', '.join(sorted(SERVER_TOOLS))}."
    )
    assert summary["stopped"] == "answered"


def test_call_runs_a_tool_of_an_mcp_server(offline: Ran) -> None:
    done = offline("call", "echo", '{"text": "hello there"}', "--mcp", SERVER)
    assert (done.returncode, done.stdout, done.stderr) == (0, "hello there\n", "")


def test_call_with_a_server_still_reaches_the_kbs_tools(offline: Ran) -> None:
    done = offline("call", "kb_types_of", '{"term": "Muffet"}', "--mcp", SERVER)
    assert done.returncode == 0, done.stderr
    assert "Spider" in done.stdout


def test_call_of_a_tool_the_server_lacks_exits_1_naming_it(offline: Ran) -> None:
    done = offline("call", "kb_query", "{}", "--no-kb", "--mcp", SERVER)
    assert done.returncode == 1
    assert "kb_query" in done.stdout


def test_call_with_a_server_tool_that_fails_exits_1_with_its_words(
    offline: Ran,
) -> None:
    done = offline("call", "fail", "{}", "--no-kb", "--mcp", SERVER)
    assert done.returncode == 1
    assert done.stdout.strip()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("call", "echo", "{}", "--no-kb"), "error: --no-kb leaves no tools"),
        (("call", "echo", "{}", "--mcp", "/no/such/program"), "mcp-server: "),
    ],
)
def test_call_refusals_are_one_line(offline: Ran, argv: tuple[str, ...], said: str) -> None:
    done = offline(*argv)
    assert done.returncode in (1, 2)
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(said)


def test_call_help_names_its_server_flags() -> None:
    done = command("call", "--help")
    assert done.returncode == 0
    for flag in ("--mcp", "--mcp-http", "--no-kb"):
        assert flag in done.stdout
