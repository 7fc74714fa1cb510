"""The suite's own bounds (tests/support/bounded_runs.py): a hung test ends by its
name even when an earlier phase failed, and a failure's report is made and
bounded even when pytest cannot make its own. Each runs pytest in a child
process on a small test file of its own."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.bounded_runs import MAX_REPORT_CHARS

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def child(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytest run with this suite's plugin and nothing of its conftest."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("VAELII_TEST_HANG_GRACE_S", "1")
    pytester.makeconftest('pytest_plugins = ["tests.support.bounded_runs"]')
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester


def test_a_hung_teardown_after_a_failed_call_still_ends_by_its_bound(
    child: pytest.Pytester,
) -> None:
    # pytest-timeout stops its timer when a phase fails (for pdb's sake): the
    # teardown after it then had no bound at all.
    child.makepyfile(
        """
        import time
        import pytest

        @pytest.fixture
        def hangs_in_teardown():
            yield
            time.sleep(600)

        def test_fails_then_hangs(hangs_in_teardown):
            assert False, "the call fails"

        def test_runs_after():
            pass
        """
    )
    started = time.monotonic()
    result = child.runpytest_subprocess("--timeout=2", "-p", "no:cacheprovider", timeout=50)
    took = time.monotonic() - started
    result.assert_outcomes(failed=1, errors=1, passed=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_fails_then_hangs*", "*Timeout*"])
    assert took < 30, took


def test_a_report_pytest_cannot_make_is_made_from_the_traceback(child: pytest.Pytester) -> None:
    # What CPython 3.11 did to one failure's report: ast.parse raised SystemError.
    child.makepyfile(
        """
        import _pytest._code.code as code

        def broken(*args, **kwargs):
            raise SystemError("AST constructor recursion depth mismatch (before=147, after=195)")

        code.getstatementrange_ast = broken

        def helper():
            raise ValueError("the test's own failure")

        def test_fails():
            helper()

        def test_runs_after():
            pass
        """
    )
    result = child.runpytest_subprocess("-p", "no:cacheprovider", timeout=50)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*ValueError: the test's own failure*",
            "*pytest's own report of this failure could not be made: SystemError*",
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str()


def test_a_huge_failure_report_is_cut(child: pytest.Pytester) -> None:
    child.makepyfile(
        """
        def test_fails():
            raise AssertionError("x" * 1_000_000)
        """
    )
    result = child.runpytest_subprocess("-p", "no:cacheprovider", timeout=50)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "characters of this report cut" in out
    # Shown once in the failures and, where pytest does not shorten the short
    # summary (CI=true), once more there: each showing bounded.
    shown = out.count("characters of this report cut")
    assert shown in (1, 2)
    assert len(out) < (shown + 1) * MAX_REPORT_CHARS
