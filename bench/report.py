#!/usr/bin/env python3
"""weft-bench report: METG table (Markdown) and efficiency plots (PNG).

Reads the CSV that `weft-bench metg --csv FILE` writes (and any CSV in the
same format, e.g. from the Python front end's benchmark in bench/py/), and
writes:

  OUT/metg.md                 METG(50%) per pattern and system, with ratios
  OUT/metg_<pattern>.png      efficiency against granularity, one curve per
                              system (needs matplotlib; skipped, and said so,
                              without it)

With --doc FILE it also replaces the block of FILE between the lines
`<!-- BEGIN weft-bench report -->` and `<!-- END weft-bench report -->` with
the table and the image links (paths relative to FILE).

CSV columns: record,system,pattern,kernel,width,steps,ngraphs,workers,
iterations,tasks,repeats,wall_s,kernel_us,granularity_us,efficiency,gflops,
gbytes_s,metg50_us,status   (record is `point` or `metg`; repeated header
lines and lines starting with '#' are ignored).
"""
import argparse
import csv
import math
import os
import sys

BEGIN = "<!-- BEGIN weft-bench report -->"
END = "<!-- END weft-bench report -->"
RBEGIN = "<!-- BEGIN results -->"
REND = "<!-- END results -->"

# Preferred column order; anything else follows alphabetically.
SYSTEM_ORDER = ["weft", "weft_root", "weft_main", "openmp", "starpu", "bsp", "spin"]
PATTERN_ORDER = ["trivial", "no_comm", "stencil_1d", "stencil_1d_periodic", "dom", "tree",
                 "fft", "all_to_all", "nearest", "spread", "random_nearest"]


def read_rows(paths):
    points, metg, closed = {}, {}, set()
    for path in paths:
        with open(path, newline="") as f:
            lines = [l for l in f if l.strip() and not l.startswith("#")]
        header = None
        for row in csv.reader(lines):
            if row and row[0] == "record":
                header = row
                continue
            if header is None or len(row) != len(header):
                continue
            r = dict(zip(header, row))
            key = (r["pattern"], r["system"], r["kernel"])
            if r["record"] == "point":
                try:
                    g = float(r["granularity_us"])
                    e = float(r["efficiency"])
                except ValueError:
                    continue
                try:
                    gb = float(r.get("granularity_best_us") or g)
                    eb = float(r.get("efficiency_best") or e)
                except ValueError:
                    gb, eb = g, e
                if key in closed:  # a new sweep of this key replaces the old points
                    closed.discard(key)
                    points[key] = {}
                points.setdefault(key, {})[int(r["iterations"] or 0)] = (g, e, gb, eb)
            elif r["record"] == "metg":
                metg[key] = r  # the last run of a (pattern, system) wins
                closed.add(key)
    return points, metg


def order(items, preferred):
    return [x for x in preferred if x in items] + sorted(x for x in items if x not in preferred)


def fmt(v):
    if v is None:
        return "—"
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.2f" % v


def best_value(r):
    try:
        return float(r.get("metg50_best_us") or "")
    except (TypeError, ValueError):
        return None


def metg_value(r):
    if r is None:
        return None, "—"
    st = r.get("status", "")
    try:
        v = float(r["metg50_us"]) if r["metg50_us"] else None
    except ValueError:
        v = None
    if st == "ok" and v is not None:
        return v, fmt(v)
    if st == "upper_bound" and v is not None:
        return v, "≤ " + fmt(v)
    return None, st or "—"


def table(points, metg):
    kernels = sorted({k[2] for k in metg})
    out = []
    for kernel in kernels:
        keys = [k for k in metg if k[2] == kernel]
        pats = order({k[0] for k in keys}, PATTERN_ORDER)
        syss = order({k[1] for k in keys}, SYSTEM_ORDER)
        any_r = next(iter(metg[k] for k in keys))
        reps = sorted({metg[k]["repeats"] for k in keys}, key=lambda x: int(x or 0))
        out.append("METG(50%%) in µs, kernel `%s`, width %s, %s steps, %s graph(s), %s workers; "
                   "each cell: from the median of %s executions per point / from the best "
                   "execution (lower is better):\n"
                   % (kernel, any_r["width"], any_r["steps"], any_r["ngraphs"], any_r["workers"],
                      " or ".join(reps)))
        ratios = [("openmp", "openmp / weft"), ("starpu", "starpu / weft"), ("spin", "weft / spin")]
        ratios = [x for x in ratios if x[0] in syss and "weft" in syss]
        hdr = ["pattern"] + syss + [r[1] for r in ratios] + ["others' CPU"]
        out.append("| " + " | ".join(hdr) + " |")
        out.append("|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|")
        for p in pats:
            cells = [p]
            vals = {}
            for s in syss:
                r = metg.get((p, s, kernel))
                v, txt = metg_value(r)
                vals[s] = v
                b = best_value(r) if r else None
                cells.append(txt + (" / " + fmt(b) if b else ""))
            w = vals.get("weft")
            for sysname, _ in ratios:
                o = vals.get(sysname)
                if w and o:
                    cells.append("%.1f×" % (w / o if sysname == "spin" else o / w))
                else:
                    cells.append("—")
            busy = [float(metg[(p, s, kernel)].get("others_pct") or 0)
                    for s in syss if (p, s, kernel) in metg]
            cells.append("%.0f%%" % max(busy) if busy else "—")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        out.append("Ratios above 1× favour Weft.  *others' CPU*: share of the machine that other "
                   "processes used while the pattern was measured; above ~10% the figures of that "
                   "row are not trustworthy.")
        out.append("")
    return "\n".join(out)


