"""Layering holds at run time: the core imports no I/O library, the console reaches the engine through the client."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_core_stays_free_of_io_and_ui_libraries() -> None:
    code = ("import sys, wloadctl.core.engine, wloadctl.core.planfile, wloadctl.core.dag, wloadctl.core.verbs, "
            "wloadctl.core.explain, wloadctl.core.calendar, wloadctl.core.loops, wloadctl.core.plancodec; "
            "print(sorted(m for m in ('textual', 'rich', 'posix_ipc', 'sqlite3', 'socket') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_transport_imports_posix_ipc_and_one_store_module_each_database_driver() -> None:
    for path in (ROOT / "wloadctl").rglob("*.py"):
        mods = _imports(path)
        rel = path.relative_to(ROOT).as_posix()
        if "posix_ipc" in mods:
            assert rel.startswith("wloadctl/ipc/"), rel
        if "sqlite3" in mods:
            assert rel == "wloadctl/store/sqlite.py", rel
        if "psycopg" in mods or any(m.startswith("psycopg.") for m in mods):
            assert rel == "wloadctl/store/postgres.py", rel
        if any(m == "nats" or m.startswith("nats.") for m in mods):
            assert rel.startswith("wloadctl/remote/"), rel
        assert not any(m == "textual" or m.startswith("textual.") for m in mods), rel


def test_the_console_does_not_touch_queues_or_the_database_directly() -> None:
    for path in (ROOT / "tui").rglob("*.py"):
        mods = _imports(path)
        rel = path.relative_to(ROOT).as_posix()
        assert "posix_ipc" not in mods and "sqlite3" not in mods, rel
        assert not any(m.startswith(("wloadctl.ipc", "wloadctl.store", "wloadctl.procs.scheduler")) for m in mods), rel


def test_the_clients_verb_list_is_the_cores() -> None:
    from wloadctl.client import VERBS as client_verbs
    from wloadctl.core.verbs import VERBS as core_verbs

    assert tuple(client_verbs) == tuple(core_verbs)


def test_the_command_line_and_the_remote_layer_load_no_broker_client_until_a_link_opens() -> None:
    code = ("import sys, wloadctl.cli, wloadctl.remote.agents, wloadctl.remote.wire, wloadctl.remote.link; "
            "wloadctl.cli.build_parser().parse_args(['status']); print('nats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _module_graph() -> dict[str, set[str]]:
    """Project module -> project modules it imports anywhere in its text (lazy and TYPE_CHECKING ones too)."""
    files: dict[str, Path] = {}
    for pkg in ("wloadctl", "tui"):
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for name in names:
                while name and name not in files:
                    name = name.rpartition(".")[0]
                # A package's __init__ is where names are looked up, not a layer of its own.
                if name and name != mod and files[name].name != "__init__.py":
                    targets.add(name)
        graph[mod] = targets
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each set of modules that reach one another, with more than one member."""
    reach: dict[str, set[str]] = {m: set() for m in graph}
    for m in graph:
        todo = list(graph[m])
        while todo:
            n = todo.pop()
            if n not in reach[m]:
                reach[m].add(n)
                todo.extend(graph[n])
    seen: set[str] = set()
    out: list[list[str]] = []
    for m in sorted(graph):
        if m in seen:
            continue
        group = sorted({m} | {n for n in reach[m] if m in reach[n]})
        seen.update(group)
        if len(group) > 1:
            out.append(group)
    return out


def test_no_import_circle_in_the_core_the_processes_the_command_line_or_the_console() -> None:
    layered = ("wloadctl.core", "wloadctl.procs", "wloadctl.cli", "tui")
    circles = [c for c in _circles(_module_graph()) if any(m.startswith(layered) for m in c)]
    assert circles == []
