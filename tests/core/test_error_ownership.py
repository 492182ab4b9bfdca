"""Errors owned by the right party: perfguard's own exceptions are reported as bugs in
perfguard, a model's as a few lines ending at the model's own file and line, whatever
step raised it, in-process or in a worker; factory import errors point the right way."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

from perfguard.core.blame import (
    RemoteTraceback,
    blame,
    failure_text,
    model_trace,
    owner,
    perfguard_trace,
    trace_of,
)
from perfguard.core.errors import (
    REPORT_FIX,
    AccuracyError,
    HostMemoryError,
    InternalError,
    Location,
    ModelError,
    WorkerRequestFailed,
)
from perfguard.core.scenario import LoopSpec
from perfguard.measure.timing import measure
from perfguard.worker.protocol import error_from_reply
from perfguard.worker.serve import Server
from tests.helpers.suites import FAST_DEFAULTS

THIS_FILE = Path(__file__).name

# --- the classifier ----------------------------------------------------------------


def _caught(call: object) -> BaseException:
    try:
        call()  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("expected an exception")


def _users_helper() -> None:
    raise ValueError("the user's code broke")


def test_an_overflow_in_the_timing_loop_is_perfguards_own() -> None:
    # The reported case: `measure: {seconds: 1.0e+300}` overflowed in perfguard's loop.
    exc = _caught(lambda: measure(lambda: None, None, LoopSpec(1, 1.0e300), LoopSpec(1, 0.0)))
    assert isinstance(exc, OverflowError)
    assert owner(exc) == "perfguard"
    error = blame(exc, doing="timing it", culprit="model 'lin'", fix="check the inputs")
    assert isinstance(error, InternalError)
    assert error.fix == REPORT_FIX
    assert "check the inputs" not in str(error)
    assert "timing.py" in str(error)
    # Its trace keeps perfguard's frames (the bug is there), not pytest's.
    error.__cause__ = exc
    trace = failure_text(error).split("\n", 1)[1]
    frames = [line for line in trace.splitlines() if line.lstrip().startswith('File "')]
    assert "timing.py" in frames[-1]
    assert not [frame for frame in frames if "_pytest" in frame or "pluggy" in frame]
    assert trace.splitlines()[-1].startswith("OverflowError")


def test_the_users_code_and_runtime_libraries_are_the_models() -> None:
    assert owner(_caught(_users_helper)) == "model"
    torch = pytest.importorskip("torch")
    linear = torch.nn.Linear(4, 2)
    exc = _caught(lambda: linear(torch.zeros(1, 5)))  # raised inside torch
    assert owner(exc) == "model"
    error = blame(exc, doing="timing it", culprit="model 'lin'", fix="check the inputs")
    assert type(error) is ModelError and error.fix == "check the inputs"


def test_out_of_host_memory_is_neither_the_signature_nor_a_bug() -> None:
    def allocate() -> None:
        raise MemoryError("Unable to allocate 596. GiB")

    exc = _caught(allocate)
    assert owner(exc) == "memory"
    error = blame(exc, doing="timing it", culprit="model 'lin'", fix="check the inputs")
    assert isinstance(error, HostMemoryError)
    assert "out of host memory" in str(error)
    assert error.fix is not None and "smaller" in error.fix and "check the inputs" not in str(error)


def test_arguments_a_called_user_function_does_not_take_are_the_users() -> None:
    def factory(width: int = 1) -> int:
        return width

    def call_it() -> BaseException:
        try:
            factory(depth=3)  # type: ignore[call-arg]
        except TypeError as exc:
            return exc
        raise AssertionError

    exc = call_it()
    assert owner(exc, calls_user=True) == "model"


def test_a_models_trace_ends_at_the_users_line() -> None:
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def forward(self, x: object) -> object:
            return torch.nn.functional.linear(x, torch.zeros(2, 4))  # the user's line

    exc = _caught(lambda: Model()(torch.zeros(1, 5)))
    trace = model_trace(exc)
    lines = trace.splitlines()
    frames = [line for line in lines if line.lstrip().startswith("File ")]
    assert frames and THIS_FILE in frames[-1]
    assert all(THIS_FILE in frame for frame in frames)  # torch, pytest: folded away
    assert lines[-1].startswith("RuntimeError")
    assert "--tb=long" in lines[0]
    # A trace of perfguard's own keeps every non-library frame, the user's too.
    assert THIS_FILE in perfguard_trace(exc)


def test_failure_text_follows_the_cause_through_perfguards_errors() -> None:
    try:
        try:
            _users_helper()
        except ValueError as exc:
            raise ModelError("model 'm' raised ValueError", fix="fix it") from exc
    except ModelError as model_error:
        wrapped = AccuracyError(f"the reference could not run: {model_error}")
        wrapped.__cause__ = model_error
    text = failure_text(wrapped)
    assert text.startswith("the reference could not run")
    assert "_users_helper" in text and text.splitlines()[-1].startswith("ValueError")


def test_a_workers_reply_is_rebuilt_with_its_short_trace_and_how_to_debug() -> None:
    short = 'Traceback (...):\n  File "/p/models.py", line 9, in forward\nValueError: boom'
    error = error_from_reply(
        {
            "type": "ModelError",
            "message": "m",
            "problem": "model 'm' raised ValueError: boom while timing it",
            "expected": None,
            "fix": "check the inputs",
            "location": {"path": "/p/s.yaml", "line": 4},
            "trace": short,
            "traceback": "every frame",
            "cell": "suites/s.yaml::fwd[torch]",
        },
        "loop",
        "worker 'w' (pid 1)",
        "w",
    )
    assert isinstance(error, ModelError)
    assert isinstance(error.__cause__, RemoteTraceback) and str(error.__cause__) == "every frame"
    assert error.location == Location(Path("/p/s.yaml"), 4)
    assert error.fix is not None
    assert "--perfguard-isolate" in error.fix and "--pdb" in error.fix
    assert "'suites/s.yaml::fwd[torch]'" in error.fix
    assert failure_text(error).endswith(short)


def test_a_worker_sends_the_models_short_trace_and_the_parent_shows_it(
    tmp_path: Path,
) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "errmodels.py").write_text(MODELS)
    suite = suites / "s.yaml"
    suite.write_text(_suite({"broken": "errmodels:broken"}, {"fwd": "    model: broken\n"}))
    server = Server()

    def serve(request: dict[str, object]) -> dict[str, object]:
        reply = json.loads(server.handle_line(json.dumps({"v": 1, "id": 1, **request}).encode()))
        assert isinstance(reply, dict)
        return reply

    opened = serve(
        {"op": "open", "suite": str(suite), "cell": "fwd", "rootdir": str(tmp_path),
         "cache_dir": str(tmp_path / ".cache")}
    )  # fmt: skip
    assert opened["ok"] is True
    try:
        error = serve({"op": "measure", "k": 1})["error"]  # the raw request: no wrapping
    finally:
        server.shutdown()
    assert isinstance(error, dict) and error["type"] == "ValueError"
    assert error["cell"] == "suites/s.yaml::fwd"
    assert error["location"]["path"] == str(suite)
    trace = error["trace"].splitlines()
    last = [line for line in trace if line.lstrip().startswith('File "')][-1]
    assert f"line {_line_of('FORWARD-LINE')}," in last and "errmodels.py" in last
    assert trace[-1].startswith("ValueError")
    assert not [line for line in trace if "/perfguard/" in line or "_pytest" in line]
    rebuilt = error_from_reply(error, "measure", "worker 'w' (pid 1)", "w")
    assert isinstance(rebuilt, WorkerRequestFailed)
    assert rebuilt.tail == error["trace"]  # the short form, not the last raw lines
    assert rebuilt.location is not None and rebuilt.location.path == suite
    assert rebuilt.fix is not None and "pytest --perfguard suites/s.yaml::fwd --pdb" in rebuilt.fix
    assert isinstance(rebuilt.__cause__, RemoteTraceback)  # every frame, for --tb=long
    assert "errmodels.py" in str(rebuilt.__cause__)


def test_a_memory_error_from_an_older_worker_is_out_of_host_memory() -> None:
    error = error_from_reply(
        {"type": "MemoryError", "message": "", "traceback_tail": "..."}, "result", "worker", "w"
    )
    assert isinstance(error, HostMemoryError) and "out of host memory" in str(error)
    assert "check the input names" not in str(error)


# --- end to end ----------------------------------------------------------------------

MODELS = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return check(self.fc(x))


    def check(y):
        raise ValueError("the model broke on purpose")  # FORWARD-LINE


    def broken():
        return Broken()


    def factory_fails():
        return load_weights("weights.bin")


    def load_weights(path):
        raise OSError(f"cannot read {path}")  # FACTORY-LINE


    class NoCopy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)
            self.scaled = self.fc.weight * 2  # not a graph leaf: deepcopy refuses it

        def forward(self, x):
            return self.fc(x)


    def nocopy():
        return NoCopy()


    class NoExport(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            if torch.jit.is_tracing():
                raise RuntimeError("this model cannot be traced")  # EXPORT-LINE
            return self.fc(x)


    def noexport():
        return NoExport()


    class Picky(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            if not bool(x.any()):  # the accuracy inputs are all zeros, the timing's not
                raise ValueError("an all-zero input")  # ACCURACY-LINE
            return self.fc(x)


    def picky():
        return Picky()


    def accuracy_inputs():
        import numpy as np

        return [{"x": np.zeros((2, 8), dtype=np.float32)} for _ in range(2)]


    def fine():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 4))
    """
)

