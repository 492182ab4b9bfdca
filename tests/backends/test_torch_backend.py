"""The PyTorch backend: devices, precisions, threads, input names and outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.backends.torch_backend import TorchBackend
from perfguard.core.errors import CellError, InputError
from perfguard.core.scenario import InputSpec, ModelSpec, Scenario
from perfguard.records.figures import RuntimeInfo
from tests.helpers.torch_cells import (
    LOCATION,
    open_session,
    reference,
    scenario,
)

torch = pytest.importorskip("torch")


def test_fp32_cpu_session_runs_the_factory_model(tmp_path: Path) -> None:
    session, feeds = open_session(scenario(tmp_path), tmp_path)
    try:
        assert session.synchronize is None
        prepared = session.prepare(feeds)
        assert prepared["x"].dtype == torch.float32
        raw = session.run(prepared)
        assert isinstance(raw, torch.Tensor) and raw.is_inference()  # ran in inference_mode
        (out,) = session.to_numpy(raw)
        assert out.dtype == np.float32 and out.shape == (2, 4)
        np.testing.assert_allclose(out, reference(feeds), rtol=1e-6, atol=1e-6)
        info = session.runtime_info
        assert info["torch"] == torch.__version__
        assert info["device"] == "cpu" and info["dtype"] == "float32"
        assert isinstance(info["threads"], int)
        # prepare copies: changing the numpy feed afterwards does not change the tensor
        feeds["x"][...] = 0
        assert float(prepared["x"].abs().sum()) > 0
    finally:
        session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.run(prepared)


def test_threads_are_set_and_restored(tmp_path: Path) -> None:
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    session, _ = open_session(scenario(tmp_path, threads=wanted), tmp_path)
    try:
        assert torch.get_num_threads() == wanted
        assert session.runtime_info["threads"] == wanted
    finally:
        session.close()
    assert torch.get_num_threads() == before


@pytest.mark.parametrize(("precision", "dtype"), [("fp16", "float16"), ("bf16", "bfloat16")])
def test_half_precisions_cast_model_and_inputs(tmp_path: Path, precision: str, dtype: str) -> None:
    torch_dtype = getattr(torch, dtype)
    session, feeds = open_session(scenario(tmp_path, precision=precision), tmp_path)
    try:
        assert {p.dtype for p in session._module.parameters()} == {torch_dtype}
        prepared = session.prepare({**feeds, "n": np.arange(2, dtype=np.int64)})
        assert prepared["x"].dtype == torch_dtype
        assert prepared["n"].dtype == torch.int64  # integers are never cast
        raw = session.run({"x": prepared["x"]})
        assert raw.dtype == torch_dtype
        (out,) = session.to_numpy(raw)
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, reference(feeds), atol=0.05)
        assert session.runtime_info["dtype"] == dtype
    finally:
        session.close()


def test_int8_quantizes_linear_layers(tmp_path: Path) -> None:
    session, feeds = open_session(scenario(tmp_path, precision="int8"), tmp_path)
    try:
        modules = list(session._module.modules())
        assert any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in modules)
        assert not any(type(m) is torch.nn.Linear for m in modules)
        # The runtime facts say which modules torch replaced, none left in float.
        applied = RuntimeInfo(backend=session.runtime_info).quantization
        assert applied is not None and applied.kept == {}
        linear = [m for m in modules if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
        assert applied.quantized == {"Linear": len(linear)} and len(applied.layers) == len(linear)
        (out,) = session.to_numpy(session.run(session.prepare(feeds)))
        np.testing.assert_allclose(out, reference(feeds), atol=0.05)
    finally:
        session.close()


def test_bfloat16_input_spec_is_cast_by_the_backend(tmp_path: Path) -> None:
    inputs = (InputSpec("x", (2, 3), "bfloat16"),)
    session, feeds = open_session(
        scenario(tmp_path, "pg_torch_models:echo", inputs=inputs), tmp_path
    )
    try:
        assert feeds["x"].dtype == np.float32
        prepared = session.prepare(feeds)
        assert prepared["x"].dtype == torch.bfloat16
        (out,) = session.to_numpy(session.run(prepared))
        assert out.dtype == np.float32
    finally:
        session.close()


def test_cuda_without_cuda_is_a_cell_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:1"):
        with pytest.raises(CellError, match=r"is_available\(\) is False") as info:
            open_session(scenario(tmp_path, device=device), tmp_path)
        assert device in str(info.value) and info.value.location == LOCATION
        assert info.value.fix is not None and "device: cpu" in info.value.fix


def test_cuda_index_out_of_range_and_int8_on_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(CellError, match="only 1 CUDA device"):
        open_session(scenario(tmp_path, device="cuda:3"), tmp_path)
    with pytest.raises(CellError, match="int8 on cuda:0"):
        open_session(scenario(tmp_path, device="cuda:0", precision="int8"), tmp_path)


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "gpu"])
def test_unknown_device(tmp_path: Path, device: str) -> None:
    with pytest.raises(CellError, match="unknown device"):
        open_session(scenario(tmp_path, device=device), tmp_path)


def test_onnx_only_model_is_a_cell_error(tmp_path: Path) -> None:
    sc = scenario(tmp_path)
    model = ModelSpec(name="m", location=sc.model.location, base_dir=tmp_path, onnx=Path("m.onnx"))
    sc = Scenario(suite=sc.suite, name="s", cell_id="", model=model, location=LOCATION)
    with pytest.raises(CellError, match="needs a `factory:`"):
        TorchBackend().open(sc, {"x": np.zeros((2, 8), np.float32)}, tmp_path)


def test_wrong_input_names_list_forward_parameters(tmp_path: Path) -> None:
    inputs = (InputSpec("pixels", (1, 3, 8, 8)), InputSpec("scale", (1, 2)))
    sc = scenario(tmp_path, "pg_torch_models:conv", inputs=inputs)
    before = torch.get_num_threads()
    with pytest.raises(InputError) as info:
        open_session(sc, tmp_path)
    text = str(info.value)
    assert "no parameter(s) pixels" in text
    assert "required parameter(s) image get no input" in text
    assert "model parameters: image, scale" in text
    assert "suite inputs: pixels, scale" in text
    assert info.value.location == sc.model.location
    assert torch.get_num_threads() == before


def test_lone_input_feeds_a_sequential_by_position(tmp_path: Path) -> None:
    # nn.Sequential.forward(input): the suite's name "x" cannot be wrong for one input.
    session, feeds = open_session(scenario(tmp_path, "pg_torch_models:sequential"), tmp_path)
    try:
        (out,) = session.to_numpy(session.run(session.prepare(feeds)))
        np.testing.assert_allclose(out, reference(feeds), rtol=1e-6, atol=1e-6)
    finally:
        session.close()


def test_failed_open_restores_threads(tmp_path: Path) -> None:
    before = torch.get_num_threads()
    inputs = (InputSpec("pixels", (1, 3, 8, 8)), InputSpec("scale", (1, 2)))
    sc = scenario(tmp_path, "pg_torch_models:conv", threads=1 if before != 1 else 2, inputs=inputs)
    with pytest.raises(InputError):
        open_session(sc, tmp_path)
    assert torch.get_num_threads() == before


def test_dict_outputs_and_optional_parameters(tmp_path: Path) -> None:
    inputs = (InputSpec("image", (1, 3, 8, 8)),)  # `scale` has a default: may be omitted
    session, feeds = open_session(
        scenario(tmp_path, "pg_torch_models:conv", inputs=inputs), tmp_path
    )
    try:
        outputs = session.to_numpy(session.run(session.prepare(feeds)))
        assert [o.shape for o in outputs] == [(1, 2), (1, 4)]  # dict order: logits, features
    finally:
        session.close()


def test_to_numpy_flattens_containers_and_model_outputs(tmp_path: Path) -> None:
    session, _ = open_session(scenario(tmp_path), tmp_path)
    try:
        a = torch.ones(2, dtype=torch.float16)
        b = torch.arange(3)
        c = torch.zeros(1, dtype=torch.bfloat16)

        class FakeOutput:
            def to_tuple(self) -> tuple[Any, ...]:
                return (a, None, b)

        flat = session.to_numpy((a, [b, {"c": c}], None))
        assert [x.dtype for x in flat] == [np.float32, np.int64, np.float32]
        assert [x.shape for x in flat] == [(2,), (3,), (1,)]
        assert [x.shape for x in session.to_numpy(FakeOutput())] == [(2,), (3,)]
        from transformers.modeling_outputs import BaseModelOutput

        hf = BaseModelOutput(last_hidden_state=torch.ones(1, 2, 3), hidden_states=None)
        (hidden,) = session.to_numpy(hf)
        assert hidden.shape == (1, 2, 3) and hidden.dtype == np.float32
    finally:
        session.close()


def test_load_workers_on_cuda_each_run_on_their_own_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fake of torch's CUDA stream surface: the session itself runs on the CPU."""
    entered: list[int] = []
    synced: list[int] = []

    class FakeStream:
        made = 0

        def __init__(self, device: Any = None) -> None:
            FakeStream.made += 1
            self.number = FakeStream.made

        def synchronize(self) -> None:
            synced.append(self.number)

    class FakeStreamContext:
        def __init__(self, stream: FakeStream) -> None:
            self.stream = stream

        def __enter__(self) -> None:
            entered.append(self.stream.number)

        def __exit__(self, *exc: object) -> None:
            return None

    session, feeds = open_session(scenario(tmp_path), tmp_path)
    try:
        plain_calls, plain_sync = session.worker_calls({1: session.prepare(feeds)})
        assert plain_sync is None  # on the CPU: no stream, no sync
        plain_calls[1]()
        monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
        monkeypatch.setattr(torch.cuda, "stream", FakeStreamContext)
        prepared = {1: session.prepare(feeds), 2: session.prepare(feeds)}  # CPU tensors
        monkeypatch.setattr(session, "device", torch.device("cuda", 0))
        first, sync_first = session.worker_calls(prepared)
        second, sync_second = session.worker_calls(prepared)
        first[2]()
        second[1]()
        assert sync_first is not None and sync_second is not None
        sync_second()
        # Two workers, two streams; every call ran inside its worker's stream, and a
        # worker synchronises its own stream only.
        assert entered == [1, 2] and synced == [2]
    finally:
        session.device = torch.device("cpu")  # close() would empty a CUDA cache
        session.close()


