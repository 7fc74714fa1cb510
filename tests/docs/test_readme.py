"""The README keeps its promises: two commands first, the activation line before
every other command, links that lead somewhere, and the package as published
(the sdist and the wheel) runs the README and every documentation page as
written. The blocks of every page run in this environment in tests/docs/test_docs.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.doc_pages import FIRST_COMMANDS
from tests.support.doc_pages import ROOT
from tests.support.doc_pages import Pages
from tests.support.doc_pages import blocks
from tests.support.doc_pages import clean_env
from tests.support.doc_pages import lines
from tests.support.doc_pages import page_names
from tests.support.doc_pages import read_pages
from tests.support.doc_pages import run
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.kb_model import ANSWER
from tests.support.kb_model import QUESTION
from tests.support.kb_model import ollama_reader

README = (ROOT / "README.md").read_text()


def test_readme_opens_with_exactly_two_commands() -> None:
    block = re.search(r"```sh\n(.*?)```", README, re.DOTALL)
    assert block is not None
    assert README.index("```sh") < README.index("## ")
    found = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(found) == 2
    assert "examples/quickstart.py" in found[0]
    assert "[test]" in found[1]
    assert "pytest" in found[1]


def test_the_readme_says_how_to_activate_the_environment_its_commands_use() -> None:
    shown = [body.strip() for _, _, body in blocks(README, "sh") if "bin/activate" in body]
    assert shown == [". .venv/bin/activate"]
    first = README.index(shown[0])
    for _, _, body in blocks(README, "sh")[2:]:  # every command after the two and the activation
        assert README.index(body) > first
    assert ".venv/bin/python examples/quickstart.py" in README  # the first command


def test_the_readme_names_the_docs_command_ci_runs() -> None:
    command = ".venv/bin/pip install -q -e '.[docs]' && .venv/bin/mkdocs build --strict"
    assert f"`{command}`" in README
    assert command in (ROOT / ".ci" / "run").read_text()


def test_the_docs_lane_silences_the_themes_end_of_life_notice_and_names_its_successor() -> None:
    """Material for MkDocs prints an end-of-life notice on every build (#48):
    the lane silences it before it builds, and the development page says why
    and names the successor."""
    lane = (ROOT / ".ci" / "run").read_text()
    build = ".venv/bin/mkdocs build --strict"
    assert "export NO_MKDOCS_2_WARNING=1" in lane
    assert lane.index("export NO_MKDOCS_2_WARNING=1") < lane.rindex(f"&& {build}")
    development = (ROOT / "docs" / "development.md").read_text()
    assert "NO_MKDOCS_2_WARNING=1" in development
    assert "Zensical" in development


def test_the_readme_links_reach_pages_that_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/guides/") for link in local)
    for link in local:
        assert (ROOT / link).exists(), link


def long_description() -> str:
    """What a build gives the package index (setup.py's own function)."""
    import runpy

    made = runpy.run_path(str(ROOT / "setup.py"), run_name="setup")  # not "__main__": no build
    text: str = made["long_description"](README)
    return text


def test_the_long_description_holds_no_link_that_breaks_on_an_index_page() -> None:
    described = long_description()
    targets = re.findall(r"\]\(([^)]*)\)", described)
    assert all("://" in target or target.startswith("#") for target in targets), targets
    relative = [t for t in re.findall(r"\]\(([^)#]+)[^)]*\)", README) if "://" not in t]
    assert len(relative) >= 13  # the issue counted 13
    for path in relative:  # each one is named as a path of the source tree instead
        assert f"(`{path}` in the source tree)" in described or f"(`{path}#" in described
    assert described.splitlines()[:6] == README.splitlines()[:6]  # the two commands as they are


def test_the_long_description_keeps_every_code_block_and_link_text_whole() -> None:
    """A ``[`` in a sample output once opened a link that ended at the next
    real one, so the index page lost that ``[`` and showed the link's own (#48)."""
    described = long_description()
    for block in re.findall(r"```[a-z]*\n.*?```", README, flags=re.DOTALL):
        assert block in described
    assert "[scripts guide (" not in described
    assert "scripts guide (`docs/guides/scripts.md` in the source tree) says more" in described


def test_the_summary_names_every_wire_the_package_speaks() -> None:
    import tomllib

    summary = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]
    for wire in ("stub", "Ollama", "Messages API", "OpenAI-compatible"):
        assert wire in summary, wire


def test_the_readme_holds_no_table_the_docs_generate() -> None:
    assert "| `VAELII_LLM_PROVIDER` |" not in README
    assert "| `llm-timeout` |" not in README


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


# -- the package as published: the sdist and the wheel, each in a fresh environment -----


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel, built once per session as a publisher builds them."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return sdist, wheel


def python3() -> str:
    """The ``python3`` the README's commands name, as a fresh shell finds it."""
    found = shutil.which("python3", path=clean_env().get("PATH"))
    assert found is not None
    return found


def unpack(sdist: Path, into: Path) -> tuple[Path, dict[str, str]]:
    """The sdist's tree, and its pages (the README and docs/)."""
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    [root] = [p for p in into.iterdir() if p.is_dir()]
    return root, read_pages(root)


REPO_ONLY = frozenset({".gitattributes", ".gitignore", ".pre-commit-config.yaml"})
"""Tracked files for the checkout alone (git's and the editor hooks'), not shipped."""

BUILT = re.compile(r"PKG-INFO|setup\.cfg|vaelii_llm\.egg-info/.+")
"""What the build writes into the sdist beside the tracked files."""


@pytest.mark.slow
@pytest.mark.timeout(900)  # the build when it runs first
def test_the_sdist_holds_every_tracked_file_as_checked_out(dists: tuple[Path, Path]) -> None:
    """The sdist is the checkout: every tracked file but :data:`REPO_ONLY`, byte
    for byte, and nothing else but what the build writes (:data:`BUILT`); so
    its own suite, collected in the next test, is the one this checkout runs."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to compare the sdist with")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True, timeout=60
    ).stdout.decode()
    shipped = set(tracked.split("\0")) - {""} - REPO_ONLY
    with tarfile.open(dists[0]) as archive:
        members = {m.name.split("/", 1)[1]: m for m in archive.getmembers() if m.isfile()}
        assert {n for n in members if BUILT.fullmatch(n) is None} == shipped
        for name in sorted(shipped):
            extracted = archive.extractfile(members[name])
            assert extracted is not None, name
            assert extracted.read() == (ROOT / name).read_bytes(), name


def collected(out: str) -> dict[str, int]:
    """``pytest --collect-only -qq``'s count of tests per file."""
    found = re.findall(r"^(tests/\S+\.py): (\d+)$", out, re.MULTILINE)
    return {name: int(count) for name, count in found}


COLLECT_ONLY = "--collect-only -q"
"""PYTEST_ADDOPTS for the README's test command in the sdist: with its own
``-q``, each file's count of the tests the command would run, none run (the
checkout's lanes run them)."""


@pytest.mark.slow
@pytest.mark.timeout(900)  # the build, two fresh environments and every block
@pytest.mark.usefixtures("ctrl_c_reaches_children")
async def test_the_sdist_unpacked_runs_the_readme_as_written(
    dists: tuple[Path, Path], ollama: FakeOllama, tmp_path: Path
) -> None:
    """A new user's session on the sdist: its README's two commands exactly as
    written, the second collecting the sdist's suite (the environment it
    installs, and every test this checkout's command runs, file by file; CI
    runs the suite itself), then every block and command of the README and
    every docs page after the README's activation line."""
    root, pages = unpack(dists[0], tmp_path)
    assert list(pages) == page_names()  # the sdist carries every page
    first, second = lines(blocks(pages["README.md"], "sh")[FIRST_COMMANDS][2])
    code, out, err = await run(["bash", "-c", first], clean_env(), root)
    assert code == 0, err
    assert "answering: the scripted stub, not a model (nothing is configured)" in out
    code, out, err = await run(["bash", "-c", second], clean_env(PYTEST_ADDOPTS=COLLECT_ONLY), root)
    assert code == 0, out[-3000:] + err[-3000:]
    code, here, err = await run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        clean_env(PYTEST_ADDOPTS=COLLECT_ONLY),
        ROOT,
    )
    assert code == 0, here[-3000:] + err[-3000:]
    assert sum(collected(here).values()) > 1000, here[-500:]
    assert collected(out) == collected(here)
    docs = Pages(root, pages, ollama)
    ran = 0
    for n, page in enumerate(pages):
        ran += await docs.python_blocks(page, tmp_path / f"work{n}")
        ran += await docs.shell_lines(page)
    assert ran >= 15
    await docs.ask_block()
    answered, streamed = await docs.web_blocks()
    assert json.loads(answered)["answer"] == ANSWER
    assert "event: final\n" in streamed
    assert (root / "mkdocs.yml").exists()  # the site builds from the sdist too


