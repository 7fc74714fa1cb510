"""A pytest plugin (loaded by tests/conftest.py): every test ends by its bound,
and every failure's report is bounded, so one bad test never takes a run down.

**The bound.** pytest-timeout's ``timeout`` (pyproject) arms this watchdog for
the whole of a test, setup and teardown included (pytest-timeout itself stops
its timer when any phase fails, which left a hung teardown unbounded), in
three steps:

1. At the bound, SIGALRM: the test's name and each task's stack are printed;
   on a running loop the loop is stopped (woken through its self-pipe), so
   the test ends in "Event loop stopped before Future completed"; with none
   running, pytest-timeout's own handler raises where the signal landed (a
   blocking call in the main thread included).
2. :data:`GRACE_S` later, if the test is still there: the loop is stopped
   again and pytest-timeout's handler raises where the signal landed. What
   the first step ended may have hung once more (a teardown awaiting a task
   that never ends, a default executor waiting for a thread), or a call
   blocks the loop so that it cannot stop.
3. :data:`GRACE_S` after that, from a thread of its own (a signal handler
   never runs while the main thread is stuck in C): the name, every thread's
   stack, and the process ends. Under xdist the controller reports the test
   as the crashed worker's and starts another; the run goes on.

A loop's own exception handler may swallow what a signal handler raises (the
handler then ran as a callback), and a task may take it for its own failure:
so no step relies on a raise landing in the test.

**The report.** A failure's report is made with the cyclic collector paused
(CPython 3.11 can fail ``ast.parse`` with "AST constructor recursion depth
mismatch" when finalizers run inside it, which is what pytest's report does
for each frame's statement), falls back to Python's own traceback when making
it raises anyway, and is cut to :data:`MAX_REPORT_CHARS`.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import os
import signal
import sys
import threading
import traceback
import types
from collections.abc import Generator
from typing import Any

import pytest

GRACE_S = float(os.environ.get("VAELII_TEST_HANG_GRACE_S", "10"))
"""Between the steps of a hung test's end (the plugin's own tests shorten it)."""

MAX_REPORT_CHARS = 64 * 1024
"""The most of one failure's report printed: its head and its end, where the
exception is."""


class Watchdog:
    """The three steps that end one test (see the module docstring)."""

    def __init__(self, item: pytest.Item, settings: Any) -> None:
        self.item = item
        self.settings = settings
        self.fired = 0
        self.last = threading.Timer(settings.timeout + 2 * GRACE_S, self.end_process)
        self.last.daemon = True

    def start(self) -> None:
        signal.signal(signal.SIGALRM, self.expired)
        signal.setitimer(signal.ITIMER_REAL, self.settings.timeout)
        self.last.start()

    def cancel(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        self.last.cancel()

    def expired(self, signum: int, frame: types.FrameType | None) -> None:
        self.fired += 1
        if self.fired == 1:
            signal.setitimer(signal.ITIMER_REAL, GRACE_S)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:  # raised outside the except: no "no running event loop" chained
            import pytest_timeout  # type: ignore[import-untyped]

            pytest_timeout.timeout_sigalrm(self.item, self.settings)
            return
        loop.call_soon_threadsafe(loop.stop)
        if self.fired > 1:  # the loop did not stop: a call blocks it, raised here
            import pytest_timeout

            pytest_timeout.timeout_sigalrm(self.item, self.settings)
            return
        terminal = self.item.config.get_terminal_writer()
        terminal.sep("+", title=f"Timeout (>{self.settings.timeout}s): {self.item.nodeid}")
        for task in asyncio.all_tasks(loop):
            task.print_stack(file=terminal)  # type: ignore[arg-type]

    def end_process(self) -> None:
        # A thread of its own: nothing here needs the main thread to move.
        out = sys.__stderr__
        if out is None:  # pragma: no cover - no stderr at all
            os._exit(1)
        out.write(
            f"\n+++ Timeout: {self.item.nodeid} still hung {2 * GRACE_S:g}s after its "
            f"{self.settings.timeout}s bound; the process ends. Every thread's stack:\n"
        )
        out.flush()
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.flush()
        os._exit(1)


WATCHDOG = pytest.StashKey[Watchdog]()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool:
    """pytest-timeout's hook: this plugin's watchdog in place of its own timer."""
    watchdog = item.stash[WATCHDOG] = Watchdog(item, settings)
    watchdog.start()
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool:
    """pytest-timeout's hook, which it also calls on every failed phase (its
    ``pytest_exception_interact``, meant for pdb): a failed call must not leave
    its teardown unbounded, so the bound ends only with the test (below), or
    here when pdb takes over."""
    if item.config.getoption("usepdb", False) and WATCHDOG in item.stash:
        item.stash[WATCHDOG].cancel()
    return True


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """The test, setup to teardown, under its watchdog; the watchdog ends with it."""
    try:
        return (yield)
    finally:
        if WATCHDOG in item.stash:
            item.stash[WATCHDOG].cancel()
            del item.stash[WATCHDOG]


def pytest_unconfigure(config: pytest.Config) -> None:
    """A thread a hung test left running would hold the process at exit (the
    interpreter joins it): given :data:`GRACE_S` to end, then named, with its
    stack, and the process ends failed."""
    if hasattr(config, "workerinput") is False and config.pluginmanager.has_plugin("dsession"):
        return  # xdist's controller: its own threads end with its workers
    left = [t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    if not left:
        return

    def end() -> None:
        if not any(t.is_alive() for t in left):
            return
        out = sys.__stderr__
        if out is not None:
            names = ", ".join(t.name for t in left if t.is_alive())
            out.write(f"\n+++ threads still running at the end of the run: {names}\n")
            faulthandler.dump_traceback(file=out, all_threads=True)
            out.flush()
        os._exit(1)

    timer = threading.Timer(GRACE_S, end)
    timer.daemon = True
    timer.start()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Each phase's report, made with the collector paused; one whose making
    raised is made again from Python's own traceback; every one bounded."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        report = yield
    except Exception as failed:
        report = _plain_report(item, call, failed)
    finally:
        if collecting:
            gc.enable()
    if report.longrepr is not None and not isinstance(report.longrepr, tuple):
        shown = str(report.longrepr)
        if len(shown) > MAX_REPORT_CHARS:
            report.longrepr = _cut(shown)
    return report


def _cut(text: str) -> str:
    half = MAX_REPORT_CHARS // 2
    return (
        f"{text[:half]}\n[… {len(text) - 2 * half} characters of this report cut …]\n{text[-half:]}"
    )


def _plain_report(
    item: pytest.Item, call: pytest.CallInfo[None], failed: BaseException
) -> pytest.TestReport:
    """The phase's report from :mod:`traceback`, saying why pytest's own was not made."""
    excinfo = call.excinfo
    if excinfo is not None:
        lines = traceback.format_exception(excinfo.value, limit=30)
    else:
        lines = ["(no exception)\n"]
    why = "".join(traceback.format_exception_only(failed)).strip()
    text = "".join(lines) + f"\n(pytest's own report of this failure could not be made: {why})"
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords=dict.fromkeys(item.keywords, 1),
        outcome="failed" if excinfo is not None else "passed",
        longrepr=_cut(text) if len(text) > MAX_REPORT_CHARS else text,
        when=call.when,  # type: ignore[arg-type]  # never "collect" for an item
        sections=[],
        duration=call.duration,
        start=call.start,
        stop=call.stop,
        user_properties=item.user_properties,
    )
