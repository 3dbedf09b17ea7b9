"""A trained model as one self-contained file: weights + config + normalisation stats + provenance.

Inference needs nothing else (no training data on disk). The same file is what the registry
stores as the model version's artifact, so it carries its own checksum (key `sha256`, a digest of
everything else in it; docs/contracts.md "Checksums"), verified on every load.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
import traceback
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmoss.contracts.errors import ContractError, brief
from pmoss.data.tokens import Stats

if TYPE_CHECKING:  # torch is imported where a bundle is read or written: `pmoss --help` must not pay for it
    import torch

    from pmoss.learn.model import DecisionTransformer, DTConfig

BUNDLE_FILE = "model.pt"
# What a bundle's `info["inference"]` may set of its rollouts: the return target and the inference-only
# masks (docs/model.md "Inference masks"). The mask-only control and the proposals a critic trains on
# roll out under these and no other setting.
ROLLOUT_SETTINGS = ("target_factor", "cap", "load_cap", "machine_wide")


@dataclass
class Bundle:
    config: DTConfig
    stats: Stats
    state_dict: dict[str, torch.Tensor]
    info: dict[str, Any] = field(default_factory=dict)  # algo, dataset hash, git commit, metrics
    critic: Bundle | None = None  # a return model that ranks this policy's candidates (learn/critic.py), in the same file
    # a critic's ensemble: critics trained on the same data with other seeds; the prediction is the mean (critic.predict_returns)
    members: list[Bundle] = field(default_factory=list)

    def model(self) -> DecisionTransformer:
        from pmoss.learn.model import DecisionTransformer

        m = DecisionTransformer(self.config)
        m.load_state_dict(self.state_dict)
        return m.eval()


def ensemble_of(critics: list[Bundle]) -> Bundle:
    """One critic bundle predicting the mean of `critics` (each one critic or an ensemble itself):
    the first as head, every other critic a member, flat (critic.predict_returns reads one level)."""
    flat = [b for c in critics for b in (c, *c.members)]
    return dataclasses.replace(flat[0], members=[dataclasses.replace(b, members=[]) for b in flat[1:]])


def untrained_like(bundle: Bundle, seed: int = 0) -> Bundle:
    """The same network, normalisation and inference settings with freshly initialised weights: the
    control that shows what the inference masks alone do (anything a trained model adds is learned)."""
    import torch

    from pmoss.learn.model import DecisionTransformer

    torch.manual_seed(seed)
    masks = {k: v for k, v in bundle.info.get("inference", {}).items() if k in ROLLOUT_SETTINGS}  # greedy, no critic
    info = {**bundle.info, "inference": masks, "control": "untrained (mask-only)"}
    return Bundle(bundle.config, bundle.stats, DecisionTransformer(bundle.config).state_dict(), info)


def save_bundle(bundle: Bundle, path: Path) -> None:
    """Write `path` via a temp file and a rename. A full disk (torch.save raises RuntimeError, not
    OSError) or a read-only one is one line naming `path`; the temp file is removed, an older
    bundle at `path` is left as it was."""
    import torch

    from pmoss.contracts.io import write_failure, writing

    path = Path(path)
    tmp = path.with_suffix(".tmp")
    payload = _payload(bundle)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        torch.save({**payload, "sha256": bundle_digest(payload)}, tmp)
        tmp.replace(path)
    except (OSError, RuntimeError) as e:
        error = write_failure(e, path)  # before the cleanup: while the partial file fills the disk, a full disk shows
        _release(e)  # torch's writer, held by the failed frames, keeps the file open: close it
        tmp.unlink(missing_ok=True)
        if error is None:
            raise
        raise error from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _release(e: BaseException | None) -> None:
    """Drop the local variables of the frames `e` (and the exceptions it chains) went through."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__


def _payload(bundle: Bundle) -> dict[str, Any]:
    payload = {"config": dataclasses.asdict(bundle.config), "stats": dataclasses.asdict(bundle.stats), "state_dict": bundle.state_dict, "info": bundle.info}
    if bundle.critic is not None:
        payload["critic"] = _payload(bundle.critic)
    if bundle.members:  # absent when empty: a single critic's file is what it was before ensembles
        payload["members"] = [_payload(m) for m in bundle.members]
    return payload


def _plain(payload: dict[str, Any]) -> dict[str, Any]:
    """A payload without tensors (nor checksum), nested parts included."""
    plain = {k: v for k, v in payload.items() if k not in ("state_dict", "sha256", "critic", "members")}
    if "critic" in payload:
        plain["critic"] = _plain(payload["critic"])
    if "members" in payload:
        plain["members"] = [_plain(m) for m in payload["members"]]
    return plain


def _tensors(payload: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every tensor of a payload by name: the policy's, then an attached critic's as critic.*, its
    ensemble's as critic.members.<i>.*."""
    out = {f"{prefix}{k}": v for k, v in payload["state_dict"].items()}
    if "critic" in payload:
        out.update(_tensors(payload["critic"], f"{prefix}critic."))
    for i, m in enumerate(payload.get("members", [])):
        out.update(_tensors(m, f"{prefix}members.{i}."))
    return out


def _bundle(raw: dict[str, Any]) -> Bundle:
    from pmoss.learn.model import DTConfig

    return Bundle(DTConfig(**raw["config"]), Stats(**raw["stats"]), raw["state_dict"], raw.get("info", {}),
                  _bundle(raw["critic"]) if raw.get("critic") else None, [_bundle(m) for m in raw.get("members", [])])


def bundle_digest(payload: dict[str, Any]) -> str:
    """SHA-256 of a bundle's content: its JSON-able parts, then each tensor's name, dtype, shape and
    bytes (an attached critic's named critic.*, an ensemble's other members members.<i>.*)."""
    import torch

    h = hashlib.sha256(json.dumps(_plain(payload), sort_keys=True, default=str).encode())
    tensors = _tensors(payload)
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous().reshape(-1)
        h.update(f"\n{name}:{t.dtype}:{t.numel()}:{tuple(tensors[name].shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def load_bundle(path: Path) -> Bundle:
    import torch

    path = Path(path)
    if path.is_dir():
        path = path / BUNDLE_FILE
    if not path.is_file():
        raise ContractError(f"{path}: no model bundle here")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
        _verify(raw, path)
        return _bundle(raw)
    # a damaged zip or pickle fails in many ways (torch's weights-only unpickler also raises IndexError
    # and AssertionError on some flipped bytes): one line naming the file for all of them
    except (OSError, RuntimeError, KeyError, IndexError, AssertionError, TypeError, ValueError, AttributeError, EOFError, pickle.UnpicklingError,
            zipfile.BadZipFile) as e:  # fmt: skip
        raise ContractError(f"{path}: not a readable P-MOSS model bundle ({brief(e)})") from e


def _verify(raw: Any, path: Path) -> None:
    if not isinstance(raw, dict) or not isinstance(raw.get("state_dict"), dict):
        raise ContractError(f"{path}: not a P-MOSS model bundle (no state_dict)")
    if not isinstance(raw.get("sha256"), str):
        raise ContractError(f"{path}: no checksum (key 'sha256'); damaged, or saved by an older pmoss: retrain or re-save it")
    if raw["sha256"] != bundle_digest(raw):
        raise ContractError(f"{path}: checksum mismatch, the model file is corrupt; restore it or fetch it again")
