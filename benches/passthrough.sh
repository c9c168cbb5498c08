#!/usr/bin/env bash
# Large-input passthrough benchmark for perfpipe.
#
# Times, alternating for BENCH_ROUNDS rounds:
#   floor        cat rec | cat                      | cat >/dev/null
#   perfpipe     cat rec | $PERFPIPE $PERFPIPE_ARGS | cat >/dev/null
#   perf inject  cat rec | perf inject -i - -o -    | cat >/dev/null
# (+ optional PERFPIPE_VARIANTS / INJECT_VARIANTS), measuring wall time, user/sys
# and peak RSS of the middle process, and prints medians and ratios.
# See benches/README.md for all environment variables.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
source "$script_dir/lib.sh"

bench_dir=/tmp/perfpipe-bench
INPUT=${PERFPIPE_BENCH_INPUT:-$bench_dir/rec.pipe}
BENCH_OUT=${BENCH_OUT:-$bench_dir/results.tsv}
BENCH_ROUNDS=${BENCH_ROUNDS:-5}
PERF=${PERF:-perf}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
PERFPIPE_ARGS=${PERFPIPE_ARGS:-}
PERFPIPE_VARIANTS=${PERFPIPE_VARIANTS:-}
INJECT_VARIANTS=${INJECT_VARIANTS:-}
BENCH_MIN_MB=${BENCH_MIN_MB:-400}                 # MiB
BENCH_WORKLOAD_LOOPS=${BENCH_WORKLOAD_LOOPS:-15}  # starting value, grown if too small

