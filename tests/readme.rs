//! The README cannot drift from the binary:
//!
//! - every flag of its usage block (the `text` code block and the option table under `## Usage`)
//!   is an option of the command the line is about, as that command's `--help` lists it;
//! - its two tables under `## Stages and formats` list exactly the stages and formats that
//!   `perfpipe stages` prints. A row marked `yes` in an `optional` column is a cargo feature: a
//!   build without it may leave it out;
//! - its main job (`## Set-up`), run as written, draws a flame graph whose frames are named, by
//!   the archive it passes: without `--symbols` the workload's frames are not.
//!
//! Nor can the docs drift from the tree: every repository path that the README, `docs/`,
//! `benches/`, a crate's README or the index of `tests/tests.rs` names exists, every `-p NAME`
//! is a package of the workspace, and that index names every module of the tests.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::util::bin;

fn readme() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The lines under the heading `## {title}`, up to the next `## ` heading.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    let heading = format!("## {title}");
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading);
    assert!(
        lines.next().is_some(),
        "README.md has no `{heading}` section"
    );
    lines.take_while(|l| !l.starts_with("## ")).collect()
}

/// The flags written in `text`: `--long` and `-x` where they stand on their own (at the start, or
/// after a space, `[`, `(`, `|`, a backtick, `,` or `/`). `--` alone (`-- CMD`), `-` alone
/// (standard input) and the `-` inside a word (`NAME-%n`) are not flags.
fn flags(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'-' || (i > 0 && !b" [(|`,/".contains(&b[i - 1])) {
            i += 1;
            continue;
        }
        let long = b.get(i + 1) == Some(&b'-');
        let name = if long { i + 2 } else { i + 1 };
        let mut end = name;
        while end < b.len()
            && (b[end].is_ascii_alphanumeric() || (long && end > name && b[end] == b'-'))
        {
            end += 1;
        }
        let is_flag = if long {
            end > name
        } else {
            // One letter, then not a letter or digit: `-i`, `-F HZ`, `-g]`.
            end == name + 1 && b[name].is_ascii_alphabetic()
        };
        if is_flag {
            out.push(String::from_utf8_lossy(&b[i..end]).into_owned());
        }
        i = end.max(i + 1);
    }
    out
}

