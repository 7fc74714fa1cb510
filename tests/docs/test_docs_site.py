"""The site's strict build fails on what would rot: a broken cross-reference (in a
page or in a docstring), a page missing from the navigation, a link to a
missing anchor, a stale generated table. Each is made in a copy of the tree and
built with the docs extra's MkDocs; the ``docs`` lane runs this (.ci/run)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.docs, pytest.mark.timeout(600)]  # a strict site build


def mkdocs() -> str:
    found = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[docs]'")
    return found


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the site is built from."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=ignore)
    shutil.copytree(ROOT / "vaelii_llm", tmp_path / "vaelii_llm", ignore=ignore)
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    return tmp_path


def build(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [mkdocs(), "build", "--strict", "-f", str(tree / "mkdocs.yml"), "-d", str(tree / "site")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


def test_the_site_builds_in_strict_mode(tree: Path) -> None:
    done = build(tree)
    assert done.returncode == 0, done.stderr[-3000:]
    site = tree / "site"
    assert (site / "reference" / "vaelii_llm.errors" / "index.html").exists()
    assert (site / "guides" / "errors" / "index.html").exists()
    errors_page = (site / "reference" / "vaelii_llm.errors" / "index.html").read_text()
    assert 'id="vaelii_llm.errors.LLMTimeout"' in errors_page
    assert ":class:`" not in errors_page  # the roles became links or code
    for page in site.rglob("*.html"):  # offline: nothing fetched from elsewhere
        text = page.read_text()
        assert not re.search(r'src="https?://', text), page
        assert not re.search(r'<link[^>]*href="https?://', text), page


def test_each_reference_page_renders_exactly_its_modules_exports(tree: Path) -> None:
    done = build(tree)
    assert done.returncode == 0, done.stderr[-3000:]
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None
    assert spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    for module in hooks.public_modules():
        page = (tree / "site" / "reference" / module / "index.html").read_text()
        ids = set(re.findall(r'id="(vaelii_llm[\w.]*)"', page))
        top = {i.removeprefix(f"{module}.") for i in ids if i.startswith(f"{module}.")}
        assert {i for i in top if "." not in i} == set(hooks.members(module)), module


def test_a_broken_cross_reference_in_a_page_fails_the_build(tree: Path) -> None:
    (tree / "docs" / "guides" / "broken.md").write_text(
        "# Broken\n\nSee [`LLMNope`][vaelii_llm.errors.LLMNope].\n"
    )
    done = build(tree)
    assert done.returncode != 0
    assert "Could not find cross-reference target 'vaelii_llm.errors.LLMNope'" in done.stderr


def test_a_broken_cross_reference_in_a_docstring_fails_the_build(tree: Path) -> None:
    source = tree / "vaelii_llm" / "errors.py"
    text = source.read_text()
    old = '"""Base of every refusal the model side raises.'
    assert old in text
    source.write_text(text.replace(old, '"""Base of every refusal (see :class:`LLMNope`).', 1))
    done = build(tree)
    assert done.returncode != 0
    assert "LLMNope" in done.stderr
    assert "Could not find cross-reference target" in done.stderr


def test_a_missing_page_fails_the_build(tree: Path) -> None:
    config = tree / "mkdocs.yml"
    config.write_text(
        config.read_text().replace(
            "      - Configuration: guides/configuration.md\n",
            "      - Configuration: guides/configuration.md\n      - Gone: guides/gone.md\n",
        )
    )
    done = build(tree)
    assert done.returncode != 0
    assert "guides/gone.md" in done.stderr


def test_a_link_to_a_missing_anchor_fails_the_build(tree: Path) -> None:
    page = tree / "docs" / "guides" / "scripts.md"
    page.write_text(page.read_text() + "\nSee [nowhere](errors.md#llm-nowhere).\n")
    done = build(tree)
    assert done.returncode != 0
    assert "llm-nowhere" in done.stderr


def test_a_stale_generated_table_fails_the_build(tree: Path) -> None:
    page = tree / "docs" / "guides" / "configuration.md"
    page.write_text(page.read_text().replace("| `VAELII_LLM_LIVE` |", "| `VAELII_LLM_LIVELY` |"))
    done = build(tree)
    assert done.returncode != 0
    assert "generated tables out of date" in done.stderr


# -- issue #34 item 8: a fresh docs environment, and pages that read as a reference ---------


@pytest.mark.timeout(1200)  # a fresh environment's install, then the build
def test_a_fresh_docs_environment_builds_the_site_strict(tmp_path: Path) -> None:
    """Exactly the README's docs command, in a new virtual environment holding
    only the docs extra: no optional extra's library (``mcp``, pydantic-ai) is
    there for a cross-reference to lean on."""
    tree = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "site")
    for name in ("docs", "vaelii_llm"):
        shutil.copytree(ROOT / name, tree / name, ignore=ignore)
    for name in ("mkdocs.yml", "pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    env = {"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    env.update((k, v) for k, v in os.environ.items() if k.startswith("PIP_"))  # its index
    made = subprocess.run(
        [sys.executable, "-m", "venv", ".venv"], cwd=tree, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    done = subprocess.run(
        ["bash", "-c", ".venv/bin/pip install -q -e '.[docs]' && .venv/bin/mkdocs build --strict"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=1100,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lacking = subprocess.run([str(tree / ".venv" / "bin" / "python"), "-c", "import mcp"])
    assert lacking.returncode != 0  # the build passed without the mcp extra
    assert (tree / "build" / "site" / "reference" / "vaelii_llm.integrations.mcp").is_dir()


def test_the_reference_pages_read_as_a_reference(tree: Path) -> None:
    done = build(tree)
    assert done.returncode == 0, done.stderr[-3000:]
    site = tree / "site"
    index = (site / "reference" / "index.html").read_text()
    assert "<table" not in index  # a narrow first column broke the dotted names mid-word
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None
    assert spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    for module in hooks.public_modules():  # a heading of its own each
        assert re.search(rf"<h2[^>]*>.*?<code>{re.escape(module)}</code>", index), module
    package = (site / "reference" / "vaelii_llm" / "index.html").read_text()
    listed = re.findall(r"<li><code>(\w+)</code>: ([^<]*)", package)
    assert [name for name, _ in listed] == [
        "agent",
        "providers",
        "pool",
        "tools",
        "kb",
        "engine",
        "errors",
        "config",
    ]  # a list, not one paragraph
    assert "OpenAI-compatible" in dict(listed)["providers"]
    css = (site / "stylesheets" / "extra.css").read_text()
    assert re.search(r"pre > code \{[^}]*white-space: pre-wrap", css)
    guide = (site / "guides" / "scripts" / "index.html").read_text()
    assert 'href="../../stylesheets/extra.css"' in guide  # every page wraps its code blocks