[[ $BENCH_ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a positive integer"

# ---------------------------------------------------------------------------
# 1. Input recording (only if missing)
# ---------------------------------------------------------------------------
if [[ ! -s $INPUT ]]; then
    command -v "$PERF" >/dev/null || die "perf not found (PERF=$PERF)"
    record_workload_input "$INPUT"
fi
input_size=$(stat -c %s "$INPUT")
echo "input: $INPUT ($input_size bytes, $(awk -v b="$input_size" 'BEGIN{printf "%.1f", b/1048576}') MiB)"

# ---------------------------------------------------------------------------
# 2. Tools
# ---------------------------------------------------------------------------
timer=${BENCH_TIMER:-}   # gnu | python; auto-detected if empty
if [[ -z $timer ]]; then
    if [[ -x /usr/bin/time ]] && /usr/bin/time -f '%e' -o /dev/null true 2>/dev/null; then
        timer=gnu
    elif command -v python3 >/dev/null; then
        timer=python   # fallback: fork/exec + os.wait4 rusage
    else
        die "need GNU time (apt-get install time) or python3"
    fi
fi
[[ $timer == gnu || $timer == python ]] || die "BENCH_TIMER must be gnu or python"

# resolve perfpipe: a bare name is looked up in PATH, anything else must be executable
if [[ $PERFPIPE == */* ]]; then
    [[ -x $PERFPIPE ]] || die "perfpipe binary not found: $PERFPIPE (build with: cargo build --release, or set PERFPIPE=...)"
else
    command -v "$PERFPIPE" >/dev/null || die "PERFPIPE=$PERFPIPE not found in PATH"
fi
command -v "$PERF" >/dev/null || die "perf not found (PERF=$PERF)"

# ---------------------------------------------------------------------------
# 3. Command list: parallel arrays name / argv-string. Argument strings are split with shell
#    quoting rules (eval), so a variant may quote: --filter 'comm == "x" || cpu == 0'
# ---------------------------------------------------------------------------
names=() progs=() argss=() kinds=()
add() { names+=("$1"); kinds+=("$2"); progs+=("$3"); argss+=("$4"); }

add "floor" floor cat ""
add "perfpipe${PERFPIPE_ARGS:+ $PERFPIPE_ARGS}" perfpipe "$PERFPIPE" "$PERFPIPE_ARGS"
add "perf inject" inject "$PERF" "inject -i - -o -"
split_variants() { local IFS=';'; read -r -a out <<<"$1"; printf '%s\n' "${out[@]}"; }
# trims blanks without touching quotes (xargs would strip them)
trim() { local v=$1; v="${v#"${v%%[![:space:]]*}"}"; printf '%s' "${v%"${v##*[![:space:]]}"}"; }
if [[ -n $PERFPIPE_VARIANTS ]]; then
    while IFS= read -r v; do
        v=$(trim "$v")
        [[ -n $v ]] && add "perfpipe $v" perfpipe "$PERFPIPE" "$v"
    done < <(split_variants "$PERFPIPE_VARIANTS")
fi
if [[ -n $INJECT_VARIANTS ]]; then
    while IFS= read -r v; do
        v=$(trim "$v")
        [[ -n $v ]] && add "perf inject $v" inject "$PERF" "inject $v -i - -o -"
    done < <(split_variants "$INJECT_VARIANTS")
fi
ncmd=${#names[@]}

# ---------------------------------------------------------------------------
# 4. Byte-identity check of perfpipe passthrough
# ---------------------------------------------------------------------------
identity=SKIP
if [[ -z $PERFPIPE_ARGS ]]; then
    if cat "$INPUT" | "$PERFPIPE" | cmp -s - "$INPUT"; then
        identity=PASS
    else
        identity=FAIL
    fi
    echo "passthrough byte-identity ($PERFPIPE, no args): $identity"
else
    echo "passthrough byte-identity: SKIP (PERFPIPE_ARGS is not empty)"
fi

# ---------------------------------------------------------------------------
# 5. Timed runs
# ---------------------------------------------------------------------------
workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT
mkdir -p "$(dirname "$BENCH_OUT")"
runs_out="${BENCH_OUT%.tsv}.runs.tsv"
printf 'round\tname\tcommand\twall_s\tuser_s\tsys_s\tmaxrss_kb\tpipeline_wall_s\tstatus\n' >"$runs_out"

# warm the page cache so the first round is not penalised
cat "$INPUT" >/dev/null

# run_one IDX ROUND: prints "wall user sys rss_kb pipeline_wall status"
run_one() {
    local i=$1 round=$2 tf="$workdir/t" argv st t0 t1
    eval "argv=(${argss[$i]})"
    rm -f "$tf"
    t0=$(date +%s%N)
    set +e
    if [[ $timer == gnu ]]; then
        cat "$INPUT" | /usr/bin/time -f '%e %U %S %M' -o "$tf" "${progs[$i]}" "${argv[@]}" 2>"$workdir/err" | cat >/dev/null
    else
        # fallback: fork/exec; peak RSS = max VmHWM polled from /proc every 5 ms
        # after the exec (wait4's ru_maxrss would include python's own RSS)
        cat "$INPUT" | python3 -c '
import os, sys, time
out = sys.argv[1]; cmd = sys.argv[2:]
r, w = os.pipe()          # close-on-exec: EOF on r once the exec happened
t = time.monotonic(); pid = os.fork()
if pid == 0:
    os.close(r)
    try: os.execvp(cmd[0], cmd)
    finally: os._exit(127)
os.close(w); os.read(r, 1); os.close(r)
hwm = 0
while True:
    p, st, ru = os.wait4(pid, os.WNOHANG)
    if p:
        break
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    hwm = max(hwm, int(line.split()[1]))
    except OSError:
        pass
    time.sleep(0.005)
w = time.monotonic() - t
open(out, "w").write("%.2f %.2f %.2f %d\n" % (w, ru.ru_utime, ru.ru_stime, hwm))
sys.exit(os.waitstatus_to_exitcode(st))
' "$tf" "${progs[$i]}" "${argv[@]}" 2>"$workdir/err" | cat >/dev/null
    fi
    local ps=("${PIPESTATUS[@]}")
    set -e
    t1=$(date +%s%N)
    st=ok
    for s in "${ps[@]}"; do ((s == 0)) || st="fail(${ps[*]})"; done
    local vals
    vals=$(grep -E '^[0-9.]+ [0-9.]+ [0-9.]+ [0-9]+$' "$tf" 2>/dev/null | tail -n1 || true)
    [[ -n $vals ]] || vals="NA NA NA NA"
    if [[ $st != ok ]]; then
        log "round $round '${names[$i]}' failed: $(tail -n3 "$workdir/err" | tr '\n' ' ')"
    fi
    echo "$vals $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", (b-a)/1e9}') $st"
}

for ((r = 1; r <= BENCH_ROUNDS; r++)); do
    # rotate the starting command each round so no command always runs first
    for ((k = 0; k < ncmd; k++)); do
        i=$(( (k + r - 1) % ncmd ))
        read -r wall user sys rss pwall st < <(run_one "$i" "$r")
        printf '%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "${names[$i]}" \
            "${progs[$i]}${argss[$i]:+ ${argss[$i]}}" "$wall" "$user" "$sys" "$rss" "$pwall" "$st" >>"$runs_out"
        log "round $r/$BENCH_ROUNDS  $(printf '%-28s' "${names[$i]}") wall ${wall}s user ${user}s sys ${sys}s rss ${rss}KB  $st"
    done
done

# ---------------------------------------------------------------------------
# 6. Summary
# ---------------------------------------------------------------------------

declare -A med_wall med_rss
printf 'name\tcommand\truns_ok\tmedian_wall_s\tmedian_user_s\tmedian_sys_s\tmedian_maxrss_mb\tmedian_pipeline_wall_s\twall_ratio_to_floor\n' >"$BENCH_OUT"
for ((i = 0; i < ncmd; i++)); do
    n=${names[$i]}
    ok=$(col "$n" 4 | wc -l)
    w=$(col "$n" 4 | median); u=$(col "$n" 5 | median); s=$(col "$n" 6 | median)
    kb=$(col "$n" 7 | median); pw=$(col "$n" 8 | median)
    mb=$(awk -v k="$kb" 'BEGIN{ if (k=="NA") print "NA"; else printf "%.1f", k/1024 }')
    # ratios use the wall time of the whole pipeline (cat | X | cat), which is what a user waits for
    med_wall[$n]=$pw; med_rss[$n]=$mb
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t' "$n" "${progs[$i]}${argss[$i]:+ ${argss[$i]}}" "$ok" "$w" "$u" "$s" "$mb" "$pw" >>"$BENCH_OUT"
    echo "$(ratio "$pw" "${med_wall[floor]}" 2)" >>"$BENCH_OUT"
done

echo
echo "rounds: $BENCH_ROUNDS   input: $input_size bytes   machine: $(nproc) CPU, $(uname -r), $("$PERF" --version)"
echo "(pipe_s = wall time of the whole pipeline, the basis of every ratio; wall/user/sys/RSS are of the"
echo " middle process; medians over successful runs)"
printf '%-30s %5s %8s %9s %8s %8s %10s %9s\n' command ok "pipe_s" "wall_s" "user_s" "sys_s" "rss_MB" "x_floor"
tail -n +2 "$BENCH_OUT" | while IFS=$'\t' read -r n c ok w u s mb pw rf; do
    printf '%-30s %5s %8s %9s %8s %8s %10s %9s\n' "$n" "$ok/$BENCH_ROUNDS" "$pw" "$w" "$u" "$s" "$mb" "$rf"
done
echo
pp_base="${names[1]}"
echo "perf inject / perfpipe (wall): $(ratio "${med_wall[perf inject]}" "${med_wall[$pp_base]}" 2)   (perf inject vs $pp_base)"
# positional pairing of variants: PERFPIPE_VARIANTS[k] vs INJECT_VARIANTS[k]
pp_vars=() inj_vars=()
for ((i = 3; i < ncmd; i++)); do
    if [[ ${kinds[$i]} == perfpipe ]]; then pp_vars+=("${names[$i]}"); else inj_vars+=("${names[$i]}"); fi
done
for ((k = 0; k < ${#pp_vars[@]} && k < ${#inj_vars[@]}; k++)); do
    echo "${inj_vars[$k]} / ${pp_vars[$k]} (wall): $(ratio "${med_wall[${inj_vars[$k]}]}" "${med_wall[${pp_vars[$k]}]}" 2)"
done
echo "passthrough byte-identity: $identity"
echo "results: $BENCH_OUT (summary), $runs_out (per run)"
nfail=$(awk -F'\t' 'NR>1 && $9!="ok"' "$runs_out" | wc -l)
if ((nfail)); then
    echo "FAILED runs: $nfail (see $runs_out)"
fi
[[ $identity != FAIL ]] && ((nfail == 0))
