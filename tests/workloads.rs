//! Workloads the oracle tests compile and record live (sources in `tests/workloads/`), each built
//! so its hot frames have names we can look for: `fp_*` (C), `tpl::*` (C++), `frames::*` (Rust),
//! `sys_*` (C, kernel-heavy).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::*;

/// The sampling frequency of the live recordings: 10 kHz gives thousands of samples a second,
/// so 0.1 % of the weight is a few samples, and stays well under the kernel's
/// `perf_event_max_sample_rate` (100 kHz here; throttling would lower it for every user).
pub const FREQ: &str = "10000";

/// A workload: its binary, and the arguments that make it run about a second of CPU.
#[derive(Debug, Clone)]
pub struct Workload {
    pub exe: PathBuf,
    pub args: Vec<String>,
    /// Functions of its own that its flame graph must show.
    pub functions: &'static [&'static str],
}

impl Workload {
    /// The argv to record.
    pub fn argv(&self) -> Vec<&str> {
        let mut v = vec![self.exe.to_str().expect("a UTF-8 path")];
        v.extend(self.args.iter().map(String::as_str));
        v
    }

    /// `perf record -e cpu-clock -F FREQ -g EXTRA -o - -- WORKLOAD`: the pipe stream.
    pub fn record(&self, extra: &[&str]) -> Vec<u8> {
        let mut args = vec!["-e", "cpu-clock", "-F", FREQ, "-g"];
        args.extend_from_slice(extra);
        perf_record(&args, &self.argv())
    }
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/workloads")
        .join(name)
}

/// Runs a compiler, asserting it built `exe`.
pub(crate) fn compile(cmd: &mut Command, exe: &Path) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success() && exe.is_file(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn c_program(dir: &Dir, src: &str, exe: &str) -> PathBuf {
    require(Need::Cc);
    let exe = dir.path(exe);
    compile(
        Command::new("cc")
            .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
            .arg(&exe)
            .arg(source(src)),
        &exe,
    );
    exe
}

/// `fp.c`: forks 3 children, each in its own frame-pointer call chain (`fp_child` → `fp_middle`
/// → `fp_leaf_add` / `fp_leaf_mul` / `fp_recurse`×6).
pub fn frame_pointer_c(dir: &Dir) -> Workload {
    Workload {
        exe: c_program(dir, "fp.c", "fp"),
        args: vec!["300".into()],
        functions: &[
            "fp_child",
            "fp_middle",
            "fp_leaf_add",
            "fp_leaf_mul",
            "fp_recurse",
        ],
    }
}

/// `syscalls.c`: read, write, open/close, fstat and getppid in a loop: mostly kernel frames.
pub fn kernel_heavy(dir: &Dir) -> Workload {
    Workload {
        exe: c_program(dir, "syscalls.c", "syscalls"),
        args: vec!["100000".into()],
        functions: &["main"],
    }
}

/// `templates.cc` with `-O2 -fno-omit-frame-pointer -g`: template instances (`tpl::sum_poly<double>`,
/// `std::__introsort_loop<…>`), inlined helpers (`Poly<T, N>::eval`, `mix`), a lambda, `std::map`.
pub fn cpp_templates(dir: &Dir) -> Workload {
    let exe = dir.path("templates");
    compile(
        Command::new("c++")
            .args(["-O2", "-fno-omit-frame-pointer", "-g", "-o"])
            .arg(&exe)
            .arg(source("templates.cc")),
        &exe,
    );
    Workload {
        exe,
        args: vec!["1000".into()],
        functions: &[
            "tpl::run",
            "tpl::sum_poly<double>",
            "tpl::Sorter::sort_desc",
        ],
    }
}

/// `frames.rs` with `rustc -C force-frame-pointers=yes -C opt-level=2 -g`: three named threads in
/// a generic function, a trait method and a recursion.
pub fn rust(dir: &Dir) -> Workload {
    let exe = dir.path("frames");
    compile(
        Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
            .args([
                "-C",
                "force-frame-pointers=yes",
                "-C",
                "opt-level=2",
                "-g",
                "--edition",
                "2021",
                "-o",
            ])
            .arg(&exe)
            .arg(source("frames.rs")),
        &exe,
    );
    Workload {
        exe,
        args: vec!["100".into()],
        functions: &["frames::spin", "frames::checksum", "frames::fib"],
    }
}

/// `noploop.c`: `noploop` spins for a second, as `perf test -w noploop` (the workload of perf's
/// `tools/perf/tests/shell/pipe_test.sh`).
pub fn noploop(dir: &Dir) -> Workload {
    Workload {
        exe: c_program(dir, "noploop.c", "noploop"),
        args: vec!["1".into()],
        functions: &["noploop"],
    }
}

/// `offcpu.c`: threads that wait in known functions for known times: `nap` (100 × 10 ms asleep),
/// `wait_pipe` (blocked 300 ms on a pipe), `write_later` (asleep 300 ms), `spin` (300 ms of CPU).
pub fn offcpu_c(dir: &Dir) -> PathBuf {
    c_program(dir, "offcpu.c", "offcpu")
}

/// `shift.c`: `shift A B` spends A rounds in `shift_a` and B in `shift_b` (under `shift_work`),
/// then 150 in `shift_same`: `rounds` `(A, B)`, and swapped runs move the work from one hot
/// function to the other (the diff tests' BASE and NEW).
pub fn shift(dir: &Dir, rounds: (u32, u32)) -> Workload {
    let exe = dir.path("shift");
    if !exe.is_file() {
        c_program(dir, "shift.c", "shift");
    }
    Workload {
        exe,
        args: vec![rounds.0.to_string(), rounds.1.to_string()],
        functions: &["shift_work", "shift_a", "shift_b", "shift_same"],
    }
}
