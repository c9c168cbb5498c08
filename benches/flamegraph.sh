#!/usr/bin/env bash
# Folded stacks and flame graphs: perfpipe against perf script | inferno on a large -g recording.
#
# Times, alternating for BENCH_ROUNDS rounds (the starting command rotates):
#   floor             cat rec | cat | cat > /dev/null   (the bytes through two pipes)
#   perfpipe folded   cat rec | $PERFPIPE -o out.folded
#   perf folded       perf script -i rec | inferno-collapse-perf > out.folded
#   perfpipe svg      cat rec | $PERFPIPE -o flame.svg
#   perf svg          perf script -i rec | inferno-collapse-perf | inferno-flamegraph > flame.svg
# and, when $PERF7 is executable (default: the trixie root's perf 7.3, .ci/trixie-root):
#   perf7 folded      $PERF7 script --no-inline -i rec | inferno-collapse-perf > out.folded
#   perf7 svg         (BENCH_PERF7_SVG=1) $PERF7 script --no-inline -i rec | collapse | flamegraph > flame.svg
# (perf 7.3's script adds inlined frames to -g callchains by default, perf 6.1's and perfpipe's
# only with --inline: --no-inline compares like with like; with --inline in $PERFPIPE_ARGS, perf
# 7.3 runs with its default.)
# and, when $PERFPIPE_BASE is set (a build to compare with, in the same interleaved run):
#   base folded, base svg   the same as perfpipe's with $PERFPIPE_BASE
# (BENCH_PERF=0 leaves out every perf script command: perfpipe against the floor alone.)
# It measures the whole pipeline's wall time and the peak RSS (and user/sys) of its first heavy
# process (perfpipe, perf script, or the middle cat), and prints medians, the ratios perf /
# perfpipe and perfpipe / floor, and how much of the folded weight agrees (strictly and as overlap). See
# benches/README.md for the environment variables.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
source "$script_dir/lib.sh"

bench_dir=/tmp/perfpipe-bench
INPUT=${PERFPIPE_BENCH_INPUT:-$bench_dir/rec.pipe}
BENCH_OUT=${BENCH_OUT:-$bench_dir/flamegraph.tsv}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
PERF=${PERF:-perf}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
PERFPIPE_ARGS=${PERFPIPE_ARGS:-}
PERF7=${PERF7:-/var/cache/perfpipe/trixie.perf7}
PERFPIPE_BASE=${PERFPIPE_BASE:-}
BENCH_PERF=${BENCH_PERF:-1}
BENCH_PERF7_SVG=${BENCH_PERF7_SVG:-0}
COLLAPSE=${INFERNO_COLLAPSE:-inferno-collapse-perf}
# perf 7.3 names inlined functions in -g callchains unless told not to; perfpipe only with --inline.
PERF7_INLINE=--no-inline
[[ " $PERFPIPE_ARGS " == *" --inline "* ]] && PERF7_INLINE=
FLAMEGRAPH=${INFERNO_FLAMEGRAPH:-inferno-flamegraph}
BENCH_MIN_MB=${BENCH_MIN_MB:-400}                 # MiB
BENCH_WORKLOAD_LOOPS=${BENCH_WORKLOAD_LOOPS:-15}  # starting value, grown if too small

