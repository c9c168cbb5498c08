//! The workload of `record -- CMD`, started as perf starts it (`evlist__prepare_workload()`):
//! forked at once but held before `exec` on a pipe until the events are open, so that
//! `enable_on_exec` turns them on exactly at the exec and nothing of perfpipe is sampled.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A forked workload waiting to exec.
#[derive(Debug)]
pub struct Workload {
    pid: libc::pid_t,
    go: Option<OwnedFd>,
    status: Option<i32>,
}

impl Workload {
    /// Forks a child that will exec `argv` when [`Workload::start`] is called (or exit 127 if
    /// the parent goes away first). With `stdout_to_stderr` its standard output is standard
    /// error, as perf does when the recording goes to standard output.
    ///
    /// # Errors
    /// An empty command, a NUL byte in an argument, or a failing pipe/fork.
    pub fn prepare(argv: &[String], stdout_to_stderr: bool) -> io::Result<Workload> {
        if argv.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
        }
        let nul = |e| io::Error::new(io::ErrorKind::InvalidInput, e);
        let cargs: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(nul)?;
        // Everything the child needs is made here, before the fork: between fork and exec a
        // child of a multi-threaded process may only call async-signal-safe functions, and
        // `execvp` (which searches PATH) is not one; `execve` is.
        let prog =
            CString::new(resolve_program(&argv[0]).into_os_string().into_vec()).map_err(nul)?;
        let env: Vec<CString> = std::env::vars_os()
            .map(|(k, v)| {
                let mut kv = k.into_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv)
            })
            .collect::<Result<_, _>>()
            .map_err(nul)?;
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = env.iter().map(|c| c.as_ptr()).collect();
        envp.push(std::ptr::null());
        // A file without `#!` that the kernel will not execute (ENOEXEC) is run by the shell, as
        // `execvp` does: `/bin/sh prog args...`.
        let sh = c"/bin/sh";
        let mut sh_ptrs = vec![sh.as_ptr(), prog.as_ptr()];
        sh_ptrs.extend(cargs.iter().skip(1).map(|c| c.as_ptr()));
        sh_ptrs.push(std::ptr::null());
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two fds into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both fds are new and owned by nobody else.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fork; the child only calls functions POSIX lists as async-signal-safe (close,
        // read, dup2, execve, _exit; reading errno) on memory prepared before the fork, which the
        // parent keeps alive until then (the child has its own copy of it).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the child, see above; every pointer is to a NUL-terminated string or a
            // NULL-terminated array of them.
            unsafe {
                libc::close(wr.as_raw_fd());
                let mut b = 0u8;
                let n = libc::read(rd.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
                if n != 1 {
                    libc::_exit(127);
                }
                if stdout_to_stderr {
                    libc::dup2(2, 1);
                }
                libc::execve(prog.as_ptr(), ptrs.as_ptr(), envp.as_ptr());
                if *libc::__errno_location() == libc::ENOEXEC {
                    libc::execve(sh.as_ptr(), sh_ptrs.as_ptr(), envp.as_ptr());
                }
                libc::_exit(127);
            }
        }
        drop(rd);
        Ok(Workload {
            pid,
            go: Some(wr),
            status: None,
        })
    }

    /// The child's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Lets the child exec.
    ///
    /// # Errors
    /// The write to the pipe failed (the child is gone).
    pub fn start(&mut self) -> io::Result<()> {
        if let Some(go) = self.go.take() {
            // SAFETY: writing one byte from a valid buffer to our pipe end.
            let n = unsafe { libc::write(go.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
            if n != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Whether the child has exited (reaped without blocking); its wait status is kept.
    pub fn exited(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        if r == self.pid || r < 0 {
            self.status = Some(status);
        }
        self.status.is_some()
    }

    /// Ends a started workload that still runs when the recording is stopped: SIGTERM, as
    /// `perf record` sends it, then reaps it if it is gone within a second (a workload that
    /// ignores SIGTERM is left running rather than waited for without end).
    pub fn terminate(&mut self) {
        if self.go.is_some() || self.exited() {
            return;
        }
        // SAFETY: signalling our own child, which we have not reaped (so the pid is still ours).
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
        let t0 = Instant::now();
        while !self.exited() && t0.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The exit code, once exited normally.
    pub fn exit_code(&self) -> Option<i32> {
        let s = self.status?;
        libc::WIFEXITED(s).then(|| libc::WEXITSTATUS(s))
    }
}

/// The file `execvp(3)` runs for `name`: `name` itself if it holds a `/`, else the first
/// executable regular file `DIR/name` for `DIR` in `$PATH` (an empty entry is the current
/// directory; without `$PATH`, `/bin:/usr/bin`, glibc's default). `name` itself when none is,
/// which then fails to exec as `execvp` would (the child exits 127).
fn resolve_program(name: &str) -> PathBuf {
    if name.contains('/') {
        return PathBuf::from(name);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    for dir in path.as_bytes().split(|&b| b == b':') {
        let dir = if dir.is_empty() {
            OsStr::new(".")
        } else {
            OsStr::from_bytes(dir)
        };
        let cand = PathBuf::from(dir).join(name);
        if std::fs::metadata(&cand)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        {
            return cand;
        }
    }
    PathBuf::from(name)
}

impl Drop for Workload {
    fn drop(&mut self) {
        // Never started: closing the pipe makes the child exit 127; reap it.
        let never_started = self.go.take().is_some();
        if never_started && self.status.is_none() {
            let mut status = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_as_execvp_finds_them() {
        let sh = resolve_program("sh");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{sh:?}");
        assert_eq!(resolve_program("./x"), PathBuf::from("./x"));
        assert_eq!(resolve_program("/bin/true"), PathBuf::from("/bin/true"));
        assert_eq!(
            resolve_program("perfpipe-no-such-program"),
            PathBuf::from("perfpipe-no-such-program")
        );
    }

    /// The workload runs from PATH, with our environment, and a script without `#!` runs
    /// through the shell, as with `execvp`.
    #[test]
    fn workloads_exec_with_path_environment_and_shell_fallback() {
        let dir = std::env::temp_dir().join(format!("perfpipe-workload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out");
        let script = dir.join("noshebang");
        std::fs::write(&script, format!("echo \"$PATH\" > {}\n", out.display())).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut w = Workload::prepare(&[script.display().to_string()], false).unwrap();
        w.start().unwrap();
        while !w.exited() {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(w.exit_code(), Some(0));
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), format!("{path}\n"));
        let mut t = Workload::prepare(&["true".to_string()], false).unwrap();
        t.start().unwrap();
        while !t.exited() {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(t.exit_code(), Some(0));
        let mut gone = Workload::prepare(&["perfpipe-no-such-program".to_string()], false).unwrap();
        gone.start().unwrap();
        while !gone.exited() {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(gone.exit_code(), Some(127));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
