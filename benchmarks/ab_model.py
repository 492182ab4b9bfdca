"""The benchmark model of ``verdicts_ab.py``: the example CNN plus an injected slowdown.

After every forward pass the module busy-waits ``spin_ns`` on ``perf_counter_ns``:
real CPU work that slows down with the host, like extra model work would.
"""

from __future__ import annotations

import time
from typing import Any


def build(spin_ns: int = 0, seed: int = 0) -> Any:
    import torch

    from perfguard_examples.convnet import build as convnet

    class Spun(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = convnet(seed=seed)
            self.spin_ns = int(spin_ns)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.net(image)
            if self.spin_ns:
                end = time.perf_counter_ns() + self.spin_ns
                while time.perf_counter_ns() < end:
                    pass
            return out

    return Spun().eval()
