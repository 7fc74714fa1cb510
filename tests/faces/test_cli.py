"""The ``vaelii-llm`` command, run in-process through ``main``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_runs import run_in_process as run
from vaelii_llm import __version__


def test_version_runs_as_an_installed_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vaelii_llm.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"vaelii-llm {__version__}"


def test_config_never_prints_a_credential(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-very-secret")
    monkeypatch.setenv("VAELII_OLLAMA_MODEL", "llama3:8b")
    code, out, _ = run(capsys, "config")
    assert code == 0
    assert "sk-ant-very-secret" not in out
    assert "ANTHROPIC_API_KEY" in out
    assert "llama3:8b" in out


def test_config_never_prints_a_password_in_a_url(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://alice:s3cret@gw.example.com")
    monkeypatch.setenv("VAELII_OLLAMA_HOSTS", "http://bob:pw@gpu1:8080*2")
    _, out, _ = run(capsys, "config")
    assert "s3cret" not in out
    assert "bob:pw" not in out
    assert "gw.example.com" in out


def test_tools_lists_the_derived_reads(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tools")
    names = [line.split()[0] for line in out.splitlines()]
    assert code == 0
    assert {"kb_query", "kb_ask_p", "kb_find_sentexes", "kb_why_not"} <= set(names)
    assert "kb_assert" not in names
    assert "kb_retract" not in names


def test_tools_json_is_the_schema_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tools", "--json")
    schemas = json.loads(out)
    assert code == 0
    assert all({"name", "description", "input_schema"} <= set(s) for s in schemas)


def test_call_answers_from_the_sample_kb(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "call", "kb_types_of", '{"term": "Muffet"}')
    assert code == 0
    assert "Spider" in out


def test_call_reports_a_refusal_with_status_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "call", "kb_assert", '{"sentence": "(isa Me Spider)"}')
    assert code == 1
    assert out.startswith("unknown-tool")


def test_call_refuses_input_that_is_not_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "call", "kb_types_of", "{term: Muffet")
    assert code == 2
    assert "not JSON" in err


def test_status_and_vote_on_the_stub(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VAELII_LLM_PROVIDER", raising=False)
    code, out, _ = run(capsys, "status")
    assert code == 0
    assert "answering:  stub" in out
    code, out, err = run(capsys, "vote", "Is a spider an insect?")
    assert (code, out) == (2, "")  # as `ask` does: the stub has no opinion to count
    assert err.startswith("stub-only: only the stub can answer: nothing is configured")


def test_status_with_nothing_configured_says_what_to_set_naming_every_kind() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAELII_")}
    done = subprocess.run(
        [sys.executable, "-m", "vaelii_llm.cli", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    configured, answering, why = done.stdout.splitlines()[:3]
    assert (configured, answering) == ("configured: stub", "answering:  stub")
    assert why.startswith("why:        nothing is configured: set VAELII_LLM_PROVIDER to ")
    for kind in ("ollama", "anthropic", "openai"):
        assert kind in why
    stated = subprocess.run(
        [sys.executable, "-m", "vaelii_llm.cli", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "VAELII_LLM_PROVIDER": "stub"},
        check=True,
    )
    assert "why:" not in stated.stdout  # the stub was chosen: nothing to explain


def test_warm_on_the_stub_has_nothing_to_do(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VAELII_LLM_PROVIDER", raising=False)
    code, out, _ = run(capsys, "warm")
    assert code == 0
    assert "nothing to warm" in out


def test_a_typed_error_is_printed_with_its_type(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ab\ncd")
    code, _, err = run(capsys, "vote", "q")
    assert code == 2  # the configured backend cannot answer: its cause leads, as ask's (#60)
    assert err.startswith("llm-bad-credential: ")
    assert run(capsys, "ask", "q") == (2, "", err)


def test_refusals_print_one_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no.edn")
    code, _, err = run(capsys, "call", "kb_types_of", '{"term": "x"}', "--kb", missing)
    assert (code, err.splitlines()[0][:9]) == (1, "bad-path:")
    with pytest.raises(SystemExit) as exited:
        run(capsys, "vote", "q", "--votes", "0")
    assert exited.value.code == 2
    assert "argument --votes: --votes takes at least 1, got 0" in capsys.readouterr().err
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "bogus")
    code, _, err = run(capsys, "status")
    assert code == 2
    assert err.startswith("bad-switch: VAELII_LLM_PROVIDER names no backend (it is 'bogus')")
    assert "Traceback" not in err
