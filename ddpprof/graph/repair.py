"""Recorded dependencies that contradict each other: edges that make a cycle, dropped so that a
step graph always has a replay and a critical path. Pure.

A cycle means that some edges claim an order the recorded times do not show (clocks skewed
between ranks, between a host and its device, or calls matched across ranks that were not one
collective). Edges inside a cycle are dropped, least trusted kind first (an inferred stream
wait, a completion, an arrival across ranks, an issue, a launch; never the order of a lane),
and within a kind those the recorded times contradict the most, until no cycle is left. The
count of each kind dropped is reported in a note (``docs/critical-path.md``)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .model import EdgeKind, Node

#: Least trusted first: which edges go first when the dependencies make a cycle.
TRUST = (EdgeKind.STREAM, EdgeKind.HANDOFF, EdgeKind.COMPLETE, EdgeKind.ARRIVAL, EdgeKind.ISSUE,
         EdgeKind.LAUNCH)


def acyclic(nodes: list[Node], edges: list[tuple[int, int, EdgeKind]]
            ) -> tuple[list[tuple[int, int, EdgeKind]], Counter[EdgeKind]]:
    """``edges`` without those that make cycles (see the module), and how many of each kind
    were dropped."""
    dropped: Counter[EdgeKind] = Counter()
    start = np.array([node.start_us for node in nodes], dtype=np.float64)
    by_start = np.lexsort((np.arange(start.size), start))
    position = np.empty(start.size, dtype=np.int64)
    position[by_start] = np.arange(start.size)
    if edges and np.all(position[[e[0] for e in edges]] < position[[e[1] for e in edges]]):
        return edges, dropped     # every edge forward in time: no cycle
    while True:
        cyclic = _edges_in_cycles(len(nodes), edges)
        if not cyclic:
            return edges, dropped
        for kind in TRUST:
            mine = [k for k in cyclic if edges[k][2] == kind]
            if mine:
                break
        else:      # only the order of lanes is left: cannot be (a lane's order is in time)
            raise AssertionError("a cycle made of program and step edges")
        # those of that kind the recorded times contradict, else the one they fit least
        drop = {k for k in mine if _contradiction(nodes, edges[k]) > 0} or {
            max(mine, key=lambda k: (_contradiction(nodes, edges[k]), k))}
        dropped[kind] += len(drop)
        edges = [edge for k, edge in enumerate(edges) if k not in drop]


def _contradiction(nodes: list[Node], edge: tuple[int, int, EdgeKind]) -> float:
    """How far the recorded times go against ``edge`` (µs; positive: its target started
    before its source could let it). A launch may end after its kernel started: its start
    is what counts."""
    src, dst, kind = edge
    before = nodes[src].start_us if kind == EdgeKind.LAUNCH else nodes[src].end_us
    return before - nodes[dst].start_us


def _edges_in_cycles(n: int, edges: list[tuple[int, int, EdgeKind]]) -> list[int]:
    """Positions of the edges whose two ends lie in one strongly connected component of more
    than one node (Tarjan's algorithm, iterative)."""
    if not edges:
        return []
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    # a quick test first: no cycle when Kahn's algorithm orders every node
    indegree = np.bincount(dst, minlength=n)
    by_src = np.argsort(src, kind="stable")
    ptr = np.searchsorted(src[by_src], np.arange(n + 1)).tolist()
    targets = dst[by_src].tolist()
    ready = np.flatnonzero(indegree == 0).tolist()
    left = indegree.tolist()
    seen = 0
    while ready:
        node = ready.pop()
        seen += 1
        for target in targets[ptr[node]:ptr[node + 1]]:
            left[target] -= 1
            if left[target] == 0:
                ready.append(target)
    if seen == n:
        return []
    component = _components(n, ptr, targets)
    size = np.bincount(component, minlength=n)
    cyclic = (component[src] == component[dst]) & (size[component[src]] > 1)
    return np.flatnonzero(cyclic).tolist()


def _components(n: int, ptr: list[int], targets: list[int]) -> np.ndarray:
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    component = np.full(n, -1, dtype=np.int64)
    counter = found = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, ptr[root])]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            node, at = work[-1]
            if at < ptr[node + 1]:
                work[-1] = (node, at + 1)
                target = targets[at]
                if index[target] < 0:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack[target] = True
                    work.append((target, ptr[target]))
                elif on_stack[target]:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component[member] = found
                    if member == node:
                        break
                found += 1
    return component
