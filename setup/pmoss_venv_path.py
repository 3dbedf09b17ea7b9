"""The virtualenv's tools find each other without `source .venv/bin/activate`.

Every DVC stage calls `pmoss` from PATH (dvc.yaml), and `mlflow models serve` execs `uvicorn` from
PATH. Run from a fresh shell as `.venv/bin/dvc repro`, the stage's shell found no `pmoss` and
exited 127, after DVC had removed the stage's outputs. `make venv` installs this module into the
virtualenv with a `.pth` file that imports it: each Python process the virtualenv starts
(`.venv/bin/dvc`, `.venv/bin/mlflow`, ...) puts the virtualenv's `bin/` first on its own PATH, as
activating does, and the commands it starts inherit it. Nothing changes for an activated shell
(the directory is already on PATH) nor for any other interpreter.

    .venv/bin/python setup/pmoss_venv_path.py     # install into the running virtualenv (make venv)
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

PTH = "pmoss-venv-path.pth"


def bin_dir() -> str | None:
    """The running virtualenv's bin/, None outside a virtualenv."""
    return os.path.join(sys.prefix, "bin") if sys.prefix != sys.base_prefix else None


def prepend(directory: str | None, environ: MutableMapping[str, str]) -> None:
    """Put `directory` first on environ's PATH unless it is on it already."""
    path = environ.get("PATH", "")
    if directory and directory not in path.split(os.pathsep):
        environ["PATH"] = directory + os.pathsep + path if path else directory


def install() -> str:
    """Copy this module into the running virtualenv's site-packages, with the .pth that imports it."""
    import shutil
    import sysconfig

    if bin_dir() is None:
        raise SystemExit(f"{sys.executable} is not a virtualenv's interpreter: nothing to install into")
    site = sysconfig.get_paths()["purelib"]
    shutil.copyfile(__file__, os.path.join(site, "pmoss_venv_path.py"))
    with open(os.path.join(site, PTH), "w") as f:
        f.write("import pmoss_venv_path\n")  # site.py executes .pth lines that start with `import`
    return site


if __name__ == "__main__":
    print(f"{PTH}: the virtualenv's bin/ goes first on PATH for what it runs (installed in {install()})")
else:
    prepend(bin_dir(), os.environ)
