#!/usr/bin/env python3
"""Validate a Weft Chrome-trace file.

usage: check_trace.py PATH WORKERS NAMES [MAX_X_EVENTS]

PATH must be valid JSON: a list of events or an object with "traceEvents".
Every task name in NAMES (comma-separated) must appear on at least one
complete ("X") event; X events carry numeric ts/dur >= 0 and pid/tid; the
X events of those tasks come from exactly WORKERS distinct tids.  With
MAX_X_EVENTS, at most that many X events are present.
"""
import json
import sys


def fail(msg):
    print("check_trace: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    path, workers, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    max_x = int(sys.argv[4]) if len(sys.argv) > 4 else None
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s is not valid JSON: %s" % (path, e))
    events = d.get("traceEvents") if isinstance(d, dict) else d
    if not isinstance(events, list):
        fail("no event list (want a JSON array or {\"traceEvents\": [...]})")
    xs = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    for e in xs:
        for k in ("name", "ts", "dur", "pid", "tid"):
            if k not in e:
                fail("X event without %r: %r" % (k, e))
        if not isinstance(e["ts"], (int, float)) or not isinstance(e["dur"], (int, float)):
            fail("X event with non-numeric ts/dur: %r" % (e,))
        if e["dur"] < 0 or e["ts"] < 0:
            fail("X event with negative ts/dur: %r" % (e,))
    seen = {e["name"] for e in xs}
    missing = [n for n in names if n and n not in seen]
    if missing:
        fail("no X event for task(s) %s; X event names: %s" % (missing, sorted(seen)[:20]))
    tids = {e["tid"] for e in xs if e["name"] in names}
    if len(tids) != workers:
        fail("task X events come from %d tids %s, want one per worker (%d)"
             % (len(tids), sorted(tids, key=str), workers))
    if max_x is not None and len(xs) > max_x:
        fail("%d X events, but at most %d may be kept" % (len(xs), max_x))
    print("check_trace: %s ok (%d events, %d X, tids %s)"
          % (path, len(events), len(xs), sorted(tids, key=str)))


main()
