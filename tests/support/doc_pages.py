"""The documentation's pages and a runner for every block they show.

The pages are README.md and every ``docs/**/*.md`` (a guide added later is
picked up by the glob). Python blocks are complete programs: each is written to
a file and run as one, from a working directory holding what a page says to put
there (the backend module it shows, in my_package/). Shell blocks run after the
README's own activation line, with the environment pointing the commands at
loopback fakes (a real Ollama is what the pages assume); the web example's port
is the one substitution (8080 may be taken here). A ``text`` block is the
output of the block before it; a ``json`` block is a file a page shows (parsed
here; the MCP host entry is launched by tests/faces/test_mcp_face.py). The default
lane runs them in this environment; the ``slow`` lane runs them in a fresh one
made from the sdist exactly as the README's commands make it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path
from types import ModuleType
from typing import Literal

from tests.support.fake_ollama import FakeOllama

ROOT = Path(__file__).resolve().parents[2]

BLOCK = re.compile(r"^```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^```", re.DOTALL | re.MULTILINE)
LANGUAGES = frozenset({"python", "sh", "json", "text"})
"""The fences a page may use: each is run, parsed or compared here."""

BENCH_BLOCK = "for b in tests/bench/bench_*.py"
BACKEND_FILE = "my_package/my_backend.py"
FIRST_COMMANDS = 0  # the README's first block

ShellKind = Literal[
    "first-commands",
    "activation",
    "ask",
    "serve",
    "curl",
    "redis",
    "bench",
    "local-messages",
    "lines",
]

LOCAL_MESSAGES = "ANTHROPIC_BASE_URL=http://127.0.0.1:8080"
"""The block pointing the Messages API backend at a local server: run against
a loopback one, its port the one substitution."""


def page_names(root: Path = ROOT) -> list[str]:
    """README.md, then every page under docs/, as paths relative to ``root``."""
    docs = sorted(str(p.relative_to(root)) for p in (root / "docs").rglob("*.md"))
    return ["README.md", *docs]


def read_pages(root: Path = ROOT) -> dict[str, str]:
    return {name: (root / name).read_text() for name in page_names(root)}


def blocks(text: str, lang: str | None = None) -> list[tuple[int, str, str]]:
    """(position among the page's fenced blocks, language, body), of ``lang`` if given."""
    return [
        (n, m.group("lang"), m.group("body"))
        for n, m in enumerate(BLOCK.finditer(text))
        if lang is None or m.group("lang") == lang
    ]


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line, with its #s), up to the next
    heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    found = re.search(
        rf"^{re.escape(heading)}\n(.*?)(?=^#{{1,{level}}} |\Z)", text, re.DOTALL | re.MULTILINE
    )
    assert found is not None, heading
    return found.group(1)


def activation(readme: str) -> str:
    [line] = [body.strip() for _, _, body in blocks(readme, "sh") if "bin/activate" in body]
    return line


def shell_kind(page: str, n: int, body: str) -> ShellKind:
    """How the runner treats one shell block."""
    if page == "README.md" and n == FIRST_COMMANDS:
        return "first-commands"  # .ci/run and the slow lane run them
    if "bin/activate" in body:
        return "activation"  # it prefixes every other block
    if "vaelii-llm ask" in body:
        return "ask"
    if "web_backend.py" in body:
        return "serve"
    if "curl" in body:
        return "curl"
    if "VAELII_POOL_REDIS_URL" in body:
        return "redis"  # checked against the extra and the switch by test_pool_redis.py
    if BENCH_BLOCK in body:
        return "bench"  # minutes of benchmarks: checked to name real scripts
    if LOCAL_MESSAGES in body:
        return "local-messages"
    return "lines"


def lines(body: str) -> list[str]:
    return [line for line in body.splitlines() if line.strip()]


def backend_module(text: str) -> str | None:
    """The block a page says to save as my_package/my_backend.py, if it says so."""
    marker = f"`{BACKEND_FILE}`"
    if marker not in text:
        return None
    found = BLOCK.search(text, text.index(marker))
    assert found is not None
    return found.group("body")


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("VAELII_", "ANTHROPIC_", "OLLAMA_", "OPENAI_", "VIRTUAL_ENV", "PYTHON")
        )
    }
    env.update(extra)
    return env


