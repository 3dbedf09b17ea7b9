"""Where MLflow runs and models live: the embedded sqlite store under `mlflow/`, or a server.

MLFLOW_TRACKING_URI overrides the default. With a sqlite store, artifacts go to `mlflow/artifacts`
next to the database (not to ./mlruns in whatever directory a command ran from).

A server that cannot be reached fails fast: before any MLflow call, a TCP connect to the server is
tried for at most PMOSS_TRACKING_TIMEOUT_S seconds (default 5). A server that answers the connect
but then stalls is bounded by MLflow's own HTTP timeout and retries, which we lower from its
defaults (7 retries with exponential backoff, 120 s per request: about 4 minutes of silence) to
30 s per request and one quick retry; a server that is only slow (a loaded machine, a big model
upload) still gets 30 s per answer. An MLFLOW_HTTP_REQUEST_* variable the user set is kept.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from pmoss.contracts.errors import PmossError
from pmoss.contracts.io import NoProjectError, project_root, seconds_from_env

TIMEOUT_ENV = "PMOSS_TRACKING_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 30  # per answer from a server that accepted the connection (MLflow wants an int)


class TrackingUnreachable(PmossError):
    pass


def default_tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, else the project's embedded store (contracts.io.project_root: the
    directory with dvc.yaml from here upwards, or this pmoss's own checkout), wherever a command runs."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    try:
        root = project_root()
    except NoProjectError as e:
        raise NoProjectError(f"{e}, or name a store with MLFLOW_TRACKING_URI") from None
    return f"sqlite:///{root / 'mlflow' / 'mlflow.db'}"


def artifact_location() -> str | None:
    uri = default_tracking_uri()
    if not uri.startswith("sqlite:///"):
        return None  # a server decides where its artifacts go
    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    return (db.parent / "artifacts").resolve().as_uri()


def timeout_s() -> float:
    return seconds_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)


def bound_http_requests(budget_s: float) -> None:
    """MLflow's HTTP client: one request waits at most REQUEST_TIMEOUT_S (or the connect budget, if
    longer) for an answer, and retries once, briefly."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(REQUEST_TIMEOUT_S, round(budget_s))))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER", "0.1")


def check_reachable(uri: str, budget_s: float) -> None:
    """For an http(s) URI: connect to the server, retrying until `budget_s` is spent; raise one line naming it."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return  # sqlite and other local stores need no network
    host, port = parts.hostname or "localhost", parts.port or (443 if parts.scheme == "https" else 80)
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(host):
        return  # requests go through a proxy: a direct connect proves nothing; MLflow's bounded timeouts still apply
    start, tries, wait = time.monotonic(), 0, 0.2
    while True:
        tries += 1
        left = budget_s - (time.monotonic() - start)
        try:
            socket.create_connection((host, port), timeout=max(0.1, left)).close()
            return
        except OSError as e:
            reason = e.strerror or type(e).__name__
        left = budget_s - (time.monotonic() - start)
        if left <= wait:
            raise TrackingUnreachable(f"tracking server {uri} cannot be reached ({reason}; {tries} tries in {time.monotonic() - start:.1f} s); "
                                      f"start it or set MLFLOW_TRACKING_URI ({TIMEOUT_ENV} sets the wait)")  # fmt: skip
        time.sleep(wait)
        wait *= 2


def mlflow_client():
    """The mlflow module, pointed at the tracking store and registry (a server is checked first)."""
    uri = default_tracking_uri()
    budget = timeout_s()
    bound_http_requests(budget)
    check_reachable(uri, budget)
    import mlflow

    # its INFO lines on creating or upgrading the sqlite store ("Creating initial MLflow database
    # tables...") say nothing a user acts on; its warnings still show
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return mlflow


@contextmanager
def without_mlflow_prints() -> Iterator[None]:
    """MLflow's event stream off for one call whose outcome the caller prints itself: register_model
    prints "Successfully registered model", "already exists. Creating a new version" and "Created
    version" for every model, three lines beside our one. Its errors still raise."""
    from mlflow.utils.logging_utils import MLFLOW_LOGGING_STREAM

    was = MLFLOW_LOGGING_STREAM.enabled
    MLFLOW_LOGGING_STREAM.enabled = False
    try:
        yield
    finally:
        MLFLOW_LOGGING_STREAM.enabled = was


SERVER_ARTIFACTS = "mlflow-artifacts:"


def server_artifacts_remedy(where: str) -> str:
    """Why a local client cannot use artifacts a server keeps, and the two ways out."""
    return (f"{where} keeps its artifacts behind an MLflow server ({SERVER_ARTIFACTS}/...): a client of `mlflow server` created it in this "
            "store, and a client of the sqlite file itself cannot reach them. Either point every command at that server "
            "(MLFLOW_TRACKING_URI=http://HOST:PORT), or serve the store without artifact proxying so that both kinds of client share "
            "the files: `mlflow server --backend-store-uri sqlite:///$PWD/mlflow/mlflow.db --no-serve-artifacts "
            "--default-artifact-root $PWD/mlflow/artifacts --host 127.0.0.1` (docs/mlflow.md)")  # fmt: skip


def ensure_experiment(name: str) -> str:
    """The experiment's id (created with artifacts next to the sqlite store). An experiment created
    through a server that proxies artifacts cannot be written by a local client: one line saying so
    and what to do, instead of MLflow's "the tracking URI must be a valid http or https URI"."""
    mlflow = mlflow_client()
    exp = mlflow.get_experiment_by_name(name)
    if exp is not None:
        if str(exp.artifact_location).startswith(SERVER_ARTIFACTS) and urlsplit(mlflow.get_tracking_uri()).scheme not in ("http", "https"):
            raise TrackingUnreachable(server_artifacts_remedy(f"experiment '{name}'"))
        return exp.experiment_id
    return mlflow.create_experiment(name, artifact_location=artifact_location())
