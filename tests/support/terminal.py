"""A command run with its stderr on a terminal (a pseudo-terminal), its stdout
on a pipe: what a user at a shell sees of a progress line the command draws
only when stderr is a terminal. Used by tests/docs/test_examples.py and
tests/faces/test_cli_messages_api_and_switches.py.
"""

from __future__ import annotations

import asyncio
import os
import pty

__all__ = ["run_on_terminal"]


def _read_all(fd: int) -> bytes:
    """Everything written to the terminal until its last writer closes it."""
    got = bytearray()
    while True:
        try:
            piece = os.read(fd, 4096)
        except OSError:  # EIO: the command and every child let go of the terminal
            break
        if not piece:
            break
        got += piece
    return bytes(got)


async def run_on_terminal(
    argv: list[str], env: dict[str, str], timeout_s: float = 120
) -> tuple[int, str, str]:
    """Run ``argv``; its exit status, stdout, and what it wrote to the terminal
    (``\\r`` and escape sequences kept; the terminal's own ``\\r\\n`` read as ``\\n``)."""
    leader, follower = pty.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=follower
        )
    finally:
        os.close(follower)
    try:
        reading = asyncio.ensure_future(asyncio.to_thread(_read_all, leader))
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        shown = await asyncio.wait_for(reading, timeout_s)
    finally:
        os.close(leader)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), shown.decode().replace("\r\n", "\n")
