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
