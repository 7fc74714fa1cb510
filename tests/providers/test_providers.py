"""Backend selection: lazy resolution, one bag of options, fallback to the stub, no leaks."""

from __future__ import annotations

import importlib
import logging
import random
import sys
import types
import typing
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import pytest

from vaelii_llm import _backends
from vaelii_llm import providers
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import TextBlock
from vaelii_llm.providers import Backend
from vaelii_llm.providers import stub

SECRET = "sk-ant-SECRET-do-not-print-0123456789"

FAKE_OPTIONS = ("credential", "model", "host")
"""What the fake backend below names: its functions' keyword parameters (its
``warm`` takes a bare ``**opts``: every one of them)."""


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

    async def available(*, credential: str | None = None) -> bool:
        opts = {} if credential is None else {"credential": credential}
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

    async def warm(*, host: str | None = None) -> str:
        opts = {} if host is None else {"host": host}
        state.warmed.append(opts)
        return "resident"

    module.available = available  # type: ignore[attr-defined]
    module.provider = build("provider")  # type: ignore[attr-defined]
    module.generation_provider = build("generation_provider")  # type: ignore[attr-defined]
    module.warm = warm  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_backend_for_tests", module)
    providers.register(Backend("fake", "fake_backend_for_tests", FAKE_OPTIONS))
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


