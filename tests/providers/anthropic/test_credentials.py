"""Credential resolution: environment order, trimming, the ant CLI and its child process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.support.loopback import refused_url
from vaelii_llm.errors import LLMBadCredential
from vaelii_llm.errors import LLMNoCredential
from vaelii_llm.providers.anthropic import _credentials as credentials
from vaelii_llm.providers.anthropic._credentials import Credential
from vaelii_llm.providers.openai._key import APIKey

SECRET = "sk-ant-test-SECRET-0123456789"
SLEEP = shutil.which("sleep") or "/bin/sleep"  # PATH holds only the fake ant in these tests
HEAD = shutil.which("head") or "/usr/bin/head"
SH = shutil.which("sh") or "/bin/sh"
SETSID = shutil.which("setsid")
needs_setsid = pytest.mark.skipif(SETSID is None, reason="no setsid(1) on this machine")


@pytest.fixture(autouse=True)
def bin_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No real credential and no real ant CLI: PATH holds only an empty bin dir."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def fake_ant(bin_dir: Path, script: str) -> Path:
    path = bin_dir / "ant"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def gone(pid: int) -> bool:
    """True when no process, not even an unreaped zombie, has ``pid``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _children() -> set[int]:
    """This process's children, zombies included (every thread's list)."""
    pids: set[int] = set()
    for children in Path("/proc/self/task").glob("*/children"):
        pids.update(int(pid) for pid in children.read_text().split())
    return pids