[[ $BENCH_ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a positive integer"
for tool in "$PERF" "$COLLAPSE" "$FLAMEGRAPH"; do
    command -v "$tool" >/dev/null || die "$tool not found (inferno: cargo install inferno --locked)"
done
if [[ $PERFPIPE == */* ]]; then
    [[ -x $PERFPIPE ]] || die "perfpipe binary not found: $PERFPIPE (cargo build --release, or set PERFPIPE=...)"
else
    command -v "$PERFPIPE" >/dev/null || die "PERFPIPE=$PERFPIPE not found in PATH"
fi
[[ -x /usr/bin/time ]] && /usr/bin/time -f '%e' -o /dev/null true 2>/dev/null ||
    die "needs GNU time (apt-get install time)"

# ---------------------------------------------------------------------------
# 1. Input recording (only if missing): the same one benches/passthrough.sh uses
# ---------------------------------------------------------------------------
[[ -s $INPUT ]] || record_workload_input "$INPUT"
input_size=$(stat -c %s "$INPUT")
echo "input: $INPUT ($input_size bytes, $(awk -v b="$input_size" 'BEGIN{printf "%.1f", b/1048576}') MiB)"

# ---------------------------------------------------------------------------
# 2. The commands: each a pipeline whose first heavy process runs under $T (GNU time)
# ---------------------------------------------------------------------------
workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT
T="/usr/bin/time -f $T_FORMAT -o $workdir/t"
names=("floor" "perfpipe folded" "perfpipe svg")
cmds=(
    "cat '$INPUT' | $T cat | cat > /dev/null"
    "cat '$INPUT' | $T '$PERFPIPE' $PERFPIPE_ARGS -o '$workdir/ours.folded'"
    "cat '$INPUT' | $T '$PERFPIPE' $PERFPIPE_ARGS -o '$workdir/ours.svg'"
)
if [[ -n $PERFPIPE_BASE ]]; then
    [[ -x $PERFPIPE_BASE ]] || die "PERFPIPE_BASE=$PERFPIPE_BASE is not executable"
    names+=("base folded" "base svg")
    cmds+=(
        "cat '$INPUT' | $T '$PERFPIPE_BASE' $PERFPIPE_ARGS -o '$workdir/base.folded'"
        "cat '$INPUT' | $T '$PERFPIPE_BASE' $PERFPIPE_ARGS -o '$workdir/base.svg'"
    )
fi
if [[ $BENCH_PERF != 0 ]]; then
    names+=("perf folded" "perf svg")
    cmds+=(
        "$T '$PERF' script -i '$INPUT' 2>/dev/null | '$COLLAPSE' > '$workdir/theirs.folded'"
        "$T '$PERF' script -i '$INPUT' 2>/dev/null | '$COLLAPSE' | '$FLAMEGRAPH' > '$workdir/theirs.svg'"
    )
    if [[ -x $PERF7 ]]; then
        names+=("perf7 folded")
        cmds+=("$T '$PERF7' script $PERF7_INLINE -i '$INPUT' 2>/dev/null | '$COLLAPSE' > '$workdir/theirs7.folded'")
        if [[ $BENCH_PERF7_SVG != 0 ]]; then
            names+=("perf7 svg")
            cmds+=("$T '$PERF7' script $PERF7_INLINE -i '$INPUT' 2>/dev/null | '$COLLAPSE' | '$FLAMEGRAPH' > '$workdir/theirs7.svg'")
        fi
    fi
fi

mkdir -p "$(dirname "$BENCH_OUT")"
runs_out="${BENCH_OUT%.tsv}.runs.tsv"
cat "$INPUT" >/dev/null # page cache
run_rounds

# ---------------------------------------------------------------------------
# 3. Summary
# ---------------------------------------------------------------------------
declare -A pw rss
printf 'name\truns_ok\tmedian_pipeline_wall_s\tmedian_user_s\tmedian_sys_s\tmedian_maxrss_mb\n' >"$BENCH_OUT"
echo
echo "rounds: $BENCH_ROUNDS   input: $input_size bytes   machine: $(nproc) CPU, $(uname -r), $("$PERF" --version)$([[ -x $PERF7 && $BENCH_PERF != 0 ]] && echo ", perf7: $("$PERF7" --version)")"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "(pipe_s: wall time of the whole pipeline; user/sys/RSS: of its first process, perfpipe or perf script)"
printf '%-16s %5s %9s %8s %8s %9s\n' command ok pipe_s user_s sys_s rss_MB
for n in "${names[@]}"; do
    ok=$(col "$n" 4 | wc -l)
    pw[$n]=$(col "$n" 4 | median)
    u=$(col "$n" 6 | median); s=$(col "$n" 7 | median)
    rss[$n]=$(col "$n" 8 | median | awk '{ if ($1=="NA") print "NA"; else printf "%.1f", $1/1024 }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$ok" "${pw[$n]}" "$u" "$s" "${rss[$n]}" >>"$BENCH_OUT"
    printf '%-16s %5s %9s %8s %8s %9s\n' "$n" "$ok/$BENCH_ROUNDS" "${pw[$n]}" "$u" "$s" "${rss[$n]}"
done
echo
echo "folded: perfpipe / floor (wall): $(ratio "${pw[perfpipe folded]}" "${pw[floor]}" 2)   (issue 43 target: <= 2)"
echo "svg:    perfpipe / floor (wall): $(ratio "${pw[perfpipe svg]}" "${pw[floor]}" 2)"
if [[ -n $PERFPIPE_BASE ]]; then
    echo "base:   folded $(ratio "${pw[base folded]}" "${pw[floor]}" 2), svg $(ratio "${pw[base svg]}" "${pw[floor]}" 2) x the floor;" \
        "perfpipe / base: folded $(ratio "${pw[perfpipe folded]}" "${pw[base folded]}" 3), svg $(ratio "${pw[perfpipe svg]}" "${pw[base svg]}" 3)"
    for f in folded svg; do
        if cmp -s "$workdir/ours.$f" "$workdir/base.$f"; then
            echo "base:   the last round's $f outputs are byte-identical"
        else
            echo "base:   the last round's $f outputs DIFFER"
        fi
    done
fi
if [[ $BENCH_PERF != 0 ]]; then
    echo "folded: perf script | inferno-collapse-perf / perfpipe (wall): $(ratio "${pw[perf folded]}" "${pw[perfpipe folded]}")x   (issue 16 target: >= 20x)"
    echo "svg:    perf script | collapse | flamegraph / perfpipe (wall): $(ratio "${pw[perf svg]}" "${pw[perfpipe svg]}")x"
    if [[ -n ${pw[perf7 folded]:-} ]]; then
        echo "folded: perf 7 script | inferno-collapse-perf / perfpipe (wall): $(ratio "${pw[perf7 folded]}" "${pw[perfpipe folded]}")x"
    fi
    if [[ -n ${pw[perf7 svg]:-} ]]; then
        echo "svg:    perf 7 script | collapse | flamegraph / perfpipe (wall): $(ratio "${pw[perf7 svg]}" "${pw[perfpipe svg]}")x"
    fi
fi
echo "perfpipe peak RSS: folded ${rss[perfpipe folded]} MB, svg ${rss[perfpipe svg]} MB   (target: <= 256 MB)"
for theirs in theirs theirs7; do
    [[ -s $workdir/ours.folded && -s $workdir/$theirs.folded ]] || continue
    # Strict: the weight of the stacks both count the same (tests/oracle.rs); overlap: the
    # smaller count of each stack (one sample moved between two stacks costs the strict figure
    # the whole of both, the overlap one sample). Both over the larger total.
    awk -v who="$([[ $theirs == theirs ]] && echo perf || echo "perf 7 $PERF7_INLINE")" \
        'FNR==NR { i=match($0, / [0-9]+$/); t[substr($0,1,i-1)]=substr($0,i+1); tt+=substr($0,i+1); next }
         { i=match($0, / [0-9]+$/); s=substr($0,1,i-1); c=substr($0,i+1); to+=c; if (t[s]==c) a+=c
           if (s in t) o += (t[s]+0 < c+0) ? t[s] : c }
         END { m = to > tt ? to : tt; printf "folded agreement with the oracle (%s): %.3f%% of the weight strictly, %.3f%% overlap (ours %.0f, oracle %.0f)\n", who, m ? 100*a/m : 100, m ? 100*o/m : 100, to, tt }' \
        "$workdir/$theirs.folded" "$workdir/ours.folded"
done
echo "results: $BENCH_OUT (summary), $runs_out (per run)"
nfail=$(failed_runs)
((nfail == 0)) || { echo "FAILED runs: $nfail (see $runs_out)"; exit 1; }