/// The flags a `--help` text defines: the leading `-…` words of each option line
/// (`  -i, --input <FILE>  …`, `      --decompress`), not the flags its prose mentions.
fn help_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| {
            l.split_whitespace()
                .take_while(|w| w.starts_with('-'))
                .flat_map(flags)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `perfpipe ARGS`, which must succeed; its standard output.
fn perfpipe_out(args: &[&str]) -> String {
    let out = Command::new(bin())
        .args(args)
        .output()
        .expect("run perfpipe");
    assert!(
        out.status.success(),
        "perfpipe {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("perfpipe prints UTF-8")
}

/// The subcommand a usage line is about: the words after `perfpipe` up to the first bracket,
/// flag or placeholder (`perfpipe bench pipeline [-i …` → `bench pipeline`).
fn subcommand(line: &str) -> Vec<String> {
    line.split_whitespace()
        .skip(1)
        .take_while(|w| {
            w.bytes().all(|c| c.is_ascii_lowercase() || c == b'-') && !w.starts_with('-')
        })
        .map(str::to_string)
        .collect()
}

pipetest!(usage_flags_are_in_the_help, |_dir| {
    let text = readme();
    let usage = section(&text, "Usage");
    let mut helps: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    let mut help_of = |command: &[String]| -> BTreeSet<String> {
        helps
            .entry(command.to_vec())
            .or_insert_with(|| {
                let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
                args.push("--help");
                help_flags(&perfpipe_out(&args))
            })
            .clone()
    };
    let mut wrong = Vec::new();
    let mut checked = 0;

    // The usage block: one command a line; an indented line continues the one before.
    let start = usage
        .iter()
        .position(|l| l.trim_end() == "```text")
        .expect("the Usage section opens a ```text code block");
    let mut command: Option<Vec<String>> = None;
    for line in usage[start + 1..]
        .iter()
        .take_while(|l| l.trim_end() != "```")
    {
        if line.starts_with("perfpipe") {
            command = Some(subcommand(line));
        } else {
            assert!(
                line.starts_with(' ') && command.is_some(),
                "a usage line starts with `perfpipe` or continues the one before: {line:?}"
            );
        }
        let command = command.as_ref().unwrap();
        let known = help_of(command);
        for flag in flags(line) {
            checked += 1;
            if !known.contains(&flag) {
                wrong.push(format!("`perfpipe {}`: {flag}", command.join(" ")));
            }
        }
    }

    // The option table: the first cell of each row, options of the main command.
    let main = help_of(&[]);
    for row in usage.iter().filter(|l| l.starts_with("| `")) {
        let cell = row.split('|').nth(1).unwrap_or_default();
        for flag in flags(cell) {
            checked += 1;
            if !main.contains(&flag) {
                wrong.push(format!("option table: {flag}"));
            }
        }
    }

    assert!(
        checked >= 40,
        "only {checked} flags found in the README's usage block"
    );
    assert!(
        wrong.is_empty(),
        "README.md's usage block names flags that `--help` does not list:\n  {}",
        wrong.join("\n  ")
    );
});

/// A row of one of the README's tables: its first cell's name and whether it is optional.
#[derive(Debug)]
struct Row {
    name: String,
    optional: bool,
    /// The row's text.
    line: String,
}

/// The rows of the tables in `lines` whose first cell is a name in backticks.
fn table_rows(lines: &[&str]) -> Vec<Row> {
    let cells = |l: &str| -> Vec<String> {
        let l = l.trim().trim_start_matches('|').trim_end_matches('|');
        l.split(" | ").map(|c| c.trim().to_string()).collect()
    };
    let mut rows = Vec::new();
    let mut optional_column = None;
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with('|') {
            optional_column = None;
            continue;
        }
        if lines
            .get(i + 1)
            .is_some_and(|next| next.starts_with("|---"))
        {
            optional_column = cells(line).iter().position(|c| c == "optional");
            continue;
        }
        if !line.starts_with("| `") {
            continue;
        }
        let cells = cells(line);
        rows.push(Row {
            name: cells[0].trim_matches('`').to_string(),
            optional: optional_column.is_some_and(|c| cells.get(c).is_some_and(|v| v == "yes")),
            line: line.to_string(),
        });
    }
    rows
}

pipetest!(
    format_table_gives_each_format_its_extensions_and_features,
    |_dir| {
        let text = readme();
        let rows = table_rows(&section(&text, "Stages and formats"));
        // Every format of perfpipe-export, compiled in or not, from the one place that declares them.
        for o in perfpipe_export::offered::OFFERED {
            let row = rows.iter().find(|r| r.name == o.name);
            let row =
                row.unwrap_or_else(|| panic!("README.md has no row of the {} format", o.name));
            assert_eq!(
                row.optional,
                !o.features.is_empty(),
                "README.md's {} row: optional is a cargo feature ({:?})",
                o.name,
                o.features
            );
            let listed: Vec<&str> = row
                .line
                .split("`-o FILE.")
                .skip(1)
                .filter_map(|rest| rest.split('`').next())
                .collect();
            assert_eq!(
                listed, o.extensions,
                "README.md's {} row lists other extensions than the format declares",
                o.name
            );
        }
    }
);

/// The stages and formats `perfpipe stages` prints: its unindented lines (flags and options are
/// indented) but the heading of the formats, by name (`--buildid` → `buildid`).
fn printed_stages() -> BTreeSet<String> {
    perfpipe_out(&["stages"])
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(char::is_whitespace))
        .filter(|l| !l.starts_with("output formats"))
        .map(|l| {
            let word = l.split_whitespace().next().unwrap_or_default();
            word.trim_start_matches("--").to_string()
        })
        .collect()
}

pipetest!(stage_table_lists_what_perfpipe_stages_prints, |_dir| {
    let text = readme();
    let rows = table_rows(&section(&text, "Stages and formats"));
    let mut listed = BTreeSet::new();
    for row in &rows {
        assert!(
            listed.insert(row.name.clone()),
            "README.md lists `{}` twice",
            row.name
        );
    }
    let required: BTreeSet<String> = rows
        .iter()
        .filter(|r| !r.optional)
        .map(|r| r.name.clone())
        .collect();
    let printed = printed_stages();
    for always in ["read", "decode", "write", "perf"] {
        assert!(
            printed.contains(always),
            "`perfpipe stages` does not print {always}: {printed:?}"
        );
    }

    let unlisted: Vec<_> = printed.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "`perfpipe stages` prints what README.md's stage and format tables lack: {unlisted:?}"
    );
    let unknown: Vec<_> = required.difference(&printed).collect();
    assert!(
        unknown.is_empty(),
        "README.md's stage and format tables list what `perfpipe stages` does not print \
         (mark a cargo feature's row `yes` under `optional`): {unknown:?}"
    );
});