IMPORT_FAILS = 'SETTINGS = {}\n\n\ndef build():\n    pass\n\n\nDEFAULT = SETTINGS["width"]\n'


def _line_of(marker: str, source: str = MODELS) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


def _suite(models: dict[str, str], scenarios: dict[str, str]) -> str:
    body = FAST_DEFAULTS + "models:\n"
    for name, factory in models.items():
        body += f"  {name}:\n    factory: {factory}\n    inputs:\n      x: {{shape: [2, 8]}}\n"
    body += "scenarios:\n"
    for name, rest in scenarios.items():
        body += f"  - name: {name}\n{rest}"
    return body


def _project(pytester: pytest.Pytester, suite: str) -> None:
    pytester.makeini("[pytest]\n")
    suites = pytester.path / "suites"
    suites.mkdir(exist_ok=True)
    (suites / "errmodels.py").write_text(MODELS)
    (suites / "importfails.py").write_text(IMPORT_FAILS)
    (suites / "s.yaml").write_text(suite)


def _block(out: str, name: str) -> list[str]:
    """The lines of the failure section of scenario ``name`` (header excluded)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if re.search(rf"_ scenario: {name} _", line))
    end = next(i for i in range(start + 1, len(lines)) if re.match(r"^(_{3,} | ?={3,})", lines[i]))
    return lines[start + 1 : end]


def _assert_ends_at(block: list[str], path_part: str, line: int, exception: str) -> None:
    """A short traceback whose last frame is the user's ``path_part:line``; no frame
    of pytest, pluggy or perfguard is shown."""
    frames = [ln for ln in block if ln.lstrip().startswith('File "')]
    assert frames, "\n".join(block)
    assert path_part in frames[-1] and f"line {line}," in frames[-1], frames[-1]
    for frame in frames:
        assert "_pytest" not in frame and "pluggy" not in frame
        assert "/perfguard/" not in frame
    assert block[-1].startswith(exception), block[-1]
    assert len(block) < 25, "\n".join(block)


IN_PROCESS = {
    "broken": "errmodels:broken",
    "factory": "errmodels:factory_fails",
    "nocopy": "errmodels:nocopy",
    "importfails": "importfails:build",
    "noexport": "errmodels:noexport",
    "picky": "errmodels:picky",
}
IN_PROCESS_CELLS = {
    "fwd": "    model: broken\n",
    "fac": "    model: factory\n",
    "quant": "    model: nocopy\n    precision: int8\n",
    "imp": "    model: importfails\n",
    "export": "    model: noexport\n    backend: onnxruntime\n",
    "acc": "    model: picky\n"
    "    accuracy: {inputs: {count: 2, function: errmodels:accuracy_inputs}}\n",
}


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    _project(pytester, _suite(IN_PROCESS, IN_PROCESS_CELLS))
    return pytester


def test_a_models_exception_in_each_step_is_a_few_lines_ending_at_its_line(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest("--perfguard", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=6)
    out = result.stdout.str()
    assert "INTERNALERROR" not in out

    forward = _block(out, "fwd")
    _assert_ends_at(forward, "errmodels.py", _line_of("FORWARD-LINE"), "ValueError")
    assert re.match(r".*s\.yaml:\d+: model 'broken' raised ValueError", forward[0])

    factory = _block(out, "fac")
    _assert_ends_at(factory, "errmodels.py", _line_of("FACTORY-LINE"), "OSError")
    assert "factory errmodels:factory_fails raised OSError" in factory[0]

    imported = _block(out, "imp")
    line = _line_of('SETTINGS["width"]', IMPORT_FAILS)
    _assert_ends_at(imported, "importfails.py", line, "KeyError")
    assert "factory module 'importfails' raised KeyError" in imported[0]

    exported = _block(out, "export")
    _assert_ends_at(exported, "errmodels.py", _line_of("EXPORT-LINE"), "RuntimeError")
    assert "exporting factory errmodels:noexport to ONNX" in exported[0]

    accuracy = _block(out, "acc")
    _assert_ends_at(accuracy, "errmodels.py", _line_of("ACCURACY-LINE"), "ValueError")
    assert "on the accuracy inputs" in accuracy[0]

    # torch int8: the deepcopy inside torch's quantize_dynamic refuses the model.
    quant = "\n".join(_block(out, "quant"))
    assert len(quant.splitlines()) < 25, quant
    assert "s.yaml:" in quant and "quantiz" in quant
    assert "deep-copyable" in quant and "precision: fp32" in quant
    assert "backend: onnxruntime" in quant


def test_tb_long_shows_every_frame(project: pytest.Pytester) -> None:
    result = project.runpytest("--perfguard", "-p", "no:cacheprovider", "-k", "fwd", "--tb=long")
    result.assert_outcomes(failed=1)
    block = "\n".join(_block(result.stdout.str(), "fwd"))
    assert "raised ValueError" in block.splitlines()[0]  # the short form first
    assert "measure/runner.py" in block and "measure/timing.py" in block  # then every frame


def test_an_isolated_models_exception_reads_as_in_process_and_says_how_to_debug(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest(
        "--perfguard", "-p", "no:cacheprovider", "--perfguard-isolate", "-k", "fwd"
    )
    result.assert_outcomes(failed=1)
    block = _block(result.stdout.str(), "fwd")
    _assert_ends_at(block, "errmodels.py", _line_of("FORWARD-LINE"), "ValueError")
    head = block[0]
    assert "model 'broken' raised ValueError" in head and "in worker" in head
    assert "without --perfguard-isolate" in head and "suites/s.yaml::fwd --pdb" in head


def test_an_exception_inside_perfguard_is_reported_as_its_bug(
    pytester: pytest.Pytester,
) -> None:
    suite = _suite({"fine": "errmodels:fine"}, {"lin": "    model: fine\n"})
    _project(pytester, suite.replace("warmup: {iterations: 2, seconds: 0}", "warmup: {}"))
    # The overflow of `seconds: 1.0e+300`, provoked inside perfguard's timing loop.
    pytester.makeconftest(
        "import perfguard.measure.timing as timing\n\ntiming._NS_PER_S = float('inf')\n"
    )
    result = pytester.runpytest("--perfguard", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    block = _block(result.stdout.str(), "lin")
    text = "\n".join(block)
    assert "perfguard itself raised" in block[0] and "OverflowError" in block[0]
    assert "bug in perfguard; please report it" in block[0]
    assert "check the input names" not in text
    assert "timing.py" in text and len(block) < 30


@pytest.mark.slow  # runs pytest in a subprocess
def test_a_factory_module_at_the_repository_root_names_the_paths_and_the_pythonpath_fix(
    pytester: pytest.Pytester,
) -> None:
    root = pytester.path / "repo"
    (root / "mymodels").mkdir(parents=True)
    (root / "mymodels" / "__init__.py").write_text("")
    (root / "mymodels" / "textcls.py").write_text(MODELS)
    (root / "suites").mkdir()
    suite = _suite({"m": "mymodels.textcls:fine"}, {"t": "    model: m\n"})
    (root / "suites" / "s.yaml").write_text(suite)
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    # Run from above the repository: `python -m pytest` puts its folder on sys.path.
    result = pytester.run(
        sys.executable, "-m", "pytest", "--perfguard", "-p", "no:cacheprovider",
        f"--rootdir={root}", "-c", str(root / "pyproject.toml"), str(root / "suites"),
        timeout=300,
    )  # fmt: skip
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    head = _block(out, "t")[0]
    assert "cannot import factory module 'mymodels.textcls'" in head
    assert str((root / "suites").resolve()) in head  # the suite's folder, searched
    assert 'pythonpath = ["."]' in head and "[tool.pytest.ini_options]" in head
    assert str(root.resolve()) in head  # where the package sits


def test_a_cycle_of_causes_ends_the_trace_walk() -> None:
    """A perfguard error caught, wrapped and re-raised by a step (a watchdog's timeout
    inside a wrapped factory call) can chain back to itself: the walk must end."""
    outer, inner = ModelError("wrapped"), InternalError("the original")
    outer.__cause__, inner.__cause__ = inner, outer
    assert trace_of(outer) == ""
    assert failure_text(outer) == str(outer)
