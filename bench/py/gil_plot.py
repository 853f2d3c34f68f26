"""Heat-maps of bench/py/gil.py's efficiency over T x f: one PNG per system
(gil-heatmap-<system>.png), a row per variant that ran it (GIL build or
free-threaded; bodies on the CPU or on virtual GPUs) and a column per shape
(independent tasks, chain), at the largest worker count of the run.

    python bench/py/gil_plot.py --json gil.json [--json gil-ft.json] --out docs

Each --json is the file one `gil.py --json FILE` run wrote (the GIL build's,
the free-threaded build's); the rows of files from the same build (parts of
a sweep run separately: --where, --shapes) are put together.  Needs matplotlib (bench/requirements.txt).
"""
import argparse
import json
import os
import sys


def variants(runs):
    """[(title, rows of one build and placement)], in a fixed order."""
    out = []
    for gil in (True, False):
        for where in ("cpu", "vgpu"):
            for run in runs:
                if run["gil"] != gil:
                    continue
                rows = [r for r in run["rows"] if r.get("where", "cpu") == where]
                if rows:
                    build = f"Python {run['python']}" + (" (GIL)" if gil else "t (no GIL)")
                    place = "on the workers" if where == "cpu" else "C part on a vGPU stream"
                    out.append((f"{build}; {place}", rows))
    return out


def merge_builds(runs):
    """One run per build: the rows of runs of the same interpreter and GIL
    setting (parts of a sweep, e.g. --where cpu and --where vgpu) put
    together, in the order given."""
    out = {}
    for run in runs:
        key = (run["python"], run["gil"])
        if key in out:
            out[key]["rows"] = out[key]["rows"] + run["rows"]
        else:
            out[key] = dict(run)
    return list(out.values())


def plot_system(system, runs, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows_of = [(title, [r for r in rows if system in r["eff"]]) for title, rows in variants(runs)]
    rows_of = [(t, rs) for t, rs in rows_of if rs]
    if not rows_of:
        return None
    shapes = ["indep", "chain"]
    fig, axes = plt.subplots(len(rows_of), 2, figsize=(8.6, 2.4 * len(rows_of) + 0.6), squeeze=False,
                             constrained_layout=True)
    im = None
    for i, (title, rows) in enumerate(rows_of):
        workers = max(r["workers"] for r in rows)
        for j, shape in enumerate(shapes):
            ax = axes[i][j]
            mine = [r for r in rows if r["shape"] == shape and r["workers"] == workers]
            if not mine:
                ax.set_axis_off()
                continue
            Ts = sorted({r["T"] for r in mine})
            fs = sorted({r["f"] for r in mine})
            grid = [[None] * len(Ts) for _ in fs]
            for r in mine:
                grid[fs.index(r["f"])][Ts.index(r["T"])] = r["eff"][system]
            vals = [[float("nan") if v is None else v for v in line] for line in grid]
            im = ax.imshow(vals, origin="lower", cmap="RdYlGn", vmin=0.0, vmax=1.1, aspect="auto")
            for y, line in enumerate(grid):
                for x, v in enumerate(line):
                    if v is not None:
                        ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=8)
            ax.set_xticks(range(len(Ts)), [f"{t:g}" for t in Ts])
            ax.set_yticks(range(len(fs)), [f"{f:g}" for f in fs])
            ax.set_xlabel("T: body length (µs)", fontsize=8)
            ax.set_ylabel("f: Python fraction", fontsize=8)
            what = "independent" if shape == "indep" else "chain"
            ax.set_title(f"{title}\n{what}, {workers} workers", fontsize=8)
    fig.suptitle(f"{system}: efficiency (speed-up over a sequential loop / its bound)", fontsize=10)
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.6, label="efficiency")
    path = os.path.join(out_dir, f"gil-heatmap-{system}.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="append", required=True, help="a gil.py --json file (repeatable)")
    ap.add_argument("--out", required=True, help="folder for the PNGs")
    args = ap.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("gil_plot.py: matplotlib is not installed (pip install -r bench/requirements.txt): no heat-maps",
              file=sys.stderr)
        return 1
    runs = []
    for p in args.json:
        with open(p) as f:
            runs.append(json.load(f))
    runs = merge_builds(runs)
    systems = []
    for run in runs:
        for r in run["rows"]:
            for s in r["eff"]:
                if s not in systems:
                    systems.append(s)
    os.makedirs(args.out, exist_ok=True)
    for s in systems:
        path = plot_system(s, runs, args.out)
        if path:
            print(f"# heat-map: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
