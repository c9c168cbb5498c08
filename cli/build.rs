//! Probes what the integration tests (`../tests`) need: a missing need makes the tests that need it
//! ignored with a reason (or, under `CI`, failures). See `tests/needs.rs`.

#[allow(dead_code)] // `require` and friends are for the tests.
#[path = "../tests/needs.rs"]
mod needs;

fn main() {
    needs::build_script(&needs::Need::ALL);
}
