"""A backend the package does not hold gets what a built-in one gets from its
record alone: selection, a vote pool over its hosts, ``vaelii-llm status``
with its why-line and status lines, ``vaelii-llm config`` and ``config.read``
with its switches (the rows its record carries and the variables its roles
name), and ``vaelii-llm vote``.

The backend is a module written to a temporary folder (not in the package),
registered with one :class:`~vaelii_llm.providers.Backend` record; nothing of
the package is edited or patched.
"""

from __future__ import annotations

import os
import textwrap
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from vaelii_llm import _backends
from vaelii_llm import cli
from vaelii_llm import config
from vaelii_llm import pool
from vaelii_llm import providers
from vaelii_llm import telemetry
from vaelii_llm.errors import LLMBadHosts
from vaelii_llm.providers import Backend
from vaelii_llm.providers import Option

if TYPE_CHECKING:
    from conftest import Recorded

KIND = "farfield"
HOSTS = "FARFIELD_HOSTS"
ZONE = "FARFIELD_ZONE"


def read_zone() -> str:
    """The farfield's own reader of its own switch: a compass word, lower case."""
    return (os.environ.get(ZONE) or "").strip().lower() or "north"


ZONE_ROW = config.Switch(
    ZONE, read_zone, "north east south west", "north", "Which zone the farfield answers from."
)

MODULE = """
from vaelii_llm import ProviderBase, Response, TextBlock, Usage

DOWN = "farfield-down.example"


class Farfield(ProviderBase):
    \"\"\"A provider class of its own: no telemetry, no span, no import of either.\"\"\"

    def __init__(self, url):
        self.url = url
        self.base_url = f"http://{url}:7070"
        self.model = "farfield-1"

    async def complete(self, request):
        return Response(
            content=[TextBlock(text=f"Yes, said {self.url}")],
            stop_reason="end_turn",
            usage=Usage(input_tokens=3, output_tokens=3),
            model=self.model,
        )

    async def stream(self, request, *, deltas=False):
        response = await self.complete(request)
        for block in response.content:
            yield block
        yield response


def provider(url="farfield-default.example"):
    return Farfield(url)


async def available(url="farfield-default.example"):
    return await unavailable_reason(url) is None


async def unavailable_reason(url="farfield-default.example"):
    if url == DOWN:
        return f"the farfield at {url} is down; start it, or point FARFIELD_HOSTS elsewhere"
    return None


def read_host(text):
    text = text.strip()
    if "/" in text:
        raise ValueError("a farfield host is a bare name")
    return text + ".example"


def default_host():
    return "farfield-default.example"


async def status_lines(ready):
    yield "farfield:   " + ("ready" if ready else "resting")
"""