/// The arguments of the README's main job: its `cargo run --release -- ARGS` line.
fn main_job() -> Vec<String> {
    let text = readme();
    let line = section(&text, "Set-up: the two commands")
        .into_iter()
        .find_map(|l| l.trim().strip_prefix("cargo run --release -- "))
        .expect("README.md's set-up has a `cargo run --release -- …` line")
        .to_string();
    line.split_whitespace().map(str::to_string).collect()
}

/// Each frame of a flame graph: (name, samples), from `<title>NAME (N samples, P%)</title>`.
fn svg_frames(svg: &str) -> Vec<(String, u64)> {
    svg.split("<title>")
        .skip(1)
        .filter_map(|t| {
            let t = &t[..t.find("</title>")?];
            let (name, rest) = t.rsplit_once(" (")?;
            let n = rest.split(' ').next()?.replace(',', "").parse().ok()?;
            Some((
                name.replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&amp;", "&"),
                n,
            ))
        })
        .collect()
}

/// The README's main job, in a directory where its relative paths lead to the repository's
/// `tests/`, with no build-id cache of the user's: the frames of its flame graph.
fn run_main_job(args: &[String]) -> Vec<(String, u64)> {
    let dir = crate::util::Dir::new("readme-main-job");
    let repo_tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests");
    std::os::unix::fs::symlink(&repo_tests, dir.path("tests")).unwrap();
    std::fs::create_dir_all(dir.path("cache")).unwrap();
    let out = Command::new(bin())
        .args(args)
        .current_dir(dir.path(""))
        .env("PERF_BUILDID_DIR", dir.path("cache"))
        .env_remove("DEBUGINFOD_URLS")
        .output()
        .expect("run perfpipe");
    assert!(
        out.status.success(),
        "perfpipe {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg =
        std::fs::read_to_string(dir.path("flame.svg")).expect("the main job writes flame.svg");
    svg_frames(&svg)
}

/// The share of the samples under frames without a name (`[unknown]`, `[dso]`), counting nested
/// ones twice (so it can only overstate).
fn unnamed_share(frames: &[(String, u64)]) -> f64 {
    let total = frames
        .iter()
        .find(|f| f.0 == "all")
        .expect("the root frame")
        .1;
    let unnamed: u64 = frames
        .iter()
        .filter(|f| f.0.starts_with('['))
        .map(|f| f.1)
        .sum();
    unnamed as f64 / total as f64
}

pipetest!(main_job_names_its_frames_from_the_archive, |_dir| {
    let args = main_job();
    assert!(args.iter().any(|a| a == "--symbols"), "{args:?}");
    let frames = run_main_job(&args);
    let share = unnamed_share(&frames);
    assert!(
        share <= 0.05,
        "{:.1}% of the samples unnamed",
        share * 100.0
    );
    let names: BTreeSet<&str> = frames.iter().map(|f| f.0.as_str()).collect();
    // The workload's own functions (its binary is gone), libc's (its debug file) and the
    // kernel's (the archive's kallsyms of the recording host).
    for f in [
        "main",
        "parse_csv",
        "parse_field",
        "sort_records",
        "compare_records",
        "hash_block",
        "compress_block",
        "lz_match",
        "render_csv",
        "msort_with_tmp.part.0",
        "__GI___getrandom",
        "do_syscall_64",
        "chacha_permute",
    ] {
        assert!(
            names.contains(f),
            "no frame {f} in the flame graph: {names:?}"
        );
    }
    let mut widest = frames.clone();
    widest.sort_by_key(|f| std::cmp::Reverse(f.1));
    let top: Vec<_> = widest.iter().take(12).collect();
    assert!(top.iter().all(|f| !f.0.starts_with('[')), "{top:?}");
    // Without the archive the workload's frames have no names: the archive is what names them.
    let mut without = args.clone();
    let at = without.iter().position(|a| a == "--symbols").unwrap();
    without.drain(at..at + 2);
    let frames = run_main_job(&without);
    let names: BTreeSet<&str> = frames.iter().map(|f| f.0.as_str()).collect();
    assert!(
        !names.contains("hash_block") && !names.contains("parse_csv"),
        "{names:?}"
    );
    assert!(unnamed_share(&frames) > 0.5, "{frames:?}");
});

/// The workspace's root directory.
fn root() -> std::path::PathBuf {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .canonicalize()
        .expect("the workspace root")
}

/// The files of `dir` whose names end in one of `exts`.
fn files_in(dir: &std::path::Path, exts: &[&str]) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.is_file() && exts.iter().any(|x| p.to_string_lossy().ends_with(x)))
        .collect();
    out.sort();
    out
}

