"""Where the time went: a cell's operator profile against its base's, for the report.

From a cell's current result and its base result (the archived baseline's pooled
result, or the base side of a same-run A/B run; either may lack a profile) this
builds what the report's "Where the time went" section shows:

* the top nodes and op types by added time (base -> current per request, the change,
  its share of the whole change), in the order :func:`perfguard.records.opprofile.diff_profiles`
  ranks them, with nodes found on one side only marked ``new`` / ``gone`` and the rest
  folded into one "N more nodes, X ms" line;
* an icicle chart of the current profile: one row per level of the node paths
  (``NodeTime.path``), each box as wide as its current time per request and coloured
  by its change against the base;
* the headline (``ProfileDiff.headline``) and its Markdown twin for summary.md.

The icicle is hand-written SVG, not matplotlib (as ``perfguard.report.plots`` is):
it is a few hundred rectangles whose every box needs a ``<title>`` tooltip with its
own figures, and matplotlib draws neither tooltips nor untrusted names safely (node
names come from the model). Hand-written, every name is escaped here, the file costs
no figure-drawing time, and the SVG is self-contained (no font, script or stylesheet).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup

from perfguard.core.text import md_code, md_text, plain
from perfguard.records.opprofile import (
    PATH_SEPARATOR,
    Contribution,
    OperatorProfile,
    ProfileDiff,
    diff_profiles,
    signed_ms,
)
from perfguard.records.results import ScenarioResult

__all__ = [
    "ICICLE_WIDTH",
    "TOP_NODES",
    "TOP_OP_TYPES",
    "ProfileRow",
    "ProfileView",
    "change_colour",
    "icicle_svg",
    "markdown_headline",
    "profile_view",
    "share_note",
]

#: Rows of each table before the rest is one "N more" line.
TOP_NODES = 15
TOP_OP_TYPES = 10
#: The icicle's width in px (it scales down with the page: ``max-width: 100%``).
ICICLE_WIDTH = 960
ROW_HEIGHT = 18
#: Levels drawn; deeper path levels are folded into the last one drawn.
MAX_LEVELS = 14
#: Boxes narrower than this (px) are not drawn: their time stays in their parent's box.
MIN_BOX = 1.0
#: A change within this (relative) is "the same" (grey); full colour from SATURATE on.
SAME = 0.02
SATURATE = 0.5
GREY = (0xD9, 0xD9, 0xD9)
RED = (0xD6, 0x27, 0x28)
BLUE = (0x1F, 0x77, 0xB4)
#: Characters per px of an 11 px sans-serif label, roughly (labels are cut to fit).
CHAR_PX = 6.4
UNNAMED = "(unnamed)"
#: A trace path worth a link: relative, inside the report's folder, no scheme. Anything
#: else (a hostile results file) is shown as text only.
_TRACE_PATH = re.compile(r"(?!/)(?!.*\.\.)[A-Za-z0-9_.\-/]+")


def ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class ProfileRow:
    """One row of a "where the time went" table, as the template prints it."""

    name: str
    op_type: str
    provider: str
    base: str
    current: str
    delta: str
    share: str
    #: ``new`` (only in the current profile), ``gone`` (only in the base's) or "".
    mark: str


@dataclass(frozen=True)
class ProfileView:
    """The "Where the time went" section of one cell.

    ``has_base``: the base side had a profile, so the tables rank the change;
    without one they rank where the time goes now (``base_note`` says why).
    """

    headline: str
    has_base: bool
    base_note: str
    profiler: str
    requests: int
    base_total: str
    current_total: str
    change: str
    nodes: tuple[ProfileRow, ...]
    nodes_more: str
    op_types: tuple[ProfileRow, ...]
    op_types_more: str
    #: Made here with every name escaped, so the template prints it as it is.
    icicle: Markup
    trace: str | None
    #: ``trace`` is a plain relative path, safe as a link's target.
    trace_link: bool
    cost: str
    legend: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    #: Nodes added up per layer (``records.opprofile.layer_of``), when that differs from the
    #: nodes themselves (ONNX Runtime: a layer's operations); the headline names the top.
    layers: tuple[ProfileRow, ...] = ()
    layers_more: str = ""
    #: What the tables' shares are of, when a share is over 100% or negative (""
    #: otherwise): the net change, and that other rows moved the other way.
    share_note: str = ""


def _row(c: Contribution, has_base: bool, providers: dict[str, str]) -> ProfileRow:
    mark = ""
    if has_base and c.side == "current only":
        mark = "new"
    elif c.side == "base only":
        mark = "gone"
    return ProfileRow(
        name=c.key or UNNAMED,
        op_type=c.op_type,
        provider=providers.get(c.key, ""),
        base=ms(c.base_ns),
        current=ms(c.current_ns),
        delta=signed_ms(c.delta_ns) if has_base else "",
        share=f"{c.share:.0%}",
        mark=mark,
    )


def _more(rest: Sequence[Contribution], what: str, has_base: bool) -> str:
    """``12 more nodes, +0.030 ms`` (their change) or ``12 more nodes, 0.030 ms`` (their time)."""
    if not rest:
        return ""
    plural = what if len(rest) == 1 else f"{what}s"
    if has_base:
        return f"{len(rest)} more {plural}, {signed_ms(sum(c.delta_ns for c in rest))}"
    return f"{len(rest)} more {plural}, {ms(sum(c.current_ns or 0.0 for c in rest))} ms"


def _cost(profile: OperatorProfile) -> str:
    requests = f"{profile.requests} request{'s' if profile.requests != 1 else ''}"
    took = "" if profile.wall_ns is None else f"; the pass took {profile.wall_ns / 1e9:.2f} s"
    return (
        f"{profile.profiler}, median of {requests} profiled after the timed measurement"
        f"{took} (not part of the gated figures)"
    )


def profile_view(
    current: ScenarioResult | None,
    base: ScenarioResult | None,
    *,
    top_nodes: int = TOP_NODES,
    top_op_types: int = TOP_OP_TYPES,
) -> ProfileView | None:
    """The section of a cell whose current result has a profile; None when it has none."""
    if current is None or current.profile is None:
        return None
    now = current.profile
    before = base.profile if base is not None else None
    diff = diff_profiles(before, now)
    has_base = before is not None
    by_layer = {c.key for c in diff.layers} != {c.key for c in diff.nodes}
    layers = diff.layers if by_layer else ()
    providers = {n.name: n.provider for n in now.nodes}
    if before is not None:
        providers = {**{n.name: n.provider for n in before.nodes}, **providers}
    if has_base:
        note = ""
    elif base is None:
        note = "No base result to compare with; this is where the time goes now."
    else:
        note = "The base side has no operator profile; this is where the time goes now."
    return ProfileView(
        headline=diff.headline(),
        has_base=has_base,
        base_note=note,
        profiler=now.profiler,
        requests=now.requests,
        base_total=ms(diff.base_ns),
        current_total=ms(diff.current_ns),
        change="" if diff.change_ns is None else signed_ms(diff.change_ns),
        nodes=tuple(_row(c, has_base, providers) for c in diff.nodes[:top_nodes]),
        nodes_more=_more(diff.nodes[top_nodes:], "node", has_base),
        op_types=tuple(_row(c, has_base, {}) for c in diff.op_types[:top_op_types]),
        op_types_more=_more(diff.op_types[top_op_types:], "op type", has_base),
        icicle=Markup(icicle_svg(now, before)),
        trace=now.trace,
        trace_link=now.trace is not None and _TRACE_PATH.fullmatch(now.trace) is not None,
        cost=_cost(now),
        legend=legend(has_base),
        layers=tuple(_row(c, has_base, {}) for c in layers[:top_nodes]),
        layers_more=_more(layers[top_nodes:], "layer", has_base),
        share_note=share_note(diff) if has_base else "",
    )


def share_note(diff: ProfileDiff) -> str:
    """``Shares are of the net change of operator time per request (+0.30 ms): a share
    over 100% is more than the net change because other rows moved the other way ...``,
    when a row's share is over 100% or below 0 (as printed); "" when every share reads
    as a part of the change."""
    change = diff.change_ns
    rows = [*diff.nodes, *diff.layers, *diff.op_types]
    if not change or not any(round(c.share * 100) > 100 or round(c.share * 100) < 0 for c in rows):
        return ""
    offset = diff.offset_note()
    beside = f" Beside the top one, {offset}." if offset else ""
    return (
        f"Shares are of the net change of operator time per request ({signed_ms(change)}): "
        "a share over 100% is more than the net change because other rows moved the "
        f"other way and offset part of it.{beside} A negative share is a row that moved "
        "against the net change."
    )


def markdown_headline(diff: ProfileDiff, *, in_table: bool = True) -> str:
    """``ProfileDiff.headline()`` for Markdown: the node name a code span, the op type
    inert text (``perfguard.core.text``)."""

    def where(top: Contribution) -> str:
        name = md_code(top.key, 200, in_table=in_table)
        return f"{md_text(top.op_type, 80)} {name}" if top.op_type else name

    return diff.headline(where)


# --------------------------------------------------------------------------- icicle


@dataclass
class _Box:
    """One path prefix: its own nodes' time and its children's (current and base)."""

    label: str
    path: tuple[str, ...]
    self_ns: float = 0.0
    base_self_ns: float = 0.0
    in_base: bool = False
    children: dict[str, _Box] = field(default_factory=dict)
    sums: tuple[float, float, bool] | None = None

    def total(self) -> float:
        return self._sums()[0]

    def base_total(self) -> float:
        return self._sums()[1]

    def seen_in_base(self) -> bool:
        return self._sums()[2]

    def _sums(self) -> tuple[float, float, bool]:
        # Computed once per box (the tree is complete before anything reads it).
        if self.sums is None:
            below = [c._sums() for c in self.children.values()]
            self.sums = (
                self.self_ns + sum(b[0] for b in below),
                self.base_self_ns + sum(b[1] for b in below),
                self.in_base or any(b[2] for b in below),
            )
        return self.sums


def _levels(name: str) -> tuple[str, ...]:
    # As NodeTime.path splits a name; past MAX_LEVELS the rest is one level.
    path = tuple(part for part in name.split(PATH_SEPARATOR) if part) or (UNNAMED,)
    if len(path) > MAX_LEVELS:
        path = (*path[: MAX_LEVELS - 1], PATH_SEPARATOR.join(path[MAX_LEVELS - 1 :]))
    return path


def _tree(current: OperatorProfile, base: OperatorProfile | None) -> _Box:
    root = _Box("all operators", ())
    for profile, is_base in ((current, False), (base, True)):
        for node in profile.nodes if profile is not None else ():
            box = root
            for level in _levels(node.name):
                box = box.children.setdefault(level, _Box(level, (*box.path, level)))
            if is_base:
                box.base_self_ns += node.ns
                box.in_base = True
            else:
                box.self_ns += node.ns
    root.in_base = base is not None
    return root


def change_colour(base_ns: float | None, current_ns: float) -> str:
    """The fill of a box: grey when no base or within ``SAME``; red when it takes more
    (full red at +``SATURATE`` or new), blue when less (full blue at -``SATURATE``)."""
    if base_ns is None:
        return _hex(GREY)
    if base_ns <= 0:
        return _hex(RED) if current_ns > 0 else _hex(GREY)
    change = current_ns / base_ns - 1.0
    if abs(change) < SAME:
        return _hex(GREY)
    strength = min(1.0, abs(change) / SATURATE)
    target = RED if change > 0 else BLUE
    # From a light tint at SAME to the full colour at SATURATE: a 3% change is visible.
    mix = 0.25 + 0.75 * strength
    return _hex(tuple(round(g + (t - g) * mix) for g, t in zip(GREY, target, strict=True)))


def _hex(rgb: Sequence[int]) -> str:
    return "#" + "".join(f"{v:02x}" for v in rgb)


def _ink(fill: str) -> str:
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


#: The legend: (label, base ns, current ns) fed through ``change_colour``, so each
#: swatch is the very colour a box with that change gets.
_LEGEND_WITH_BASE: tuple[tuple[str, float | None, float], ...] = (
    (f"+{SATURATE:.0%} or more, or new", 1.0, 1.0 + SATURATE),
    ("+10%", 1.0, 1.10),
    (f"within \u00b1{SAME:.0%}", 1.0, 1.0),
    ("\u221210%", 1.0, 0.90),
    (f"\u2212{SATURATE:.0%} or less", 1.0, 1.0 - SATURATE),
)
_LEGEND_NO_BASE = (("no base profile to compare with", None, 1.0),)


def legend(has_base: bool) -> tuple[tuple[str, str], ...]:
    """(colour, what it means) for the icicle's legend, from ``change_colour`` itself."""
    rows = _LEGEND_WITH_BASE if has_base else _LEGEND_NO_BASE
    return tuple((change_colour(b, c), label) for label, b, c in rows)


