"""`pmoss dataset`: validate raw snapshots, build tokenised datasets, report what a dataset holds.

`build` is what the DVC stages `build-offline` / `build-finetune` run: it validates its inputs
first, then writes `tokens.parquet`, `stats.json` (training-split statistics), `dataset.json`
(counts per split, hold-out groups) and the machine descriptors it used into a fresh directory
that replaces the output only when complete. `--holdout-machine` / `--holdout-workload` give a
named group the split `holdout` (leave-one-machine-out / leave-one-workload-out evaluation).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import typer

from pmoss.contracts.checksum import file_digest, stamp_table, verify_files, verify_table
from pmoss.contracts.errors import ContractError, brief
from pmoss.contracts.io import model_text, writing
from pmoss.contracts.machine import Machine, load_machine
from pmoss.contracts.snapshot import (
    check_file,
    raw_files,
    read_raw_file,
)
from pmoss.data.tokens import (
    TOKENS_SCHEMA,
    Holdout,
    Stats,
    compute_stats,
    tokenise_table,
)

app = typer.Typer(help="Validate, build and report datasets.", no_args_is_help=True)

def validate_raw(path: Path) -> tuple[int, list[str]]:
    """Check every raw file under `path`; return (episodes, problems). Problems name file + episode."""
    problems: list[str] = []
    seen: dict[str, Path] = {}
    total = 0
    for f in raw_files(path):
        t = read_raw_file(f)  # schema version and columns, errors name the file
        total += t.num_rows
        problems += check_file(f, t, seen)
    if total == 0:
        problems.append(f"{path}: no episodes")
    return total, problems


def resolve_machines(names: set[str], machines_dir: Path | None) -> dict[str, Machine]:
    """Descriptors by name: from `machines_dir/NAME.yaml` if given and present, else the sim pool."""
    out = {}
    for name in sorted(names):
        path = machines_dir / f"{name}.yaml" if machines_dir else None
        if path and path.is_file():
            out[name] = load_machine(path)
            continue
        from pmoss.sim import is_sim_machine, load_sim_machine

        if not is_sim_machine(name):
            raise ContractError(f"machine '{name}': no descriptor (pass --machines DIR holding {name}.yaml)")
        out[name] = load_sim_machine(name)
    return out


def build(raw: list[Path], output: Path, val: float, test: float, machines_dir: Path | None = None,
          holdout: Holdout | None = None) -> Stats:  # fmt: skip
    """Validate and tokenise every raw file, then write the dataset directory in one rename."""
    table, machines = _tokenise_all(raw, val, test, machines_dir, holdout or Holdout())
    if table.num_rows == 0:
        raise ContractError(f"{', '.join(map(str, raw))}: no episode of a schedule kind with per-slice groups to learn from")
    stats = compute_stats(table)
    manifest = _manifest(table, raw, val, test, holdout or Holdout())
    with writing(output):  # disk full or read-only: one line naming the output, no partial directory left
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}."))
        try:
            (tmp / "stats.json").write_text(stats.to_json())
            (tmp / "dataset.json").write_text(json.dumps(manifest, indent=1))
            (tmp / "machines").mkdir()
            for name, m in machines.items():  # the directory is the unit written atomically: plain writes inside it
                (tmp / "machines" / f"{name}.yaml").write_text(model_text(m, ".yaml"))
            write_tokens(table, tmp)
            if output.exists():
                shutil.rmtree(output)
            tmp.rename(output)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return stats


def _tokenise_all(raw: list[Path], val: float, test: float, machines_dir: Path | None, holdout: Holdout) -> tuple[pa.Table, dict[str, Machine]]:
    """One pass over the files: validate (all of them, before anything is written) and tokenise."""
    seen: dict[str, Path] = {}
    machines: dict[str, Machine] = {}
    parts, groups = [], {"machine": set(), "workload": set()}
    for path in raw:
        for f in raw_files(path):
            t = read_raw_file(f)
            problems = check_file(f, t, seen)
            if problems:
                raise ContractError(f"{len(problems)} problem(s) in {path}; first: {problems[0]}")
            for key in groups:
                groups[key].update(t[key].to_pylist())
            machines.update(resolve_machines(set(t["machine"].to_pylist()) - set(machines), machines_dir))
            parts.append(tokenise_table(t, machines, val, test, holdout))
    if not seen:
        raise ContractError(f"{', '.join(map(str, raw))}: no raw snapshot Parquet files found")
    _check_holdout(holdout, groups)
    return pa.concat_tables(parts), machines


def _check_holdout(holdout: Holdout, present: dict[str, set[str]]) -> None:
    for key, names in (("machine", holdout.machines), ("workload", holdout.workloads)):
        missing = [n for n in names if n not in present[key]]
        if missing:
            raise ContractError(f"--holdout-{key} '{missing[0]}': no episode of that {key} in the raw data (have: {', '.join(sorted(present[key]))})")


def _manifest(table: pa.Table, raw: list[Path], val: float, test: float, holdout: Holdout) -> dict[str, object]:
    """What the dataset holds, for humans and for checks: counts per split / source, hold-out groups."""
    return {
        "raw": [str(p) for p in raw], "val": val, "test": test,
        "holdout": {"machines": list(holdout.machines), "workloads": list(holdout.workloads)},
        "episodes": dict(Counter(table["split"].to_pylist())),
        "sources": dict(Counter(table["source"].to_pylist())),
        "kinds": dict(Counter(table["schedule_kind"].to_pylist())),
    }  # fmt: skip


def write_tokens(table: pa.Table, root: Path) -> None:
    """`root/tokens.parquet`, carrying its content checksum and those of the files already in `root`."""
    files = {p.relative_to(root).as_posix(): file_digest(p) for p in sorted(root.rglob("*")) if p.is_file()}
    pq.write_table(stamp_table(table, files), root / "tokens.parquet", compression="zstd")


def load_tokens(path: Path) -> tuple[pa.Table, Stats, dict[str, Machine]]:
    """Table, stats and machines of a dataset, every file checked against the checksums it was written with."""
    path = Path(path)
    for need in ("tokens.parquet", "stats.json"):
        if not (path / need).is_file():
            raise ContractError(f"{path}: not a tokenised dataset ({need} missing); run `pmoss dataset build`")
    tokens = path / "tokens.parquet"
    try:
        table = pq.read_table(tokens)
    except (pa.ArrowException, OSError) as e:  # a damaged file fails in many ways: one line for all
        raise ContractError(f"{tokens}: not a readable Parquet file ({brief(e)}); rebuild the dataset") from e
    if (table.schema.metadata or {}).get(b"pmoss.schema") != b"tokens":
        raise ContractError(f"{tokens}: not a P-MOSS tokens file")
    verify_table(table, tokens)
    listed = verify_files(table, path, tokens)
    stats = Stats.from_json((path / "stats.json").read_text(), source=str(path / "stats.json"))
    found = sorted((path / "machines").glob("*.yaml"))
    stray = [p for p in found if p.relative_to(path).as_posix() not in listed]
    if stray:  # a descriptor added after the build has no checksum to check it against
        raise ContractError(f"{stray[0]}: not part of the dataset (no checksum in {tokens}); remove it, or rebuild the dataset with it (--machines)")
    machines = {p.stem: load_machine(p) for p in found}
    return table.cast(TOKENS_SCHEMA), stats, machines


@app.command("validate")
def validate_command(path: Annotated[Path, typer.Argument(help="A raw snapshot file or directory.")]) -> None:
    """Check schema version, nulls vs availability, ranges, duplicate episode ids and slice counts."""
    total, problems = validate_raw(path)
    for p in problems[:20]:
        typer.echo(p, err=True)
    if problems:
        raise ContractError(f"{path}: {len(problems)} problem(s) in {total} episode(s)")
    typer.echo(f"{path}: {total} episode(s) valid")


@app.command("build")
def build_command(
    raw: Annotated[list[Path], typer.Argument(help="Raw snapshot directories (validated first).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Dataset directory to (re)create.")],
    val: Annotated[float, typer.Option(help="Validation fraction (by hash of episode id).")] = 0.1,
    test: Annotated[float, typer.Option(help="Test fraction (by hash of episode id).")] = 0.1,
    machines: Annotated[Optional[Path], typer.Option(help="Directory of descriptors for non-simulated machines.")] = None,
    holdout_machine: Annotated[Optional[list[str]], typer.Option(help="Leave this machine out: its episodes get split 'holdout' (repeatable).")] = None,
    holdout_workload: Annotated[Optional[list[str]], typer.Option(help="Leave this workload out: its episodes get split 'holdout' (repeatable).")] = None,
) -> None:
    """Tokenise raw snapshots into a dataset (tokens.parquet + stats.json + dataset.json + machines/)."""
    holdout = Holdout(tuple(holdout_machine or ()), tuple(holdout_workload or ()))
    stats = build(raw, output, val, test, machines, holdout)
    n = pq.read_metadata(output / "tokens.parquet").num_rows
    typer.echo(f"{output}: {n} episodes, {stats.n_slices} slices each, {len(stats.best_return)} machine|workload cells")


@app.command("report")
def report_command(
    path: Annotated[Path, typer.Argument(help="A raw snapshot directory.")],
    plot: Annotated[Optional[Path], typer.Option(help="Write a throughput-per-kind plot (PNG) here.")] = None,
) -> None:
    """Counts per machine / workload / kind, size on disk, and a throughput distribution plot."""
    from rich.console import Console
    from rich.table import Table

    files = raw_files(path)
    t = pa.concat_tables([read_raw_file(f).select(["source", "machine", "workload", "schedule_kind", "throughput_qps"]) for f in files])
    counts = Counter(zip(*(t[c].to_pylist() for c in ("source", "machine", "workload", "schedule_kind")), strict=True))
    table = Table(title=f"{path}: {t.num_rows} episodes, {sum(f.stat().st_size for f in files) / 2**20:.1f} MiB")
    for col in ("source", "machine", "workload", "kind", "episodes"):
        table.add_column(col)
    for key, n in sorted(counts.items()):
        table.add_row(*key, str(n))
    Console().print(table)
    if plot:
        _plot_throughput(t, plot)
        typer.echo(f"plot: {plot}")


def _plot_throughput(t: pa.Table, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    machines = sorted(set(t["machine"].to_pylist()))
    fig, axes = plt.subplots(1, len(machines), figsize=(4 * len(machines), 3.5), squeeze=False)
    for ax, m in zip(axes[0], machines, strict=True):
        sub = t.filter(pc.equal(t["machine"], m))
        kinds = sorted(set(sub["schedule_kind"].to_pylist()))
        data = [np.asarray(sub.filter(pc.equal(sub["schedule_kind"], k))["throughput_qps"]) / 1e6 for k in kinds]
        ax.boxplot(data, tick_labels=kinds)
        ax.set_title(m, fontsize=9)
        ax.set_ylabel("throughput (Mq/s)")
        ax.tick_params(axis="x", rotation=60, labelsize=7)
    sources = ", ".join(sorted(set(t["source"].to_pylist())))
    fig.suptitle(f"throughput per schedule kind (source={sources})", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)

