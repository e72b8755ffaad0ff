"""``scripts/import_cycles.py`` (in ``make lint``): it finds circles, and the project has none."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_cycles.py"


def _script():
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _graph(*arrows: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in arrows:
        graph.add_module(importer)
        graph.add_module(imported)
        graph.add_import(importer=importer, imported=imported)
    return graph


def test_a_circle_is_found_with_every_module_in_it():
    graph = _graph(("app.models", "app.jobs"), ("app.jobs", "app.live"), ("app.live", "app.models"),
                   ("app.views", "app.models"), ("app.a", "app.b"), ("app.b", "app.a"))  # fmt: skip
    assert _script().circles(graph) == [["app.jobs", "app.live", "app.models"], ["app.a", "app.b"]]


def test_a_tree_of_imports_is_no_circle():
    graph = _graph(("app.views", "app.services"), ("app.services", "app.models"), ("app.views", "app.models"))
    assert _script().circles(graph) == []


def test_the_project_has_no_import_circle():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("no import circle among ")
