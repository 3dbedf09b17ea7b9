"""The docs are executable: every fenced command block of README.md and docs/*.md runs as written.

Each ```bash block carries a marker on the line above it, which this test reads:

    <!-- doc-test: fast -->            run by default (the whole fast set takes about a minute)
    <!-- doc-test: slow -->            needs the demo's outputs or takes minutes: `pytest -m slow`
    <!-- doc-test: slow ci -->         slow, and also in `make test`'s CI slice (`-m "slow and ci"`)
    <!-- doc-test: skip: REASON -->    not run; the reason is listed (test_skipped_blocks_say_why)

A bash block without a marker, a marker the test does not know, and a fenced block without a
language (or tagged `sh`/`shell`/`console` instead of `bash`) fail `test_every_block_is_classified`,
so a new doc is checked from the day it lands. Blocks that are not commands are tagged `text`,
`json`, `python` or `yaml`.

How a block runs: as one script, `bash -lc 'set -euo pipefail; BLOCK'`, from a fresh login shell
with a clean environment (`env -i`: HOME in a temporary directory, PATH=/usr/local/bin:/usr/bin:/bin,
no activated venv, no MLFLOW_TRACKING_URI), in a clean clone of the committed HEAD made with
`git clone`, so untracked and uncommitted files do not leak in (commit before running it). Two
shortcuts, because building both from scratch per test takes minutes: the clone's `.venv` is a
symlink to the virtualenv running the tests, and its `build/` a symlink to the tree's C build
(`$PMOSS_LIB`'s, else `build/`). The shared venv's `pmoss` is an editable install of one checkout,
so the shell also gets `PYTHONPATH=<clone>/src`: the clone's own code runs.

The slow blocks run in doc order in one clone where the pipeline ran first, the README's way
from a fresh shell (`source .venv/bin/activate; dvc repro`, ~7 minutes on 2 cores); the CI slice
runs the README's short `dvc repro build-offline` in its own clone. Relative links and their
#anchors in the same files are checked too (test_relative_links_resolve).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)
DATA_LANGS = {"text", "json", "python", "yaml"}  # shown, not run
SHELL_LANGS = {"sh", "shell", "console", "zsh"}  # commands, but tag them bash so they run
FAST_TIMEOUT_S, SLOW_TIMEOUT_S, DEMO_TIMEOUT_S = 300, 1800, 5400  # the demo: ~7 min on 2 quiet cores, 40+ on a shared, loaded one


def _git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def _head() -> str | None:
    try:
        return _git("rev-parse", "HEAD").strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


HEAD = _head()


def _doc_files() -> list[str]:
    """README.md and docs/*.md as committed at HEAD (what a clone holds)."""
    if HEAD is None:
        return []
    names = _git("ls-tree", "--name-only", HEAD, "README.md", "docs/").split()
    return [n for n in names if n == "README.md" or (n.startswith("docs/") and n.endswith(".md"))]


@dataclass(frozen=True)
class Block:
    path: str  # repository-relative doc
    line: int  # the fence's line
    lang: str
    marker: str | None  # the doc-test marker's text, None without one
    script: str

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def kind(self) -> str:
        """fast | slow | ci | skip | '' (unclassified)."""
        m = (self.marker or "").split(":", 1)[0].split()
        if m == ["fast"]:
            return "fast"
        if m == ["slow"]:
            return "slow"
        if m == ["slow", "ci"]:
            return "ci"
        if m == ["skip"] and self.reason:
            return "skip"
        return ""

    @property
    def reason(self) -> str:
        return (self.marker or "").split(":", 1)[1].strip() if ":" in (self.marker or "") else ""


def blocks_of(path: str, text: str) -> list[Block]:
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        above = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(above)
        out.append(Block(path, line, m.group(1), marker.group(1) if marker else None, m.group(2)))
    return out


ALL = [b for p in _doc_files() for b in blocks_of(p, _git("show", f"{HEAD}:{p}"))]
BASH = [b for b in ALL if b.lang == "bash"]


def test_docs_were_found() -> None:
    if HEAD is None:
        pytest.skip("not a git checkout: the doc test clones HEAD")
    assert any(b.path == "README.md" for b in BASH), "README.md has no bash block: the parser is broken"


def test_every_block_is_classified() -> None:
    bad = []
    for b in ALL:
        if b.lang == "bash" and not b.kind:
            bad.append(f"{b.id}: bash block without a known <!-- doc-test: fast | slow | slow ci | skip: REASON --> marker above it"
                       f" (got {b.marker!r})")  # fmt: skip
        elif b.lang in SHELL_LANGS:
            bad.append(f"{b.id}: tag the block `bash` (and mark it) so this test runs it, not `{b.lang}`")
        elif not b.lang:
            bad.append(f"{b.id}: fenced block without a language: `bash` (commands, then mark it) or `text` (output, diagrams)")
        elif b.lang not in DATA_LANGS | {"bash"}:
            bad.append(f"{b.id}: unknown block language `{b.lang}` (known: bash, {', '.join(sorted(DATA_LANGS))})")
        elif b.lang != "bash" and b.marker:
            bad.append(f"{b.id}: a doc-test marker on a `{b.lang}` block, which is never run")
    assert not bad, "\n".join(bad)


def test_skipped_blocks_say_why() -> None:
    """The list of what the docs show but this test does not run, each with its reason (-rA shows it)."""
    skipped = [b for b in BASH if b.kind == "skip"]
    for b in skipped:
        assert len(b.reason) > 15, f"{b.id}: a skip needs a reason a reader can check, got {b.reason!r}"
        print(f"skipped {b.id}: {b.reason}")


# ---- running blocks --------------------------------------------------------------------------
def _build_dir() -> Path:
    lib = os.environ.get("PMOSS_LIB")
    return Path(lib).resolve().parents[1] if lib else REPO / "build"


def make_clone(dest: Path) -> Path:
    """A clean clone of HEAD, with the shared venv and C build linked in (see the module doc)."""
    if HEAD is None:
        pytest.skip("not a git checkout: the doc test clones HEAD")
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(REPO), str(dest)], check=True)
    subprocess.run(["git", "checkout", "-q", "--detach", HEAD], cwd=dest, check=True)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    if (_build_dir() / "runtime/libpmoss.so").exists():
        (dest / "build").symlink_to(_build_dir())
    return dest


def run_block(script: str, clone: Path, home: Path, timeout_s: int) -> subprocess.CompletedProcess[str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb",
           "USER": os.environ.get("USER", "root"), "PYTHONPATH": str(clone / "src")}  # fmt: skip
    return subprocess.run(["env", "-i", *[f"{k}={v}" for k, v in env.items()], "bash", "-lc", f"set -euo pipefail\n{script}"],
                          cwd=clone, capture_output=True, text=True, timeout=timeout_s)  # fmt: skip


def _check(b: Block, r: subprocess.CompletedProcess[str]) -> None:
    assert r.returncode == 0, (f"{b.id}: the block failed (exit {r.returncode}) from a fresh shell in a clean clone:\n"
                               f"{b.script}\n--- stdout (tail)\n{r.stdout[-3000:]}\n--- stderr (tail)\n{r.stderr[-3000:]}")  # fmt: skip


@pytest.mark.parametrize("block", [b for b in BASH if b.kind == "fast"], ids=lambda b: b.id)
def test_fast_block_runs(block: Block, tmp_path: Path) -> None:
    clone = make_clone(tmp_path / "clone")
    _check(block, run_block(block.script, clone, tmp_path / "home", FAST_TIMEOUT_S))


@pytest.fixture(scope="session")
def demo_clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One clone where the pipeline ran the README's way, for the blocks that need its outputs."""
    root = tmp_path_factory.mktemp("docs-demo")
    clone = make_clone(root / "clone")
    r = run_block("source .venv/bin/activate\ndvc repro", clone, root / "home", DEMO_TIMEOUT_S)
    assert r.returncode == 0, f"dvc repro from a fresh shell failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    # the lock as the demo left it, before later blocks run stages of their own: a fresh demo's lock of HEAD
    shutil.copyfile(clone / "dvc.lock", root / "dvc.lock.after-demo")
    return clone, root / "home"


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BASH if b.kind == "slow"], ids=lambda b: b.id)
def test_slow_block_runs_after_the_demo(block: Block, demo_clone: tuple[Path, Path]) -> None:
    clone, home = demo_clone
    _check(block, run_block(block.script, clone, home, SLOW_TIMEOUT_S))


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.parametrize("block", [b for b in BASH if b.kind == "ci"], ids=lambda b: b.id)
def test_ci_block_runs(block: Block, tmp_path: Path) -> None:
    clone = make_clone(tmp_path / "clone")
    _check(block, run_block(block.script, clone, tmp_path / "home", SLOW_TIMEOUT_S))


def test_ci_slice_exists() -> None:
    assert any(b.kind == "ci" for b in BASH), "no doc block runs in CI: mark a short one `slow ci`"


# ---- links ------------------------------------------------------------------------------------
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    without_code = FENCE.sub("", text)
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", without_code, re.M)}


def test_relative_links_resolve() -> None:
    docs = {p: (REPO / p).read_text() for p in ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]}
    bad = []
    for path, text in docs.items():
        for m in LINK.finditer(FENCE.sub("", text)):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            file, _, anchor = target.partition("#")
            dest = (REPO / path).parent / file if file else REPO / path
            if not dest.exists():
                bad.append(f"{path}: link to {target}: {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                bad.append(f"{path}: link to {target}: no heading with anchor #{anchor} in {file or path}")
    assert not bad, "\n".join(bad)


def test_slug_matches_github() -> None:
    assert slug("## The demo's wall time (2026-11-26, eighteenth session; #16 item 3, target `make demo` ≤ 8 min)".lstrip("# ")) == (
        "the-demos-wall-time-2026-11-26-eighteenth-session-16-item-3-target-make-demo--8-min")
    assert slug("4.2 Schedule") == "42-schedule"
