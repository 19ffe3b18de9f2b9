"""pytest under mpiexec: every rank runs the same tests in the same order. A test that fails on
any rank fails on every rank (agreed at its teardown, which every rank reaches), and a test that
hangs is stopped by a timeout: the rank dumps its Python stacks and exits, and mpiexec ends the
others."""

import faulthandler
import os
import sys

import pytest

import distop
from distop import _core

TIMEOUT_S = float(os.environ.get("DISTOP_PYTEST_TIMEOUT", "60"))


def pytest_runtest_setup(item):
    faulthandler.dump_traceback_later(TIMEOUT_S, exit=True, file=sys.stderr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when in ("setup", "call") and rep.failed:
        item._distop_failed = True
        # Now, not in the summary: a rank that fails may leave the others waiting in a
        # collective until the timeout ends the job.
        sys.stderr.write(f"\n[rank {distop.rank()}] {item.nodeid} failed:\n{rep.longreprtext}\n")
        sys.stderr.flush()
    if rep.when == "teardown":
        mine = 1 if getattr(item, "_distop_failed", False) or rep.failed else 0
        failed = _core.allgather_int(distop.comm_handle(), mine)
        faulthandler.cancel_dump_traceback_later()
        if any(failed) and not mine:
            rep.outcome = "failed"
            ranks = ", ".join(str(r) for r, f in enumerate(failed) if f)
            rep.longrepr = f"failed on rank(s) {ranks} (see their output)"


@pytest.fixture
def world_size():
    return distop.size()


@pytest.fixture
def rank():
    return distop.rank()
