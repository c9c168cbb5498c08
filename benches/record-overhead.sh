#!/usr/bin/env bash
# What recording costs the recorded workload, measured as the kernel series that introduced
# backward ring buffers measured it (Wang Nan, 2016: BASE / RAWPERF / WRTBKWRD / RAWOVWRT): the
# same fixed workload run bare, under `perf record`, under `perfpipe record` (forward rings) and
# under `perfpipe record --overwrite` (write_backward rings), plus `perf record --overwrite`.
#
#   benches/record-overhead.sh [ROUNDS]          # default 5 rounds
#   EVENT='-e cpu-clock -c 20000 -g' WORKLOAD='tests/fixtures/workload.sh multi 4' \
#     benches/record-overhead.sh 7
#   BASELINE=/tmp/perfpipe-before benches/record-overhead.sh   # + PERFPIPE-BASELINE: a before/after
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
baseline=${BASELINE:-}
[[ -n $baseline ]] && names+=(PERFPIPE-BASELINE)
run() {
    # shellcheck disable=SC2086 # $event is a list of words
    case $1 in
    BASE) "$tmp/timed.sh" ;;
    PERF) perf record $event -m "$pages" -o - -- "$tmp/timed.sh" >/dev/null 2>"$tmp/err" ;;
    PERFPIPE) "$perfpipe" record $event -m "$pages" -- "$tmp/timed.sh" >/dev/null 2>"$tmp/err" ;;
    PERFPIPE-OVWRT)
        "$perfpipe" record --overwrite $event -m "$pages" -- "$tmp/timed.sh" >/dev/null 2>"$tmp/err"
        ;;
    PERFPIPE-BASELINE) "$baseline" record $event -m "$pages" -- "$tmp/timed.sh" >/dev/null 2>"$tmp/err" ;;
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

# Per variant: median, mean and standard deviation of the wall time; slowdowns against BASE's
# median (the figure to quote on a noisy machine) and mean.
median() { grep "^$1 " "$tmp/results" | awk '{print $2 / 1e9}' | sort -g |
    awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
base_median=$(median BASE)
printf "%-15s %5s %10s %10s %8s %16s %14s\n" variant runs "median (s)" "mean (s)" stdev \
    "slowdown median" "slowdown mean"
for v in "${names[@]}"; do
    med=$(median "$v")
    grep "^$v " "$tmp/results" | awk -v k="$v" -v med="$med" -v bmed="$base_median" -v bmean="$(
        grep '^BASE ' "$tmp/results" | awk '{s += $2 / 1e9} END {print s / NR}'
    )" '
        { n++; s += $2 / 1e9; q += ($2 / 1e9) ^ 2 }
        END {
            m = s / n
            var = n > 1 ? (q - n * m * m) / (n - 1) : 0
            if (var < 0) var = 0
            printf "%-15s %5d %10.3f %10.3f %8.3f %15.1f%% %13.1f%%\n", k, n, med, m, sqrt(var),
                (med / bmed - 1) * 100, (m / bmean - 1) * 100
        }'
done
