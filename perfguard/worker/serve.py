"""The worker's side of the protocol: one open cell, and a handler per op.

``Server.handle_line`` turns one request line into one reply line; it never
raises for a failed command (a ``PerfguardError`` or an exception from the
user's model becomes an ``ok: false`` reply and the worker keeps serving).

Ops (fields of the request -> fields of the ``ok: true`` reply):

* ``hello`` -> ``pid``, ``python``, ``perfguard``, ``protocol``, ``cwd``,
  ``executable``, ``perfguard_path`` (where the worker imported perfguard from).
* ``open`` ``suite``, ``cell``, ``rootdir``, ``cache_dir`` [, ``code``: the side's
  tree, ``{"root", "others", "label", "pythonpath"}``, switched to before the suite
  loads (:mod:`perfguard.worker.codetree`); ``plant``: a slowdown planted in every
  request, a fraction of its own time (:mod:`perfguard.measure.plant`; a cell that
  neither generates nor is under ``load:``)] -> ``scenario_id``,
  ``batch``, ``runtime``, ``backend``, ``device``, ``precision`` (an open cell
  is closed first; a failed ``open`` leaves none open).
* ``warmup`` ``iterations``, ``seconds`` [, ``max_seconds``: the cap, default
  ``LoopSpec``'s 300 s] -> ``cold_start_ns``, ``iterations``, ``elapsed_ns``
  (:func:`perfguard.measure.timing.warm_up`, the same warm-up as in-process measurement).
* ``measure`` ``k`` -> ``samples_ns`` (k requests, each timed on its own, GC off; a
  planted cell adds ``planted_ns``, what each request waited on purpose);
  a generative cell adds ``tokens``: each request's token times, ns after its send
  (one row per request, ``new_tokens`` each).
* ``pairs`` ``order`` (booleans: true = slot ``a`` first) [, ``slots``: two slot
  names, default ``["a", "b"]``] -> ``a_ns``, ``b_ns``: one request of each cell per
  pair, back to back in this process, each timed on its own, GC off (same-run A/B:
  no pipe round trip between the two requests of a pair or between pairs); two
  generative cells add ``a_tokens``, ``b_tokens`` (as ``measure``'s ``tokens``), both
  sending the same prompt in each pair; a planted slot adds ``a_planted_ns`` or
  ``b_planted_ns``.
* ``loop`` -> the cell's full warm-up and timed loop (``run_loop``): the
  ``Measurement`` fields with ``samples_ns`` as a list, and ``runtime``.
* A generative cell answers ``result``, ``warmup``, ``measure`` and ``pairs`` only.
* ``result`` -> ``result``: the cell measured exactly as in-process measurement
  does (:meth:`perfguard.measure.runner.ScenarioRun.measure`: warm-up and timed loop with
  the machine-speed canary, GPU watch and peak memory, or the cell's ``load:``
  levels, then the output check), as ``ScenarioResult.to_dict()``; again for a
  confirmation round.
* ``check`` -> ``outputs``: one more request whose outputs must be finite.
* ``profile`` [``requests``: default ``PROFILE_REQUESTS``, ``trace_path``: where to write
  the Chrome trace] -> ``profile``: the open cell's operator profile
  (:func:`perfguard.measure.profiling.profile_session`, after and apart from any timed
  loop; the session keeps serving), as ``OperatorProfile.to_dict()``.
* ``load_warmup`` (a cell under ``load:``) -> ``cold_start_ns``, ``iterations``,
  ``elapsed_ns``: the cold start and the cell's warm-up at its load level, discarded.
* ``load_level`` ``seconds``, ``iterations``, ``seed_offset`` -> ``samples_ns`` (the
  corrected latencies), ``throughput``, ``load`` (``LoadFigures.to_dict()``) and, for a
  generative cell, ``token_ns`` (each answered request's token times from its scheduled
  send): one short run of the cell's level, no warm-up (same-run A/B alternates these
  between slots ``a`` and ``b``).
* ``load_interleaved`` ``seconds``, ``iterations``, ``first`` [, ``slots``: two slot
  names, default ``["a", "b"]``] -> ``sides``: one ``load_level`` reply per slot, in
  the order of ``slots``, from ONE level whose clients alternate between the two cells
  request by request (same-run A/B of a closed loop without batching; client ``k``
  starts on ``slots[(k + first) % 2]``; ``iterations`` counts both cells' requests).
* ``close`` -> ``closed``; ``bye`` -> ``{}``, then the worker exits 0.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import perfguard
from perfguard.backends import Session
from perfguard.core.blame import blame, model_trace, owner, trace_of
from perfguard.core.errors import CellNotFound, Location, PerfguardError, ProtocolError
from perfguard.core.scenario import LoopSpec, Scenario
from perfguard.measure.generation import check_generated
from perfguard.measure.levelfigures import LevelFigures
from perfguard.measure.loadcell import LoadRunner
from perfguard.measure.opencell import RunContext
from perfguard.measure.plant import Plant
from perfguard.measure.profiling import PROFILE_REQUESTS, profile_session
from perfguard.measure.runner import ScenarioRun, check_outputs, run_loop
from perfguard.measure.timing import warm_up
from perfguard.suite.loader import load_suite
from perfguard.worker.codetree import parse_tree, switch_to
from perfguard.worker.protocol import (
    MAIN_SLOT,
    OPS,
    PROTOCOL_VERSION,
    encode,
    error_fields,
    quote,
    speaks_our_version,
)

__all__ = ["Server"]

_TRACEBACK_LINES = 15
_FULL_TRACEBACK_LINES = 400  # what --tb=long shows of a worker's traceback

Handler = Callable[[dict[str, Any]], dict[str, Any]]


def _noop() -> None:
    return None


class _Cell:
    """An open cell: a :class:`ScenarioRun` (its session open) until closed."""

    def __init__(self, scenario: Scenario, ctx: RunContext, plant: Plant | None = None) -> None:
        self.scenario = scenario
        self.plant = plant
        # The plant slows the cell's own timed loop and load levels (``result``, load
        # ops) too; ``measure``/``pairs`` time ``call``, planted below (a generative
        # cell's requests plant each token themselves).
        self.run = ScenarioRun(scenario, ctx, plant=plant)
        self._load: LoadRunner | None = None
        self.batch = self.run.batch
        #: A generative cell answers only ``GENERATIVE_OPS`` (``_open_cell`` refuses the
        #: rest); its call is one whole request, whose token times ``measure`` and
        #: ``pairs`` send back beside its end-to-end time.
        self.requests = self.run.requests
        self.generative = self.requests is not None
        self.call: Callable[[], object]
        self.sync: Callable[[], None] | None
        if self.run.generator is not None and self.requests is not None:
            self.runtime_info: dict[str, Any] = self.run.generator.runtime_info
            self.call = self.requests
            self.sync = None  # each step is stamped once its tokens are on the host
            return
        self.session: Session = self.run.session
        self.runtime_info = self.session.runtime_info
        self.prepared = self.run.prepared
        # partial, not a closure: one less Python frame inside every timed request.
        self.call = functools.partial(self.session.run, self.prepared)
        self.sync = self.session.synchronize
        if plant is not None:  # the wait is inside the request, after its own sync
            self.call = plant.wrap(self.call, self.sync)
            self.sync = None

    @property
    def load(self) -> LoadRunner:
        """The cell's load runner (workers, sessions), made on first use."""
        if self.scenario.load is None:
            raise ProtocolError(
                f"a load op was sent for {self.scenario.item_name}, which has no `load:`",
                expected="a cell under `load:`",
                fix="send `warmup`/`measure` for a single-request cell",
            )
        if self._load is None:
            self._load = LoadRunner(self.run)
        return self._load

    def close(self) -> None:
        try:
            if self._load is not None:
                self._load.close()
        finally:
            self.run.close()


