"""The child process that runs ONNX Runtime GenAI's model builder for
:mod:`perfguard.backends.ort_genai_build` (why a child: see there).

``python -m perfguard.backends.ort_genai_child '<request JSON>'`` builds one model:
``checkpoint`` (a ``save_pretrained`` folder), ``out``, ``cache`` (the builder's
download cache, unused for a local checkpoint), ``precision``, ``provider`` and the
builder's ``options``. The builder's own progress goes to stderr; an error is a
traceback on stderr and a non-zero exit, which the parent turns into its message.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

__all__ = ["main"]


def _stand_in_tokenizer(checkpoint: Path) -> None:
    """A word-level tokenizer of the config's vocabulary, when the checkpoint has none:
    the builder loads one unconditionally; ONNX Runtime GenAI's model never reads it."""
    if any((checkpoint / n).is_file() for n in ("tokenizer.json", "tokenizer.model")):
        return
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    config = json.loads((checkpoint / "config.json").read_text())
    vocab = int(config["vocab_size"])
    words = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=words, bos_token="t1", eos_token="t2", unk_token="t0"
    ).save_pretrained(str(checkpoint))


def main(argv: list[str]) -> int:
    """Build one model: ``argv[0]`` is the JSON request ``_build`` writes."""
    import logging

    request = json.loads(argv[0])
    checkpoint = Path(request["checkpoint"])
    logging.disable(logging.INFO)  # the quantizer logs every MatMul it rewrites
    _stand_in_tokenizer(checkpoint)
    from onnxruntime_genai.models.builder import create_model, parse_extra_options

    extra = [f"{k}={v}" for k, v in request["options"].items()]
    args = (
        None,  # no hub name: the checkpoint folder is the input
        str(checkpoint),
        request["out"],
        request["precision"],
        request["provider"],
        request["cache"],
    )
    with contextlib.redirect_stdout(sys.stderr):  # the builder prints its progress
        options = parse_extra_options(*args, extra or None)
        create_model(*args, **options)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