/// The repository paths `text` names: a word that starts with a top-level directory of the
/// workspace and a `/` (`stream/src/aslr/mod.rs`, `profile/src/symbols/`), standing on its own
/// (not inside another path, a URL or a shell variable), with the punctuation after it taken off.
/// A pattern (`benches/results/*.md`, `tests/fixtures/<name>`, `…`) is not a path.
fn named_paths(text: &str, tops: &BTreeSet<String>) -> Vec<(usize, String)> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_./+-".contains(c);
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        let mut before = ' ';
        while let Some(c) = rest.chars().next() {
            let len = rest
                .chars()
                .take_while(|&c| path_char(c))
                .map(char::len_utf8)
                .sum();
            if len == 0 {
                before = c;
                rest = &rest[c.len_utf8()..];
                continue;
            }
            let word = &rest[..len];
            let after = rest[len..].chars().next().unwrap_or(' ');
            rest = &rest[len..];
            let top = word.split('/').next().unwrap_or("");
            if !word.contains('/')
                || !tops.contains(top)
                || before.is_ascii_alphanumeric()
                || "$/.:~".contains(before)
                || "*<{…$".contains(after)
            {
                before = word.chars().last().unwrap_or(' ');
                continue;
            }
            let path = word.trim_end_matches(['.', ',', ':', ';']);
            out.push((n + 1, path.to_string()));
            before = word.chars().last().unwrap_or(' ');
        }
    }
    out
}

pipetest!(paths_the_docs_name_exist, |_dir| {
    let root = root();
    // The top-level directories a path may start with: the workspace's own.
    let tops: BTreeSet<String> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "target" && n != ".git")
        .collect();
    // The workspace's packages, for `-p NAME`.
    let mut packages = BTreeSet::new();
    for top in &tops {
        for dir in [root.join(top)].into_iter().chain(
            std::fs::read_dir(root.join(top))
                .unwrap()
                .filter_map(|e| Some(e.ok()?.path())),
        ) {
            let Ok(toml) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
                continue;
            };
            if let Some(name) = toml.lines().find_map(|l| l.strip_prefix("name = \"")) {
                packages.insert(name.trim_end_matches('"').to_string());
            }
        }
    }
    assert!(packages.contains("perfpipe-profile"), "{packages:?}");
    let mut files = vec![root.join("README.md"), root.join("tests/tests.rs")];
    files.extend(files_in(&root.join("docs"), &[".md"]));
    files.extend(files_in(&root.join("benches"), &[".rs", ".sh", ".md"]));
    for top in &tops {
        files.extend(files_in(&root.join(top), &["README.md"]));
    }
    files.sort();
    files.dedup();
    let (mut checked, mut wrong) = (0, Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let at = file.strip_prefix(&root).unwrap().display().to_string();
        for (line, path) in named_paths(&text, &tops) {
            checked += 1;
            if !root.join(&path).exists() {
                wrong.push(format!("{at}:{line}: {path}"));
            }
        }
        for (n, l) in text.lines().enumerate() {
            for (i, _) in l.match_indices("-p perfpipe") {
                let name: String = l[i + 3..]
                    .chars()
                    .take_while(|&c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                    .collect();
                if !packages.contains(&name) {
                    wrong.push(format!("{at}:{}: package {name}", n + 1));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found: the scan is broken"
    );
    assert!(
        wrong.is_empty(),
        "paths and packages named that do not exist:\n{}",
        wrong.join("\n")
    );
});

pipetest!(the_index_of_the_tests_names_every_module, |_dir| {
    let text = std::fs::read_to_string(root().join("tests/tests.rs")).unwrap();
    let doc: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let modules: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ").or(l.strip_prefix("mod ")))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    assert!(modules.len() > 20, "{modules:?}");
    let missing: Vec<_> = modules
        .iter()
        .filter(|m| !doc.contains(&format!("`{m}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "tests/tests.rs's index does not name {missing:?}"
    );
    let gone: Vec<_> = doc
        .lines()
        .filter_map(|l| l.strip_prefix(" - `")?.split('`').next())
        .filter(|m| !modules.contains(m))
        .collect();
    assert!(
        gone.is_empty(),
        "tests/tests.rs's index names no module {gone:?}"
    );
});
