#!/usr/bin/env python3
"""layers.py: check that calls between Weft's layers run one way.

Reads the library's object files with `nm`, resolves each object's undefined
symbols to the object that defines them (a call, or a reference to a
variable), maps every file to its layer with LAYERS below, and reports

  * every cycle between layers: a strongly connected component of the file
    graph whose files belong to more than one layer, with the edges that go
    against the layer order (file -> file: symbols);
  * every other edge from a layer to one it may not use (an upward edge that
    makes no cycle yet);
  * every object whose file has no layer in the table.

Edges in KNOWN_EXCEPTIONS are listed but do not fail the check.  Exit status
0 when nothing is reported, 1 when something is, 2 when no objects were read.

Usage:
  scripts/layers.py [options] [OBJECT | DIR | @LIST]...
    OBJECT  an object file of the library (its path ends in src/<file>.o)
    DIR     a folder searched for src/**/*.o (default:
            build/CMakeFiles/weft_objects.dir); objects whose source file no
            longer exists (left behind by a rename) are skipped
    @LIST   a file naming one object per line (the ctest test passes the
            target's objects this way)
  --nm PATH   the nm to run (default: nm)
  --dot       print the graph of files (Graphviz), nothing else
  --strict    treat the known exceptions as any other edge
  -v          also print every edge between two layers

Only what the linker sees counts: a static inline function in a header, or a
struct read through a header, makes no edge.  The layer rules for headers are
kept by review (docs/design.md, "Which layer may call which").
"""

import collections
import fnmatch
import os
import re
import subprocess
import sys

# The layers, bottom first: (name, the files under src/ it holds, the layers
# it may use directly).  A layer may also use whatever those may use (the
# rule is transitive), and always its own files.  This table is the one
# written statement of the allowed direction; docs/design.md draws the same
# picture.
LAYERS = [
    ("base", ["base.c", "env.c"], []),                  # errors, the clock, the environment
    ("alloc", ["alloc.c"], ["base"]),                   # the allocator, handle slots
    ("wait", ["wait.c"], ["alloc"]),                    # the wait engine, pollers
    ("device", ["device/*.c"], ["wait"]),               # the device interface and kinds
    ("data", ["data/*.c"], ["device"]),                 # data handles, replicas, tiles, reductions
    ("sched", ["sched/*.c"], ["device"]),               # ready queues, placement
    ("graph", ["graph/*.c"], ["data", "sched"]),        # tasks, edges, access histories
    ("worker", ["worker.c", "autopin.c"], ["graph"]),   # worker threads, running bodies, observers, pinning
    ("trace", ["trace.c"], ["worker"]),                 # the trace: an observer of the workers
    ("comm", ["comm/*.c"], ["data"]),                   # communicator engines and what they share
    ("api", ["api/*.c"], ["trace", "comm"]),            # weft.h's functions, the runtime object
]

# Edges that break the rule and are allowed for now: (from file, to file),
# listed by the check but not failing it.  Keep it empty.
KNOWN_EXCEPTIONS: list = []

DEFAULT_OBJECTS = os.path.join("build", "CMakeFiles", "weft_objects.dir")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFINED = set("ABCDGRSTVWiu")   # nm types of a symbol an object defines (global)
UNDEFINED = set("Uvw")          # ... and of one it needs from elsewhere


def layer_table():
    """name -> (patterns, the set of layers it may use, itself excluded)."""
    names = [name for name, _, _ in LAYERS]
    direct = {name: uses for name, _, uses in LAYERS}
    for name, uses in direct.items():
        for u in uses:
            if u not in direct:
                sys.exit(f"layers.py: layer {name} uses unknown layer {u}")
            if names.index(u) >= names.index(name):
                sys.exit(f"layers.py: layer {name} uses {u}, which is not below it in LAYERS")
    table = {}
    for name, files, _ in LAYERS:
        seen, todo = set(), list(direct[name])
        while todo:
            u = todo.pop()
            if u not in seen:
                seen.add(u)
                todo.extend(direct[u])
        table[name] = (files, seen)
    return table


def layer_of(path, table):
    for name, (files, _) in table.items():
        if any(fnmatch.fnmatchcase(path, pat) for pat in files):
            return name
    return None


def source_of(obj):
    """The file under src/ an object was compiled from ('api/comm.c')."""
    norm = obj.replace(os.sep, "/")
    m = re.search(r"(?:^|/)src/(.+\.c)\.o$", norm)
    return m.group(1) if m else None


def collect_objects(args):
    objs = []
    for a in args:
        if a.startswith("@"):
            with open(a[1:]) as f:
                objs.extend(line.strip() for line in f if line.strip())
        elif os.path.isdir(a):
            found = []
            for dirpath, _, files in os.walk(os.path.join(a, "src") if os.path.isdir(os.path.join(a, "src")) else a):
                found.extend(os.path.join(dirpath, n) for n in files if n.endswith(".c.o"))
            # A folder may hold objects of files renamed or removed since.
            objs.extend(o for o in sorted(found) if os.path.exists(os.path.join(ROOT, "src", source_of(o) or "-")))
        else:
            objs.append(a)
    return objs


def read_symbols(nm, objs):
    """file -> (defined symbols, undefined symbols)."""
    out = subprocess.run([nm, "-P", "-A"] + objs, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"layers.py: {nm} failed: {out.stderr.strip()}")
    syms = {}
    by_obj = {o: source_of(o) for o in objs}
    for o, src in by_obj.items():
        if not src:
            sys.exit(f"layers.py: {o}: not an object of a file under src/")
        if src in syms:
            sys.exit(f"layers.py: two objects of src/{src}")
        syms[src] = (set(), set())
    for line in out.stdout.splitlines():
        # "path/to/x.c.o: name type [value size]"
        head, _, rest = line.partition(": ")
        fields = rest.split()
        if len(fields) < 2 or head not in by_obj:
            continue
        name, kind = fields[0], fields[1]
        defined, undefined = syms[by_obj[head]]
        if kind in UNDEFINED:
            undefined.add(name)
        elif kind in DEFINED:
            defined.add(name)
    return syms


