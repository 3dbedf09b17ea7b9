"""The model registry on MLflow: register trained bundles, fetch, list, roll back (the promotion gate is gate.py).

A version carries the bundle (weights + config + normalisation stats) as an MLflow pyfunc model
(models from code: pyfunc_model.py), and as tags: the model config, the dataset and its hash, the
git commit, its policy name and its own headline figures (`eval.*`); the whole evaluation is an
artifact of the version's run. Of several models registered together, the alias `candidate` goes
to the best one on a validation evaluation (`--choose-by`; default the evaluation itself). Works against the sqlite store under
`mlflow/` (default) or any MLflow server named by MLFLOW_TRACKING_URI.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pmoss.contracts.checksum import file_digest
from pmoss.contracts.errors import ContractError, PmossError, brief
from pmoss.contracts.io import atomic_write_text
from pmoss.evaluate import DETAIL_FILE
from pmoss.learn.bundle import BUNDLE_FILE, load_bundle
from pmoss.learn.tracking import ensure_experiment, mlflow_client, without_mlflow_prints

MODEL_NAMES = {"dt": "pmoss-dt", "bc": "pmoss-bc", "cql": "pmoss-cql"}
app = typer.Typer(help="Register and list model versions (MLflow registry).", no_args_is_help=True)


class RegistryError(PmossError):
    pass


EVAL_TAG_PREFIX = "eval."  # a version's own headline figures, one tag each (eval.vs_best, ...)


def read_metrics(path: Path, flag: str = "--metrics") -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RegistryError(f"{flag} {path}: no such file; run the evaluation first (pmoss evaluate / dvc repro)") from None
    except json.JSONDecodeError as e:
        raise RegistryError(f"{flag} {path}: not JSON ({e.msg} at line {e.lineno}); re-run the evaluation") from None


def own_metrics(headline: dict[str, Any], policy: str, source: Path) -> dict[str, float]:
    """The headline figures of `policy` in an evaluation's metrics.json (evaluate.summarise)."""
    from pmoss.evaluate import policy_figures

    per = policy_figures(headline)
    if policy not in per:
        raise RegistryError(f"{source}: no figures for policy '{policy}' (have: {', '.join(per) or 'none'}); pass POLICY=MODEL_DIR with an evaluated name")
    return {k: float(v) for k, v in per[policy].items()}


def register(model_dir: Path, name: str, dataset: Path | None, metrics: Path | None, alias: str | None = "candidate", policy: str | None = None,
             description: str | None = None) -> int:  # fmt: skip
    """Register the model of `model_dir/model.pt` as a new version of `name`: the model its training
    run logged (MODEL_DIR/mlflow-run.json, learn/logged_model.py) when that run is in this store and
    logged this very bundle, else the bundle logged now in a run of its own. The version gets its
    own figures (those of `policy` in `metrics`) as tags and as metrics of the logged model, the
    whole evaluation as artifacts of the run, `description` (why it is or is not the candidate),
    and `alias` (None: no alias). `dataset` defaults to the one the bundle says it was trained on."""
    from pmoss.learn.logged_model import log_trained_model, read_run_file
    from pmoss.learn.tracking import default_tracking_uri

    mlflow = mlflow_client()
    bundle = load_bundle(model_dir)
    dataset = dataset if dataset is not None else (Path(bundle.info["data"]) if bundle.info.get("data") else None)
    run = read_run_file(model_dir)
    same = run is not None and run.get("model_uri") and run.get("tracking_uri") == default_tracking_uri() and run.get("bundle_sha256") == file_digest(Path(model_dir) / BUNDLE_FILE)
    same = same and _run_exists(mlflow, run["run_id"])  # the same URI, but the store made anew since (mlflow/ removed)
    if not same:  # trained against another store, edited since, or a lone critic: log it now, in a run of its own
        with mlflow.start_run(experiment_id=ensure_experiment("pmoss-registry"), run_name=f"register-{name}") as r:
            pass
        run = log_trained_model(r.info.run_id, Path(model_dir), dataset, str((run or {}).get("git_commit") or bundle.info.get("git_commit", "unknown")),
                                write_run_file=False, force_model=True)  # fmt: skip
    tags: dict[str, str] = {"git_commit": str(run["git_commit"]), "algo": str(bundle.info.get("algo", "dt")), "training_run": run["run_id"],
                            "model_config": json.dumps(asdict(bundle.config)), "source": "sim"}  # fmt: skip
    if dataset is not None:
        tags["dataset"] = str(dataset)
        if (Path(dataset) / "tokens.parquet").is_file():
            tags["dataset_md5"] = file_digest(Path(dataset) / "tokens.parquet", "md5")
    own: dict[str, float] = {}
    if metrics is not None and policy is not None:
        own = own_metrics(read_metrics(metrics), policy, metrics)
        tags["policy"] = policy
        tags.update({f"{EVAL_TAG_PREFIX}{k}": f"{v:.4g}" for k, v in own.items()})
    with mlflow.start_run(run_id=run["run_id"]):
        mlflow.log_dict(asdict(bundle.stats), "normalisation_stats.json")
        if own:  # on the logged model: the registry shows them on the version
            mlflow.log_metrics({f"eval.{k}": v for k, v in own.items()}, model_id=run["model_id"])
        for f in _evaluation_files(metrics):
            mlflow.log_artifact(str(f), "evaluation")
    with without_mlflow_prints():
        version = mlflow.register_model(run["model_uri"], name, tags=tags)
    client = mlflow.MlflowClient()
    if description:
        client.update_model_version(name, version.version, description=description)
    if alias:
        client.set_registered_model_alias(name, alias, version.version)
    return int(version.version)


