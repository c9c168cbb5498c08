//! `perfpipe-redact`: the whole perfpipe command line, plus the `redact` stage.

fn main() -> std::process::ExitCode {
    let mut registry = perfpipe_chain::builtin();
    registry.add(perfpipe_example_redact::SPEC);
    perfpipe::main_with(registry)
}
