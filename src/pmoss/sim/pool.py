"""The simulated machine pool: descriptors shipped in `pmoss/sim/machines/NAME.yaml`, and the
procedurally generated machines `gen-<seed>` (`pmoss.sim.generate`), made on demand."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pmoss.contracts.errors import ContractError
from pmoss.contracts.machine import Machine, load_machine
from pmoss.sim.descriptors import render
from pmoss.sim.generate import GENERATED_SPLITS, cached_machine, expand_range, generated_spec, parse_name, split_of

MACHINE_DIR = Path(__file__).parent / "machines"
# The paper's offline pool (docs/design.md §5). Unseen: in no training pool, evaluated only
# (datasets/pools/eval-unseen.yaml): the paper's POWER8 and current parts written from their
# public specifications (issue #41), beside generated machines of the "unseen" seed range.
PAPER_MACHINES = ("amd-milan-nps1", "amd-milan-nps4", "intel-skx-4s", "intel-snb-4s", "nvidia-grace")
PAPER_UNSEEN = ("ibm-power8",)  # the paper's unseen machine (its grid: eval-unseen-paper.yaml)
UNSEEN_MACHINES = PAPER_UNSEEN + ("intel-spr-snc4", "amd-genoa-nps4", "ampere-altra", "aws-graviton3", "amd-bergamo-nps4")


class UnknownMachineError(ContractError):
    """A machine name that is not in the simulated pool."""


def list_machines() -> list[str]:
    """Names of every simulated machine, sorted."""
    return sorted(p.stem for p in MACHINE_DIR.glob("*.yaml"))


def is_sim_machine(name: str) -> bool:
    """A shipped pool member or a generated machine's name (`gen-17`)."""
    return parse_name(name) is not None or (MACHINE_DIR / f"{name}.yaml").is_file()


def descriptor_path(name: str) -> Path:
    path = MACHINE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise UnknownMachineError(f"machine: unknown simulated machine '{name}' (known: {', '.join(list_machines())}, "
                                  "gen-<seed> for a generated one; or give a descriptor file)")
    return path


def descriptor_text(name: str) -> str:
    """A pool member's YAML as shipped, or a generated machine's as `pmoss.sim.generate` writes it."""
    gen = parse_name(name)
    return render(generated_spec(gen[1], gen[0])) if gen else descriptor_path(name).read_text()


_FROM_FILES: dict[str, Machine] = {}  # descriptors loaded from files in this process, by machine name


def is_descriptor_ref(ref: str) -> bool:
    """A machine given as a descriptor file or directory rather than a pool name."""
    return ref.endswith((".yaml", ".yml")) or "/" in ref or Path(ref).is_dir()


def expand_generated(refs: list[str]) -> list[str]:
    """Pool `machines:` entries with every generated range `gen:A-B` replaced by its names
    gen-A ... gen-B (both ends included); other entries as given."""
    out: list[str] = []
    for ref in refs:
        names = expand_range(ref)
        out += [ref] if names is None else names
    return out


def check_training_machines(refs: list[str], where: str = "machines") -> None:
    """Refuse a training pool's machines that are held out: an unseen machine, or a generated seed
    outside GENERATED_SPLITS["train"] (validation seeds choose things, unseen ones are evaluated)."""
    lo, hi = GENERATED_SPLITS["train"]
    for name in expand_generated(refs):
        gen = parse_name(name)
        split = split_of(gen[1]) if gen else None
        if name in UNSEEN_MACHINES or (gen and split != "train"):
            held = "an unseen machine" if name in UNSEEN_MACHINES else f"a generated machine of the {split} seeds" if split else "a generated seed of no split"
            raise ContractError(f"{where}: '{name}' is {held}; a training pool may hold only pool machines and generated seeds {lo}-{hi}")


def expand_machines(refs: list[str]) -> list[str]:
    """Pool names and descriptor files as given, generated ranges as their names (gen-A ... gen-B);
    a directory becomes its *.yaml files (sorted)."""
    out: list[str] = []
    for ref in expand_generated(refs):
        path = Path(ref)
        if path.is_dir():
            files = sorted(str(f) for f in path.glob("*.y*ml"))
            if not files:
                raise UnknownMachineError(f"machine: directory '{ref}' holds no descriptor (*.yaml)")
            out += files
        else:
            out.append(ref)
    return out


def load_sim_machine(ref: str) -> Machine:
    """A validated descriptor: a pool member or a generated machine (`gen-17`) by name, or any
    descriptor file (simulated as given). Cached, so treat it as read-only. A file's machine is
    afterwards also found by its name."""
    if is_descriptor_ref(ref):
        path = Path(ref)
        if not path.is_file():
            raise UnknownMachineError(f"machine: descriptor file '{ref}' does not exist")
        m = _load_file(str(path.resolve()))
        if is_sim_machine(m.name) and m != _load_named(m.name):
            raise ContractError(f"{ref}: field 'name': '{m.name}' is a pool machine with another descriptor; rename it")
        _FROM_FILES[m.name] = m
        return m
    if ref in _FROM_FILES:
        return _FROM_FILES[ref]
    return _load_named(ref)


def _load_named(name: str) -> Machine:
    gen = parse_name(name)
    return cached_machine(*gen) if gen else _load_pool_machine(name)


@lru_cache(maxsize=None)
def _load_pool_machine(name: str) -> Machine:
    return load_machine(descriptor_path(name))


@lru_cache(maxsize=64)
def _load_file(path: str) -> Machine:
    return load_machine(Path(path))
