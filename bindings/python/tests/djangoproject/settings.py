"""A minimal Django project's settings for running the backend's tests under
Django's own test runner (`python -m django test djangoproject.tests`, with
DJANGO_SETTINGS_MODULE=djangoproject.settings): the cache on XFETCH_REDIS_URL,
cache sessions, templates; no database. Where django-redis is installed, the
alias "django_redis" is django-redis on the same Redis with the same
KEY_PREFIX (the migration tests, tests_migration). settings_cluster is the
same project on a Redis Cluster."""
import importlib.util
import os

SECRET_KEY = "xfetch-django-runner"
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
INSTALLED_APPS = ["django.contrib.sessions"]
DATABASES = {}
SESSION_ENGINE = "django.contrib.sessions.backends.cache"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates"}]
REDIS_URL = os.environ.get("XFETCH_REDIS_URL", "redis://127.0.0.1:6379/0")
CACHES = {"default": {"BACKEND": "xfetch.contrib.django.XFetchCache",
                      "LOCATION": REDIS_URL, "KEY_PREFIX": "runner", "TIMEOUT": 300}}
if importlib.util.find_spec("django_redis"):
    CACHES["django_redis"] = {"BACKEND": "django_redis.cache.RedisCache",
                              "LOCATION": REDIS_URL, "KEY_PREFIX": "runner", "TIMEOUT": 300}
