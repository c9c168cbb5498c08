//! Every output format of this crate, compiled in or not: its name, the cargo features it is
//! behind, the extensions that choose it and whether it writes standard output. This is the one
//! place a format's name and extensions are declared: each format's
//! [`FormatSpec`](perfpipe_core::spec::FormatSpec) takes them from its [`Offered`] here, and
//! `perfpipe-chain` reads [`OFFERED`] to refuse an output whose format is compiled out (`-o x.svg`
//! without the `flamegraph` feature), naming the feature, instead of writing perf's format under
//! that name.

/// An output format, compiled in or not.
#[derive(Clone, Copy, Debug)]
pub struct Offered {
    /// Its name: `--format NAME`, and its `FormatSpec::name` when compiled in.
    pub name: &'static str,
    /// The cargo features it is behind, all of which it needs (none: always there).
    pub features: &'static [&'static str],
    /// The extensions that choose it, without the dot (`svg`, `pb.gz`), the one it is usually
    /// written with first.
    pub extensions: &'static [&'static str],
    /// Whether it can write standard output.
    pub to_stdout: bool,
}

impl Offered {
    /// Its features this build lacks (empty: it is compiled in).
    pub fn missing(&self) -> Vec<&'static str> {
        self.features
            .iter()
            .copied()
            .filter(|f| !compiled(f))
            .collect()
    }
}

/// This crate's cargo features, each with whether it is on.
const FEATURES: &[(&str, bool)] = &[
    ("flamegraph", cfg!(feature = "flamegraph")),
    ("pprof", cfg!(feature = "pprof")),
    ("firefox", cfg!(feature = "firefox")),
    ("parquet", cfg!(feature = "parquet")),
    ("otlp", cfg!(feature = "otlp")),
];

/// Whether cargo feature `feature` of this crate is on.
pub fn compiled(feature: &str) -> bool {
    FEATURES.iter().any(|&(f, on)| f == feature && on)
}

/// Folded stacks ([`crate::folded`]).
pub const FOLDED: Offered = Offered {
    name: "folded",
    features: &[],
    extensions: &["folded"],
    to_stdout: true,
};

/// Flame graph SVGs (`flamegraph`).
pub const FLAMEGRAPH: Offered = Offered {
    name: "flamegraph",
    features: &["flamegraph"],
    extensions: &["svg"],
    to_stdout: true,
};

/// pprof profiles (`pprof`).
pub const PPROF: Offered = Offered {
    name: "pprof",
    features: &["pprof"],
    extensions: &["pb.gz", "pprof"],
    to_stdout: true,
};

/// Firefox Profiler profiles (`firefox`).
pub const FIREFOX: Offered = Offered {
    name: "firefox",
    features: &["firefox"],
    extensions: &["json.gz"],
    to_stdout: true,
};

/// Parquet tables and datasets (`parquet`); the format a directory output writes.
pub const PARQUET: Offered = Offered {
    name: "parquet",
    features: &["parquet"],
    extensions: &["parquet"],
    to_stdout: false,
};

/// OpenTelemetry profiles, to a file or pushed (`otlp`).
pub const OTLP: Offered = Offered {
    name: "otlp",
    features: &["otlp"],
    extensions: &["otlp.pb"],
    to_stdout: true,
};

/// pprof pushed to Pyroscope (`otlp::pyroscope`): chosen by its URL scheme alone.
pub const PYROSCOPE: Offered = Offered {
    name: "pyroscope",
    features: &["otlp", "pprof"],
    extensions: &[],
    to_stdout: false,
};

/// Every output format of the crate, in the order the help lists them.
pub const OFFERED: &[Offered] = &[FOLDED, FLAMEGRAPH, PPROF, FIREFOX, PARQUET, OTLP, PYROSCOPE];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_formats_compiled_in_are_the_offered_ones_with_every_feature() {
        let compiled_in: Vec<_> = crate::FORMATS.iter().map(|f| f.name).collect();
        let offered: Vec<_> = OFFERED
            .iter()
            .filter(|o| o.missing().is_empty())
            .map(|o| o.name)
            .collect();
        assert_eq!(compiled_in, offered);
        for f in crate::FORMATS {
            let o = OFFERED.iter().find(|o| o.name == f.name).unwrap();
            assert_eq!(f.extensions, o.extensions, "{}", f.name);
        }
        assert!(!compiled("no-such-feature"));
    }
}
