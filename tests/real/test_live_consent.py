"""The two halves that hold a live-model test out of every other run:
the ``llm`` mark (or ``real``) selects, ``VAELII_LLM_LIVE`` consents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import pytest

@pytest.mark.llm
def test_would_dial_out():
    raise AssertionError("a live test ran")

@pytest.mark.real
def test_would_call_a_local_model():
    raise AssertionError("a real-lane test ran")

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
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the suite's plugin: tests.support.bounded_runs
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makeini(
        "[pytest]\naddopts = -m 'not llm and not real' -ra\nmarkers =\n"
        "    llm: reaches a real model\n    real: reaches a local real model\n"
    )
    pytester.makepyfile(test_probe=PROBE)
    return pytester


def test_default_run_deselects_llm_tests(probe_suite: pytest.Pytester) -> None:
    result = probe_suite.runpytest_subprocess()
    result.assert_outcomes(passed=1, deselected=2)


@pytest.mark.parametrize("mark", ["llm", "real"])
def test_selecting_a_live_mark_without_consent_skips_with_a_reason(
    probe_suite: pytest.Pytester, mark: str
) -> None:
    """``real`` too (#60): the local model the real lane starts itself is a
    real model, and the specification's rule, a reachable one is not consent,
    holds for it."""
    result = probe_suite.runpytest_subprocess("-m", mark)
    result.assert_outcomes(skipped=1, deselected=2)
    result.stdout.fnmatch_lines(["*SKIPPED*VAELII_LLM_LIVE=1*"])


@pytest.mark.parametrize("mark", ["llm", "real"])
def test_consent_lets_a_selected_live_test_run(
    probe_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mark: str
) -> None:
    monkeypatch.setenv("VAELII_LLM_LIVE", "1")
    result = probe_suite.runpytest_subprocess("-m", mark)
    result.assert_outcomes(failed=1, deselected=2)  # it ran: the probe's body fails on purpose


def test_the_ci_real_lane_gives_consent() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    lane = [line for line in run.splitlines() if "pytest" in line and "-m real" in line]
    assert lane
    assert all("VAELII_LLM_LIVE=1 " in line for line in lane), lane


def test_this_suite_holds_no_llm_test() -> None:
    offenders = [
        p.name
        for p in (ROOT / "tests").rglob("test_*.py")
        if p.name != Path(__file__).name and "mark.llm" in p.read_text()
    ]
    assert offenders == []


# The real lane (`-m real`) needs consent as well (#60; it was exempt): a
# reachable local model is not consent, the specification says, and its far
# end is one, though the lane builds it from pinned packages and starts it
# itself, on 127.0.0.1, with no key and no network beyond the machine. It is
# no `llm` test only while it stays that; the check below reads every file of
# the lane for a URL off loopback and for a credential read from the
# environment.

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]"}
URL_HOST = re.compile(r"https?://([^/:\"'\s{}]+)")
KEY_READ = re.compile(
    r"(?:getenv|environ\.get|environ\[)\(?\s*[\"'][A-Z0-9_]*(?:KEY|TOKEN|SECRET)[\"']"
)


def real_lane_files() -> list[Path]:
    """The tests marked ``real`` and the helpers beside them in tests/real/."""
    marked = [
        p
        for p in (ROOT / "tests").rglob("test_*.py")
        if p.name != Path(__file__).name and "mark.real" in p.read_text()
    ]
    beside = [p for p in (ROOT / "tests" / "real").glob("*.py") if not p.name.startswith("test_")]
    return sorted({*marked, *beside})


def test_the_real_lane_is_no_live_model_it_stays_on_loopback_with_no_key() -> None:
    files = real_lane_files()
    assert any("mark.real" in p.read_text() for p in files)
    off_loopback = [
        (p.name, host)
        for p in files
        for host in URL_HOST.findall(p.read_text())
        if host not in LOOPBACK_HOSTS
    ]
    keys_read = [(p.name, m) for p in files for m in KEY_READ.findall(p.read_text())]
    assert off_loopback == [], "the real lane reaches past loopback: mark it llm instead"
    assert keys_read == [], "the real lane reads a credential: mark it llm instead"


def test_the_real_lane_check_sees_an_outside_url_and_a_key() -> None:
    assert URL_HOST.findall('base = "https://api.anthropic.com/v1"') == ["api.anthropic.com"]
    assert URL_HOST.findall('f"http://127.0.0.1:{port}"') == ["127.0.0.1"]
    assert KEY_READ.findall('os.environ["OPENAI_API_KEY"]')
    assert KEY_READ.findall('os.getenv("ANTHROPIC_AUTH_TOKEN")')
    assert not KEY_READ.findall('{"ANTHROPIC_API_KEY": "sk-none"}')
