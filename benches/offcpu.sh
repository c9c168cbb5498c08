#!/usr/bin/env bash
# Off-CPU folded stacks: perfpipe against the best text route from perf's own tools, on a large
# system-wide `perf record -a -g -e sched:sched_switch` recording.
#
# Times, alternating for BENCH_ROUNDS rounds (default 3; the starting command rotates):
#   perfpipe   $PERFPIPE -i REC --weight offcpu -o ours.folded
#   perf+awk   perf script -i REC --ns -F tid,time,trace,ip,sym | mawk (collapse the intervals)
#   perf+fast  the same perf script | mawk with a faster collapser (fields by index/substr,
#              no regular expression a line: about half the awk's CPU; issue 43's text route)
#   base       $PERFPIPE_BASE -i REC --weight offcpu -o base.folded, when PERFPIPE_BASE is set
#              (a build to compare with in the same interleaved run; outputs compared with cmp)
# (perf sorts the records by time before it prints them, so the collapser pairs each switch-out
# with the thread's next switch-in with no state but one open interval per thread: the simplest
# correct text route. `perf record --off-cpu` needs BPF skeletons Debian's perf lacks; `perf
# sched timehist` prints times, not stacks.) For each: the whole pipeline's wall time, and the
# user/sys CPU and peak RSS of its first process (perfpipe, or perf script), with GNU time; then
# medians, the ratio, and how much of the off-CPU weight the two outputs agree on.
#
# Input: $OFFCPU_INPUT (default /tmp/perfpipe-bench/offcpu.data), recorded if missing with
#   perf record -m 8192 -a -g -e sched:sched_switch -o REC -- perf bench sched pipe -l $OFFCPU_LOOPS
# (OFFCPU_LOOPS default 300000: about 600 K switches, 140 MB, no lost samples on a 2-vCPU VM).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
source "$script_dir/lib.sh"
INPUT=${OFFCPU_INPUT:-/tmp/perfpipe-bench/offcpu.data}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
PERF=${PERF:-perf}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
BENCH_OUT=${BENCH_OUT:-$script_dir/results/offcpu-$(date -u +%F).tsv}

[[ -x /usr/bin/time ]] || die "needs GNU time (apt-get install time)"
[[ -x $PERFPIPE ]] || die "build it first: cargo build --release ($PERFPIPE)"
[[ -e /sys/kernel/tracing/events/sched ]] || die "needs tracefs: mount -t tracefs nodev /sys/kernel/tracing"

if [[ ! -s $INPUT ]]; then
    mkdir -p "$(dirname "$INPUT")"
    log "recording $INPUT"
    "$PERF" record -q -m 8192 -a -g -e sched:sched_switch -o "$INPUT.tmp" -- \
        "$PERF" bench sched pipe -l "${OFFCPU_LOOPS:-300000}" >/dev/null
    mv -f "$INPUT.tmp" "$INPUT"
fi
input_size=$(stat -c %s "$INPUT")
echo "input: $INPUT ($input_size bytes)"

workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT

# The collapser: one open interval per thread, charged at its switch-in to the folded stack of
# its switch-out (comm;[off-cpu: STATE];root…leaf), in ns.
cat >"$workdir/collapse.awk" <<'AWK'
function ns(t,   p) { p = index(t, "."); return substr(t, 1, p - 1) * 1000000000 + substr(t, p + 1) }
/prev_pid=/ {
    for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) { t = ns(substr($i, 1, length($i) - 1)); break }
    match($0, /prev_comm=.* prev_pid=/); comm = substr($0, RSTART + 10, RLENGTH - 20); gsub(/ /, "_", comm)
    match($0, / prev_pid=[0-9]+/); prev = substr($0, RSTART + 10, RLENGTH - 10)
    match($0, / prev_state=[^ ]+/); state = substr($0, RSTART + 12, RLENGTH - 12); sub(/\+$/, "", state)
    match($0, / next_pid=[0-9]+/); next_ = substr($0, RSTART + 10, RLENGTH - 10)
    n = 0; in_sample = 1; next
}
in_sample && /^[ \t]+[0-9a-f]+ / { sub(/^[ \t]+[0-9a-f]+ /, ""); frames[++n] = $0; next }
in_sample && /^$/ {
    in_sample = 0
    if (prev != 0) {
        key = comm ";[off-cpu: " state "]"
        for (i = n; i >= 1; i--) key = key ";" frames[i]
        open_[prev] = key; since[prev] = t
    }
    if (next_ in open_) { w[open_[next_]] += t - since[next_]; delete open_[next_] }
}
END { for (k in w) print k, w[k] }
AWK

# The same collapser without a regular expression a line: perf prints a frame as "\t%16x sym", so
# the name starts at column 18 of the tab's second field; the switch's fields are found by index.
cat >"$workdir/collapse-fast.awk" <<'AWK'
BEGIN { FS = "\t" }
$1 == "" && NF > 1 { if (in_sample) frames[++n] = substr($2, 18); next }
NF == 0 {
    if (!in_sample) next
    in_sample = 0
    if (prev != 0) {
        key = comm ";[off-cpu: " state "]"
        for (i = n; i >= 1; i--) key = key ";" frames[i]
        open_[prev] = key; since[prev] = t
    }
    if (next_ in open_) { w[open_[next_]] += t - since[next_]; delete open_[next_] }
    next
}
{
    p = index($0, ": prev_comm=")
    if (p == 0) next
    k = split(substr($0, 1, p - 1), a, " "); ts = a[k]; d = index(ts, ".")
    t = substr(ts, 1, d - 1) * 1000000000 + substr(ts, d + 1)
    rest = substr($0, p + 12)
    q = index(rest, " prev_pid="); comm = substr(rest, 1, q - 1)
    if (index(comm, " ")) gsub(/ /, "_", comm)
    rest = substr(rest, q + 10); prev = rest + 0
    q = index(rest, " prev_state="); state = substr(rest, q + 12); state = substr(state, 1, index(state, " ") - 1)
    if (substr(state, length(state)) == "+") state = substr(state, 1, length(state) - 1)
    q = index(rest, " next_pid="); next_ = substr(rest, q + 10) + 0
    n = 0; in_sample = 1
}
END { for (k in w) print k, w[k] }
AWK

