"""``perfguard.ab.abrun.run_pairs``: how pairs are requested from the workers, and when it stops.

Fake workers answer the protocol's ``measure`` and ``pairs`` ops with fixed
latencies, so the tests check the scheduling (order within pairs, blocks ending at
the stopping rule's looks, the time cap) and never the clock's figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfguard.ab.abrun import SETTLE_PAIRS, Slot, run_pairs
from perfguard.ab.paired import StoppingRule, pair_orders

A_NS, B_NS = 1_000_000, 1_300_000  # B is 30% slower: a clear regression


class FakeWorker:
    """Records every request; slot ``a`` takes A_NS per request, any other ``b_ns``."""

    def __init__(self, name: str = "w", b_ns: int = B_NS) -> None:
        self.name, self.b_ns = name, b_ns
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def request(self, op: str, timeout_s: float | None = None, **fields: Any) -> dict[str, Any]:
        self.requests.append((op, fields))
        if op == "pairs":
            n = len(fields["order"])
            return {"a_ns": [A_NS] * n, "b_ns": [self.b_ns] * n}
        assert op == "measure" and fields["k"] == 1
        return {"samples_ns": [A_NS if fields.get("slot") == "a" else self.b_ns]}


def test_one_worker_gets_blocks_of_pairs_that_end_at_the_looks() -> None:
    # B exactly at the limit (+50%): no look can stop (the ratio is not beyond the limit
    # and no bound is below it), so the blocks run on to the cap.
    worker = FakeWorker(b_ns=A_NS * 3 // 2)
    rule = StoppingRule(limit=0.5, max_pairs=600)
    a_ns, b_ns, decision, _ = run_pairs(Slot(worker, "a"), Slot(worker, "b"), rule, seed=7)  # type: ignore[arg-type]
    sizes = [len(fields["order"]) for op, fields in worker.requests]
    assert {op for op, _ in worker.requests} == {"pairs"}
    assert sizes == [1, SETTLE_PAIRS, 200, 100, 100, 100, 100]  # looks at 200, 300, ... 600
    assert all(fields["slots"] == ["a", "b"] for _, fields in worker.requests)
    orders = pair_orders(rule.max_pairs + SETTLE_PAIRS + 1, 7)
    sent = np.concatenate([fields["order"] for _, fields in worker.requests])
    assert np.array_equal(sent, orders[: sent.size])
    assert a_ns.size == b_ns.size == 600 and set(a_ns) == {A_NS} and set(b_ns) == {A_NS * 1.5}
    assert (decision.stop, decision.pairs, decision.verdict) == (True, 600, "unchanged")
    assert "max_pairs=600" in decision.reason


def test_a_clear_regression_stops_at_the_first_look() -> None:
    worker = FakeWorker()
    _, _, decision, _ = run_pairs(Slot(worker, "a"), Slot(worker, "b"), StoppingRule())  # type: ignore[arg-type]
    assert (decision.verdict, decision.pairs) == ("regression", 200)
    assert "stopped early" in decision.reason


def test_two_workers_alternate_single_requests_in_the_scheduled_order() -> None:
    wa, wb = FakeWorker("A"), FakeWorker("B")
    rule = StoppingRule(max_pairs=200)
    a, b = Slot(wa, "a"), Slot(wb, "main")  # type: ignore[arg-type]
    log: list[str] = []
    for slot, tag in ((a, "a"), (b, "b")):
        worker = slot.worker
        inner = worker.request

        def tagged(op: str, timeout_s: float | None = None, _t: str = tag, _i: Any = inner,
                   **fields: Any) -> dict[str, Any]:  # fmt: skip
            log.append(_t)
            return dict(_i(op, timeout_s=timeout_s, **fields))

        worker.request = tagged  # type: ignore[method-assign]
    a_ns, b_ns, decision, _ = run_pairs(a, b, rule, seed=3)
    assert a_ns.size == b_ns.size == 200 and set(a_ns) == {A_NS} and set(b_ns) == {B_NS}
    firsts = "".join(log[0::2])
    orders = pair_orders(rule.max_pairs + SETTLE_PAIRS + 1, 3)[: len(firsts)]
    assert firsts == "".join("a" if x else "b" for x in orders)
    assert sorted(log[0::2] + log[1::2]) == sorted(log) and all(
        {log[i], log[i + 1]} == {"a", "b"} for i in range(0, len(log), 2)
    )
    assert decision.verdict == "regression"


def test_the_time_cap_cuts_the_next_block_short() -> None:
    worker = FakeWorker()
    rule = StoppingRule(max_seconds=1e-9)  # spent before the first counted pair
    a_ns, _, decision, _ = run_pairs(Slot(worker, "a"), Slot(worker, "b"), rule)  # type: ignore[arg-type]
    assert a_ns.size == 1  # one pair, not a 200-pair block past the cap
    assert (decision.stop, decision.verdict) == (True, "undecided")
    assert "max_seconds" in decision.reason
