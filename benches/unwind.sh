#!/usr/bin/env bash
# --unwind against perf script unwinding the same --call-graph dwarf recording (issue 18).
#
# Records (only if missing) a --call-graph dwarf[,STACK] recording of a workload built without
# frame pointers (-O2 -fomit-frame-pointer -g): BENCH_WORKLOAD=templates (default), the C++
# templates of tests/workloads/templates.cc, shallow stacks, until the recording is at least
# BENCH_MIN_MB; or BENCH_WORKLOAD=deep, benches/deep.c, 60-150 frames of recursion over qsort and
# memcpy for 5 s of CPU (~20,000 samples, where unwinding costs most); or BENCH_WORKLOAD=shell,
# the flame-graph benchmark's process churn (benches/workload.sh, BENCH_WORKLOAD_LOOPS=2: gzip,
# sha256sum, python3, perl, hundreds of processes forking and exec'ing), then times, alternating
# for BENCH_ROUNDS rounds:
#   perf script   perf script --no-inline -F comm,tid,time,ip,sym,dso -i rec > /dev/null
#   --unwind      perfpipe -i rec --unwind -o out.pipe  (the defaults)
#   base          the same with $PERFPIPE_BASE, when set (a binary to compare with)
#   perfpipe      perfpipe -i rec --stage unwind:parallel-min=2 -o out.pipe  (every batch on the
#                 pool; RAYON_NUM_THREADS=1, 2: workers)
#   perfpipe seq  perfpipe -i rec --stage unwind:parallel=no -o out.pipe
#   pp | script   perfpipe -i rec --unwind | perf script (the same fields) -i -
# and prints medians (wall, user+sys CPU, peak RSS), the ratio perf script / perfpipe, output
# bytes / input bytes, and how many samples `perf script` prints identically on the output and
# the input (and whether the base binary's output is the same bytes).
#
#   BENCH_ROUNDS (3)  BENCH_MIN_MB (100)  BENCH_STACK (8192: perf's default; 65528 for 64 KiB)
#   BENCH_WORKLOAD (templates; deep; shell)
#   PERFPIPE (target/release/perfpipe)  PERFPIPE_BASE (none)  PERF (perf)
#   BENCH_DIR (/tmp/perfpipe-bench)
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$script_dir/lib.sh"
repo_root=$(cd "$script_dir/.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/perfpipe-bench}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_MIN_MB=${BENCH_MIN_MB:-100}
BENCH_STACK=${BENCH_STACK:-8192}
BENCH_WORKLOAD=${BENCH_WORKLOAD:-templates}
PERF=${PERF:-perf}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
case $BENCH_WORKLOAD in
templates) INPUT=$BENCH_DIR/dwarf-$BENCH_STACK.data ;;
deep) INPUT=$BENCH_DIR/dwarf-deep-$BENCH_STACK.data ;;
shell) INPUT=$BENCH_DIR/dwarf-shell-$BENCH_STACK.data ;;
*) echo "unwind.sh: BENCH_WORKLOAD is templates, deep or shell" >&2; exit 1 ;;
esac
FIELDS=(--no-inline -F comm,tid,time,ip,sym,dso)

[[ -x $PERFPIPE ]] || die "no $PERFPIPE (cargo build --release)"
[[ -x /usr/bin/time ]] || die "needs GNU time (apt-get install time)"
mkdir -p "$BENCH_DIR"

if [[ ! -s $INPUT && $BENCH_WORKLOAD == deep ]]; then
    cc -O2 -fomit-frame-pointer -g -o "$BENCH_DIR/deep" "$script_dir/deep.c"
    log "recording $INPUT (deep 5, dwarf,$BENCH_STACK)"
    "$PERF" record -q -e cpu-clock -F 4000 -m 1024 --call-graph "dwarf,$BENCH_STACK" -o "$INPUT" \
        -- "$BENCH_DIR/deep" 5 >/dev/null 2>&1
fi
if [[ ! -s $INPUT && $BENCH_WORKLOAD == shell ]]; then
    log "recording $INPUT (benches/workload.sh, 2 loops, dwarf,$BENCH_STACK)"
    BENCH_WORKLOAD_LOOPS=2 "$PERF" record -q -e cpu-clock -F 4000 --call-graph "dwarf,$BENCH_STACK" \
        -o "$INPUT" -- "$script_dir/workload.sh" >/dev/null 2>&1
fi
if [[ ! -s $INPUT ]]; then
    c++ -O2 -fomit-frame-pointer -g -o "$BENCH_DIR/templates" "$repo_root/tests/workloads/templates.cc"
    rounds=2000
    while :; do
        log "recording $INPUT (templates $rounds, dwarf,$BENCH_STACK)"
        "$PERF" record -q -e cpu-clock -F 4000 --call-graph "dwarf,$BENCH_STACK" -o "$INPUT" \
            -- "$BENCH_DIR/templates" "$rounds" >/dev/null 2>&1
        size=$(stat -c %s "$INPUT")
        ((size >= BENCH_MIN_MB * 1024 * 1024)) && break
        rounds=$((rounds * BENCH_MIN_MB * 1024 * 1024 * 12 / 10 / size + 1))
    done
