//! `--help` that a person reads (issue 40): at the default width (100 columns, what clap uses
//! when standard output is no terminal), every line of every command's help fits, each section of
//! flags keeps one help column that starts by column 40 with each flag's help beside it, and no
//! line starts further right (a value name so long that it pushes the help column to the right
//! edge printed 514 lines, one word each, on 5eee5dc).

use std::process::{Command, Stdio};

use crate::util::bin;

/// The widest line a help may print.
const WIDTH: usize = 100;
/// The furthest column a section's help text may start at.
const HELP_COLUMN_MAX: usize = 40;

/// `perfpipe COMMAND… --help`, at the default width.
fn help(command: &[String]) -> String {
    let out = Command::new(bin())
        .args(command)
        .arg("--help")
        .env_remove("COLUMNS")
        .stdin(Stdio::null())
        .output()
        .expect("perfpipe --help");
    assert!(out.status.success(), "perfpipe {command:?} --help failed");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands a help lists under `Commands:` (but `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Every command's path (`[]`, `["record"]`, `["bench", "pipeline"]`, …) with its help.
fn every_help() -> Vec<(Vec<String>, String)> {
    let mut todo = vec![Vec::new()];
    let mut done = Vec::new();
    while let Some(command) = todo.pop() {
        let text = help(&command);
        for sub in subcommands(&text) {
            todo.push([command.clone(), vec![sub]].concat());
        }
        done.push((command, text));
    }
    done
}

/// The column (from 0) of a line's first character.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// What is wrong with one help's layout, a line each.
fn faults(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut faults = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let at = n + 1;
        let width = line.chars().count();
        if width > WIDTH {
            faults.push(format!("line {at} is {width} columns: {line}"));
        }
        if !line.trim().is_empty() && indent(line) > HELP_COLUMN_MAX {
            faults.push(format!(
                "line {at} starts at column {}: {line:?}",
                indent(line) + 1
            ));
        }
        // A flag's line (`  -i, --input <FILE>  Input…` or `      --pipe  Write…`): its help
        // beside it, from a column before HELP_COLUMN_MAX, not on the line below.
        let trimmed = line.trim_start();
        if !(matches!(indent(line), 2 | 6) && trimmed.starts_with('-')) {
            continue;
        }
        match trimmed.find("  ") {
            Some(end) => {
                let rest = &trimmed[end..];
                let col = indent(line) + end + (rest.len() - rest.trim_start().len());
                if col > HELP_COLUMN_MAX {
                    faults.push(format!(
                        "line {at}: the help starts at column {}: {line}",
                        col + 1
                    ));
                }
            }
            None if lines.get(n + 1).is_some_and(|next| indent(next) > 6) => {
                faults.push(format!(
                    "line {at}: the help is not beside the flag: {line}"
                ));
            }
            None => {}
        }
    }
    faults
}

pipetest!(every_help_reads_at_100_columns, |_dir| {
    let helps = every_help();
    let names: Vec<String> = helps.iter().map(|(c, _)| c.join(" ")).collect();
    for want in [
        "",
        "record",
        "inject",
        "archive",
        "bench",
        "bench pipeline",
        "stages",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "no help of `{want}` in {names:?}"
        );
    }
    let mut all = Vec::new();
    for (command, text) in &helps {
        for fault in faults(text) {
            all.push(format!("perfpipe {} --help: {fault}", command.join(" ")));
        }
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
});

pipetest!(
    /// The rules catch what they are for: a help pushed to the right edge, a line too wide, a help
    /// on the line below its flag.
    the_help_rules_catch_a_pushed_column, |_dir| {
        let pushed = format!("Stages:\n      --decompress{}replace\n{}COMPRESSED\n", " ".repeat(140), " ".repeat(155));
        let found = faults(&pushed);
        assert!(found.iter().any(|f| f.contains("columns")), "{found:?}");
        assert!(found.iter().any(|f| f.contains("starts at column 156")), "{found:?}");
        assert!(found.iter().any(|f| f.contains("help starts at column")), "{found:?}");
        let below = faults("Options:\n      --guest-data <PATH,PID[,OFF[,SCALE]]>\n          Refused\n");
        assert!(below.iter().any(|f| f.contains("not beside")), "{below:?}");
        assert!(faults("Options:\n  -i, --input <FILE>  Input\n").is_empty());
    }
);
