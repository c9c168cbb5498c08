//! Measurement: the `--stats` table names the limiting part, `--stats-json` follows its schema,
//! `--tap` writes a stream perf reads, progress shows on a terminal and nowhere else, and
//! interrupts end with the figures printed.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::util::*;

fn verdict_line(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .find(|l| l.starts_with("bottleneck:"))
        .unwrap_or_default()
        .to_string()
}

pipetest!(
    /// A consumer that reads slowly makes the output the limit.
    slow_consumer_names_the_output, |_dir| {
    let big = big_stream(60);
    let mut child = Command::new(bin())
        .args(["--stats", "--pipe-buffer", "0", "--batch-size", "64K"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || sin.write_all(&big).unwrap());
    let mut sout = child.stdout.take().unwrap();
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0;
    loop {
        std::thread::sleep(Duration::from_millis(2));
        match sout.read(&mut buf).unwrap() {
            0 => break,
            n => total += n,
        }
    }
    feeder.join().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(total > 5_000_000);
    let v = verdict_line(&out.stderr);
    assert!(v.starts_with("bottleneck: the output (write waits"), "{v}");
});

pipetest!(
    /// A producer that writes slowly makes the input the limit.
    slow_producer_names_the_input, |_dir| {
    let big = big_stream(4);
    let mut child = Command::new(bin())
        .args(["--stats", "-o", "/dev/null"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = child.stdin.take().unwrap();
    for chunk in big.chunks(8 * 1024) {
        sin.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(3));
    }
    drop(sin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v = verdict_line(&out.stderr);
    assert!(v.starts_with("bottleneck: the input (read waits"), "{v}");
});

/// A minimal JSON Schema check (type, enum, required, properties, items, additionalProperties,
/// oneOf, local `$ref`): enough for docs/stats.schema.json, and strict about what it checks.
pub(crate) fn validate(schema: &Value, root: &Value, v: &Value, path: &str) -> Result<(), String> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r
            .strip_prefix("#/$defs/")
            .ok_or(format!("unsupported $ref {r}"))?;
        return validate(&root["$defs"][name], root, v, path);
    }
    if let Some(alts) = schema.get("oneOf").and_then(Value::as_array) {
        let errs: Vec<String> = alts
            .iter()
            .filter_map(|a| validate(a, root, v, path).err())
            .collect();
        if alts.len() - errs.len() != 1 {
            return Err(format!(
                "{path}: {v} matches {} of oneOf's {} ({errs:?})",
                alts.len() - errs.len(),
                alts.len()
            ));
        }
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => return Err(format!("{path}: bad type in schema")),
        };
        let ok = types.iter().any(|t| match *t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_u64() || v.is_i64(),
            "number" => v.is_number(),
            "null" => v.is_null(),
            "boolean" => v.is_boolean(),
            _ => false,
        });
        if !ok {
            return Err(format!("{path}: {v} is not {types:?}"));
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            return Err(format!("{path}: {v} not in {e:?}"));
        }
    }
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if v.get(r).is_none() {
                return Err(format!("{path}: missing {r}"));
            }
        }
    }
    if let (Some(props), Some(obj)) = (schema.get("properties"), v.as_object()) {
        for (k, sub) in props.as_object().unwrap() {
            if let Some(x) = obj.get(k) {
                validate(sub, root, x, &format!("{path}.{k}"))?;
            }
        }
    }
    if let (Some(extra), Some(obj)) = (schema.get("additionalProperties"), v.as_object()) {
        for (k, x) in obj {
            validate(extra, root, x, &format!("{path}.{k}"))?;
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            validate(items, root, x, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

pub(crate) fn schema() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/stats.schema.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

pipetest!(
    /// The JSON validates against the documented schema and holds the same counts as the run.
    stats_json_follows_its_schema,
    |dir| {
        let json = dir.path("stats.json");
        let input = fixture_bytes("two-events.pipe.data");
        let out = perfpipe(&["--stats-json", json.to_str().unwrap()], &input);
        assert!(out.status.success());
        let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let schema = schema();
        validate(&schema, &schema, &doc, "$").unwrap();
        // The validator rejects what breaks the schema.
        let mut broken = doc.clone();
        broken["stages"][0]["end"] = Value::from("sideways");
        assert!(validate(&schema, &schema, &broken, "$").is_err());
        let decode = &doc["stages"][1];
        assert_eq!(decode["name"], "decode");
        assert_eq!(decode["output"]["records"], 3846);
        assert_eq!(decode["output"]["kinds"]["SAMPLE"], 3673);
        assert_eq!(decode["output"]["kinds"]["ATTR"], 2);
        assert_eq!(doc["stages"][2]["input"]["bytes"], input.len() as u64);
    }
);

pipetest!(
    /// The JSON is written on an error end too, with the error in it.
    stats_json_on_error,
    |dir| {
        let json = dir.path("stats.json");
        let mut input = fixture_bytes("cpu-clock.pipe.data");
        input.truncate(input.len() - 5);
        let out = perfpipe(&["--stats", "--stats-json", json.to_str().unwrap()], &input);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("bottleneck:"));
        let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let err = doc["errors"][0].as_str().unwrap();
        assert!(err.starts_with("decode: offset "), "{err}");
        assert_eq!(doc["stages"][1]["end"], "failed");
    }
);

pipetest!(needs(perf)
    /// `--tap decode=FILE` writes the stream as decode emits it; perf script reads it.
    tap_writes_a_stream_perf_reads,
    |dir| {
        let tap = dir.path("tap.data");
        let input = fixture_bytes("multiproc.pipe.data");
        let arg = format!("decode={}", tap.display());
        let out = perfpipe(&["--tap", &arg, "-o", "/dev/null"], &input);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let tapped = std::fs::read(&tap).unwrap();
        assert!(tapped == input);
        assert!(count_samples(&perf_script(&tapped)) > 100);
        let bad = perfpipe(&["--tap", "nosuch=/tmp/x"], &input);
        assert_eq!(bad.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&bad.stderr).contains("no stage named `nosuch`"));
    }
);

pipetest!(
    /// Without a terminal, no progress noise; with `--progress` forced, plain status lines.
    no_progress_noise_without_a_terminal, |_dir| {
    let input = fixture_bytes("callgraph.pipe.data");
    let out = perfpipe(&[], &input);
    assert!(out.status.success());
    eqnice!("", String::from_utf8_lossy(&out.stderr));
    let forced = perfpipe(&["--progress", "-o", "/dev/null"], &input);
    let err = String::from_utf8_lossy(&forced.stderr);
    assert!(err.contains("perfpipe: input "), "{err}");
    assert!(err.contains("decode"), "{err}");
});

pipetest!(needs(script)
    /// Under a pseudo-terminal (util-linux `script`), the live lines are drawn.
    live_progress_on_a_terminal, |_dir| {
    let input = fixture("multiproc.pipe.data");
    let cmd = format!("{} -i {} -o /dev/null", bin().display(), input.display());
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(screen.contains("input 0.1/0.1 MB (100%)"), "{screen}");
    assert!(
        screen.contains("decode") && screen.contains("MB/s"),
        "{screen}"
    );
});

pipetest!(
    /// Interrupts: the first keeps draining the input (everything is written, status 0, figures
    /// printed); the second stops at once with status 130 and the figures so far. Each signal goes
    /// once the one before has been taken: the handlers installed (`signal`), then the first
    /// interrupt's notice printed.
    interrupts_drain_then_abort, |_dir| {
    let input = fixture_bytes("callgraph.pipe.data");
    for twice in [false, true] {
        let mut child = spawn(&["--stats"]);
        let mut sin = child.stdin.take().unwrap();
        let out = Watch::new(child.stdout.take().unwrap());
        let err = Watch::new(child.stderr.take().unwrap());
        let half = input.len() / 2;
        sin.write_all(&input[..half]).unwrap();
        signal(&child, libc::SIGINT);
        if twice {
            err.wait_for("interrupted: writing what the input still sends");
            signal(&child, libc::SIGTERM);
            let status = child.wait().unwrap();
            let (out, err) = (out.finish(), err.finish_text());
            assert_eq!(status.code(), Some(130), "{err}");
            assert!(err.contains("bottleneck:"), "{err}");
            assert!(err.contains("interrupted twice"), "{err}");
            // What was written is whole records from the start of the input.
            assert!(input.starts_with(&out));
        } else {
            sin.write_all(&input[half..]).unwrap();
            drop(sin);
            let status = child.wait().unwrap();
            let (out, err) = (out.finish(), err.finish_text());
            assert_eq!(status.code(), Some(0), "{err}");
            assert!(out == input, "not everything was written");
            assert!(err.contains("bottleneck:"), "{err}");
        }
    }
});
