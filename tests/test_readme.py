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
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_ollama import FakeOllama, chunk, final
from kb_model import ANSWER, QUESTION, ollama_reader

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


# -- every block and command the README shows runs as written ---------------------------
#
# Python blocks are complete programs: each is written to a file and run as one,
# from a working directory holding what the README says to put there (the
# backend module it shows, in my_package/). Shell blocks run after the README's
# own activation line, with the environment pointing the commands at loopback
# fakes (a real Ollama is what the README assumes); the web example's port is
# the one substitution (8080 may be taken here). The default lane runs them in
# this environment; the `slow` lane runs them in a fresh one made from the sdist
# exactly as the README's commands make it (tests/test_readme.py::test_the_sdist_*).

ROOT = Path(__file__).resolve().parent.parent

BLOCK = re.compile(r"```(?P<lang>\w+)\n(?P<body>.*?)```", re.DOTALL)
FIRST_COMMANDS = 0
BENCH_BLOCK = "for b in tests/bench/bench_*.py"
BACKEND_FILE = "my_package/my_backend.py"


def blocks(lang: str, text: str = README) -> list[tuple[int, str]]:
    """(position among all fenced blocks, the body) for ``lang``."""
    return [
        (n, m.group("body")) for n, m in enumerate(BLOCK.finditer(text)) if m.group("lang") == lang
    ]


def activation(text: str = README) -> str:
    [line] = [body.strip() for _, body in blocks("sh", text) if "bin/activate" in body]
    return line


def backend_module(text: str = README) -> str:
    """The block the README says to save as my_package/my_backend.py."""
    at = text.index(f"`{BACKEND_FILE}`")
    found = BLOCK.search(text, at)
    assert found is not None
    return found.group("body")


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VAELII_", "ANTHROPIC_", "OLLAMA_", "VIRTUAL_ENV", "PYTHON"))
    }
    env.update(extra)
    return env


async def run(
    argv: list[str], env: dict[str, str], cwd: Path, stdin: bytes | None = None
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 600)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def lines(body: str) -> list[str]:
    return [line for line in body.splitlines() if line.strip()]


def vote_model(body: dict[str, Any]) -> list[dict[str, Any]]:
    if body.get("tools") or any(m["role"] == "tool" for m in body["messages"]):
        return ollama_reader(body)
    return [chunk("No, a spider is an arachnid."), final()]  # the vote's turns


@pytest.fixture
async def ollama() -> AsyncIterator[FakeOllama]:
    server = await FakeOllama(script=vote_model).start()
    try:
        yield server
    finally:
        await server.stop()


class Readme:
    """The README's blocks, run in a tree (``root``) whose ``.venv`` the README made."""

    def __init__(self, root: Path, text: str, ollama: FakeOllama) -> None:
        self.root = root
        self.text = text
        self.ollama = ollama
        self.shell = activation(text)

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(**{"VAELII_OLLAMA_HOSTS": self.ollama.url, **extra})

    async def sh(self, body: str, **env: str) -> tuple[int, str, str]:
        script = f"set -e\n{self.shell}\n{body}"
        return await run(["bash", "-c", script], self.env(**env), self.root)

    async def python_blocks(self, work: Path) -> int:
        package = work / "my_package"
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
        (work / BACKEND_FILE).write_text(backend_module(self.text))
        ran = 0
        for n, body in blocks("python", self.text):
            program = work / f"readme_block_{n}.py"
            program.write_text(body)
            script = f"{self.shell}\ncd {shlex.quote(str(work))}\npython {program.name}"
            code, _, err = await run(["bash", "-c", script], self.env(), self.root)
            assert code == 0, f"python block {n} failed as a file:\n{body}\n{err}"
            assert "Traceback" not in err, n
            ran += 1
        return ran

    async def ask_block(self) -> None:
        [(n, body)] = [b for b in blocks("sh", self.text) if "vaelii-llm ask" in b[1]]
        shown = list(BLOCK.finditer(self.text))[n + 1]
        assert shown.group("lang") == "text"
        code, out, err = await self.sh(body, VAELII_OLLAMA_HOST=self.ollama.url)
        assert (code, err) == (0, "")
        assert out == shown.group("body")

    async def web_blocks(self) -> tuple[str, str]:
        [(_, serve)] = [b for b in blocks("sh", self.text) if "web_backend.py" in b[1]]
        [(_, curls)] = [b for b in blocks("sh", self.text) if "curl" in b[1]]
        [command] = lines(serve)
        model = {
            "VAELII_LLM_PROVIDER": "ollama",
            "VAELII_OLLAMA_HOST": self.ollama.url,
            "VAELII_OLLAMA_MODEL": "llama3.2",
        }
        env = self.env(**model)
        script = f"{self.shell}\nexec {command.replace('--port 8080', '--port 0')}"
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            script,
            env=env,
            cwd=self.root,
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
            for line in lines(curls):
                code, out, err = await self.sh(line.replace("8080", port), **model)
                assert (code, err) == (0, "")
                outputs.append(out)
        finally:
            proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(proc.communicate(), 60)
        return outputs[0], outputs[1]

    async def other_shell_blocks(self) -> int:
        ran = 0
        for n, body in blocks("sh", self.text):
            if n == FIRST_COMMANDS or "bin/activate" in body:
                continue  # made the environment; the activation prefixes every block
            if any(word in body for word in ("vaelii-llm ask", "web_backend.py", "curl")):
                continue  # run by ask_block and web_blocks
            if "VAELII_POOL_REDIS_URL" in body:
                continue  # checked against the extra and the switch by test_pool_redis.py
            if BENCH_BLOCK in body:  # minutes of benchmarks: check it names real scripts
                assert list((self.root / "tests" / "bench").glob("bench_*.py"))
                continue
            for line in lines(body):
                code, _, err = await self.sh(line)
                assert code == 0, f"{line}\n{err}"
                ran += 1
        return ran


