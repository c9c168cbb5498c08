//! The catalogue's declarations and the assembly rules, on words as a command line gives them.

use std::path::Path;

use perfpipe_core::spec::{BuildCtx, Flag, FlagValue, Options, Registry, Spec};

use super::*;

fn flag<'a>(name: &'a str, value: Option<&'a str>) -> Word<'a> {
    Word::Flag { name, value }
}

/// The plan of `words` for an output at `output`, completed; or the error's text.
fn plan(words: &[Word<'_>], output: &str) -> Result<Plan, String> {
    let r = builtin();
    let mut plan = Plan::from_words(words, &r).map_err(|e| chain_text(&e))?;
    plan.choose_output(&r, Some(Path::new(output)))
        .map_err(|e| chain_text(&e))?;
    plan.complete(&r).map_err(|e| chain_text(&e))?;
    Ok(plan)
}

/// An error and its sources, as the command line prints them.
fn chain_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text += &format!(": {s}");
        source = s.source();
    }
    text
}

fn labels(p: &Plan) -> Vec<&str> {
    p.stages.iter().map(|s| s.label.as_str()).collect()
}

#[test]
fn every_flag_is_declared_once_and_names_real_options() {
    let r = builtin();
    let flags: Vec<&Flag> = r.specs().iter().flat_map(|s| s.flags.iter()).collect();
    for (i, f) in flags.iter().enumerate() {
        // A flag two stages share (`--symfs`) is one definition, an option of each.
        let alike =
            |g: &&Flag| g.help == f.help && g.value == f.value && !f.adds_stage && !g.adds_stage;
        assert!(
            flags[..i].iter().all(|g| g.name != f.name || alike(g)),
            "--{} declared twice",
            f.name
        );
    }
    for s in r.specs() {
        assert!(s.main_flag().is_some_and(|f| f.adds_stage), "{}", s.name);
        for f in s.flags {
            if let FlagValue::Option(k) = f.value {
                assert!(s.option(k).is_some(), "--{} sets unknown `{k}`", f.name);
            }
            for (k, v) in f.set {
                assert!(s.parse_option(&mut Options::new(), k, v).is_ok(), "{k}={v}");
            }
        }
        for need in s.needs {
            assert!(r.find(need).is_some(), "{} needs unknown `{need}`", s.name);
        }
    }
    assert_eq!(r.flag("ring-trigger").unwrap().0.name, "ring");
    assert_eq!(r.flag("host-ids").unwrap().0.name, "buildid");
    assert_eq!(r.flag("comm").unwrap().0.name, "filter");
}

#[test]
fn switch_stages_build_with_no_value() {
    let ctx = BuildCtx::default();
    for s in TRANSFORMS {
        for f in s.flags.iter().filter(|f| f.adds_stage) {
            if f.value == FlagValue::None {
                let o = s.options_of(f, None).unwrap();
                assert!((s.build)(&ctx, &o).is_ok(), "--{}", f.name);
            }
        }
    }
}

#[test]
fn a_needed_stage_goes_before_the_first_stage_that_needs_it() {
    let p = plan(
        &[
            flag("drop", Some("lost")),
            flag("comm", Some("a")),
            flag("drop", Some("x")),
        ],
        "-",
    )
    .unwrap();
    assert_eq!(labels(&p), ["decompress", "drop", "comm", "drop#2"]);
    assert_eq!(p.stages[2].spec.name, "filter");
    assert_eq!(p.stages[2].options.text("comm"), Some("a"));
    // Already there, earlier: nothing added.
    let p = plan(&[Word::Stage("decompress"), flag("comm", Some("a"))], "-").unwrap();
    assert_eq!(labels(&p), ["decompress", "comm"]);
    // Only later than the first stage that needs it: one more goes before it (an added stage
    // is labelled with its name, as before the words were a library's).
    let p = plan(&[flag("comm", Some("a")), Word::Stage("decompress")], "-").unwrap();
    assert_eq!(labels(&p), ["decompress", "comm", "decompress"]);
    // A stage that needs nothing gets nothing.
    let p = plan(&[flag("decompress", None)], "-").unwrap();
    assert_eq!(labels(&p), ["decompress"]);
}

