"""Backend selection: lazy resolution, probe opts, fallback to the stub, no leaks."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from vaelii_llm import providers
from vaelii_llm.protocol import Message, Request, TextBlock
from vaelii_llm.providers import stub

SECRET = "sk-ant-SECRET-do-not-print-0123456789"


class FakeBackend:
    """What a test-registered backend saw."""

    def __init__(self) -> None:
        self.up = True
        self.constructor_raises = False
        self.probe_raises = False
        self.probed: list[dict[str, Any]] = []
        self.built: list[tuple[str, dict[str, Any]]] = []
        self.warmed: list[dict[str, Any]] = []


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBackend]:
    state = FakeBackend()
    module = types.ModuleType("fake_backend_for_tests")
    module.PROBE_OPTS = frozenset({"credential"})  # type: ignore[attr-defined]

    async def available(**opts: Any) -> bool:
        state.probed.append(opts)
        if state.probe_raises:
            raise OSError(f"probe failed with {opts}")
        return state.up

    def build(kind: str) -> Any:
        def constructor(
            *, credential: str | None = None, model: str | None = None
        ) -> stub.StubProvider:
            opts = {k: v for k, v in (("credential", credential), ("model", model)) if v}
            state.built.append((kind, opts))
            if state.constructor_raises:
                raise RuntimeError(f"cannot build with credential={opts.get('credential')}")
            return stub.provider(default=f"from the {kind} fake")

        return constructor

    async def warm(**opts: Any) -> str:
        state.warmed.append(opts)
        return "resident"

    module.available = available  # type: ignore[attr-defined]
    module.provider = build("provider")  # type: ignore[attr-defined]
    module.generation_provider = build("generation_provider")  # type: ignore[attr-defined]
    module.warm = warm  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_backend_for_tests", module)
    monkeypatch.setitem(providers.BACKENDS, "fake", "fake_backend_for_tests")
    monkeypatch.delenv("VAELII_LLM_PROVIDER", raising=False)
    return state


async def answer(p: Any) -> str:
    resp = await p.complete(Request(messages=[Message(role="user", content="q")]))
    return "".join(b.text for b in resp.content if isinstance(b, TextBlock))


async def test_default_is_the_stub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VAELII_LLM_PROVIDER", raising=False)
    p = await providers.provider(stub={"script": ["hello"]})
    assert isinstance(p, stub.StubProvider)
    assert await answer(p) == "hello"
    assert await providers.active_kind() == "stub"


async def test_chosen_backend_is_built_without_the_stub_opts(fake: FakeBackend) -> None:
    p = await providers.provider("fake", credential=SECRET, model="m", stub={"script": ["x"]})
    assert await answer(p) == "from the provider fake"
    assert fake.built == [("provider", {"credential": SECRET, "model": "m"})]


async def test_probe_receives_only_its_own_opts(fake: FakeBackend) -> None:
    await providers.available("fake", credential=SECRET, host="h", timeout_ms=1)
    assert fake.probed == [{"credential": SECRET}]


async def test_environment_chooses_the_kind(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "fake")
    assert await providers.active_kind() == "fake"
    assert await answer(await providers.provider()) == "from the provider fake"
    fake.up = False
    assert await providers.active_kind() == "stub"


async def test_explicit_kind_beats_the_environment(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "fake")
    assert isinstance(await providers.provider("stub"), stub.StubProvider)
    assert fake.built == []


async def test_unavailable_backend_falls_back_with_a_warning(
    fake: FakeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    fake.up = False
    with caplog.at_level(logging.DEBUG):
        p = await providers.provider("fake", credential=SECRET, stub={"script": ["fallback"]})
    assert await answer(p) == "fallback"
    assert fake.built == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "fake" in warnings[0].getMessage()
    assert all(SECRET not in r.getMessage() for r in caplog.records)


async def test_constructor_failure_after_a_good_probe_is_logged_without_opts(
    fake: FakeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    fake.constructor_raises = True
    with caplog.at_level(logging.DEBUG):
        p = await providers.provider("fake", credential=SECRET, stub={"default": "stub speaks"})
    assert await answer(p) == "stub speaks"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    line = warnings[0].getMessage()
    assert "fake" in line
    assert "RuntimeError" in line
    for record in caplog.records:
        assert SECRET not in record.getMessage()
        assert record.exc_info is None  # a traceback would carry the exception's text


async def test_a_probe_that_raises_reads_as_unavailable(fake: FakeBackend) -> None:
    fake.probe_raises = True
    assert await providers.available("fake", credential=SECRET) is False
    assert isinstance(await providers.provider("fake", credential=SECRET), stub.StubProvider)


async def test_generation_provider_uses_the_generation_constructor(fake: FakeBackend) -> None:
    p = await providers.generation_provider("fake")
    assert await answer(p) == "from the generation_provider fake"


async def test_generation_provider_falls_back_to_the_ordinary_constructor(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(sys.modules["fake_backend_for_tests"], "generation_provider")
    p = await providers.generation_provider("fake")
    assert await answer(p) == "from the provider fake"


async def test_warm(fake: FakeBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    assert await providers.warm("stub") is None
    assert await providers.warm("fake", host="h", stub={"x": 1}) == "resident"
    assert fake.warmed == [{"host": "h"}]
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "fake")
    assert await providers.warm() == "resident"


async def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown provider kind 'gpt'"):
        await providers.provider("gpt")
    with pytest.raises(ValueError, match="unknown provider kind"):
        await providers.available("gpt")


def test_register_adds_a_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(providers, "BACKENDS", dict(providers.BACKENDS))
    providers.register("mine", "my.module")
    assert providers.BACKENDS["mine"] == "my.module"


def test_backend_attribute_access_is_lazy_and_checked() -> None:
    assert providers.stub is stub
    with pytest.raises(AttributeError):
        _ = providers.nothing_here


async def test_a_misspelt_option_is_a_type_error_before_any_probe(fake: FakeBackend) -> None:
    with pytest.raises(TypeError, match=r"provider .fake..*hots"):
        await providers.provider("fake", hots="gpu1")
    assert fake.probed == []
    assert fake.built == []


async def test_an_explicit_kind_is_read_case_insensitively(fake: FakeBackend) -> None:
    assert await answer(await providers.provider(" Fake ")) == "from the provider fake"