def _run_exists(mlflow: Any, run_id: str) -> bool:
    try:
        mlflow.MlflowClient().get_run(run_id)
    except mlflow.exceptions.MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise RegistryError(f"run {run_id}: the registry did not answer ({_first_line(e.message)})") from e
    return True


def _evaluation_files(metrics: Path | None) -> list[Path]:
    """The full evaluation next to a metrics.json: the headline and the per-cell files."""
    if metrics is None:
        return []
    near = [Path(metrics).with_name(n) for n in (DETAIL_FILE, "cells.json")]
    return [Path(metrics)] + [f for f in near if f.is_file()]


def register_models(models: list[str], name: str, metrics: Path | None, alias: str = "candidate", dataset: Path | None = None,
                    choose_by: Path | None = None) -> tuple[dict[str, int], str, str]:  # fmt: skip
    """Register every `POLICY=DIR` (or `DIR`) as a version of `name`; `alias` goes to the one
    `choose_by` (a validation evaluation; default `metrics`) picks by `evaluate.best_policy`, not to
    the last registered: with the per-cell ratios beside it (cells-detail.json), the first of the
    models as listed (simplest first) within one standard error of the best geo-mean vs the best
    baseline; without them, the best geo-mean. Each version is tagged with its figures in `metrics`.
    Returns {policy: version}, the policy that got the alias and why."""
    from pmoss.evaluate import best_policy

    specs = [(p, Path(d)) if sep else (None, Path(p)) for p, sep, d in (m.partition("=") for m in models)]
    headlines: dict[Path, dict[str, Any]] = {}  # each file read once, a missing one named by its flag
    for f, flag in ((metrics, "--metrics"), (choose_by, "--choose-by")):
        if f is not None and f not in headlines:
            headlines[f] = read_metrics(f, flag)
    choose_by = choose_by if choose_by is not None else metrics
    if len(specs) > 1 and (choose_by is None or any(p is None for p, _ in specs)):
        raise RegistryError("several models: pass --metrics (or --choose-by) and name each as POLICY=MODEL_DIR, so an evaluation picks the candidate")
    chosen, reason = None, "it is the only model registered"
    if choose_by is not None and all(p is not None for p, _ in specs):
        for f, headline in headlines.items():
            for p, _ in specs:
                own_metrics(headline, p, f)  # every name is checked in both files before anything is registered
        near = Path(choose_by).with_name(DETAIL_FILE)
        detail = read_metrics(near, "--choose-by's per-cell file") if near.is_file() else None
        try:
            chosen, reason = best_policy(headlines[choose_by], [p for p, _ in specs], detail)  # type: ignore[misc]
        except ContractError as e:
            raise RegistryError(f"{near}: {e}") from None
    chosen = chosen or specs[0][0] or str(specs[0][1])  # one model: it gets the alias
    versions = {}
    for policy, model_dir in specs:
        label = policy or str(model_dir)
        why = describe(label, chosen, reason, [p or str(d) for p, d in specs], headlines[choose_by] if choose_by is not None and policy else None, alias, choose_by)
        versions[label] = register(model_dir, name, dataset, metrics, alias if label == chosen else None, policy, why)
    return versions, chosen, reason