#[test]
fn option_flags_attach_to_their_stage_wherever_it_is() {
    let words = [
        flag("ring-trigger", Some("pid == 1")),
        flag("buildid", None),
        flag("ring", Some("1M")),
        flag("buildid-all", None),
        flag("host-ids", Some("no")),
    ];
    let r = builtin();
    let p = Plan::from_words(&words, &r).unwrap();
    assert!(p.check_attached(&r).is_ok());
    let ring = &p.stages[1].options;
    assert_eq!(
        (ring.size("size"), ring.text("trigger")),
        (Some(1 << 20), Some("pid == 1"))
    );
    for s in [&p.stages[0], &p.stages[2]] {
        assert_eq!(s.options.text("host"), Some("no"), "{}", s.label);
    }
    assert!(p.stages[2].options.switch("all"));

    let mut p = Plan::from_words(&[flag("ring-after", Some("1s"))], &r).unwrap();
    let err = p.check_attached(&r).unwrap_err().to_string();
    assert_eq!(err, "--ring-after: options of `ring` need --ring SIZE");
    let taken = p.take_unattached("ring").unwrap();
    assert_eq!(
        taken.duration("after"),
        Some(std::time::Duration::from_secs(1))
    );
    assert!(p.check_attached(&r).is_ok());
}

#[test]
fn a_flag_two_stages_declare_sets_the_option_of_each_that_the_chain_has() {
    let option = |p: &Plan, stage: &str| {
        p.stages
            .iter()
            .find(|s| s.spec.name == stage)
            .map(|s| s.options.text("symfs").map(str::to_string))
    };
    // --symfs reaches the unwinder and the symbolizer the folded output brings.
    let p = plan(
        &[flag("unwind", None), flag("symfs", Some("/r"))],
        "x.folded",
    )
    .unwrap();
    assert_eq!(option(&p, "unwind"), Some(Some("/r".into())));
    assert_eq!(option(&p, "symbolize"), Some(Some("/r".into())));
    // Either stage alone takes it.
    let p = plan(&[flag("unwind", None), flag("symfs", Some("/r"))], "x.data").unwrap();
    assert_eq!(option(&p, "unwind"), Some(Some("/r".into())));
    assert_eq!(option(&p, "symbolize"), None);
    let p = plan(&[flag("symfs", Some("/r"))], "x.folded").unwrap();
    assert_eq!(option(&p, "symbolize"), Some(Some("/r".into())));
    // Neither: the flag's first stage is named.
    let err = plan(&[flag("symfs", Some("/r"))], "x.data").unwrap_err();
    assert!(err.contains("--symfs: options of `symbolize`"), "{err}");
}

#[test]
fn generic_stage_words_keep_their_order() {
    let p = plan(
        &[
            flag("drop", Some("lost")),
            Word::Stage("buildid-all"),
            Word::Stage("drop:switch"),
            flag("buildid", None),
        ],
        "-",
    )
    .unwrap();
    let got: Vec<(&str, Option<&str>)> = p
        .stages
        .iter()
        .map(|s| (s.label.as_str(), s.options.text("types")))
        .collect();
    assert_eq!(
        got,
        [
            ("decompress", None),
            ("drop", Some("lost")),
            ("buildid-all", None),
            ("drop#2", Some("switch")),
            ("buildid", None),
        ]
    );
    let err = |words: &[Word<'_>]| match Plan::from_words(words, &builtin()) {
        Err(Error::Usage(e)) => e,
        Err(e) => chain_text(&e),
        Ok(_) => "ok".into(),
    };
    assert!(err(&[Word::Stage("nope")]).contains("no stage named `nope`"));
    assert!(err(&[Word::Stage("ring-trigger:x")]).contains("no stage named"));
    assert!(err(&[Word::Stage("buildid:x")]).contains("unknown option `x`"));
    assert_eq!(
        err(&[flag("buildid", None), Word::Stage("buildid:host=no")]),
        "ok"
    );
    assert!(err(&[flag("ring", Some("lots"))]).contains("is not a size"));
}

