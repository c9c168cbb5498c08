#!/usr/bin/env bash
# --unwind of another userland's recording on the host, against the same run inside it (issue 38).
#
# In the Debian trixie root (.ci/trixie-root; glibc 2.41 where this host has 2.36), records with
# the root's perf 7.3 (only if missing) `perf record -e cpu-clock -F 4000 --call-graph dwarf` of
# benches/deep.c (compiled on the host, -O2 -fomit-frame-pointer -g, run with the root's libc:
# 60-150 frames of recursion over qsort and memcpy, BENCH_SECONDS of CPU), makes an archive of it
# inside the root with `perfpipe archive`, then times, alternating for BENCH_ROUNDS rounds:
#   inside    perfpipe -i rec --unwind -o out.pipe, run inside the root (its files at their paths;
#             `unshare -m` + bind mounts of /proc, /sys, /dev + chroot, as util::in_trixie)
#   archive   perfpipe -i rec --unwind --symbols files.tar -o out.pipe, on the host
#   symfs     perfpipe -i rec --unwind --symfs ROOT -o out.pipe, on the host
# (the host runs with an empty build-id cache and no debuginfod), and prints medians (wall,
# user+sys CPU, peak RSS), the ratios archive / inside and symfs / inside, and whether the three
# outputs are the same bytes (the same frames from the same files).
#
#   BENCH_ROUNDS (5)  BENCH_SECONDS (5)  PERFPIPE (target/release/perfpipe)
#   PERFPIPE_TRIXIE (/var/cache/perfpipe/trixie)  BENCH_DIR (/tmp/perfpipe-bench)
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$script_dir/lib.sh"
repo_root=$(cd "$script_dir/.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/perfpipe-bench}
BENCH_ROUNDS=${BENCH_ROUNDS:-5}
BENCH_SECONDS=${BENCH_SECONDS:-5}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
ROOT=${PERFPIPE_TRIXIE:-/var/cache/perfpipe/trixie}

[[ -x $PERFPIPE ]] || die "no $PERFPIPE (cargo build --release)"
[[ -x $ROOT/usr/bin/perf ]] || die "no trixie root at $ROOT (.ci/trixie-root makes it)"
[[ -x /usr/bin/time ]] || die "needs GNU time (apt-get install time)"
mkdir -p "$BENCH_DIR"

# The bench's directory inside the root (removed at the end, but for the recording, kept in
# BENCH_DIR).
inside=/tmp/perfpipe-bench-containers
host_dir=$ROOT$inside
rm -rf "$host_dir"
mkdir -p "$host_dir"
trap 'rm -rf "$host_dir"' EXIT

# "${in_root[@]}" CMD...: CMD inside the root, in a private mount namespace of its own.
in_root=(unshare -m --propagation private sh -c
    'r=$1; shift; for m in proc sys dev; do mount --rbind /$m $r/$m || exit 125; done; exec chroot "$r" "$@"'
    sh "$ROOT")

REC=$BENCH_DIR/containers-deep-$BENCH_SECONDS.data
cc -O2 -fomit-frame-pointer -g -o "$host_dir/deep" "$script_dir/deep.c"
if [[ ! -s $REC ]]; then
    log "recording $REC inside the root (deep $BENCH_SECONDS, dwarf, perf 7.3)"
    "${in_root[@]}" /usr/bin/perf record -q -e cpu-clock -F 4000 -m 1024 --call-graph dwarf \
        -o "$inside/rec.data" -- "$inside/deep" "$BENCH_SECONDS" >/dev/null 2>&1
    cp "$host_dir/rec.data" "$REC"
    # The workload binary goes with the recording: the same build id next time.
    cp "$host_dir/deep" "$REC.deep"
else
    cp "$REC.deep" "$host_dir/deep"
    cp "$REC" "$host_dir/rec.data"
fi
cp "$PERFPIPE" "$host_dir/perfpipe"
log "archive of the recording, made inside the root"
"${in_root[@]}" "$inside/perfpipe" archive -i "$inside/rec.data" -o "$inside/files.tar" 2>"$BENCH_DIR/containers-archive.err"
cp "$host_dir/files.tar" "$BENCH_DIR/containers-files.tar"
in_bytes=$(stat -c %s "$REC")
log "input $REC: $in_bytes bytes; archive $(stat -c %s "$BENCH_DIR/containers-files.tar") bytes"

empty=$BENCH_DIR/containers-no-cache
mkdir -p "$empty"
host_env=(env PERF_BUILDID_DIR="$empty" DEBUGINFOD_URLS=)

: >"$BENCH_DIR/containers.tsv"
cat "$REC" >/dev/null # in the page cache for every variant
variants=(inside archive symfs)
for ((r = 0; r < BENCH_ROUNDS; r++)); do
    for ((k = 0; k < ${#variants[@]}; k++)); do
        v=${variants[(k + r) % ${#variants[@]}]}
        case $v in
        inside) time_one "$BENCH_DIR/containers.tsv" inside "${in_root[@]}" "$inside/perfpipe" -i "$inside/rec.data" --unwind \
            -o "$inside/out.pipe" --pipe ;;
        archive) time_one "$BENCH_DIR/containers.tsv" archive "${host_env[@]}" "$PERFPIPE" -i "$REC" --unwind \
            --symbols "$BENCH_DIR/containers-files.tar" -o "$BENCH_DIR/containers-archive.pipe" --pipe ;;
        symfs) time_one "$BENCH_DIR/containers.tsv" symfs "${host_env[@]}" "$PERFPIPE" -i "$REC" --unwind --symfs "$ROOT" \
            -o "$BENCH_DIR/containers-symfs.pipe" --pipe ;;
        esac
    done
done
cp "$host_dir/out.pipe" "$BENCH_DIR/containers-inside.pipe"

printf '%-10s %9s %9s %10s\n' variant "wall (s)" "CPU (s)" "RSS (MB)"
declare -A wall cpu
for v in "${variants[@]}"; do
    w=$(awk -v v=$v '$1==v {print $2}' "$BENCH_DIR/containers.tsv" | median)
    m=$(awk -v v=$v '$1==v {print $3}' "$BENCH_DIR/containers.tsv" | median)
    c=$(awk -v v=$v '$1==v {print $4}' "$BENCH_DIR/containers.tsv" | median)
    wall[$v]=$w
    cpu[$v]=$c
    printf '%-10s %9s %9s %10.1f\n' "$v" "$w" "$c" "$(echo "$m / 1024" | bc -l)"
done
for v in archive symfs; do
    echo "$v / inside: wall $(ratio "${wall[$v]}" "${wall[inside]}" 3)x, CPU $(ratio "${cpu[$v]}" "${cpu[inside]}" 3)x"
done
for v in archive symfs; do
    cmp -s "$BENCH_DIR/containers-inside.pipe" "$BENCH_DIR/containers-$v.pipe" && same=same || same=different
    echo "output of $v against inside's: $same bytes"
done
echo "input: $in_bytes bytes; rounds: $BENCH_ROUNDS; perf inside: $("${in_root[@]}" /usr/bin/perf --version)"
