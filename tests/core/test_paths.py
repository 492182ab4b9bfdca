"""``perfguard.core.paths``: how results, ids and reports name a file under the rootdir."""

from __future__ import annotations

from pathlib import Path

from perfguard.core.paths import display_path, under_root


def test_a_file_under_the_rootdir_is_named_relative_in_posix_form(tmp_path: Path) -> None:
    suite = tmp_path / "suites" / "nlp.yaml"
    assert under_root(suite, tmp_path) == Path("suites/nlp.yaml")
    assert display_path(suite, tmp_path) == "suites/nlp.yaml"
    # Relative paths and links resolve first: the same file gets the same name.
    (tmp_path / "link").symlink_to(tmp_path / "suites", target_is_directory=True)
    assert display_path(tmp_path / "link" / "nlp.yaml", tmp_path) == "suites/nlp.yaml"


def test_a_file_outside_the_rootdir_keeps_the_path_it_was_given(tmp_path: Path) -> None:
    root, other = tmp_path / "root", tmp_path / "elsewhere" / "s.yaml"
    assert under_root(other, root) is None
    assert display_path(other, root) == other.as_posix()
