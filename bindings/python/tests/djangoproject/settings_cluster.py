"""djangoproject's settings on a Redis Cluster: the cache's LOCATION is the
list of seeds in XFETCH_CLUSTER_SEEDS (host:port, comma-separated), as a
project lists its cluster's nodes (`python -m django test
djangoproject.tests djangoproject.tests_cluster`)."""
import os

from djangoproject.settings import *  # noqa: F401,F403 (all but the caches)

CLUSTER_SEEDS = [f"redis://{seed}"
                 for seed in os.environ.get("XFETCH_CLUSTER_SEEDS", "127.0.0.1:7000").split(",")]
CACHES = {"default": {"BACKEND": "xfetch.contrib.django.XFetchCache",
                      "LOCATION": CLUSTER_SEEDS, "KEY_PREFIX": "runner", "TIMEOUT": 300}}