def _esc(text: str) -> str:
    return html.escape(plain(text), quote=True)


def _label(text: str, width: float) -> str:
    room = int((width - 6) / CHAR_PX)
    if room < 3:
        return ""
    return text if len(text) <= room else text[: room - 1] + "\u2026"


def _tooltip(box: _Box, total: float, has_base: bool) -> str:
    cur = box.total()
    name = PATH_SEPARATOR.join(box.path) or box.label
    of_all = f" ({cur / total:.1%} of all)" if total > 0 else ""
    lines = [name, f"now {ms(cur)} ms per request{of_all}"]
    if has_base:
        if box.seen_in_base():
            base = box.base_total()
            lines.append(f"base {ms(base)} ms, change {signed_ms(cur - base)}")
        else:
            lines.append("new: not in the base profile")
    return "\n".join(lines)


def icicle_svg(
    current: OperatorProfile,
    base: OperatorProfile | None = None,
    *,
    width: int = ICICLE_WIDTH,
) -> str:
    """The current profile as an icicle: the whole at the top, each path level a row
    below, box widths the current time per request, fills the change vs ``base``."""
    root = _tree(current, base)
    total = root.total()
    has_base = base is not None
    boxes: list[str] = []
    depth = 0

    def draw(box: _Box, x: float, level: int, colour: Callable[[_Box], str]) -> None:
        nonlocal depth
        w = box.total() / total * width if total > 0 else float(width) * (level == 0)
        if w < MIN_BOX:
            return
        depth = max(depth, level)
        fill = colour(box)
        y = level * ROW_HEIGHT
        label = _label(box.label, w)
        text = (
            f'<text x="{x + 3:.1f}" y="{y + 13}" fill="{_ink(fill)}">{_esc(label)}</text>'
            if label
            else ""
        )
        boxes.append(
            f"<g><title>{_esc(_tooltip(box, total, has_base))}</title>"
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{ROW_HEIGHT - 1}" '
            f'fill="{fill}" stroke="#fff" stroke-width="0.5"/>{text}</g>'
        )
        at = x
        for child in sorted(box.children.values(), key=lambda c: (-c.total(), c.label)):
            draw(child, at, level + 1, colour)
            at += child.total() / total * width if total > 0 else 0.0

    def colour(box: _Box) -> str:
        if not has_base:
            return change_colour(None, box.total())
        return change_colour(box.base_total() if box.seen_in_base() else 0.0, box.total())

    draw(root, 0.0, 0, colour)
    chart_h = (depth + 1) * ROW_HEIGHT
    legend_y = chart_h + 8
    keys = []
    x = 0.0
    for fill, text in legend(has_base):
        keys.append(
            f'<rect x="{x:.0f}" y="{legend_y}" width="12" height="12" fill="{fill}" '
            f'stroke="#999" stroke-width="0.5"/>'
            f'<text x="{x + 16:.0f}" y="{legend_y + 10}" fill="#222">{_esc(text)}</text>'
        )
        x += 36 + len(text) * CHAR_PX
    height = legend_y + 18
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="icicle" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'font-family="system-ui,sans-serif" font-size="11">'
        f"<title>where the time went: current time per request by node path; "
        f"colour: change vs the base</title>{''.join(boxes)}{''.join(keys)}</svg>"
    )
