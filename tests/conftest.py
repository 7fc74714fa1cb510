"""Shared test plumbing: the live-model consent gate, the event loop lane, and
the aioresponses shim."""

from __future__ import annotations

import asyncio
import os
import signal
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import aiohttp
import pytest

from vaelii_llm import config as vconfig

pytest_plugins = ["pytester"]

LOOPS = ("asyncio", "uvloop")
TEST_LOOP = os.environ.get("VAELII_TEST_LOOP", "").strip().lower() or "asyncio"
"""The event loop every async test runs on: ``VAELII_TEST_LOOP=uvloop`` is the
second CI lane (.ci/run); unset, asyncio's own loop, as the README's command runs."""

if TEST_LOOP not in LOOPS:
    raise pytest.UsageError(f"VAELII_TEST_LOOP={TEST_LOOP!r}; one of {', '.join(LOOPS)}")

if TEST_LOOP == "uvloop":
    import uvloop  # an ImportError here says the lane's venv lacks the test extra

    def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item
    ) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
        """pytest-asyncio's hook: every async test and fixture runs on a uvloop loop."""
        return {"uvloop": uvloop.new_event_loop}


def pytest_report_header(config: pytest.Config) -> str:
    return f"event loop: {TEST_LOOP} (VAELII_TEST_LOOP)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every ``llm`` test, with its reason printed, unless VAELII_LLM_LIVE consents.

    ``pytest -m llm`` selects them (the default run deselects them through
    ``addopts``); consent is the separate half, so a reachable model on the
    machine is never enough to dial out.
    """
    if vconfig.live_llm():
        return
    skip = pytest.mark.skip(reason="needs VAELII_LLM_LIVE=1: the consent to call a real model")
    for item in items:
        if "llm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def ctrl_c_reaches_children() -> Iterator[None]:
    """Children started in the test meet SIGINT as from a terminal (it stops
    them), even when this run ignores it.

    A shell without job control starts a background job (``pytest &``, two CI
    lanes at once) with SIGINT ignored, and a child inherits an ignored signal
    through exec: a server stopped with SIGINT, as Ctrl-C stops it, would
    never hear it (uvloop's spawn resets signals, asyncio's does not). With a
    handler installed here instead, every exec'd child starts with SIGINT at
    its default; the run's own disposition comes back afterwards.
    """
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


# aioresponses 0.7.9 builds aiohttp.ClientResponse without the `stream_writer`
# argument aiohttp 3.14 added (upstream aioresponses issue #289, fix PR #288 not
# released). aiohttp reads only its `output_size`, so a response class that
# supplies a stand-in lets aioresponses work. Pass it as `response_class=` to each
# mocked call; delete this when a fixed aioresponses is released.


class MockedResponse(aiohttp.ClientResponse):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("stream_writer", types.SimpleNamespace(output_size=0))
        super().__init__(*args, **kwargs)
