//! Probes what the tests need (perf, to read the redacted output): without it those tests are
//! ignored with a reason (or, under `CI`, fail). See `tests/needs.rs` in the workspace.

#[allow(dead_code)] // `require` and friends are for the tests.
#[path = "../../tests/needs.rs"]
mod needs;

fn main() {
    needs::build_script(&[needs::Need::Perf]);
}
