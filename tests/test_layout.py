"""The package reads as the data flow (docs/layout.md): no import cycle, and imports run one way
(contracts <- sim/collect <- data <- learn <- evaluate <- serve <- cli). Built from the source
with ast, so a lazy import inside a function or under TYPE_CHECKING counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Layer of each top-level part; a module may import its own layer or lower ones only.
LAYERS = {
    "pmoss": 0, "pmoss.bench": 0, "pmoss.contracts": 0,
    "pmoss.sim": 1, "pmoss.collect": 1,
    "pmoss.data": 2, "pmoss.learn": 3, "pmoss.evaluate": 4, "pmoss.doctor": 4, "pmoss.serve": 5,
    "pmoss.cli": 6, "pmoss.__main__": 6,
    "pmoss.progress": 0,  # progress lines for every long stage; imports only contracts
}  # fmt: skip
# sim and collect share a layer but not a dependency direction: collect drives the simulator.
FORBIDDEN = {("pmoss.sim", "pmoss.collect")}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports (a package import resolves to its __init__)."""
    files = {module_name(p, package.parent): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        deps: set[str] = set()
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            deps.update(n for n in names if n in files and n != mod)
        graph[mod] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (iterative DFS, three colours)."""
    colour = dict.fromkeys(graph, 0)  # 0 new, 1 on the stack, 2 done
    for start in sorted(graph):
        if colour[start]:
            continue
        stack, path = [(start, iter(sorted(graph[start])))], [start]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour[child] == 1:
                return path[path.index(child):] + [child]
            elif colour[child] == 0:
                colour[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
    return None


def part(mod: str) -> str:
    return max((p for p in LAYERS if mod == p or mod.startswith(p + ".")), key=len)


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph(SRC / "pmoss"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_run_one_way() -> None:
    bad = []
    for mod, deps in import_graph(SRC / "pmoss").items():
        for dep in deps:
            a, b = part(mod), part(dep)
            if LAYERS[b] > LAYERS[a] or (a, b) in FORBIDDEN:
                bad.append(f"{mod} imports {dep} ({a} is below {b})")
    assert not bad, "\n".join(sorted(bad))


def test_every_module_has_a_layer() -> None:
    for mod in import_graph(SRC / "pmoss"):
        assert part(mod) in LAYERS, f"{mod}: not in a known part; add it to LAYERS and docs/layout.md"


@pytest.mark.parametrize("extra", ["from pmoss.learn.train import fit", "import pmoss.serve.gate"])
def test_cycle_check_can_fail(tmp_path: Path, extra: str) -> None:
    """A cycle added to a copy of the package is found and named."""
    import shutil

    copy = tmp_path / "pmoss"
    shutil.copytree(SRC / "pmoss", copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "contracts" / "errors.py"
    target.write_text(target.read_text() + f"\n{extra}\n")
    cycle = find_cycle(import_graph(tmp_path / "pmoss"))
    assert cycle is not None and "pmoss.contracts.errors" in cycle, cycle