@pytest.fixture
def here(ollama: FakeOllama) -> Readme:
    """This checkout, its environment activated as the README says (this one's)."""
    readme = Readme(ROOT, README, ollama)
    readme.shell = f". {shlex.quote(str(Path(sys.prefix) / 'bin' / 'activate'))}"
    return readme


def test_the_readme_says_how_to_activate_the_environment_its_commands_use() -> None:
    assert activation() == ". .venv/bin/activate"
    first = README.index(activation())
    for _, body in blocks("sh")[2:]:  # every command after the two and the activation
        assert README.index(body) > first
    assert ".venv/bin/python examples/quickstart.py" in README  # the first command


def test_every_python_block_is_a_complete_program() -> None:
    found = blocks("python")
    assert len(found) >= 9
    for n, body in found:
        compile(body, f"README block {n}", "exec")  # top-level await would not compile


async def test_every_python_block_runs_as_a_file(here: Readme, tmp_path: Path) -> None:
    assert await here.python_blocks(tmp_path) >= 9


async def test_the_ask_block_prints_what_the_readme_shows(here: Readme) -> None:
    await here.ask_block()


@pytest.mark.usefixtures("ctrl_c_reaches_children")
async def test_the_web_backend_blocks_serve_what_they_say(here: Readme) -> None:
    answered, streamed = await here.web_blocks()
    assert json.loads(answered)["answer"] == ANSWER
    assert streamed.startswith("event: tool_call\n")
    assert "event: text\n" in streamed
    assert "event: final\n" in streamed


async def test_every_other_shell_block_runs(here: Readme) -> None:
    assert await here.other_shell_blocks() >= 2


async def test_the_first_request_block_says_the_stub_answered(here: Readme, tmp_path: Path) -> None:
    [body] = [b for _, b in blocks("python") if "Is a spider an insect?" in b and "Request(" in b]
    program = tmp_path / "first_request.py"
    program.write_text(body)
    code, out, err = await run([sys.executable, str(program)], clean_env(), tmp_path)
    assert (code, err) == (0, "")
    first = out.splitlines()[0]
    assert first.startswith("StubProvider end_turn [TextBlock(text='No: a spider is an arachnid.")
    assert "The stub said this: no model is set." in first


def test_the_mcp_host_config_names_the_command_by_its_full_path() -> None:
    [(_, body)] = blocks("json")
    server = json.loads(body)["mcpServers"]["vaelii-kb"]
    assert server["command"].startswith("/")
    assert server["command"].endswith("/.venv/bin/vaelii-llm")
    assert server["args"][0] == "mcp"


ON_THE_STUB = {"vote": 2}
"""What a command the README names exits with when nothing is configured (the
README says so beside it); every other one answers 0."""


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
        assert code == ON_THE_STUB.get(argv[0], 0), command
        ran += 1
    assert ran >= 4


def test_the_exit_status_table_is_the_commands() -> None:
    rows = dict(re.findall(r"^\| (\d) \| (.*?) \|$", README, re.MULTILINE))
    assert set(cli.ASK_EXIT.values()) | {1, 2, cli.ASK_SERVER_GONE} == {int(c) for c in rows}
    for stopped, code in cli.ASK_EXIT.items():
        assert str(code) in rows, stopped
    assert rows[str(cli.ASK_STUB_ONLY)].startswith("the configured backend cannot answer")
    help_text = cli.ASK_EPILOG
    for code in rows:
        assert f"  {code}  " in help_text, code
    assert "max_tokens" in rows[str(cli.ASK_EXIT["max_tokens"])]


