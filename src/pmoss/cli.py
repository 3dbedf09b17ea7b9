"""The `pmoss` command line. Each part of the system mounts its own sub-commands here.

Heavy imports (torch, lightning, ray, mlflow) happen inside the commands that need them, so
`pmoss --help` and the data commands start fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from pmoss.contracts.errors import PmossError

app = typer.Typer(
    name="pmoss",
    help="P-MOSS: learned spatial scheduling of main-memory indexes on NUMA and chiplet servers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err = Console(stderr=True)


@app.command()
def topology(
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the descriptor here (YAML or .json) instead of stdout.")] = None,
    root: Annotated[Path, typer.Option(help="Filesystem root holding sys/ and proc/ (for testing against a copy).")] = Path("/"),
    name: Annotated[Optional[str], typer.Option(help="Machine name (default: the host name).")] = None,
) -> None:
    """Read this host's sysfs (CPUs, packages, NUMA nodes, L3 sharing, SMT) and write a machine descriptor."""
    import yaml

    from pmoss.collect.topology import discover
    from pmoss.contracts.machine import save_machine

    machine = discover(root, name=name)
    if output is None:
        typer.echo(yaml.safe_dump(machine.model_dump(mode="json"), sort_keys=False), nl=False)
    else:
        save_machine(machine, output)
        err.print(f"wrote {output}: {machine.numa_nodes} NUMA node(s), {len(machine.cpus)} CPUs, {machine.n_workers} workers")


def _mount_subcommands() -> None:
    from pmoss.collect.driver import collect_command
    from pmoss.collect.legacy import import_legacy_command
    from pmoss.data.dataset import app as dataset_app
    from pmoss.evaluate import evaluate_command
    from pmoss.learn.cli import train_command
    from pmoss.serve.gate import promote_command
    from pmoss.serve.infer import schedule_command
    from pmoss.serve.posttrain import post_train_command
    from pmoss.serve.registry import app as registry_app
    from pmoss.serve.serve import serve_command
    from pmoss.serve.summary import summary_command
    from pmoss.sim.cli import app as sim_app

    app.command("collect")(collect_command)
    app.add_typer(dataset_app, name="dataset")
    app.command("train")(train_command)
    app.command("schedule")(schedule_command)
    app.command("evaluate")(evaluate_command)
    app.command("import-legacy")(import_legacy_command)
    registry_app.command("promote")(promote_command)
    app.add_typer(registry_app, name="registry")
    app.add_typer(sim_app, name="sim")
    app.command("serve")(serve_command)
    app.command("post-train")(post_train_command)
    app.command("summary")(summary_command)


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 1."""
    _mount_subcommands()
    try:
        app()
    except PmossError as e:
        err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
        sys.exit(1)
