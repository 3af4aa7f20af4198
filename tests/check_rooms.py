#!/usr/bin/env python3
"""The room rule of docs/architecture.md, checked: a room of launcher/ includes only rooms on its
floor or below it, no two rooms include each other (directly or around a cycle), rendezvous/
and worker_runtime/ include nothing of launcher/, and base/ includes nothing of the project.
The floors are read from the table in docs/architecture.md, so the page and the code cannot
drift apart. Exits 1 naming every include that breaks the rule.

    check_rooms.py SOURCE_DIR
"""
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`launcher/([^`]*)`\s*\|", re.M)
SUFFIXES = {".cpp", ".hpp", ".in", ".h"}


def floors(root):
    table = (root / "docs" / "architecture.md").read_text()
    out = {}
    for floor, name in ROW.findall(table):
        room = name.rstrip("/") if name.endswith("/") else "."  # launcher/launch.cpp: the top
        out[room] = int(floor)
    if len(out) < 5:
        sys.exit("check_rooms: the rooms table of docs/architecture.md was not found "
                 "(rows like '| 2 | `launcher/config/` | ...')")
    return out


def room_of(path):
    """The room of a path below launcher/: its first folder, or '.' for a file at the top."""
    parts = Path(path).parts
    return parts[1] if len(parts) > 2 else "."


def main(root):
    root = Path(root)
    floor = floors(root)
    problems = []
    edges = {}  # room -> {room it includes: an example "file: include"}
    for top in ("launcher", "rendezvous", "worker_runtime", "base"):
        for f in sorted((root / top).rglob("*")):
            if f.suffix not in SUFFIXES or not f.is_file():
                continue
            rel = f.relative_to(root).as_posix()
            for inc in INCLUDE.findall(f.read_text(errors="replace")):
                if top == "base" and inc.split("/")[0] in ("launcher", "rendezvous", "worker_runtime", "base"):
                    if inc.split("/")[0] != "base":
                        problems.append(f"{rel}: includes {inc}; base/ is below everything")
                    continue
                if top in ("rendezvous", "worker_runtime") and inc.startswith("launcher/"):
                    problems.append(f"{rel}: includes {inc}; {top}/ is below launcher/")
                    continue
                if top != "launcher" or not inc.startswith("launcher/"):
                    continue
                src, dst = room_of(rel), room_of(inc)
                if src == dst:
                    continue
                for r in (src, dst):
                    if r not in floor:
                        problems.append(f"{rel}: includes {inc}; room launcher/{r}/ is not in docs/architecture.md's table")
                if src in floor and dst in floor and floor[dst] > floor[src]:
                    problems.append(f"{rel}: includes {inc}; launcher/{dst}/ (floor {floor[dst]}) is above "
                                    f"launcher/{src}/ (floor {floor[src]})")
                edges.setdefault(src, {}).setdefault(dst, f"{rel}: {inc}")
    # Two rooms that include each other, directly or around a cycle.
    seen_cycles = set()

    def walk(start, room, path):
        for nxt in sorted(edges.get(room, {})):
            if nxt == start:
                cycle = path + [start]
                key = frozenset(cycle)
                if key not in seen_cycles:
                    seen_cycles.add(key)
                    hops = "; ".join(edges[a][b] for a, b in zip(cycle, cycle[1:]))
                    problems.append("rooms include each other: " + " -> ".join(f"launcher/{r}/" for r in cycle) +
                                    f" ({hops})")
            elif nxt not in path and len(path) < len(edges) + 1:
                walk(start, nxt, path + [nxt])

    for room in sorted(edges):
        walk(room, room, [room])
    for p in problems:
        print(p)
    if problems:
        print(f"check_rooms: {len(problems)} includes break the room rule of docs/architecture.md")
        return 1
    print(f"check_rooms: {sum(len(v) for v in edges.values())} room-to-room includes keep the rule")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]))
