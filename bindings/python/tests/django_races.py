"""The thread race the Django backend's tests run both under pytest
(test_django_fleet.py) and under Django's test runner (djangoproject/): plain
functions, no pytest or settings of their own."""
import threading
import time


def get_or_set_from_threads(backend, key, threads=16, load_s=0.3):
    """threads threads, each with backend() (Django gives each thread its own
    backend object), call get_or_set(key, load, 60) together (a barrier);
    load sleeps load_s and returns {"v": 1}. Returns (the results, one entry
    per load)."""
    loads = []

    def load():
        loads.append(1)
        time.sleep(load_s)
        return {"v": 1}
    barrier = threading.Barrier(threads)
    out = []

    def one():
        c = backend()
        barrier.wait()
        out.append(c.get_or_set(key, load, 60))
    started = [threading.Thread(target=one) for _ in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    return out, loads
