//! Tests that must survive what kills a process (a SIGBUS from a file that shrinks under a map):
//! the test runs itself again in a child process and judges the child's end.

use std::os::unix::process::ExitStatusExt as _;

/// Whether this is the child run of test `name` (its full path, e.g.
/// `read::file::tests::input_truncated_while_read_is_an_error`), told by the variable `child`.
/// In the parent, runs the child and asserts that it passed and died of no signal; the parent's
/// test then returns at once.
///
/// # Panics
/// In the parent, when the child failed, died of a signal or ran no test.
pub(crate) fn in_child(child: &str, name: &str) -> bool {
    if std::env::var_os(child).is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(child, "1")
        .output()
        .expect("run the child test");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.status.signal(),
        None,
        "the child died of a signal (SIGBUS is {}):\n{log}",
        libc::SIGBUS
    );
    assert!(out.status.success(), "the child failed:\n{log}");
    assert!(log.contains("1 passed"), "the child ran no test:\n{log}");
    false
}