async def died(pid: int) -> None:
    """Return once ``pid`` has ended (a zombie counts): the kernel says when,
    through a pidfd, rather than a poll against a clock."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already
    loop = asyncio.get_running_loop()
    ended = loop.create_future()
    loop.add_reader(fd, ended.set_result, None)
    try:
        await ended
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def test_api_key_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "other")
    cred = await credentials.resolve()
    assert cred.kind == "api-key"
    assert cred.headers() == {"x-api-key": SECRET}
    assert cred.betas == ()
    assert cred.source == "ANTHROPIC_API_KEY"


async def test_auth_token_is_a_plain_bearer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", SECRET)
    cred = await credentials.resolve()
    assert cred.kind == "bearer"
    assert cred.headers() == {"Authorization": f"Bearer {SECRET}"}
    assert cred.betas == ()  # the OAuth beta belongs to the ant profile only
    assert credentials.OAUTH_BETA == "oauth-2025-04-20"


async def test_explicit_beats_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    cred = await credentials.resolve(SECRET)
    assert cred.value == SECRET
    assert cred.source == "explicit"
    bearer = await credentials.resolve(Credential(SECRET, "bearer"))
    assert bearer.kind == "bearer"


async def test_crlf_env_value_is_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET + "\r\n")
    cred = await credentials.resolve()
    assert cred.value == SECRET
    assert (await credentials.resolve(" " + SECRET + "\n")).value == SECRET


@pytest.mark.parametrize(
    ("var", "header"),
    [("ANTHROPIC_API_KEY", "x-api-key"), ("ANTHROPIC_AUTH_TOKEN", "Authorization")],
)
async def test_control_char_refused_without_the_value(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, var: str, header: str
) -> None:
    caplog.set_level(logging.DEBUG)
    value = "sk-ant-abc\x07def" if var == "ANTHROPIC_API_KEY" else "tok\r\nX-Injected: 1"
    monkeypatch.setenv(var, value)
    with pytest.raises(LLMBadCredential) as info:
        await credentials.resolve()
    err = info.value
    assert err.header == header
    assert header in str(err)
    for part in ("sk-ant-abc", "def", "tok", "X-Injected"):
        assert part not in str(err)
        assert part not in repr(err)
        assert part not in repr(err.args)
    from vaelii_llm.providers import anthropic

    assert await anthropic.available() is False
    for record in caplog.records:
        text = record.getMessage() + (record.exc_text or "")
        for part in ("sk-ant-abc", "X-Injected"):
            assert part not in text


def test_repr_withholds_value() -> None:
    cred = Credential(SECRET)
    assert SECRET not in repr(cred)
    assert SECRET not in str(cred)
    assert SECRET not in f"{cred}"


async def test_nothing_at_all_is_no_credential() -> None:
    with pytest.raises(LLMNoCredential):
        await credentials.resolve()


async def test_blank_explicit_is_no_credential() -> None:
    with pytest.raises(LLMNoCredential):
        await credentials.resolve("  \r\n")


async def test_ant_profile(bin_dir: Path) -> None:
    fake_ant(
        bin_dir,
        f'[ "$*" = "auth print-credentials --access-token" ] || exit 3\nprintf "{SECRET}\\r\\n"\n',
    )
    cred = await credentials.resolve()
    assert cred.kind == "oauth"
    assert cred.headers() == {"Authorization": f"Bearer {SECRET}"}
    assert cred.value == SECRET
    assert cred.source == "ant CLI"
    assert cred.betas == (credentials.OAUTH_BETA,)


def counting_ant(bin_dir: Path, runs: Path) -> None:
    """An ant CLI that prints the token and leaves one line in ``runs`` per run."""
    fake_ant(bin_dir, f'echo run >> {runs}\nprintf "{SECRET}\\n"\n')


def run_count(runs: Path) -> int:
    return len(runs.read_text().splitlines()) if runs.exists() else 0


async def test_a_token_is_reused_only_from_the_cache_its_caller_holds(
    bin_dir: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    counting_ant(bin_dir, runs)
    tokens = credentials.AntTokens()
    assert (await credentials.resolve(tokens=tokens)).value == SECRET
    assert (await credentials.resolve(tokens=tokens)).value == SECRET
    assert run_count(runs) == 1  # the second found it in the cache
    assert (await credentials.from_ant(tokens=credentials.AntTokens())) is not None
    assert await credentials.from_ant() is not None  # no cache: the CLI runs, nothing kept
    assert run_count(runs) == 3
    assert SECRET not in repr(tokens)


async def test_a_failure_is_never_reused_and_forgets_the_token(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    counting_ant(bin_dir, runs)
    tokens = credentials.AntTokens()
    assert await credentials.from_ant(tokens=tokens) is not None
    monkeypatch.setenv("PATH", str(tmp_path))  # another PATH: no CLI there
    assert await credentials.from_ant(tokens=tokens) is None
    monkeypatch.setenv("PATH", str(bin_dir))
    assert await credentials.from_ant(tokens=tokens) is not None
    assert run_count(runs) == 2  # the token found first was forgotten


async def test_the_backends_probe_and_its_first_turn_run_the_cli_once(
    bin_dir: Path, tmp_path: Path
) -> None:
    from vaelii_llm.providers import anthropic

    runs = tmp_path / "runs"
    counting_ant(bin_dir, runs)
    assert await anthropic._missing(None) is None  # the probe's credential check
    async with anthropic.provider() as model:
        assert (await model.credential()).value == SECRET
    assert run_count(runs) == 1


async def test_ant_nonzero_exit_is_no_credential(bin_dir: Path) -> None:
    fake_ant(bin_dir, 'echo "not logged in" >&2\necho partial\nexit 1\n')
    assert await credentials.from_ant() is None
    with pytest.raises(LLMNoCredential):
        await credentials.resolve()


async def test_ant_blank_output_is_no_credential(bin_dir: Path) -> None:
    fake_ant(bin_dir, "echo\n")
    assert await credentials.from_ant() is None


async def test_ant_control_char_is_bad_credential(bin_dir: Path) -> None:
    fake_ant(bin_dir, 'printf "abc\\001def"\n')
    with pytest.raises(LLMBadCredential) as info:
        await credentials.resolve()
    assert info.value.header == "Authorization"
    assert "abc" not in str(info.value)


async def test_hung_ant_times_out_and_is_killed(bin_dir: Path, tmp_path: Path) -> None:
    """The CLI would print a token, but only once the test lets it, after the
    lookup has answered: None, then, can only be the lookup's own timeout.
    Its group holds a child that, left alone, ends by writing a file: killed
    with the group, it never does."""
    pid_file, go, natural = tmp_path / "pid", tmp_path / "go", tmp_path / "natural"
    fake_ant(
        bin_dir,
        f"echo $$ > {pid_file}\n( {SLEEP} 30; : > {natural} ) &\necho $! >> {pid_file}\n"
        f"while [ ! -e {go} ]; do {SLEEP} 0.01; done\nprintf '{SECRET}\\n'\n",
    )
    # 1 s: ample for a loaded machine to start a shell that writes two lines.
    assert await credentials.from_ant(timeout_s=1.0) is None
    go.touch()
    pids = [int(x) for x in pid_file.read_text().split()]
    assert gone(pids[0])  # the CLI itself, reaped
    await died(pids[1])  # the kernel says when, not a clock
    assert not natural.exists()  # it died of the group's SIGKILL, not of old age


async def test_cancelled_lookup_leaves_no_child(bin_dir: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    fake_ant(bin_dir, f"echo $$ > {pid_file}\nexec {SLEEP} 30\n")
    task = asyncio.create_task(credentials.resolve())
    while not (pid_file.exists() and pid_file.read_text().strip()):  # until the CLI runs
        assert not task.done(), task
        await asyncio.sleep(0.01)
    pid = int(pid_file.read_text())
    assert not gone(pid)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone(pid)  # killed and reaped before the cancellation reached us


async def test_lookup_cancelled_mid_spawn_leaves_no_child(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancellation landing while the loop is still starting the child: the
    spawn is let finish, and its child killed and reaped, before the
    cancellation propagates (uvloop, cut short there, kills but does not reap)."""
    fake_ant(bin_dir, f"exec {SLEEP} 30\n")
    spawn = credentials._exec_ant
    started: list[int] = []

    async def counted(loop: asyncio.AbstractEventLoop) -> Any:
        started.append(0)  # the loop forks before its first suspension
        child, output = await spawn(loop)
        started[-1] = child.get_pid()
        return child, output

    monkeypatch.setattr(credentials, "_exec_ant", counted)
    before = _children()
    task = asyncio.create_task(credentials.resolve())
    await asyncio.sleep(0)  # the task starts the spawn and suspends inside it
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(started) == 1  # the CLI was started: the case is not vacuous
    assert _children() <= before  # no child left, not even a zombie
    assert all(gone(pid) for pid in started if pid)


