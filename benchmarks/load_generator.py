"""How fast can the load generator drive a no-op model, beside a hand-written harness?

Open loop: for each asked rate, requests are scheduled (constant spacing) for
``--seconds``; the *scheduling lag* of a request is how late it was handed to
the server (``sent - scheduled``). A rate is *sustained* when the lag's P99 is
under 1 ms and at least 99% of the asked rate was sent. Reported: the highest
sustained rate of perfguard's generator (``perfguard.measure.loadgen.open_loop``) and,
measured in the same run with the same rates interleaved, of the usual
hand-written harness: a loop that sleeps until each request's time and submits
it to a ``concurrent.futures.ThreadPoolExecutor``.

Closed loop: N clients calling a no-op model as fast as they can for
``--seconds``: requests per second of ``perfguard.measure.loadgen.closed_loop`` beside a
thread pool whose N threads each loop ``t0 = clock(); call(); t1 = clock()``
through ``executor.submit(...).result()`` per request (the usual "N concurrent
requests" harness).

    python benchmarks/load_generator.py [--seconds 1] [--repeats 3]

Run on an idle machine: the figures measure the host as much as the code.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import threading
import time

import numpy as np

from perfguard.measure.loadgen import Worker, closed_loop, open_loop, schedule

RATES = (1000, 10_000, 50_000, 100_000, 150_000, 200_000, 300_000, 500_000, 750_000, 1_000_000)
LAG_P99_MS = 1.0


def noop() -> None:
    return None


ANSWERED: dict[float, list[float]] = {}


def perfguard_open(rate: float, seconds: float) -> tuple[float, float]:
    """(lag P99 ms, sent rate /s) of perfguard's open loop; answered/s kept in ANSWERED."""
    count = int(rate * seconds)
    log = open_loop(schedule(rate, count, "constant"), [Worker({1: noop})], max_seconds=30)
    sent = log.sent_ns >= 0
    lag = (log.sent_ns - log.scheduled_ns)[sent]
    span = (log.sent_ns[sent].max() - log.window_ns[0]) / 1e9
    window = (log.window_ns[1] - log.window_ns[0]) / 1e9
    ANSWERED.setdefault(rate, []).append(float(np.count_nonzero(log.end_ns >= 0)) / window)
    return float(np.percentile(lag, 99)) / 1e6, float(sent.sum()) / span


def threadpool_open(rate: float, seconds: float) -> tuple[float, float]:
    """The usual harness: sleep until each request's time, submit it to a thread pool."""
    count = int(rate * seconds)
    offsets = schedule(rate, count, "constant")
    clock = time.perf_counter_ns
    lags = np.empty(count, dtype=np.int64)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        t0 = clock() + 2_000_000
        last = t0
        for i, offset in enumerate(offsets):
            target = t0 + int(offset)
            now = clock()
            if target > now:
                time.sleep((target - now) / 1e9)
                now = clock()
            pool.submit(noop)
            lags[i] = now - target
            last = now
    span = (last - t0) / 1e9
    return float(np.percentile(lags, 99)) / 1e6, count / span if span > 0 else float("inf")


def perfguard_closed(clients: int, seconds: float) -> float:
    log = closed_loop([Worker({1: noop})] * clients, iterations=1, seconds=seconds)
    t0, t1 = log.window_ns
    return float(log.scheduled_ns.size) / ((t1 - t0) / 1e9)


def threadpool_closed(clients: int, seconds: float) -> float:
    clock = time.perf_counter_ns
    stop = clock() + int(seconds * 1e9)
    counts = [0] * clients
    lock = threading.Lock()

    def timed() -> int:
        t0 = clock()
        noop()
        return clock() - t0

    with concurrent.futures.ThreadPoolExecutor(max_workers=clients * 2) as pool:

        def client(index: int) -> None:
            samples = []
            while clock() < stop:
                samples.append(pool.submit(timed).result())
            with lock:
                counts[index] = len(samples)

        start = clock()
        clients_done = [pool.submit(client, i) for i in range(clients)]
        for future in clients_done:
            future.result()
        elapsed = (clock() - start) / 1e9
    return sum(counts) / elapsed


def _medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def sustained(results: dict[float, list[tuple[float, float]]]) -> float:
    """The highest rate whose median-over-repeats lag P99 < 1 ms and sent >= 99%."""
    best = 0.0
    for rate, runs in sorted(results.items()):
        lag, sent = _medians(runs)
        if lag < LAG_P99_MS and sent >= 0.99 * rate:
            best = rate
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    ours: dict[float, list[tuple[float, float]]] = {}
    pool: dict[float, list[tuple[float, float]]] = {}
    print("open loop, no-op model: lag P99 ms / sent per s (median of repeats)")
    print(f"{'rate/s':>9}  {'perfguard':>20}  {'(answered/s)':>12}  {'thread pool':>20}")
    for rate in RATES:
        for _ in range(args.repeats):  # interleaved, so a slow spell hits both
            ours.setdefault(rate, []).append(perfguard_open(rate, args.seconds))
            pool.setdefault(rate, []).append(threadpool_open(rate, args.seconds))
        a = _medians(ours[rate])
        b = _medians(pool[rate])
        answered = statistics.median(ANSWERED[rate])
        print(
            f"{rate:>9}  {a[0]:>9.3f} / {a[1]:>8.0f}  {answered:>12.0f}  "
            f"{b[0]:>9.3f} / {b[1]:>8.0f}"
        )
    print(
        f"highest sustained open-loop rate (lag P99 < {LAG_P99_MS:g} ms): "
        f"perfguard {sustained(ours):.0f}/s, thread pool {sustained(pool):.0f}/s"
    )
    print("closed loop, no-op model: requests per second (median of repeats)")
    for clients in (1, 2, 4, 8):
        a_runs, b_runs = [], []
        for _ in range(args.repeats):
            a_runs.append(perfguard_closed(clients, args.seconds))
            b_runs.append(threadpool_closed(clients, args.seconds))
        a, b = statistics.median(a_runs), statistics.median(b_runs)
        print(f"  {clients} clients: perfguard {a:>9.0f}/s, thread pool {b:>9.0f}/s ({a / b:.2f}x)")


if __name__ == "__main__":
    main()
