"""The README keeps its promises: two commands first, the same config table as the
code, and every block and command it shows runs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_ollama import FakeOllama, chunk, final
from kb_model import ANSWER, ollama_reader

from vaelii_llm import cli, config

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_opens_with_exactly_two_commands() -> None:
    block = re.search(r"```sh\n(.*?)```", README, re.DOTALL)
    assert block is not None
    assert README.index("```sh") < README.index("## ")
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2
    assert "examples/quickstart.py" in lines[0]
    assert "[test]" in lines[1]
    assert "pytest" in lines[1]


def test_readme_configuration_table_matches_the_code() -> None:
    rows = {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(
            r"^\| `([A-Z_]+)` \| `config\.(\w+)\(\)` \| [^|]* \| ([^|]*) \|", README, re.MULTILINE
        )
    }
    assert set(rows) == {s.name for s in config.SWITCHES}
    for switch in config.SWITCHES:
        reader, default = rows[switch.name]
        assert reader == switch.reader, switch.name
        if switch.default is not None:
            assert f"`{switch.default}`" in default, switch.name
        else:
            assert default.startswith("unset"), switch.name


# -- every block and command the README shows runs ----------------------------------------
#
# Python blocks run each in a fresh interpreter on the stub (top-level ``await``
# allowed, as in an asyncio REPL), with VAELII_OLLAMA_HOSTS pointing at a
# loopback Ollama for the vote pool's block and a `my_package.my_backend` on the
# path for the plug-in block. A line ``<!-- before: CODE -->`` right above a
# block runs CODE first (names a block takes as given, such as a credential).
# Shell blocks meant for a real host run against loopback fakes by substituting
# the environment; the README's first block is run by .ci/run and the
# benchmarks' block by hand (they take minutes), which NOT_RUN records.

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

BLOCK = re.compile(
    r"(?:<!-- before: (?P<before>.*?) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.DOTALL
)
NOT_RUN = {
    0: "the two commands make a fresh .venv and run this suite: .ci/run runs them",
}
BENCH_BLOCK = "for b in tests/bench/bench_*.py"

HARNESS = """
import ast, asyncio, sys
source = sys.stdin.read()
code = compile(source, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__"})
if asyncio.iscoroutine(result):
    asyncio.run(result)
"""

MY_BACKEND = """
from vaelii_llm._protocol import ProviderBase, Response, TextBlock

PROBE_OPTS = frozenset()

class Mine(ProviderBase):
    async def complete(self, request):
        return Response(content=[TextBlock(text="mine")], stop_reason="end_turn")

    async def stream(self, request, *, deltas=False):
        yield await self.complete(request)

def provider():
    return Mine()

async def available():
    return True
"""


def blocks(lang: str) -> list[tuple[int, str, str]]:
    """(position among all fenced blocks, the ``before`` code, the body) for ``lang``."""
    return [
        (n, m.group("before") or "", m.group("body"))
        for n, m in enumerate(BLOCK.finditer(README))
        if m.group("lang") == lang
    ]


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VAELII_", "ANTHROPIC_", "OLLAMA_"))
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


async def run(
    argv: list[str], env: dict[str, str], stdin: bytes | None = None, cwd: Path = ROOT
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def sh(body: str) -> list[str]:
    """The block's commands, with ``python`` meaning this interpreter."""
    return [
        re.sub(r"^python ", f"{sys.executable} ", line)
        for line in body.splitlines()
        if line.strip()
    ]


@pytest.fixture
async def ollama() -> AsyncIterator[FakeOllama]:
    def model(body: dict[str, Any]) -> list[dict[str, Any]]:
        if body.get("tools") or any(m["role"] == "tool" for m in body["messages"]):
            return ollama_reader(body)
        return [chunk("No, a spider is an arachnid."), final()]  # the vote's turns

    server = await FakeOllama(script=model).start()
    try:
        yield server
    finally:
        await server.stop()


async def test_every_python_block_runs(ollama: FakeOllama, tmp_path: Path) -> None:
    package = tmp_path / "my_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "my_backend.py").write_text(MY_BACKEND)
    env = clean_env(VAELII_OLLAMA_HOSTS=ollama.url, PYTHONPATH=str(tmp_path))
    found = blocks("python")
    assert len(found) >= 4
    for n, before, body in found:
        code, _, err = await run(
            [sys.executable, "-c", HARNESS], env, stdin=(before + "\n" + body).encode()
        )
        assert code == 0, f"python block {n} failed:\n{body}\n{err}"
        assert "Traceback" not in err, n


async def test_the_ask_block_prints_what_the_readme_shows(ollama: FakeOllama) -> None:
    [(n, _, body)] = [b for b in blocks("sh") if "vaelii-llm ask" in b[2]]
    shown = list(BLOCK.finditer(README))[n + 1]
    assert shown.group("lang") == "text"
    code, out, err = await run(["bash", "-c", body], clean_env(VAELII_OLLAMA_HOST=ollama.url))
    assert (code, err) == (0, "")
    assert out == shown.group("body")


@pytest.mark.usefixtures("ctrl_c_reaches_children")
async def test_the_web_backend_blocks_serve_what_they_say(ollama: FakeOllama) -> None:
    [(_, _, serve_block)] = [b for b in blocks("sh") if "web_backend.py" in b[2]]
    [(_, _, curl_block)] = [b for b in blocks("sh") if "curl" in b[2]]
    [command] = sh(serve_block)
    env = clean_env(
        VAELII_LLM_PROVIDER="ollama", VAELII_OLLAMA_HOST=ollama.url, VAELII_OLLAMA_MODEL="llama3.2"
    )
    proc = await asyncio.create_subprocess_exec(
        *command.replace("--port 8080", "--port 0").split(),
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        listening = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        port = listening.rsplit(":", 1)[1].strip()
        if shutil.which("curl") is None:
            pytest.skip("curl is not installed")
        outputs = []
        for line in sh(curl_block):
            code, out, err = await run(["bash", "-c", line.replace("8080", port)], env)
            assert (code, err) == (0, "")
            outputs.append(out)
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.communicate(), 60)
    assert json.loads(outputs[0])["answer"] == ANSWER
    assert outputs[1].startswith("event: tool_call\n")
    assert "event: text\n" in outputs[1]
    assert "event: final\n" in outputs[1]


async def test_every_other_shell_block_runs_or_says_why_not() -> None:
    # The Redis switch's two lines are checked by tests/test_pool_redis.py against
    # the extra and the switch, and the pool they turn on against a real Redis.
    ran = {"vaelii-llm ask", "web_backend.py", "curl", "VAELII_POOL_REDIS_URL"}
    for n, _, body in blocks("sh"):
        if n in NOT_RUN or any(word in body for word in ran):
            continue
        if BENCH_BLOCK in body:  # minutes of benchmarks: only check it names real scripts
            assert list((ROOT / "tests" / "bench").glob("bench_*.py"))
            continue
        for line in sh(body):
            code, _, err = await run(["bash", "-c", line], clean_env())
            assert code == 0, f"{line}\n{err}"


def test_inline_commands_run_on_the_stub(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith(("VAELII_", "ANTHROPIC_", "OLLAMA_")):
            monkeypatch.delenv(name)
    commands = set(re.findall(r"`vaelii-llm ([^`]+)`", README))
    ran = 0
    for command in sorted(commands):
        argv = shlex.split(command)
        try:
            cli.build_parser().parse_args(argv)
        except SystemExit:  # a command's name, written without its arguments
            capsys.readouterr()
            continue
        code = cli.main(argv)
        capsys.readouterr()
        assert code == 0, command
        ran += 1
    assert ran >= 4


def test_the_exit_status_table_is_the_commands() -> None:
    rows = dict(re.findall(r"^\| (\d) \| (.*?) \|$", README, re.MULTILINE))
    assert set(cli.ASK_EXIT.values()) | {1, 2} == {int(code) for code in rows}
    for stopped, code in cli.ASK_EXIT.items():
        assert str(code) in rows, stopped
    assert rows[str(cli.ASK_STUB_ONLY)].startswith("only the stub can answer")
    help_text = cli.ASK_EPILOG
    for code in rows:
        assert f"  {code}  " in help_text, code
    assert "max_tokens" in rows[str(cli.ASK_EXIT["max_tokens"])]
