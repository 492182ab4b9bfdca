"""The report's Token timing section of a generative cell (``ScenarioResult.tokens``).

It answers, for a reviewer, which phase of generation moved: the token figures beside
their baseline (TTFT, ITL, TPOT, end to end, output tokens/s) with each gated one's
verdict, where a request's time went (the prompt pass against the decode steps), and,
for the cells drawn in full, the TTFT and ITL distributions and the token timeline of
the median request (the request whose end to end is the nearest-rank median).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from markupsafe import Markup

from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.figures import LatencySummary
from perfguard.records.results import ScenarioResult
from perfguard.records.tokenfigures import TokenFigures
from perfguard.report import plots

__all__ = ["TokenRow", "TokenView", "median_request", "token_view"]


@dataclass(frozen=True)
class TokenRow:
    """One figure: its name, the baseline's and this run's value, the change, and the
    verdict of the gate on it (empty when it is not gated)."""

    name: str
    base: str
    current: str
    change: str
    verdict: str = ""


@dataclass
class TokenView:
    """What the section shows (``perfguard/report/templates/report.html.j2``)."""

    shape: str
    rows: list[TokenRow]
    where: str
    ttft_cdf: Markup | None = None
    itl_cdf: Markup | None = None
    timeline: Markup | None = None
    captions: dict[str, str] = field(default_factory=dict)


def median_request(tokens: TokenFigures) -> np.ndarray:
    """The token times (ns) of the request whose end to end is the nearest-rank median."""
    times = tokens.times()
    order = np.argsort(times[:, -1], kind="stable")
    row: np.ndarray = times[order[int(np.ceil(0.5 * len(order))) - 1]]
    return row


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.3f}"


def _change(base: float | None, current: float | None) -> str:
    if base is None or current is None or base <= 0:
        return "-"
    return f"{(current / base - 1.0) * 100:+.1f}%"


def _summary_rows(
    label: str, key: str, quantiles: tuple[str, ...], base: LatencySummary | None,
    current: LatencySummary | None, verdict: ScenarioVerdict | None,
) -> list[TokenRow]:  # fmt: skip
    rows = []
    for q in quantiles:
        b = getattr(base, q) if base is not None else None
        c = getattr(current, q) if current is not None else None
        metric = verdict.metric(f"{key}_{q}") if verdict is not None and key else None
        rows.append(
            TokenRow(
                f"{label} {q.upper()} (ms)",
                _ms(b),
                _ms(c),
                _change(b, c),
                metric.verdict.value if metric is not None else "",
            )
        )
    return rows


def _where(base: TokenFigures | None, current: TokenFigures) -> str:
    """Per request on average: the prompt pass (TTFT) and the decode steps after it."""

    def split(tokens: TokenFigures) -> tuple[float, float]:
        ttft = float(tokens.ttft().mean())
        return ttft, float(tokens.e2e().mean()) - ttft

    prefill, decode = split(current)
    total = prefill + decode
    text = (
        f"prompt pass {prefill / 1e6:.3f} ms ({prefill / total:.0%}), decode "
        f"{decode / 1e6:.3f} ms ({decode / total:.0%}) per request"
        if total > 0
        else "no time measured"
    )
    if base is None:
        return text
    b_prefill, b_decode = split(base)
    return (
        f"{text}; baseline {b_prefill / 1e6:.3f} + {b_decode / 1e6:.3f} ms: prompt pass "
        f"{_change(b_prefill, prefill)}, decode {_change(b_decode, decode)}"
    )


def token_view(
    current: ScenarioResult | None,
    base: ScenarioResult | None,
    verdict: ScenarioVerdict | None,
    *,
    full: bool,
) -> TokenView | None:
    """The section of a generative cell measured in this run (None for any other)."""
    tokens = current.tokens if current is not None else None
    if tokens is None:
        return None
    old = base.tokens if base is not None else None
    e2e = current.latency_ns if current is not None else None
    rows = [
        *_summary_rows("TTFT", "ttft", ("p50", "p95", "p99"), old.ttft_ns if old else None,
                       tokens.ttft_ns, verdict),
        *_summary_rows("ITL", "itl", ("p50", "p95", "p99"), old.itl_ns if old else None,
                       tokens.itl_ns, verdict),
        *_summary_rows("TPOT", "tpot", ("p50", "p95"), old.tpot_ns if old else None,
                       tokens.tpot_ns, verdict),
        *_summary_rows("end to end", "", ("p50", "p95"), base.latency_ns if base else None,
                       e2e, None),
    ]  # fmt: skip
    metric = verdict.metric("tokens_per_s") if verdict is not None else None
    rows.append(
        TokenRow(
            "output tokens/s",
            f"{old.tokens_per_s:.1f}" if old else "-",
            f"{tokens.tokens_per_s:.1f}",
            _change(old.tokens_per_s if old else None, tokens.tokens_per_s),
            metric.verdict.value if metric is not None else "",
        )
    )
    view = TokenView(
        shape=f"prompts of {tokens.prompt_tokens} tokens, {tokens.new_tokens} new tokens each, "
        f"batch {tokens.batch}; {tokens.requests} timed requests",
        rows=rows,
        where=_where(old, tokens),
    )
    if full:
        side = "baseline (blue) and current (red)" if old else "current (red)"
        view.ttft_cdf = Markup(
            plots.cdf_svg(tokens.ttft(), old.ttft() if old else None, what="TTFT")
        )
        view.captions["ttft"] = f"time to first token: {side}"
        if tokens.new_tokens > 1:
            view.itl_cdf = Markup(
                plots.cdf_svg(
                    tokens.itl().ravel(),
                    old.itl().ravel() if old and old.new_tokens > 1 else None,
                    what="inter-token gap",
                    of="gaps",
                )
            )
            view.captions["itl"] = f"inter-token latency, every gap of every request: {side}"
        mine = median_request(tokens) / 1e6
        theirs = median_request(old) / 1e6 if old else None
        view.timeline = Markup(
            plots.token_timeline_svg(mine.tolist(), theirs.tolist() if theirs is not None else None)
        )
        view.captions["timeline"] = (
            f"token timeline of the median request (by end to end): {side}; the first "
            "step is the prompt pass, the slope after it the time per token"
        )
    return view
