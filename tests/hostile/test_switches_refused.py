"""Switches refused before any I/O (issue 47): a control character in any
switch, by name; a bad OpenAI switch under ``status``; a base URL carrying
userinfo beside a key.
"""

import contextlib
import socket
from collections.abc import Iterator

import pytest

from vaelii_llm import cli
from vaelii_llm import config
from vaelii_llm.providers import openai

# -- item 13 and the userinfo conflict: switches refused before any I/O ---------------

FORGED = "http://127.0.0.1:{port}/v1\nwhy: all good"
SWITCH_NAMES = [switch.name for switch in config.SWITCHES if not switch.secret]
"""A credential's control character is refused as it becomes a header, naming
it (LLMBadCredential, tests/providers/test_openai.py and tests/providers/test_credentials.py)."""


@pytest.mark.parametrize("name", SWITCH_NAMES)
@pytest.mark.parametrize("control", ["\n", "\x1b[2J", "\x07", "\x85", "\u2028", "\u202e"])
def test_a_control_character_in_any_switch_is_refused_by_name(
    name: str, control: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, f"abcd{control}SECRET-PART")
    with pytest.raises(ValueError, match=name) as refused:
        config.read(name)
    assert "SECRET-PART" not in str(refused.value)
    assert "control character" in str(refused.value)


def test_a_trailing_newline_is_still_trimmed_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1\r\n")
    assert config.read("OPENAI_BASE_URL") == "http://127.0.0.1:8000/v1"


@contextlib.contextmanager
def listening() -> Iterator[socket.socket]:
    """A loopback port that listens and never accepts: whatever connects waits in its queue."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        sock.setblocking(False)
        yield sock


def connected(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"OPENAI_BASE_URL": FORGED}, id="newline"),
        pytest.param(
            {
                "OPENAI_BASE_URL": "http://user:pw-SECRET@127.0.0.1:{port}/v1",
                "OPENAI_API_KEY": "sk-KEY-SECRET",
            },
            id="userinfo-and-key",
        ),
    ],
)
def test_status_refuses_a_bad_openai_switch_before_any_io(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with listening() as sock:
        port = sock.getsockname()[1]
        monkeypatch.setenv("VAELII_LLM_PROVIDER", "openai")
        for name, value in env.items():
            monkeypatch.setenv(name, value.format(port=port))
        code = cli.main(["status"])
        out, err = capsys.readouterr()
        reached = connected(sock)
    print(out, err)
    assert code == 2
    assert not reached  # main: probed the server first
    assert "why: all good" not in out.splitlines()
    assert "OPENAI_BASE_URL" in out + err
    assert "SECRET" not in out + err
    assert "unreachable" not in out + err


def test_a_base_url_with_userinfo_and_a_key_is_a_conflict() -> None:
    with pytest.raises(ValueError, match="base_url carries a user:password@ and api_key") as info:
        openai.provider(base_url="http://u:pw-SECRET@127.0.0.1:9/v1", api_key="sk-SECRET")
    assert "SECRET" not in str(info.value)
    headers = {"Authorization": "Bearer tok"}
    with pytest.raises(ValueError, match="the Authorization header in headers"):
        openai.provider(base_url="http://u:pw@127.0.0.1:9/v1", headers=headers)
    openai.provider(base_url="http://u:pw@127.0.0.1:9/v1")  # alone, each is fine