async def run(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    stdin: bytes | None = None,
    hang: float = 600,
) -> tuple[int, str, str]:
    """The command's status, stdout and stderr; ``hang`` seconds is a hang, not slowness."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), hang)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class Pages:
    """The pages' blocks, run in a tree (``root``) whose ``.venv`` the README made."""

    def __init__(self, root: Path, pages: dict[str, str], ollama: FakeOllama) -> None:
        self.root = root
        self.pages = pages
        self.ollama = ollama
        self.shell = activation(pages["README.md"])

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(**{"VAELII_OLLAMA_HOSTS": self.ollama.url, **extra})

    async def sh(self, body: str, **env: str) -> tuple[int, str, str]:
        script = f"set -e\n{self.shell}\n{body}"
        return await run(["bash", "-c", script], self.env(**env), self.root)

    def shell_blocks(self, kind: ShellKind) -> list[tuple[str, int, str]]:
        return [
            (name, n, body)
            for name, text in self.pages.items()
            for n, _, body in blocks(text, "sh")
            if shell_kind(name, n, body) == kind
        ]

    async def python_blocks(self, page: str, work: Path) -> int:
        """Runs every python block of ``page`` as a file; the count run."""
        text = self.pages[page]
        package = work / "my_package"
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
        module = backend_module(text)
        if module is not None:
            (work / BACKEND_FILE).write_text(module)
        ran = 0
        for n, _, body in blocks(text, "python"):
            program = work / f"block_{n}.py"
            program.write_text(body)
            script = f"{self.shell}\ncd {shlex.quote(str(work))}\npython {program.name}"
            code, _, err = await run(["bash", "-c", script], self.env(), self.root)
            assert code == 0, f"{page}: python block {n} failed as a file:\n{body}\n{err}"
            assert "Traceback" not in err, (page, n)
            ran += 1
        return ran

    async def ask_block(self) -> None:
        [(page, n, body)] = self.shell_blocks("ask")
        shown = list(BLOCK.finditer(self.pages[page]))[n + 1]
        assert shown.group("lang") == "text"
        code, out, err = await self.sh(body, VAELII_OLLAMA_HOST=self.ollama.url)
        assert (code, err) == (0, "")
        assert out == shown.group("body")

    async def local_messages_block(self, port: int) -> None:
        """The local Messages API block, run against a server at ``port``,
        prints the block after it (``8080`` read as ``port`` in both)."""
        [(page, n, body)] = self.shell_blocks("local-messages")
        shown = list(BLOCK.finditer(self.pages[page]))[n + 1]
        assert shown.group("lang") == "text"
        code, out, err = await self.sh(body.replace("8080", str(port)))
        assert (code, err) == (0, "")
        assert out == shown.group("body").replace("8080", str(port))

    async def web_blocks(self) -> tuple[str, str]:
        [(_, _, serve)] = self.shell_blocks("serve")
        [(_, _, curls)] = self.shell_blocks("curl")
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
                raise AssertionError("curl is not installed: the web blocks need it")
            outputs = []
            for line in lines(curls):
                code, out, err = await self.sh(line.replace("8080", port), **model)
                assert (code, err) == (0, "")
                outputs.append(out)
        finally:
            proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(proc.communicate(), 60)
        return outputs[0], outputs[1]

    async def shell_lines(self, page: str) -> int:
        """Runs each line of ``page``'s plain shell blocks; the count run."""
        ran = 0
        for name, _, body in self.shell_blocks("lines"):
            if name != page:
                continue
            for line in lines(body):
                code, _, err = await self.sh(line)
                assert code == 0, f"{page}: {line}\n{err}"
                ran += 1
        for name, _, _ in self.shell_blocks("bench"):
            if name == page:
                assert list((self.root / "tests" / "bench").glob("bench_*.py"))
        return ran

    def json_blocks(self) -> int:
        found = [body for text in self.pages.values() for _, _, body in blocks(text, "json")]
        for body in found:
            json.loads(body)
        return len(found)


EXAMPLES = ROOT / "examples"


def load_example(name: str) -> ModuleType:
    if str(EXAMPLES) not in sys.path:  # as `python examples/NAME.py` has it (_answering)
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # msgspec resolves a Struct's annotations through it
    spec.loader.exec_module(module)
    return module
