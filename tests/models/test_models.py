"""Loading factories and checking ONNX files: every ModelError case."""

from __future__ import annotations

import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from perfguard.core.blame import failure_text
from perfguard.core.errors import Location, ModelError
from perfguard.core.scenario import ModelSpec
from perfguard.models.factory import check_onnx_file, code_paths, load_factory

MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    class MLP(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.fc1 = nn.Linear(8, width)
            self.fc2 = nn.Linear(width, 4)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))


    def make_mlp(width=16):
        torch.manual_seed(0)
        return MLP(width)


    def lazy():
        import pg_helper  # a second file beside the suite, imported while the factory runs

        return pg_helper.build()


    def broken():
        raise ValueError("weights file is corrupt")


    def not_a_module():
        return 42


    NOT_CALLABLE = 3
    """
)

LOCATION_LINE = 7


def write_models(folder: Path, module: str = "pg_models", source: str = MODELS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(source)
    return folder


def spec(folder: Path, factory: str, **kwargs: object) -> ModelSpec:
    return ModelSpec(
        name="m",
        location=Location(folder / "suite.yaml", LOCATION_LINE),
        base_dir=folder,
        factory=factory,
        factory_kwargs=tuple(kwargs.items()),
    )


def test_factory_loads_with_kwargs_and_restores_sys_path(tmp_path: Path) -> None:
    import torch

    folder = write_models(tmp_path / "ok")
    before = list(sys.path)
    module = load_factory(spec(folder, "pg_models:make_mlp", width=32))
    assert isinstance(module, torch.nn.Module)
    assert getattr(module, "fc1").out_features == 32  # noqa: B009
    assert sys.path == before


def test_factory_may_import_siblings_while_it_runs(tmp_path: Path) -> None:
    import torch

    folder = write_models(tmp_path / "lazy")
    (folder / "pg_helper.py").write_text(
        "from torch import nn\n\ndef build():\n    return nn.Linear(2, 2)\n"
    )
    module = load_factory(spec(folder, "pg_models:lazy"))
    assert isinstance(module, torch.nn.Linear)
    sys.modules.pop("pg_helper", None)


def test_same_module_name_in_two_folders_is_not_mixed_up(tmp_path: Path) -> None:
    a = write_models(tmp_path / "a", "pg_twin", "from torch import nn\nmake = lambda: nn.ReLU()\n")
    b = write_models(tmp_path / "b", "pg_twin", "from torch import nn\nmake = lambda: nn.Tanh()\n")
    assert type(load_factory(spec(a, "pg_twin:make"))).__name__ == "ReLU"
    assert type(load_factory(spec(b, "pg_twin:make"))).__name__ == "Tanh"
    assert type(load_factory(spec(a, "pg_twin:make"))).__name__ == "ReLU"


def _assert_located(exc: ModelError, folder: Path) -> None:
    assert exc.location == Location(folder / "suite.yaml", LOCATION_LINE)
    assert f"suite.yaml:{LOCATION_LINE}" in str(exc)
    assert exc.fix


def test_module_not_importable(tmp_path: Path) -> None:
    folder = write_models(tmp_path / "nomod")
    with pytest.raises(ModelError) as info:
        load_factory(spec(folder, "pg_no_such_module:make"))
    text = str(info.value)
    assert "No module named 'pg_no_such_module'" in text  # the ImportError itself
    assert str(folder.resolve()) in text  # the sys.path entry that was added
    assert info.value.fix is not None and "beside the suite" in info.value.fix
    _assert_located(info.value, folder)


def test_module_above_the_suite_names_the_paths_and_the_pythonpath_fix(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_models(repo / "pg_rootpkg", "textcls")
    (repo / "pg_rootpkg" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    folder = repo / "suites"
    folder.mkdir()
    with pytest.raises(ModelError) as info:
        load_factory(spec(folder, "pg_rootpkg.textcls:make_mlp"))
    assert "No module named 'pg_rootpkg'" in str(info.value)
    assert str(folder.resolve()) in str(info.value)  # the suite's folder was searched
    fix = info.value.fix or ""
    assert 'pythonpath = ["."]' in fix and str(repo) in fix
    _assert_located(info.value, folder)


def test_package_without_the_submodule_names_the_package(tmp_path: Path) -> None:
    folder = tmp_path / "sub"
    write_models(folder / "pg_subpkg", "other")
    (folder / "pg_subpkg" / "__init__.py").write_text("")
    with pytest.raises(ModelError) as info:
        load_factory(spec(folder, "pg_subpkg.textcls:make"))
    fix = info.value.fix or ""
    assert "package 'pg_subpkg'" in fix and "no module 'textcls'" in fix
    assert "pythonpath" not in fix


def test_module_whose_own_import_is_missing_ends_at_that_import(tmp_path: Path) -> None:
    folder = write_models(tmp_path / "dep", "pg_needs_dep", "import pg_not_installed_dep\n")
    with pytest.raises(ModelError) as info:
        load_factory(spec(folder, "pg_needs_dep:make"))
    assert "factory module 'pg_needs_dep' raised ModuleNotFoundError" in str(info.value)
    assert info.value.fix is not None and "install 'pg_not_installed_dep'" in info.value.fix
    trace = failure_text(info.value).splitlines()
    assert "pg_needs_dep.py" in trace[-3] and trace[-1].startswith("ModuleNotFoundError")
    _assert_located(info.value, folder)


def test_module_that_fails_to_import(tmp_path: Path) -> None:
    folder = write_models(tmp_path / "syntax", "pg_syntax", "def broken(:\n")
    with pytest.raises(ModelError, match="SyntaxError") as info:
        load_factory(spec(folder, "pg_syntax:broken"))
    _assert_located(info.value, folder)


def test_function_missing_lists_close_names(tmp_path: Path) -> None:
    folder = write_models(tmp_path / "typo")
    with pytest.raises(ModelError, match="has no attribute 'make_mpl'") as info:
        load_factory(spec(folder, "pg_models:make_mpl"))
    assert info.value.fix is not None and "make_mlp" in info.value.fix
    _assert_located(info.value, folder)


def test_attribute_not_callable(tmp_path: Path) -> None:
    folder = write_models(tmp_path / "notcall")
    with pytest.raises(ModelError, match="non-callable"):
        load_factory(spec(folder, "pg_models:NOT_CALLABLE"))


def test_factory_raising_names_the_exception(tmp_path: Path) -> None:
    folder = write_models(tmp_path / "raises")
    with pytest.raises(ModelError, match="raised ValueError: weights file is corrupt") as info:
        load_factory(spec(folder, "pg_models:broken"))
    _assert_located(info.value, folder)
    assert isinstance(info.value.__cause__, ValueError)


def test_factory_returning_a_non_module(tmp_path: Path) -> None:
    folder = write_models(tmp_path / "int")
    with pytest.raises(
        ModelError, match=r"returned builtins\.int, not a torch\.nn\.Module"
    ) as info:
        load_factory(spec(folder, "pg_models:not_a_module"))
    _assert_located(info.value, folder)


def test_bad_kwargs_are_reported(tmp_path: Path) -> None:
    folder = write_models(tmp_path / "kw")
    with pytest.raises(ModelError, match="TypeError") as info:
        load_factory(spec(folder, "pg_models:make_mlp", depth=3))
    assert info.value.fix is not None and "depth=3" in info.value.fix


@pytest.mark.parametrize("factory", ["pg_models", "pg_models:", ":make", "a:b:c"])
def test_malformed_factory_string(tmp_path: Path, factory: str) -> None:
    with pytest.raises(ModelError, match="module:function"):
        load_factory(spec(tmp_path, factory))


def test_no_factory_at_all(tmp_path: Path) -> None:
    model = ModelSpec(name="m", location=Location(tmp_path / "s.yaml"), base_dir=tmp_path)
    with pytest.raises(ModelError, match="no `factory:`"):
        load_factory(model)


# --- ONNX files ------------------------------------------------------------------------


def _tiny_onnx(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_valid_onnx_file_passes(tmp_path: Path) -> None:
    path = _tiny_onnx(tmp_path / "ok.onnx")
    assert check_onnx_file(path, None) == path


def test_missing_onnx_file(tmp_path: Path) -> None:
    where = Location(tmp_path / "suite.yaml", 3)
    with pytest.raises(ModelError, match="not found") as info:
        check_onnx_file(tmp_path / "missing.onnx", where)
    assert info.value.location == where
    assert str(tmp_path / "missing.onnx") in str(info.value)


@pytest.mark.parametrize(
    "content", [b"", b"this is not protobuf at all \xff\xfe", np.arange(50).tobytes()]
)
def test_file_that_is_not_onnx(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    where = Location(tmp_path / "suite.yaml", 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ModelError, match="not an ONNX model") as info:
            check_onnx_file(path, where)
    assert info.value.location == where
    assert str(path) in str(info.value)


# --- how suite inputs reach forward() --------------------------------------------------


class _Sig:
    """Stand-ins whose ``forward`` has a given signature."""

    class One:
        def forward(self, x: object) -> None: ...

    class PosOnly:
        def forward(self, x: object, /) -> None: ...

    class Star:
        def forward(self, *args: object) -> None: ...

    class OneRequired:
        def forward(self, a: object, b: object = None) -> None: ...

    class Two:
        def forward(self, a: object, b: object) -> None: ...

    class Kw:
        def forward(self, x: object, **kwargs: object) -> None: ...

    class Optional:
        def forward(self, a: object = None) -> None: ...


@pytest.mark.parametrize(
    ("cls", "names", "expected"),
    [
        (_Sig.One, ["x"], False),  # the name fits: by keyword
        (_Sig.One, ["input"], True),  # nn.Sequential style: the lone input goes by position
        (_Sig.PosOnly, ["x"], True),  # positional-only cannot take a keyword
        (_Sig.Star, ["anything"], True),
        (_Sig.OneRequired, ["z"], True),
        (_Sig.Two, ["z"], False),  # two required arguments: a name must choose
        (_Sig.One, ["x", "y"], False),  # several inputs always go by keyword
        (_Sig.Kw, ["z"], False),  # **kwargs takes the name as given
        (_Sig.Optional, ["z"], False),
    ],
)
def test_feeds_positionally(cls: type, names: list[str], expected: bool) -> None:
    from perfguard.models.factory import feeds_positionally

    assert feeds_positionally(cls(), names) is expected


def test_forward_parameters() -> None:
    from perfguard.models.factory import forward_parameters

    assert forward_parameters(_Sig.OneRequired()) == (["a", "b"], ["a"], False)  # type: ignore[arg-type]
    assert forward_parameters(_Sig.PosOnly()) == ([], ["x"], False)  # type: ignore[arg-type]
    assert forward_parameters(_Sig.Kw()) == (["x"], ["x"], True)  # type: ignore[arg-type]


def test_code_paths_name_where_a_factory_would_be_imported_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found without importing: the suite folder's module, a package beside it that
    shadows it, and a src-layout package reached through sys.path."""
    suites, src = tmp_path / "suites", tmp_path / "src" / "mylib"
    suites.mkdir()
    src.mkdir(parents=True)
    (suites / "tinypg.py").write_text("raise SystemExit('imported')\n")
    (src / "__init__.py").write_text("raise SystemExit('imported')\n")
    loc = Location(suites / "s.yaml", 3)
    alone = ModelSpec("m", loc, suites, "tinypg:build", onnx=suites / "m.onnx")
    assert code_paths(alone) == (suites, suites / "m.onnx", suites / "tinypg.py")
    (suites / "tinypg").mkdir()
    (suites / "tinypg" / "__init__.py").write_text("")
    assert suites / "tinypg" in code_paths(alone)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    packaged = ModelSpec("m", loc, suites, "mylib.model:build")
    assert code_paths(packaged) == (suites, src, src / "__init__.py")
    assert "mylib" not in sys.modules and "tinypg" not in sys.modules
    assert code_paths(ModelSpec("m", loc, suites, "nosuchmod_pg:build")) == (suites,)
