"""The simulated machine pool: descriptors shipped in `pmoss/sim/machines/NAME.yaml`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pmoss.contracts.errors import ContractError
from pmoss.contracts.machine import Machine, load_machine

MACHINE_DIR = Path(__file__).parent / "machines"
# The paper's offline pool (docs/design.md §5). Unseen: in no training pool, evaluated only
# (datasets/pools/eval-unseen.yaml): the paper's POWER8 and current parts written from their
# public specifications (issue #41).
PAPER_MACHINES = ("amd-milan-nps1", "amd-milan-nps4", "intel-skx-4s", "intel-snb-4s", "nvidia-grace")
PAPER_UNSEEN = ("ibm-power8",)  # the paper's unseen machine (its grid: eval-unseen-paper.yaml)
UNSEEN_MACHINES = PAPER_UNSEEN + ("intel-spr-snc4", "amd-genoa-nps4", "ampere-altra", "aws-graviton3", "amd-bergamo-nps4")


class UnknownMachineError(ContractError):
    """A machine name that is not in the simulated pool."""


def list_machines() -> list[str]:
    """Names of every simulated machine, sorted."""
    return sorted(p.stem for p in MACHINE_DIR.glob("*.yaml"))


def descriptor_path(name: str) -> Path:
    path = MACHINE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise UnknownMachineError(f"machine: unknown simulated machine '{name}' (known: {', '.join(list_machines())}; or give a descriptor file)")
    return path


_FROM_FILES: dict[str, Machine] = {}  # descriptors loaded from files in this process, by machine name


def is_descriptor_ref(ref: str) -> bool:
    """A machine given as a descriptor file or directory rather than a pool name."""
    return ref.endswith((".yaml", ".yml")) or "/" in ref or Path(ref).is_dir()


def expand_machines(refs: list[str]) -> list[str]:
    """Pool names and descriptor files as given; a directory becomes its *.yaml files (sorted)."""
    out: list[str] = []
    for ref in refs:
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
    """A validated descriptor: a pool member by name, or any descriptor file (simulated as given).
    Cached, so treat it as read-only. A file's machine is afterwards also found by its name."""
    if is_descriptor_ref(ref):
        path = Path(ref)
        if not path.is_file():
            raise UnknownMachineError(f"machine: descriptor file '{ref}' does not exist")
        m = _load_file(str(path.resolve()))
        if m.name in list_machines() and m != _load_pool_machine(m.name):
            raise ContractError(f"{ref}: field 'name': '{m.name}' is a pool machine with another descriptor; rename it")
        _FROM_FILES[m.name] = m
        return m
    if ref in _FROM_FILES:
        return _FROM_FILES[ref]
    return _load_pool_machine(ref)


@lru_cache(maxsize=None)
def _load_pool_machine(name: str) -> Machine:
    return load_machine(descriptor_path(name))


@lru_cache(maxsize=64)
def _load_file(path: str) -> Machine:
    return load_machine(Path(path))