fi
in_bytes=$(stat -c %s "$INPUT")
log "input $INPUT: $in_bytes bytes"

: >"$BENCH_DIR/unwind.tsv"
cat "$INPUT" >/dev/null # in the page cache for every variant
variants=(perf unwind pp1 pp2 seq ppscript)
names=(perf-script perfpipe-unwind perfpipe-workers-1 perfpipe-workers-2 perfpipe-sequential perfpipe-then-perf-script)
if [[ -n ${PERFPIPE_BASE:-} ]]; then
    [[ -x $PERFPIPE_BASE ]] || die "no $PERFPIPE_BASE"
    variants+=(base)
    names+=(base-unwind)
fi
for ((r = 0; r < BENCH_ROUNDS; r++)); do
    for ((k = 0; k < ${#variants[@]}; k++)); do
        v=${variants[(k + r) % ${#variants[@]}]}
        case $v in
        perf) time_one "$BENCH_DIR/unwind.tsv" "perf-script" sh -c "'$PERF' script ${FIELDS[*]} -i '$INPUT' >/dev/null 2>&1" ;;
        unwind) time_one "$BENCH_DIR/unwind.tsv" "perfpipe-unwind" "$PERFPIPE" -i "$INPUT" --unwind -o "$BENCH_DIR/out.pipe" --pipe ;;
        base) time_one "$BENCH_DIR/unwind.tsv" "base-unwind" "$PERFPIPE_BASE" -i "$INPUT" --unwind -o "$BENCH_DIR/base.pipe" --pipe ;;
        pp1) time_one "$BENCH_DIR/unwind.tsv" "perfpipe-workers-1" env RAYON_NUM_THREADS=1 "$PERFPIPE" -i "$INPUT" --stage unwind:parallel-min=2 -o "$BENCH_DIR/out.pipe" --pipe ;;
        pp2) time_one "$BENCH_DIR/unwind.tsv" "perfpipe-workers-2" env RAYON_NUM_THREADS=2 "$PERFPIPE" -i "$INPUT" --stage unwind:parallel-min=2 -o "$BENCH_DIR/out.pipe" --pipe ;;
        ppscript) time_one "$BENCH_DIR/unwind.tsv" "perfpipe-then-perf-script" sh -c "'$PERFPIPE' -i '$INPUT' --unwind | '$PERF' script ${FIELDS[*]} -i - >/dev/null 2>&1" ;;
        seq) time_one "$BENCH_DIR/unwind.tsv" "perfpipe-sequential" "$PERFPIPE" -i "$INPUT" --stage unwind:parallel=no -o "$BENCH_DIR/out.pipe" --pipe ;;
        esac
    done
done
out_bytes=$(stat -c %s "$BENCH_DIR/out.pipe")

printf '%-28s %9s %9s %10s\n' variant "wall (s)" "CPU (s)" "RSS (MB)"
declare -A wall
for v in "${names[@]}"; do
    w=$(awk -v v=$v '$1==v {print $2}' "$BENCH_DIR/unwind.tsv" | median)
    m=$(awk -v v=$v '$1==v {print $3}' "$BENCH_DIR/unwind.tsv" | median)
    c=$(awk -v v=$v '$1==v {print $4}' "$BENCH_DIR/unwind.tsv" | median)
    wall[$v]=$w
    printf '%-28s %9s %9s %10.1f\n' "$v" "$w" "$c" "$(echo "$m / 1024" | bc -l)"
done
for v in "${names[@]:1}"; do
    echo "perf script / $v: $(echo "${wall[perf-script]} / ${wall[$v]}" | bc -l | cut -c1-6)x"
done
if [[ -n ${PERFPIPE_BASE:-} ]]; then
    cmp -s "$BENCH_DIR/out.pipe" "$BENCH_DIR/base.pipe" && same=same || same=different
    echo "--unwind output against the base binary's: $same bytes"
fi
echo "output / input: $out_bytes / $in_bytes = $(echo "100 * $out_bytes / $in_bytes" | bc -l | cut -c1-5) %"

# Agreement: the same perf script fields on the input and on the output, sample by sample.
"$PERF" script "${FIELDS[@]}" -i "$INPUT" 2>/dev/null >"$BENCH_DIR/in.txt"
"$PERF" script "${FIELDS[@]}" -i "$BENCH_DIR/out.pipe" 2>/dev/null >"$BENCH_DIR/out.txt"
python3 - "$BENCH_DIR/in.txt" "$BENCH_DIR/out.txt" <<'PY'
import sys
def samples(p):
    out, cur = [], None
    for line in open(p, errors="replace"):
        if not line.strip():
            if cur: out.append(cur)
            cur = None
        elif not line[0].isspace():
            if cur: out.append(cur)
            cur = [line.strip()]
        elif cur is not None:
            cur.append(" ".join(line.split()))
    if cur: out.append(cur)
    return out
a, b = samples(sys.argv[1]), samples(sys.argv[2])
same = sum(x == y for x, y in zip(a, b))
print(f"identical samples: {same} of {len(a)} ({100 * same / max(1, len(a)):.2f} %), {len(b)} out")
PY
