"""Simulated testbed: a machine model that stands in for the paper's servers (docs/design.md §6).

Every episode it writes says `source=sim`. Entry points:
`simulate` / `simulate_batch` (raw snapshot rows), `throughput` (noise-free model),
`oracle` (search over execution groups or one-core schedules), `list_machines` / `load_sim_machine`
(the pool, generated machines `gen-<seed>`, or any descriptor file), `expand_machines` (generated
ranges `gen:A-B`, directories of descriptors), `is_sim_machine`,
`fidelity_table` (the checks of docs/machine-model.md).
"""

from pmoss.sim.episode import (
    SimInputError,
    simulate,
    simulate_batch,
    throughput,
    unavailable_features,
)
from pmoss.sim.fidelity import fidelity_checks, fidelity_table
from pmoss.sim.hardware import Calibration
from pmoss.sim.oracle import oracle
from pmoss.sim.pool import (
    PAPER_MACHINES,
    PAPER_UNSEEN,
    UNSEEN_MACHINES,
    UnknownMachineError,
    check_training_machines,
    expand_generated,
    expand_machines,
    is_sim_machine,
    list_machines,
    load_sim_machine,
)

__all__ = [
    "PAPER_MACHINES", "PAPER_UNSEEN", "UNSEEN_MACHINES", "Calibration", "SimInputError", "UnknownMachineError", "check_training_machines",
    "expand_generated", "expand_machines", "fidelity_checks", "fidelity_table", "is_sim_machine", "list_machines",
    "load_sim_machine", "oracle",
    "simulate", "simulate_batch", "throughput", "unavailable_features",
]  # fmt: skip