@pytest.fixture
def farfield(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Backend:
    (tmp_path / "farfield_backend.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    record = Backend(
        KIND,
        "farfield_backend",
        (Option("url", "str", "farfield-default.example", ("provider", "available")),),
        host_option="url",
        hosts_switch=HOSTS,
        key_switch="FARFIELD_KEY",
        read_host="farfield_backend:read_host",
        default_host="farfield_backend:default_host",
        status_lines="farfield_backend:status_lines",
        switch_rows=(ZONE_ROW,),
    )
    providers.register(record)  # the registry is restored after the test (conftest.py)
    monkeypatch.setenv("VAELII_LLM_PROVIDER", KIND)
    monkeypatch.delenv("VAELII_POOL_REDIS_URL", raising=False)
    return record


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_selection_builds_it_and_falls_back_with_its_own_reason(farfield: Backend) -> None:
    async with await providers.provider(url="here.example") as model:
        assert getattr(model, "url", None) == "here.example"
    assert await providers.unavailable_reason(url="farfield-down.example") == (
        "the farfield at farfield-down.example is down; start it, or point FARFIELD_HOSTS elsewhere"
    )
    assert await providers.active_kind(url="farfield-down.example") == "stub"


async def test_a_pool_spreads_over_its_hosts_read_by_its_record(
    farfield: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOSTS, "gpu1*2, gpu2")
    async with await pool.pool_from_config(kind=KIND) as voters:
        assert voters.size == 4  # gpu2 takes the default two calls at once
        assert [getattr(p, "url", None) for p in voters.providers] == [
            "gpu1.example",
            "gpu2.example",
        ]
    monkeypatch.delenv(HOSTS)
    async with await pool.pool_from_config() as voters:  # the configured kind, its one host
        assert [getattr(p, "url", None) for p in voters.providers] == ["farfield-default.example"]
    monkeypatch.setenv(HOSTS, "gpu1/v1")
    with pytest.raises(LLMBadHosts) as info:
        await pool.pool_from_config(kind=KIND)
    assert "a farfield host is a bare name" in str(info.value)
    monkeypatch.setenv(HOSTS, " ")
    with pytest.raises(LLMBadHosts, match=f"{HOSTS} is blank"):
        await pool.pool_from_config(kind=KIND)


def test_status_prints_its_why_line_and_its_own_lines(
    farfield: Backend, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(capsys, "status")
    assert (code, out) == (
        0,
        f"configured: {KIND}\nanswering:  {KIND}\nfarfield:   ready\n",
    )
    monkeypatch.setattr(
        "farfield_backend.unavailable_reason",
        _always("the farfield is resting; wake it"),
    )
    code, out, _ = run(capsys, "status")
    assert code == 2
    assert out.splitlines() == [
        f"configured: {KIND}",
        "answering:  stub",
        "why:        the farfield is resting; wake it",
        "farfield:   resting",
    ]


def _always(reason: str):  # type: ignore[no-untyped-def]
    async def unavailable_reason(url: str = "") -> str:
        return reason

    return unavailable_reason


def test_config_prints_its_switches_its_key_only_as_set(
    farfield: Backend, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOSTS, "gpu1*2")
    monkeypatch.setenv("FARFIELD_KEY", "ff-secret-key")
    code, out, _ = run(capsys, "config")
    assert code == 0
    assert f"{HOSTS:32} 'gpu1*2'" in out.splitlines()
    assert f"{'FARFIELD_KEY':32} set" in out.splitlines()
    assert "ff-secret-key" not in out


def test_vote_runs_over_its_hosts_and_blames_the_host_that_is_down(
    farfield: Backend, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOSTS, "gpu1*2,gpu2")
    code, out, err = run(capsys, "vote", "--votes", "3", "Is the sky up?")
    assert code == 0, err
    assert out.startswith("verdict: yes  tally: yes 3, no 0  failed: 0 of 3")
    # Every turn fails: the why-line is the farfield's own, for its host that is down.
    monkeypatch.setenv(HOSTS, "farfield-down")
    monkeypatch.setattr("farfield_backend.read_host", lambda text: text.strip() + ".example")
    monkeypatch.setattr("farfield_backend.provider", _failing)
    code, out, err = run(capsys, "vote", "--votes", "1", "Is the sky up?")
    assert code == 2
    assert err.strip() == (
        "cannot-answer: the farfield at farfield-down.example is down; "
        "start it, or point FARFIELD_HOSTS elsewhere"
    )


def _failing(url: str = "") -> object:
    from vaelii_llm.errors import LLMUnreachable
    from vaelii_llm.providers import stub

    return stub.provider(default=LLMUnreachable(f"the farfield at {url}", "refused"))


def test_its_own_switches_are_listed_by_the_command_and_read_by_name(
    farfield: Backend, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ZONE, raising=False)
    monkeypatch.delenv(HOSTS, raising=False)
    code, out, _ = run(capsys, "config")
    assert code == 0
    assert f"{ZONE:32} unset (default north)" in out.splitlines()
    assert config.read(ZONE) == "north"
    assert config.read(HOSTS) is None  # a role's variable no row declares: plain text
    monkeypatch.setenv(ZONE, " South ")
    monkeypatch.setenv(HOSTS, " gpu1*2 ")
    monkeypatch.setenv("FARFIELD_KEY", "ff-secret-key")
    code, out, _ = run(capsys, "config")
    assert f"{ZONE:32} ' South '" in out.splitlines()
    assert (config.read(ZONE), config.read(HOSTS)) == ("south", "gpu1*2")
    assert "ff-secret-key" not in out
    rows = {row.name: row for row in farfield.switch_table()}
    assert list(rows) == [ZONE, HOSTS, "FARFIELD_KEY"]
    assert rows["FARFIELD_KEY"].secret
    assert not rows[HOSTS].secret
    assert ZONE not in {row.name for row in config.SWITCHES}  # the built-in table stays as it is


async def test_its_turns_make_the_built_in_chat_span_and_the_command_lists_its_switches(
    farfield: Backend,
    otel: Recorded,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backend holds no telemetry code: selection hands it out traced, as
    a built-in provider is, and its record's switches reach the command."""
    from vaelii_llm import Message
    from vaelii_llm import Request
    from vaelii_llm.providers import stub

    monkeypatch.setenv(ZONE, "west")
    otel.enable()
    ask = Request(
        messages=[Message(role="user", content="Is the sky up?")], max_tokens=16, model="farfield-1"
    )
    async with await providers.provider(url="gpu7.example") as model:
        answered = await model.complete(ask)
        async with aclosing(model.stream(ask)) as items:
            assert [item async for item in items][-1] == answered
    async with telemetry.instrument(stub.provider(script=[answered, answered]), "stub") as built_in:
        await built_in.complete(ask)
        async with aclosing(built_in.stream(ask)) as items:
            assert [item async for item in items][-1] == answered
    ours_whole, ours_streamed, stub_whole, stub_streamed = otel.finished()
    for ours, theirs in ((ours_whole, stub_whole), (ours_streamed, stub_streamed)):
        assert (
            (ours.name, ours.kind) == (theirs.name, theirs.kind) == ("chat farfield-1", ours.kind)
        )
        mine, built = dict(ours.attributes or {}), dict(theirs.attributes or {})
        assert (mine.pop("gen_ai.provider.name"), built.pop("gen_ai.provider.name")) == (
            KIND,
            "stub",
        )
        assert (mine.pop("server.address"), mine.pop("server.port")) == ("gpu7.example", 7070)
        assert mine.keys() == built.keys()  # the rest: the same attributes, as a built-in's
        assert mine.get("gen_ai.response.model") == "farfield-1"
    code, out, _ = run(capsys, "config")
    assert code == 0
    assert f"{ZONE:32} 'west'" in out.splitlines()


def test_an_unregistered_kinds_switches_are_unknown() -> None:
    # The registry is as the fixture found it: the farfield's switches are gone with it.
    assert KIND not in _backends.REGISTRY
    with pytest.raises(KeyError, match="no switch 'FARFIELD_ZONE'"):
        config.read(ZONE)
    assert ZONE not in {row.name for row in config.every_switch()}


def test_a_record_whose_key_row_is_no_secret_is_refused() -> None:
    shown = config.Switch("MINE_KEY", read_zone, "a key", None, "The key.")
    with pytest.raises(ValueError, match="MINE_KEY is its key switch; its row is a secret"):
        Backend("mine", "anywhere", key_switch="MINE_KEY", switch_rows=(shown,))
    with pytest.raises(TypeError, match="switch_rows is a tuple of Switch rows"):
        Backend("mine", "anywhere", switch_rows=("MINE_ZONE",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="declares a switch twice"):
        Backend("mine", "anywhere", switch_rows=(ZONE_ROW, ZONE_ROW))


def test_a_name_any_record_holds_secret_is_shown_only_as_set(
    farfield: Backend, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second kind names the farfield's zone and the Ollama model as its keys:
    # the command then shows neither value, whoever declared the row first.
    providers.register(
        Backend("nearfield", "anywhere", key_switch=ZONE),
    )
    providers.register(
        Backend("midfield", "anywhere", key_switch="VAELII_OLLAMA_MODEL"),
    )
    monkeypatch.setenv(ZONE, "secret-zone")
    monkeypatch.setenv("VAELII_OLLAMA_MODEL", "secret-model")
    _, out, _ = run(capsys, "config")
    assert f"{ZONE:32} set" in out.splitlines()
    assert f"{'VAELII_OLLAMA_MODEL':32} set" in out.splitlines()
    assert "secret-" not in out
    assert config.read(ZONE) == "secret-zone"  # read by the first row's reader