async def test_absent_cli_is_no_credential() -> None:
    assert await credentials.from_ant() is None


def written(path: Path) -> bool:
    return path.exists() and path.read_text().endswith("\n")


async def appeared(path: Path) -> None:
    """Return once a child process has written a line to ``path`` (the
    caller bounds the wait)."""
    while not written(path):  # noqa: ASYNC110 (another process writes it: no event to await)
        await asyncio.sleep(0.01)


def end_stray(pid_file: Path) -> None:
    """Kill the process the test's fake ant left out of its group, by its id."""
    if pid_file.exists() and pid_file.read_text().strip():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


async def test_an_ant_printing_10_mb_is_killed_at_the_cap(bin_dir: Path, tmp_path: Path) -> None:
    """The cap, not the deadline, ends it: the deadline is a minute away and
    the answer comes inside the outer bound; the CLI is reaped."""
    pid_file = tmp_path / "pid"
    fake_ant(bin_dir, f"echo $$ > {pid_file}\nexec {HEAD} -c 10000000 /dev/zero\n")
    before = _children()
    async with asyncio.timeout(50):  # generous: far below the minute, far above the cap's work
        assert await credentials.from_ant(timeout_s=60.0) is None
    assert gone(int(pid_file.read_text()))
    assert _children() <= before


async def test_resolve_with_a_10_mb_ant_keeps_its_bound(bin_dir: Path, tmp_path: Path) -> None:
    """``resolve`` through the default deadline: no credential, and the outer
    bound (six times the CLI's) is never what ends it."""
    fake_ant(bin_dir, f"{HEAD} -c 10000000 /dev/zero\n{SLEEP} 30\n")
    async with asyncio.timeout(credentials.ANT_TIMEOUT_S * 6):
        with pytest.raises(LLMNoCredential):
            await credentials.resolve()


