#!/usr/bin/env bash
# Exhaustive check of a model (model/<name>.pml) with spin: the protocol
# (DEFECT 0) must verify with the search complete, and every variant the
# model's "check.sh: defects" line lists must be caught (an assertion
# violated or an invalid end state).  The variants run in parallel, each in
# its own directory.  Usage: check.sh coherence|settle [work-dir]
# Exit: 0 all good, 1 a failure, 77 spin not installed (skipped).
set -u
command -v spin >/dev/null 2>&1 || { echo "check.sh: spin not installed, skipped"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
model=${1:?usage: check.sh coherence|settle [work-dir]}
[ -f "$here/$model.pml" ] || { echo "check.sh: no model $here/$model.pml"; exit 1; }
work=${2:-}
if [ -z "$work" ]; then # a directory of its own, removed if all is well
    work=${TMPDIR:-/tmp}/weft-model.$$
    trap '[ "${fail:-1}" = 0 ] && rm -rf "$work"' EXIT
fi
command -v gcc >/dev/null 2>&1 || { echo "check.sh: gcc not installed"; exit 1; }
mkdir -p "$work" || exit 1
start=$(date +%s.%N)

# The defect variants (their list: the end of the model)
defects=$(sed -n 's/^ \* check\.sh: defects //p' "$here/$model.pml")
[ -n "$defects" ] || { echo "check.sh: $model.pml has no 'check.sh: defects' line"; exit 1; }

# The verifier, compiled once (gcc -O0: its C is large and the search
# short; -O2 costs more to compile than it saves); `defect` comes from
# WEFT_DEFECT.  SAFETY: no cycle checks; MEMLIM: at most 1 GiB a run.
cd "$work" || exit 1
rm -rf d[0-9]* pan pan.c pan.[bhmpt] ./*.trail
cp "$here/$model.pml" .
if ! spin -a "$model.pml" >spin.log 2>&1; then cat spin.log; echo "check.sh: spin -a failed"; exit 1; fi
if ! gcc -O0 -w -DSAFETY -DMEMLIM=1024 -o pan pan.c >gcc.log 2>&1; then cat gcc.log; echo "check.sh: gcc failed"; exit 1; fi

# Each variant in $work/d<n>, all at once: pan.log its report, rc its status.
pids=()
for d in 0 $defects; do
    mkdir -p "d$d"
    (cd "d$d" && cp "../$model.pml" . && WEFT_DEFECT=$d ../pan -m100000 -w22 >pan.log 2>&1; echo $? >rc) &
    pids+=($!)
done
wait "${pids[@]}"

complete() { # the search ran to its end
    ! grep -qE 'Search not completed|max search depth too small|out of memory|pan: reached -DMEMLIM' "$1"
}
fail=0
log="$work/d0/pan.log"
if [ "$(cat "$work/d0/rc" 2>/dev/null)" = 0 ] && grep -q 'errors: 0' "$log" && complete "$log"; then
    echo "$model: no error, search complete: $(awk '/states, stored/ {print $1}' "$log") states stored," \
         "$(awk '/transitions \(= / {print $1}' "$log") transitions"
else
    echo "$model: FAILED (rc $(cat "$work/d0/rc" 2>/dev/null))"
    tail -30 "$log" 2>/dev/null
    if [ -f "$work/d0/$model.pml.trail" ]; then
        (cd "$work/d0" && spin -t -p -DDEFECT=0 "$model.pml" | tail -40)
    fi
    fail=1
fi
for d in $defects; do
    log="$work/d$d/pan.log"
    what=$(grep -m1 -oE 'assertion violated.*|invalid end state.*' "$log" 2>/dev/null | cut -c1-150)
    if [ -n "$what" ] && grep -qE 'errors: [1-9]' "$log"; then
        echo "defect $d: caught: $what"
    else
        echo "defect $d: NOT caught (rc $(cat "$work/d$d/rc" 2>/dev/null))"
        tail -8 "$log" 2>/dev/null
        fail=1
    fi
done
echo "check.sh: $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s"
exit $fail
