//! Probes what the unit tests need (a C compiler, for the symbol tests' workloads): a missing need
//! makes those tests ignored with a reason (or, under `CI`, failures). See `tests/needs.rs` in the
//! workspace.

#[allow(dead_code)] // `require` and friends are for the tests.
#[path = "../tests/needs.rs"]
mod needs;

fn main() {
    needs::build_script(&[needs::Need::Cc]);
}
