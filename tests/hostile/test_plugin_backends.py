"""Plug-in backends (issue 47): ``providers.register`` refuses a kind that is
no word or the stub, replaces a built-in kind only when asked, and bounds a
plug-in's probe that never returns.
"""

import asyncio
import time
from pathlib import Path

import pytest

from vaelii_llm import _backends
from vaelii_llm import providers
from vaelii_llm.providers.stub import StubProvider

# -- item 11: providers.register --------------------------------------------------------


@pytest.mark.parametrize(
    "kind",
    ["", "   ", "a\nb", "x" * 10_000, "stub", " STUB ", "1st", "a b", "café", "k" * 33],
    ids=[
        "empty",
        "blank",
        "newline",
        "10000",
        "stub",
        "stub-spaced",
        "digit",
        "space",
        "accent",
        "33",
    ],
)
def test_a_kind_no_word_or_the_stub_is_refused(kind: str, registry: None) -> None:
    with pytest.raises(ValueError, match=r"provider kind is|'stub' is the fallback") as refused:
        providers.register(providers.Backend(kind, "nowhere_for_vaelii_tests"))
    assert len(str(refused.value)) < 300
    assert kind not in _backends.REGISTRY or kind == "stub"


@pytest.mark.parametrize("kind", ["anthropic", " Anthropic ", "OPENAI", "ollama"])
def test_a_built_in_kind_is_replaced_only_when_asked(kind: str, registry: None) -> None:
    built_in = _backends.REGISTRY[kind.strip().lower()]
    with pytest.raises(ValueError, match="already registered; pass replace=True"):
        providers.register(providers.Backend(kind, "shadow_for_vaelii_tests"))
    assert _backends.REGISTRY[kind.strip().lower()] is built_in  # main: the shadow's
    providers.register(providers.Backend(kind, "shadow_for_vaelii_tests"), replace=True)
    assert _backends.REGISTRY[kind.strip().lower()].module == "shadow_for_vaelii_tests"


NEVER_ANSWERS = """
import asyncio

async def available(**options):
    await asyncio.Event().wait()  # a probe that never returns

async def unavailable_reason(**options):
    await asyncio.Event().wait()

def provider(**options):
    raise AssertionError("never built: its probe never said yes")
"""


async def test_a_plug_in_probe_that_never_returns_is_bounded(
    registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "never_answers_for_vaelii.py").write_text(NEVER_ANSWERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    providers.register(providers.Backend("hangs", "never_answers_for_vaelii"))
    monkeypatch.setattr(providers, "PROBE_TIMEOUT_S", 0.5)  # the bound, shortened to test it
    began = time.monotonic()
    async with asyncio.timeout(3 * providers.PROBE_TIMEOUT_S):  # main: forever
        model = await providers.provider("hangs")
        reason = await providers.unavailable_reason("hangs")
    took = time.monotonic() - began
    print(f"two probes that never return: {took:.2f} s")
    assert isinstance(model, StubProvider)
    assert reason == f"hangs's probe did not answer in {providers.PROBE_TIMEOUT_S:g} s"
    assert took < 2 * providers.PROBE_TIMEOUT_S + 2
