"""Per-test isolation (a plugin conftest.py loads): what a test opens in its
body or its function fixtures is undone when it ends, even when it fails
half way, so a failing test fails alone:

- every xfetch.Cache / xfetch.aio.Cache it opened and left open is closed
  (a failed test's frames stay alive in sys.last_traceback: its Caches, their
  connections and background refresh threads would live on);
- every process it started (subprocess.Popen: a redis-server of its own, a
  child interpreter; os.fork) and left running is killed and reaped (else
  it outlives pytest: an orphan redis-server, or a fork child blocked on a
  pipe for ever, connected to the shared server);
- the shared server (conftest `server`) answers PING again: a test that
  stopped or paused it would fail every later test.

A test that passed but leaked fails at teardown, naming the leak (a forked
child, a process, a thread still running 5 s after its end, the shared
server down), so a new leak is caught where it is made. An open Cache is
only closed: dropping one (closed by the garbage collector) is a behaviour
some tests check."""
import contextlib
import os
import signal
import subprocess
import sys
import time
import weakref

import pytest

import xfetch
import xfetch.aio

THREAD_GRACE_S = float(os.environ.get("XFETCH_TEST_THREAD_GRACE_S", "5.0"))
_PID = os.getpid()


class _Opened:
    """What the running test opened (recording only while a test runs: the
    session and module fixtures' servers are not the test's)."""

    def __init__(self):
        self.active = False
        self.caches = []  # weakrefs
        self.procs = []  # subprocess.Popen
        self.forks = []  # pids

    def reset(self, active):
        self.active = active
        self.caches, self.procs, self.forks = [], [], []


opened = _Opened()


@contextlib.contextmanager
def kept():
    """What is opened inside is not the test's (a fixture's cluster that
    outlives the test): not recorded, so not ended at the test's end."""
    was, opened.active = opened.active, False
    try:
        yield
    finally:
        opened.active = was


def _recording(init, into):
    def __init__(self, *a, **kw):
        init(self, *a, **kw)
        if opened.active:
            getattr(opened, into).append(weakref.ref(self) if into == "caches" else self)
    return __init__


def _fork():
    pid = _real_fork()
    if pid and opened.active:
        opened.forks.append(pid)
    return pid


for _cls in (xfetch.Cache, xfetch.aio.Cache):
    _cls.__init__ = _recording(_cls.__init__, "caches")
subprocess.Popen.__init__ = _recording(subprocess.Popen.__init__, "procs")
_real_fork, os.fork = os.fork, _fork


def _close(cache):
    """Closes a Cache the test left open, whatever its face and state."""
    if isinstance(cache, xfetch.aio.Cache):
        for task in list(cache._refreshes):  # its loop may be closed: no await
            try:
                task.cancel()
            except RuntimeError:  # "Event loop is closed": the task is gone with it
                pass
        cache.__del__()  # drops its connections, as when it is garbage collected
    else:
        cache.close(timeout=0)


def _is_open(cache):
    if not cache.is_set_up:  # made without a URL, never set up: nothing to close
        return False
    if isinstance(cache, xfetch.aio.Cache):
        return cache._engine is not None
    return not cache._pool.closed


def _end_processes():
    """Kills and reaps the test's processes still running; names them."""
    left = []
    for pid in opened.forks:
        try:
            if os.waitpid(pid, os.WNOHANG) == (0, 0):
                left.append(f"forked child {pid}")
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        except ChildProcessError:  # reaped by the test
            pass
    for proc in opened.procs:
        if proc.poll() is None:
            left.append(f"process {proc.pid} {proc.args[0] if proc.args else ''}")
            try:
                os.kill(proc.pid, signal.SIGCONT)  # a stopped one cannot end
            except ProcessLookupError:
                pass
            proc.kill()
            proc.wait(10)
    return left


def _threads_left(before):
    """The test's threads still running after THREAD_GRACE_S (their stacks)."""
    deadline = time.monotonic() + THREAD_GRACE_S
    while True:
        frames = sys._current_frames()
        new = {t: f for t, f in frames.items() if t not in before}
        if not new or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    out = []
    for tid, frame in new.items():
        where = []
        while frame is not None and len(where) < 3:
            where.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
                         f" {frame.f_code.co_name}")
            frame = frame.f_back
        out.append(f"thread {tid} at " + " <- ".join(where))
    return out


def _not_a_fork_child():
    """A test's fork child that raised before its os._exit() must not go on
    running the session's tests (a second pytest, flushing the shared
    server under the first one's feet): it ends here."""
    if os.getpid() != _PID:
        os._exit(70)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    setattr(item, "rep_" + report.when, report)


@pytest.fixture(autouse=True)
def isolation(request):
    """Set up after the session and module fixtures, torn down after every
    other function fixture: undoes what the test left (see the module)."""
    _not_a_fork_child()
    server = request.getfixturevalue("server") if "server" in request.fixturenames else None
    threads = set(sys._current_frames())
    opened.reset(active=True)
    yield
    _not_a_fork_child()
    caches, opened.active = opened.caches, False
    leaks = []
    for ref in caches:
        cache = ref()
        if cache is not None and _is_open(cache):
            _close(cache)
    leaks += _end_processes()
    leaks += _threads_left(threads)
    if server is not None and not server.answers():
        leaks.append("the shared redis-server does not answer (restarted)")
        server.restart()
    opened.reset(active=False)
    call = getattr(request.node, "rep_call", None)
    if leaks and call is not None and call.passed:
        pytest.fail("the test left behind: " + "; ".join(leaks), pytrace=False)
