"""Runs on every rank of an mpiexec launch: keep ranks other than 0 quiet, and give each rank its
own temporary root."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import traceback

import pytest
from mpi4py import MPI

from ..conftest import STUCK

_OWN_ROOT = pytest.StashKey[str]()


def pytest_configure(config):
    rank = MPI.COMM_WORLD.Get_rank()
    if rank != 0:
        config.option.verbose = -2
        config.option.reportchars = "f"
    if config.option.basetemp is None:
        # Every rank runs a pytest session at once. In pytest's shared numbered folders under
        # /tmp/pytest-of-USER, each session's closing cleanup unlinks dead links the others may
        # have unlinked first: a rank failed so at 8 ranks on Open MPI (FileNotFoundError on
        # 'pytest-current', every test passed). A root of its own per rank shares nothing.
        config.option.basetemp = tempfile.mkdtemp(prefix=f"sparsecoll-tests-rank{rank}-")
        config.stash[_OWN_ROOT] = config.option.basetemp


def pytest_unconfigure(config):
    root = config.stash.get(_OWN_ROOT, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def on_rank_0_only(monkeypatch):
    """``set(name, value)``: the environment variable ``name`` set to ``value`` on rank 0 and unset
    on the other ranks (each process reads its own environment), undone after the test."""
    def set_on_rank_0(name: str, value: str) -> None:
        if MPI.COMM_WORLD.Get_rank() == 0:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)
    return set_on_rank_0


#: Seconds into a test after which a rank prints what it waits on (before pytest-timeout's limit,
#: 240 s in ``tests/conftest.py``, ends the process with the stacks alone).
WATCHDOG_SECONDS = float(os.environ.get("SPARSECOLL_TEST_WATCHDOG", "200"))


def _describe_stage(stage) -> str:
    """One line on a request's stage in flight: a list of MPI requests, or a dynamic stage's state."""
    if stage is None:
        return "none"
    if type(stage) is list:
        return f"{len(stage)} MPI requests, {sum(1 for r in stage if r.Get_status())} complete"
    fields = ("step", "put_done", "entered", "ticket", "flagged", "started")
    state = {f: getattr(stage, f) for f in fields if hasattr(stage, f)}
    steps = getattr(stage, "steps_", None)
    if steps is not None:
        state["steps"] = len(steps)
        state["unsent"] = [step.unsent for step in steps]
        state["awaited RTEs"] = [len(step.waiting) for step in steps]
    return f"{type(stage).__name__} {state}"


def _report_stuck_test(name: str, capture_manager) -> None:
    """Print, to stderr past pytest's capture (a test ended by pytest-timeout shows nothing it
    captured), this rank's sparsecoll requests in flight and every thread's stack."""
    from sparsecoll.runtime.progress import ENGINE
    rank = MPI.COMM_WORLD.Get_rank()
    lines = [f"{STUCK} rank {rank}: {name} still runs after {WATCHDOG_SECONDS:.0f} s; "
             f"sparsecoll requests in flight: {len(ENGINE.pending)}"]
    for request in list(ENGINE.pending):
        try:
            lines.append(f"{STUCK} rank {rank}:   {type(request).__name__}: {_describe_stage(request._current)}")
        except Exception as error:  # noqa: BLE001 (a report must not raise)
            lines.append(f"{STUCK} rank {rank}:   {type(request).__name__}: unreadable ({error!r})")
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        lines.append(f"-- thread {names.get(ident, ident)}:")
        lines.extend(line.rstrip() for line in traceback.format_stack(frame))
    if capture_manager is None:
        print("\n".join(lines), file=sys.stderr, flush=True)
        return
    with capture_manager.global_and_fixture_disabled():
        print("\n".join(lines), file=sys.stderr, flush=True)


@pytest.fixture(autouse=True)
def report_if_stuck(request):
    """Each test: where it runs past :data:`WATCHDOG_SECONDS`, say what this rank waits on (a hang
    that shows up once in many runs needs more than the stacks pytest-timeout prints)."""
    capture_manager = request.config.pluginmanager.getplugin("capturemanager")
    timer = threading.Timer(WATCHDOG_SECONDS, _report_stuck_test, args=(request.node.nodeid, capture_manager))
    timer.daemon = True
    timer.name = "sparsecoll-test-watchdog"
    timer.start()
    yield
    timer.cancel()


#: Threads the test harness runs beside each test: pytest-timeout's timer (``--timeout-method=thread``)
#: and :func:`report_if_stuck`'s.
HARNESS_THREADS = ("pytest_timeout", "sparsecoll-test-watchdog")


@pytest.fixture(autouse=True)
def waits_as_in_the_program(monkeypatch):
    """Each test: sparsecoll's waits take the path the program's own threads decide, not counting
    the harness's timer threads. A wait blocks in MPI through the progress engine where no other
    thread of the program could call into sparsecoll, and tests and yields where one could
    (:func:`sparsecoll.runtime.progress.other_threads_may_call_in`); pytest-timeout's timer
    thread alone made every wait of the suite test and yield, so the path of a program without
    threads ran only where a test forced it."""
    from sparsecoll.runtime import progress

    def program_threads_may_call_in() -> bool:
        me, engine_thread = threading.current_thread(), progress.ENGINE._thread
        return any(thread is not me and thread is not engine_thread and not thread.name.startswith(HARNESS_THREADS)
                   for thread in threading.enumerate())

    monkeypatch.setattr(progress, "other_threads_may_call_in", program_threads_may_call_in)
