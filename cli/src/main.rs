//! `perfpipe`: see `perfpipe --help` and the README.

fn main() -> std::process::ExitCode {
    perfpipe::main()
}
