"""The documentation against the code: the options table, the README's size and
example suite, and every relative link of README.md and docs/*.md.

The options are read from pytest's public surface (``pytest --help`` and
``config.getoption``/``config.getini`` in a fresh directory without an ini file), so these
tests do not care which perfguard module registers them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfguard.suite.loader import load_suite
from tests.helpers.paths import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
OPTIONS_PAGE = DOCS / "options.md"
README_LIMIT = 12 * 1024

# `--perfguard-x` at the start of a help line; `perfguard_x (type):` in the ini section.
_HELP_OPTION = re.compile(r"^\s{2}(--perfguard[\w-]*)", re.M)
_HELP_INI = re.compile(r"^\s{2}(perfguard_\w+) \((\w+)\):", re.M)
_TWIN = re.compile(r"--perfguard[\w-]*")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_CODE = re.compile(r"`([^`]+)`")
# [text](target) and ![alt](target); the target ends at whitespace or ")".
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


@dataclass(frozen=True)
class Registered:
    """What perfguard registers with pytest: options, ini keys and their defaults."""

    options: dict[str, object]  # "--perfguard-x" -> getoption() with nothing given
    ini: dict[str, object]  # "perfguard_x" -> getini() without an ini file
    twins: dict[str, str]  # ini key -> the option its help names as its twin


@dataclass(frozen=True)
class Row:
    option: str | None
    ini: str | None
    default: tuple[str, ...]  # code spans of the default cell, else its plain text


def _help_sections(text: str) -> tuple[str, str]:
    """(options part, ini part) of ``pytest --help``."""
    marker = re.search(r"^\[pytest\] (?:configuration|ini)", text, re.M)
    assert marker is not None, "pytest --help has no ini section"
    return text[: marker.start()], text[marker.start() :]


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Registered:
    # A fresh directory without any ini file: getini() gives the registered defaults.
    where = tmp_path_factory.mktemp("registered")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=where,
        capture_output=True,
        text=True,
        check=True,
    )
    opts_part, ini_part = _help_sections(proc.stdout)
    options = list(dict.fromkeys(_HELP_OPTION.findall(opts_part)))
    ini_keys = [name for name, _ in _HELP_INI.findall(ini_part)]
    assert "--perfguard" in options, "perfguard's options are not in pytest --help"
    # An ini key's help (its indented continuation lines) names its twin option, if any.
    twins: dict[str, str] = {}
    lines = ini_part.splitlines()
    for i, line in enumerate(lines):
        entry = _HELP_INI.match(line)
        if entry is None:
            continue
        body = [entry.string[entry.end() :]]
        for more in lines[i + 1 :]:
            if not more.startswith("    "):
                break
            body.append(more)
        twin = _TWIN.search(" ".join(body))
        if twin:
            twins[entry[1]] = twin[0]
    out = where / "registered.json"
    (where / "conftest.py").write_text(
        textwrap.dedent(
            f"""
            import json

            def pytest_configure(config):
                options = {{
                    name: config.getoption(name.lstrip("-").replace("-", "_"))
                    for name in {options!r}
                }}
                ini = {{name: config.getini(name) for name in {ini_keys!r}}}
                with open({str(out)!r}, "w") as f:
                    json.dump({{"options": options, "ini": ini}}, f)
            """
        )
    )
    subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=where,
        capture_output=True,
        text=True,
        check=False,  # nothing to collect: exit status 5
    )
    data = json.loads(out.read_text())
    return Registered(options=data["options"], ini=data["ini"], twins=twins)


def _rows(page: Path) -> list[Row]:
    """The rows of the page's first table whose header starts with `command line`."""
    rows: list[Row] = []
    in_table = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("| command line |"):
            in_table = True
            continue
        if not in_table:
            continue
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in _CELL_SPLIT.split(line.strip().strip("|"))]
        if set("".join(cells)) <= set("-: "):
            continue  # the separator row
        option_cell, ini_cell, default_cell = cells[0], cells[1], cells[2]
        option = _CODE.findall(option_cell)
        ini = _CODE.findall(ini_cell)
        spans = _CODE.findall(default_cell)
        rows.append(
            Row(
                option=option[0].split()[0].split("=")[0] if option else None,
                ini=ini[0] if ini else None,
                default=tuple(spans) if spans else (default_cell,),
            )
        )
    assert rows, f"{page} has no `| command line | ...` table"
    return rows


