"""Print every import circle among the project's modules; exit 1 when there is one (``make lint``).

Built on grimp, the graph import-linter uses, so it sees what ``lint-imports`` sees: imports at module
level, inside functions and under ``TYPE_CHECKING`` alike. A circle is a strongly connected group of
modules (Tarjan's algorithm), each printed with one path around it.

    .venv/bin/python scripts/import_cycles.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("contract", "core", "accounts", "inference", "console", "evalsets", "bench")


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of two or more modules, each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found, key=len, reverse=True)


def main() -> int:
    sys.path.insert(0, str(ROOT))  # the packages are found from the repository, wherever this runs
    graph = grimp.build_graph(*PACKAGES)
    groups = circles(graph)
    for group in groups:
        path = graph.find_shortest_chain(importer=group[0], imported=group[-1]) or ()
        back = graph.find_shortest_chain(importer=group[-1], imported=group[0]) or ()
        print(f"import circle of {len(group)} modules: {', '.join(group)}")
        print(f"  e.g. {' -> '.join(path)} -> ... -> {' -> '.join(back[1:])}")
    if not groups:
        print(f"no import circle among {len(graph.modules)} modules")
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main())
