#!/bin/bash
# Soak (issue 7): streams >= 10 GB through perfpipe, passthrough and --buildid, sampling the
# process's VmRSS every second and comparing a checksum of the expected output with the output.
#
# The input is generated on the fly: the pipe header of tests/fixtures/callgraph.pipe.data once,
# then its records repeated (every repetition re-creates the same processes and maps). Expected
# output: for passthrough, the input itself; for --buildid, perfpipe --buildid over ONE copy
# (which injects a BUILD_ID before the first sample hitting each dso) followed by the remaining
# copies verbatim (every dso was hit in the first copy; the script checks this shape on 3 copies
# first).
#
# Usage: benches/soak.sh [GB]   (default 10; PERFPIPE=path overrides target/release/perfpipe)
# Prints, per mode: bytes, seconds, MB/s, RSS first/min/max/last (MiB) and both checksums;
# exits 1 if a checksum differs, perfpipe fails, or RSS grows by more than 8 MiB after warm-up.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
gb=${1:-10}
bin=${PERFPIPE:-$here/target/release/perfpipe}
[ -x "$bin" ] || (cd "$here" && cargo build --release -q -p perfpipe)
fx=$here/tests/fixtures/callgraph.pipe.data
work=$(mktemp -d /tmp/perfpipe-soak.XXXXXX)
trap 'rm -rf "$work"' EXIT

body=$(( $(stat -c %s "$fx") - 16 ))
copies=$(awk -v g="$gb" -v b="$body" 'BEGIN { printf "%d", (g * 1e9 + b - 1) / b }')

# gen HEADER(0/1) COPIES: the stream (or only the records) with COPIES copies of the records.
cat > "$work/gen.py" <<'EOF'
import sys
fx, header, copies = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
d = open(fx, "rb").read()
body = d[16:]
out = sys.stdout.buffer
if header:
    out.write(d[:16])
per = max(1, (32 << 20) // len(body))
block = body * per
while copies >= per:
    out.write(block)
    copies -= per
out.write(body * copies)
out.flush()
EOF
gen() { python3 "$work/gen.py" "$fx" "$@"; }

# rss_sampler PID LOG: VmRSS in KiB, once a second, until PID exits.
rss_sampler() {
  while [ -e "/proc/$1/status" ]; do
    awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null >> "$2" || true
    sleep 1
  done
}

# The --buildid shape check: 3 copies == buildid(1 copy) + 2 copies of the records.
gen 1 1 | "$bin" --buildid > "$work/first.out"
expect3=$( { cat "$work/first.out"; gen 0 2; } | cksum)
got3=$(gen 1 3 | "$bin" --buildid | cksum)
if [ "$expect3" != "$got3" ]; then
  echo "soak: --buildid does not have the expected shape on 3 copies ($expect3 vs $got3)" >&2
  exit 1
fi
injected=$(( $(stat -c %s "$work/first.out") - body - 16 ))

status=0
for mode in passthrough buildid; do
  args=(); [ "$mode" = buildid ] && args=(--buildid)
  log=$work/$mode.rss
  : > "$log"
  start=$(date +%s.%N)
  # Expected checksum, from the same generator, concurrently with the run.
  if [ "$mode" = passthrough ]; then
    (gen 1 "$copies" | cksum > "$work/$mode.expected") &
  else
    ({ cat "$work/first.out"; gen 0 $((copies - 1)); } | cksum > "$work/$mode.expected") &
  fi
  exp_pid=$!
  rm -f "$work/out"; mkfifo "$work/out"
  cksum < "$work/out" > "$work/$mode.got" &
  sum_pid=$!
  # $! of a background pipeline is its last command: perfpipe.
  gen 1 "$copies" | "$bin" "${args[@]}" > "$work/out" &
  pp=$!
  rss_sampler "$pp" "$log" &
  wait "$pp" || status=1
  wait "$sum_pid"
  wait "$exp_pid"
  end=$(date +%s.%N)
  secs=$(echo "$end - $start" | bc -l)
  bytes=$(awk '{print $2}' "$work/$mode.got")
  exp=$(cat "$work/$mode.expected"); got=$(cat "$work/$mode.got")
  ok=yes; [ "$exp" = "$got" ] || { ok=NO; status=1; }
  # RSS after a 5 s warm-up must stay within 8 MiB of its first value.
  read -r first min max last n < <(awk 'NR==1{f=$1} NR==6{w=$1} {if(min==""||$1<min)min=$1; if($1>max)max=$1; l=$1} NR>5{if($1>wmax)wmax=$1} END{printf "%d %d %d %d %d\n", f, min, max, l, NR}' "$log")
  growth=$(awk 'NR==6{w=$1} NR>5{if($1>m)m=$1} END{print (m-w)}' "$log")
  [ "${growth:-0}" -gt 8192 ] && { echo "soak: $mode: RSS grew by $growth KiB after warm-up" >&2; status=1; }
  printf '%-11s %6.2f GB in %6.1f s = %5.0f MB/s; RSS MiB first %.1f min %.1f max %.1f last %.1f (%d samples); cksum expected %s got %s: %s\n' \
    "$mode" "$(echo "$bytes/1000000000" | bc -l)" "$secs" "$(echo "$bytes/$secs/1000000" | bc -l)" \
    "$(echo "$first/1024" | bc -l)" "$(echo "$min/1024" | bc -l)" "$(echo "$max/1024" | bc -l)" "$(echo "$last/1024" | bc -l)" \
    "$n" "$exp" "$got" "$ok"
done
echo "copies of the records: $copies ($body bytes each); BUILD_ID bytes injected: $injected"
exit $status
