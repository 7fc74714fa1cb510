"""Facts once (#37 item 6): a docstring cites a constant by name and never
restates its figure, and a figure that is one fact is written in one place
of the package."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import vaelii_llm
from vaelii_llm import _edn
from vaelii_llm import cli
from vaelii_llm.providers.ollama import _probes as ollama_probes

PACKAGE = Path(vaelii_llm.__file__).parent
SOURCES = sorted(PACKAGE.rglob("*.py"))


def docstrings(tree: ast.Module) -> list[tuple[int, str]]:
    """Every docstring of a module: its own, its classes' and functions', and
    each string standing alone as a statement, but a constant's own (the
    string right after its assignment), which is where its figure is held."""
    found = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        previous: ast.stmt | None = None
        for statement in body:
            if (
                isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
                and not isinstance(previous, ast.Assign | ast.AnnAssign)
            ):
                found.append((statement.lineno, statement.value.value))
            previous = statement
    return found


RESTATED = {
    # the probes' deadlines (VERSION_TIMEOUT_MS, MODELS_TIMEOUT_MS)
    "a probe deadline": re.compile(
        r"\btwo[\s-]+seconds?\b|\b2 ?(s|seconds?)\b|\b2[,_]?000 ?ms\b", re.IGNORECASE
    ),
    # the warm-up's deadline (ollama._probes.WARM_TIMEOUT_MS)
    "the warm-up deadline": re.compile(r"\b300[,_]?000\b"),
    # the tools' result bound (_edn.DEFAULT_MAX_CHARS)
    "the result bound": re.compile(r"\b4[,_]?000\b"),
    # the decoders' event cap (MAX_EVENT_BYTES)
    "the event cap": re.compile(r"\b16 MiB\b"),
    # the transport's body cap (DEFAULT_MAX_BODY_BYTES)
    "the body cap": re.compile(r"\b32 MiB\b"),
}


def test_no_docstring_restates_a_constant_s_figure() -> None:
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, text in docstrings(tree):
            for fact, pattern in RESTATED.items():
                if not pattern.search(text):
                    continue
                found.append(f"{path.relative_to(PACKAGE)}:{line}: {fact}")
    assert found == []


@pytest.mark.parametrize(
    ("value", "spelled"),
    [(ollama_probes.WARM_TIMEOUT_MS, "300_000"), (_edn.DEFAULT_MAX_CHARS, "4000")],
)
def test_a_figure_that_is_one_fact_is_written_once(value: int, spelled: str) -> None:
    written = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value == value
    ]
    assert len(written) == 1, (spelled, written)


def test_the_derived_places_read_the_one_fact() -> None:
    # the option's default is the signature's, which selection hands on as it is
    default = inspect.signature(ollama_probes.warm).parameters["timeout_ms"].default
    assert default == ollama_probes.WARM_TIMEOUT_MS


def test_the_call_help_names_the_tools_bound(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["call", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"bound on the printed result (default {_edn.DEFAULT_MAX_CHARS})" in shown


GUIDES = [*sorted((PACKAGE.parent / "docs").rglob("*.md")), PACKAGE.parent / "README.md"]


def test_the_guides_state_the_result_bound_as_the_package_holds_it() -> None:
    """The guides restate the bound a reader needs (its default), so each
    place that does must say what :data:`_edn.DEFAULT_MAX_CHARS` holds: a
    change of the constant fails here until every guide says the new figure."""
    holds = {str(_edn.DEFAULT_MAX_CHARS), f"{_edn.DEFAULT_MAX_CHARS:,}"}
    stated = [
        (f"{path.name}:{number}", figure)
        for path in GUIDES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "max_result_chars" in line or "characters" in line
        for figure in re.findall(r"\b\d{1,3}(?:,\d{3})+\b|\b\d{4,}\b", line)
    ]
    assert stated, "no guide states the bound: the check would hold vacuously"
    assert [place for place, figure in stated if figure not in holds] == []
