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

The ``ant`` CLI runs as a child process in a session (and process group) of
its own, its stdout read up to a cap (:data:`_MAX_ANT_OUTPUT`). After :data:`ANT_TIMEOUT_S`
seconds, as soon as it prints past the cap, or when the awaiting task is
cancelled, its whole process group is killed (SIGKILL), our end of its stdout
closed and the child reaped, whatever it printed: the first two read as "no
credential", as an absent CLI or a non-zero exit do; the cancellation
propagates. So the bound holds whatever the child prints or holds open.

What is reaped: the CLI itself, always, before :func:`resolve` returns or
raises. What is killed: the CLI and every process still in its group (a
wrapper script's children). What is neither: a process that left the group
(``setsid``, a daemon the CLI starts) is out of reach, and nothing waits on it:
if it keeps the CLI's stdout open, reading stops half a second after the CLI
exits (or at the deadline), our end is closed, and its writes then fail.
A token the CLI printed is reused for :data:`ANT_REUSE_S` seconds from the
:class:`AntTokens` its caller holds (the backend holds one for its probe and
the providers it builds), so choosing the backend and its first turn run it once.

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
from typing import Final
from typing import Literal

from vaelii_llm import _backends
from vaelii_llm._transport.settings import Secret
from vaelii_llm.errors import LLMBadCredential
from vaelii_llm.errors import LLMNoCredential

__all__ = [
    "ANT_COMMAND",
    "ANT_REUSE_S",
    "ANT_TIMEOUT_S",
    "OAUTH_BETA",
    "AntTokens",
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

_MAX_ANT_OUTPUT: Final = 64 * 1024
"""A token is a few hundred bytes; anything past this is not one (the CLI is
killed as soon as it prints more)."""

_AFTER_EXIT_S: Final = 0.5
"""How long the CLI's stdout may stay open after it exited (held by a process
it left behind) before it is closed on our side: what the CLI printed is in
the pipe already."""

Kind = Literal["api-key", "bearer", "oauth"]
"""How a credential travels: ``x-api-key``; ``Authorization: Bearer``; or a
bearer that also needs the OAuth beta (an ``ant`` CLI profile's token)."""


def _is_control(ch: str) -> bool:
    code = ord(ch)
    # C0, DEL, C1, and the Unicode line/paragraph separators: none can sit in a
    # header value, and aiohttp would quote the value back in its own error.
    return code < 0x20 or 0x7F <= code <= 0x9F or code in (0x2028, 0x2029)


class Credential(Secret):
    """A resolved credential: the secret, how it is sent, and where it came from.

    ``value`` is trimmed and checked at construction; its repr is withheld.
    """

    __slots__ = ("kind", "source", "value")
    shown = ("kind", "source")

    kind: Kind
    source: str

    def __init__(self, value: str, kind: Kind = "api-key", source: str = "explicit") -> None:
        self._hold(kind=kind, source=source)
        trimmed = value.strip()
        if not trimmed:
            raise LLMNoCredential(f"the {source} credential is blank")
        if any(_is_control(ch) for ch in trimmed):
            raise LLMBadCredential(self.header)
        self._hold(value=trimmed)

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


class AntTokens:
    """The tokens the ``ant`` CLI printed, each reused for :data:`ANT_REUSE_S`
    seconds under the ``PATH`` it was found on; held by its owner, not the module.

    Only the last token found is kept (a new ``PATH`` or a failure forgets it),
    so it never holds more than one secret. Its repr shows none.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[str | None, tuple[float, Credential]] = {}

    def fresh(self, path: str | None) -> Credential | None:
        """The token found under ``path`` less than :data:`ANT_REUSE_S` seconds ago, or None."""
        seen = self._seen.get(path)
        if seen is not None and time.monotonic() < seen[0]:
            return seen[1]
        return None

    def keep(self, path: str | None, found: Credential | None) -> None:
        """Remember what the CLI just gave under ``path`` (None: forget)."""
        self._seen.clear()
        if found is not None:
            self._seen[path] = (time.monotonic() + ANT_REUSE_S, found)

    def __repr__(self) -> str:
        return f"AntTokens(held={len(self._seen)})"


def _from_env() -> Credential | None:
    key = _backends.anthropic_api_key()
    if key is not None:
        return Credential(key, "api-key", "ANTHROPIC_API_KEY")
    token = _backends.anthropic_auth_token()
    if token is not None:
        return Credential(token, "bearer", "ANTHROPIC_AUTH_TOKEN")
    return None


def _explicit(value: str | Credential) -> Credential:
    if isinstance(value, Credential):
        return value
    return Credential(value, "api-key", "explicit")


async def resolve(
    explicit: str | Credential | None = None, *, tokens: AntTokens | None = None
) -> Credential:
    """The credential to send, from the first source that has one.

    Raises :class:`~vaelii_llm.errors.LLMBadCredential` for a value holding a
    control character and :class:`~vaelii_llm.errors.LLMNoCredential` when no
    source has one. Only the last source (the ``ant`` CLI) does I/O; its
    token is reused from ``tokens`` when that holds a fresh one.
    """
    if explicit is not None:
        return _explicit(explicit)
    found = _from_env()
    if found is not None:
        return found
    found = await from_ant(tokens=tokens)
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


async def from_ant(
    timeout_s: float = ANT_TIMEOUT_S, *, tokens: AntTokens | None = None
) -> Credential | None:
    """The ``ant`` CLI's access token, or None when it gives none.

    None covers: the CLI absent, a non-zero exit, blank output, output past
    the cap, and no answer inside ``timeout_s`` (the child's process group is
    killed in the last two, see the module docstring). A token
    holding a control character is refused as ``LLMBadCredential``. When the
    awaiting task is cancelled the child is killed and reaped, and the
    cancellation propagates. A token ``tokens`` holds from less than
    :data:`ANT_REUSE_S` seconds ago is reused without running the CLI again
    (without ``tokens``, the CLI runs and nothing is kept).
    """
    if tokens is None:
        return await _run_ant(timeout_s)
    path = os.environ.get("PATH")
    seen = tokens.fresh(path)
    if seen is not None:
        return seen
    found = await _run_ant(timeout_s)
    tokens.keep(path, found)
    return found


async def _run_ant(timeout_s: float) -> Credential | None:
    try:
        child, output = await _spawn_ant()
    except OSError as exc:  # not installed, not executable
        log.debug("the ant CLI could not be started (%s)", type(exc).__name__)
        return None
    ended = False
    try:
        async with asyncio.timeout(timeout_s):
            ended = await _answered(output)
    except TimeoutError:
        log.debug("the ant CLI gave no answer inside %.1f s; treated as no credential", timeout_s)
        return None
    finally:
        await _uncancelled(_end(child, output, kill=not ended))
    if output.over:
        log.debug("the ant CLI printed over %d bytes; treated as no credential", _MAX_ANT_OUTPUT)
        return None
    status = child.get_returncode()
    if status != 0:
        log.debug("the ant CLI exited with status %s; treated as no credential", status)
        return None
    token = bytes(output.data).decode("utf-8", "replace").strip()
    if not token:
        return None
    return Credential(token, "oauth", "ant CLI")


class _AntOutput(asyncio.SubprocessProtocol):
    """The CLI's stdout up to :data:`_MAX_ANT_OUTPUT` (nothing kept past it),
    and two events: ``done`` (its stdout ended, or ran past the cap) and
    ``exited`` (the child ended and was reaped)."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.data = bytearray()
        self.over = False
        self.done: asyncio.Future[None] = loop.create_future()
        self.exited: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if self.over:
            return
        self.data += data.encode() if isinstance(data, str) else data
        if len(self.data) > _MAX_ANT_OUTPUT:
            self.over = True
            self.data.clear()
            _settle(self.done)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        _settle(self.done)

    def process_exited(self) -> None:
        _settle(self.exited)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _answered(output: _AntOutput) -> bool:
    """Wait for the CLI's answer: True once it closed its stdout and exited
    (its own end), False when it printed past the cap, or exited with its
    stdout still held open by a process it left behind, which is waited on
    for at most :data:`_AFTER_EXIT_S` (what the CLI printed is in the pipe
    already)."""
    await asyncio.wait([output.done, output.exited], return_when=asyncio.FIRST_COMPLETED)
    if output.over:
        return False
    if not output.exited.done():  # its stdout closed: its exit follows
        await output.exited
        return not output.over
    if not output.done.done():
        await asyncio.wait([output.done], timeout=_AFTER_EXIT_S)
    return output.done.done() and not output.over


def _exec_ant(
    loop: asyncio.AbstractEventLoop,
) -> Coroutine[object, object, tuple[asyncio.SubprocessTransport, _AntOutput]]:
    """The loop's spawn of the CLI, in a session (and process group) of its own."""
    return loop.subprocess_exec(
        _AntOutput,
        *ANT_COMMAND,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )


async def _spawn_ant() -> tuple[asyncio.SubprocessTransport, _AntOutput]:
    """Start the CLI; a cancellation mid-spawn still ends with the child reaped.

    The spawn runs in its own task that a cancellation does not reach: cut
    short, a loop's spawn kills the child but need not reap it (uvloop leaves
    it a zombie until a later SIGCHLD, or for good once the transport is
    collected). So on cancellation the spawn is let finish, the child it
    started is killed and reaped, and the cancellation then propagates.
    """
    spawn = asyncio.ensure_future(_exec_ant(asyncio.get_running_loop()))
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        await _uncancelled(_reap_spawned(spawn))
        raise


async def _reap_spawned(
    spawn: asyncio.Future[tuple[asyncio.SubprocessTransport, _AntOutput]],
) -> None:
    """Wait for a spawn to finish; kill and reap the child it started, if any."""
    await asyncio.wait([spawn])
    if spawn.cancelled() or spawn.exception() is not None:
        return  # no child was started (an OSError: the CLI is absent)
    await _end(*spawn.result(), kill=True)


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


async def _end(child: asyncio.SubprocessTransport, output: _AntOutput, *, kill: bool) -> None:
    """Close the CLI's stdout and reap it; with ``kill`` (the deadline, the
    cap, a cancellation, or a stdout held open after its exit), SIGKILL its
    process group first, the CLI and every process it started that stayed
    in the group.

    Runs while a cancellation unwinds too (under :func:`_uncancelled`, so a
    second cancellation cannot cut the reap short): the wait is for the
    child's exit alone, short since SIGKILL cannot be ignored, and never for
    the pipe, which is closed on our side first, so a process holding its
    other end (one that left the group with ``setsid``) keeps nothing of ours
    waiting.
    """
    if kill and not output.exited.done():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if hasattr(os, "killpg"):
                os.killpg(child.get_pid(), signal.SIGKILL)  # the group this child leads
        with contextlib.suppress(ProcessLookupError):
            child.kill()
    pipe = child.get_pipe_transport(1)
    if pipe is not None:
        pipe.close()
    await output.exited
    child.close()