def _shown(value: object) -> tuple[str, ...] | None:
    """How a registered default is written in the table (None: no default to check)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ("on",) if value else ("off",)
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return (str(value),)


def test_options_table_lists_every_registered_option(registered: Registered) -> None:
    rows = _rows(OPTIONS_PAGE)
    in_table = [r.option for r in rows if r.option]
    assert sorted(in_table) == sorted(registered.options), (
        "docs/options.md and the registered options differ: "
        f"missing {sorted(set(registered.options) - set(in_table))}, "
        f"not registered {sorted(set(in_table) - set(registered.options))}"
    )
    assert len(in_table) == len(set(in_table)), "an option has two rows"


def test_options_table_lists_every_registered_ini_key(registered: Registered) -> None:
    rows = _rows(OPTIONS_PAGE)
    in_table = [r.ini for r in rows if r.ini]
    assert sorted(in_table) == sorted(registered.ini), (
        "docs/options.md and the registered ini keys differ: "
        f"missing {sorted(set(registered.ini) - set(in_table))}, "
        f"not registered {sorted(set(in_table) - set(registered.ini))}"
    )
    assert len(in_table) == len(set(in_table)), "an ini key has two rows"


def test_options_table_pairs_ini_keys_with_their_twin_options(registered: Registered) -> None:
    pairs = {r.ini: r.option for r in _rows(OPTIONS_PAGE) if r.ini}
    # 14 of the 16 ini keys name their twin option today: a parse of `pytest --help`
    # that finds (almost) none would otherwise pass this test without checking a pair.
    assert len(registered.twins) >= 10, f"the help parse found only {registered.twins}"
    for ini, option in registered.twins.items():
        assert pairs.get(ini) == option, f"{ini} is the twin of {option}: put them in one row"


def test_options_table_defaults_match_the_registered_ones(registered: Registered) -> None:
    checked = 0
    for row in _rows(OPTIONS_PAGE):
        # The option's own default when it has one (a flag), else its ini twin's.
        expected = _shown(registered.options.get(row.option)) if row.option else None
        if expected is None and row.ini:
            expected = _shown(registered.ini.get(row.ini))
        if expected is None:
            continue  # e.g. --perfguard-ab: no default to compare
        checked += 1
        who = row.option or row.ini
        assert row.default == expected, f"default of {who}: table {row.default}, code {expected}"
    assert checked >= len(registered.ini)


def test_readme_is_a_landing_page_of_at_most_12_kib() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; move detail into docs/"


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_at_existing_files(page: Path) -> None:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))  # code blocks hold no links
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor in the same page
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name}: links to missing files: {broken}"


def test_docs_pages_are_all_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w-]+\.md)\s*$", config, re.M))
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages == listed, f"not in the nav: {pages - listed}; missing: {listed - pages}"


def _readme_suite() -> str:
    blocks = re.findall(r"^```yaml\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    suites = [str(b) for b in blocks if "scenarios:" in b]
    assert suites, "README.md has no example suite (a ```yaml block with `scenarios:`)"
    return suites[0]


def test_readme_example_suite_loads_with_the_real_loader(tmp_path: Path) -> None:
    path = tmp_path / "suites" / "example.yaml"
    path.parent.mkdir()
    path.write_text(_readme_suite(), encoding="utf-8")
    suite = load_suite(path)  # raises SuiteError (file:line) if the README's suite is wrong
    names = [sc.item_name for sc in suite.scenarios]
    assert names, "the README's suite has no cells"
    assert all(sc.error is None for sc in suite.scenarios), "a README cell cannot run"
    readme = README.read_text(encoding="utf-8")
    for name in names:
        assert f"`{name}`" in readme, f"the README does not name its cell {name}"
