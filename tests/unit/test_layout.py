"""The layout rules of docs/architecture.md that import-linter cannot check: no znode path is
spelled outside zk/paths.py, no module imports itself round a circle, and no module outside
tests is past 500 lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "bench",
    "broker",
    "chaos",
    "cli",
    "client",
    "controller",
    "devcluster",
    "ledger",
    "sim",
    "verify",
    "zk",
)
ZNODE = re.compile(
    r"^/(brokers|controller|controller_epoch|admin|config|isr_change_notification"
    r"|log_dir_event_notification|latest_producer_id_block|cluster)(/|$)"
)


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _code_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that are code, not docstrings or other bare-string statements."""
    bare = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare
    ]


def test_no_znode_path_is_spelled_outside_zk_paths() -> None:
    spelled = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in _sources()
        if path != ROOT / "zk" / "paths.py"
        for line, text in _code_strings(ast.parse(path.read_text()))
        if ZNODE.match(text)
    ]
    assert not spelled, "znode paths belong in zk/paths.py:\n" + "\n".join(spelled)


def test_the_rule_sees_a_spelled_path() -> None:
    tree = ast.parse('"""/brokers/ids in a docstring is fine."""\nPATH = "/brokers/ids"\nx = f"/admin/{t}"\n')
    assert [text for _, text in _code_strings(tree) if ZNODE.match(text)] == ["/brokers/ids", "/admin/"]


def _import_cycles() -> list[list[str]]:
    """Strongly connected groups of our modules by their imports, typing-only ones included (a
    circle through ``TYPE_CHECKING`` still ties the modules together for a reader), found
    with grimp, import-linter's graph."""
    import grimp

    graph = grimp.build_graph(*PACKAGES)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycle() -> None:
    cycles = _import_cycles()
    assert not cycles, f"import circles: {cycles}"


def test_no_module_outside_tests_is_past_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in _sources()
        if (n := len(path.read_text().splitlines())) > 500
    }
    assert not long, f"split these by mechanism (docs/architecture.md): {long}"