/// The output's format: by extension, by flag, by `--format`; format flags check that the
/// format takes them; profile formats bring their `symbolize` stage and set its options.
#[test]
fn outputs_choose_their_format_and_bring_what_they_need() {
    let format = |p: &Plan| p.format.as_ref().map(|f| f.spec.name);
    let p = plan(
        &[flag("comm", Some("db*")), flag("weight", Some("samples"))],
        "db.folded",
    )
    .unwrap();
    assert_eq!(format(&p), Some("folded"));
    assert_eq!(
        p.format.as_ref().unwrap().options.text("weight"),
        Some("samples")
    );
    assert_eq!(labels(&p), ["decompress", "comm", "stitch", "symbolize"]);
    // Every profile output and `unwind` get deferred callchains stitched in first; perf's
    // format alone keeps them as they are.
    for out in ["x.folded", "x.svg", "x.pb.gz", "x.json.gz", "x.parquet"] {
        let p = plan(&[], out).unwrap();
        let l = labels(&p);
        let (s, y) = (
            l.iter().position(|s| *s == "stitch"),
            l.iter().position(|s| *s == "symbolize"),
        );
        assert!(s.is_some() && s < y, "{out}: {l:?}");
    }
    assert_eq!(
        labels(&plan(&[flag("unwind", None)], "x.data").unwrap()),
        ["decompress", "stitch", "unwind"]
    );
    assert!(
        labels(&plan(&[flag("drop", Some("switch"))], "x.data").unwrap())
            .iter()
            .all(|s| *s != "stitch")
    );

    let unmapped = |words: &[Word<'_>], out: &str| -> Vec<String> {
        let p = plan(words, out).unwrap();
        let s = p.stages.iter().filter(|s| s.spec.name == "symbolize");
        s.map(|s| s.options.text("unmapped").unwrap_or("-").to_string())
            .collect()
    };
    assert_eq!(unmapped(&[], "x.folded"), ["merge"]);
    assert_eq!(
        unmapped(
            &[
                flag("symbolize", Some("unmapped=keep")),
                flag("folded", None)
            ],
            "-"
        ),
        ["keep"]
    );

    let p = plan(&[Word::Format("perf")], "x.folded").unwrap();
    assert_eq!(format(&p), None);
    assert!(plan(&[], "x.data").unwrap().format.is_none());
    assert!(plan(&[Word::Format("png")], "-")
        .unwrap_err()
        .contains("no format named `png`"));
    assert!(plan(&[flag("folded", None), Word::Format("perf")], "-")
        .unwrap_err()
        .contains("two output formats given: folded and perf"));
    assert!(plan(&[flag("symbolize", None)], "x.data")
        .unwrap_err()
        .contains("perf's format carries no symbols"));
}

