#!/bin/bash
# Runs the fuzz targets, SECS seconds each (default 420), at most JOBS targets at a time (default
# 2; the machine is shared, so every fuzzer runs under `nice -n 19`, or NICE). Works on the stable
# toolchain: libFuzzer's coverage instrumentation needs no -Z flag, only the sanitizer does, so the
# targets are built with `cargo fuzz build -O -a --sanitizer none` (release, with debug assertions
# and overflow checks; safe Rust needs no AddressSanitizer to turn a bug into a panic).
#
# Each target runs in a loop until its SECS are spent: libFuzzer stops at the first crash, timeout
# or OOM (its input lands in fuzz/artifacts/<target>/), and the loop starts it again on the grown
# corpus. Every run's final stats are appended to fuzz/artifacts/<target>.log; `fuzz/run.sh
# --count` sums them per target (`stat::number_of_executed_units`).
#
# Usage: fuzz/run.sh [SECS] [TARGET…]     e.g. JOBS=2 fuzz/run.sh 1800
#        RUNS=10000000 UNTIL=23:30 fuzz/run.sh 7200 tracing kallsyms …
#        fuzz/run.sh --count
# RUNS: a target stops once its log counts that many executions (over all its runs so far);
# UNTIL: no target runs past that time (anything `date -d` reads); NICE: the niceness (19);
# BUILD=0: run the binaries built last (while the sources change for another target).
# Needs: cargo install cargo-fuzz (0.13); perf for fuzz/seed.sh's file-mode seeds.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
all="decode records decompress buildid_elf filter read_file archive debuginfod tracing kallsyms
elf_symbols unwind_info"

# Executions of target $1 so far, from its runs' final stats.
executions() {
  [ -f "artifacts/$1.log" ] || {
    echo 0
    return
  }
  sed -n 's/^stat::number_of_executed_units: *//p' "artifacts/$1.log" | awk '{s += $1} END {print s + 0}'
}

count() {
  total=0
  for t in $all; do
    [ -f "artifacts/$t.log" ] || continue
    n=$(executions "$t")
    runs=$(grep -c '^stat::number_of_executed_units' "artifacts/$t.log")
    found=$(find "artifacts/$t" -type f 2>/dev/null | wc -l)
    printf '%-12s %12d executions in %d runs, %d artifacts\n' "$t" "$n" "$runs" "$found"
    total=$((total + n))
  done
  printf '%-12s %12d\n' total "$total"
}

if [ "${1:-}" = --count ]; then
  count
  exit 0
fi

secs=${1:-420}
[ $# -gt 0 ] && shift
targets=${*:-$all}
jobs=${JOBS:-2}
until=
[ -n "${UNTIL:-}" ] && until=$(date -d "$UNTIL" +%s)
[ -d corpus ] || ./seed.sh
[ "${BUILD:-1}" = 0 ] || nice -n "${NICE:-19}" cargo fuzz build -O -a --sanitizer none || exit 1
bin=target/x86_64-unknown-linux-gnu/release

# Largest input per target: the stream targets get room for a few hundred records, read_file for
# the tracepoint fixture (its tracing data alone is 40 KiB), the ELF targets the small ELF files
# seed.sh makes (their section headers are at the end), archive a tar of a few dozen headers, the
# others a few KiB. debuginfod's 4 KiB holds a chain of redirects and a chunked body; more only
# slows it: an answer played a byte at a time is a round through ureq per byte, and ureq parses
# a response head anew from its start at each piece.
max_len() {
  case $1 in
    decode | records | decompress) echo 16384 ;;
    read_file) echo 70000 ;;
    elf_symbols | unwind_info) echo 32768 ;;
    tracing) echo 8192 ;;
    archive) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

# libFuzzer's -timeout is wall time. A fuzzer at nice 19 behind work at the default priority
# gets a sliver of a core: a debuginfod input of 3,704 bytes that takes 0.15 s of CPU alone (ureq
# parsing each partial response head anew at every byte played) took 10 s beside `tests/under-load.sh`'s
# hogs. 60 s leaves room for that and still catches a hang.
TIMEOUT=60

# One target for $secs seconds, restarted after each crash.
fuzz_one() {
  t=$1
  mkdir -p "artifacts/$t"
  end=$(($(date +%s) + secs))
  [ -n "$until" ] && [ "$until" -lt "$end" ] && end=$until
  while left=$((end - $(date +%s))) && [ "$left" -gt 0 ]; do
    runs=-1
    if [ -n "${RUNS:-}" ]; then
      runs=$((RUNS - $(executions "$t")))
      [ "$runs" -gt 0 ] || break
    fi
    nice -n "${NICE:-19}" "$bin/$t" "corpus/$t" -max_total_time="$left" -runs="$runs" -max_len="$(max_len "$t")" \
      -rss_limit_mb=2048 -timeout="$TIMEOUT" -print_final_stats=1 -artifact_prefix="artifacts/$t/" \
      >> "artifacts/$t.log" 2>&1 || sleep 1
  done
  rm -f "/dev/shm/perfpipe-fuzz-$t-"*
}

running=0
for t in $targets; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  echo "== $t: ${secs}s"
  fuzz_one "$t" &
  running=$((running + 1))
done
wait
count
