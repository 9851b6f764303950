"""The Django backend's tests as a Django project runs them: Django's own
test runner (`python -m django test`, DiscoverRunner) on djangoproject's
settings and tests, against the session's redis-server (with the migration
from django-redis), and on a 3+3 Redis Cluster (settings_cluster: LOCATION
is its seeds). Skipped when Django is not installed."""
import importlib.util
import os
import subprocess
import sys

import pytest

pytest.importorskip("django")

import xfetch.testing  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


# A DeprecationWarning fails the run, except the two that Django 3.2 itself
# causes on Python 3.11 when it is imported (its own code, not the backend's).
WARNINGS = ["-W", "error::DeprecationWarning",
            "-W", "ignore:'cgi' is deprecated:DeprecationWarning:django.http.request",
            "-W", "ignore:Use setlocale(), getencoding() and getlocale() instead:"
                  "DeprecationWarning:django.utils.encoding"]


def django_test(settings, labels, **env):
    """`python -m django test labels` with DJANGO_SETTINGS_MODULE=settings
    and env added; returns its output after asserting that it passed, ran
    count tests (labels: {module: count}) and skipped none."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE=settings, PYTHONPATH=HERE, **env)
    env.pop("PYTHONWARNINGS", None)
    out = subprocess.run([sys.executable, *WARNINGS, "-m", "django", "test", *labels,
                          "-v", "2", "--noinput"],
                         cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    assert f"Ran {sum(labels.values())} tests" in report, report
    assert "\nOK\n" in report, report  # not "OK (skipped=...)"
    assert "DeprecationWarning" not in report, report
    for label in labels:
        assert f"({label}." in report, report  # each module's tests ran
    return report


def test_the_backend_passes_under_djangos_test_runner(server):
    labels = {"djangoproject.tests": 10}
    if importlib.util.find_spec("django_redis"):
        labels["djangoproject.tests_migration"] = 4
    django_test("djangoproject.settings", labels, XFETCH_REDIS_URL=server.url)


def test_the_backend_on_a_redis_cluster_under_djangos_test_runner():
    pytest.importorskip("redis.cluster")
    with xfetch.testing.RedisCluster(masters=3, replicas=1) as cluster:
        seeds = ",".join(f"127.0.0.1:{p}" for p in cluster.ports)
        django_test("djangoproject.settings_cluster",
                    {"djangoproject.tests": 10, "djangoproject.tests_cluster": 7},
                    XFETCH_CLUSTER_SEEDS=seeds)
