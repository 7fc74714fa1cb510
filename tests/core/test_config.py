"""Every switch: its default, its reader, read at call time, explicit beats env."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from vaelii_llm import _backends
from vaelii_llm import config
from vaelii_llm._base_url import normalize_host
from vaelii_llm._transport import urls

ALL_VARS = [s.name for s in config.SWITCHES]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)


def test_every_switch_holds_its_reader() -> None:
    for switch in config.SWITCHES:
        assert callable(switch.reader), switch.name


def test_unset_readings_match_the_default_column() -> None:
    assert config.provider_kind() == "stub"
    assert _backends.ollama_host() == "http://localhost:11434"
    assert _backends.ollama_model() == "phi4:14b"
    assert _backends.ollama_generation_model() == "qwen3-coder:30b"
    assert _backends.ollama_num_ctx() == 8192
    assert _backends.ollama_keep_alive() == "30m"
    assert _backends.ollama_hosts() is None
    assert _backends.anthropic_api_key() is None
    assert _backends.anthropic_auth_token() is None
    assert _backends.anthropic_base_url() == "https://api.anthropic.com"
    assert config.live_llm() is False


def test_values_are_read_at_the_call_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _backends.ollama_model() == "phi4:14b"
    monkeypatch.setenv("VAELII_OLLAMA_MODEL", "llama3:8b")
    assert _backends.ollama_model() == "llama3:8b"
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "Ollama")
    assert config.provider_kind() == "ollama"


def test_explicit_argument_beats_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "ollama")
    monkeypatch.setenv("VAELII_OLLAMA_NUM_CTX", "4096")
    assert config.provider_kind("stub") == "stub"
    assert _backends.ollama_num_ctx(2048) == 2048
    assert _backends.ollama_host("gpu1:8080") == "gpu1:8080"


@pytest.mark.parametrize("raw", ["lots", "", "8k", "-5", "0", "1e4"])
def test_unparseable_num_ctx_yields_the_default(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("VAELII_OLLAMA_NUM_CTX", raw)
    assert _backends.ollama_num_ctx() == 8192


def test_num_ctx_parses_whole_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VAELII_OLLAMA_NUM_CTX", " 16384 ")
    assert _backends.ollama_num_ctx() == 16384


@pytest.mark.parametrize(
    ("ollama_host", "expected"),
    [
        ("0.0.0.0", "http://localhost:11434"),
        ("0.0.0.0:11434", "http://localhost:11434"),
        ("::", "http://localhost:11434"),
        ("[::]:11434", "http://localhost:11434"),
        ("*", "http://localhost:11434"),
        ("http://0.0.0.0:11434", "http://localhost:11434"),
        ("gpu1:11434", "gpu1:11434"),
        ("http://10.0.0.2", "http://10.0.0.2"),
    ],
)
def test_ollama_host_skips_bind_addresses(
    monkeypatch: pytest.MonkeyPatch, ollama_host: str, expected: str
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", ollama_host)
    assert _backends.ollama_host() == expected


def test_our_ollama_host_is_read_before_ollamas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "other:1")
    monkeypatch.setenv("VAELII_OLLAMA_HOST", "mine:2")
    assert _backends.ollama_host() == "mine:2"


def test_credentials_are_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-123\r\n")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "  tok\n")
    assert _backends.anthropic_api_key() == "sk-test-123"
    assert _backends.anthropic_auth_token() == "tok"


def test_blank_hosts_list_is_distinct_from_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VAELII_OLLAMA_HOSTS", "  ")
    assert _backends.ollama_hosts() == ""


@pytest.mark.parametrize(
    ("raw", "live"), [("1", True), ("TRUE", True), ("yes", True), ("0", False), ("no", False)]
)
def test_live_consent(monkeypatch: pytest.MonkeyPatch, raw: str, live: bool) -> None:
    monkeypatch.setenv("VAELII_LLM_LIVE", raw)
    assert config.live_llm() is live


def test_base_url_loses_its_trailing_slash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")
    assert _backends.anthropic_base_url() == "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("https://alice:s3cret@gw.example.com", "https://gw.example.com"),
        ("http://bob:pw@gpu1:8080*2,gpu2, u:p@gpu3", "http://gpu1:8080*2,gpu2, gpu3"),
        ("alice:s3cret@host", "host"),
        ("http://h:1/path@x", "http://h:1/path@x"),  # an @ in the path is no userinfo
        ("gpu1:11434", "gpu1:11434"),
        # a password holding an unencoded @ or comma: the user info runs to the last @
        ("http://user:p@ss-SECRET@host/v1", "http://host/v1"),
        ("https://u:a,b@c@h.example.com:8443/x?y=1@z", "https://h.example.com:8443/x?y=1@z"),
        ("u:p@ss@gpu3,gpu4", "gpu3,gpu4"),
        # a password holding an unencoded #, / or ?, where a parser ends the
        # authority early: cut to the last @ (issue 36)
        ("http://user:pa#ss@host:1/v1", "http://host:1/v1"),
        ("http://u:p/ss@proxy.example:3128", "http://proxy.example:3128"),
        ("http://tok/en+x==@gw.example.com/v1", "http://gw.example.com/v1"),
        ("u:p?ss@gpu3*2,gpu4", "gpu3*2,gpu4"),
    ],
)
def test_hide_userinfo(value: str, shown: str) -> None:
    assert urls.hide_userinfo(value) == shown


@pytest.mark.parametrize(
    "url",
    [
        "http://user:p@ss-SECRET@host:8080/v1",
        "https://u:a,b@c@h.example.com:8443/x?y=1@z",
        "http://u:p%40s@h/",
        "http://user@h:1/p@q",
        "https://a:b@[::1]:8/x#f@g",
    ],
)
def test_hide_userinfo_reads_a_url_as_aiohttp_does(url: str) -> None:
    """What is cut is exactly what yarl (aiohttp's URL) reads as user info."""
    from yarl import URL

    assert urls.hide_userinfo(url) == str(URL(url).with_user(None))


# A distinctive value each switch's variable can hold, and what its reader then reads.
SET_TO = {
    "VAELII_LLM_PROVIDER": ("Ollama", "ollama"),
    "VAELII_OLLAMA_HOST": ("mine:1", "mine:1"),
    "OLLAMA_HOST": ("theirs:2", "theirs:2"),
    "VAELII_OLLAMA_MODEL": ("m:1b", "m:1b"),
    "VAELII_OLLAMA_GENERATION_MODEL": ("g:2b", "g:2b"),
    "VAELII_OLLAMA_NUM_CTX": ("1234", 1234),
    "VAELII_OLLAMA_KEEP_ALIVE": ("5m", "5m"),
    "OLLAMA_API_KEY": (" ok-1\r\n", "ok-1"),
    "VAELII_OLLAMA_HOSTS": ("a*2,b", "a*2,b"),
    "VAELII_POOL_REDIS_URL": (" redis://r:6379/0\n", "redis://r:6379/0"),
    "ANTHROPIC_API_KEY": ("sk-1", "sk-1"),
    "ANTHROPIC_AUTH_TOKEN": ("tok-1", "tok-1"),
    "ANTHROPIC_BASE_URL": ("http://gw:1/", "http://gw:1"),
    "OPENAI_BASE_URL": ("http://gpu1:8000/v1/", "http://gpu1:8000/v1"),
    "OPENAI_API_KEY": (" sk-o\r\n", "sk-o"),
    "VAELII_OPENAI_MODEL": ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),
    "VAELII_ANTHROPIC_MODEL": ("smollm2", "smollm2"),
    "VAELII_OPENAI_HOSTS": ("gpu1:8000*4,gpu2:8000", "gpu1:8000*4,gpu2:8000"),
    "VAELII_OPENAI_SEND_REASONING": ("No", False),
    "VAELII_PROMPT_CACHE": ("No", False),
    "VAELII_LLM_LIVE": ("yes", True),
    "VAELII_LLM_OTEL": ("TRUE", True),
}