# -- the package as published: the sdist and the wheel, each in a fresh environment -----


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel, built once per session as a publisher builds them."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return sdist, wheel


def python3() -> str:
    """The ``python3`` the README's commands name, as a fresh shell finds it."""
    found = shutil.which("python3", path=clean_env().get("PATH"))
    assert found is not None
    return found


def unpack(sdist: Path, into: Path) -> tuple[Path, str]:
    """The sdist's tree, and its README."""
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    [root] = [p for p in into.iterdir() if p.is_dir()]
    return root, (root / "README.md").read_text()


@pytest.mark.slow
@pytest.mark.usefixtures("ctrl_c_reaches_children")
async def test_the_sdist_unpacked_runs_the_readme_as_written(
    dists: tuple[Path, Path], ollama: FakeOllama, tmp_path: Path
) -> None:
    """A new user's session on the sdist: its README's two commands exactly as
    written (the second runs the sdist's own suite), then every block and
    command after the README's activation line."""
    root, text = unpack(dists[0], tmp_path)
    first, second = lines(blocks("sh", text)[FIRST_COMMANDS][1])
    code, out, err = await run(["bash", "-c", first], clean_env(), root)
    assert code == 0, err
    assert "answering: the scripted stub, not a model (nothing is configured)" in out
    code, out, err = await run(["bash", "-c", second], clean_env(), root)
    assert code == 0, out[-3000:] + err[-3000:]
    assert re.search(r"\d+ passed", out.splitlines()[-1]), out[-500:]
    assert "error" not in out.splitlines()[-1]
    readme = Readme(root, text, ollama)
    assert await readme.python_blocks(tmp_path / "work") >= 9
    await readme.ask_block()
    answered, streamed = await readme.web_blocks()
    assert json.loads(answered)["answer"] == ANSWER
    assert "event: final\n" in streamed
    assert await readme.other_shell_blocks() >= 2


@pytest.mark.slow
async def test_a_venv_holding_only_the_wheel_answers_ask(
    dists: tuple[Path, Path], ollama: FakeOllama, tmp_path: Path
) -> None:
    _, wheel = dists
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = archive.read(metadata).decode()
    assert {n.split("/", 1)[0] for n in names} == {"vaelii_llm", metadata.split("/")[0]}
    assert "vaelii_llm/py.typed" in names
    assert any(n.startswith("vaelii_llm/kb/data/") and n.endswith(".edn") for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    for field in ("License-Expression: MIT", "Requires-Python: >=3.11", "Author: "):
        assert field in meta, field
    venv = tmp_path / "wheel-only"
    code, _, err = await run([python3(), "-m", "venv", str(venv)], clean_env(), tmp_path)
    assert code == 0, err
    code, _, err = await run(
        [str(venv / "bin" / "pip"), "install", "-q", str(wheel)], clean_env(), tmp_path
    )
    assert code == 0, err
    command = str(venv / "bin" / "vaelii-llm")
    code, out, err = await run(
        [command, "ask", QUESTION],
        clean_env(
            VAELII_LLM_PROVIDER="ollama",
            VAELII_OLLAMA_HOST=ollama.url,
            VAELII_OLLAMA_MODEL="llama3.2",
        ),
        tmp_path,
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == '-> kb_query {"goal": "(afraidOf MissMuffet ?who)"}'
    assert out.splitlines()[-1] == ANSWER
    code, out, err = await run([command, "ask", QUESTION], clean_env(), tmp_path)
    assert (code, out) == (2, "")
    assert err.startswith("stub-only: only the stub can answer: nothing is configured")
    code, _, _ = await run(
        [str(venv / "bin" / "python"), "-c", "import pytest"], clean_env(), tmp_path
    )
    assert code != 0  # the wheel and its dependencies, nothing of the test extra


def python310() -> str | None:
    for candidate in (
        shutil.which("python3.10"),
        *sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.10*/bin/python3.10")),
    ):
        if (
            candidate
            and subprocess.run(
                [candidate, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 10))"],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        ):
            return candidate
    return None


@pytest.mark.slow
async def test_pip_on_python_3_10_says_the_python_needed(
    dists: tuple[Path, Path], tmp_path: Path
) -> None:
    old = python310()
    if old is None:
        pytest.skip("no Python 3.10 on this machine to try the sdist with")
    sdist, _ = dists
    venv = tmp_path / "py310"
    code, _, err = await run([old, "-m", "venv", str(venv)], clean_env(), tmp_path)
    assert code == 0, err
    code, out, err = await run(
        [str(venv / "bin" / "pip"), "install", str(sdist)], clean_env(), tmp_path
    )
    assert code != 0
    assert "vaelii-llm needs Python 3.11 or newer; this is Python 3.10" in out + err
    assert "jiter" not in out + err  # said before any dependency is looked for
