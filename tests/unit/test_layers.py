"""The import rules of docs/architecture.md ("Layout"), checked over the source: arrows point down
(app → middleware → deja → config; ``sim/`` and ``tuning/`` beside the domain, importing it, never
imported by it), no import cycle between the domain's subpackages, and no private name imported
from another module. Every import counts, a function's lazy one included. Rerun with
``pytest tests/unit/test_layers.py``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("app", "middleware", "config", "deja", "sim", "tuning")
#: What each top-level package may import of the project (besides itself).
ALLOWED: dict[str, set[str]] = {
    "app": {"middleware", "config", "deja", "sim", "tuning"},
    "middleware": {"config", "deja"},
    "deja": {"config"},
    "sim": {"deja"},
    "tuning": {"config", "deja", "sim"},
    "config": set(),
}


def modules() -> Iterator[tuple[str, Path]]:
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def imports(name: str, path: Path) -> Iterator[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every import in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            yield module, [a.name for a in node.names], node.lineno


def domain_unit(module: str) -> str | None:
    """The domain subpackage (or top-level module) a module belongs to: ``deja.cache``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "deja" and len(parts) > 1 else None


def test_arrows_point_down() -> None:
    wrong = []
    for name, path in modules():
        top = name.split(".")[0]
        for target, _, line in imports(name, path):
            other = target.split(".")[0]
            if other in PRODUCT and other != top and other not in ALLOWED[top]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "imports that climb a layer:\n" + "\n".join(wrong)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def domain_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in modules():
        source = domain_unit(name)
        if source is None:
            continue
        for target, _, _ in imports(name, path):
            unit = domain_unit(target)
            if unit is not None and unit != source:
                graph.setdefault(source, set()).add(unit)
    return graph


def test_no_import_cycle_between_domain_subpackages() -> None:
    cycle = find_cycle(domain_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}}) is None


def test_no_private_name_is_imported_from_another_module() -> None:
    wrong = []
    for name, path in modules():
        for target, names, line in imports(name, path):
            if target.split(".")[0] not in PRODUCT or target == name:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                wrong.append(f"{path.relative_to(ROOT)}:{line} takes {private} from {target}")
    assert not wrong, "private names imported across modules:\n" + "\n".join(wrong)
