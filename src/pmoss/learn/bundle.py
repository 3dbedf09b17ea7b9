"""A trained model as one self-contained file: weights + config + normalisation stats + provenance.

Inference needs nothing else (no training data on disk). The same file is what the registry
stores as the model version's artifact.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pmoss.contracts.errors import ContractError
from pmoss.data.tokens import Stats
from pmoss.learn.model import DecisionTransformer, DTConfig

BUNDLE_FILE = "model.pt"


@dataclass
class Bundle:
    config: DTConfig
    stats: Stats
    state_dict: dict[str, torch.Tensor]
    info: dict[str, Any] = field(default_factory=dict)  # algo, dataset hash, git commit, metrics

    def model(self) -> DecisionTransformer:
        m = DecisionTransformer(self.config)
        m.load_state_dict(self.state_dict)
        return m.eval()


def untrained_like(bundle: Bundle, seed: int = 0) -> Bundle:
    """The same network, normalisation and inference settings with freshly initialised weights: the
    control that shows what the inference masks alone do (anything a trained model adds is learned)."""
    torch.manual_seed(seed)
    info = {**bundle.info, "control": "untrained (mask-only)"}
    return Bundle(bundle.config, bundle.stats, DecisionTransformer(bundle.config).state_dict(), info)


def save_bundle(bundle: Bundle, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(
        {"config": dataclasses.asdict(bundle.config), "stats": dataclasses.asdict(bundle.stats),
         "state_dict": bundle.state_dict, "info": bundle.info},
        tmp,
    )  # fmt: skip
    tmp.replace(path)


def load_bundle(path: Path) -> Bundle:
    path = Path(path)
    if path.is_dir():
        path = path / BUNDLE_FILE
    if not path.is_file():
        raise ContractError(f"{path}: no model bundle here")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
        return Bundle(DTConfig(**raw["config"]), Stats(**raw["stats"]), raw["state_dict"], raw.get("info", {}))
    except (RuntimeError, KeyError, TypeError) as e:
        raise ContractError(f"{path}: not a P-MOSS model bundle ({e})") from e
