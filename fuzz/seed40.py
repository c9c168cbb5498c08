#!/usr/bin/env python3
"""Seeds of the issue-40 fuzz targets (called by seed.sh): small real inputs of each parser.

archive: tars in perf's build-id-cache layout as `perfpipe archive` writes them (links, files,
kallsyms), in GNU, ustar and pax formats, with hard links, long names and escaping names, and
a .tar.bz2; tracing: the tracepoint fixture's tracing data (and a copy cut down to two ftrace
formats), and tracepoint `format` files of this kernel; kallsyms: pieces of /proc/kallsyms at
its start, where modules begin, and its end; debuginfod: answers as a server sends them
(Content-Length, chunked, 404, 406, redirects); the ELF seeds are made by seed.sh (cc, objcopy).
"""
import bz2, io, os, random, struct, sys, tarfile, glob

here = os.path.dirname(os.path.abspath(__file__))
fx = os.path.join(here, "..", "tests", "fixtures")
corpus = os.path.join(here, "corpus")


def put(target, name, data):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- archive -------------------------------------------------------------------------------
def tar_of(entries, fmt):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
        for kind, name, arg in entries:
            i = tarfile.TarInfo(name)
            if kind == "file":
                i.size = len(arg)
                t.addfile(i, io.BytesIO(arg))
            elif kind == "sym":
                i.type = tarfile.SYMTYPE
                i.linkname = arg
                t.addfile(i)
            elif kind == "hard":
                i.type = tarfile.LNKTYPE
                i.linkname = arg
                t.addfile(i)
            elif kind == "dir":
                i.type = tarfile.DIRTYPE
                t.addfile(i)
    return out.getvalue()


ID = "ea9906864300bd21399870660862705624651e3a"
KID = "32a7f3bacee6bf69da94f497a8a076483baea20e"
elf_stub = b"\x7fELF\x02\x01\x01" + bytes(57)
kallsyms = b"ffffffff81000000 T _text\nffffffff81000100 T start_kernel\nffffffffa0000000 t mod_fn\t[xfs]\n"
layout = [
    ("sym", f".build-id/{ID[:2]}/{ID[2:]}", f"../../tmp/sample/{ID}"),
    ("file", f"tmp/sample/{ID}/elf", elf_stub),
    ("file", f"tmp/sample/{ID}/debug", elf_stub),
    ("sym", f".build-id/{KID[:2]}/{KID[2:]}", f"../../[kernel.kallsyms]/{KID}"),
    ("file", f"[kernel.kallsyms]/{KID}/kallsyms", kallsyms),
]
hostile = [
    ("dir", "usr/lib", None),
    ("sym", f".build-id/{ID[:2]}/{ID[2:]}", "../../usr/lib/libx.so/" + ID),
    ("sym", f"usr/lib/libx.so/{ID}", "../../../../../etc"),
    ("file", "../escape", b"x"),
    ("file", "/abs/path", b"y"),
    ("hard", f"usr/lib/liby.so/{ID}/elf", f"tmp/sample/{ID}/elf"),
    ("file", f"tmp/sample/{ID}/elf", elf_stub),
    ("sym", ".build-id/aa/loop", ".build-id/aa/loop"),
    ("file", "x/" + "long" * 40 + "/elf", b"z"),
]
for fmt, fname in [(tarfile.GNU_FORMAT, "gnu"), (tarfile.USTAR_FORMAT, "ustar"), (tarfile.PAX_FORMAT, "pax")]:
    put("archive", f"layout-{fname}.tar", tar_of(layout, fmt))
    try:
        put("archive", f"hostile-{fname}.tar", tar_of(hostile, fmt))
    except ValueError:  # a name ustar cannot hold
        pass
put("archive", "layout.tar.bz2", bz2.compress(tar_of(layout, tarfile.GNU_FORMAT)))
put("archive", "empty.tar", bytes(1024))

