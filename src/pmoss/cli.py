"""The `pmoss` command line. Each part of the system mounts its own sub-commands here.

Heavy imports (torch, lightning, ray, mlflow) happen inside the commands that need them, so
`pmoss --help` and the data commands start fast.
"""

from __future__ import annotations

import gc
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


# name -> (module, attribute): a command function, or a Typer sub-app (attribute `app`)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "collect": ("pmoss.collect.driver", "collect_command"),
    "dataset": ("pmoss.data.dataset", "app"),
    "train": ("pmoss.learn.cli", "train_command"),
    "attach-critic": ("pmoss.learn.cli", "attach_critic_command"),
    "schedule": ("pmoss.serve.infer", "schedule_command"),
    "evaluate": ("pmoss.evaluate", "evaluate_command"),
    "import-legacy": ("pmoss.collect.legacy", "import_legacy_command"),
    "registry": ("pmoss.serve.registry", "app"),
    "sim": ("pmoss.sim.cli", "app"),
    "serve": ("pmoss.serve.serve", "serve_command"),
    "post-train": ("pmoss.serve.posttrain", "post_train_command"),
    "improve": ("pmoss.learn.improve", "improve_command"),
    "propose": ("pmoss.serve.proposals", "propose_command"),
    "summary": ("pmoss.serve.summary", "summary_command"),
    "doctor": ("pmoss.doctor", "doctor_command"),
}


def _mount(name: str) -> None:
    """Import one sub-command's module (and so its libraries) and add it to the app."""
    import importlib

    module, attr = SUBCOMMANDS[name]
    target = getattr(importlib.import_module(module), attr)
    if isinstance(target, typer.Typer):
        if name == "registry":  # the promotion gate sits above the registry and joins its group here
            from pmoss.serve.gate import promote_command

            target.command("promote")(promote_command)
        app.add_typer(target, name=name)
    else:
        app.command(name)(target)


def _short_help(module: str, attr: str) -> str:
    """A command's one-paragraph help read from its module's source, without importing the module."""
    import ast

    source = Path(__file__).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")  # find_spec would import parent packages
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == attr:
            return (ast.get_docstring(node) or "").split("\n\n")[0]
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in node.targets) and isinstance(node.value, ast.Call):
            return next((str(k.value.value) for k in node.value.keywords if k.arg == "help" and isinstance(k.value, ast.Constant)), "")
    return ""


def _mount_subcommands(argv: list[str]) -> None:
    """Only the sub-command being run is imported (torch, pyarrow, ... load with it); for the
    top-level help every sub-command is listed from its source, so `pmoss --help` starts fast."""
    name = next((a for a in argv if not a.startswith("-")), None)
    if name in SUBCOMMANDS:
        _mount(name)
        return
    for other, (module, attr) in SUBCOMMANDS.items():
        app.command(other, help=_short_help(module, attr), context_settings={"ignore_unknown_options": True, "allow_extra_args": True})(_stub)


def _stub() -> None:  # never runs: a listed sub-command is mounted for real before it is invoked
    raise AssertionError("sub-command stub invoked")


class _NeverRaised(Exception):
    pass


def _mlflow_error() -> type[Exception]:
    """MLflow's exception class if a command imported MLflow (evaluated only when an exception is on its way)."""
    module = sys.modules.get("mlflow.exceptions")
    return module.MlflowException if module else _NeverRaised


# A command is one short process holding torch, Lightning and MLflow (~660k objects, the cyclic
# collector walks them all on every full collection): collecting every 20k allocations instead of
# 700, and not over the modules at exit, saves ~3 s of each training stage (docs/benchmarks.md).
GC_THRESHOLD = 20_000


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 1."""
    gc.set_threshold(GC_THRESHOLD)
    _mount_subcommands(sys.argv[1:])
    try:
        app()
    except PmossError as e:
        err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except OSError as e:  # a write the file system refused where no writer named its output: still one line
        from pmoss.contracts.io import write_failure

        failure = write_failure(e, None, clean=False)
        if failure is None:
            raise
        err.print(f"[red]error:[/red] {failure}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except _mlflow_error() as e:  # e.g. the tracking server went away after the start-up check
        from pmoss.contracts.errors import brief
        from pmoss.learn.tracking import default_tracking_uri

        err.print(f"[red]error:[/red] MLflow at {default_tracking_uri()}: {brief(e, 200)}", highlight=False, soft_wrap=True)
        sys.exit(1)
    finally:
        gc.freeze()  # the process ends here: the interpreter's last collections then skip every object alive now
