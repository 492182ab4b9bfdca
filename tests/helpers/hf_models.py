"""Small Hugging Face ``transformers`` models built from configs with seeded random
weights (nothing downloaded): a factory module's source, written into a test's
project, and the same module imported here."""

from __future__ import annotations

import contextlib
import importlib.util
import textwrap
import types
from pathlib import Path

import pytest

HF_FACTORIES = textwrap.dedent(
    """
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel
    from transformers import ViTConfig, ViTModel


    def bert(layers=2):
        torch.manual_seed(0)
        config = BertConfig(
            num_hidden_layers=layers, hidden_size=64, num_attention_heads=2,
            intermediate_size=128, vocab_size=500, max_position_embeddings=512,
        )
        return BertModel(config).eval()


    def gpt2():
        torch.manual_seed(0)
        config = GPT2Config(
            n_layer=2, n_embd=64, n_head=2, vocab_size=300, n_positions=64,
            bos_token_id=0, eos_token_id=0,
        )
        return GPT2LMHeadModel(config).eval()


    def vit():
        torch.manual_seed(0)
        config = ViTConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
            intermediate_size=128, image_size=32, patch_size=8, num_channels=3,
        )
        return ViTModel(config).eval()


    class Generator(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = gpt2()

        def forward(self, input_ids, attention_mask):
            return self.lm.generate(
                input_ids=input_ids, attention_mask=attention_mask,
                max_new_tokens=2, do_sample=False, pad_token_id=0,
            )


    def generator():
        return Generator().eval()


    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert()

        def forward(self, **inputs):
            return self.bert(**inputs).last_hidden_state


    def encoder():
        return Encoder().eval()
    """
)


def preload_transformers() -> None:
    """Import the classes :data:`HF_FACTORIES` uses, once, up front: ``transformers``
    imports them lazily, and pytester's restoring of ``sys.modules`` after a test
    leaves its lazy module unable to import them again."""
    with contextlib.suppress(ImportError):
        import transformers

        for name in ("BertModel", "GPT2LMHeadModel", "ViTModel", "GenerationMixin"):
            getattr(transformers, name)


def hf_factories(folder: Path) -> types.ModuleType:
    """:data:`HF_FACTORIES` written to ``folder/hf_factories.py`` and imported from there
    (a file: ``inspect`` reads its source); skips the test without ``transformers``."""
    pytest.importorskip("transformers")
    path = folder / "hf_factories.py"
    path.write_text(HF_FACTORIES, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("hf_factories", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
