"""`.venv/bin/dvc repro` without an activated virtualenv (#40 item 4): the stages call `pmoss` from
PATH, which such a shell lacks (exit 127, after DVC removed the stage's outputs). `make venv`
installs setup/pmoss_venv_path.py, which puts the virtualenv's bin/ first on PATH for every
process its interpreter runs, as activating does."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

SETUP = Path(__file__).resolve().parents[1] / "setup"
BARE = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}  # a fresh shell: no venv activated


def _env(tmp: Path) -> list[str]:
    return ["env", "-i", f"HOME={tmp}", *[f"{k}={v}" for k, v in BARE.items()]]


def test_an_installed_venv_runs_its_own_tools_from_path(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    tool = venv / "bin" / "pmoss"
    tool.write_text("#!/bin/sh\necho the venv pmoss\n")
    tool.chmod(0o755)
    run_tool = "import subprocess, sys; sys.exit(subprocess.run(['sh', '-c', 'pmoss']).returncode)"
    before = subprocess.run([*_env(tmp_path), str(venv / "bin" / "python"), "-c", run_tool], capture_output=True, text=True, check=False)
    assert before.returncode == 127  # the issue: the venv's own tool is not found

    r = subprocess.run([str(venv / "bin" / "python"), str(SETUP / "pmoss_venv_path.py")], capture_output=True, text=True, check=True)
    assert "pmoss-venv-path.pth" in r.stdout
    after = subprocess.run([*_env(tmp_path), str(venv / "bin" / "python"), "-c", run_tool], capture_output=True, text=True, check=False)
    assert after.returncode == 0 and after.stdout == "the venv pmoss\n", after.stderr

    # an activated shell already has the directory first: PATH is left as it is
    activated = f"{venv / 'bin'}:/usr/bin:/bin"
    path = subprocess.run(["env", "-i", f"PATH={activated}", str(venv / "bin" / "python"), "-c", "import os; print(os.environ['PATH'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert path == activated
    # the interpreter the venv was made from is untouched
    base = subprocess.run([*_env(tmp_path), sys._base_executable, "-c", "import os; print(os.environ['PATH'])"], capture_output=True, text=True, check=False)  # type: ignore[attr-defined]
    assert base.stdout.strip() == BARE["PATH"]


def test_dvc_repro_from_the_venv_finds_pmoss_without_activation(tmp_path):
    """The README's case with the real DVC: a stage calling `pmoss`, DVC started by the venv's
    interpreter from a shell without the venv on PATH. A venv made by `make venv` has the .pth and
    must succeed as it is; an older one must show the README's failure, then succeed once the module
    is imported as the .pth would (the first test checks the .pth itself)."""
    (tmp_path / "dvc.yaml").write_text("stages:\n  help:\n    cmd: pmoss --help > help.txt\n    outs: [help.txt]\n")
    subprocess.run([*_env(tmp_path), sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    repro = "import sys; from dvc.cli import main; sys.exit(main(['repro']))"
    installed = (Path(sysconfig.get_paths()["purelib"]) / "pmoss-venv-path.pth").exists()
    if not installed:
        bare = subprocess.run([*_env(tmp_path), "DVC_NO_ANALYTICS=1", sys.executable, "-c", repro], cwd=tmp_path, capture_output=True, text=True, check=False)
        assert bare.returncode != 0 and "pmoss: not found" in bare.stderr and "127" in bare.stdout + bare.stderr  # what the README warned of
        repro = f"import sys; sys.path.insert(0, {str(SETUP)!r}); import pmoss_venv_path; {repro}"
    r = subprocess.run([*_env(tmp_path), "DVC_NO_ANALYTICS=1", sys.executable, "-c", repro], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Usage: pmoss" in (tmp_path / "help.txt").read_text()