/// The output's error text, or `ok` with the format chosen.
fn output_of(registry: &Registry, words: &[Word<'_>], output: &str) -> String {
    let mut plan = match Plan::from_words(words, registry) {
        Ok(p) => p,
        Err(e) => return chain_text(&e),
    };
    match plan.choose_output(registry, Some(Path::new(output))) {
        Ok(()) => format!(
            "ok {}",
            plan.format.as_ref().map_or(PERF_FORMAT, |f| f.spec.name)
        ),
        Err(Error::Output(e)) => e,
        Err(e) => format!("not an output error: {}", chain_text(&e)),
    }
}

/// A directory output (`DIR/`, or a directory that exists) is the Parquet dataset; a format
/// of one file chosen for it is refused naming `--parquet`, and so is a build without Parquet.
#[test]
fn a_directory_output_is_the_dataset_or_refused_naming_parquet() {
    let r = builtin();
    let dir = std::env::temp_dir();
    let existing = dir.to_str().unwrap();
    for out in ["profiles/", existing, "x.svg/"] {
        assert_eq!(output_of(&r, &[], out), "ok parquet", "{out}");
        assert_eq!(
            output_of(&r, &[flag("parquet", None)], out),
            "ok parquet",
            "{out}"
        );
    }
    let p = plan(&[flag("rotate", Some("1m"))], "profiles/").unwrap();
    assert_eq!(
        p.format.as_ref().unwrap().options.text("rotate"),
        Some("1m")
    );
    assert_eq!(labels(&p), ["decompress", "stitch", "symbolize"]);
    assert_eq!(
        output_of(&r, &[flag("folded", None)], "profiles/"),
        "-o profiles/: a directory, and folded output is one file (-o FILE.folded); a directory \
         output is a Parquet dataset (--parquet -o DIR/)"
    );
    assert!(output_of(&r, &[Word::Format("perf")], existing)
        .contains("a directory, and perf's format is one file (-o FILE.data)"));
    assert!(output_of(&r, &[Word::Format("pprof")], "p/").contains("(-o FILE.pb.gz)"));

    let lean = Registry::of(TRANSFORMS, &[perfpipe_export::folded::SPEC]);
    assert_eq!(
        output_of(&lean, &[], "profiles/"),
        "-o profiles/: a directory output is a Parquet dataset (--parquet -o DIR/), and this \
         perfpipe is built without the cargo feature `parquet`"
    );
    // Not a directory: a file of perf's format, as before.
    assert_eq!(output_of(&r, &[], "profiles"), "ok perf");
    assert_eq!(output_of(&r, &[], "-"), "ok perf");
}

/// An extension whose format is not built in is refused, naming the feature, instead of being
/// written in perf's format; `--format perf` still writes perf's format under any name.
#[test]
fn an_extension_of_a_format_compiled_out_is_refused_naming_its_feature() {
    let lean = Registry::of(TRANSFORMS, &[perfpipe_export::folded::SPEC]);
    assert_eq!(
        output_of(&lean, &[], "cpu.pb.gz"),
        "-o cpu.pb.gz: .pb.gz is pprof output, and this perfpipe is built without the cargo \
         feature `pprof` (write another format, or `--format perf` for perf's)"
    );
    for (out, feature) in [
        ("x.svg", "flamegraph"),
        ("x.json.gz", "firefox"),
        ("x.parquet", "parquet"),
        ("x.pprof", "pprof"),
    ] {
        assert!(
            output_of(&lean, &[], out).contains(&format!("the cargo feature `{feature}`")),
            "{out}"
        );
    }
    assert_eq!(
        output_of(&lean, &[Word::Format("perf")], "x.svg"),
        "ok perf"
    );
    assert_eq!(output_of(&lean, &[], "x.folded"), "ok folded");
    assert_eq!(output_of(&lean, &[], "x.gz"), "ok perf");
    assert_eq!(output_of(&builtin(), &[], "x.svg"), "ok flamegraph");
}

/// Every compiled-in format is offered (a build without it can name its feature).
#[test]
fn the_offered_formats_match_the_compiled_ones() {
    let r = builtin();
    for f in r.formats() {
        let o = output::OFFERED.iter().find(|o| o.name == f.name);
        let o = o.unwrap_or_else(|| panic!("{} is not in OFFERED", f.name));
        assert!(o.missing().is_empty(), "{}", f.name);
    }
    assert!(r.format(output::DATASET_FORMAT).is_some());
}

#[test]
fn parquet_needs_a_file_not_standard_output() {
    let r = builtin();
    assert_eq!(
        output_of(&r, &[flag("parquet", None)], "-"),
        "parquet output needs a file (-o FILE.parquet) or a directory (-o DIR/), not standard \
         output"
    );
    assert_eq!(output_of(&r, &[flag("folded", None)], "-"), "ok folded");
}

/// The place must exist and take a new file; nothing is left behind by the check.
#[test]
fn an_output_must_be_writable_where_it_goes() {
    let tmp = std::env::temp_dir().join(format!("perfpipe-chain-out-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let text = |path: &Path, directory: bool| match output::check_writable(path, directory) {
        Ok(()) => "ok".to_string(),
        Err(e) => e.to_string(),
    };
    let file = tmp.join("f");
    std::fs::write(&file, b"x").unwrap();
    assert_eq!(text(&tmp.join("x.svg"), false), "ok");
    assert_eq!(text(&file, false), "ok", "an existing file is replaced");
    assert_eq!(
        text(&tmp.join("ds"), true),
        "ok",
        "a dataset made in an existing dir"
    );
    assert_eq!(text(&tmp, true), "ok");
    assert_eq!(text(Path::new("-"), false), "ok");
    assert_eq!(text(Path::new("/dev/null"), false), "ok");
    let missing = tmp.join("no/such/x.svg");
    assert_eq!(
        text(&missing, false),
        format!(
            "-o {}: no directory {} to write it in",
            missing.display(),
            tmp.join("no/such").display()
        )
    );
    assert!(text(&tmp.join("no/ds/"), true).contains("no directory"));
    let under_file = file.join("x.svg");
    assert_eq!(
        text(&under_file, false),
        format!(
            "-o {}: {} is not a directory",
            under_file.display(),
            file.display()
        )
    );
    assert_eq!(
        text(&file, true),
        format!("-o {}: not a directory (a dataset is one)", file.display())
    );
    // procfs takes no new file, root or not.
    assert!(text(Path::new("/proc/x.svg"), false)
        .starts_with("-o /proc/x.svg: cannot write in /proc: "));
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert_eq!(left.len(), 1, "the probe files are removed: {left:?}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// `Chain::build` refuses an output that cannot be written before it opens the input.
#[test]
fn a_chain_is_refused_before_its_input_is_opened() {
    let chain = Chain {
        settings: Default::default(),
        source: SourceSpec::Input {
            path: "/no/such/input".into(),
            pipe_buffer: 0,
        },
        plan: Plan::default(),
        taps: &[],
        sink: SinkSpec::Output {
            path: "/no/such/dir/x.folded".into(),
            mode: Default::default(),
            pipe_buffer: 0,
        },
        requests: Default::default(),
        before_source: None,
    };
    match chain.build(&builtin()) {
        Err(Error::Output(e)) => assert!(e.contains("no directory /no/such/dir"), "{e}"),
        other => panic!("{other:?}"),
    }
}
