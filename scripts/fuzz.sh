#!/bin/sh
# A long run of tests/test_fuzz (random programs against a sequential model
# of weft.h): SEEDS seeds (default 100000) spread over JOBS processes
# (default nproc) with disjoint seed ranges, from FIRST (default 1).
#   scripts/fuzz.sh [SEEDS] [FEATURES]      e.g. scripts/fuzz.sh 20000 all,-host
# Environment: JOBS, FIRST, BUILD (default build), FUZZ_ARGS (more options).
# Prints each mismatch (seed, program, first difference, minimised program)
# and the total count; exits 1 if any seed mismatched.
set -u
SEEDS=${1:-100000}
FEATURES=${2:-all}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
FIRST=${FIRST:-1}
BUILD=${BUILD:-build}
BIN="$BUILD/tests/test_fuzz"
if [ ! -x "$BIN" ]; then
    echo "fuzz.sh: $BIN not found (make build, or BUILD=dir)" >&2
    exit 2
fi
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-fuzz.XXXXXX")
per=$(( (SEEDS + JOBS - 1) / JOBS ))
echo "fuzz.sh: $SEEDS seeds from $FIRST, features $FEATURES, $JOBS processes; logs in $OUT"
start=$(date +%s)
i=0
while [ "$i" -lt "$JOBS" ]; do
    f=$(( FIRST + i * per ))
    n=$per
    left=$(( FIRST + SEEDS - f ))
    [ "$n" -gt "$left" ] && n=$left
    if [ "$n" -gt 0 ]; then
        # shellcheck disable=SC2086
        "$BIN" --first "$f" --seeds "$n" --features "$FEATURES" ${FUZZ_ARGS:-} >"$OUT/job$i.log" 2>&1 &
    fi
    i=$(( i + 1 ))
done
wait
end=$(date +%s)
total=0
bad=0
for log in "$OUT"/job*.log; do
    line=$(grep '^test_fuzz: [0-9]* seeds' "$log" | tail -1)
    if [ -z "$line" ]; then
        echo "fuzz.sh: $log ended without its summary (crash or hang):"
        tail -40 "$log"
        bad=$(( bad + 1 ))
        continue
    fi
    n=$(echo "$line" | sed 's/^test_fuzz: \([0-9]*\) seeds.*/\1/')
    m=$(echo "$line" | sed 's/.* \([0-9]*\) mismatches.*/\1/')
    total=$(( total + n ))
    bad=$(( bad + m ))
    if [ "$m" -gt 0 ]; then
        grep -E '^(MISMATCH|minimised|  |stderr)' "$log"
    fi
done
secs=$(( end - start ))
[ "$secs" -gt 0 ] || secs=1
echo "fuzz.sh: $total seeds, $bad mismatches, ${secs} s ($(( total / secs )) seeds/s)"
[ "$bad" -eq 0 ]
