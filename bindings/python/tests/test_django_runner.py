"""The Django backend's tests as a Django project runs them: Django's own
test runner (`python -m django test`, DiscoverRunner) on djangoproject's
settings and tests, against the session's redis-server. Skipped when Django
is not installed."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("django")

HERE = os.path.dirname(os.path.abspath(__file__))


# A DeprecationWarning fails the run, except the two that Django 3.2 itself
# causes on Python 3.11 when it is imported (its own code, not the backend's).
WARNINGS = ["-W", "error::DeprecationWarning",
            "-W", "ignore:'cgi' is deprecated:DeprecationWarning:django.http.request",
            "-W", "ignore:Use setlocale(), getencoding() and getlocale() instead:"
                  "DeprecationWarning:django.utils.encoding"]


def test_the_backend_passes_under_djangos_test_runner(server):
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="djangoproject.settings",
               XFETCH_REDIS_URL=server.url, PYTHONPATH=HERE)
    env.pop("PYTHONWARNINGS", None)
    out = subprocess.run([sys.executable, *WARNINGS, "-m", "django", "test",
                          "djangoproject.tests", "-v", "2", "--noinput"],
                         cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    assert "Ran 10 tests" in report and "OK" in report, report
    assert "DeprecationWarning" not in report, report
