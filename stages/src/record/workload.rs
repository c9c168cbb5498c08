//! The workload of `record -- CMD`, started as perf starts it (`evlist__prepare_workload()`):
//! forked at once but held before `exec` on a pipe until the events are open, so that
//! `enable_on_exec` turns them on exactly at the exec and nothing of perfpipe is sampled.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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
        let cargs: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two fds into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both fds are new and owned by nobody else.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fork; the child only calls async-signal-safe functions (close, read, dup2,
        // execvp, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the child, see above.
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
                libc::execvp(ptrs[0], ptrs.as_ptr());
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
