#!/usr/bin/env bash
# What recording costs the recorded workload, measured as the kernel series that introduced
# backward ring buffers measured it (Wang Nan, 2016: BASE / RAWPERF / WRTBKWRD / RAWOVWRT): the
# same fixed workload run bare, under `perf record`, under `perfpipe record` (forward rings) and
# under `perfpipe record --overwrite` (write_backward rings), plus `perf record --overwrite`.
#
#   benches/record-overhead.sh [ROUNDS]          # default 5 rounds
#   EVENT='-e cpu-clock -c 20000 -g' WORKLOAD='tests/fixtures/workload.sh multi 4' \
#     benches/record-overhead.sh 7
#
# The time measured is the workload's own wall time, taken inside the recorded command (a bash
# wrapper reads the clock before and after the workload), so recorder start-up and the final
# drain are not counted: only the slowdown the workload sees while it is recorded. Rounds are
# interleaved and the starting variant rotates, so drift on this shared 2-vCPU machine spreads
# over all variants. Output is a table: mean and standard deviation of the wall time, and the
# slowdown of the mean against BASE.
set -euo pipefail

rounds=${1:-${BENCH_ROUNDS:-5}}
root=$(cd "$(dirname "$0")/.." && pwd)
perfpipe=${PERFPIPE:-$root/target/release/perfpipe}
event=${EVENT:--e cpu-clock -c 20000 -g}
workload=${WORKLOAD:-$root/tests/fixtures/workload.sh multi 4}
pages=${MMAP_PAGES:-128}

if [[ ! -x $perfpipe ]]; then
    echo "build first: cargo build --release ($perfpipe missing)" >&2
    exit 1
fi
command -v perf >/dev/null || { echo "perf is required" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The workload under a clock: writes its wall time in ns to $tmp/t.
cat >"$tmp/timed.sh" <<EOF
#!/usr/bin/env bash
s=\$(date +%s%N)
$workload >/dev/null 2>&1
e=\$(date +%s%N)
echo \$((e - s)) >"$tmp/t"
EOF
chmod +x "$tmp/timed.sh"

names=(BASE PERF PERFPIPE PERFPIPE-OVWRT PERF-OVWRT)
run() {
    # shellcheck disable=SC2086 # $event is a list of words
    case $1 in
    BASE) "$tmp/timed.sh" ;;
    PERF) perf record $event -m "$pages" -o - -- "$tmp/timed.sh" >/dev/null 2>"$tmp/err" ;;
    PERFPIPE) "$perfpipe" record $event -m "$pages" -- "$tmp/timed.sh" >/dev/null 2>"$tmp/err" ;;
    PERFPIPE-OVWRT)
        "$perfpipe" record --overwrite $event -m "$pages" -- "$tmp/timed.sh" >/dev/null 2>"$tmp/err"
        ;;
    PERF-OVWRT)
        perf record --overwrite $event -m "$pages" -o "$tmp/ov.data" -- "$tmp/timed.sh" \
            >/dev/null 2>"$tmp/err"
        ;;
    esac
    cat "$tmp/t"
}

echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cpus; perf $(perf --version | awk '{print $3}')"
echo "# event: $event; rings: $pages pages; workload: $workload; rounds: $rounds"
for ((r = 0; r < rounds; r++)); do
    for ((i = 0; i < ${#names[@]}; i++)); do
        v=${names[$(((i + r) % ${#names[@]}))]}
        t=$(run "$v")
        echo "$v $t" >>"$tmp/results"
    done
done

awk -v order="${names[*]}" '
    { n[$1]++; s[$1] += $2 / 1e9; q[$1] += ($2 / 1e9) ^ 2 }
    END {
        split(order, o, " ")
        base = s["BASE"] / n["BASE"]
        printf "%-15s %6s %10s %9s %9s\n", "variant", "runs", "mean (s)", "stdev", "slowdown"
        for (i = 1; i <= length(o); i++) {
            k = o[i]; m = s[k] / n[k]
            var = n[k] > 1 ? (q[k] - n[k] * m * m) / (n[k] - 1) : 0
            if (var < 0) var = 0
            printf "%-15s %6d %10.3f %9.3f %8.1f%%\n", k, n[k], m, sqrt(var), (m / base - 1) * 100
        }
    }' "$tmp/results"
