"""The faces' documentation runs: the agent frameworks guide's pydantic-ai block and
both examples, in this process, on the stub (no key, no socket out). The
guide's MCP host entry is launched by tests/faces/test_mcp_face.py."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from vaelii_llm import tools

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "guides" / "agent-frameworks.md").read_text()


@pytest.fixture(autouse=True)
def on_the_stub(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("VAELII_", "ANTHROPIC_")):
            monkeypatch.delenv(name)


def faces_section() -> str:
    start = GUIDE.index("## pydantic-ai")
    end = GUIDE.index("\n## ", start + 1) if "\n## " in GUIDE[start + 1 :] else len(GUIDE)
    return GUIDE[start:end]


def test_the_guides_agent_block_runs_on_the_stub(capsys: pytest.CaptureFixture[str]) -> None:
    found = re.findall(r"```python\n(.*?)```", faces_section(), re.DOTALL)
    assert len(found) == 1
    exec(compile(found[0], "agent-frameworks.md", "exec"), {"__name__": "__main__"})
    out, err = capsys.readouterr()
    assert out == "Muffet, ItsyBitsy and Fang.\n"
    assert err == ""


STUB_LINE = (
    "answering: the scripted stub, not a model (nothing is configured); "
    "`vaelii-llm status` says what to set"
)


def run_example(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # as `python examples/NAME.py` has it
    with pytest.raises(SystemExit) as ended:  # each example exits with its status (#60)
        runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")
    assert ended.value.code == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out.splitlines()


def test_the_mcp_example_lists_reads_answers_one_and_refuses_a_write(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = run_example("mcp_server.py", capsys, monkeypatch)
    assert lines[0].startswith(f"{len(tools.schemas())} read tools")
    assert lines[1] == "annotations: readOnly=True idempotent=True openWorld=False"
    assert lines[2] == "kb_types_of Rex -> [Dog Mammal] (isError=False)"
    assert lines[3].startswith("kb_assert -> isError=True: unknown-tool: ")


def test_the_pydantic_ai_example_runs_and_streams_on_the_stub(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    answering, *lines = run_example("pydantic_ai_agent.py", capsys, monkeypatch)
    assert answering == STUB_LINE  # the stub answered, and the first line says so
    assert lines[0] == "  tool call kb_query({'goal': '(afraidOf MissMuffet ?who)'})"
    assert lines[1].startswith("  tool return [{:bindings {?who Muffet}")
    assert lines[2] == "A: Miss Muffet is afraid of Muffet, ItsyBitsy and Fang."
    assert lines[3] == "model requests: 2"
    streamed = re.fullmatch(r"streamed in (\d+) pieces: (.*)", lines[4])
    assert streamed is not None
    assert int(streamed.group(1)) > 1
    assert streamed.group(2) == "(streamed) Miss Muffet is afraid of Muffet, ItsyBitsy and Fang."
