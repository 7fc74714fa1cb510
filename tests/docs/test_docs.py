"""The documentation keeps its promises: every block of every page (the README and
each ``docs/**/*.md``, found by a glob) runs as written on the stub or a loopback
server; the generated tables hold every switch and error type the code declares;
the API reference covers exactly the frozen public surface. The site's strict
build itself is the ``docs`` lane (``pytest -m docs``, .ci/run)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import sys
import typing
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.doc_pages import LANGUAGES
from tests.support.doc_pages import ROOT
from tests.support.doc_pages import Pages
from tests.support.doc_pages import blocks
from tests.support.doc_pages import clean_env
from tests.support.doc_pages import page_names
from tests.support.doc_pages import read_pages
from tests.support.doc_pages import run
from tests.support.doc_pages import shell_kind
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.kb_model import ANSWER
from tests.support.kb_model import ollama_reader
from tests.support.surface import EXPORTS
from vaelii_llm import cli
from vaelii_llm import config
from vaelii_llm import errors

PAGES = read_pages()


def load_hooks() -> ModuleType:
    """docs/hooks.py, the site's generator, imported without MkDocs."""
    spec = importlib.util.spec_from_file_location("vaelii_docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = load_hooks()


# -- every page, every block -----------------------------------------------------------


def test_the_pages_are_the_readme_and_every_markdown_file_under_docs() -> None:
    found = {str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")}
    assert set(page_names()) == {"README.md", *found}
    assert {"docs/guides/errors.md", "docs/guides/configuration.md"} <= found


@pytest.mark.parametrize("page", page_names())
def test_every_block_is_a_kind_the_runner_runs(page: str) -> None:
    text = PAGES[page]
    assert text.count("```") % 2 == 0, "an unclosed fence"
    found = blocks(text)
    assert len(found) * 2 == len(re.findall(r"^```", text, re.MULTILINE)), (
        "a fence not at a line start"
    )
    for n, lang, body in found:
        assert lang in LANGUAGES, f"{page}: block {n} is ```{lang}: no test runs it"
        if lang == "python":
            compile(body, f"{page} block {n}", "exec")  # top-level await would not compile
        if lang == "text":  # output shown: it follows the block that prints it
            assert n > 0, f"{page}: block {n}"
            assert found[n - 1][1] in {"sh", "python"}, f"{page}: block {n}"


def vote_model(body: dict[str, Any]) -> list[dict[str, Any]]:
    if body.get("tools") or any(m["role"] == "tool" for m in body["messages"]):
        return ollama_reader(body)
    return [chunk("No, a spider is an arachnid."), final()]  # the vote's turns


@pytest.fixture
async def ollama() -> AsyncIterator[FakeOllama]:
    server = await FakeOllama(script=vote_model).start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def here(ollama: FakeOllama) -> Pages:
    """This checkout's pages, this environment activated as the README says."""
    pages = Pages(ROOT, PAGES, ollama)
    pages.shell = f". {shlex.quote(str(Path(sys.prefix) / 'bin' / 'activate'))}"
    return pages


@pytest.mark.parametrize("page", page_names())
async def test_every_python_block_runs_as_a_file(here: Pages, page: str, tmp_path: Path) -> None:
    assert await here.python_blocks(page, tmp_path) == len(blocks(PAGES[page], "python"))


@pytest.mark.parametrize("page", page_names())
async def test_every_shell_line_runs(here: Pages, page: str) -> None:
    expected = sum(
        len([line for line in body.splitlines() if line.strip()])
        for n, _, body in blocks(PAGES[page], "sh")
        if shell_kind(page, n, body) == "lines"
    )
    assert await here.shell_lines(page) == expected


def test_the_special_shell_blocks_are_each_shown_once(here: Pages) -> None:
    """The blocks run by their own tests below (or by .ci/run and test_pool_redis)."""
    for kind in ("first-commands", "activation", "ask", "serve", "curl", "redis", "local-messages"):
        assert len(here.shell_blocks(kind)) == 1, kind
    assert here.json_blocks() >= 1


async def test_the_ask_block_prints_what_the_page_shows(here: Pages) -> None:
    await here.ask_block()


async def test_the_local_messages_api_block_prints_the_status_the_page_shows(
    here: Pages,
) -> None:
    """#48 item 8: a llama.cpp server on loopback (the Messages API, /v1/models, /props)."""
    from tests.support.anthropic_fake import FakeMessagesAPI
    from tests.support.loopback import serve

    llama = FakeMessagesAPI(
        models=["smollm2"], props={"chat_template_caps": {"supports_tools": True}}
    )
    async with serve(llama.app()) as url:
        await here.local_messages_block(int(url.rsplit(":", 1)[1]))


@pytest.mark.usefixtures("ctrl_c_reaches_children")
async def test_the_web_backend_blocks_serve_what_they_say(here: Pages) -> None:
    answered, streamed = await here.web_blocks()
    assert json.loads(answered)["answer"] == ANSWER
    assert streamed.startswith("event: tool_call\n")
    assert "event: text\n" in streamed
    assert "event: final\n" in streamed


async def test_the_first_request_block_says_the_stub_answered(tmp_path: Path) -> None:
    [body] = [
        b for _, _, b in blocks(PAGES["README.md"], "python") if "Request(" in b and "spider" in b
    ]
    program = tmp_path / "first_request.py"
    program.write_text(body)
    code, out, err = await run([sys.executable, str(program)], clean_env(), tmp_path)
    assert (code, err) == (0, "")
    first = out.splitlines()[0]
    assert first.startswith("StubProvider end_turn [TextBlock(text='No: a spider is an arachnid.")
    assert "The stub said this: no model is set." in first


def test_the_mcp_host_config_names_the_command_by_its_full_path() -> None:
    [body] = [b for text in PAGES.values() for _, _, b in blocks(text, "json") if "mcpServers" in b]
    server = json.loads(body)["mcpServers"]["vaelii-kb"]
    assert server["command"].startswith("/")
    assert server["command"].endswith("/.venv/bin/vaelii-llm")
    assert server["args"][0] == "mcp"


ON_THE_STUB = {"vote": 2}
"""What a command a page names exits with when nothing is configured (the page
says so beside it); every other one answers 0."""


def test_inline_commands_run_on_the_stub(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith(("VAELII_", "ANTHROPIC_", "OLLAMA_", "OPENAI_")):
            monkeypatch.delenv(name)
    commands = {c for text in PAGES.values() for c in re.findall(r"`vaelii-llm ([^`]+)`", text)}
    ran = 0
    for command in sorted(commands):
        argv = shlex.split(command)
        try:
            cli.build_parser().parse_args(argv)
        except SystemExit:  # a command's name, written without its arguments
            capsys.readouterr()
            continue
        code = cli.main(argv)
        capsys.readouterr()
        assert code == ON_THE_STUB.get(argv[0], 0), command
        ran += 1
    assert ran >= 4


def test_the_exit_status_table_is_the_commands() -> None:
    rows = dict(cli.EXIT_STATUSES)  # the page's copy is the generated table's, checked below
    assert set(cli.ASK_EXIT.values()) | {1, cli.ASK_STUB_ONLY, cli.ASK_SERVER_GONE} <= set(rows)
    assert rows[cli.ASK_STUB_ONLY].startswith("the configured backend cannot answer")
    assert "max_tokens" in rows[cli.ASK_EXIT["max_tokens"]]
    (commands,) = [a for a in cli.build_parser()._actions if a.choices and a.dest == "command"]
    assert isinstance(commands.choices, dict)
    for command in commands.choices.values():  # every command's --help shows the one table
        for code in rows:
            assert f"  {code:<4} " in command.epilog, (command.prog, code)


# -- the generated tables ----------------------------------------------------------------


def test_every_relative_link_of_a_page_names_a_file_of_the_tree() -> None:
    """The site builds the API reference's pages; a checkout, the sdist and
    GitHub have none of them, so no page links one (#60)."""
    broken = []
    for page, text in PAGES.items():
        here = (ROOT / page).parent
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", text):
            if "://" not in target and not (here / target).is_file():
                broken.append(f"{page}: {target}")
    assert broken == []


def test_the_generated_tables_are_up_to_date() -> None:
    assert hooks.stale_tables() == []


def table_rows(page: str, name: str) -> list[str]:
    begin, end = hooks.marker(name)
    text = PAGES[page]
    body = text[text.index(begin) + len(begin) : text.index(end)]
    return body.strip().splitlines()[2:]


def test_the_configuration_table_has_one_row_per_switch() -> None:
    rows = table_rows("docs/guides/configuration.md", "configuration table")
    named = [re.match(r"^\| `([A-Z_]+)` \|", row) for row in rows]
    assert [m.group(1) for m in named if m] == [s.name for s in config.SWITCHES]
    for row, switch in zip(rows, config.SWITCHES, strict=True):
        if switch.default is not None:
            assert f"| `{switch.default}` |" in row, switch.name
        else:
            assert "| unset |" in row, switch.name
        assert callable(switch.reader), switch.name
    assert "| `VAELII_LLM_PROVIDER` |" not in PAGES["README.md"]  # the one table is in docs


def test_the_error_table_has_one_row_per_type_and_class() -> None:
    rows = table_rows("docs/guides/errors.md", "error table")
    found = dict(
        re.findall(r"^\| `(llm-[a-z-]+)` \| \[`(LLM\w+)`\]", "\n".join(rows), re.MULTILINE)
    )
    classes = {
        cls.type: cls.__name__
        for cls in map(errors.__dict__.get, errors.__all__)
        if isinstance(cls, type) and issubclass(cls, errors.LLMError)
    }
    assert found == classes
    assert list(found) == list(typing.get_args(errors.ErrorType))


def test_every_error_type_says_what_to_do() -> None:
    """The table is generated; the advice is written. A type with none fails here
    (and the strict build fails on the table's link to its missing anchor)."""
    page = PAGES["docs/guides/errors.md"]
    advice = re.findall(r"^### `(llm-[a-z-]+)` \{#(llm-[a-z-]+)\}$", page, re.MULTILINE)
    assert [kind for kind, _ in advice] == [anchor for _, anchor in advice]
    assert sorted(kind for kind, _ in advice) == sorted(typing.get_args(errors.ErrorType))


@pytest.fixture
def one_more_switch(monkeypatch: pytest.MonkeyPatch) -> config.Switch:
    switch = config.Switch(
        "VAELII_NEW_SWITCH", config.provider_kind, "anything", "x", "Something new."
    )
    monkeypatch.setattr(config, "SWITCHES", (*config.SWITCHES, switch))
    return switch


def test_a_switch_added_without_the_docs_fails_the_check(one_more_switch: config.Switch) -> None:
    assert hooks.stale_tables() == [
        "guides/configuration.md: the configuration table (run python docs/hooks.py)"
    ]
    assert f"| `{one_more_switch.name}` |" in hooks.configuration_table()


def test_an_error_type_added_without_the_docs_fails_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class LLMNew(errors.LLMError):
        """Something new went wrong."""

        type = "llm-new"  # type: ignore[assignment]

    monkeypatch.setattr(errors, "LLMNew", LLMNew, raising=False)
    monkeypatch.setattr(errors, "__all__", [*errors.__all__, "LLMNew"])
    monkeypatch.setattr(
        errors, "ErrorType", typing.Literal[(*typing.get_args(errors.ErrorType), "llm-new")]
    )
    assert hooks.stale_tables() == ["guides/errors.md: the error table (run python docs/hooks.py)"]
    assert "| `llm-new` | [`LLMNew`][vaelii_llm.errors.LLMNew] |" in hooks.error_table()
    # a type with no class is no row to write: the generator refuses
    monkeypatch.setattr(errors, "__all__", [n for n in errors.__all__ if n != "LLMNew"])
    with pytest.raises(KeyError, match="llm-new"):
        hooks.error_table()


# -- the API reference ----------------------------------------------------------------


def test_the_reference_covers_the_frozen_public_surface() -> None:
    assert sorted(hooks.public_modules()) == sorted(EXPORTS)
    for module, names in EXPORTS.items():
        assert sorted(hooks.exported(module)) == names.split(), module
        page = hooks.reference_page(module)
        assert page.startswith(f"::: {module}\n")
        for name in hooks.members(module):
            assert f"        - {name}\n" in page
    submodules = [n for n in EXPORTS["vaelii_llm"].split() if f"vaelii_llm.{n}" in EXPORTS]
    assert submodules
    assert not set(submodules) & set(hooks.members("vaelii_llm"))


def test_a_new_guide_joins_the_navigation() -> None:
    listed = [{"Errors": "guides/errors.md"}]
    nav = hooks.guide_nav(listed)
    assert nav[0] == listed[0]
    assert "guides/agent-frameworks.md" in nav
    assert "guides/errors.md" not in nav[1:]


def test_the_docs_extra_holds_what_the_build_needs() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {r.split(">")[0].split("[")[0] for r in project["optional-dependencies"]["docs"]}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings"} <= wanted
    assert (ROOT / "mkdocs.yml").exists()
    assert shutil.which("bash") is not None
