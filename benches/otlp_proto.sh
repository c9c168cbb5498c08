#!/usr/bin/env bash
# The OTLP messages' two candidates side by side (benches/otlp-proto/): prost's derive over
# perfpipe's own export/src/otlp/proto.rs, and the opentelemetry-proto crate (feature
# `profiles`): a clean release build (wall and CPU seconds, the workspace's release profile),
# the stripped binary's size, the crates built, and the median time to encode the same request
# (REQUEST: an `-o FILE.otlp.pb` of perfpipe). Results: benches/results/otlp.md.
#
#   benches/otlp_proto.sh REQUEST.otlp.pb [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
request=${1:?usage: benches/otlp_proto.sh REQUEST.otlp.pb [ROUNDS]}
rounds=${2:-50}
work=${OTLP_BENCH_DIR:-/tmp/perfpipe-otlp-proto-bench}
rm -rf "$work" && mkdir -p "$work"

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, $(rustc --version); request $(stat -c %s "$request") bytes"
printf '%-8s %8s %8s %10s %10s %6s  %s\n' variant wall_s cpu_s bin_bytes stripped crates encode
for v in derive crate; do
    t="$work/target-$v"
    (cd "$here/otlp-proto/$v" && cargo fetch -q)
    /usr/bin/time -o "$work/time-$v" -f '%e %U %S' \
        bash -c "cd '$here/otlp-proto/$v' && CARGO_TARGET_DIR='$t' nice -n 10 cargo build --release -q 2>/dev/null"
    read -r wall user sys <"$work/time-$v"
    bin="$t/release/otlp-$v"
    strip -o "$work/otlp-$v.stripped" "$bin"
    crates=$(cd "$here/otlp-proto/$v" && cargo tree -e normal --prefix none | sed 's/ (\*)//' | sort -u | wc -l)
    printf '%-8s %8.1f %8.1f %10d %10d %6d  %s\n' "$v" "$wall" "$(echo "$user + $sys" | bc)" \
        "$(stat -c %s "$bin")" "$(stat -c %s "$work/otlp-$v.stripped")" "$((crates - 1))" \
        "$("$bin" "$request" "$rounds")"
done