class Server:
    """Answers requests for one worker process.

    Cells live in *slots* (a request's ``slot`` field, ``"main"`` by default): the
    same-run A/B mode opens the base revision's cell in slot ``a`` and the working
    tree's in slot ``b`` of one process, so whatever makes a whole process fast or
    slow (it varies from process to process) affects both alike.
    """

    def __init__(self) -> None:
        self.cells: dict[str, _Cell] = {}
        self.stop = False
        self._handlers: dict[str, Handler] = {
            "hello": self._hello,
            "open": self._open,
            "warmup": self._warmup,
            "measure": self._measure,
            "pairs": self._pairs,
            "loop": self._loop,
            "result": self._result,
            "check": self._check,
            "profile": self._profile,
            "close": self._close,
            "bye": self._bye,
            "load_warmup": self._load_warmup,
            "load_level": self._load_level,
            "load_interleaved": self._load_interleaved,
        }

    # --- dispatch -----------------------------------------------------------

    def handle_line(self, line: bytes) -> bytes:
        """One request line -> one reply line (sets ``stop`` after ``bye``)."""
        try:
            request = json.loads(line)
        except ValueError:  # also UnicodeDecodeError
            return self._failed(None, _bad_request("the request is not JSON", line))
        request_id = request.get("id") if isinstance(request, dict) else None
        try:
            fields = self._dispatch(request, line)
        except Exception as exc:  # a PerfguardError, or the user's model: reply, keep serving
            return self._failed(request_id, exc, request)
        return encode({"v": PROTOCOL_VERSION, "id": request_id, "ok": True, **fields})

    def _dispatch(self, request: object, line: bytes) -> dict[str, Any]:
        if not isinstance(request, dict):
            raise _bad_request(f"the request is a JSON {type(request).__name__}", line)
        version = request.get("v")
        if not speaks_our_version(request):
            raise ProtocolError(
                f"the request speaks worker protocol version {version!r}; this worker "
                f"(perfguard {perfguard.__version__}) speaks version {PROTOCOL_VERSION}",
                expected=f'"v": {PROTOCOL_VERSION}',
                fix="start the worker with a perfguard of the same protocol version",
            )
        op = request.get("op")
        handler = self._handlers.get(op) if isinstance(op, str) else None
        if handler is None:
            raise _bad_request(f"unknown op {op!r}; expected one of {', '.join(OPS)}", line)
        return handler(request)

    def _failed(self, request_id: object, exc: BaseException, request: object = None) -> bytes:
        op = request.get("op") if isinstance(request, dict) else None
        slot = request.get("slot", _MAIN) if isinstance(request, dict) else _MAIN
        cell = self.cells.get(slot) if isinstance(slot, str) else None
        if not isinstance(exc, PerfguardError) and owner(exc) != "model":
            # perfguard's own exception, or out of memory: said so, as in-process.
            error = blame(
                exc,
                doing=f"answering `{op}`",
                culprit=f"model {cell.scenario.model.name!r}" if cell else "the model",
                fix="",
                location=cell.scenario.location if cell else None,
            )
            error.__cause__ = exc
            exc = error
        lines = "".join(traceback.format_exception(exc)).splitlines()
        tail = "\n".join(lines[-_TRACEBACK_LINES:])
        fields = error_fields(exc, tail)
        # The same short traceback as in-process (the model's frames, or perfguard's for
        # its own error), and every frame for --tb=long; the parent shows them alike.
        trace = trace_of(exc) if isinstance(exc, PerfguardError) else model_trace(exc)
        if trace:
            fields["trace"] = trace
            fields["traceback"] = "\n".join(lines[-_FULL_TRACEBACK_LINES:])
        if cell is not None:
            fields["cell"] = cell.scenario.scenario_id(cell.run.ctx.rootdir)  # the node id
            if not isinstance(exc, PerfguardError):  # the model's: where the suite names it
                where = cell.scenario.location
                fields["location"] = {"path": str(where.path), "line": where.line}
        return encode({"v": PROTOCOL_VERSION, "id": request_id, "ok": False, "error": fields})

    @property
    def cell(self) -> _Cell | None:
        """The cell of the default slot."""
        return self.cells.get(_MAIN)

    def shutdown(self, slot: str | None = None) -> None:
        """Close one slot's cell, or every cell (after ``bye``, or at the end of input)."""
        for name in [slot] if slot is not None else list(self.cells):
            cell = self.cells.pop(name, None)
            if cell is not None:
                cell.close()

    # --- ops ----------------------------------------------------------------

    def _hello(self, request: dict[str, Any]) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "python": platform.python_version(),
            "perfguard": perfguard.__version__,
            "protocol": PROTOCOL_VERSION,
            "cwd": str(Path.cwd()),
            "executable": sys.executable,
            "perfguard_path": str(Path(perfguard.__file__).resolve().parent),
        }

    def _open(self, request: dict[str, Any]) -> dict[str, Any]:
        suite_path = Path(_field(request, "suite", str))
        cell_name = _field(request, "cell", str)
        ctx = RunContext(
            rootdir=Path(_field(request, "rootdir", str)),
            cache_dir=Path(_field(request, "cache_dir", str)),
        )
        slot = _slot(request)
        self.shutdown(slot)
        _switch_code(request)
        suite = load_suite(suite_path)
        found = [sc for sc in suite.scenarios if sc.item_name == cell_name]
        if not found:
            names = [sc.item_name for sc in suite.scenarios]
            shown = ", ".join(names[:20]) + (
                f", ... ({len(names)} cells)" if len(names) > 20 else ""
            )
            raise CellNotFound(
                f"the suite has no cell {cell_name!r}",
                expected=f"one of: {shown}",
                fix="pass the item name as pytest shows it, e.g. `model[backend-precision]`",
                location=Location(suite_path),
            )
        scenario = found[0]
        plant = None
        if request.get("plant") is not None:
            fraction = float(_field(request, "plant", (int, float), minimum=0))
            plant = Plant(fraction) if fraction > 0 else None
        cell = self.cells[slot] = _Cell(scenario, ctx, plant)
        return {
            "scenario_id": scenario.scenario_id(ctx.rootdir),
            "batch": cell.batch,
            "runtime": cell.runtime_info,
            "backend": scenario.backend,
            "device": scenario.device,
            "precision": scenario.precision,
        }

    def _open_cell(self, op: str, request: dict[str, Any] | None = None) -> _Cell:
        slot = _slot(request) if request is not None else _MAIN
        cell = self.cells.get(slot)
        if cell is None:
            raise ProtocolError(
                f"`{op}` was sent while no cell is open in slot {slot!r}",
                expected="`open` first",
                fix="send `open` with the suite and the cell's item name",
            )
        if cell.generative and op not in GENERATIVE_OPS:
            raise ProtocolError(
                f"`{op}` was sent for {cell.scenario.item_name}, a generative cell",
                expected=f"one of {', '.join(GENERATIVE_OPS)} (a generative cell is timed "
                "token by token)",
                fix="send `result`, `warmup` then `measure`/`pairs`, or (under `load:`) "
                "`load_warmup` then `load_level`; generative levels are not interleaved",
            )
        return cell

    def _warmup(self, request: dict[str, Any]) -> dict[str, Any]:
        cell = self._open_cell("warmup", request)
        iterations = _field(request, "iterations", int, minimum=0)
        seconds = float(_field(request, "seconds", (int, float), minimum=0))
        loop = LoopSpec(iterations, seconds)
        if request.get("max_seconds") is not None:
            loop = LoopSpec(
                iterations, seconds, _field(request, "max_seconds", (int, float), minimum=0)
            )
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            cold_start_ns, done, elapsed_ns = warm_up(cell.call, cell.sync or _noop, loop)
        finally:
            if gc_was_enabled:
                gc.enable()
        if cell.plant is not None:  # warm-up requests are not the timed ones
            cell.plant.take()
        return {"cold_start_ns": cold_start_ns, "iterations": done, "elapsed_ns": elapsed_ns}

    def _measure(self, request: dict[str, Any]) -> dict[str, Any]:
        cell = self.cells.get(request.get("slot", _MAIN))
        if cell is None or cell.generative:  # the fast path of an open plain cell
            cell = self._open_cell("measure", request)
        k = request.get("k")
        if type(k) is not int or k < 1:
            k = _field(request, "k", int, minimum=1)
        call, sync = cell.call, cell.sync
        clock = time.perf_counter_ns
        samples: list[int] = []
        append = samples.append
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if sync is None:
                for _ in range(k):
                    t0 = clock()
                    call()
                    t1 = clock()
                    append(t1 - t0)
            else:
                for _ in range(k):
                    t0 = clock()
                    call()
                    sync()
                    t1 = clock()
                    append(t1 - t0)
        finally:
            if gc_was_enabled:
                gc.enable()
        if cell.generative:
            return {"samples_ns": samples, "tokens": _token_times(cell)}
        if cell.plant is not None:
            return {"samples_ns": samples, "planted_ns": cell.plant.take()}
        return {"samples_ns": samples}

    def _pairs(self, request: dict[str, Any]) -> dict[str, Any]:
        order = request.get("order")
        if not isinstance(order, list) or not order or any(type(x) is not bool for x in order):
            raise ProtocolError(
                f"request `pairs` has order={quote(json.dumps(order).encode())}",
                expected="`order`: a non-empty list of booleans (true: slot a first)",
                fix="send the pair orders from perfguard.ab.paired.pair_orders",
            )
        cells = self._two_cells("pairs", request)
        generative = _paired_generation(cells)
        clock = time.perf_counter_ns
        noop = _noop
        (call_a, sync_a), (call_b, sync_b) = ((c.call, c.sync or noop) for c in cells)
        a_then_b, b_then_a = (call_a, sync_a, call_b, sync_b), (call_b, sync_b, call_a, sync_a)
        a_ns: list[int] = []
        b_ns: list[int] = []
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for a_first in order:
                call1, sync1, call2, sync2 = a_then_b if a_first else b_then_a
                t0 = clock()
                call1()
                sync1()
                t1 = clock()
                call2()
                sync2()
                t2 = clock()
                first, second = t1 - t0, t2 - t1
                a_ns.append(first if a_first else second)
                b_ns.append(second if a_first else first)
        finally:
            if gc_was_enabled:
                gc.enable()
        if generative:
            return {
                "a_ns": a_ns,
                "b_ns": b_ns,
                "a_tokens": _token_times(cells[0]),
                "b_tokens": _token_times(cells[1]),
            }
        planted = {
            f"{side}_planted_ns": cell.plant.take()
            for side, cell in zip("ab", cells, strict=True)
            if cell.plant is not None
        }
        return {"a_ns": a_ns, "b_ns": b_ns, **planted}

    def _two_cells(self, op: str, request: dict[str, Any]) -> tuple[_Cell, _Cell]:
        """The cells of the request's ``slots`` (two different names, default
        ``["a", "b"]``), both open."""
        names = request.get("slots", ["a", "b"])
        if not (isinstance(names, list) and len(names) == 2 and names[0] != names[1]):
            raise ProtocolError(
                f"request `{op}` has slots={names!r}",
                expected="`slots`: two different slot names",
                fix='send `"slots": ["a", "b"]` or leave it out',
            )
        first, second = (self._open_cell(op, {"op": op, "slot": n}) for n in names)
        return first, second

    def _load_warmup(self, request: dict[str, Any]) -> dict[str, Any]:
        """A load cell's cold start and warm-up at its own level (discarded)."""
        cell = self._open_cell("load_warmup", request)
        runner = cell.load
        requests, elapsed_ns = runner.warm_up(runner.spec)
        return {
            "cold_start_ns": int(runner.cold_start_ns or 0),
            "iterations": requests,
            "elapsed_ns": int(elapsed_ns),
        }

    def _load_level(self, request: dict[str, Any]) -> dict[str, Any]:
        """One short run of the cell's load level: ``seconds`` long (open loop: that many
        seconds of arrivals; closed loop: at least ``iterations`` requests too), the
        schedule seeded with ``seed_offset``. Its corrected samples and figures."""
        cell = self._open_cell("load_level", request)
        runner = cell.load
        seconds = float(_field(request, "seconds", (int, float), minimum=0))
        iterations = _field(request, "iterations", int, minimum=1)
        offset = _field(request, "seed_offset", int, minimum=0)
        loop = LoopSpec(iterations, seconds, max(cell.scenario.measure.max_seconds, seconds))
        figures, _log = runner.measure_level(runner.spec, loop, offset, gc_generation=1)
        return _level_reply(figures)

    def _load_interleaved(self, request: dict[str, Any]) -> dict[str, Any]:
        """One short level shared by the cells of ``slots``: every client alternates
        between them request by request (client ``k`` starts on ``slots[(k + first) %
        2]``), ``seconds`` long and at least ``iterations`` requests of both together.
        Each cell's corrected samples and figures, in the order of ``slots``."""
        mine, other = self._two_cells("load_interleaved", request)
        seconds = float(_field(request, "seconds", (int, float), minimum=0))
        iterations = _field(request, "iterations", int, minimum=1)
        first = _field(request, "first", int, minimum=0)
        if first > 1:
            raise ProtocolError(
                f"request `load_interleaved` has first={first!r}",
                expected="`first`: 0 (the first slot's side starts client 0) or 1",
                fix="send 0 or 1",
            )
        loop = LoopSpec(iterations, seconds, max(mine.scenario.measure.max_seconds, seconds))
        a, b = mine.load.measure_interleaved(other.load, loop, first)
        return {"sides": [_level_reply(a), _level_reply(b)]}

    def _loop(self, request: dict[str, Any]) -> dict[str, Any]:
        cell = self._open_cell("loop", request)
        result = run_loop(cell.scenario, cell.session, cell.prepared)
        cell.run.check_unchanged()
        return {
            "cold_start_ns": int(result.cold_start_ns),
            "warmup_iterations": int(result.warmup_iterations),
            "warmup_ns": int(result.warmup_ns),
            "samples_ns": [int(s) for s in result.samples_ns],
            "stable": bool(result.stable),
            "stability_ratio": float(result.stability_ratio),
            "stopped_by_cap": bool(result.stopped_by_cap),
            "measure_ns": int(result.measure_ns),
            "runtime": cell.session.runtime_info,
        }

    def _result(self, request: dict[str, Any]) -> dict[str, Any]:
        cell = self._open_cell("result", request)
        return {"result": cell.run.measure().to_dict()}

    def _check(self, request: dict[str, Any]) -> dict[str, Any]:
        cell = self._open_cell("check", request)
        outputs = cell.session.to_numpy(cell.session.run(cell.prepared))
        check_outputs(cell.scenario, outputs)
        return {"outputs": len(outputs)}

    def _profile(self, request: dict[str, Any]) -> dict[str, Any]:
        cell = self._open_cell("profile", request)
        requests = PROFILE_REQUESTS
        if request.get("requests") is not None:
            requests = _field(request, "requests", int, minimum=1)
        trace_path = None
        if request.get("trace_path") is not None:
            trace_path = Path(_field(request, "trace_path", str))
        profile = profile_session(
            cell.scenario, cell.session, cell.prepared, requests=requests, trace_path=trace_path
        )
        return {"profile": profile.to_dict()}

    def _close(self, request: dict[str, Any]) -> dict[str, Any]:
        slot = _slot(request) if "slot" in request else None
        was_open = bool(self.cells) if slot is None else slot in self.cells
        self.shutdown(slot)
        return {"closed": was_open}

    def _bye(self, request: dict[str, Any]) -> dict[str, Any]:
        self.stop = True
        self.shutdown()
        return {}


