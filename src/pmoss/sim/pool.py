"""The simulated machine pool: descriptors shipped in `pmoss/sim/machines/NAME.yaml`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pmoss.contracts.errors import ContractError
from pmoss.contracts.machine import Machine, load_machine

MACHINE_DIR = Path(__file__).parent / "machines"
# The paper's offline pool (DESIGN §5); `ibm-power8` is the unseen machine.
PAPER_MACHINES = ("amd-milan-nps1", "amd-milan-nps4", "intel-skx-4s", "intel-snb-4s", "nvidia-grace")
UNSEEN_MACHINES = ("ibm-power8",)


class UnknownMachineError(ContractError):
    """A machine name that is not in the simulated pool."""


def list_machines() -> list[str]:
    """Names of every simulated machine, sorted."""
    return sorted(p.stem for p in MACHINE_DIR.glob("*.yaml"))


def descriptor_path(name: str) -> Path:
    path = MACHINE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise UnknownMachineError(f"machine: unknown simulated machine '{name}' (known: {', '.join(list_machines())})")
    return path


@lru_cache(maxsize=None)
def load_sim_machine(name: str) -> Machine:
    """The validated descriptor of a pool member; cached, so treat it as read-only."""
    return load_machine(descriptor_path(name))