def overhead_table(points):
    """Empty-kernel runs (weft-bench run --kernel empty): wall x workers / tasks
    is then the whole cost of a task in the system."""
    keys = [k for k in points if k[2] == "empty"]
    if not keys:
        return ""
    pats = order({k[0] for k in keys}, PATTERN_ORDER)
    syss = order({k[1] for k in keys}, SYSTEM_ORDER)
    out = ["Cost of one task with an empty kernel, in µs (wall time × workers / tasks, "
           "median of the executions; lower is better):\n",
           "| pattern | " + " | ".join(syss) + " |",
           "|---|" + "---:|" * len(syss)]
    for p in pats:
        cells = [p]
        for s in syss:
            v = points.get((p, s, "empty"))
            cells.append(fmt(min(x[0] for x in v.values())) if v else "—")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    return "\n".join(out)


def targets(metg, logs, stamp):
    """The headline: stencil_1d per system, then the targets checked: Weft's
    stencil_1d METG(50%) at most 2 µs, every pattern 10× below OpenMP and 50×
    below StarPU, all_to_all within 3× of spin."""
    out = []
    if stamp:
        out.append("Run: %s.\n" % stamp)
    for line in logs:
        out.append("> " + line.rstrip() + "\n")
    st = {k[1]: metg[k] for k in metg if k[0] == "stencil_1d" and k[2] == "busy_wait"}
    if st:
        syss = order(set(st), SYSTEM_ORDER)
        w, _ = metg_value(st.get("weft"))
        wb = best_value(st["weft"]) if "weft" in st else None
        out.append("**stencil_1d**, width 2, 2 workers, 1000 steps, busy-wait kernel, "
                   "METG(50%%) in µs (median of %s executions per point; best execution):\n"
                   % st[syss[0]]["repeats"])
        out.append("| system | METG(50%) median | METG(50%) best | median vs weft |")
        out.append("|---|---:|---:|---:|")
        for s_ in syss:
            v, txt = metg_value(st[s_])
            b = best_value(st[s_])
            ratio = "%.2f×" % (v / w) if v and w else "—"
            out.append("| %s | %s | %s | %s |" % (s_, txt, fmt(b) if b else "—", ratio))
        out.append("")
    # the per-pattern targets: Weft against OpenMP, StarPU and spin
    rows = []
    pats = order({k[0] for k in metg if k[2] == "busy_wait"}, PATTERN_ORDER)

    def val(p, s_, best=False):
        r = metg.get((p, s_, "busy_wait"))
        if not r:
            return None
        return best_value(r) if best else metg_value(r)[0]

    for p in pats:
        w = val(p, "weft")
        o = val(p, "openmp")
        sp = val(p, "starpu")
        spin = val(p, "spin")
        cells = [p]
        cells.append("%.1f×" % (o / w) if o and w else "—")
        cells.append("%.1f×" % (sp / w) if sp and w else "—")
        cells.append("%.1f×" % (w / spin) if w and spin else "—")
        rows.append(cells)
    if rows:
        sw = val("stencil_1d", "weft")
        sb = val("stencil_1d", "weft", True)
        out.append("Targets (task granularity against OpenMP, StarPU and spin, this 2-core machine, "
                   "medians unless said otherwise):\n")
        if sw:
            out.append("- stencil_1d: Weft METG(50%%) ≤ 2 µs: **%s** (%.2f µs; best execution %s µs)"
                       % ("met" if sw <= 2 else "not met", sw, fmt(sb) if sb else "—"))
        ok10 = sum(1 for r in rows if r[1] != "—" and float(r[1][:-1]) >= 10)
        ok50 = sum(1 for r in rows if r[2] != "—" and float(r[2][:-1]) >= 50)
        out.append("- every pattern Weft ≥ 10× lower than OpenMP: met on %d of %d patterns" % (ok10, len(rows)))
        out.append("- every pattern Weft ≥ 50× lower than StarPU: met on %d of %d patterns" % (ok50, len(rows)))
        a2a = [r for r in rows if r[0] == "all_to_all"]
        if a2a and a2a[0][3] != "—":
            f = float(a2a[0][3][:-1])
            out.append("- all_to_all within 3× of spin: **%s** (%s)" % ("met" if f <= 3 else "not met", a2a[0][3]))
        out.append("")
        out.append("| pattern | openmp / weft | starpu / weft | weft / spin |")
        out.append("|---|---:|---:|---:|")
        for r in rows:
            out.append("| " + " | ".join(r) + " |")
        out.append("")
    return "\n".join(out)