def describe(label: str, chosen: str, reason: str, labels: list[str], headline: dict[str, Any] | None, alias: str, metrics: Path | None) -> str:
    """The version's description: its own figures and why it got `alias` or not (the UI shows the
    description whole, where it cuts tag values short)."""
    from pmoss.evaluate import policy_figures

    if headline is None:
        return f"{label}: registered without an evaluation; alias '{alias}' because {reason}" if label == chosen else f"{label}: registered without an evaluation"
    per = policy_figures(headline)

    def figures(p: str) -> str:
        f = per.get(p, {})
        return ", ".join(f"{k} {float(v):.4g}" for k, v in f.items() if k in ("vs_best", "vs_one_core", "vs_oracle", "cells_ge_best")) or "no figures"

    others = [p for p in labels if p != label]
    if label == chosen:
        rivals = "; ".join(f"{p}: {figures(p)}" for p in others)
        return (f"{label} is the '{alias}': {reason} in {metrics} "
                f"({figures(label)}){f', registered together with {rivals}' if rivals else ''}. Simulated testbed (source=sim). "
                f"`pmoss registry promote` gates it against the heuristics and the champion.")  # fmt: skip
    return f"{label}: {figures(label)} in {metrics}; not the '{alias}': {chosen} is ({reason}; {figures(chosen)}). Simulated testbed (source=sim)."


def fetch(uri: str) -> Path:
    """Download a registered model (`models:/NAME@ALIAS` or `models:/NAME/VERSION`) and return its bundle path."""
    mlflow = mlflow_client()
    try:
        local = Path(mlflow.artifacts.download_artifacts(uri))
    except mlflow.exceptions.MlflowException as e:
        if "mlflow-artifacts URI was supplied" in e.message:
            from pmoss.learn.tracking import server_artifacts_remedy

            raise RegistryError(f"{uri}: {server_artifacts_remedy('this version')}") from e
        raise RegistryError(f"{uri}: cannot load from the registry ({_first_line(e.message)})") from e
    found = sorted(local.rglob(BUNDLE_FILE))
    if not found:
        raise RegistryError(f"{uri}: the version has no {BUNDLE_FILE}")
    return found[0]


@app.command("register")
def register_command(
    models: Annotated[list[str], typer.Argument(help="POLICY=MODEL_DIR (POLICY: its name in --metrics) or MODEL_DIR; several allowed.", show_default=False)],
    name: Annotated[str, typer.Option(help="Registered model name.")] = "pmoss-dt",
    dataset: Annotated[Optional[Path], typer.Option(help="The tokenised dataset (default: the one each bundle was trained on).")] = None,
    metrics: Annotated[Optional[Path], typer.Option(help="Evaluation metrics.json: each version is tagged with its policy's figures.")] = None,
    choose_by: Annotated[Optional[Path], typer.Option(help="metrics.json of a validation evaluation that decides the alias (default: --metrics); "
                                                            "choose on validation seeds, report on evaluation ones.")] = None,
    alias: Annotated[str, typer.Option(help="Alias for the model --choose-by picks (the only one, if one).")] = "candidate",
    receipt: Annotated[Optional[Path], typer.Option(help="Write {name, version, alias, policy, versions, chosen_by, why} JSON here (a DVC output).")] = None,
) -> None:
    """Register trained models as new versions; the alias (default `candidate`) goes to the first of
    MODELS (list them simplest first) within one standard error of the best geometric mean vs the
    best baseline in --choose-by (default --metrics), over the cells of its cells-detail.json."""
    versions, chosen, why = register_models(models, name, metrics, alias, dataset, choose_by)
    if receipt:
        chosen_by = choose_by or metrics
        atomic_write_text(receipt, json.dumps({"name": name, "version": versions[chosen], "alias": alias, "policy": chosen, "versions": versions,
                                               "chosen_by": str(chosen_by) if chosen_by else None, "why": why}) + "\n")  # fmt: skip
    for label, v in versions.items():
        typer.echo(f"registered {name} version {v} ({label}){f'  alias {alias}' if label == chosen else ''}")


