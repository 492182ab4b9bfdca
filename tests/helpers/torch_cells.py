"""A torch cell on a tiny model whose output is known, for the torch backend's tests (CPU
and CUDA)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from perfguard.backends.torch_backend import TorchBackend, TorchSession
from perfguard.core.errors import Location
from perfguard.core.scenario import InputSpec, ModelSpec, Scenario
from perfguard.models.inputs import make_inputs

MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 32)
            self.fc2 = nn.Linear(32, 4)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))


    class Conv(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.head = nn.Linear(4, 2)

        def forward(self, image, scale=None):
            features = torch.relu(self.conv(image)).mean(dim=(2, 3))
            out = self.head(features)
            return {"logits": out if scale is None else out * scale, "features": features}


    class Echo(nn.Module):
        def forward(self, x):
            return x


    def mlp():
        torch.manual_seed(0)
        return MLP()


    def conv():
        torch.manual_seed(0)
        return Conv()


    def echo():
        return Echo()


    def sequential():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    """
)


MLP_INPUTS = (InputSpec("x", (2, 8), "float32", seed=1),)


LOCATION = Location(Path("suite.yaml"), 5)


def scenario(tmp_path: Path, factory: str = "pg_torch_models:mlp", **fields: Any) -> Scenario:
    (tmp_path / "pg_torch_models.py").write_text(MODELS)
    model = ModelSpec(
        name="m",
        location=Location(tmp_path / "suite.yaml", 3),
        base_dir=tmp_path,
        factory=factory,
        inputs=fields.pop("inputs", MLP_INPUTS),
    )
    return Scenario(
        suite=tmp_path / "suite.yaml",
        name="s",
        cell_id="",
        model=model,
        location=LOCATION,
        backend="torch",
        **fields,
    )


def open_session(sc: Scenario, tmp_path: Path) -> tuple[TorchSession, dict[str, np.ndarray]]:
    feeds = make_inputs(sc.model)
    return TorchBackend().open(sc, feeds, tmp_path / "cache"), feeds


def reference(feeds: dict[str, np.ndarray]) -> np.ndarray:
    import torch  # the tests that use it skip without torch

    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(8, 32), torch.nn.Linear(32, 4)
    with torch.no_grad():
        x = torch.from_numpy(feeds["x"])
        result: np.ndarray = fc2(torch.relu(fc1(x))).numpy()
    return result
