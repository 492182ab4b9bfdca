"""Where a profiled cell's Chrome traces go in its run folder
(``perfguard.report.runfolder.trace_paths``)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from perfguard.records.opprofile import NodeTime, OperatorProfile, OpTypeTime
from perfguard.records.results import ScenarioResult
from perfguard.report.profilediff import profile_view
from perfguard.report.runfolder import TRACES_DIR, trace_paths

RUN = Path("reports") / "0123456789ab"


def every_trace(*ids: str) -> list[Path]:
    """Both trace paths of each id (its own, its A/B base side's)."""
    return [path for sid in ids for path in trace_paths(RUN, sid)]


def test_ids_that_read_alike_once_file_safe_keep_traces_of_their_own() -> None:
    # Each pair is one file name under the old "safe characters, first 160" rule.
    long = "suites/s.yaml::" + "m" * 200
    pairs = [
        ("suites/s.yaml::m-1", "suites/s.yaml::m[1]"),
        ("suites/x/s.yaml::lin", "suites/x-s.yaml::lin"),
        (long + "[torch]", long + "[onnxruntime]"),
        ("suites/s.yaml::M", "suites/s.yaml::m"),  # one file on a case-blind disk
    ]
    for a, b in pairs:
        paths = every_trace(a, b)
        names = [p.name.lower() for p in paths]
        assert len(set(names)) == len(names) == 4, (a, b, names)


def test_a_cell_named_like_a_base_side_never_takes_its_trace() -> None:
    sid = "suites/s.yaml::X"
    own, base = trace_paths(RUN, sid)
    # The cell whose readable name is the base side's file name, and the one named
    # after the old base-side suffix: neither lands on the base side's trace.
    for other in (f"{sid}-base", base.stem, f"suites/s.yaml::{base.stem}"):
        assert base not in trace_paths(RUN, other)
        assert own not in trace_paths(RUN, other)


def test_trace_names_stay_readable_safe_and_short() -> None:
    own, base = trace_paths(RUN, "suites/s.yaml::cnn[torch]")
    assert own.parent == base.parent == RUN / TRACES_DIR
    assert own.name.startswith("suites-s.yaml-cnn-torch-") and own.suffix == ".json"
    assert base.name == own.stem + "-base.json"
    odd = trace_paths(RUN, "../../" + "é/" * 300 + "\x00")[1].name
    assert "/" not in odd and "\x00" not in odd and not odd.startswith(".")
    assert len(odd.encode()) < 255


@given(st.lists(st.text(min_size=1, max_size=300), min_size=2, max_size=8, unique=True))
def test_no_two_ids_share_a_trace_file(ids: list[str]) -> None:
    paths = [p.name.lower() for p in every_trace(*ids)]
    assert len(set(paths)) == len(paths)


def profiled(trace: str) -> ScenarioResult:
    """A cell whose operator profile's trace is ``trace``."""
    profile = OperatorProfile(
        profiler="onnxruntime",
        requests=1,
        total_ns=2.0,
        nodes=(NodeTime("/Gemm", "Gemm", 1.0),),
        op_types=(OpTypeTime("Gemm", 1.0),),
        trace=trace,
    )
    return ScenarioResult("s::m", "s", "m", "onnxruntime", "cpu", "fp32", profile=profile)


@given(st.text(max_size=300))
def test_every_trace_is_one_the_report_links(sid: str) -> None:
    # The report links only plain relative paths; `+` or `..` in a name showed as text.
    for path in trace_paths(RUN, sid):
        view = profile_view(profiled(f"{TRACES_DIR}/{path.name}"), None)
        assert view is not None and view.trace_link, path.name
