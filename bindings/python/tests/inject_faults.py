"""A fault injector to find isolation holes (opt-in, `-p inject_faults`; not
loaded otherwise): chosen tests fail half way, so the failures of the
others are collateral.

    cd bindings/python/tests
    XFETCH_INJECT_PARITY=0 XFETCH_RESULTS=/tmp/r.txt python -m pytest -p inject_faults
    grep COLLATERAL /tmp/r.txt    # tests that failed without being made to

XFETCH_INJECT=<regex> (nodeids) or XFETCH_INJECT_PARITY=0|1 (every other
test) chooses the tests; each raises Injected (an AssertionError) at the
first line it runs at or past XFETCH_INJECT_AT (0.5) of its source, in the
test function or a function nested in it, on the main thread.
XFETCH_ORDER=reverse runs the tests backwards. XFETCH_RESULTS=<file> gets a
line per failure: INJ (chosen) or COLLATERAL, the phase and the nodeid."""
import ctypes
import inspect
import threading
import os
import re
import sys

import pytest

PAT = os.environ.get("XFETCH_INJECT")
FRAC = float(os.environ.get("XFETCH_INJECT_AT", "0.5"))


class Injected(AssertionError):
    """the injected failure"""


_PID = os.getpid()
PARITY = os.environ.get("XFETCH_INJECT_PARITY")
CHOSEN = set()


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get("XFETCH_ORDER") == "reverse":
        items.reverse()
    for i, it in enumerate(items):
        if PARITY is not None and i % 2 == int(PARITY):
            CHOSEN.add(it.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    hit = item.nodeid in CHOSEN or (PAT and re.search(PAT, item.nodeid))
    if not hit or not hasattr(item, "function"):
        yield
        return
    fn = item.function
    code = fn.__code__
    lines, first = inspect.getsourcelines(fn)
    mid = first + int(len(lines) * FRAC)
    fired = []

    def local(frame, event, arg):
        if (event == "line" and not fired and frame.f_lineno >= mid
                and threading.current_thread() is threading.main_thread()
                and os.getpid() == _PID):  # never in a test's fork child
            fired.append(frame.f_lineno)
            # raised by the eval loop at its next check, not from the trace
            # function (that path upsets CPython 3.11's recursion counter)
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(threading.get_ident()), ctypes.py_object(Injected))
            return None
        return local

    def glob(frame, event, arg):
        c = frame.f_code
        if c.co_filename == code.co_filename and (c is code or c.co_qualname.startswith(
                code.co_qualname + ".<locals>")):
            return local
        return None
    sys.settrace(glob)
    try:
        yield
    finally:
        sys.settrace(None)


_OUT = os.environ.get("XFETCH_RESULTS")


def pytest_runtest_logreport(report):
    if _OUT and report.failed:
        with open(_OUT, "a") as f:
            chosen = report.nodeid in CHOSEN or (PAT and re.search(PAT, report.nodeid))
            mark = "INJ" if chosen else "COLLATERAL"
            f.write(f"{mark}\t{report.when}\t{report.nodeid}\n")
