//! `perfpipe-count`: the whole perfpipe command line, plus the `count` stage.

fn main() -> std::process::ExitCode {
    let mut registry = perfpipe_chain::builtin();
    registry.add(perfpipe_example_count::SPEC);
    perfpipe::main_with(registry)
}
