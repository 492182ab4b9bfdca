"""A small convolutional image classifier with seeded random weights (no download)."""

from __future__ import annotations

from typing import Any


def build(seed: int = 0, num_classes: int = 10, width: int = 32, extra_conv: int = 0) -> Any:
    """A ResNet-ish stack of named conv/BN/ReLU blocks; same weights for the same seed.

    The blocks are ``stem``, ``block1``, ``block2`` and ``head``, so an operator profile
    names them (``block2/conv``; ``/block2/conv/Conv`` once exported to ONNX).
    ``extra_conv`` plants a slowdown in one named layer: one more convolution, of that
    (odd) kernel size, at the end of ``block2`` (its ``extra`` layer; ``3`` about
    doubles the block's time, ``7`` makes the model about three times slower), the kind
    of change a profile should name as the top contributor. Its weights are drawn
    after all the others, so every other layer keeps the weights of ``extra_conv=0``.
    """
    from collections import OrderedDict

    import torch
    from torch import nn

    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:

        def block(cin: int, cout: int, stride: int) -> list[tuple[str, nn.Module]]:
            conv = nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1)
            return [("conv", conv), ("bn", nn.BatchNorm2d(cout)), ("relu", nn.ReLU())]

        stem = block(3, width, 1)
        block1 = block(width, width * 2, 2)
        block2 = block(width * 2, width * 4, 2)
        head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width * 4, num_classes)
        )
        if extra_conv > 0:
            pad = extra_conv // 2
            extra = nn.Conv2d(width * 4, width * 4, kernel_size=extra_conv, padding=pad)
            block2.append(("extra", extra))
        model = nn.Sequential(
            OrderedDict(
                [
                    ("stem", nn.Sequential(OrderedDict(stem))),
                    ("block1", nn.Sequential(OrderedDict(block1))),
                    ("block2", nn.Sequential(OrderedDict(block2))),
                    ("head", head),
                ]
            )
        )
    finally:
        # Leave the caller's global RNG as it was.
        torch.random.set_rng_state(generator_state)
    return model.eval()
