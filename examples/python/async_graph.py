"""Parla's task graph with `await`, in weft: a reduction tree of async
tasks over a task space.

Leaves T[0, i] square their number; each inner task T[l, i] awaits its two
children (spawned by nobody but the level below, by key) and adds their
results, without holding a worker while it waits.  The root task spawns the
whole tree from inside itself and awaits its top — nested spawns inside a
coroutine, as Parla programs write them.  Checked against the sequential
sum of squares ("equal to the sequential computation", or "DIFFERS" and
exit status 1).

    python examples/python/async_graph.py [LEAVES]   (a power of two)
"""
import sys

import weft


def main(leaves: int = 64) -> int:
    T = weft.TaskSpace("T")

    async def leaf(i: int) -> int:
        return i * i

    async def inner(level: int, i: int) -> int:
        left: int
        right: int
        left, right = await weft.gather(T[level - 1, 2 * i], T[level - 1, 2 * i + 1])
        return left + right

    async def root() -> int:
        # Spawn the inner levels first, by key: they depend on slots that
        # are spawned after them (Parla's "dependencies by name").
        level, n = 1, leaves // 2
        while n >= 1:
            for i in range(n):
                weft.spawn(inner, level, i, task=T[level, i])
            level, n = level + 1, n // 2
        for i in range(leaves):
            weft.spawn(leaf, i, task=T[0, i])
        top: int = await T[level - 1, 0]
        return top

    with weft.Runtime(workers=2) as rt:
        total = rt.spawn(root).result(timeout=60)
    want = sum(i * i for i in range(leaves))
    ok = total == want
    print(f"sum of squares of 0..{leaves - 1} by a tree of async tasks: {total}, "
          + ("equal to the sequential computation" if ok else f"DIFFERS from the sequential {want}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 64))
