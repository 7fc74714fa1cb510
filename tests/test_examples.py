"""The README's first command runs the quickstart; it must keep working on the stub."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_runs_on_the_stub_against_the_sample_kb() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAELII_", "ANTHROPIC_"))}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )
    lines = out.stdout.splitlines()
    assert any(line.startswith("  tool kb_query(") and "Muffet" in line for line in lines)
    assert any(line.startswith("  tool kb_types_of(") and "Spider" in line for line in lines)
    assert any(line.startswith("A: Miss Muffet is afraid of") for line in lines)
    assert "  done: stop_reason=end_turn" in lines
    assert lines[-1].startswith("vote: no")
    assert out.stderr == ""
