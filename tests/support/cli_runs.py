"""``vaelii-llm`` run in this process (its output read back through pytest's
capture), or as the installed command in a subprocess while the loop serves
the fakes it talks to (tests/faces/, tests/providers/)."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest

from vaelii_llm import cli


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(cli.main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_in_process(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``vaelii-llm ARGV`` on this thread: its status, stdout and stderr."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def command() -> list[str]:
    """The installed console script beside this interpreter (else the module)."""
    script = Path(sys.executable).with_name("vaelii-llm")
    if script.exists():
        return [str(script)]
    found = shutil.which("vaelii-llm")
    return [found] if found else [sys.executable, "-m", "vaelii_llm.cli"]


def clean_env(**env: str) -> dict[str, str]:
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VAELII_", "ANTHROPIC_", "OLLAMA_", "OPENAI_"))
    }
    return {**kept, **env}


async def run_command(env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    """``vaelii-llm ARGV`` in a subprocess, while this loop serves its fakes."""
    return await run_process(env, *command(), *argv)


async def run_process(env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    """``ARGV`` in a subprocess (its status, stdout, stderr), while this loop serves its fakes."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


# -- 1. a dead Messages API host: status, ask and vote agree ---------------------------


NO_TOOLS_PROPS = {
    "chat_template_caps": {"supports_tools": False, "supports_tool_calls": False},
    "total_slots": 1,
}
"""What llama.cpp's server answers at ``/props`` when its chat template renders no tools."""


def no_tools_line(url: str) -> str:
    return (
        f"no-tools: the server at {url} renders no tools with its chat template (its /props "
        "says supports_tools: false), so the model would answer without the tools it is "
        "offered; start "
        "llama-server with --jinja and a tool-capable chat template (--chat-template-file), "
        "or serve a model whose own template renders tools\n"
    )


MCP_TOOLS_SERVER = [sys.executable, str(Path(__file__).with_name("mcp_tools_server.py"))]
"""The misbehaving MCP server of tests/support/mcp_tools_server.py, over stdio."""
