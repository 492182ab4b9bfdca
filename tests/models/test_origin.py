"""Which checkout a path belongs to (perfguard.models.origin.CodeTree.owner)."""

from __future__ import annotations

from pathlib import Path

from perfguard.models.origin import CodeTree, in_environment


def test_an_installed_environment_in_a_checkout_is_no_side_s_code(tmp_path: Path) -> None:
    head, base = tmp_path / "head", tmp_path / "base"
    venv = head / ".venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    target = head / "vendor" / "site-packages"
    for folder in (site / "torch", target, head / "src" / "mylib", base):
        folder.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    tree = CodeTree(root=base.resolve(), others=(head.resolve(),), label="base")
    assert tree.owner(str(head / "src" / "mylib")) == head.resolve()
    assert tree.owner(str(head)) == head.resolve()
    assert tree.owner(str(site)) is None
    assert tree.owner(str(site / "torch")) is None
    assert tree.owner(str(venv / "bin")) is None
    assert tree.owner(str(target)) is None  # pip install --target into the checkout
    assert tree.owner(str(tmp_path / "elsewhere")) is None
    # A folder merely named like an environment is code.
    (head / "venvs").mkdir()
    assert not in_environment(head.resolve(), str((head / "venvs").resolve()))
