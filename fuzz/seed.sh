#!/bin/sh
# Builds the fuzz corpora from the checked-in fixtures (the corpora are not committed).
# Inputs of decode/records/decompress start with 8 bytes that pick the chunking; filter's are
# EXPR\0STREAM; read_file's are whole file-mode perf.data files.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
fx="$here/../tests/fixtures"
for t in decode records decompress filter buildid_elf read_file archive debuginfod tracing kallsyms \
  elf_symbols unwind_info; do mkdir -p "$here/corpus/$t"; done
seeds="0000000000000000 0102030405060708 ffffffffffffff7f 1111111111111111"
for f in "$fx"/*.pipe.data; do
  n=$(basename "$f" .pipe.data)
  for s in $seeds; do
    for t in decode records decompress; do
      { printf "$(echo $s | sed 's/../\\x&/g')"; cat "$f"; } > "$here/corpus/$t/$n-$s"
    done
  done
done
# Small prefixes make the fuzzer's job on framing cheaper.
for f in "$fx"/callgraph.pipe.data "$fx"/compressed.pipe.data "$fx"/tracepoint.pipe.data "$fx"/bigendian.pipe.data; do
  n=$(basename "$f" .pipe.data)
  for t in decode records decompress; do
    { printf '\0\0\0\0\0\0\0\0'; head -c 4096 "$f"; } > "$here/corpus/$t/$n-head"
  done
done
i=0
while IFS= read -r e; do
  i=$((i + 1))
  printf '%s' "$e" > "$here/corpus/filter/expr-$i"
  { printf '%s\0' "$e"; head -c 8192 "$fx/callgraph.pipe.data"; } > "$here/corpus/filter/expr-stream-$i"
done <<'EXPRS'
pid == 1234
tid != 0 && cpu < 2
comm == "seq" || comm == "sh*"
time > 10ms && time < 1.5s
dso == "/usr/bin/*"
!(event == "cpu-clock") && period >= 20000
ip >= 0xffffffff80000000
cpumode == kernel
(pid == 1 || pid == 2) && !(tid == 3)
addr == 0 || id > 5
EXPRS
# ELF inputs: a few binaries from this machine, small ones first.
for b in /bin/true /bin/ls /usr/lib/x86_64-linux-gnu/libc.so.6; do
  [ -r "$b" ] && cp "$b" "$here/corpus/buildid_elf/$(basename "$b")"
done
# Tiny ELFs (under 1 KiB) and a bare note section, when there is a C compiler.
if command -v cc >/dev/null; then
  tmp=$(mktemp -d)
  printf 'void _start(void){for(;;);}\n' > "$tmp/tiny.c"
  for m in "" -m32; do
    # shellcheck disable=SC2086 # an empty $m is no word
    cc $m -Os -nostdlib -static -Wl,--build-id -Wl,-z,noseparate-code -o "$tmp/tiny$m" "$tmp/tiny.c" 2>/dev/null &&
      strip "$tmp/tiny$m" && cp "$tmp/tiny$m" "$here/corpus/buildid_elf/tiny$m"
  done
  objcopy -O binary --only-section=.note.gnu.build-id "$tmp/tiny" "$here/corpus/buildid_elf/note-tiny" 2>/dev/null
  rm -rf "$tmp"
fi
# Raw notes sections of the running kernel's modules.
for m in /sys/module/*/notes/.note.gnu.build-id; do
  [ -r "$m" ] && cp "$m" "$here/corpus/buildid_elf/note-$(echo "$m" | cut -d/ -f4)" 2>/dev/null