@pytest.mark.slow
@pytest.mark.timeout(900)  # the build when it runs first, and a fresh environment
async def test_a_venv_holding_only_the_wheel_answers_ask(
    dists: tuple[Path, Path], ollama: FakeOllama, tmp_path: Path
) -> None:
    _, wheel = dists
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = archive.read(metadata).decode()
    assert {n.split("/", 1)[0] for n in names} == {"vaelii_llm", metadata.split("/")[0]}
    assert "vaelii_llm/py.typed" in names
    assert any(n.startswith("vaelii_llm/kb/data/") and n.endswith(".edn") for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    for field in ("License-Expression: MIT", "Requires-Python: >=3.11", "Author: "):
        assert field in meta, field
    assert "OpenAI-compatible" in meta.split("\nSummary: ", 1)[1].split("\n", 1)[0]
    assert "Description-Content-Type: text/markdown" in meta
    assert "(`docs/guides/scripts.md` in the source tree)" in meta  # the README, links as paths
    assert "the\nscripts guide (`docs/guides/scripts.md` in the source tree) says more" in meta
    assert "   ok: [{:bindings {?who Muffet}" in meta  # a sample's bracket kept (#48)
    assert not re.search(r"\]\((?!https?://|#)", meta)
    venv = tmp_path / "wheel-only"
    code, _, err = await run([python3(), "-m", "venv", str(venv)], clean_env(), tmp_path)
    assert code == 0, err
    code, _, err = await run(
        [str(venv / "bin" / "pip"), "install", "-q", str(wheel)], clean_env(), tmp_path
    )
    assert code == 0, err
    command = str(venv / "bin" / "vaelii-llm")
    code, out, err = await run(
        [command, "ask", QUESTION],
        clean_env(
            VAELII_LLM_PROVIDER="ollama",
            VAELII_OLLAMA_HOST=ollama.url,
            VAELII_OLLAMA_MODEL="llama3.2",
        ),
        tmp_path,
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == '-> kb_query {"goal": "(afraidOf MissMuffet ?who)"}'
    assert out.splitlines()[-1] == ANSWER
    code, out, err = await run([command, "ask", QUESTION], clean_env(), tmp_path)
    assert (code, out) == (2, "")
    assert err.startswith("stub-only: only the stub can answer: nothing is configured")
    code, _, _ = await run(
        [str(venv / "bin" / "python"), "-c", "import pytest"], clean_env(), tmp_path
    )
    assert code != 0  # the wheel and its dependencies, nothing of the test extra


def python310() -> str | None:
    for candidate in (
        shutil.which("python3.10"),
        *sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.10*/bin/python3.10")),
    ):
        if (
            candidate
            and subprocess.run(
                [candidate, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 10))"],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        ):
            return candidate
    return None


@pytest.mark.slow
@pytest.mark.timeout(900)  # the build when it runs first, and a fresh environment
async def test_pip_on_python_3_10_says_the_python_needed(
    dists: tuple[Path, Path], tmp_path: Path
) -> None:
    old = python310()
    if old is None:
        pytest.skip("no Python 3.10 on this machine to try the sdist with")
    sdist, _ = dists
    venv = tmp_path / "py310"
    code, _, err = await run([old, "-m", "venv", str(venv)], clean_env(), tmp_path)
    assert code == 0, err
    code, out, err = await run(
        [str(venv / "bin" / "pip"), "install", str(sdist)], clean_env(), tmp_path
    )
    assert code != 0
    assert "vaelii-llm needs Python 3.11 or newer; this is Python 3.10" in out + err
    assert "jiter" not in out + err  # said before any dependency is looked for