_MAIN = MAIN_SLOT


def _slot(request: dict[str, Any]) -> str:
    slot = request.get("slot", _MAIN)
    if not isinstance(slot, str) or not slot:
        raise ProtocolError(
            f"request `{request.get('op')}` has slot={slot!r}",
            expected="`slot`: a non-empty string",
            fix="name the slot, e.g. `a` or `b`",
        )
    return slot


def _switch_code(request: dict[str, Any]) -> None:
    """Before opening a cell: switch the import system to its side's tree when the
    request says which (``code``; :mod:`perfguard.worker.codetree`)."""
    if request.get("code") is not None:
        tree, pythonpath = parse_tree(request["code"])
        switch_to(tree, pythonpath)


def _bad_request(problem: str, line: bytes) -> ProtocolError:
    return ProtocolError(
        f"{problem}: {quote(line)}",
        expected='{"v": 1, "id": <int>, "op": "<op>", ...} on one line',
        fix="send requests with perfguard.worker.client.WorkerProcess",
    )


#: The ops a generative cell answers: measured whole (``result``), or warmed up and then
#: timed request by request, alone (``measure``) or pair by pair with another (``pairs``);
#: under ``load:``, its level's warm-up and short levels (same-run A/B alternates whole
#: levels of a generative cell; it does not interleave them).
GENERATIVE_OPS = ("result", "warmup", "measure", "pairs", "load_warmup", "load_level")


