//! The guide (`docs/custom-stages.md`) quotes this example's code; this test keeps the two equal,
//! so the guide's code is the code CI compiles. It also runs the stage.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text between `// guide:begin NAME` and `// guide:end NAME` in `file`.
fn region(file: &str, name: &str) -> String {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let begin = format!("// guide:begin {name}\n");
    let start = text
        .find(&begin)
        .unwrap_or_else(|| panic!("{file}: no region {name}"))
        + begin.len();
    let end = text[start..].find(&format!("// guide:end {name}")).unwrap() + start;
    text[start..end].to_string()
}

#[test]
fn guide_quotes_the_example_exactly() {
    let guide = std::fs::read_to_string(root().join("docs/custom-stages.md")).unwrap();
    for (file, name) in [
        ("examples/hello/src/lib.rs", "stage"),
        ("examples/hello/src/lib.rs", "spec"),
        ("examples/hello/src/main.rs", "main"),
    ] {
        let code = region(file, name);
        assert!(
            guide.contains(&code),
            "docs/custom-stages.md does not quote {file} [{name}]:\n{code}"
        );
    }
}

#[test]
fn hello_runs_and_is_measured() {
    let input = root().join("tests/fixtures/cpu-clock.pipe.data");
    let out = Command::new(env!("CARGO_BIN_EXE_perfpipe-hello"))
        .args(["--hello", "--stats", "--pipe", "-o", "/dev/null", "-i"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("samples_seen = 3333"), "{err}");
    let listed = Command::new(env!("CARGO_BIN_EXE_perfpipe-hello"))
        .arg("stages")
        .output()
        .unwrap();
    assert!(String::from_utf8(listed.stdout)
        .unwrap()
        .contains("--hello"));
}
