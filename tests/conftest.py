"""Shared test plumbing: the live-model consent gate and the aioresponses shim."""

from __future__ import annotations

import types
from typing import Any

import aiohttp
import pytest

from vaelii_llm import config as vconfig

pytest_plugins = ["pytester"]


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




# aioresponses 0.7.9 builds aiohttp.ClientResponse without the `stream_writer`
# argument aiohttp 3.14 added (upstream aioresponses issue #289, fix PR #288 not
# released). aiohttp reads only its `output_size`, so a response class that
# supplies a stand-in lets aioresponses work. Pass it as `response_class=` to each
# mocked call; delete this when a fixed aioresponses is released.


class MockedResponse(aiohttp.ClientResponse):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("stream_writer", types.SimpleNamespace(output_size=0))
        super().__init__(*args, **kwargs)