# --- profiling ----------------------------------------------------------------------------
def test_a_failing_request_under_the_profiler_leaves_the_session_as_it_was(
    tmp_path: Path,
) -> None:
    from perfguard.measure.profiling import profile_session

    sc = scenario(tmp_path)
    session, feeds = open_session(sc, tmp_path)
    prepared = session.prepare(feeds)
    calls = []

    def broken(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("the model broke under the profiler")
        return module(*args, **kwargs)

    module = session._module
    try:
        session._call = broken  # a compiled-looking call: no module hooks either way
        with pytest.raises(RuntimeError, match="broke under the profiler"):
            profile_session(sc, session, prepared, requests=3)
        assert not torch.autograd.profiler._is_profiler_enabled
        session._call = module
        with pytest.raises(RuntimeError, match="broke"):  # now with hooks, failing in fc2
            hooked = module.fc2.register_forward_hook(lambda *_: 1 / 0)
            try:
                profile_session(sc, session, prepared, requests=3)
            except ZeroDivisionError as exc:
                raise RuntimeError("broke") from exc
            finally:
                hooked.remove()
        assert not torch.autograd.profiler._is_profiler_enabled
        assert all(not m._forward_hooks and not m._forward_pre_hooks for m in module.modules())
        np.testing.assert_allclose(
            session.to_numpy(session.run(prepared))[0], reference(feeds), rtol=1e-6
        )
        profile = profile_session(sc, session, prepared, requests=2)
        assert {n.name for n in profile.nodes} == {"(model)", "fc1", "fc2"}
    finally:
        session.close()
