"""The Django side of the Django backend's tests (test_django*.py): Django
configured once for the session (settings.configure: no project), the
backend's settings per test (override_settings), and a child interpreter
running Django. Importing it skips the importing module when Django is not
installed."""
import subprocess
import sys
import textwrap

import pytest

django = pytest.importorskip("django")

from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        SECRET_KEY="xfetch-tests", ALLOWED_HOSTS=["testserver"], USE_TZ=True,
        INSTALLED_APPS=["django.contrib.sessions"],
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        SESSION_ENGINE="django.contrib.sessions.backends.cache",
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates"}])
    django.setup()

from django.core.cache import caches  # noqa: E402
from django.test import override_settings  # noqa: E402

BACKEND = "xfetch.contrib.django.XFetchCache"


def configured(**aliases):
    """override_settings(CACHES=...) with each alias' settings; Django drops
    its cache handlers on the change, so caches[alias] is made anew."""
    return override_settings(CACHES={
        alias: dict({"BACKEND": BACKEND}, **conf) for alias, conf in aliases.items()})


@pytest.fixture
def dj(server, admin):
    """caches["default"]: the backend on the session's server, KEY_PREFIX "site"."""
    with configured(default={"LOCATION": server.url, "KEY_PREFIX": "site"}):
        yield caches["default"]


def _run_django(url, body, backend=BACKEND, args=(), wait=True):
    """A child interpreter with settings.configure(CACHES default = backend
    on url) running body; argv[1] is url."""
    script = textwrap.dedent("""
        import sys, django
        from django.conf import settings
        settings.configure(CACHES={"default": {"BACKEND": %r, "LOCATION": sys.argv[1]}})
        django.setup()
    """ % backend) + textwrap.dedent(body)
    proc = subprocess.Popen([sys.executable, "-c", script, url, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
