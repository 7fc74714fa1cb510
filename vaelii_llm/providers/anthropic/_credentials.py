"""Finding the Messages API credential, the way the official SDKs do.

:func:`resolve` tries, in order:

1. an explicit credential (a ``str`` is an API key; a :class:`Credential` says
   its own kind);
2. ``ANTHROPIC_API_KEY``, sent as ``x-api-key``;
3. ``ANTHROPIC_AUTH_TOKEN``, sent as ``Authorization: Bearer`` and nothing
   else (kind ``bearer``), as the official SDKs send it: a gateway's or
   proxy's token, no OAuth;
4. an ``ant auth login`` profile, read with
   ``ant auth print-credentials --access-token``: an OAuth access token, sent
   as a bearer with the OAuth beta header (kind ``oauth``, the only kind that
   carries :data:`OAUTH_BETA`).

An unset ``ANTHROPIC_API_KEY`` therefore does not mean there is no credential.
No credential at all is :class:`~vaelii_llm.errors.LLMNoCredential`.

The ``ant`` CLI runs as a child process in its own process group. It is killed
(the whole group) after :data:`ANT_TIMEOUT_S` seconds, which reads as "no
credential", as an absent CLI or a non-zero exit does; it is killed too when the
awaiting task is cancelled, and the cancellation propagates. Either way the
child is reaped before :func:`resolve` returns or raises, so none is left behind.
A token the CLI printed is reused for :data:`ANT_REUSE_S` seconds, so choosing
the backend (whose probe runs the CLI) and its first turn run it once.

The value is a secret. It is handed to a header and nowhere else: it is never
logged, printed, put in an exception message, or shown by a repr. Values are
trimmed (a ``.env`` file ending in CRLF, a ``$(cat key)`` keeping its newline);
a control character left mid-string is refused as
:class:`~vaelii_llm.errors.LLMBadCredential`, naming the header and never the
value. Nothing here reads or writes a credential file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Final, Literal

from vaelii_llm import config
from vaelii_llm.errors import LLMBadCredential, LLMNoCredential

__all__ = [
    "ANT_COMMAND",
    "ANT_REUSE_S",
    "ANT_TIMEOUT_S",
    "OAUTH_BETA",
    "Credential",
    "from_ant",
    "resolve",
    "resolve_now",
]

log = logging.getLogger("vaelii_llm.providers.anthropic._credentials")

ANT_COMMAND: Final = ("ant", "auth", "print-credentials", "--access-token")
"""The CLI call that prints the active profile's access token."""

ANT_TIMEOUT_S: Final = 5.0
"""How long the CLI may take. A login profile answers in well under a second;
a CLI waiting on a browser or a keychain prompt would otherwise hang a probe."""

OAUTH_BETA: Final = "oauth-2025-04-20"
"""The ``anthropic-beta`` value that lets a request authenticate with an OAuth
bearer token."""

ANT_REUSE_S: Final = 10.0
"""How long a token the CLI printed is reused: long enough that choosing the
backend (whose probe runs the CLI) and the provider's first turn run it once,
short enough that a new ``ant auth login`` is seen at once. Failures are never
reused, and the reuse is keyed by ``PATH`` (another PATH may be another CLI)."""

_ant_seen: dict[str | None, tuple[float, Credential]] = {}

_MAX_ANT_OUTPUT: Final = 64 * 1024
"""A token is a few hundred bytes; anything past this is not one."""

Kind = Literal["api-key", "bearer", "oauth"]
"""How a credential travels: ``x-api-key``; ``Authorization: Bearer``; or a
bearer that also needs the OAuth beta (an ``ant`` CLI profile's token)."""


def _is_control(ch: str) -> bool:
    code = ord(ch)
    # C0, DEL, C1, and the Unicode line/paragraph separators: none can sit in a
    # header value, and aiohttp would quote the value back in its own error.
    return code < 0x20 or 0x7F <= code <= 0x9F or code in (0x2028, 0x2029)


@dataclass(frozen=True, slots=True)
class Credential:
    """A resolved credential: the secret, how it is sent, and where it came from.

    ``value`` is trimmed and checked at construction; its repr is withheld.
    """

    value: str = field(repr=False)
    kind: Kind = "api-key"
    source: str = "explicit"

    def __post_init__(self) -> None:
        trimmed = self.value.strip()
        if trimmed != self.value:
            object.__setattr__(self, "value", trimmed)
        if not trimmed:
            raise LLMNoCredential(f"the {self.source} credential is blank")
        if any(_is_control(ch) for ch in trimmed):
            raise LLMBadCredential(self.header)

    @property
    def header(self) -> str:
        """The header the value travels in."""
        return "x-api-key" if self.kind == "api-key" else "Authorization"

    @property
    def betas(self) -> tuple[str, ...]:
        """The ``anthropic-beta`` values this credential needs (only an OAuth token has one)."""
        return (OAUTH_BETA,) if self.kind == "oauth" else ()

    def headers(self) -> dict[str, str]:
        """The authentication header (the beta header is the caller's to join)."""
        if self.kind == "api-key":
            return {"x-api-key": self.value}
        return {"Authorization": f"Bearer {self.value}"}

    def __repr__(self) -> str:
        return f"Credential(kind={self.kind!r}, source={self.source!r}, value=<withheld>)"

    __str__ = __repr__


