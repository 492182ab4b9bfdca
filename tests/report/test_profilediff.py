"""'Where the time went' in report.html and summary.md (``perfguard.report.profilediff``)."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from perfguard.judge.outcome import PROFILE_LINE, profile_line
from perfguard.records.opprofile import (
    NodeTime,
    OperatorProfile,
    OpTypeTime,
    diff_profiles,
    layer_of,
    signed_ms,
)
from perfguard.records.results import ScenarioResult
from perfguard.report import render_html, render_markdown
from perfguard.report.model import ReportInput
from perfguard.report.profilediff import (
    ICICLE_WIDTH,
    TOP_NODES,
    change_colour,
    icicle_svg,
    legend,
    markdown_headline,
    profile_view,
)
from tests.helpers.results import p95_verdict, run_of, scenario

SID = "suites/bert.yaml::bert[onnxruntime-fp32]"
#: The planted slowdown: this node's time grows by PLANTED_NS.
PLANTED = "/encoder/layer.3/attention/self/query/MatMul"
PLANTED_NS = 410_000.0
SVG_NS = "{http://www.w3.org/2000/svg}"


def nodes(layers: int = 12) -> list[NodeTime]:
    """A BERT-like profile: per layer a query/key/value MatMul, a Softmax and an Add."""
    out = []
    for layer in range(layers):
        for part, ns in (("query", 60_000.0), ("key", 55_000.0), ("value", 50_000.0)):
            name = f"/encoder/layer.{layer}/attention/self/{part}/MatMul"
            out.append(NodeTime(name, "MatMul", ns + layer, "CPUExecutionProvider"))
        out.append(NodeTime(f"/encoder/layer.{layer}/attention/Softmax", "Softmax", 9_000.0))
        out.append(NodeTime(f"/encoder/layer.{layer}/output/Add", "Add", 4_000.0 + layer))
    out.append(NodeTime("/pooler/Gather", "Gather", 3_000.0))
    return out


def profile(
    node_list: Sequence[NodeTime], trace: str | None = "traces/bert.json"
) -> OperatorProfile:
    ops: dict[str, float] = {}
    for node in node_list:
        ops[node.op_type] = ops.get(node.op_type, 0.0) + node.ns
    return OperatorProfile(
        profiler="onnxruntime",
        requests=40,
        total_ns=sum(n.ns for n in node_list) * 1.2,
        nodes=tuple(sorted(node_list, key=lambda n: -n.ns)),
        op_types=tuple(sorted((OpTypeTime(k, v) for k, v in ops.items()), key=lambda o: -o.ns)),
        trace=trace,
        wall_ns=900_000_000,
    )


def slower(node_list: Sequence[NodeTime]) -> list[NodeTime]:
    """The planted regression: PLANTED slower, a new Mul in layer 3, the pooler gone, and
    small noise elsewhere (a few ns either way, so every row has a change)."""
    out = []
    for i, node in enumerate(node_list):
        if node.name == "/pooler/Gather":
            continue
        ns = node.ns + (PLANTED_NS if node.name == PLANTED else (-1.0) ** i * (i % 7))
        out.append(replace(node, ns=ns))
    out.append(NodeTime("/encoder/layer.3/extra/Mul", "Mul", 20_000.0))
    return out


def report_input(
    base_profile: OperatorProfile | None, current_profile: OperatorProfile, *, base: bool = True
) -> ReportInput:
    current = replace(scenario(SID, scale_ms=3.0), profile=current_profile)
    baseline: dict[str, ScenarioResult] = {}
    if base:
        baseline[SID] = replace(scenario(SID, seed=1), profile=base_profile)
    verdict = p95_verdict(SID, "regression", 1.5, "P95 latency regressed +50.0%")
    return ReportInput(run=run_of([current]), verdicts=(verdict,), baseline=baseline)


def section(html: str) -> str:
    found = re.search(r'<section class="where" id="s0-where">(.*?)</section>', html, re.S)
    assert found, "no 'Where the time went' section"
    return found.group(1)


def table_names(part: str, kind: str) -> list[str]:
    table = re.search(rf'<table class="prof prof-{kind}">(.*?)</table>', part, re.S)
    assert table
    return re.findall(r'<td class="name">(.*?)(?:<span|</td>)', table.group(1))


def icicle(part: str) -> ET.Element:
    svg = re.search(r"<svg\b.*?</svg>", part, re.S)
    assert svg
    return ET.fromstring(svg.group(0))  # well-formed XML, or this raises


def boxes(svg: ET.Element) -> list[tuple[str, str, float]]:
    """(path, fill, width) of each box of the icicle, read from its <title> and <rect>."""
    out = []
    for g in svg.iter(f"{SVG_NS}g"):
        title, rect = g.find(f"{SVG_NS}title"), g.find(f"{SVG_NS}rect")
        assert title is not None and title.text and rect is not None
        out.append((title.text.splitlines()[0], rect.get("fill", ""), float(rect.get("width", 0))))
    return out


def prefix_ns(profile_: OperatorProfile, path: str) -> float:
    """Time of every node at or below ``path``, computed here from the profile itself."""
    levels = tuple(path.split("/"))
    return sum(n.ns for n in profile_.nodes if n.path[: len(levels)] == levels)


# --------------------------------------------------------------------------- with a base


def test_a_regressed_cell_shows_where_the_time_went_in_contribution_order() -> None:
    base, current = profile(nodes()), profile(slower(nodes()))
    part = section(render_html(report_input(base, current)))
    assert "<h3>Where the time went</h3>" in part
    shown = table_names(part, "nodes")
    diff = diff_profiles(base, current)
    assert shown[0] == PLANTED
    assert shown == [c.key for c in diff.nodes[:TOP_NODES]]
    deltas = [c.delta_ns for c in diff.nodes]
    assert deltas == sorted(deltas, reverse=True)
    # The rest is one line: how many more and the change they add up to.
    rest = diff.nodes[TOP_NODES:]
    assert len(rest) > 0
    total = sum(c.delta_ns for c in rest)
    assert f"{len(rest)} more nodes, {signed_ms(total)}" in part
    # Op types: MatMul (the planted node's) first, with its share of the whole change.
    assert table_names(part, "ops")[0] == "MatMul"
    assert diff.headline() in part.replace("&#39;", "'").replace("&#96;", "`")


def test_nodes_on_one_side_only_are_marked_new_and_gone() -> None:
    base, current = profile(nodes()), profile(slower(nodes()))
    view = profile_view(
        replace(scenario(SID), profile=current),
        replace(scenario(SID), profile=base),
        top_nodes=1000,
    )
    assert view is not None and view.has_base
    marks = {row.name: row.mark for row in view.nodes}
    assert marks["/encoder/layer.3/extra/Mul"] == "new"
    assert marks["/pooler/Gather"] == "gone"
    assert {
        m for n, m in marks.items() if n not in ("/encoder/layer.3/extra/Mul", "/pooler/Gather")
    } == {""}
    part = section(render_html(report_input(base, current)))
    assert '/encoder/layer.3/extra/Mul<span class="mark mark-new">new</span>' in part


def test_the_icicle_is_self_contained_xml_and_its_colours_are_its_legends() -> None:
    base, current = profile(nodes()), profile(slower(nodes()))
    html = render_html(report_input(base, current))
    part = section(html)
    svg = icicle(part)
    text = ET.tostring(svg, encoding="unicode")
    # Nothing fetched: no link, image, script, style sheet or font; the only URL is the
    # SVG namespace, which names the format and is never requested.
    assert not re.search(r"https?://", text.replace("http://www.w3.org/2000/svg", ""))
    assert not re.search(r"https?://", part.replace('xmlns="http://www.w3.org/2000/svg"', ""))
    for tag in ("script", "style", "image", "use", "a", "foreignObject", "font-face"):
        assert svg.find(f".//{SVG_NS}{tag}") is None
    assert not any(k.endswith("href") for el in svg.iter() for k in el.attrib)

    drawn = boxes(svg)
    assert drawn[0][0] == "all operators" and drawn[0][2] == pytest.approx(ICICLE_WIDTH)
    fills = {}
    for path, fill, width in drawn[1:]:
        now, before = prefix_ns(current, path), prefix_ns(base, path)
        seen = any(n.path[: len(path.split("/"))] == tuple(path.split("/")) for n in base.nodes)
        assert fill == change_colour(before if seen else 0.0, now), path
        assert width == pytest.approx(now / current.operator_ns * ICICLE_WIDTH, abs=0.01)
        fills[path] = fill
    planted = PLANTED.strip("/")
    red, grey = change_colour(1.0, 2.0), change_colour(1.0, 1.0)
    assert fills[planted] == red  # 60 us -> 470 us: far beyond full colour
    assert fills["encoder/layer.3/extra/Mul"] == red  # new
    assert fills["encoder/layer.5/attention/self/query/MatMul"] == grey
    # The legend's swatches are the colours its labels claim (drawn by change_colour).
    swatches = {fill: label for fill, label in legend(True)}
    assert swatches[red] == "+50% or more, or new"
    assert swatches[grey] == "within \u00b12%"
    assert swatches[change_colour(1.0, 0.4)] == "\u221250% or less"
    legend_text = "".join(t.text or "" for t in svg.findall(f"{SVG_NS}text"))
    assert all(label in legend_text for _, label in legend(True))


def test_the_summary_names_the_top_contributor() -> None:
    base, current = profile(nodes()), profile(slower(nodes()))
    md = render_markdown(report_input(base, current))
    diff = diff_profiles(base, current)
    change = (current.operator_ns - base.operator_ns) / 1e6
    share = PLANTED_NS / (current.operator_ns - base.operator_ns)
    line = next(line for line in md.splitlines() if SID in line)
    layer = layer_of(PLANTED, "onnxruntime")  # the node`s layer: its parent path
    assert f"{change:+.2f} ms per request, {share:.0%} of it in MatMul `{layer}`" in line
    assert line.endswith(f"; {diff.headline()} |")


def test_the_markdown_headline_says_what_the_headline_says_with_names_made_inert() -> None:
    base, current = profile(nodes()), profile(slower(nodes()))
    for before in (base, None):
        diff = diff_profiles(before, current)
        assert markdown_headline(diff, in_table=False) == diff.headline()
    evil = "/x/[a](javascript:alert(1))|@everyone"  # a layer, named by its node below
    hostile = profile([NodeTime(f"{evil}/Op", "<b>Op</b>", 5.0e5), *nodes()])
    line = markdown_headline(diff_profiles(profile(nodes()), hostile))
    assert "`/x/[a](javascript:alert(1))\\|@everyone`" in line  # a code span, | escaped
    assert "<b>" not in line and "&lt;b&gt;Op&lt;/b&gt;" in line


# --------------------------------------------------------------------------- no base profile


@pytest.mark.parametrize("with_base_result", [True, False])
def test_without_a_base_profile_it_says_so_and_shows_where_the_time_goes_now(
    with_base_result: bool,
) -> None:
    current = profile(slower(nodes()))
    inp = report_input(None, current, base=with_base_result)
    part = section(render_html(inp))
    note = (
        "The base side has no operator profile"
        if with_base_result
        else "No base result to compare with"
    )
    assert f"{note}; this is where the time goes now." in part
    assert "share of time" in part and "share of change" not in part and "&Delta;" not in part
    assert table_names(part, "nodes")[0] == PLANTED  # the largest time now
    assert "new</span>" not in part  # nothing is new without something to compare with
    svg = icicle(part)
    assert {fill for _, fill, _ in boxes(svg)} == {change_colour(None, 1.0)}
    assert "no base profile to compare with" in ET.tostring(svg, encoding="unicode")
    md = render_markdown(inp)
    assert f"where the time goes now: {diff_profiles(None, current).headline()}" in md


def test_no_section_for_a_cell_without_a_profile() -> None:
    inp = report_input(profile(nodes()), profile(nodes()))
    inp = replace(
        inp, run=replace(inp.run, scenarios=(replace(inp.run.scenarios[0], profile=None),))
    )
    html = render_html(inp)
    assert 'class="where"' not in html
    assert "of it in" not in render_markdown(inp)


# --------------------------------------------------------------------------- untrusted text


def test_hostile_node_names_and_traces_stay_inert() -> None:
    evil = "/enc/<script>alert(1)</script>/\x1b[31mred\x07/&amp;"
    current = profile([NodeTime(evil, "<img src=x>", 9.0e5), *nodes()], trace="javascript:alert(1)")
    part = section(render_html(report_input(profile(nodes()), current)))
    assert "<script>" not in part and "<img" not in part and "\x1b" not in part
    assert "&lt;script&gt;" in part
    assert 'href="javascript' not in part and "<code>javascript:alert(1)</code>" in part
    svg = icicle(part)  # still well-formed
    assert any("<script>" in (t.text or "") for t in svg.iter(f"{SVG_NS}title"))


def test_the_trace_is_linked_relative_to_the_report() -> None:
    part = section(render_html(report_input(profile(nodes()), profile(slower(nodes())))))
    assert '<a href="traces/bert.json">traces/bert.json</a>' in part
    assert "Perfetto (ui.perfetto.dev) or chrome://tracing" in part


def test_an_empty_profile_draws_one_box() -> None:
    empty = OperatorProfile("torch.profiler", 1, 0.0, (), ())
    svg = ET.fromstring(icicle_svg(empty, empty))
    assert [path for path, _, _ in boxes(svg)] == ["all operators"]


# --------------------------------------------------------------------------- in a browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_the_section_fits_a_1280_px_window(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    long_name = "/encoder/" + "very_long_module_name_without_any_break." * 8 + "/MatMul"
    current = profile(
        [NodeTime(long_name, "com.microsoft.FusedMatMulWithBias", 2.0e5), *slower(nodes())]
    )
    page_file = tmp_path / "report.html"
    page_file.write_text(render_html(report_input(profile(nodes()), current)), encoding="utf-8")
    # Here, not at the top: that module skips itself (all of this one) without playwright.
    from tests.helpers.browser import FLAGS

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(page_file.as_uri())
            page.wait_for_load_state("load")
            fits = page.evaluate(
                """() => {
                  const s = document.querySelector('section.where');
                  const box = s.getBoundingClientRect();
                  const parts = [...s.querySelectorAll('table, svg, p')];
                  return {
                    section: [s.scrollWidth, s.clientWidth],
                    over: parts.filter(e => e.getBoundingClientRect().right > box.right + 0.5)
                               .map(e => e.tagName + '.' + e.className),
                    cells: [...s.querySelectorAll('td')]
                               .filter(td => td.scrollWidth > td.clientWidth)
                               .map(td => td.textContent.slice(0, 40)),
                  };
                }"""
            )
        finally:
            browser.close()
    assert fits["section"][0] <= fits["section"][1]
    assert fits["over"] == []
    assert fits["cells"] == []


def test_a_node_without_a_name_is_shown_as_unnamed() -> None:
    current = profile([NodeTime("", "Cast", 7.0e5), *nodes()])
    view = profile_view(replace(scenario(SID), profile=current), None)
    assert view is not None and view.nodes[0].name == "(unnamed)"
    assert "(unnamed)" in [path for path, _, _ in boxes(ET.fromstring(str(view.icicle)))]


def test_a_layer_whose_export_renumbered_its_nodes_is_named_as_a_whole() -> None:
    # An exported layer that gained operations: ONNX names its nodes after their place
    # (/layer2/Conv_1 ...), so the base's and the current's nodes share no names and
    # each new node holds a fraction of the change. Added up per layer, /layer2 is it.
    def layer2(count: int, ns: float) -> list[NodeTime]:
        return [NodeTime(f"/layer2/Conv_{i + count}", "Conv", ns) for i in range(count)]

    others = [NodeTime("/layer1/conv/Conv", "Conv", 300_000.0)]
    base = profile([*others, *layer2(1, 100_000.0)])
    current = profile([*others, *layer2(5, 100_000.0)])
    part = section(render_html(report_input(base, current)))
    assert table_names(part, "layers")[0] == "/layer2"
    # No single node holds more than a quarter of the change; the layer holds it all.
    assert all(c.share <= 0.25 for c in diff_profiles(base, current).nodes)
    assert "+0.40 ms per request, 100% of it in Conv `/layer2`" in part.replace("&#96;", "`")
    # Where layers are the nodes themselves (torch modules), no second table.
    modules = [NodeTime("layer1/conv", "Conv2d", 3e5), NodeTime("layer2", "Block", 1e5)]
    torch_base = replace(profile(modules), profiler="torch.profiler")
    torch_now = replace(
        profile([modules[0], replace(modules[1], ns=5e5)]), profiler="torch.profiler"
    )
    torch_part = section(render_html(report_input(torch_base, torch_now)))
    assert table_names(torch_part, "nodes")[0] == "layer2"
    assert 'class="prof prof-layers"' not in torch_part


# --------------------------------------------------------------------------- shares over 100%


def test_a_share_over_100_percent_says_it_is_of_the_net_change_and_what_offset_it() -> None:
    """Conv /layer2 got 0.35 ms slower while /layer1 got 50 us faster: net +0.30 ms,
    so /layer2 holds 117% of it. Every output says what that means."""
    base = profile(
        [NodeTime("/layer1/Conv", "Conv", 300_000.0), NodeTime("/layer2/Conv", "Conv", 100_000.0)]
    )
    current = profile(
        [NodeTime("/layer1/Conv", "Conv", 250_000.0), NodeTime("/layer2/Conv", "Conv", 450_000.0)]
    )
    want = (
        "+0.30 ms per request, 117% of the net change in Conv `/layer2`: "
        "the other nodes got faster by 50.0 us (17% of the net change)"
    )
    diff = diff_profiles(base, current)
    assert diff.headline() == want
    # The failure line of the regressed cell.
    assert profile_line(base, current) == f"{PROFILE_LINE}{want}"
    # The report: the headline, and what the tables' shares are of.
    part = section(render_html(report_input(base, current))).replace("&#96;", "`")
    assert want in part
    note = re.search(r'<p class="note share-note">(.*?)</p>', part)
    assert note is not None
    assert note[1].startswith(
        "Shares are of the net change of operator time per request (+0.30 ms)"
    )
    assert "a share over 100% is more than the net change" in note[1]
    assert "a negative share is a row that moved against the net change" in note[1].lower()
    assert "share of net change" in part
    # The summary's regression row.
    md = render_markdown(report_input(base, current))
    line = next(line for line in md.splitlines() if SID in line)
    assert "117% of the net change in Conv `/layer2`: the other nodes got faster by 50.0 us" in line
    # Within 100%, the shares read as parts of the change: no note.
    plain = profile(
        [NodeTime("/layer1/Conv", "Conv", 300_000.0), NodeTime("/layer2/Conv", "Conv", 450_000.0)]
    )
    assert "share-note" not in section(render_html(report_input(base, plain)))
    assert diff_profiles(base, plain).headline().endswith("100% of it in Conv `/layer2`")