@needs_setsid
async def test_an_outer_timeout_ends_the_lookup_and_reaps(bin_dir: Path, tmp_path: Path) -> None:
    """A CLI that printed some, still runs, and left a ``setsid`` process
    holding its stdout: an outer ``asyncio.timeout`` ends the lookup (the
    pipe is closed on our side, nothing waits on the stray), the CLI reaped."""
    pid_file, stray = tmp_path / "pid", tmp_path / "stray"
    fake_ant(
        bin_dir,
        f"{SETSID} {SH} -c 'echo $$ > {stray}; exec {SLEEP} 300' &\n"
        f"{HEAD} -c 10000 /dev/zero\necho $$ > {pid_file}\nexec {SLEEP} 30\n",
    )
    before = _children()
    task = asyncio.create_task(credentials.from_ant(timeout_s=60.0))
    try:
        async with asyncio.timeout(30):
            await appeared(pid_file)
            await appeared(stray)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=30)  # prompt: the stray holds the pipe
        assert task in done
        assert task.cancelled()
        assert gone(int(pid_file.read_text()))  # the CLI, killed and reaped
        assert _children() <= before
    finally:
        end_stray(stray)  # lets a lookup that waits on the pipe (the old one) end
        if not task.done():
            await asyncio.wait([task])


@needs_setsid
async def test_a_setsid_grandchild_is_not_waited_on(bin_dir: Path, tmp_path: Path) -> None:
    """The CLI prints its token and exits, leaving a process of its own
    session holding its stdout: the token is taken (reading stops soon after
    the CLI's exit, not at the deadline a minute away), and the stray, which
    is out of reach and documented as such, finds the pipe closed."""
    stray, go, epipe = tmp_path / "stray", tmp_path / "go", tmp_path / "epipe"
    writer = (  # ignores SIGPIPE, so a write to a closed pipe fails and it says so
        f"echo \\$\\$ > {stray}; trap '' PIPE; while [ ! -e {go} ]; do {SLEEP} 0.01; done; "
        f"while echo late; do {SLEEP} 0.05; done; echo closed > {epipe}; exec {SLEEP} 30"
    )
    fake_ant(bin_dir, f'{SETSID} {SH} -c "{writer}" &\n' + "printf '" + SECRET + "\\n'\n")
    try:
        async with asyncio.timeout(30):
            found = await credentials.from_ant(timeout_s=60.0)
        assert found is not None
        assert found.value == SECRET
        go.touch()  # the stray writes now, to the pipe the lookup left
        async with asyncio.timeout(30):
            await appeared(epipe)  # its writes failed: nothing of ours reads
        stray_pid = int(stray.read_text())
        assert not gone(stray_pid)  # not killed: it left the group
        assert stray_pid not in _children()  # and not ours to reap
    finally:
        end_stray(stray)


@pytest.mark.parametrize(
    "secret",
    [
        lambda: Credential(" sk-ant-SECRET-1 \n", "bearer", "ANTHROPIC_AUTH_TOKEN"),
        lambda: APIKey(" sk-SECRET-2 ", "OPENAI_API_KEY"),
    ],
    ids=["messages-api", "openai"],
)
def test_a_credential_holder_is_immutable_copyable_and_withholds_its_value(secret: Any) -> None:
    import copy
    import pickle

    held = secret()
    assert held.value == held.value.strip()
    assert "SECRET" not in repr(held)
    assert "SECRET" not in str(held)
    assert repr(held).endswith("value=<withheld>)")
    with pytest.raises(AttributeError):
        held.value = "other"
    with pytest.raises(AttributeError):
        del held.source
    for made in (copy.copy(held), copy.deepcopy(held), pickle.loads(pickle.dumps(held))):
        assert made == held
        assert hash(made) == hash(held)
        assert type(made) is type(held)


async def test_the_token_is_the_processs_two_providers_and_the_probe_run_the_cli_once(
    bin_dir: Path, tmp_path: Path
) -> None:
    """Why the cache is one per process (#60): every provider of the process
    gets the same token from the CLI, so one cache runs it once for them all."""
    from vaelii_llm.providers import anthropic

    runs = tmp_path / "runs"
    counting_ant(bin_dir, runs)
    anthropic._ANT_TOKENS.keep(None, None)  # as a fresh process has it
    assert await anthropic.unavailable_reason(base_url=refused_url()) is not None  # the probe
    async with anthropic.provider() as first, anthropic.provider() as second:
        found = [await first.credential(), await second.credential()]
    assert {credential.value for credential in found} == {SECRET}
    assert run_count(runs) == 1
    assert SECRET not in repr(anthropic._ANT_TOKENS)
