"""GitHub Actions annotations and step summaries (perfguard.report.github)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfguard.report import github


def test_in_github_actions() -> None:
    assert github.in_github_actions({"GITHUB_ACTIONS": "true"})
    assert not github.in_github_actions({"GITHUB_ACTIONS": "false"})
    assert not github.in_github_actions({"GITHUB_ACTIONS": "1"})
    assert not github.in_github_actions({})


def test_in_github_actions_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    # The default argument is os.environ itself, so later changes are seen.
    assert github.in_github_actions()
    monkeypatch.delenv("GITHUB_ACTIONS")
    assert not github.in_github_actions()


def test_plain_annotation() -> None:
    env = {"GITHUB_WORKSPACE": "/repo"}
    line = github.annotation("suites/x.yaml", 12, "regression", "p95 too slow", env=env)
    assert line == "::error file=suites/x.yaml,line=12,title=regression::p95 too slow"


def test_message_escaping() -> None:
    line = github.annotation("suites/x.yaml", 3, "t", "p95 +12%\r\nwas: 1,2 ms\nnow: 3 ms", env={})
    # Colons and commas stay as they are in the message; % and LF are encoded; a CR
    # (which would overwrite the line in a log) is made a newline first.
    assert line.endswith("::p95 +12%25%0Awas: 1,2 ms%0Anow: 3 ms")
    assert "\n" not in line and "\r" not in line


def test_property_escaping_in_title_and_path() -> None:
    title = "suites/x.yaml::minilm[torch,fp32] 100%\nnext"
    line = github.annotation("dir,with:odd/x.yaml", 1, title, "m", env={})
    assert line == (
        "::error file=dir%2Cwith%3Aodd/x.yaml,line=1,"
        "title=suites/x.yaml%3A%3Aminilm[torch%2Cfp32] 100%25%0Anext::m"
    )
    # The percent sign is escaped first, so an escape is never escaped twice.
    assert github.escape_property("%3A:") == "%253A%3A"


def test_line_optional_and_levels() -> None:
    assert github.annotation("a.yaml", None, "t", "m", "warning", env={}) == (
        "::warning file=a.yaml,title=t::m"
    )
    assert github.annotation("a.yaml", 2, "", "m", "notice", env={}) == (
        "::notice file=a.yaml,line=2::m"
    )
    with pytest.raises(ValueError, match="level"):
        github.annotation("a.yaml", 1, "t", "m", "fatal", env={})
    with pytest.raises(ValueError, match="line"):
        github.annotation("a.yaml", 0, "t", "m", env={})


def test_absolute_path_made_relative_to_workspace(tmp_path: Path) -> None:
    suite = tmp_path / "suites" / "nlp.yaml"
    env = {"GITHUB_WORKSPACE": str(tmp_path)}
    assert github.relative_path(suite, env) == "suites/nlp.yaml"
    assert github.annotation(str(suite), 7, "t", "m", env=env).startswith(
        "::error file=suites/nlp.yaml,line=7,"
    )


def test_absolute_path_relative_to_cwd_without_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert github.relative_path(tmp_path / "suites" / "a.yaml", {}) == "suites/a.yaml"


def test_relative_and_outside_paths(tmp_path: Path) -> None:
    env = {"GITHUB_WORKSPACE": str(tmp_path / "repo")}
    assert github.relative_path("suites/a.yaml", env) == "suites/a.yaml"
    outside = tmp_path / "elsewhere" / "a.yaml"
    assert github.relative_path(outside, env) == outside.as_posix()


def test_relative_path_through_symlinked_workspace(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "suites").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    env = {"GITHUB_WORKSPACE": str(link)}
    assert github.relative_path(real / "suites" / "a.yaml", env) == "suites/a.yaml"


def test_step_summary_appends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert github.write_step_summary("## perfguard\n\n| a | b |") == summary
    assert github.write_step_summary("second\n") == summary
    assert summary.read_text(encoding="utf-8") == (
        "# earlier step\n## perfguard\n\n| a | b |\nsecond\n"
    )


def test_step_summary_creates_file(tmp_path: Path) -> None:
    summary = tmp_path / "new.md"
    assert github.write_step_summary("x", {"GITHUB_STEP_SUMMARY": str(summary)}) == summary
    assert summary.read_text(encoding="utf-8") == "x\n"


def test_no_op_outside_actions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert not github.in_github_actions()
    assert github.write_step_summary("ignored") is None
    assert github.write_step_summary("ignored", {"GITHUB_STEP_SUMMARY": ""}) is None
    assert list(tmp_path.iterdir()) == []
