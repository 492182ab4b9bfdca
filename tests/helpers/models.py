"""Model sources written into a test's suites folder: tiny real models and a spinning one."""

from __future__ import annotations

import textwrap

TINY_MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    def mlp(width=16, seed=0):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4)).eval()


    def first_mean(outputs, labels):
        return float(outputs[0].mean())


    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 4)

        def forward(self, x, scale):
            return self.proj(x) * scale


    def two_inputs():
        torch.manual_seed(0)
        return TwoInputs().eval()


    class Nan(nn.Module):
        def forward(self, x):
            return x * float("nan")


    def nan_model():
        return Nan()


    # An MLP whose logits are ~1e-9, like a random-weight mobilenet_v3_small's.
    def tiny_logits(seed=0):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 10)).eval()
        with torch.no_grad():
            model[2].weight.mul_(1e-8)
            model[2].bias.zero_()
        return model


    def not_a_module():
        return 42


    def explodes():
        raise RuntimeError("weights file is corrupt")
    """
)


# A torch model that busy-waits `us` microseconds per call: a planted, exact slowdown
# for the gate's end-to-end tests.
SPIN_MODEL = """
import time
import torch


class Spin(torch.nn.Module):
    def __init__(self, us):
        super().__init__()
        self.us = us
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        end = time.perf_counter_ns() + self.us * 1000
        while time.perf_counter_ns() < end:
            pass
        return self.lin(x)


def spin(us=200):
    torch.manual_seed(0)
    return Spin(us).eval()
"""


# A torch model that sleeps `ms` per call, whatever the batch (time.sleep never returns
# early): a planted, large slowdown that costs no CPU (and what batching gains on a GPU),
# for the A/B, bisect, load and report end-to-end tests.
SLEEPY_MODEL = textwrap.dedent(
    """
    import time

    import torch
    from torch import nn


    class Sleepy(nn.Module):
        def __init__(self, ms):
            super().__init__()
            self.ms = ms
            self.lin = nn.Linear(8, 4)

        def forward(self, x):
            time.sleep(self.ms / 1000)
            return self.lin(x)


    def sleepy(ms=2.0):
        torch.manual_seed(0)
        return Sleepy(ms).eval()
    """
)
