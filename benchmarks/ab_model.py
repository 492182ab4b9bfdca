"""The benchmark model of ``verdicts_ab.py``: the example CNN plus an injected slowdown.

After every forward pass the module busy-waits ``spin_ns`` on ``perf_counter_ns``:
real CPU work that slows down with the host, like extra model work would. With
``spin_frac`` it busy-waits that fraction of the forward pass it just timed instead, so
"+10%" stays 10% more time whatever the machine is doing (a busy neighbour slows the
forward pass several-fold; a fixed spin would shrink to a fraction of that).
"""

from __future__ import annotations

import time
from typing import Any


def build(spin_ns: int = 0, seed: int = 0, spin_frac: float = 0.0) -> Any:
    import torch

    from perfguard_examples.convnet import build as convnet

    class Spun(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = convnet(seed=seed)
            self.spin_ns = int(spin_ns)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            start = time.perf_counter_ns()
            out: torch.Tensor = self.net(image)
            spin = self.spin_ns
            if spin_frac:
                spin += int(spin_frac * (time.perf_counter_ns() - start))
            if spin:
                end = time.perf_counter_ns() + spin
                while time.perf_counter_ns() < end:
                    pass
            return out

    return Spun().eval()
