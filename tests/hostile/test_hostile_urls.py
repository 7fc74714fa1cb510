"""A base URL or proxy URL whose password holds an unencoded ``#``, ``/`` or
``?`` (issue 36, item 10): a URL parser ends the authority there and reads the
rest as a path, query or fragment, so the password was shown whole in
``repr(provider)``, in errors and in ``vaelii-llm config``. Each shape is
checked in all three, against a dead loopback port."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.loopback import refused_url
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import cli
from vaelii_llm._transport import urls
from vaelii_llm.errors import LLMError
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai

PASSWORDS = ("pa#ss-w0rd", "pa/ss-w0rd", "pa?ss-w0rd", "p@ss#w0rd/x?y")
"""Each with a ``#``, ``/`` or ``?`` a parser stops at (the last with an ``@`` too)."""

ASK = Request(messages=[Message(role="user", content="hi")], max_tokens=8, timeout_ms=5_000)


def everything_shown(err: BaseException) -> str:
    """Every message, repr, text attribute and traceback on the error's chain."""
    shown = ["".join(traceback.format_exception(err))]
    seen: BaseException | None = err
    while seen is not None:
        shown += [str(seen), repr(seen), *map(str, seen.args)]
        shown += [str(v) for v in getattr(seen, "__dict__", {}).values()]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(shown)


def _secret_parts(password: str) -> list[str]:
    """The password, and each piece of it a parser would show apart."""
    return [password, *(p for p in password.replace("?", "#").split("#") if len(p) >= 4)]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize(
    "shape", ["http://user:{pw}@{host}/v1", "http://{pw}@{host}/v1", "{host_only}"]
)
def test_hide_userinfo_cuts_a_password_a_parser_would_end_early(password: str, shape: str) -> None:
    host = "gw.example.com:8443"
    if shape == "{host_only}":  # a host list entry with no scheme
        value, shown = f"gpu1:1,user:{password}@{host},gpu3", f"gpu1:1,{host},gpu3"
    else:
        value, shown = shape.format(pw=password, host=host), f"http://{host}/v1"
    assert urls.hide_userinfo(value) == shown
    assert urls.userinfo(value) in {f"user:{password}", password}


BUILDERS: dict[str, Callable[[str], Any]] = {
    # no key beside it: a URL's password and a key together are refused at once (#47)
    "openai base_url": lambda url: openai.provider(base_url=url),
    "anthropic base_url": lambda url: anthropic.provider(base_url=url, credential="k"),
    "ollama proxy": lambda url: ollama.provider(host=refused_url(), proxy=url),
    "openai proxy": lambda url: openai.provider(base_url=refused_url(), proxy=url),
}


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("where", BUILDERS)
async def test_a_password_a_parser_ends_early_shows_nowhere(password: str, where: str) -> None:
    dead = refused_url().removeprefix("http://")
    provider = BUILDERS[where](f"http://user:{password}@{dead}/v1")
    try:
        with pytest.raises(LLMError) as raised:
            await provider.complete(ASK)
    finally:
        await provider.aclose()
    shown = f"{provider!r}\n{everything_shown(raised.value)}"
    for part in _secret_parts(password):
        assert part not in shown, (part, shown)


@pytest.mark.parametrize("password", PASSWORDS)
def test_ollama_refuses_such_a_host_without_showing_it(password: str) -> None:
    with pytest.raises(ValueError, match="carries a user:password") as raised:
        ollama.provider(host=f"http://user:{password}@127.0.0.1:1")
    for part in _secret_parts(password):
        assert part not in everything_shown(raised.value)


@pytest.mark.parametrize("password", PASSWORDS)
def test_config_shows_no_such_password(
    password: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"https://alice:{password}@gw.example.com/a")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://{password}@gpu1:8000/v1")
    monkeypatch.setenv("VAELII_OLLAMA_HOSTS", f"http://bob:{password}@gpu1:8080*2,gpu2")
    monkeypatch.setenv("VAELII_POOL_REDIS_URL", f"redis://:{password}@r:6379/0")
    assert cli.main(["config"]) == 0
    out = capsys.readouterr().out
    for part in _secret_parts(password):
        assert part not in out, (part, out)
    for shown in ("gw.example.com/a", "gpu1:8000/v1", "gpu1:8080*2,gpu2", "r:6379/0"):
        assert shown in out