done
# File-mode perf.data: the fixtures, and small recordings of `true` when perf is here (a few KiB
# each, so the fuzzer mutates them quickly).
cp "$fx"/*.file.data "$here/corpus/read_file/"
if command -v perf >/dev/null; then
  i=0
  for opts in "" "-g" "--buildid-mmap" "-z" "-e cpu-clock,task-clock" "--switch-events"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # opts are words
    perf record -q -e cpu-clock $opts -o "$here/corpus/read_file/true-$i.data" true >/dev/null 2>&1 || true
  done
fi
# Issue 40's targets: archives, tracing data and formats, kallsyms, debuginfod answers (seed40.py;
# a real debuginfod answer when Debian's debuginfod is here), and small ELF files with symbols,
# PLT, DWARF, unwind tables and MiniDebugInfo for elf_symbols and unwind_info.
answers=$(mktemp -d)
if command -v debuginfod >/dev/null && command -v curl >/dev/null && command -v cc >/dev/null; then
  srv=$(mktemp -d)
  printf 'int f(int x){return x*3;}\nint main(void){return f(1);}\n' > "$srv/p.c"
  cc -Os -g -Wl,--build-id -Wl,-z,noseparate-code -o "$srv/p" "$srv/p.c"
  id=$(readelf -n "$srv/p" | sed -n 's/.*Build ID: //p')
  port=$((20000 + $$ % 20000))
  debuginfod -F -d :memory: -t 0 -g 0 -p "$port" "$srv" >/dev/null 2>&1 &
  pid=$!
  i=0
  while [ $i -lt 100 ]; do
    curl -s --raw -i -o "$answers/debuginfo" "http://127.0.0.1:$port/buildid/$id/debuginfo" &&
      grep -q '^HTTP/1.1 200' "$answers/debuginfo" && break
    i=$((i + 1))
    sleep 0.2
  done
  curl -s --raw -i -o "$answers/miss" "http://127.0.0.1:$port/buildid/00112233445566778899aabbccddeeff00112233/debuginfo" || true
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -rf "$srv"
fi
DEBUGINFOD_ANSWERS=$answers python3 "$here/seed40.py"
rm -rf "$answers"
for t in elf_symbols unwind_info; do mkdir -p "$here/corpus/$t"; done
elf() { cp "$1" "$here/corpus/elf_symbols/$2"; cp "$1" "$here/corpus/unwind_info/$2"; }
if command -v cc >/dev/null; then
  tmp=$(mktemp -d)
  cat > "$tmp/p.c" <<'C'
#include <stdio.h>
static inline int twice(int x) { return 2 * x; }
__attribute__((noinline)) int work(int x) { return twice(x) + 1; }
int main(int argc, char **argv) { (void)argv; printf("%d\n", work(argc)); return 0; }
C
  # Dynamic (.dynsym, .plt, .rela.plt), with .symtab, DWARF and .debug_frame or .eh_frame.
  cc -Os -Wl,--build-id -Wl,-z,noseparate-code -o "$tmp/dyn" "$tmp/p.c" && elf "$tmp/dyn" dyn
  cc -Os -g -Wl,-z,noseparate-code -o "$tmp/dyn-g" "$tmp/p.c" && elf "$tmp/dyn-g" dyn-g
  cc -Os -g -fno-asynchronous-unwind-tables -Wl,-z,noseparate-code -o "$tmp/debug-frame" "$tmp/p.c" &&
    elf "$tmp/debug-frame" debug-frame
  cc -Os -g -gz -Wl,-z,noseparate-code -o "$tmp/zdebug" "$tmp/p.c" 2>/dev/null && elf "$tmp/zdebug" zdebug
  cc -Os -m32 -Wl,-z,noseparate-code -o "$tmp/dyn32" "$tmp/p.c" 2>/dev/null && elf "$tmp/dyn32" dyn32
  cc -Os -fPIC -shared -Wl,-z,noseparate-code -o "$tmp/lib.so" "$tmp/p.c" && elf "$tmp/lib.so" lib.so
  # Stripped (.dynsym only), and with MiniDebugInfo: its .symtab xz'd in .gnu_debugdata.
  strip -o "$tmp/stripped" "$tmp/dyn" && elf "$tmp/stripped" stripped
  if command -v xz >/dev/null; then
    objcopy --only-keep-debug "$tmp/dyn" "$tmp/mini.elf" &&
      xz --check=crc32 -c "$tmp/mini.elf" > "$tmp/mini.xz" &&
      objcopy --add-section .gnu_debugdata="$tmp/mini.xz" "$tmp/stripped" "$tmp/minidebuginfo" &&
      elf "$tmp/minidebuginfo" minidebuginfo
  fi
  rm -rf "$tmp"
fi
# The vdso (symbols, .eh_frame_hdr) and the slim copies in the sample archive.
python3 - "$here/corpus" <<'PY'
import os, sys, tarfile
out = sys.argv[1]
for l in open("/proc/self/maps"):
    if l.rstrip().endswith("[vdso]"):
        a, b = (int(x, 16) for x in l.split()[0].split("-"))
        with open("/proc/self/mem", "rb") as m:
            m.seek(a)
            img = m.read(b - a)
        for t in ("elf_symbols", "unwind_info"):
            open(os.path.join(out, t, "vdso"), "wb").write(img)
t = tarfile.open(os.path.join(os.path.dirname(out), "..", "tests", "fixtures", "sample.symbols.tar.bz2"))
for m in t.getmembers():
    if m.isfile() and m.size <= 32768 and not m.name.endswith("kallsyms"):
        d = t.extractfile(m).read()
        for tg in ("elf_symbols", "unwind_info"):
            open(os.path.join(out, tg, "archive-" + m.name.replace("/", "_")[-60:]), "wb").write(d)
PY
true
