//! `perfpipe-hello`: the whole perfpipe command line, plus the `hello` stage.

// guide:begin main
fn main() -> std::process::ExitCode {
    let mut registry = perfpipe_chain::builtin();
    registry.add(perfpipe_example_hello::SPEC);
    perfpipe::main_with(registry)
}
// guide:end main