def _from_env() -> Credential | None:
    key = config.anthropic_api_key()
    if key is not None:
        return Credential(key, "api-key", "ANTHROPIC_API_KEY")
    token = config.anthropic_auth_token()
    if token is not None:
        return Credential(token, "bearer", "ANTHROPIC_AUTH_TOKEN")
    return None


def _explicit(value: str | Credential) -> Credential:
    if isinstance(value, Credential):
        return value
    return Credential(value, "api-key", "explicit")


async def resolve(explicit: str | Credential | None = None) -> Credential:
    """The credential to send, from the first source that has one.

    Raises :class:`~vaelii_llm.errors.LLMBadCredential` for a value holding a
    control character and :class:`~vaelii_llm.errors.LLMNoCredential` when no
    source has one. Only the last source (the ``ant`` CLI) does I/O.
    """
    if explicit is not None:
        return _explicit(explicit)
    found = _from_env()
    if found is not None:
        return found
    found = await from_ant()
    if found is not None:
        return found
    raise LLMNoCredential(
        "no explicit credential, ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN, "
        "and no `ant auth login` profile"
    )


def resolve_now(explicit: str | Credential | None = None) -> Credential | None:
    """The explicit or environment credential, without running the CLI (no I/O).

    None when neither is set; the caller then awaits :func:`resolve`.
    """
    if explicit is not None:
        return _explicit(explicit)
    return _from_env()


async def from_ant(timeout_s: float = ANT_TIMEOUT_S) -> Credential | None:
    """The ``ant`` CLI's access token, or None when it gives none.

    None covers: the CLI absent, a non-zero exit, blank output, and no answer
    inside ``timeout_s`` (the child's process group is then killed). A token
    holding a control character is refused as ``LLMBadCredential``. When the
    awaiting task is cancelled the child is killed and reaped, and the
    cancellation propagates. A token found less than :data:`ANT_REUSE_S`
    seconds ago is reused without running the CLI again.
    """
    path = os.environ.get("PATH")
    seen = _ant_seen.get(path)
    if seen is not None and time.monotonic() < seen[0]:
        return seen[1]
    found = await _run_ant(timeout_s)
    _ant_seen.clear()
    if found is not None:
        _ant_seen[path] = (time.monotonic() + ANT_REUSE_S, found)
    return found


async def _run_ant(timeout_s: float) -> Credential | None:
    try:
        proc = await _spawn_ant()
    except OSError as exc:  # not installed, not executable
        log.debug("the ant CLI could not be started (%s)", type(exc).__name__)
        return None
    finished = False
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(timeout_s):
            output = await _read_capped(proc.stdout)
            status = await proc.wait()
        finished = True
    except TimeoutError:
        log.debug("the ant CLI gave no answer inside %.1f s; treated as no credential", timeout_s)
        return None
    finally:
        if not finished:
            await _uncancelled(_kill(proc))
    if status != 0:
        log.debug("the ant CLI exited with status %d; treated as no credential", status)
        return None
    token = output.decode("utf-8", "replace").strip()
    if not token:
        return None
    return Credential(token, "oauth", "ant CLI")


async def _spawn_ant() -> asyncio.subprocess.Process:
    """Start the CLI; a cancellation mid-spawn still ends with the child reaped.

    The spawn runs in its own task that a cancellation does not reach: cut
    short, a loop's spawn kills the child but need not reap it (uvloop leaves
    it a zombie until a later SIGCHLD, or for good once the transport is
    collected). So on cancellation the spawn is let finish, the child it
    started is killed and reaped, and the cancellation then propagates.
    """
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *ANT_COMMAND,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
    )
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        await _uncancelled(_reap_spawned(spawn))
        raise


async def _reap_spawned(spawn: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """Wait for a spawn to finish; kill and reap the child it started, if any."""
    await asyncio.wait([spawn])
    if spawn.cancelled() or spawn.exception() is not None:
        return  # no child was started (an OSError: the CLI is absent)
    await _kill(spawn.result())


async def _uncancelled(cleanup: Coroutine[object, object, None]) -> None:
    """Run ``cleanup`` to its end even if the awaiting task is cancelled again
    meanwhile; such a cancellation is passed on once the cleanup is done."""
    task = asyncio.ensure_future(cleanup)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                break
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    task.result()


async def _read_capped(stream: asyncio.StreamReader) -> bytes:
    """Everything up to EOF, or b"" when it runs past :data:`_MAX_ANT_OUTPUT`."""
    data = bytearray()
    while chunk := await stream.read(_MAX_ANT_OUTPUT):
        data += chunk
        if len(data) > _MAX_ANT_OUTPUT:
            return b""
    return bytes(data)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """Kill the child's process group (a wrapper script's own children
    included) and reap the child.

    Runs while a cancellation unwinds too (under :func:`_uncancelled`, so a
    second cancellation cannot cut the reap short): the wait is short, since
    SIGKILL cannot be ignored, and it leaves no zombie behind.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)  # the group this child leads
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    await proc.wait()
