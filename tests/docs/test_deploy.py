"""Deployment-grade transport (#24): any event loop, proxies, TLS, a caller's session.

Real parts only: the fake Ollama and loopback servers, a small forward and
CONNECT proxy (tests/support/proxy.py), an HTTPS backend whose certificate comes from
a test CA (trustme), and child processes under ``-W error`` for the
loop-hopping runs (tests/support/loop_hopping.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web
from conftest import Recorded
from fake_ollama import FakeOllama
from fake_ollama import hello
from fake_ollama import merged
from loopback import serve
from proxy import forward_proxy

from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm import telemetry
from vaelii_llm._transport import settings
from vaelii_llm._transport.settings import USER_AGENT
from vaelii_llm._transport.settings import Network
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMError
from vaelii_llm.errors import LLMTimeout
from vaelii_llm.errors import LLMUnreachable
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"
ASK = Request(messages=[Message(role="user", content="hi")], max_tokens=8, timeout_ms=10_000)
ANSWER = "Hello! How are you today?"
SECRET = "s3cr3t-proxy-pass"
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def text(response: Response) -> str:
    return "".join(b.text for b in response.content if isinstance(b, TextBlock))


def everything_shown(err: BaseException) -> str:
    """Every message, repr and text on the error's chain, as a traceback or a
    log line's ``exc_info`` shows it (a context suppressed with ``from None``
    is not shown)."""
    shown = []
    seen: BaseException | None = err
    while seen is not None:
        shown += [str(seen), repr(seen), str(getattr(seen, "text", ""))]
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return "\n".join(shown)


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test names the proxy environment it wants, and no other."""
    for name in (*PROXY_ENV, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOllama]:
    server = await FakeOllama().start()
    try:
        yield server
    finally:
        await server.stop()


