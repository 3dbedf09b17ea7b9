"""The registered model's pyfunc wrapper, logged as MLflow "models from code": MLflow stores this
file instead of a CloudPickle of an object, so loading a version executes no pickled code.

`load_context` loads the bundle (weights + config + normalisation stats + inference settings);
`predict` takes a table of (machine, snapshot) requests and answers one schedule per row (the
request and answer formats: learn/pyfunc_io.py), so `mlflow models serve -m models:/pmoss-dt@champion`
serves schedules. `pmoss serve` does not go through MLflow's server: it loads the bundle itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.models
import mlflow.pyfunc

from pmoss.learn.bundle import load_bundle
from pmoss.learn.pyfunc_io import INPUT_COLUMNS, OUTPUT_COLUMN, propose_json


class ScheduleModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context: Any) -> None:
        self.bundle = load_bundle(Path(context.artifacts["bundle"]))

    # no type hints here: MLflow would read them as a second signature (the logged one is pyfunc_io.signature)
    def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201
        import pandas as pd

        rows = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        missing = [c for c in INPUT_COLUMNS if c not in rows.columns]
        if missing:
            raise ValueError(f"request: no column {', '.join(missing)}; each row needs 'machine' and 'snapshot' (pmoss.learn.pyfunc_io)")
        return pd.DataFrame({OUTPUT_COLUMN: [propose_json(self.bundle, m, s) for m, s in zip(rows["machine"], rows["snapshot"], strict=True)]})


mlflow.models.set_model(ScheduleModel())