@pytest.mark.parametrize("switch", config.SWITCHES, ids=lambda s: s.name)
def test_each_reader_reads_the_variable_its_row_names(
    monkeypatch: pytest.MonkeyPatch, switch: config.Switch
) -> None:
    reader = switch.reader
    unset = reader()
    raw, read = SET_TO[switch.name]
    monkeypatch.setenv(switch.name, raw)
    assert reader() == read != unset


@pytest.mark.parametrize("reader", [config.live_llm, config.otel_enabled])
def test_yes_no_switches_take_the_same_words(
    monkeypatch: pytest.MonkeyPatch, reader: Callable[[], bool]
) -> None:
    row = next(s for s in config.SWITCHES if s.reader is reader)
    for word in row.legal.split():
        for spelt in (word, word.upper(), f" {word}\n"):
            monkeypatch.setenv(row.name, spelt)
            assert reader() is True, spelt
    for word in ("0", "no", "off", "2", "y"):
        monkeypatch.setenv(row.name, word)
        assert reader() is False, word


def test_the_default_host_is_where_a_bare_host_name_reaches() -> None:
    # One Ollama port: the default host and the port a portless host gets agree.
    default = _backends.ollama_host()
    assert normalize_host(default) == normalize_host("localhost") == default
    assert normalize_host("https://gw") == "https://gw:443"


def test_the_credentials_are_the_secret_rows() -> None:
    # `vaelii-llm config` shows a secret row only as set or unset.
    assert {s.name for s in config.SWITCHES if s.secret} == {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "OPENAI_API_KEY",
        "OLLAMA_API_KEY",
    }


@pytest.mark.parametrize("value", [None, "", "  4096 ", "ünïcode", "a=b"])
def test_the_environment_lookup_sees_what_os_environ_holds_now(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    name = "VAELII_TEST_FAST_LOOKUP"
    monkeypatch.delenv(name, raising=False)
    assert config.variable(name) is None
    if value is not None:
        monkeypatch.setenv(name, value)
    assert config.variable(name) == os.environ.get(name) == value
    monkeypatch.delenv(name, raising=False)
    assert config.variable(name) is None


def test_switches_are_read_through_public_interfaces_alone() -> None:
    # No CPython internal (os.environ's _data) and no reader looked up by name
    # (globals()): each row holds its reader, which reads os.environ.
    import ast
    from pathlib import Path

    from vaelii_llm import _backends
    from vaelii_llm import _switches

    for module in (config, _switches, _backends):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        for node in ast.walk(tree):
            assert not (isinstance(node, ast.Attribute) and node.attr == "_data"), module
            assert not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "globals"
            ), module


def test_each_builtin_backends_switches_are_carried_by_its_record() -> None:
    # config declares only the cross-backend rows; a backend's come from its record.
    carried = {row.name for backend in _backends.BUILTIN for row in backend.switch_table()}
    own = {row.name for row in config.SWITCHES} - carried
    assert own == {
        "VAELII_LLM_PROVIDER",
        "VAELII_POOL_REDIS_URL",
        "VAELII_PROMPT_CACHE",
        "VAELII_LLM_LIVE",
        "VAELII_LLM_OTEL",
    }
    assert carried <= {row.name for row in config.SWITCHES}