T="/usr/bin/time -f $T_FORMAT -o $workdir/t"
script="'$PERF' script -i '$INPUT' --ns -F tid,time,trace,ip,sym 2>/dev/null"
names=("perfpipe" "perf+awk" "perf+fast")
cmds=(
    "$T '$PERFPIPE' -i '$INPUT' --weight offcpu -o '$workdir/ours.folded'"
    "$T $script | mawk -f '$workdir/collapse.awk' > '$workdir/theirs.folded'"
    "$T $script | mawk -f '$workdir/collapse-fast.awk' > '$workdir/fast.folded'"
)
if [[ -n ${PERFPIPE_BASE:-} ]]; then
    [[ -x $PERFPIPE_BASE ]] || die "PERFPIPE_BASE=$PERFPIPE_BASE is not executable"
    names+=("base")
    cmds+=("$T '$PERFPIPE_BASE' -i '$INPUT' --weight offcpu -o '$workdir/base.folded'")
fi
mkdir -p "$(dirname "$BENCH_OUT")"
runs_out="${BENCH_OUT%.tsv}.runs.tsv"
cat "$INPUT" >/dev/null # page cache
run_rounds

printf 'name\tmedian_pipeline_wall_s\tmedian_user_s\tmedian_sys_s\tmedian_maxrss_mb\n' >"$BENCH_OUT"
echo "rounds: $BENCH_ROUNDS   machine: $(nproc) CPU, $(uname -r), $("$PERF" --version); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %9s %8s %8s %9s\n' command pipe_s user_s sys_s rss_MB
declare -A pw
for n in "${names[@]}"; do
    pw[$n]=$(col "$n" 4 | median)
    u=$(col "$n" 6 | median); s=$(col "$n" 7 | median)
    rss=$(col "$n" 8 | median | awk '{ if ($1=="NA") print "NA"; else printf "%.1f", $1/1024 }')
    printf '%s\t%s\t%s\t%s\t%s\n' "$n" "${pw[$n]}" "$u" "$s" "$rss" >>"$BENCH_OUT"
    printf '%-9s %9s %8s %8s %9s\n' "$n" "${pw[$n]}" "$u" "$s" "$rss"
done
echo "perf+awk / perfpipe wall time: $(ratio "${pw[perf+awk]}" "${pw[perfpipe]}")x"
echo "perf+fast / perfpipe wall time: $(ratio "${pw[perf+fast]}" "${pw[perfpipe]}")x   (issue 43 target: >= 20x)"
if [[ -n ${PERFPIPE_BASE:-} ]]; then
    echo "perf+fast / base wall time: $(ratio "${pw[perf+fast]}" "${pw[base]}")x; perfpipe / base: $(ratio "${pw[perfpipe]}" "${pw[base]}" 3)"
    if cmp -s <(sort "$workdir/ours.folded") <(sort "$workdir/base.folded"); then
        echo "base: the last round's outputs hold the same lines"
    else
        echo "base: the last round's outputs DIFFER"
    fi
fi
# The two collapsers agree (the same intervals, summed in another order).
if cmp -s <(sort "$workdir/theirs.folded") <(sort "$workdir/fast.folded"); then
    echo "the two collapsers' outputs are the same"
else
    echo "the two collapsers' outputs DIFFER"
fi

# Agreement: the off-CPU ns per state, both ways, of the intervals closed by a switch-in (the
# text route drops those the recording ended in; perfpipe shows them apart, "open at end"). Per
# state, not per comm: the text route names a thread by the tracepoint's prev_comm, perfpipe by
# its COMM records as perf report does (kworker/0:0 vs kworker/0:0-events).
for f in ours theirs; do
    grep -v ', open at end\]' "$workdir/$f.folded" | awk '{ n = $NF; $NF = ""; split($0, p, ";"); sub(/ +$/, "", p[2]); w[p[2]] += n } END { for (k in w) print k "\t" w[k] }' \
        | sort >"$workdir/$f.by-comm"
done
awk -F'\t' 'FNR == NR { o[$1] = $2; next } { t[$1] = $2 }
    END {
        for (k in o) { a += o[k]; d += (o[k] > t[k] ? o[k] - t[k] : t[k] - o[k]) }
        for (k in t) { b += t[k]; if (!(k in o)) d += t[k] }
        for (k in o) printf "  %-16s ours %14.0f  theirs %14.0f\n", k, o[k], t[k]
        printf "off-CPU ns by state (closed intervals): ours %.0f, theirs %.0f, |difference| %.3f%% of theirs\n", a, b, 100 * d / b
    }' "$workdir/ours.by-comm" "$workdir/theirs.by-comm"
nfail=$(failed_runs)
((nfail == 0)) || { echo "FAILED runs: $nfail (see $runs_out)"; exit 1; }
