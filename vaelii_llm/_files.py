"""Reading a file a caller named, bounded: the one reader behind
``ImageBlock.from_path``, ``DocumentBlock.from_path`` and ``kb.load_edn``.

Only a regular file is read. The file is opened without blocking (a FIFO's
``open`` would otherwise wait for a writer, forever) and checked through the
descriptor it opened (a symlink swapped after a check cannot slip a device
in): not a regular file, or larger than the caller's bound, and it is refused
before a byte is read. The read itself stops one byte past the bound, so a
file that grows while it is read is refused too, never read whole.

This module does blocking I/O; a coroutine calls its callers through
``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import stat
from typing import Final

__all__ = ["FileRefused", "read_regular"]

_CHUNK: Final = 1 << 20
_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class FileRefused(ValueError):
    """The file is missing, unreadable, not a regular file, or over its bound;
    the message says which, naming the path."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them;
    ``what`` names the bound in a refusal (``"an image file"``). FileRefused
    otherwise, before any is read."""
    shown = os.fspath(path)
    try:
        fd = os.open(
            shown, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        )
    except OSError as exc:
        raise FileRefused(f"cannot read {shown}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{shown} is {_kind(info.st_mode)}; only a regular file is read")
        if info.st_size > limit:
            raise FileRefused(
                f"{shown} is {info.st_size} bytes, over the {limit} bytes {what} may hold"
            )
        parts: list[bytes] = []
        total = 0
        while total <= limit:
            part = os.read(fd, min(_CHUNK, limit + 1 - total))
            if not part:
                break
            parts.append(part)
            total += len(part)
        if total > limit:
            raise FileRefused(f"{shown} grew past the {limit} bytes {what} may hold")
        return b"".join(parts)
    except OSError as exc:
        raise FileRefused(f"cannot read {shown}: {exc.strerror}") from None
    finally:
        os.close(fd)
