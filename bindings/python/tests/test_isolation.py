"""The isolation guard (isolation.py) itself, in a pytest of its own (no
Redis): a passing test that leaves a thread, a fork child or a process
running fails at teardown naming it, and the leftovers are ended; a failing
test's leftovers are ended without a second error."""
import os
import pathlib

import isolation

pytest_plugins = ["pytester"]

LEAKY = '''
import os, subprocess, sys, threading, time

def test_thread():
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()

def test_fork():
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    open("fork.pid", "w").write(str(pid))

def test_process():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])

def test_failing_with_a_process():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    assert False, "fails"

def test_clean():
    t = threading.Thread(target=time.sleep, args=(0.05,))
    t.start()
'''


def test_leaks_fail_the_test_that_made_them_and_are_ended(pytester, monkeypatch):
    pytester.makepyfile(isolation=pathlib.Path(isolation.__file__).read_text(),
                        test_leaky=LEAKY)
    pytester.makeconftest('pytest_plugins = ["isolation"]')
    monkeypatch.setenv("XFETCH_TEST_THREAD_GRACE_S", "0.3")  # test_thread's wait
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=1, errors=3)
    out = result.stdout.str()
    assert "ERROR at teardown of test_thread" in out and "left behind: thread" in out
    assert "ERROR at teardown of test_fork" in out and "left behind: forked child" in out
    assert "ERROR at teardown of test_process" in out and "left behind: process" in out
    assert "ERROR at teardown of test_failing" not in out
    pid = int((pytester.path / "fork.pid").read_text())
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "the fork child was not ended"