@app.command("list")
def list_command(name: Annotated[str, typer.Option(help="Registered model name.")] = "pmoss-dt") -> None:
    """The versions of a registered model as a table: aliases, the version's own evaluation
    figures, the dataset it was trained on, when it was registered and the last gate decision."""
    from rich.console import Console
    from rich.table import Table

    mlflow = mlflow_client()
    client = mlflow.MlflowClient()
    versions = client.search_model_versions(f"name='{name}'")
    if not versions:
        raise RegistryError(f"{name}: no registered versions on {mlflow.get_tracking_uri()}")
    aliases: dict[str, list[str]] = {}  # search results carry no aliases on a server: ask the model
    for alias, version in client.get_registered_model(name).aliases.items():
        aliases.setdefault(str(version), []).append(alias)
    table = Table(title=f"{name} ({mlflow.get_tracking_uri()}); figures: geo-mean over the evaluation cells, source=sim")
    for col in ("version", "aliases", "policy", "vs best baseline", "vs best one-core", "vs oracle", "cells >= best", "dataset", "registered (UTC)", "gate"):
        table.add_column(col)
    for v in sorted(versions, key=lambda v: int(v.version)):
        table.add_row(*version_row(client.get_model_version(name, v.version), aliases.get(str(v.version), [])))
    Console(width=200).print(table)


def version_row(v: Any, aliases: list[str]) -> list[str]:
    """One row of `registry list`: only this version's own figures (tags eval.*)."""
    tags = v.tags
    when = datetime.fromtimestamp(v.creation_timestamp / 1000, UTC).strftime("%Y-%m-%d %H:%M")
    figures = [tags.get(f"{EVAL_TAG_PREFIX}{k}", "-") for k in ("vs_best", "vs_one_core", "vs_oracle", "cells_ge_best")]
    return [str(v.version), ",".join(sorted(aliases)) or "-", tags.get("policy", "-"), *figures, tags.get("dataset", "-"), when, tags.get("promotion_decision", "-")]


# ---- promotion gate ------------------------------------------------------------------------------
CHAMPION, CANDIDATE = "champion", "candidate"
HISTORY_TAG = "champion_history"  # JSON list of earlier champion versions, newest last


def _version(client: Any, name: str, alias: str) -> Any | None:
    import mlflow

    try:
        return client.get_model_version_by_alias(name, alias)
    except mlflow.exceptions.MlflowException as e:
        if e.error_code in ("INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST"):  # no such alias / model
            return None
        raise RegistryError(f"{name}@{alias}: the registry did not answer ({_first_line(e.message)})") from e


def _first_line(message: str) -> str:
    """MLflow's messages carry the HTTP library's chain of causes and advice: keep the first sentence."""
    return brief(Exception(message or "no message"), 200)


def rollback(name: str) -> str:
    """Point `champion` back at the previous champion; returns that version."""
    client = mlflow_client().MlflowClient()
    history = json.loads(client.get_registered_model(name).tags.get(HISTORY_TAG, "[]"))
    if not history:
        raise RegistryError(f"{name}: no previous champion to roll back to")
    previous = history.pop()
    client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(history))
    client.set_registered_model_alias(name, CHAMPION, previous)
    return previous


@app.command("rollback")
def rollback_command(name: Annotated[str, typer.Option(help="Registered model name.")] = "pmoss-dt") -> None:
    """Restore the previous champion."""
    typer.echo(f"{name}: champion is version {rollback(name)} again")
