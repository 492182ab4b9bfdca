"""A fake machine for waiting for quiet: other processes' CPU share from a script."""

from __future__ import annotations

from collections.abc import Iterable


class FakeMachine:
    """Other processes' share per window, from a script; the last value repeats."""

    def __init__(self, shares: Iterable[float | None]) -> None:
        self.shares = list(shares)
        self.windows: list[float] = []

    def __call__(self, seconds: float) -> float | None:
        self.windows.append(seconds)
        index = min(len(self.windows) - 1, len(self.shares) - 1)
        return self.shares[index]
