"""The layout rules of docs/architecture.md that import-linter cannot check: no znode path is
spelled outside zk/paths.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bench", "broker", "chaos", "cli", "client", "controller", "devcluster", "ledger", "verify", "zk")
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
