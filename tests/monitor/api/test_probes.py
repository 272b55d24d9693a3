"""/healthz and /readyz answer at once while the API's worker threads are all busy."""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from monitor.api.app import create_app
from monitor.api.server import API_WORKER_THREADS, ApiServer
from monitor.store.store import Store
from tests.helpers import wait_for

HEAVY = 100  # slow requests in flight, far more than the worker threads


def test_probes_answer_within_100ms_behind_a_hundred_slow_requests(store: Store) -> None:
    release = threading.Event()
    lock = threading.Lock()
    running = peak = 0

    def slow_view() -> list[dict[str, Any]]:
        """A heavy query, held until the test lets it go."""
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        try:
            release.wait(60)
        finally:
            with lock:
                running -= 1
        return []

    api = ApiServer(create_app(store, routes_view=slow_view), "127.0.0.1", 0)
    api.start()
    pool = ThreadPoolExecutor(HEAVY)
    try:
        heavy = [pool.submit(httpx.get, f"{api.url}/api/v1/routes", timeout=60)
                 for _ in range(HEAVY)]
        # Every worker thread is taken, and every slow request reached the server.
        wait_for(lambda: running == API_WORKER_THREADS, timeout=30, what="workers busy")
        server = api._server
        assert server is not None
        wait_for(lambda: len(server.server_state.connections) >= HEAVY, timeout=30,
                 what="all slow requests accepted")
        took: dict[str, list[float]] = {"/healthz": [], "/readyz": []}
        with httpx.Client(base_url=api.url, timeout=5) as client:
            for _ in range(5):
                for path, times in took.items():
                    started = time.perf_counter()
                    r = client.get(path)
                    times.append(time.perf_counter() - started)
                    assert r.status_code == 200, (path, r.text)
        assert not any(f.done() for f in heavy)  # still all in flight
        for path, times in took.items():
            assert statistics.median(times) < 0.1, (path, times)
            assert max(times) < 1.0, (path, times)
    finally:
        release.set()
        pool.shutdown(wait=True)
        api.stop()
    assert [f.result().status_code for f in heavy] == [200] * HEAVY
    # Heavy queries never took more threads (and pooled connections) than allowed.
    assert peak == API_WORKER_THREADS