# --- any event loop ------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_ollama_process() -> Iterator[str]:
    """The fake Ollama in a process of its own, so each child can reach it."""
    child = subprocess.Popen(
        [sys.executable, str(SUPPORT / "fake_ollama.py")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        yield child.stdout.readline().strip()
    finally:
        child.terminate()
        child.wait(10)
        if child.stdout is not None:
            child.stdout.close()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize(("kind", "answers"), [("turns", 3), ("pydantic-ai", 2)])
def test_one_provider_over_many_event_loops_answers_and_leaves_nothing_open(
    fake_ollama_process: str, kind: str, answers: int, loop: str
) -> None:
    """Three ``asyncio.run`` turns then ``aclose`` in a fourth (or pydantic-ai's
    ``run_sync`` then ``run``): every turn answers, and under ``-W error``
    nothing is reported unclosed (stderr stays empty). The code before #24
    fails here: a closed loop's session, or a hang on uvloop."""
    env = {k: v for k, v in os.environ.items() if k not in PROXY_ENV}
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            str(SUPPORT / "loop_hopping.py"),
            kind,
            loop,
            fake_ollama_process,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert done.stderr == ""
    assert done.returncode == 0
    assert done.stdout.splitlines() == [f"answer: {ANSWER}"] * answers + ["closed: True"]


def test_aclose_from_another_loop_closes_a_session_on_a_running_loop() -> None:
    """A provider used on a loop running in another thread, closed from this
    one: that loop's session is closed (on its own loop), and nothing is left."""
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()

    async def main() -> None:
        server = await FakeOllama().start()
        try:
            provider = ollama.provider(host=server.url)

            async def there() -> aiohttp.ClientSession:
                assert text(await provider.complete(ASK)) == ANSWER
                session = provider._sessions.current()
                assert session is not None
                return session

            session = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(there(), other))
            assert text(await provider.complete(ASK)) == ANSWER  # this loop's own session
            assert len(provider._sessions) == 2
            await provider.aclose()
            assert session.closed
            assert len(provider._sessions) == 0
        finally:
            await server.stop()

    try:
        asyncio.run(main())
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(10)
        other.run_until_complete(other.shutdown_asyncgens())
        other.close()


def test_aclose_after_a_loop_stopped_without_closing_it_drops_that_loops_session() -> None:
    first = asyncio.new_event_loop()
    served = asyncio.new_event_loop()
    server = served.run_until_complete(FakeOllama().start())
    thread = threading.Thread(target=served.run_forever, daemon=True)
    thread.start()
    try:
        provider = ollama.provider(host=server.url)
        assert text(first.run_until_complete(provider.complete(ASK))) == ANSWER
        [(_, (session, _gate, _closer))] = list(provider._sessions._held.items())
        asyncio.run(provider.aclose())  # another loop; the first is stopped, not closed
        assert session.closed
        first.run_until_complete(first.shutdown_asyncgens())  # harmless afterwards
    finally:
        first.close()
        served.call_soon_threadsafe(served.stop)
        thread.join(10)
        served.run_until_complete(server.stop())
        served.close()


# --- a caller's own session ---------------------------------------------------------


async def test_two_providers_on_one_caller_session_close_without_closing_it(
    fake: FakeOllama,
) -> None:
    async with aiohttp.ClientSession() as own:
        one = ollama.provider(host=fake.url, session=own, headers={"X-Gateway": "g1"})
        two = openai.provider(base_url=fake.url + "/v1", session=own)  # any far end will do
        assert text(await one.complete(ASK)) == ANSWER
        assert fake.headers[-1]["X-Gateway"] == "g1"  # the codec's session headers travel
        assert fake.user_agents[-1][1] == USER_AGENT
        items = [item async for item in one.stream(ASK)]
        assert isinstance(items[-1], Response)
        assert text(items[-1]) == ANSWER
        await one.aclose()
        await two.aclose()
        assert one.closed
        assert two.closed
        assert not own.closed
        async with own.get(fake.url + "/api/version") as still:  # still usable
            assert (await still.json())["version"] == fake.version


async def test_deadlines_and_typed_refusals_hold_on_a_caller_session() -> None:
    async def stall(_request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(3600)
        raise AssertionError

    async def busy(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=503, text="busy")

    async with serve(stall) as slow, serve(busy) as refusing, aiohttp.ClientSession() as own:
        request = Request(messages=[Message(role="user", content="hi")], timeout_ms=200)
        with pytest.raises(LLMTimeout):
            await ollama.provider(host=slow, session=own).complete(request)
        with pytest.raises(LLMApiError) as refused:
            await ollama.provider(host=refusing, session=own).complete(ASK)
        assert refused.value.status == 503
        assert not own.closed


async def test_a_caller_session_that_is_closed_or_on_another_loop_is_refused_typed(
    fake: FakeOllama,
) -> None:
    own = aiohttp.ClientSession()
    await own.close()
    with pytest.raises(LLMUnreachable, match="session is closed"):
        await ollama.provider(host=fake.url, session=own).complete(ASK)

    elsewhere = await asyncio.to_thread(asyncio.run, _a_session())
    try:
        with pytest.raises(LLMUnreachable, match="another event loop"):
            await ollama.provider(host=fake.url, session=elsewhere).complete(ASK)
    finally:
        elsewhere._connector = None  # its loop is gone; nothing of it is open


async def _a_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession()


def test_session_with_its_own_settings_is_refused() -> None:
    async def main() -> None:
        async with aiohttp.ClientSession() as own:
            with pytest.raises(ValueError, match="session= is used as the caller made it"):
                ollama.provider(session=own, max_connections=2)

    asyncio.run(main())
    with pytest.raises(TypeError, match="ClientSession"):
        ollama.provider(session="not a session")  # type: ignore[typeddict-item]


# --- proxies -------------------------------------------------------------------------


async def test_a_turn_goes_through_the_environments_proxy(
    fake: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with forward_proxy("user", SECRET) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        provider = ollama.provider(host=fake.url)
        try:
            assert text(await provider.complete(ASK)) == ANSWER
        finally:
            await provider.aclose()
        assert ("POST", fake.url + "/api/chat") in proxy.seen


async def test_no_proxy_covering_the_host_goes_direct(
    fake: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with forward_proxy("user", SECRET) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        provider = ollama.provider(host=fake.url)
        try:
            assert text(await provider.complete(ASK)) == ANSWER
        finally:
            await provider.aclose()
        assert proxy.seen == []


async def test_the_environments_proxy_takes_no_credential_from_netrc(
    fake: FakeOllama, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A ``.netrc`` naming the proxy's host is a credential file: never read
    (aiohttp's own reading of the environment sent its password)."""
    netrc = tmp_path / ".netrc"
    netrc.write_text(f"machine 127.0.0.1 login user password {SECRET}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(netrc))
    async with forward_proxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        provider = ollama.provider(host=fake.url)
        try:
            assert text(await provider.complete(ASK)) == ANSWER
            assert await ollama.available(fake.url)
        finally:
            await provider.aclose()
        assert [target for _, target in proxy.seen] == [
            fake.url + "/api/chat",
            fake.url + "/api/version",
        ]
        assert proxy.authorizations == [None, None]


def test_the_environments_proxy_is_read_by_the_urls_scheme(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://upper:3128")
    monkeypatch.setenv("http_proxy", "http://lower:3128")
    monkeypatch.setenv("HTTPS_PROXY", "proxy.example:8080")  # no scheme: an http:// proxy
    monkeypatch.setenv("NO_PROXY", "internal.example, .corp")
    assert settings.env_proxy("http://api.example/v1") == "http://lower:3128"
    assert settings.env_proxy("https://api.example/v1") == "http://proxy.example:8080"
    assert settings.env_proxy("http://internal.example:11434") is None
    assert settings.env_proxy("https://gpu1.corp/v1") is None
    monkeypatch.setenv("HTTPS_PROXY", f"socks5://user:{SECRET}@proxy.example:1080")
    assert settings.env_proxy("https://api.example/v1") is None
    assert "socks5://proxy.example:1080" in caplog.text
    assert SECRET not in caplog.text


async def test_an_explicit_proxy_is_used_and_never_shown(fake: FakeOllama) -> None:
    async with forward_proxy("user", SECRET) as proxy:
        provider = ollama.provider(host=fake.url, proxy=proxy.url)
        try:
            assert text(await provider.complete(ASK)) == ANSWER
            assert await ollama.available(fake.url, proxy=proxy.url)
        finally:
            await provider.aclose()
        assert [target for _, target in proxy.seen] == [
            fake.url + "/api/chat",
            fake.url + "/api/version",
        ]
        assert SECRET not in repr(provider)
        assert SECRET not in repr(Network(proxy=proxy.url))


@pytest.mark.parametrize("where", ["env", "option"])
async def test_proxy_credentials_never_appear_in_an_error_log_or_span(
    where: str,
    fake: FakeOllama,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    otel: Recorded,
) -> None:
    caplog.set_level(logging.DEBUG)
    otel.enable(capture_content=True)
    shown: list[str] = []
    async with forward_proxy("user", "the-right-one") as proxy:
        wrong = proxy.url.replace("the-right-one", SECRET)
        for url in (wrong, "http://user:" + SECRET + "@127.0.0.1:9"):  # refused; nothing there
            options: dict[str, Any] = {}
            if where == "env":
                monkeypatch.setenv("HTTP_PROXY", url)
            else:
                options["proxy"] = url
            provider = telemetry.instrument(ollama.provider(host=fake.url, **options), "ollama")
            try:
                with pytest.raises(LLMError) as failed:
                    await provider.complete(ASK)
                shown.append(everything_shown(failed.value))
            finally:
                await provider.aclose()
        assert proxy.seen  # the wrong password reached the proxy, which refused it
    assert "407" in shown[0]
    assert "proxy" in shown[1]
    exported = "\n".join(shown) + json.dumps([s.to_json() for s in otel.finished()])
    exported += caplog.text + "\n".join(str(r.__dict__) for r in caplog.records)
    assert len(otel.finished()) == 2
    assert SECRET not in exported


def test_a_proxy_that_is_no_url_is_refused_without_quoting_it() -> None:
    with pytest.raises(ValueError, match="proxy is an http") as refused:
        ollama.provider(proxy="socks5://user:" + SECRET + "@h:1")
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("mode", ["stall", "held_after_done"])
async def test_hostile_far_ends_end_typed_within_budget_through_a_proxy(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await FakeOllama(mode=mode).start()
    try:
        async with forward_proxy() as proxy:
            monkeypatch.setenv("HTTP_PROXY", proxy.url)
            provider = ollama.provider(host=server.url)
            request = Request(messages=[Message(role="user", content="hi")], timeout_ms=300)
            try:
                if mode == "stall":
                    with pytest.raises(LLMTimeout):
                        async for _ in provider.stream(request):
                            pass
                else:  # the answer is whole; what follows it cannot hold the caller
                    items = [item async for item in provider.stream(request)]
                    assert text(items[-1]) == ANSWER  # type: ignore[arg-type]
            finally:
                await provider.aclose()
            assert proxy.seen
    finally:
        await server.stop()


async def test_an_unreachable_upstream_behind_the_proxy_is_typed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loopback import refused_url

    async with forward_proxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        provider = ollama.provider(host=refused_url())
        try:
            with pytest.raises(LLMApiError) as failed:
                await provider.complete(ASK)
        finally:
            await provider.aclose()
    assert failed.value.status == 502  # the proxy's own answer, typed


# --- TLS -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@asynccontextmanager
async def https_ollama(ca: trustme.CA) -> AsyncIterator[str]:
    """An Ollama chat endpoint over HTTPS, its certificate from ``ca``."""

    async def chat(_request: web.Request) -> web.StreamResponse:
        return web.json_response(merged(hello({})))

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    app = web.Application()
    app.router.add_post("/api/chat", chat)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        yield f"https://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_tls_without_the_ca_is_refused_typed_naming_host_and_reason(
    ca: trustme.CA,
) -> None:
    async with https_ollama(ca) as url:
        provider = ollama.provider(host=url)
        try:
            with pytest.raises(LLMUnreachable) as refused:
                await provider.complete(ASK)
        finally:
            await provider.aclose()
    message = str(refused.value)
    assert "TLS with 127.0.0.1:" in message
    assert "certificate" in message  # OpenSSL's reason: unable to get local issuer certificate
    assert isinstance(refused.value.__cause__, aiohttp.ClientConnectorCertificateError)


@pytest.mark.parametrize("given", ["path", "context"])
async def test_tls_answered_with_ssl_naming_the_ca(
    ca: trustme.CA, ca_file: str, given: str
) -> None:
    option: Any = ca_file if given == "path" else ssl.create_default_context(cafile=ca_file)
    async with https_ollama(ca) as url:
        provider = ollama.provider(host=url, ssl=option)
        try:
            assert text(await provider.complete(ASK)) == ANSWER
        finally:
            await provider.aclose()


async def test_tls_answered_with_ssl_cert_file_set(
    ca: trustme.CA, ca_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)
    async with https_ollama(ca) as url:
        provider = ollama.provider(host=url)
        try:
            assert text(await provider.complete(ASK)) == ANSWER
        finally:
            await provider.aclose()


async def test_tls_through_a_connect_proxy(
    ca: trustme.CA, ca_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with https_ollama(ca) as url, forward_proxy("user", SECRET) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        provider = ollama.provider(host=url, ssl=ca_file)
        try:
            assert text(await provider.complete(ASK)) == ANSWER
        finally:
            await provider.aclose()
        assert proxy.seen == [("CONNECT", url.removeprefix("https://"))]
        # The wrong password: the proxy refuses the tunnel, typed, the secret unshown.
        monkeypatch.setenv("HTTPS_PROXY", proxy.url.replace(SECRET, "wrong-" + SECRET))
        provider = ollama.provider(host=url, ssl=ca_file)
        try:
            with pytest.raises(LLMUnreachable, match="the proxy refused the request") as refused:
                await provider.complete(ASK)
        finally:
            await provider.aclose()
        assert "407" in str(refused.value)
        assert SECRET not in everything_shown(refused.value)


async def test_ssl_false_answers_and_warns_once(
    ca: trustme.CA, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(settings, "_warned_unverified", False)
    caplog.set_level(logging.WARNING, "vaelii_llm")
    async with https_ollama(ca) as url:
        for _ in range(2):
            provider = ollama.provider(host=url, ssl=False)
            try:
                assert text(await provider.complete(ASK)) == ANSWER
            finally:
                await provider.aclose()
    assert [r.getMessage() for r in caplog.records if "not verified" in r.getMessage()] == [
        (
            "ssl=False: TLS certificates are not verified "
            "(anyone on the path can read and change turns)"
        )
    ]


def test_a_ca_bundle_that_will_not_load_is_refused_when_built(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot load the CA bundle"):
        ollama.provider(ssl=str(tmp_path / "missing.pem"))
    with pytest.raises(TypeError, match="ssl is"):
        ollama.provider(ssl=3)  # type: ignore[typeddict-item]


# --- max_connections -------------------------------------------------------------------


@pytest.mark.parametrize(("cap", "most"), [(1, 1), (None, 3), (0, 3)])
async def test_max_connections_caps_the_providers_open_connections(
    cap: int | None, most: int
) -> None:
    active = 0
    peak = 0
    all_in = asyncio.Event()

    async def chat(_request: web.Request) -> web.StreamResponse:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if peak == 3:
            all_in.set()
        # Held until all three are in at once, or briefly when the cap forbids it.
        with pytest.raises(TimeoutError) if cap == 1 else _nothing():
            async with asyncio.timeout(0.05):
                await all_in.wait()
        active -= 1
        return web.json_response(merged(hello({})))

    app = web.Application()
    app.router.add_post("/api/chat", chat)
    async with serve(app) as url:
        provider = ollama.provider(host=url, max_connections=cap)
        try:
            answers = await asyncio.gather(*(provider.complete(ASK) for _ in range(3)))
        finally:
            await provider.aclose()
    assert [text(a) for a in answers] == [ANSWER] * 3
    assert peak == most


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def test_max_connections_out_of_shape_is_refused() -> None:
    for bad in (-1, True, 1.5, "4"):
        with pytest.raises(ValueError, match="max_connections"):
            ollama.provider(max_connections=bad)  # type: ignore[typeddict-item]


# --- every HTTP backend takes the same options ------------------------------------------


async def test_every_http_backend_reaches_through_the_same_options(
    ca: trustme.CA, ca_file: str
) -> None:
    """The Messages API and Chat Completions providers take the network options
    too (written once in the skeleton): each refuses the test CA's server
    without it, typed, and reaches it through an explicit proxy."""
    async with https_ollama(ca) as url, forward_proxy("user", SECRET) as proxy:
        for build in (
            lambda **o: anthropic.provider(credential="sk-test", base_url=url, **o),
            lambda **o: openai.provider(base_url=url, **o),
        ):
            plain = build()
            through = build(proxy=proxy.url, ssl=ca_file)
            try:
                with pytest.raises(LLMUnreachable, match=r"TLS with 127\.0\.0\.1"):
                    await plain.complete(ASK)
                with pytest.raises(LLMApiError) as reached:  # no Messages/Chat route there: 404
                    await through.complete(ASK)
                assert reached.value.status in (404, 405)
            finally:
                await plain.aclose()
                await through.aclose()
        assert [method for method, _ in proxy.seen] == ["CONNECT", "CONNECT"]


async def test_probes_take_the_same_options(fake: FakeOllama) -> None:
    """``available`` and ``warm`` reach through the proxy they are given."""

    async def models(_request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async with serve(models) as chat_server, forward_proxy("user", SECRET) as proxy:
        assert await openai.available(chat_server + "/v1", proxy=proxy.url)
        warmed = await ollama.warm(fake.url, proxy=proxy.url, timeout_ms=10_000)
        assert text(warmed) == ANSWER
        assert not await ollama.available(fake.url, proxy="http://127.0.0.1:9")  # none there
    assert [target for _, target in proxy.seen] == [
        chat_server + "/v1/models",
        fake.url + "/api/chat",
    ]
