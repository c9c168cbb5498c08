#!/usr/bin/env bash
# `perfpipe inject --convert-callchain` against perf 7.3's own `perf inject --convert-callchain`
# on the same --call-graph dwarf recording (issue 39).
#
# Records (only if missing) a `--call-graph dwarf` recording of tests/workloads/templates.cc built
# without frame pointers (-O2 -fomit-frame-pointer -g), with perf 7.3, until it is at least
# BENCH_MIN_MB, and its pipe-format copy (`perf inject -o -`); then times, alternating for
# BENCH_ROUNDS rounds:
#   perf 7.3        PERF7 inject --convert-callchain -i rec -o theirs.data   (files only)
#   perfpipe file   perfpipe inject --convert-callchain -i rec -o ours.data
#   perfpipe pipe   perfpipe inject --convert-callchain < rec.pipe > ours.pipe
# and prints medians (wall, user+sys CPU, peak RSS), the ratio perf 7.3 / perfpipe, the sizes,
# and the share of samples that perf 7.3's `perf script` prints identically on its own output and
# on ours.
#
#   BENCH_ROUNDS (5)  BENCH_MIN_MB (50)  PERFPIPE (target/release/perfpipe)
#   PERF7 (/var/cache/perfpipe/trixie.perf7)  BENCH_DIR (/tmp/perfpipe-bench)
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$script_dir/lib.sh"
repo_root=$(cd "$script_dir/.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/perfpipe-bench}
BENCH_ROUNDS=${BENCH_ROUNDS:-5}
BENCH_MIN_MB=${BENCH_MIN_MB:-50}
PERF7=${PERF7:-/var/cache/perfpipe/trixie.perf7}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
INPUT=$BENCH_DIR/convert-dwarf.data
FIELDS=(--no-inline -F comm,tid,time,ip,sym,dso)

[[ -x $PERFPIPE ]] || die "no $PERFPIPE (cargo build --release)"
[[ -x $PERF7 ]] || die "no $PERF7 (.ci/trixie-root)"
[[ -x /usr/bin/time ]] || die "needs GNU time (apt-get install time)"
mkdir -p "$BENCH_DIR"

if [[ ! -s $INPUT ]]; then
    c++ -O2 -fomit-frame-pointer -g -o "$BENCH_DIR/templates" "$repo_root/tests/workloads/templates.cc"
    rounds=1000
    while :; do
        log "recording $INPUT (templates $rounds, dwarf, perf 7.3)"
        "$PERF7" record -q -e cpu-clock -F 4000 --call-graph dwarf -o "$INPUT" \
            -- "$BENCH_DIR/templates" "$rounds" >/dev/null 2>&1
        size=$(stat -c %s "$INPUT")
        ((size >= BENCH_MIN_MB * 1024 * 1024)) && break
        rounds=$((rounds * BENCH_MIN_MB * 1024 * 1024 * 12 / 10 / size + 1))
    done
    "$PERF7" inject -i "$INPUT" -o - >"$INPUT.pipe" 2>/dev/null
fi
in_bytes=$(stat -c %s "$INPUT")
log "input $INPUT: $in_bytes bytes"

: >"$BENCH_DIR/convert.tsv"
cat "$INPUT" "$INPUT.pipe" >/dev/null # in the page cache for every variant
names=(perf7 perfpipe-file perfpipe-pipe)
for ((r = 0; r < BENCH_ROUNDS; r++)); do
    for ((k = 0; k < ${#names[@]}; k++)); do
        v=${names[(k + r) % ${#names[@]}]}
        case $v in
        perf7) time_one "$BENCH_DIR/convert.tsv" perf7 sh -c "'$PERF7' inject --convert-callchain -i '$INPUT' -o '$BENCH_DIR/theirs.data' 2>/dev/null" ;;
        perfpipe-file) time_one "$BENCH_DIR/convert.tsv" perfpipe-file "$PERFPIPE" inject --convert-callchain -i "$INPUT" -o "$BENCH_DIR/ours.data" ;;
        perfpipe-pipe) time_one "$BENCH_DIR/convert.tsv" perfpipe-pipe sh -c "'$PERFPIPE' inject --convert-callchain <'$INPUT.pipe' >'$BENCH_DIR/ours.pipe'" ;;
        esac
    done
done

printf '%-16s %9s %9s %10s %12s\n' variant "wall (s)" "CPU (s)" "RSS (MB)" "output (MB)"
declare -A wall
for v in "${names[@]}"; do
    w=$(awk -v v=$v '$1==v {print $2}' "$BENCH_DIR/convert.tsv" | median)
    m=$(awk -v v=$v '$1==v {print $3}' "$BENCH_DIR/convert.tsv" | median)
    c=$(awk -v v=$v '$1==v {print $4}' "$BENCH_DIR/convert.tsv" | median)
    case $v in perf7) o=theirs.data ;; perfpipe-file) o=ours.data ;; *) o=ours.pipe ;; esac
    wall[$v]=$w
    printf '%-16s %9s %9s %10.1f %12.2f\n' "$v" "$w" "$c" "$(echo "$m / 1024" | bc -l)" \
        "$(echo "$(stat -c %s "$BENCH_DIR/$o") / 1048576" | bc -l)"
done
for v in perfpipe-file perfpipe-pipe; do
    echo "perf 7.3 / $v: $(ratio "${wall[perf7]}" "${wall[$v]}" 2)x"
done
echo "input: $(echo "$in_bytes / 1048576" | bc -l | cut -c1-6) MB, $("$PERF7" script -i "$INPUT" -F time 2>/dev/null | wc -l) samples"

# Agreement: perf 7.3's script of its output and of ours, sample by sample.
"$PERF7" script "${FIELDS[@]}" -i "$BENCH_DIR/theirs.data" 2>/dev/null >"$BENCH_DIR/theirs.txt"
"$PERF7" script "${FIELDS[@]}" -i "$BENCH_DIR/ours.pipe" 2>/dev/null >"$BENCH_DIR/ours.txt"
python3 - "$BENCH_DIR/theirs.txt" "$BENCH_DIR/ours.txt" <<'PY'
import sys
def samples(p):
    out, cur = [], []
    for line in open(p, errors="replace"):
        if not line.strip():
            if cur: out.append("".join(cur))
            cur = []
        else:
            cur.append(line)
    if cur: out.append("".join(cur))
    return out
a, b = samples(sys.argv[1]), samples(sys.argv[2])
same = sum(x == y for x, y in zip(a, b))
print(f"perf 7.3 script: {same} of {len(a)} samples identical ({100*same/max(len(a),1):.2f} %), ours {len(b)}")
PY
