"""What the registered pyfunc model takes and answers (serve/pyfunc_model.py), without MLflow.

A request is a table with one row per schedule wanted:
- `machine`: a simulated machine's name (`pmoss sim list`) or a machine descriptor as YAML/JSON
  text (`pmoss topology` on the host);
- `snapshot`: one raw snapshot (a row of the raw snapshot Parquet, docs/contracts.md) as a JSON
  object, taken under the running schedule.
The answer has one column `schedule`: the schedule as JSON (the format `pmoss schedule` writes and
the runtime loads), proposed with the bundle's own inference settings (e.g. dt-critic's best-of-k).

    curl -s http://127.0.0.1:5000/invocations -H 'Content-Type: application/json' \\
         -d '{"dataframe_records": [{"machine": "intel-skx-4s", "snapshot": "{...}"}]}'
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime
from typing import Any

import numpy as np

from pmoss.contracts.errors import ContractError

INPUT_COLUMNS = ("machine", "snapshot")
OUTPUT_COLUMN = "schedule"


def signature() -> Any:
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    return ModelSignature(inputs=Schema([ColSpec("string", c) for c in INPUT_COLUMNS]), outputs=Schema([ColSpec("string", OUTPUT_COLUMN)]))


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return value


def snapshot_json(row: dict[str, Any]) -> str:
    """One raw snapshot row (arrays, timestamps) as the JSON text a request carries."""
    return json.dumps({k: _plain(v) for k, v in row.items()})


def machine_of(ref: str) -> Any:
    """A simulated machine by name, or a descriptor given as YAML/JSON text."""
    import yaml

    from pmoss.contracts.machine import Machine

    text = str(ref).strip()
    if "\n" not in text and ":" not in text:
        from pmoss.sim import load_sim_machine

        return load_sim_machine(text)
    try:
        return Machine.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValueError) as e:
        raise ContractError(f"machine: not a simulated machine name nor a machine descriptor ({str(e).splitlines()[0]})") from None


def propose_json(bundle: Any, machine: str, snapshot: str) -> str:
    """One request row -> the schedule JSON."""
    from pmoss.learn.rollout import propose

    try:
        row = json.loads(snapshot)
    except json.JSONDecodeError as e:
        raise ContractError(f"snapshot: not JSON ({e.msg} at char {e.pos})") from None
    m = machine_of(machine)
    sched = propose(bundle, m, row, **bundle.info.get("inference", {}))
    return json.dumps(sched.model_dump(mode="json"))


def example_input(bundle: Any) -> Any:
    """A request for the bundle's first training machine x workload: an os-default snapshot from
    the simulator (None when that machine is not simulated: a real host's data)."""
    import pandas as pd

    from pmoss.contracts.policies import generate
    from pmoss.contracts.workload import get_workload
    from pmoss.sim import is_sim_machine, load_sim_machine, simulate

    cells = [k.split("|") for k in sorted(bundle.stats.best_return)]
    cell = next((c for c in cells if len(c) == 2 and is_sim_machine(c[0])), None)
    if cell is None:
        return None
    m = load_sim_machine(cell[0])
    row = simulate(m, get_workload(cell[1]), "dense", generate("os-default", m, bundle.config.n_slices), seed=1)
    return pd.DataFrame({"machine": [m.name], "snapshot": [snapshot_json(row)]})