def build_edges(syms):
    """(from file, to file) -> symbols, for every undefined symbol another file defines."""
    where = {}
    for f, (defined, _) in syms.items():
        for s in defined:
            where.setdefault(s, f)
    edges = collections.defaultdict(set)
    for f, (_, undefined) in syms.items():
        for s in undefined:
            g = where.get(s)
            if g and g != f:
                edges[(f, g)].add(s)
    return edges


def sccs(nodes, succ):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(succ[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def fmt_edge(a, b, symbols):
    return f"{a} -> {b}: {' '.join(sorted(symbols))}"


def main(argv):
    nm, dot, verbose, strict, args = "nm", False, False, False, []
    it = iter(argv)
    for a in it:
        if a == "--nm":
            nm = next(it, None) or sys.exit("layers.py: --nm needs a path")
        elif a == "--dot":
            dot = True
        elif a == "-v":
            verbose = True
        elif a == "--strict":
            strict = True
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            args.append(a)
    table = layer_table()
    objs = collect_objects(args or [os.path.join(ROOT, DEFAULT_OBJECTS)])
    if not objs:
        print("layers.py: no object files found (build the library first: make build)", file=sys.stderr)
        return 2
    syms = read_symbols(nm, objs)
    edges = build_edges(syms)
    layer = {f: layer_of(f, table) for f in syms}

    if dot:
        print("digraph weft {\n  rankdir=TB; node [shape=box, fontsize=10];")
        for name, _, _ in reversed(LAYERS):
            files = sorted(f for f in syms if layer[f] == name)
            if files:
                print(f'  subgraph "cluster_{name}" {{ label="{name}";')
                for f in files:
                    print(f'    "{f}";')
                print("  }")
        for (a, b), s in sorted(edges.items()):
            bad = layer[a] != layer[b] and layer[b] not in table[layer[a]][1] if layer[a] and layer[b] else True
            print(f'  "{a}" -> "{b}" [tooltip="{" ".join(sorted(s))}"{", color=red" if bad else ""}];')
        print("}")
        return 0

    problems = 0
    unmapped = sorted(f for f, l in layer.items() if l is None)
    for f in unmapped:
        print(f"NO LAYER: src/{f} matches no row of LAYERS in scripts/layers.py")
        problems += 1
    known = set() if strict else set(KNOWN_EXCEPTIONS)

    def allowed(a, b):
        la, lb = layer[a], layer[b]
        return la is None or lb is None or la == lb or lb in table[la][1]

    # Cycles, among the edges that are not known exceptions.
    kept = {e: s for e, s in edges.items() if e not in known}
    succ = collections.defaultdict(set)
    for a, b in kept:
        succ[a].add(b)
    cycles = [c for c in sccs(sorted(syms), succ) if len({layer[f] for f in c}) > 1]
    in_cycle = set()
    print(f"layers: {len(syms)} files, {len(edges)} edges between files, {len(LAYERS)} layers")
    for i, comp in enumerate(cycles, 1):
        members = set(comp)
        inside = {e: s for e, s in kept.items() if e[0] in members and e[1] in members}
        up = {e: s for e, s in inside.items() if not allowed(*e)}
        in_cycle.update(up)
        layers = sorted({layer[f] for f in comp}, key=[n for n, _, _ in LAYERS].index)
        print(f"CYCLE {i}: {len(comp)} files in {len(layers)} layers ({', '.join(layers)}): {' '.join(comp)}")
        print(f"  edges against the layer order ({len(up)}):")
        for (a, b), s in sorted(up.items()):
            print(f"    {fmt_edge(a, b, s)}   [{layer[a]} may not use {layer[b]}]")
        if verbose:
            print("  the other edges between its layers:")
            for (a, b), s in sorted(inside.items()):
                if allowed(a, b) and layer[a] != layer[b]:
                    print(f"    {fmt_edge(a, b, s)}")
        problems += 1
    others = {e: s for e, s in kept.items() if not allowed(*e) and e not in in_cycle}
    if others:
        print(f"UPWARD EDGES outside any cycle ({len(others)}):")
        for (a, b), s in sorted(others.items()):
            print(f"    {fmt_edge(a, b, s)}   [{layer[a]} may not use {layer[b]}]")
        problems += len(others)
    present = [e for e in KNOWN_EXCEPTIONS if e in edges and e in known]
    if present:
        print(f"known exceptions (KNOWN_EXCEPTIONS, not failing the check): {len(present)} edges")
        for a, b in present:
            print(f"    {fmt_edge(a, b, edges[(a, b)])}")
    gone = [e for e in KNOWN_EXCEPTIONS if e not in edges and e[0] in syms and e[1] in syms]
    for a, b in gone:
        print(f"note: known exception {a} -> {b} no longer occurs: remove it from KNOWN_EXCEPTIONS")
    if verbose:
        print("edges between layers:")
        for (a, b), s in sorted(edges.items()):
            if layer[a] != layer[b]:
                print(f"    {fmt_edge(a, b, s)}")
    if problems:
        print(f"layers: FAILED: {len(cycles)} cycle(s) between layers, "
              f"{sum(1 for e in kept if not allowed(*e))} edge(s) against the layer order"
              + (f", {len(unmapped)} file(s) without a layer" if unmapped else ""))
        return 1
    print("layers: OK: no cycle between layers, every edge runs downward"
          + (f" (besides {len(present)} known exceptions)" if present else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