def _paired_generation(cells: tuple[_Cell, _Cell]) -> bool:
    """Whether the two cells of a ``pairs`` request generate (then both must), their
    kept requests forgotten and their prompt turns made equal, so that each pair sends
    one prompt to both sides."""
    first, second = cells
    if first.generative != second.generative:
        which = first if first.generative else second
        raise ProtocolError(
            f"`pairs` was sent for {which.scenario.item_name}, a generative cell, beside "
            "one that is not",
            expected="two generative cells, or two that are not",
            fix="compare a generative cell with the same cell of the other side",
        )
    if not first.generative:
        return False
    assert first.requests is not None and second.requests is not None
    turn = max(first.requests.turn, second.requests.turn)
    for requests in (first.requests, second.requests):
        requests.turn = turn
        requests.rows.clear()
    return True


def _token_times(cell: _Cell) -> list[list[int]]:
    """The token times (ns after each request's send) of the cell's requests since the
    last reply, one row per request, after checking the last request's tokens."""
    assert cell.requests is not None and cell.run.generator is not None
    check_generated(cell.scenario, cell.run.generator, cell.requests.last)
    times: list[list[int]] = cell.requests.drain().tolist()
    return times


def _level_reply(figures: LevelFigures) -> dict[str, Any]:
    """A load level's reply: its corrected samples, throughput and figures, and a
    generative level's token times (``token_ns``: one row per answered request, ns after
    its scheduled send)."""
    reply: dict[str, Any] = {
        "samples_ns": [int(x) for x in figures.samples_ns],
        "throughput": float(figures.throughput),
        "load": figures.load.to_dict(),
    }
    if figures.token_ns is not None:
        reply["token_ns"] = [[int(t) for t in row] for row in figures.token_ns]
    return reply


def _field(
    request: dict[str, Any],
    name: str,
    kind: type | tuple[type, ...],
    *,
    minimum: int | None = None,
) -> Any:
    """A request field of the given type, or a ``ProtocolError`` naming it."""
    value = request.get(name)
    bad = value is None or isinstance(value, bool) or not isinstance(value, kind)
    if not bad and minimum is not None and value is not None and value < minimum:
        bad = True
    if bad:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        want = " or ".join(k.__name__ for k in kinds)
        if minimum is not None:
            want += f" >= {minimum}"
        raise ProtocolError(
            f"request `{request.get('op')}` has {name}={value!r}",
            expected=f"`{name}`: {want}",
            fix="send the fields the op needs (see perfguard.worker.serve)",
        )
    return value
