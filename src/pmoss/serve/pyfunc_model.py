"""The registered model's pyfunc wrapper, logged as MLflow "models from code": MLflow stores this
file instead of a CloudPickle of an object, so loading a version executes no pickled code.

`load_context` loads the bundle (weights + config + normalisation stats). `predict` is not the
serving path (serving loads the bundle itself, pmoss.serve.serve); it returns the model config
as JSON so `mlflow.pyfunc.load_model(...).predict([...])` shows what was loaded.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import mlflow.models
import mlflow.pyfunc

from pmoss.learn.bundle import load_bundle


class ScheduleModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context: Any) -> None:
        self.bundle = load_bundle(Path(context.artifacts["bundle"]))

    def predict(self, context: Any, model_input: list[str], params: dict[str, Any] | None = None) -> list[str]:
        return [json.dumps(asdict(self.bundle.config)) for _ in model_input]


mlflow.models.set_model(ScheduleModel())
