"""The web example's page (``GET /``) in a real headless Chromium.

Debian's ``chromium`` and ``chromium-driver``, driven by Selenium (the
``browser`` extra); ``.ci/run`` installs both in a lane of its own. The
example app serves the real Ollama backend against a loopback Ollama
(tests/support/fake_ollama.py); the answer's turn is held until the page shows the
tool call, so the test sees the call arrive before the answer, not only the
end state. A screenshot is written to ``$VAELII_TEST_ARTIFACTS`` (default
``build/test-artifacts``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.support.fake_ollama import FakeOllama
from tests.support.kb_model import ANSWER
from tests.support.kb_model import GOAL
from tests.support.kb_model import QUESTION
from tests.support.kb_model import ollama_reader
from tests.support.web_example import web_backend
from vaelii_llm import Provider
from vaelii_llm import ProviderBase
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import StreamItem
from vaelii_llm.providers import ollama

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]  # a browser start

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1000,760",
)


class HeldAnswer(ProviderBase):
    """The real Ollama provider, whose turn after a tool result waits for :attr:`gate`."""

    def __init__(self, inner: ollama.OllamaProvider) -> None:
        self.inner = inner
        self.gate = asyncio.Event()

    @property
    def model(self) -> str:
        return self.inner.model  # who answers, as the page shows it

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def _hold(self, request: Request) -> None:
        if request.messages[-1].role == "user" and not isinstance(
            request.messages[-1].content, str
        ):
            await self.gate.wait()

    async def complete(self, request: Request) -> Response:
        await self._hold(request)
        return await self.inner.complete(request)

    async def stream(
        self, request: Request, *, deltas: bool = False
    ) -> AsyncGenerator[StreamItem, None]:
        await self._hold(request)
        async with aclosing(self.inner.stream(request, deltas=deltas)) as items:
            async for item in items:
                yield item


def browser_binaries() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.fail(
            "the browser lane needs Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver); .ci/run installs them"
        )
    return chromium, driver


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[str, HeldAnswer]]:
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "ollama")  # the kind the app serves
    fake = await FakeOllama(script=ollama_reader).start()
    held = HeldAnswer(ollama.provider(host=fake.url, model="llama3.2"))

    async def open_model() -> Provider:
        return held

    server = TestServer(web_backend.make_app(open_model), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), held
    finally:
        held.gate.set()
        await server.close()
        await fake.stop()


def open_browser(tmp_path: Path) -> Any:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    chromium, driver = browser_binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


async def test_a_question_typed_into_the_page_shows_the_call_then_the_streamed_answer(
    served: tuple[str, HeldAnswer], tmp_path: Path
) -> None:
    url, held = served
    loop = asyncio.get_running_loop()
    artifacts = Path(os.environ.get("VAELII_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
    shot = artifacts / "web_page.png"

    def drive() -> dict[str, Any]:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        artifacts.mkdir(parents=True, exist_ok=True)
        browser = open_browser(tmp_path)
        try:
            wait = WebDriverWait(browser, 60)
            browser.get(url + "/")
            seen: dict[str, Any] = {"title": browser.title}
            box = browser.find_element(By.ID, "question")
            box.clear()
            box.send_keys(QUESTION)
            browser.find_element(By.ID, "send").click()
            wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#calls li")) == 2)
            seen["before"] = {
                "calls": [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#calls li")],
                "answer": browser.find_element(By.ID, "answer").text,
                "status": browser.find_element(By.ID, "status").text,
            }
            loop.call_soon_threadsafe(held.gate.set)  # now the answer may come
            wait.until(lambda b: b.find_element(By.ID, "status").text.startswith("done"))
            seen["answer"] = browser.find_element(By.ID, "answer").text
            seen["status"] = browser.find_element(By.ID, "status").text
            seen["errors"] = [
                entry
                for entry in browser.get_log("browser")
                if entry.get("level") in ("SEVERE", "ERROR")
            ]
            browser.save_screenshot(str(shot))
            return seen
        finally:
            browser.quit()

    seen = await asyncio.to_thread(drive)
    assert seen["title"] == "Ask the knowledge base"
    call, result = seen["before"]["calls"]
    assert call == f'-> kb_query {{"goal":"{GOAL}"}}'
    assert result.strip().startswith("ok: [{:bindings {?who Muffet}")
    assert seen["before"]["answer"] == ""  # the call is on the page before any answer
    assert seen["before"]["status"] == "asking..."
    assert seen["answer"] == ANSWER
    assert seen["status"] == "done: answered after 2 turn(s), by ollama (llama3.2)"
    assert seen["errors"] == []
    assert shot.read_bytes().startswith(b"\x89PNG")


async def test_the_page_says_why_when_the_configured_backend_cannot_answer(
    tmp_path: Path,
) -> None:
    """Issue #34 item 2: the 503's reason is what the page shows, not a stub's
    line; (#58) the kind and the refusal's type, never the upstream's address."""
    why = "llm-unreachable: Ollama at http://127.0.0.1:9 is unreachable"
    reason = "ollama cannot answer (llm-unreachable); the server's log says why and what to do"

    async def no_model() -> Provider:
        raise web_backend.NoModel("ollama", why)

    server = TestServer(web_backend.make_app(no_model), host="127.0.0.1")
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")

    def drive() -> dict[str, str]:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        browser = open_browser(tmp_path)
        try:
            browser.get(url + "/")
            browser.find_element(By.ID, "send").click()
            status = browser.find_element(By.ID, "status")
            WebDriverWait(browser, 60).until(lambda b: status.text not in ("", "asking..."))
            return {"status": status.text, "class": status.get_attribute("class") or ""}
        finally:
            browser.quit()

    try:
        seen = await asyncio.to_thread(drive)
    finally:
        await server.close()
    assert seen == {"status": f"no-model: {reason}", "class": "error"}


async def ask_on_the_page(app: Any, tmp_path: Path) -> dict[str, str]:
    """Serve ``app``, ask the page's default question, and read what it shows."""
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")

    def drive() -> dict[str, str]:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        browser = open_browser(tmp_path)
        try:
            browser.get(url + "/")
            browser.find_element(By.ID, "send").click()
            status = browser.find_element(By.ID, "status")
            WebDriverWait(browser, 60).until(lambda b: status.text.startswith("done"))
            return {
                "answer": browser.find_element(By.ID, "answer").text,
                "notice": browser.find_element(By.ID, "notice").text,
                "status": status.text,
            }
        finally:
            browser.quit()

    try:
        return await asyncio.to_thread(drive)
    finally:
        await server.close()


async def test_the_stub_named_is_shown_as_the_stub_named_and_who_answered(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """#48 item 7: with VAELII_LLM_PROVIDER=stub the page said "No model is
    configured: set VAELII_LLM_PROVIDER" (it was set) and nothing of who answered."""
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "stub")
    seen = await ask_on_the_page(web_backend.make_app(), tmp_path)
    assert seen == {
        "answer": web_backend.STUB_NAMED_ANSWER,
        "notice": "",
        "status": "done: answered after 1 turn(s), by the scripted stub, not a model "
        "(named as the provider)",
    }


async def test_the_page_says_when_the_far_end_ignored_the_tools(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """#48 item 5: a far end that read the prompt without the tools (74 input
    tokens, as llama-server with SmolLM2's own template) is said on the page."""
    from vaelii_llm import TextBlock
    from vaelii_llm import Usage
    from vaelii_llm.providers import stub

    monkeypatch.setenv("VAELII_LLM_PROVIDER", "stub")

    async def open_model() -> Provider:
        said = Response(
            content=[TextBlock(text="Nobody.")],
            stop_reason="end_turn",
            usage=Usage(input_tokens=74),
        )
        return stub.provider(script=[said])

    seen = await ask_on_the_page(web_backend.make_app(open_model), tmp_path)
    assert seen["answer"] == "Nobody."
    assert seen["notice"].startswith("the far end ignored the ")
    assert seen["notice"].endswith("Ollama: a model with the tools capability)")
