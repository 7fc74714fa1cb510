"""The one module that reads aiohttp's private records (#61): the shape it
knows is checked once per process, and a shape it does not know is said in
one WARNING and read nowhere."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey
from yarl import URL

from vaelii_llm._transport import aiohttp_private


@pytest.fixture
def fresh() -> Iterator[None]:
    aiohttp_private.known.cache_clear()
    yield
    aiohttp_private.known.cache_clear()


def _failure() -> aiohttp.ClientConnectorError:
    fields = dict.fromkeys(ConnectionKey._fields)
    fields["proxy"] = URL("http://user:pw-SECRET@proxy.example:3128")
    return aiohttp.ClientConnectorError(ConnectionKey(**fields), OSError(1, "refused"))


async def test_this_aiohttp_keeps_its_records_where_they_are_read(
    fresh: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="vaelii_llm.transport"):
        assert aiohttp_private.known()
        failure = _failure()
        key = aiohttp_private.connection_key(failure)
        assert key is not None
        assert key.proxy is not None
        assert key.proxy.password == "pw-SECRET"
        async with aiohttp.ClientSession(proxy="http://u:p@proxy.example:3128") as session:
            proxy, _auth = aiohttp_private.session_proxy(session)
            assert str(proxy) == "http://u:p@proxy.example:3128"
    assert caplog.records == []


@pytest.mark.parametrize("drift", ["session", "key"])
async def test_a_shape_not_known_is_said_once_and_read_nowhere(
    drift: str, fresh: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    if drift == "session":
        attrs = aiohttp.ClientSession.ATTRS - {"_default_proxy"}
        monkeypatch.setattr(aiohttp.ClientSession, "ATTRS", attrs)
    else:
        monkeypatch.setattr(aiohttp_private, "_KEY", "_kept_elsewhere")
    with caplog.at_level(logging.WARNING, logger="vaelii_llm.transport"):
        async with aiohttp.ClientSession(proxy="http://u:p@proxy.example:3128") as session:
            for _ in range(3):
                assert aiohttp_private.session_proxy(session) == (None, None)
                assert aiohttp_private.connection_key(_failure()) is None
    [said] = [r for r in caplog.records if r.name == "vaelii_llm.transport"]
    assert said.levelno == logging.WARNING
    assert aiohttp.__version__ in said.getMessage()
    assert "no longer withheld" in said.getMessage()
