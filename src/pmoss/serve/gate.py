"""The promotion gate: `pmoss registry promote` runs the candidate, the champion and every baseline
heuristic through the evaluation harness with the same seeds, and moves alias `champion` only when
the candidate beats the best heuristic of each cell (do no harm: also for the first promotion,
when there is no champion yet) and the current champion. It sits above both the evaluation and the
registry, which know nothing of each other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import typer

from pmoss.learn.bundle import load_bundle
from pmoss.learn.tracking import mlflow_client
from pmoss.serve.registry import (
    CANDIDATE,
    CHAMPION,
    HISTORY_TAG,
    RegistryError,
    _version,
    fetch,
)


def gate(candidate: dict[str, float], reference: dict[str, float], tolerance: float = 0.02, against: str = "the champion") -> tuple[bool, str]:
    """Accept when the candidate's geometric-mean throughput beats the reference's and no cell is
    more than `tolerance` worse. Inputs: cell -> throughput, measured by one harness run."""
    ratios = {c: candidate[c] / reference[c] for c in candidate}
    worst = min(ratios, key=ratios.__getitem__)
    geo = float(np.exp(np.mean(np.log(list(ratios.values())))))
    if ratios[worst] < 1 - tolerance:
        return False, f"cell {worst} is {100 * (1 - ratios[worst]):.1f}% worse than {against} (limit {100 * tolerance:.0f}%)"
    if geo <= 1.0:
        return False, f"geometric-mean throughput is {geo:.3f}x {against}, not higher"
    return True, f"geometric-mean throughput {geo:.3f}x {against}; worst cell {worst} at {ratios[worst]:.3f}x"


def best_heuristic(cells: dict[str, dict[str, float]], baselines: list[str]) -> tuple[dict[str, float], dict[str, str]]:
    """Per cell the throughput of the best baseline heuristic, and which one it is."""
    kinds = {c: max(baselines, key=lambda b: tp[b]) for c, tp in cells.items()}
    return {c: cells[c][k] for c, k in kinds.items()}, kinds


def decide(tp: dict[str, dict[str, float]]) -> tuple[bool, str]:
    """The gate over one harness run: the candidate must beat the best heuristic, then the champion (if any)."""
    ok, why = gate(tp["candidate"], tp["heuristic"], against="the best heuristic")
    if not ok:
        return False, f"no better than the best heuristic: {why}"
    if "champion" not in tp:
        return True, f"no champion yet; beats the best heuristic: {why}"
    ok, vs_champion = gate(tp["candidate"], tp["champion"])
    return ok, f"{vs_champion}; vs the best heuristic: {why}" if ok else vs_champion


def promote(name: str, eval_config: Path, force: bool = False, reason: str | None = None) -> tuple[bool, str]:
    """Move `champion` to the `candidate` version if the gate accepts it (or if forced, with a reason)."""
    from pmoss.contracts.io import load_model
    from pmoss.evaluate import EvalConfig, evaluate_cells

    cfg = load_model(EvalConfig, eval_config)  # the whole evaluation set is checked before the registry is asked
    mlflow = mlflow_client()
    client = mlflow.MlflowClient()
    cand = _version(client, name, CANDIDATE)
    if cand is None:
        raise RegistryError(f"{name}: no version has alias '{CANDIDATE}'; register one first")
    champ = _version(client, name, CHAMPION)
    if champ is not None and str(champ.version) == str(cand.version):
        return False, f"version {cand.version} is already the champion"
    if force and not reason:
        raise RegistryError("--force needs --reason TEXT (it is recorded on the version)")
    bundles = {"candidate": load_bundle(fetch(f"models:/{name}/{cand.version}"))}
    if champ is not None:
        bundles["champion"] = load_bundle(fetch(f"models:/{name}/{champ.version}"))
    cells = evaluate_cells(cfg, bundles, progress=False)
    tp = {k: {c: v[k] for c, v in cells.items()} for k in bundles}
    tp["heuristic"], kinds = best_heuristic(cells, cfg.baselines)
    accepted, why = decide(tp)
    if force and not accepted:
        accepted, why = True, f"forced: {reason} (gate said: {why})"
    _record(client, name, cand.version, accepted, why, tp, champ, kinds)
    if accepted:
        if champ is not None:
            history = json.loads(client.get_registered_model(name).tags.get(HISTORY_TAG, "[]")) + [str(champ.version)]
            client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(history))
        client.set_registered_model_alias(name, CHAMPION, cand.version)
    return accepted, why


def _record(client: Any, name: str, version: str, accepted: bool, why: str, tp: dict[str, dict[str, float]], champ: Any | None,
            kinds: dict[str, str]) -> None:  # fmt: skip
    client.set_model_version_tag(name, version, "promotion_decision", "accepted" if accepted else "refused")
    client.set_model_version_tag(name, version, "promotion_reason", why)
    client.set_model_version_tag(name, version, "promotion_candidate_metrics", json.dumps(tp["candidate"]))
    client.set_model_version_tag(name, version, "promotion_heuristic_metrics", json.dumps({c: {kinds[c]: v} for c, v in tp["heuristic"].items()}))
    if champ is not None:
        client.set_model_version_tag(name, version, "promotion_champion_version", str(champ.version))
        client.set_model_version_tag(name, version, "promotion_champion_metrics", json.dumps(tp["champion"]))


def promote_command(
    eval_config: Annotated[Path, typer.Option("--eval", help="Evaluation set YAML: candidate, champion and baselines run through this harness with the same seeds.")],
    name: Annotated[str, typer.Option(help="Registered model name.")] = "pmoss-dt",
    force: Annotated[bool, typer.Option(help="Promote even if the gate refuses (needs --reason).")] = False,
    reason: Annotated[Optional[str], typer.Option(help="Why the override; recorded on the version.")] = None,
) -> None:
    """Move alias `champion` to the `candidate` version if it beats the best heuristic of every cell and the current champion."""
    accepted, why = promote(name, eval_config, force, reason)
    typer.echo(f"{'promoted' if accepted else 'refused'}: {why}")
    if not accepted:
        raise typer.Exit(2)


