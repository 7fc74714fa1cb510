"""docs/guides/caching-and-streaming.md keeps its promises: each Python block is
a complete program that runs as written on the stub, and a ``text`` block is
exactly what the block before it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "caching-and-streaming.md"
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", GUIDE.read_text(), re.DOTALL | re.MULTILINE)
SHOWN = {n - 1: body for n, (lang, body) in enumerate(BLOCKS) if lang == "text"}


def clean_env() -> dict[str, str]:
    """No backend configured, no credential: the stub answers."""
    dropped = ("VAELII_", "ANTHROPIC_", "OPENAI_", "OLLAMA_")
    return {k: v for k, v in os.environ.items() if not k.startswith(dropped)}


@pytest.mark.parametrize("n", [n for n, (lang, _) in enumerate(BLOCKS) if lang == "python"])
def test_each_python_block_runs_on_the_stub(n: int, tmp_path: Path) -> None:
    program = tmp_path / f"block{n}.py"
    program.write_text(BLOCKS[n][1])
    ran = subprocess.run(
        [sys.executable, str(program)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip()
    if n in SHOWN:
        assert ran.stdout == SHOWN[n]


def test_every_block_is_python_or_the_output_of_the_one_before() -> None:
    assert {lang for lang, _ in BLOCKS} == {"python", "text"}
    assert all(BLOCKS[n][0] == "python" for n in SHOWN)
