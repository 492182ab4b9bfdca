"""Operator profiles: where a cell's time went, per node/layer and per op type.

A profile is taken in a pass of its own after a cell's timed measurement, never
inside it (``perfguard.measure.profiling``), with the runtime's own profiler:
``torch.profiler`` (module hierarchy and aten ops), ONNX Runtime's session profiling
(per graph node, with its execution provider) or TensorRT's ``IProfiler`` (per
layer). Each figure is the **median time per request** over the profiled requests.

A profile travels inside a cell's result (``ScenarioResult.profile``), so it is
archived with the baseline and an archived comparison diffs against the stored
profile without measuring the base again. Its JSON form is compact (rows, integer
nanoseconds) so that a profile of a few hundred nodes stays well under 50 KB.

:func:`diff_profiles` turns two profiles into contributions to the change, sorted
by how much each added; :meth:`ProfileDiff.headline` is the one line the summary and
a failure message print ("+0.41 ms per request, 62% of it in MatMul
`/encoder/layer.3/attention/self/query`").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from perfguard.core.errors import ResultsError
from perfguard.records.declare import Codec

__all__ = [
    "PROFILE_CODEC",
    "PROFILERS",
    "Contribution",
    "NodeTime",
    "OpTypeTime",
    "OperatorProfile",
    "ProfileDiff",
    "diff_profiles",
    "layer_of",
    "signed_ms",
]

#: ``OperatorProfile.profiler`` values: which runtime profiler took the profile.
PROFILERS: tuple[str, ...] = ("torch.profiler", "onnxruntime", "tensorrt")

#: Node names are paths; this separates their levels (a torch module path
#: ``layer2.0.conv2`` is stored as ``layer2/0/conv2``, as ONNX names already are).
PATH_SEPARATOR = "/"

_NODE_COLUMNS = ("name", "op_type", "provider", "ns")


@dataclass(frozen=True)
class NodeTime:
    """One node (an ONNX graph node, a TensorRT layer, a torch module) of a profile.

    ``ns`` is the node's median *self* time per request: time in the node itself,
    not in nodes nested below it (a torch module's children), so that the nodes of a
    profile add up to its operator time. ``provider`` is where it ran (an ONNX
    Runtime execution provider, ``cuda``/``cpu`` for torch); ``""`` when unknown.
    """

    name: str
    op_type: str
    ns: float
    provider: str = ""

    @property
    def path(self) -> tuple[str, ...]:
        """The levels of ``name`` (for an icicle chart): ``/a/b/Conv`` -> (a, b, Conv)."""
        return tuple(part for part in self.name.split(PATH_SEPARATOR) if part)


@dataclass(frozen=True)
class OpTypeTime:
    """All the nodes of one op type (``Conv``, ``aten::addmm``): median time per request."""

    op_type: str
    ns: float


@dataclass(frozen=True)
class OperatorProfile:
    """A cell's operator profile.

    ``requests``: how many requests were profiled (each figure is a median over
    them); ``total_ns``: median wall time per profiled request, with the profiler's
    own overhead (so not comparable with the gated latency); ``nodes`` by ``ns``
    descending; ``trace``: the Chrome trace's path relative to the run's report
    directory (``traces/<file>.json``), ``None`` when not kept; ``wall_ns``: what the
    whole profiling pass took, reported apart from the cell's measuring time.
    """

    profiler: str
    requests: int
    total_ns: float
    nodes: tuple[NodeTime, ...]
    op_types: tuple[OpTypeTime, ...]
    trace: str | None = None
    wall_ns: int | None = None

    def __post_init__(self) -> None:
        if self.profiler not in PROFILERS:
            raise ValueError(f"profiler {self.profiler!r}; expected one of {', '.join(PROFILERS)}")
        if self.requests < 1:
            raise ValueError(f"a profile of {self.requests} requests; expected at least 1")

    @property
    def operator_ns(self) -> float:
        """The nodes' time per request, added up (self times, so nothing counted twice)."""
        return float(sum(node.ns for node in self.nodes))

    def to_dict(self) -> dict[str, Any]:
        """The compact JSON form: nodes and op types as rows, times in integer ns."""
        return {
            "profiler": self.profiler,
            "requests": self.requests,
            "total_ns": round(self.total_ns),
            "trace": self.trace,
            "wall_ns": self.wall_ns,
            "columns": list(_NODE_COLUMNS),
            "nodes": [[n.name, n.op_type, n.provider, round(n.ns)] for n in self.nodes],
            "op_types": [[o.op_type, round(o.ns)] for o in self.op_types],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<results>") -> OperatorProfile:
        try:
            columns = list(data.get("columns", _NODE_COLUMNS))
            at = {column: columns.index(column) for column in _NODE_COLUMNS}
            nodes = tuple(
                NodeTime(
                    name=str(row[at["name"]]),
                    op_type=str(row[at["op_type"]]),
                    provider=str(row[at["provider"]]),
                    ns=float(row[at["ns"]]),
                )
                for row in data["nodes"]
            )
            wall = data.get("wall_ns")
            return cls(
                profiler=str(data["profiler"]),
                requests=int(data["requests"]),
                total_ns=float(data["total_ns"]),
                nodes=nodes,
                op_types=tuple(OpTypeTime(str(op), float(ns)) for op, ns in data["op_types"]),
                trace=None if data.get("trace") is None else str(data["trace"]),
                wall_ns=None if wall is None else int(wall),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ResultsError(
                f"{source}: a cell's operator profile is malformed ({exc!r})",
                expected="a profile written by perfguard: profiler, requests, total_ns, "
                "nodes and op_types rows",
                fix="re-create the file with `pytest --perfguard`",
            ) from exc


@dataclass(frozen=True)
class Contribution:
    """One node's or op type's part in the change between two profiles.

    ``base_ns`` is ``None`` for a node only in the current profile, ``current_ns``
    ``None`` for one only in the base. ``share`` is ``delta_ns`` over the profiles'
    whole change of operator time (0 when that change is 0).
    """

    key: str
    op_type: str
    base_ns: float | None
    current_ns: float | None
    share: float

    @property
    def delta_ns(self) -> float:
        return (self.current_ns or 0.0) - (self.base_ns or 0.0)

    @property
    def side(self) -> str:
        """``both``, ``current only`` (new in this run) or ``base only`` (gone)."""
        if self.base_ns is None:
            return "current only"
        if self.current_ns is None:
            return "base only"
        return "both"


@dataclass(frozen=True)
class ProfileDiff:
    """Two profiles side by side: contributions by node and by op type.

    Both lists are sorted by contribution *in the direction of the change*: largest
    added time first when the operator time grew, largest saved time first when it
    shrank. Without a base profile every node is ``current only`` and the lists
    rank where the time goes.
    """

    base_ns: float | None
    current_ns: float
    nodes: tuple[Contribution, ...]
    op_types: tuple[Contribution, ...]
    #: Nodes added up per layer (:func:`layer_of`), each with the op type that
    #: contributed most inside it; the headline names the top one.
    layers: tuple[Contribution, ...] = ()

    @property
    def change_ns(self) -> float | None:
        return None if self.base_ns is None else self.current_ns - self.base_ns

    @property
    def top(self) -> Contribution | None:
        """The node that contributed most to the change (or took most time, without a base)."""
        return self.nodes[0] if self.nodes else None

    @property
    def top_layer(self) -> Contribution | None:
        """The layer that contributed most: what the headline names."""
        return self.layers[0] if self.layers else self.top

    def headline(self, where: Callable[[Contribution], str] | None = None) -> str:
        """One line naming the top contributor.

        ``+0.41 ms per request, 62% of it in MatMul `/encoder/layer.3/.../query```;
        a share over 100% says it is of the net change and what offset it (``+0.30 ms per
        request, 117% of the net change in Conv `/layer2`: the other nodes got faster by 50.0 us
        (17% of the net change)``); without a base: ``0.80 ms per request in operators,
        35% of it in Conv `...```.
        ``where`` words the contributor (Markdown escapes it for a summary);
        by default ``op_type `name```.
        """
        top = self.top_layer
        change = self.change_ns
        if top is None:
            return "no operator time profiled"
        place = (where or _where)(top)
        if change is None:
            return (
                f"{self.current_ns / 1e6:.2f} ms per request in operators, "
                f"{top.share:.0%} of it in {place}"
            )
        if change == 0:
            return f"no change in operator time per request (largest: {place})"
        marker = " (new)" if top.side == "current only" else ""
        head = f"{signed_ms(change)} per request, {top.share:.0%}"
        offset = self.offset_note(top)
        if offset:
            return f"{head} of the net change in {place}{marker}: {offset}"
        return f"{head} of it in {place}{marker}"

    def offset_note(self, top: Contribution | None = None) -> str:
        """What a share over 100% means: ``the other nodes got faster by 50.0 us (17% of the net
        change)``: the other nodes moved against the change, offsetting part of ``top``'s
        (the top layer by default); "" when its share is not over 100% (as printed)."""
        top = top if top is not None else self.top_layer
        change = self.change_ns
        if top is None or not change or round(top.share * 100) <= 100:
            return ""
        rest = change - top.delta_ns
        how = "faster" if rest < 0 else "slower"
        return (
            f"the other nodes got {how} by {signed_ms(abs(rest))[1:]} "
            f"({abs(rest / change):.0%} of the net change)"
        )


def _where(top: Contribution) -> str:
    return f"{top.op_type} `{top.key}`" if top.op_type else f"`{top.key}`"


def signed_ms(ns: float) -> str:
    """A change in nanoseconds, signed: 410000 -> ``+0.41 ms``; under 0.1 ms in
    microseconds (``-12.3 us``), so that a small change does not read as zero."""
    if abs(ns) < 1e5:
        return f"{ns / 1e3:+.1f} us"
    return f"{ns / 1e6:+.2f} ms"


def diff_profiles(base: OperatorProfile | None, current: OperatorProfile) -> ProfileDiff:
    """Contributions of each node and op type to the change from ``base`` to ``current``."""
    base_total = None if base is None else base.operator_ns
    change = None if base_total is None else current.operator_ns - base_total
    base_nodes = {} if base is None else _by_name(base.nodes)
    current_nodes = _by_name(current.nodes)
    op_types = {name: node.op_type for name, node in [*base_nodes.items(), *current_nodes.items()]}
    nodes = _contributions(
        keys=_union(base_nodes, current_nodes),
        op_type=op_types.__getitem__,
        base=None if base is None else {k: n.ns for k, n in base_nodes.items()},
        current={k: n.ns for k, n in current_nodes.items()},
        change=change,
        total=current.operator_ns,
    )
    base_ops = {} if base is None else {o.op_type: o.ns for o in base.op_types}
    current_ops = {o.op_type: o.ns for o in current.op_types}
    ops = _contributions(
        keys=_union(base_ops, current_ops),
        op_type=lambda key: key,
        base=None if base is None else base_ops,
        current=current_ops,
        change=None if base is None else sum(current_ops.values()) - sum(base_ops.values()),
        total=sum(current_ops.values()),
    )
    base_layers = None if base is None else _by_layer(base)
    current_layers = _by_layer(current)
    layer_ops = _dominant_ops(nodes, current.profiler)
    layers = _contributions(
        keys=_union(base_layers or {}, current_layers),
        op_type=lambda key: layer_ops.get(key, ""),
        base=base_layers,
        current=current_layers,
        change=change,
        total=current.operator_ns,
    )
    return ProfileDiff(
        base_ns=base_total,
        current_ns=current.operator_ns,
        nodes=nodes,
        op_types=ops,
        layers=layers,
    )


def layer_of(name: str, profiler: str) -> str:
    """The layer a node belongs to.

    A torch node is a module and a TensorRT node a layer already: itself. An ONNX
    Runtime node is one operation of an exported layer, named below it
    (``/encoder/layer.3/attention/self/query/MatMul``): its layer is the name's parent
    path (``/encoder/layer.3/attention/self/query``). Adding nodes up per layer also
    makes a layer comparable across an export that renumbered its nodes
    (``/layer2/Conv_1`` in one, ``/layer2/Conv_3`` in the other).
    """
    if profiler != "onnxruntime" or PATH_SEPARATOR not in name.strip(PATH_SEPARATOR):
        return name
    return name[: name.rstrip(PATH_SEPARATOR).rindex(PATH_SEPARATOR)] or name


def _by_layer(profile: OperatorProfile) -> dict[str, float]:
    layers: dict[str, float] = {}
    for node in profile.nodes:
        layer = layer_of(node.name, profile.profiler)
        layers[layer] = layers.get(layer, 0.0) + node.ns
    return layers


def _dominant_ops(nodes: Iterable[Contribution], profiler: str) -> dict[str, str]:
    """Per layer, the op type of its node that contributed most (nodes come sorted)."""
    ops: dict[str, str] = {}
    for node in nodes:
        ops.setdefault(layer_of(node.key, profiler), node.op_type)
    return ops


def _by_name(nodes: Iterable[NodeTime]) -> dict[str, NodeTime]:
    """Nodes by name, two nodes of one name added up (so shares still sum to 1)."""
    merged: dict[str, NodeTime] = {}
    for node in nodes:
        seen = merged.get(node.name)
        merged[node.name] = node if seen is None else replace(seen, ns=seen.ns + node.ns)
    return merged


def _union(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[str]:
    return list(dict.fromkeys([*first, *second]))


def _contributions(
    *,
    keys: Iterable[str],
    op_type: Any,
    base: Mapping[str, float] | None,
    current: Mapping[str, float],
    change: float | None,
    total: float,
) -> tuple[Contribution, ...]:
    rows: list[Contribution] = []
    for key in keys:
        base_ns = None if base is None else base.get(key)
        current_ns = current.get(key)
        if base is not None and base_ns is None and current_ns is None:
            continue
        delta = (current_ns or 0.0) - (base_ns or 0.0)
        denominator = change if change is not None else total
        share = delta / denominator if denominator else 0.0
        rows.append(Contribution(key, op_type(key), base_ns, current_ns, share))
    direction = -1.0 if change is not None and change < 0 else 1.0
    return tuple(_sorted(rows, direction))


def _sorted(rows: Sequence[Contribution], direction: float) -> list[Contribution]:
    return sorted(rows, key=lambda c: (-direction * c.delta_ns, c.key))


def _object(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"a JSON object, not {type(value).__name__}")
    return value


#: A profile in a stored record (``ScenarioResult.profile``, ``ABDetail.profile_a``): its
#: JSON form is hand-written (rows of a table under their column names), its schema is
#: checked before ``from_dict`` reads it.
PROFILE_CODEC = Codec(
    encode=lambda profile: profile.to_dict(),
    decode=lambda value, source, path: OperatorProfile.from_dict(_object(value), source=source),
    schema={
        "description": "The cell's operator profile (perfguard.records.opprofile): taken after the "
        "timed measurement with the runtime's own profiler; median time per request per node "
        "and per op type, in ns. Absent when the cell was not profiled.",
        "type": "object",
        "additionalProperties": False,
        "required": ["profiler", "requests", "total_ns", "columns", "nodes", "op_types"],
        "properties": {
            "profiler": {"enum": ["torch.profiler", "onnxruntime", "tensorrt"]},
            "requests": {"type": "integer", "minimum": 1},
            "total_ns": {"type": "integer", "minimum": 0},
            "trace": {
                "type": ["string", "null"],
                "description": "The Chrome trace, relative to the run's report directory "
                "(traces/<file>.json).",
            },
            "wall_ns": {
                "type": ["integer", "null"],
                "minimum": 0,
                "description": "What the profiling pass took, apart from the cell's "
                "measuring time.",
            },
            "columns": {"const": ["name", "op_type", "provider", "ns"]},
            "nodes": {
                "type": "array",
                "items": {
                    "type": "array",
                    "prefixItems": [
                        {"type": "string"},
                        {"type": "string"},
                        {"type": "string"},
                        {"type": "integer", "minimum": 0},
                    ],
                    "minItems": 4,
                    "maxItems": 4,
                },
            },
            "op_types": {
                "type": "array",
                "items": {
                    "type": "array",
                    "prefixItems": [{"type": "string"}, {"type": "integer", "minimum": 0}],
                    "minItems": 2,
                    "maxItems": 2,
                },
            },
        },
    },
    expected="a profile written by perfguard",
)
