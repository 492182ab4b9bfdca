"""A small convolutional image classifier with seeded random weights (no download)."""

from __future__ import annotations

from typing import Any


def build(seed: int = 0, num_classes: int = 10, width: int = 32) -> Any:
    """A ResNet-ish stack of conv/BN/ReLU blocks; same weights for the same seed."""
    import torch
    from torch import nn

    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = nn.Sequential(
            nn.Conv2d(3, width, kernel_size=3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width * 2, kernel_size=3, stride=2, padding=1),
            nn.BatchNorm2d(width * 2),
            nn.ReLU(),
            nn.Conv2d(width * 2, width * 4, kernel_size=3, stride=2, padding=1),
            nn.BatchNorm2d(width * 4),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(width * 4, num_classes),
        )
    finally:
        # Leave the caller's global RNG as it was.
        torch.random.set_rng_state(generator_state)
    return model.eval()