def replace_block(doc, begin, end, body):
    if begin not in doc or end not in doc:
        return None
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + "\n<!-- generated by weft-bench report; do not edit by hand -->\n\n" + \
        body + "\n" + end + tail


def plots(points, metg, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: matplotlib is not installed: no plots "
              "(.venv/bin/pip install -r bench/requirements.txt)", file=sys.stderr)
        return []
    made = []
    kernels = sorted({k[2] for k in points if k[2] != "empty"})
    for kernel in kernels:
        pats = order({k[0] for k in points if k[2] == kernel}, PATTERN_ORDER)
        for p in pats:
            fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.3), dpi=100, sharey=True)
            syss = order({k[1] for k in points if k[0] == p and k[2] == kernel}, SYSTEM_ORDER)
            for ax, best in ((axes[0], False), (axes[1], True)):
                for i, s in enumerate(syss):
                    # in sweep order (kernel length), which noise cannot reorder
                    pts = [v for _, v in sorted(points[(p, s, kernel)].items(), reverse=True)]
                    if not pts:
                        continue
                    xs = [v[2] if best else v[0] for v in pts]
                    ys = [100 * (v[3] if best else v[1]) for v in pts]
                    r = metg.get((p, s, kernel))
                    if best:
                        b = best_value(r) if r else None
                        txt = fmt(b) if b else "—"
                    else:
                        _, txt = metg_value(r)
                    ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.3, color="C%d" % i,
                            label="%s (%s µs)" % (s, txt))
                ax.axhline(50, color="grey", linewidth=0.8, linestyle="--")
                ax.set_xscale("log")
                ax.set_ylim(0, 110)
                ax.set_xlabel("task granularity (µs) = wall time × workers / tasks")
                ax.set_title("%s: %s" % (p, "best execution per point" if best else
                                         "median execution per point"), fontsize=10)
                ax.grid(True, which="both", linewidth=0.3)
                ax.legend(fontsize=7, loc="lower right", title="METG(50%)", title_fontsize=7)
            axes[0].set_ylabel("efficiency (%%), kernel %s" % kernel)
            fig.tight_layout()
            name = "metg_%s.png" % p if len(kernels) == 1 else "metg_%s_%s.png" % (p, kernel)
            fig.savefig(os.path.join(outdir, name))
            plt.close(fig)
            made.append((p, kernel, name))
    return made


def main():
    ap = argparse.ArgumentParser(prog="weft-bench report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", action="append", required=True,
                    help="CSV written by weft-bench metg --csv (repeatable)")
    ap.add_argument("--out", default="build/bench-results/report",
                    help="directory for metg.md and the PNGs")
    ap.add_argument("--doc", help="Markdown file whose report block is replaced")
    ap.add_argument("--log", action="append", default=[],
                    help="weft-bench output whose '# machine:' lines go into the results")
    ap.add_argument("--stamp", default="", help="a line saying which run this was")
    args = ap.parse_args()

    points, metg = read_rows(args.csv)
    if not metg and not points:
        print("report: no rows in %s" % ", ".join(args.csv), file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    md = table(points, metg) + "\n" + overhead_table(points)
    made = plots(points, metg, args.out)
    with open(os.path.join(args.out, "metg.md"), "w") as f:
        f.write(md + "\n")
    print("report: wrote %s and %d plot(s) in %s" % ("metg.md", len(made), args.out))

    logs = []
    for path in args.log:
        if not os.path.exists(path):
            continue
        name = os.path.splitext(os.path.basename(path))[0]
        with open(path) as f:
            logs += ["%s run: %s" % (name, l[len("# machine: "):]) for l in f
                     if l.startswith("# machine:")]
    head = targets(metg, logs, args.stamp)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(head + "\n")
    if args.doc:
        with open(args.doc) as f:
            doc = f.read()
        rel = os.path.relpath(args.out, os.path.dirname(os.path.abspath(args.doc)) or ".")
        imgs = "\n".join("![%s, %s](%s/%s)" % (p, k, rel, n) for p, k, n in made)
        new = replace_block(doc, BEGIN, END, md + "\n" + imgs)
        if new is None:
            print("report: %s has no %s ... %s block" % (args.doc, BEGIN, END), file=sys.stderr)
            return 1
        new2 = replace_block(new, RBEGIN, REND, head)
        with open(args.doc, "w") as f:
            f.write(new2 if new2 is not None else new)
        print("report: updated %s" % args.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
