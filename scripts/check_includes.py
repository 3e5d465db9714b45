#!/usr/bin/env python3
"""Check the include graph between the folders of src/ (issue 17).

Each folder of src/ is a layer with a rank (docs/ARCHITECTURE.md, "Layers");
a file of a folder may include headers of its own folder and of folders of a
lower rank only. Fails (exit 1) when a folder includes a higher or an equal
rank's folder, when the graph between folders has a cycle, or when a folder
has no rank (a new layer must be placed here and in src/CMakeLists.txt).

Usage: check_includes.py [SRC_DIR]   (default: src next to this script)
       check_includes.py --print [SRC_DIR]   also print the graph
       check_includes.py --self-test        check the checker on made-up graphs
"""
import os
import re
import sys

# Lower ranks are below. Equal ranks do not see each other.
RANKS = {
    "util": 0,
    "na": 1, "topo": 1, "proc": 1,
    "bulk": 2,
    "core": 3,
    "group": 4,
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+)/[^"]+"', re.M)


def include_graph(src):
    """{folder: {included folder: [files that include it]}} from src/**/*.[ch]."""
    graph = {}
    for root, _dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        if rel == ".":
            continue
        folder = rel.split(os.sep)[0]
        edges = graph.setdefault(folder, {})
        for name in files:
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for target in INCLUDE.findall(f.read()):
                    if target != folder:
                        edges.setdefault(target, []).append(os.path.relpath(path, src))
    return graph


def find_cycle(graph):
    """A list of folders forming a cycle, or None."""
    state = {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, stack)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def check(graph, ranks):
    """The problems found, as lines of text (empty: the graph is fine)."""
    problems = []
    folders = set(graph) | {t for edges in graph.values() for t in edges}
    for folder in sorted(folders - set(ranks)):
        problems.append(f"{folder}: a folder of src/ with no rank in {__file__}")
    for folder in sorted(graph):
        for target, files in sorted(graph[folder].items()):
            if folder in ranks and target in ranks and ranks[target] >= ranks[folder]:
                problems.append(f"{folder} (rank {ranks[folder]}) includes {target} "
                                f"(rank {ranks[target]}): {', '.join(sorted(set(files)))}")
    cycle = find_cycle(graph)
    if cycle:
        problems.append("cycle: " + " -> ".join(cycle))
    return problems


def self_test():
    ok = {"core": {"na": ["core/a.c"]}, "na": {"util": ["na/b.c"]}, "util": {}}
    up = {"na": {"core": ["na/x.c"]}, "core": {}}
    cyc = {"a": {"b": ["a/1.c"]}, "b": {"a": ["b/1.c"]}}
    same = {"na": {"topo": ["na/y.c"]}, "topo": {}}
    unknown = {"core": {"newdir": ["core/z.c"]}, "newdir": {}}
    ranks = dict(RANKS, a=5, b=6)
    assert check(ok, ranks) == [], check(ok, ranks)
    assert any("includes core" in p for p in check(up, ranks))
    assert any(p.startswith("cycle: a -> b -> a") for p in check(cyc, ranks))
    assert any("includes topo" in p for p in check(same, ranks))
    assert any("newdir: a folder" in p for p in check(unknown, ranks))
    print("check_includes self-test: ok")
    return 0


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if "--self-test" in argv:
        return self_test()
    src = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                            "..", "src")
    graph = include_graph(src)
    if "--print" in argv:
        for folder in sorted(graph, key=lambda f: (RANKS.get(f, 99), f)):
            print(f"{folder} -> {' '.join(sorted(graph[folder])) or '(nothing)'}")
    problems = check(graph, RANKS)
    for p in problems:
        print("check_includes: " + p, file=sys.stderr)
    if problems:
        return 1
    print(f"check_includes: {len(graph)} folders of {src}, no cycle, every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