async def test_the_fallback_warning_says_why_as_the_backend_itself_does(
    fake: FakeBackend, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unavailable_reason(**opts: Any) -> str | None:
        return None if fake.up else "the fake is resting at its host: wake it"

    monkeypatch.setattr(
        sys.modules["fake_backend_for_tests"],
        "unavailable_reason",
        unavailable_reason,
        raising=False,
    )
    fake.up = False
    with caplog.at_level(logging.WARNING, logger="vaelii_llm.providers"):
        await providers.provider("fake", credential=SECRET)
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning == (
        "provider fake cannot answer (the fake is resting at its host: wake it); "
        "the stub answers instead"
    )


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


async def test_register_adds_a_kind_imported_only_when_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VAELII_LLM_PROVIDER", raising=False)
    providers.register(
        Backend(
            " Mine ",
            "no_such_module_for_vaelii_tests",
            ("zone",),
        )
    )
    await providers.provider(zone="b")  # the stub is chosen; "mine" is not imported
    with pytest.raises(ModuleNotFoundError, match="no_such_module_for_vaelii_tests"):
        await providers.provider("MINE")  # a kind is read as configured: trimmed, any case


def test_a_record_naming_the_stubs_namespace_or_no_names_is_refused() -> None:
    with pytest.raises(ValueError, match="namespace"):
        Backend("mine", "anywhere", ("stub",))
    with pytest.raises(TypeError, match="a tuple of option names"):
        Backend("mine", "anywhere", "zone")  # type: ignore[arg-type]


def test_a_kind_declaring_one_option_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declares an option twice"):
        providers.register(Backend("twice", "anywhere", ("zone", "zone")))
    assert "twice" not in _backends.REGISTRY


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


# ---------------------------------------------------------------------------
# One bag of options for every backend


async def test_an_option_another_backend_names_is_accepted_and_not_passed(
    fake: FakeBackend,
) -> None:
    # host is Ollama's, base_url the Messages API's, timeout_ms Ollama's warm-up's:
    # the fake names none of them, so it never sees them.
    p = await providers.provider(
        "fake", credential=SECRET, host="gpu1", base_url="http://x", timeout_ms=5
    )
    assert await answer(p) == "from the provider fake"
    assert fake.probed == [{"credential": SECRET}]
    assert fake.built == [("provider", {"credential": SECRET})]


async def test_the_stub_accepts_the_bag_and_builds_from_its_namespace_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VAELII_LLM_PROVIDER", raising=False)
    p = await providers.provider(host="gpu1", credential=SECRET, stub={"script": ["mine"]})
    assert isinstance(p, stub.StubProvider)
    assert await answer(p) == "mine"
    with pytest.raises(TypeError, match=r"'script'.*stub=\{\.\.\.\}"):
        await providers.provider(script=["the stub's option outside its namespace"])


@pytest.mark.parametrize("entry", ["provider", "generation_provider", "available", "active_kind"])
async def test_every_selection_function_refuses_a_misspelt_option_before_probing(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "fake")
    call = getattr(providers, entry)
    with pytest.raises(TypeError, match=r"provider 'fake'.*'crendential'"):
        await call(crendential=SECRET)
    with pytest.raises(TypeError, match="'hots', 'modle'"):  # every unknown one is named
        await call(hots="h", modle="m", model="fine")
    assert fake.probed == []
    assert fake.built == []


async def test_warm_takes_the_bag_and_refuses_a_misspelt_option(fake: FakeBackend) -> None:
    with pytest.raises(TypeError, match="'hots'"):
        await providers.warm("fake", hots="h")
    with pytest.raises(TypeError, match="'hots'"):
        await providers.warm("stub", hots="h")  # the stub has no warm-up; still checked
    assert fake.warmed == []
    assert await providers.warm("stub", host="h") is None


async def test_a_registered_kind_adds_its_options_to_the_bag(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType("regional_backend_for_tests")
    built: list[str] = []

    def regional(*, region: str = "eu") -> stub.StubProvider:
        built.append(region)
        return stub.provider(default=f"from {region}")

    async def up() -> bool:
        return True

    module.provider = regional  # type: ignore[attr-defined]
    module.available = up  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "regional_backend_for_tests", module)
    with pytest.raises(TypeError, match="'region'"):
        await providers.provider("fake", region="us")
    providers.register(
        Backend(
            "regional",
            "regional_backend_for_tests",
            ("region",),
        )
    )
    p = await providers.provider("fake", region="us")  # known now; the fake never sees it
    assert fake.built == [("provider", {})]
    assert await answer(p) == "from the provider fake"
    p = await providers.provider("regional", region="us", credential=SECRET)
    assert await answer(p) == "from us"
    assert built == ["us"]


async def test_a_backend_receives_what_its_record_declares_and_nothing_else(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType("kwargs_backend_for_tests")
    seen: list[tuple[str, dict[str, Any]]] = []

    def anything(**opts: Any) -> stub.StubProvider:
        seen.append(("provider", opts))
        return stub.provider()

    async def up(**opts: Any) -> bool:
        seen.append(("available", opts))
        return True

    module.provider = anything  # type: ignore[attr-defined]
    module.available = up  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kwargs_backend_for_tests", module)
    providers.register(Backend("loose", "kwargs_backend_for_tests", ("zone",)))
    await providers.provider("loose", zone="b", credential=SECRET, host="h", stub={"script": []})
    # a bare **opts takes every option its record names, and no other kind's
    assert seen == [("available", {"zone": "b"}), ("provider", {"zone": "b"})]
    with pytest.raises(TypeError, match="'hots'"):  # **kwargs does not swallow a misspelling
        await providers.provider("loose", hots="h")


async def test_a_kind_that_will_not_import_still_lends_its_options_to_the_bag(
    fake: FakeBackend,
) -> None:
    providers.register(
        Backend(
            "broken",
            "no_such_module_for_vaelii_tests",
            ("region",),
        )
    )
    p = await providers.provider("fake", region="us")  # checked from the record, not the module
    assert await answer(p) == "from the provider fake"
    assert fake.built == [("provider", {})]
    with pytest.raises(TypeError, match=r"'regoin'; the stub's own"):
        await providers.provider("fake", regoin="us")


async def test_choosing_the_stub_imports_no_other_backend_whatever_the_bag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VAELII_LLM_PROVIDER", raising=False)
    providers.register(
        Backend(
            "never",
            "module_that_must_not_be_imported",
            ("zone",),
        )
    )
    imported: list[str] = []
    real_import = providers.importlib.import_module

    def watch(name: str, package: str | None = None) -> types.ModuleType:
        imported.append(name)
        return real_import(name, package)

    monkeypatch.setattr(providers.importlib, "import_module", watch)
    bag = {"zone": "z", "host": "h", "credential": SECRET, "timeout_ms": 1}
    await providers.provider(**bag, stub={"script": ["x"]})
    await providers.available(**bag)
    await providers.warm(**bag)
    assert await providers.active_kind(**bag) == "stub"
    assert set(imported) == {"vaelii_llm.providers.stub"}


# ---------------------------------------------------------------------------
# The drift guard: each built-in record against its backend's real signatures


def drift(backend: _backends.Backend, module: types.ModuleType) -> list[str]:
    """Where ``backend``'s option names and ``module``'s functions' signatures disagree."""
    found: list[str] = []
    taken: set[str] = set()
    for entry in (*_backends.ENTRY_POINTS, "unavailable_reason"):
        fn: Callable[..., Any] | None = getattr(module, entry, None)
        if fn is None:
            if entry in ("provider", "available"):
                found.append(f"{entry}: missing")
            continue
        if backend.kind == _backends.STUB and entry == "provider":
            continue  # the stub's constructor options are its namespace, not the bag's
        names = _backends.takes(fn)
        if names is None:
            found.append(f"{entry}: takes **kwargs, which no record can name")
            continue
        found.extend(f"{entry}: takes {name!r}, unnamed" for name in sorted(names - backend.names))
        taken |= names
    found.extend(f"no function takes {name!r}" for name in sorted(backend.names - taken))
    return found


@pytest.mark.parametrize("backend", _backends.BUILTIN, ids=lambda b: b.kind)
def test_each_builtin_record_matches_its_backends_signatures(backend: _backends.Backend) -> None:
    assert drift(backend, importlib.import_module(backend.module)) == []
    assert _backends.REGISTRY[backend.kind] is backend


def test_the_drift_guard_sees_each_kind_of_drift() -> None:
    module = types.ModuleType("drifted_backend_for_tests")

    def provider(*, region: int = 1, extra: str | None = None) -> None: ...

    async def warm(**opts: Any) -> None: ...

    module.provider = provider  # type: ignore[attr-defined]
    module.warm = warm  # type: ignore[attr-defined]
    record = _backends.Backend("drifted", module.__name__, ("region", "gone"))
    assert sorted(drift(record, module)) == sorted(
        [
            "available: missing",
            "provider: takes 'extra', unnamed",
            "no function takes 'gone'",
            "warm: takes **kwargs, which no record can name",
        ]
    )


class _Unpacked(typing.TypedDict, total=False):
    zone: str
    depth: int


def test_a_signature_is_read_as_the_options_it_takes() -> None:
    """Keyword parameters, the keys a ``**options: Unpack[...]`` names, or
    anything for a bare ``**kwargs``; a positional-only one is no option."""

    def named(lone: int, /, host: str, *, port: int = 0) -> None: ...

    def unpacked(*, host: str = "", **options: typing.Unpack[_Unpacked]) -> None: ...

    def loose(**opts: Any) -> None: ...

    assert _backends.takes(named) == {"host", "port"}
    assert _backends.takes(unpacked) == {"host", "zone", "depth"}
    assert _backends.takes(loose) is None
    record = _backends.Backend("mine", "anywhere", ("host", "zone"))
    bag = {"host": "h", "zone": "z", "depth": 3, "port": 1}
    assert _backends.routed(record, unpacked, bag) == {"host": "h", "zone": "z"}
    assert _backends.routed(record, loose, bag) == {"host": "h", "zone": "z"}
    assert _backends.routed(record, named, bag) == {"host": "h"}


# ---------------------------------------------------------------------------
# The same call, whichever kind the environment names (real loopback backends)


@pytest.fixture
def no_anthropic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "VAELII_OPENAI_MODEL",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_anthropic_env")
@pytest.mark.parametrize(
    ("kind", "answers"),
    [
        ("stub", "the stub"),
        ("ollama", "Hello! How are you today?"),
        ("anthropic", "ANTHROPIC"),
        ("openai", "Hello! How are you today?"),
        ("openai-responses", "Hello! How can I help?"),
    ],
)
async def test_one_call_serves_whichever_kind_the_environment_names(
    monkeypatch: pytest.MonkeyPatch, kind: str, answers: str
) -> None:
    from tests.support.anthropic_fake import FakeMessagesAPI
    from tests.support.anthropic_fake import generate
    from tests.support.fake_ollama import FakeOllama
    from tests.support.fake_openai import FakeOpenAI
    from tests.support.fake_openai_responses import FakeResponses
    from tests.support.loopback import serve

    transcript = generate(random.Random(5), kinds=["text"], stop_reason="end_turn")
    transcript.message["content"] = [{"type": "text", "text": "ANTHROPIC"}]
    ollama_host = await FakeOllama().start()
    chat = await FakeOpenAI().start()
    responses = await FakeResponses().start()
    try:
        async with serve(FakeMessagesAPI(transcript=transcript).app()) as api_url:
            monkeypatch.setenv("VAELII_LLM_PROVIDER", kind)
            opts = {
                "host": ollama_host.url,
                "credential": SECRET,
                # base_url is the Messages API's and the Chat Completions API's option both
                "base_url": {"openai": chat.base_url, "openai-responses": responses.base_url}.get(
                    kind, api_url
                ),
                "api_key": SECRET,
                "stub": {"default": "the stub"},
            }
            assert await providers.active_kind(**opts) == kind
            async with await providers.provider(**opts) as p:
                assert type(p).__module__.startswith(_backends.REGISTRY[kind].module)
                assert await answer(p) == answers
            with pytest.raises(TypeError, match="'base_ulr'"):
                await providers.provider(host=ollama_host.url, base_ulr=api_url)
    finally:
        await ollama_host.stop()
        await chat.stop()
        await responses.stop()


@pytest.mark.usefixtures("no_anthropic_env")
@pytest.mark.parametrize("kind", ["stub", "ollama", "anthropic", "openai", "openai-responses"])
async def test_the_same_call_falls_back_to_the_stub_when_the_kind_cannot_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, kind: str
) -> None:
    from tests.support.loopback import refused_url

    monkeypatch.setenv("PATH", str(tmp_path))  # no ant CLI to find a credential with
    monkeypatch.setenv("VAELII_LLM_PROVIDER", kind)
    opts = {"host": refused_url(), "credential": None, "base_url": refused_url()}
    p = await providers.provider(**opts, stub={"default": "fallback"})
    assert isinstance(p, stub.StubProvider)
    assert await answer(p) == "fallback"


HOOKS = {
    "stub": set(),
    "ollama": {"read_host", "default_host", "status_lines", "cannot_call_tools", "missing_model"},
    "anthropic": {"status_lines", "drops_tools"},
    "openai": {"read_host", "default_host", "status_lines", "drops_tools"},
    "openai-responses": {"read_host", "default_host", "status_lines", "drops_tools"},
}
"""The hooks each built-in module offers beside selection's functions."""


@pytest.mark.parametrize("backend", _backends.BUILTIN, ids=lambda b: b.kind)
def test_each_builtin_module_offers_its_hooks(backend: _backends.Backend) -> None:
    hooks = set(typing.get_args(_backends.Hook)) - {"unavailable_reason"}
    offered = {name for name in hooks if providers.hook(backend, name) is not None}
    assert offered == HOOKS[backend.kind]
    assert all(callable(providers.hook(backend, name)) for name in offered)
    if backend.host_option is not None:  # a pool builds each host's provider with it
        built_by = _backends.takes(providers.module_of(backend).provider)
        assert built_by is not None
        assert backend.host_option in built_by


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({"host_option": "zone"}, "both host_option and hosts_switch"),
        ({"hosts_switch": "ZONES"}, "both host_option and hosts_switch"),
        ({"host_option": "place", "hosts_switch": "ZONES"}, "none of its options"),
    ],
)
def test_a_record_that_cannot_serve_a_pool_or_a_command_is_refused_when_declared(
    fields: dict[str, str], refused: str
) -> None:
    zone = ("zone",)
    with pytest.raises(ValueError, match=refused):
        Backend("zoned", "anywhere", zone, **fields)  # type: ignore[arg-type]


def test_register_takes_a_record_and_nothing_else() -> None:
    with pytest.raises(TypeError, match=r"providers\.Backend, not str"):
        providers.register("mine")  # type: ignore[arg-type]
    assert "mine" not in _backends.REGISTRY


@pytest.mark.parametrize("backend", _backends.BUILTIN, ids=lambda b: b.kind)
def test_each_builtin_records_switches_are_in_the_table(backend: _backends.Backend) -> None:
    from vaelii_llm import config

    table = {switch.name: switch for switch in config.SWITCHES}
    for name, role in backend.switches().items():
        assert name in table, name
        assert table[name].secret == (role == "key"), name
