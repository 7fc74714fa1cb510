"""The two halves that hold a live-model test out of every other run:
the ``llm`` mark selects, ``VAELII_LLM_LIVE`` consents."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import pytest

@pytest.mark.llm
def test_would_dial_out():
    raise AssertionError("a live test ran")

def test_hermetic():
    pass
"""


@pytest.fixture
def probe_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("VAELII_LLM_LIVE", raising=False)
    # Only the plugins the suite's conftest hooks into: the run starts in a
    # fraction of the time every installed plugin takes to load.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTEST_PLUGINS", "pytest_asyncio.plugin,pytest_timeout")
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(bounded_runs=(ROOT / "tests" / "support" / "bounded_runs.py").read_text())
    pytester.makeini(
        "[pytest]\naddopts = -m 'not llm' -ra\nmarkers =\n    llm: reaches a real model\n"
    )
    pytester.makepyfile(test_probe=PROBE)
    return pytester


def test_default_run_deselects_llm_tests(probe_suite: pytest.Pytester) -> None:
    result = probe_suite.runpytest_subprocess()
    result.assert_outcomes(passed=1, deselected=1)


def test_selecting_llm_without_consent_skips_with_a_reason(probe_suite: pytest.Pytester) -> None:
    result = probe_suite.runpytest_subprocess("-m", "llm")
    result.assert_outcomes(skipped=1, deselected=1)
    result.stdout.fnmatch_lines(["*SKIPPED*VAELII_LLM_LIVE=1*"])


def test_consent_lets_a_selected_llm_test_run(
    probe_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAELII_LLM_LIVE", "1")
    result = probe_suite.runpytest_subprocess("-m", "llm")
    result.assert_outcomes(failed=1, deselected=1)  # it ran: the probe's body fails on purpose


def test_this_suite_holds_no_llm_test() -> None:
    offenders = [
        p.name
        for p in (ROOT / "tests").rglob("test_*.py")
        if p.name != Path(__file__).name and "mark.llm" in p.read_text()
    ]
    assert offenders == []
