//! `perfpipe-count` on a real recording: the tables on stderr add up to the samples, the stream
//! passes through unchanged.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn counts_samples_per_comm_and_dso() {
    let input =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/multiproc.pipe.data");
    let out_file = std::env::temp_dir().join(format!("perfpipe-count-{}.data", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_perfpipe-count"))
        .args(["--count", "top=100", "--pipe", "-i"])
        .arg(&input)
        .arg("-o")
        .arg(&out_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read(&out_file).unwrap() == std::fs::read(&input).unwrap());
    let _ = std::fs::remove_file(&out_file);
    let err = String::from_utf8(out.stderr).unwrap();
    // Two tables; each one's rows add up to every sample of the fixture (1664, see its README).
    let tables: Vec<u64> = err
        .split("samples       %")
        .skip(1)
        .map(|t| {
            t.lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
                .sum()
        })
        .collect();
    assert_eq!(tables, vec![1664, 1664], "{err}");
    assert!(err.contains("gzip"), "{err}");
    assert!(err.contains("/usr/bin/gzip"), "{err}");
}