# --- tracing -------------------------------------------------------------------------------
MAGIC = b"\x17\x08\x44tracing"
raw = open(os.path.join(fx, "tracepoint.pipe.data"), "rb").read()
at = raw.find(MAGIC)
if at >= 8:
    size = struct.unpack_from("<I", raw, at - 8)[0]
    blob = raw[at : at + size]
    put("tracing", "tracepoint-fixture", blob)
    # The same with the first two ftrace formats only (a small input mutates fast).
    c = at_ = 0
    b = blob
    p = len(MAGIC)
    p = b.index(b"\0", p) + 1  # version
    p += 2 + 4  # endian, long size, page size
    for _ in range(2):
        p = b.index(b"\0", p) + 1
        n = struct.unpack_from("<Q", b, p)[0]
        p += 8 + n
    nf = struct.unpack_from("<I", b, p)[0]
    q = p + 4
    fmts = []
    for _ in range(nf):
        n = struct.unpack_from("<Q", b, q)[0]
        fmts.append(b[q : q + 8 + n])
        q += 8 + n
    small = b[:p] + struct.pack("<I", min(2, nf)) + b"".join(fmts[:2]) + b[q:]
    put("tracing", "tracepoint-small", small)
    put("tracing", "tracepoint-cut", small[: len(small) * 2 // 3])
formats = sorted(glob.glob("/sys/kernel/tracing/events/*/*/format"))
random.seed(40)
for f in random.sample(formats, min(120, len(formats))):
    try:
        put("tracing", "format-" + f.split("/")[-3] + "-" + f.split("/")[-2], open(f, "rb").read())
    except OSError:
        pass
for f in ["sched/sched_switch", "sched/sched_wakeup", "irq/irq_handler_entry", "syscalls/sys_enter_openat",
          "writeback/writeback_dirty_inode", "block/block_rq_issue", "timer/hrtimer_start"]:
    try:
        put("tracing", "format-" + f.replace("/", "-"), open(f"/sys/kernel/tracing/events/{f}/format", "rb").read())
    except OSError:
        pass

# --- kallsyms ------------------------------------------------------------------------------
try:
    k = open("/proc/kallsyms", "rb").read()
except OSError:
    k = b""
if k and not k.startswith(b"0000000000000000"):
    lines = k.split(b"\n")
    def piece(i, n=60):
        return b"\n".join(lines[max(0, i) : i + n]) + b"\n"
    first_mod = next((i for i, l in enumerate(lines) if b"\t[" in l), len(lines) // 2)
    put("kallsyms", "proc-start", piece(0))
    put("kallsyms", "proc-modules-begin", piece(first_mod - 30))
    put("kallsyms", "proc-middle", piece(len(lines) // 3))
    put("kallsyms", "proc-end", piece(len(lines) - 61))
put("kallsyms", "fixture-like", kallsyms + b"ffffffff81000100 t alias_b\nffffffff81000180 r __ro\nffffffff81000200 W weak\n")
try:
    t = tarfile.open(os.path.join(fx, "sample.symbols.tar.bz2"))
    for m in t.getmembers():
        if m.name.endswith("/kallsyms"):
            put("kallsyms", "sample-archive", t.extractfile(m).read())
except (OSError, tarfile.TarError):
    pass

# --- debuginfod ----------------------------------------------------------------------------
SEP = b"\0--\0"
body = elf_stub * 4
def ans(status, headers, body=b""):
    h = "".join(f"{k}: {v}\r\n" for k, v in headers)
    return f"HTTP/1.1 {status}\r\n{h}\r\n".encode() + body
def chunked(b, n):
    out = b""
    for i in range(0, len(b), n):
        out += b"%x\r\n" % len(b[i : i + n]) + b[i : i + n] + b"\r\n"
    return out + b"0\r\n\r\n"
seeds = {
    "ok-length": ans("200 OK", [("Content-Length", len(body)), ("Content-Type", "application/octet-stream"),
                                ("X-DEBUGINFOD-FILE", "/usr/lib/debug/x.debug"), ("X-DEBUGINFOD-SIZE", len(body))], body),
    "ok-chunked": ans("200 OK", [("Transfer-Encoding", "chunked")], chunked(body, 100)),
    "ok-chunked-ext": ans("200 OK", [("Transfer-Encoding", "chunked")], b"10;name=val\r\n" + body[:16] + b"\r\n0\r\nTrailer: x\r\n\r\n"),
    "ok-close": ans("200 OK", [("Connection", "close")], body),
    "short": ans("200 OK", [("Content-Length", 1000)], body),
    "not-found": ans("404 Not Found", [("Content-Length", 0)]),
    "too-big": ans("406 Not Acceptable", [("Content-Length", 0)]),
    "big-length": ans("200 OK", [("Content-Length", 1 << 40)], body),
    "server-error": ans("503 Service Unavailable", [("Retry-After", 5), ("Content-Length", 3)], b"bad"),
    "redirect": ans("302 Found", [("Location", "http://other.invalid/buildid/x/debuginfo"), ("Content-Length", 0)])
    + SEP + ans("200 OK", [("Content-Length", len(body))], body),
    "redirect-relative": ans("301 Moved Permanently", [("Location", "/elsewhere/debuginfo")])
    + SEP + ans("404 Not Found", [("Content-Length", 0)]),
    "redirect-chain": SEP.join([ans("307 Temporary Redirect", [("Location", f"/r{i}"), ("Content-Length", 0)]) for i in range(9)]),
    "continue": ans("100 Continue", []) + ans("200 OK", [("Content-Length", 4)], b"\x7fELF"),
    "http10": b"HTTP/1.0 200 OK\r\n\r\n" + body,
    "gzip": ans("200 OK", [("Content-Encoding", "gzip"), ("Content-Length", 4)], b"\x1f\x8b\x08\x00"),
}
for n, d in seeds.items():
    for mode in [b"\0\0", b"\x01\x02", b"\x06\x01", b"\x03\x03"]:
        put("debuginfod", f"{n}-{mode.hex()}", mode + d)
real = os.environ.get("DEBUGINFOD_ANSWERS")
if real and os.path.isdir(real):
    for f in os.listdir(real):
        d = open(os.path.join(real, f), "rb").read()
        for mode in [b"\0\x02", b"\x01\x02"]:
            put("debuginfod", f"real-{f}-{mode.hex()}", mode + d)
