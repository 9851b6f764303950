"""Integrations of xfetch with web frameworks: xfetch.contrib.django (a Django cache
backend)."""
