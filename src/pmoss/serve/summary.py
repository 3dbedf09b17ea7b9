"""`pmoss summary`: the one screen that ends `make demo` — the headline figures per policy, the
registered version and its alias, where the plots are, and how to browse and compare runs.
It reads only the pipeline's small outputs (eval/metrics.json, the register stage's receipt)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from pmoss.contracts.errors import ContractError
from pmoss.contracts.io import project_root

PLOTS = ("speedup.png", "schedules.png")
CONTROL_NOTE = {  # policies that are controls, not candidates: one line each under the table
    "mask-only": "mask-only: a control, not a policy: the first model's network untrained, under the same inference masks, "
                 "per cell the median over its initialisations (what the masks alone reach; a trained policy should beat it)",
}  # fmt: skip


def _read_json(path: Path, made_by: str) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ContractError(f"{path}: not found; run {made_by} first (e.g. dvc repro)") from None
    except json.JSONDecodeError as e:
        raise ContractError(f"{path}: not JSON ({e.msg} at line {e.lineno}); re-run {made_by}") from None


def _shown(path: Path) -> Path:
    """`path` relative to the working directory where it lies below it (eval/speedup.png, not /.../eval/...)."""
    try:
        return path.relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def headline_table(metrics: dict[str, Any], what: str = "") -> Any:
    from rich.table import Table

    from pmoss.evaluate import ORACLE_AT_BEST, policy_figures

    n = metrics.get("n_cells", "?")
    caption = f"the oracle: at or above the best baseline in {metrics[ORACLE_AT_BEST]} of {n} cells" if ORACLE_AT_BEST in metrics else None
    table = Table(title=f"learned policies vs the baselines{what}, geo-mean over {n} cells (source={metrics.get('source', '?')})", caption=caption)
    for col in ("policy", "vs best baseline", "vs best one-core", "vs oracle", "cells >= best", "own picks"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for policy, g in policy_figures(metrics).items():
        cells = [f"{g[k]:.3f}" if k in g else "-" for k in ("vs_best", "vs_one_core", "vs_oracle")]
        own = f"{g['own_picks']} of {metrics.get('n_cells', '?')}" if "own_picks" in g else "-"
        table.add_row(policy, *cells, f"{g.get('cells_ge_best', '-')} of {metrics.get('n_cells', '?')}", own)
    return table


def summary_command(
    eval_dir: Annotated[Path | None, typer.Option("--eval", help="The evaluate stage's output directory (default: the project's eval/, "
                                                                  "the project being the directory with dvc.yaml from here upwards).")] = None,
    tracking_uri: Annotated[str | None, typer.Option(envvar="MLFLOW_TRACKING_URI", help="Where the MLflow runs and registry live "
                                                                                       "(default: the project's mlflow/mlflow.db).")] = None,
) -> None:
    """One screen after the pipeline: headline metrics, the registered candidate, plots, next commands."""
    from rich.console import Console

    from pmoss.learn.tracking import default_tracking_uri

    if eval_dir is None:
        eval_dir = _shown(project_root() / "eval")
    metrics = _read_json(eval_dir / "metrics.json", "the evaluate stage")
    receipt = _read_json(eval_dir / "registered.json", "the register stage")
    console = Console()
    say = lambda text: console.print(text, highlight=False, soft_wrap=True)  # noqa: E731
    console.print(headline_table(metrics))
    for policy, note in CONTROL_NOTE.items():
        if policy in metrics:
            say(note)
    unseen = eval_dir / "unseen" / "metrics.json"  # the evaluate-unseen stage: a machine in no training pool
    if unseen.exists():
        console.print(headline_table(_read_json(unseen, "the evaluate-unseen stage").get("unseen", {}), " on unseen machines (in no training pool)"))
    others = ", ".join(f"v{v} {p}" for p, v in receipt.get("versions", {}).items() if p != receipt.get("policy"))
    say(f"registered: {receipt['name']} version {receipt['version']} ({receipt.get('policy', '?')}) alias [bold]{receipt['alias']}[/bold]"
        f" ({receipt.get('why') or 'the best geo-mean vs the best baseline'} in {receipt.get('chosen_by') or 'its evaluation'}){f'; also {others}' if others else ''}")  # fmt: skip
    plots = "  ".join(str(eval_dir / p) for p in PLOTS if (eval_dir / p).exists())
    say(f"plots:      {plots or '-'}   (dvc plots show: speedup per cell, training loss)")
    say("next:       pmoss registry list  |  pmoss registry promote --eval datasets/pools/eval-tiny.yaml")
    say("compare:    dvc exp show --only-changed --drop '.*/.*|unseen\\..*|.*\\.(vs_one_core|cells_ge_best|own_picks|inits|vs_best_.*)'  |  dvc plots diff")
    say(f"browse:     mlflow ui --backend-store-uri {tracking_uri or default_tracking_uri()}")
