"""``vaelii-llm`` run in this process, off the event loop, its output read
back through pytest's capture (tests/faces/, tests/providers/)."""

from __future__ import annotations

import asyncio

import pytest

from vaelii_llm import cli


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(cli.main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err
