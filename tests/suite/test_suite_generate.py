"""perfguard.suite.sections.generate: generative scenarios in a suite file, their cells
(one per prompt length), and the refusals with file:line, found, expected and fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from perfguard.core.errors import SuiteError
from perfguard.core.scenario import GenerateSpec, GoodputSpec, Scenario
from perfguard.suite.loader import load_suite

HEAD = """\
models:
  lm:
    factory: pkg.mod:build
  enc:
    factory: pkg.mod:build
    inputs:
      x: {shape: [1, 4]}
scenarios:
"""


def cells(tmp_path: Path, body: str, head: str = HEAD) -> list[Scenario]:
    path = tmp_path / "s.yaml"
    path.write_text(head + textwrap.dedent(body), encoding="utf-8")
    return list(load_suite(path).scenarios)


def refusal(tmp_path: Path, body: str, head: str = HEAD) -> str:
    with pytest.raises(SuiteError) as info:
        cells(tmp_path, body, head)
    return str(info.value)


def test_one_set_of_cells_per_prompt_length_after_the_matrix(tmp_path: Path) -> None:
    got = cells(
        tmp_path,
        """\
        - name: gen
          model: lm
          matrix: {precision: [fp32, int8]}
          generate: {prompt_tokens: [48, 96], new_tokens: 32, batch: 2, prompts: 4, seed: 7}
        """,
    )
    assert [c.item_name for c in got] == [
        "gen[fp32-p48]",
        "gen[fp32-p96]",
        "gen[int8-p48]",
        "gen[int8-p96]",
    ]
    assert got[1].matrix_values == (("precision", "fp32"), ("prompt", "p96"))
    assert got[1].generate == GenerateSpec(
        prompt_tokens=96, new_tokens=32, batch=2, prompts=4, seed=7
    )


def test_one_length_and_defaults(tmp_path: Path) -> None:
    (cell,) = cells(
        tmp_path, "- {name: gen, model: lm, generate: {prompt_tokens: 16, new_tokens: 4}}\n"
    )
    assert cell.item_name == "gen[p16]"
    assert cell.generate == GenerateSpec(prompt_tokens=16, new_tokens=4)
    assert cell.generate.batch == 1 and cell.generate.prompts == 8 and cell.generate.vocab is None


def test_a_prompt_file_is_relative_to_the_suite(tmp_path: Path) -> None:
    (cell,) = cells(
        tmp_path,
        """\
        - name: gen
          model: lm
          generate: {prompt_tokens: 8, new_tokens: 4, file: data/p.jsonl, tokenizer: tok:make}
        """,
    )
    assert cell.generate is not None
    assert cell.generate.file == tmp_path / "data" / "p.jsonl"
    assert cell.generate.tokenizer == "tok:make" and cell.generate.source == "file"


def test_token_gates_are_kept_on_generative_cells(tmp_path: Path) -> None:
    (cell,) = cells(
        tmp_path,
        """\
        - name: gen
          model: lm
          generate: {prompt_tokens: 8, new_tokens: 4}
          gate: {ttft_p95: "+10%", itl_p95: "+0.5ms", tokens_per_s: "-5%"}
        """,
    )
    gates = {g.metric: g for g in cell.gates}
    assert gates["ttft_p95"].limit == pytest.approx(0.10)
    assert not gates["itl_p95"].relative and gates["itl_p95"].limit == pytest.approx(0.5)
    assert not gates["tokens_per_s"].higher_is_worse


def test_a_token_gate_on_a_scenario_that_generates_nothing_is_refused(tmp_path: Path) -> None:
    message = refusal(
        tmp_path,
        """\
        - name: enc
          model: enc
          gate: {itl_p95: "+5%"}
        """,
    )
    assert "s.yaml:11" in message and "gates `itl_p95`, a token figure" in message
    assert "add `generate:`" in message


def test_defaults_token_gates_reach_only_generative_scenarios(tmp_path: Path) -> None:
    head = 'defaults:\n  gate: {ttft_p95: "+7%"}\n' + HEAD
    enc, gen = cells(
        tmp_path,
        """\
        - {name: enc, model: enc}
        - {name: gen, model: lm, generate: {prompt_tokens: 8, new_tokens: 4}}
        """,
        head,
    )
    assert "ttft_p95" not in {g.metric for g in enc.gates}
    assert "ttft_p95" in {g.metric for g in gen.gates}


@pytest.mark.parametrize(
    ("extra", "key"),
    [("profile: true", "profile")],
)
def test_what_generative_cells_do_not_measure_yet_is_refused(
    tmp_path: Path, extra: str, key: str
) -> None:
    message = refusal(
        tmp_path,
        f"""\
        - name: gen
          model: lm
          generate: {{prompt_tokens: 8, new_tokens: 4}}
          {extra}
        """,
    )
    assert f"has `generate` and `{key}`" in message and "is not measured yet" in message
    assert "s.yaml:12" in message and f"remove `{key}`" in message


def test_a_model_without_inputs_needs_generate(tmp_path: Path) -> None:
    message = refusal(tmp_path, "- {name: plain, model: lm}\n")
    assert "model `lm`, which declares no inputs, and generates nothing" in message
    assert "add `generate:`" in message


def test_generation_on_tensorrt_fails_only_that_cell(tmp_path: Path) -> None:
    torch, ort, trt = cells(
        tmp_path,
        """\
        - name: gen
          model: lm
          device: cuda
          matrix: {backend: [torch, onnxruntime, tensorrt]}
          generate: {prompt_tokens: 8, new_tokens: 4}
        """,
    )
    assert torch.error is None and ort.error is None  # ONNX Runtime GenAI
    assert trt.error is not None and "generates on `tensorrt`" in trt.error
    assert "'torch' or 'onnxruntime'" in trt.error


def test_accuracy_keys_that_do_not_fit_the_cell_fail_it(tmp_path: Path) -> None:
    gen, plain, probabilities = cells(
        tmp_path,
        """\
        - name: gen
          model: lm
          generate: {prompt_tokens: 8, new_tokens: 4}
          accuracy: {inputs: {count: 4}, outputs: [0], gate: {token_match_min: 0.9}}
        - name: plain
          model: enc
          accuracy: {text: {file: t.jsonl, tokenizer: "a:b"}, gate: {perplexity_rise_max: 0.1}}
        - name: probs
          model: lm
          generate: {prompt_tokens: 8, new_tokens: 4}
          accuracy: {kl: {on: probabilities}}
        """,
    )
    assert gen.error is not None and "its `accuracy:` sets `inputs`, `outputs`" in gen.error
    assert "remove `inputs`, `outputs`" in gen.error
    assert plain.error is not None and "generates nothing" in plain.error
    assert "`text`, `perplexity_rise_max`" in plain.error
    assert probabilities.error is not None and "`kl: {on: logits}`" in probabilities.error
    good = cells(
        tmp_path,
        """\
        - name: gen
          model: lm
          generate: {prompt_tokens: 8, new_tokens: 4}
          accuracy:
            text: {file: t.jsonl, tokenizer: "a:b", tokens: 16}
            gate: {token_match_min: 0.9, kl_max: 0.01, perplexity_rise_max: 0.05}
        """,
    )[0]
    assert good.error is None and good.accuracy is not None
    assert good.accuracy.text is not None and good.accuracy.text.tokens == 16
    assert good.accuracy.text.file == tmp_path / "t.jsonl"
    assert good.accuracy.gates.token_match_min == 0.9


def test_int4_and_genai_precisions_fail_only_their_cells(tmp_path: Path) -> None:
    found = {
        sc.cell_id: sc
        for sc in cells(
            tmp_path,
            """\
            - name: gen
              model: lm
              matrix:
                backend: [torch, onnxruntime]
                precision: [fp32, fp16, int8, int4]
              generate: {prompt_tokens: 8, new_tokens: 4}
            - name: preset
              model: lm
              backend: onnxruntime
              precision: int4
              quantization: {mode: static}
              generate: {prompt_tokens: 8, new_tokens: 4}
            """,
        )
    }
    broken = {cell for cell, sc in found.items() if sc.error is not None}
    assert broken == {"torch-int4-p8", "onnxruntime-fp16-p8", "p8"}
    assert "int4 on generative onnxruntime cells" in (found["torch-int4-p8"].error or "")
    assert "fp16 is a GPU graph" in (found["onnxruntime-fp16-p8"].error or "")
    assert "the model builder quantizes the weights itself" in (found["p8"].error or "")
    for cell in ("onnxruntime-int8-p8", "onnxruntime-int4-p8", "torch-int8-p8"):
        assert found[cell].error is None, cell


@pytest.mark.parametrize(
    ("generate", "found"),
    [
        ("{prompt_tokens: [8, 8], new_tokens: 4}", "lists 8 twice"),
        ("{prompt_tokens: [], new_tokens: 4}", "empty"),
        ("{prompt_tokens: 0, new_tokens: 4}", "`prompt_tokens`"),
        ("{prompt_tokens: 8}", "has no `new_tokens`"),
        ("{prompt_tokens: 8, new_tokens: 4, vocab: 1}", "`vocab`"),
        ("{prompt_tokens: 8, new_tokens: 2000000}", "`new_tokens`"),
        ("{prompt_tokens: 8, new_tokens: 4, temperature: 0.7}", "temperature"),
    ],
)
def test_bad_generate_values_are_refused_at_their_line(
    tmp_path: Path, generate: str, found: str
) -> None:
    message = refusal(tmp_path, f"- {{name: gen, model: lm, generate: {generate}}}\n")
    assert "s.yaml:9" in message and found in message


def test_a_prompts_file_without_a_tokenizer_fails_the_cell_of_a_model_run_here(
    tmp_path: Path,
) -> None:
    (got,) = cells(
        tmp_path,
        "- {name: gen, model: lm, generate: {prompt_tokens: 8, new_tokens: 4, file: p.jsonl}}\n",
    )
    assert got.error is not None
    assert "without a `tokenizer`" in got.error and "add `tokenizer:`" in got.error


def test_a_generative_scenario_under_load_has_a_cell_per_prompt_length_and_level(
    tmp_path: Path,
) -> None:
    got = cells(
        tmp_path,
        """\
        - name: gen
          model: lm
          generate: {prompt_tokens: [8, 16], new_tokens: 4}
          load: {concurrency: [1, 4], goodput: {ttft_ms: 200, tpot_ms: 20.5}}
          gate: {goodput: "-10%", ttft_p95: "+5%"}
        """,
    )
    assert [c.item_name for c in got] == ["gen[p8-c1]", "gen[p8-c4]", "gen[p16-c1]", "gen[p16-c4]"]
    assert got[1].matrix_values == (("prompt", "p8"), ("load", "c4"))
    load = got[1].load
    assert load is not None and load.goodput == GoodputSpec(ttft_ms=200.0, tpot_ms=20.5)
    assert {g.metric for g in got[1].gates} >= {"goodput", "ttft_p95"}


@pytest.mark.parametrize(
    ("load", "key", "fix"),
    [
        ("{concurrency: 2, batching: {max_batch: 4, max_wait_ms: 1}}", "batching", "remove"),
        ("{rate: 5, sessions: per_worker}", "sessions", "remove `sessions`"),
    ],
)
def test_what_a_generative_cell_under_load_does_not_take_yet_is_refused(
    tmp_path: Path, load: str, key: str, fix: str
) -> None:
    message = refusal(
        tmp_path,
        f"""\
        - name: gen
          model: lm
          generate: {{prompt_tokens: 8, new_tokens: 4}}
          load: {load}
        """,
    )
    assert f"`{key}` in `load` of scenario `gen`, a generative scenario" in message, message
    assert "is not measured yet" in message and fix in message
    assert "s.yaml:12" in message


def test_goodput_limits_need_a_generative_scenario_and_a_goodput_gate_needs_limits(
    tmp_path: Path,
) -> None:
    message = refusal(
        tmp_path,
        """\
        - name: enc
          model: enc
          load:
            concurrency: 2
            goodput: {ttft_ms: 10, tpot_ms: 1}
        """,
    )
    assert "`goodput` in `load` of scenario `enc`, which generates nothing" in message
    assert "s.yaml:13" in message
    message = refusal(
        tmp_path,
        """\
        - name: gen
          model: lm
          generate: {prompt_tokens: 8, new_tokens: 4}
          load: {concurrency: 2}
          gate: {goodput: "-5%"}
        """,
    )
    assert "gates `goodput` but sets no goodput limits" in message
    assert "ttft_ms: 200, tpot_ms: 20" in message
    message = refusal(
        tmp_path,
        """\
        - name: enc
          model: enc
          gate: {goodput: "-5%"}
        """,
    )
    assert "a token figure, but generates nothing" in message
    message = refusal(
        tmp_path,
        """\
        - name: gen
          model: lm
          generate: {prompt_tokens: 8, new_tokens: 4}
          load: {concurrency: 2, goodput: {ttft_ms: 10}}
        """,
    )
    assert "tpot_ms" in message and "s.yaml:12" in message


def test_a_goodput_search_needs_a_generative_cell_and_its_limits(tmp_path: Path) -> None:
    (*levels, search) = cells(
        tmp_path,
        """\
        - name: gen
          model: lm
          generate: {prompt_tokens: 8, new_tokens: 4}
          load:
            concurrency: [1, 2]
            goodput: {ttft_ms: 200, tpot_ms: 20}
            slo: {goodput_share: 0.9, max: 8}
        """,
    )
    assert [c.item_name for c in (*levels, search)] == ["gen[p8-c1]", "gen[p8-c2]", "gen[p8-slo]"]
    slo = search.load.slo if search.load is not None else None
    assert slo is not None and slo.goodput_share == 0.9 and slo.target_ms is None
    assert (slo.start, slo.max_level) == (1.0, 8.0)
    message = refusal(
        tmp_path,
        """\
        - name: gen
          model: lm
          generate: {prompt_tokens: 8, new_tokens: 4}
          load:
            concurrency: 1
            slo: {goodput_share: 0.9}
        """,
    )
    assert "`goodput_share` of `slo` in `load` of scenario `gen` needs goodput limits" in message
    assert "s.yaml:14" in message and "ttft_ms: 200, tpot_ms: 20" in message
    message = refusal(
        tmp_path,
        """\
        - name: enc
          model: enc
          load: {concurrency: 1, slo: {goodput_share: 0.5}}
        """,
    )
    assert "which generates nothing" in message and "`p95_ms`" in message
    message = refusal(
        tmp_path,
        """\
        - name: gen
          model: lm
          generate: {prompt_tokens: 8, new_tokens: 4}
          load:
            concurrency: 1
            goodput: {ttft_ms: 200, tpot_ms: 20}
            slo: {goodput_share: 0.9, p95_ms: 50}
        """,
    )
    assert "goodput_share" in message and "p95_ms" in message
