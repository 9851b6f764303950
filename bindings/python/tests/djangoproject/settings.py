"""A minimal Django project's settings for running the backend's tests under
Django's own test runner (`python -m django test djangoproject.tests`, with
DJANGO_SETTINGS_MODULE=djangoproject.settings): the cache on XFETCH_REDIS_URL,
cache sessions, templates; no database."""
import os

SECRET_KEY = "xfetch-django-runner"
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
INSTALLED_APPS = ["django.contrib.sessions"]
DATABASES = {}
SESSION_ENGINE = "django.contrib.sessions.backends.cache"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates"}]
CACHES = {"default": {"BACKEND": "xfetch.contrib.django.XFetchCache",
                      "LOCATION": os.environ["XFETCH_REDIS_URL"],
                      "KEY_PREFIX": "runner", "TIMEOUT": 300}}
