//! `perfpipe-export`: the profile output formats, each a sink declared by a
//! [`FormatSpec`](perfpipe_core::spec::FormatSpec) and chosen by the output's extension, by
//! `--format NAME` or by its own flag.
//!
//! - [`folded`]: folded stacks (`-o FILE.folded`), what `inferno-collapse-perf` makes of
//!   `perf script`.
//! - [`flamegraph`]: flame graph SVGs (`-o FILE.svg`), drawn by `inferno`; feature `flamegraph`.
//! - [`pprof`]: pprof profiles (`-o FILE.pb.gz`); feature `pprof`.
//! - [`firefox`]: the Firefox Profiler's processed-profile JSON (`-o FILE.json.gz`); feature
//!   `firefox`.
//! - [`parquet`](mod@parquet): Parquet tables and datasets (`-o FILE.parquet`, `-o DIR/`); feature
//!   `parquet`.
//!
//! - [`diff`]: two profiles compared (`perfpipe diff`): three-column folded stacks, differential
//!   flame graphs, pprof with BASE negative.
//! - [`otlp`]: OpenTelemetry profiles (`-o FILE.otlp.pb`), or pushed to a collector
//!   (`-o http://HOST:4318/v1development/profiles`) one request per `--window`; with `pprof`,
//!   pprof pushed to Pyroscope (`-o pyroscope+http://HOST:4040`); feature `otlp`.
//!
//! Each format's name and extensions are declared once, in [`offered`], with the features it is
//! behind, so that a build without one still knows it.
//!
//! Every format reads the frames the `symbolize` stage attaches to each batch
//! ([`perfpipe_profile::symbolize::Stacks`]).

#![deny(missing_docs)]

pub mod diff;
#[cfg(feature = "firefox")]
pub mod firefox;
#[cfg(feature = "flamegraph")]
pub mod flamegraph;
pub mod folded;
pub mod offered;
#[cfg(feature = "otlp")]
pub mod otlp;
#[cfg(feature = "parquet")]
pub mod parquet;
#[cfg(feature = "pprof")]
pub mod pprof;

/// Writes what `write` writes to `out` gzip'd (default level), through a 1 MiB buffer: the
/// writers of profiles make small writes, deflate wants large ones.
#[cfg(any(feature = "pprof", feature = "firefox"))]
fn gzip(
    out: &mut dyn std::io::Write,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    let mut buf = std::io::BufWriter::with_capacity(1 << 20, gz);
    write(&mut buf)?;
    buf.into_inner()
        .map_err(|e| e.into_error())?
        .finish()
        .map(|_| ())
}

/// `YYYY-MM-DD` of a day since the epoch, by the civil-from-days algorithm (Howard Hinnant's
/// `civil_from_days`).
#[cfg(any(feature = "parquet", feature = "otlp"))]
fn day_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The output formats compiled in, in the order the help lists them.
pub const FORMATS: &[perfpipe_core::spec::FormatSpec] = &[
    folded::SPEC,
    #[cfg(feature = "flamegraph")]
    flamegraph::SPEC,
    #[cfg(feature = "pprof")]
    pprof::SPEC,
    #[cfg(feature = "firefox")]
    firefox::SPEC,
    #[cfg(feature = "parquet")]
    parquet::SPEC,
    #[cfg(feature = "otlp")]
    otlp::SPEC,
    #[cfg(all(feature = "otlp", feature = "pprof"))]
    otlp::pyroscope::SPEC,
];

/// What the formats' tests share: a stream made into the batches a sink reads.
#[cfg(test)]
mod test_support {
    use perfpipe_core::harness::{raw_batches, run_stage};
    use perfpipe_core::Batch;
    use perfpipe_profile::symbolize::SymbolizeConfig;
    use perfpipe_stream::decode::DecodeConfig;

    /// `stream` read in batches of `batch` bytes, through decode and a `symbolize` stage of
    /// `config`: batches carrying their stacks.
    pub fn symbolized_with(config: &SymbolizeConfig, stream: &[u8], batch: usize) -> Vec<Batch> {
        let decoded = run_stage(
            &mut DecodeConfig::default().build(),
            raw_batches(stream, &[batch], 0),
        )
        .unwrap();
        run_stage(&mut config.build(None), decoded).unwrap()
    }

    /// [`symbolized_with`] the default `symbolize` stage.
    pub fn symbolized(stream: &[u8], batch: usize) -> Vec<Batch> {
        symbolized_with(&SymbolizeConfig::default(), stream, batch)
    }

    /// The file a sink of `profile` writes of `stream` (read whole), gunzipped.
    #[cfg(any(feature = "pprof", feature = "firefox"))]
    pub fn written_gz<P: perfpipe_profile::kit::Profile>(profile: P, stream: &[u8]) -> Vec<u8> {
        use perfpipe_core::{Flow, Sink};
        use std::io::Read;

        let batches = symbolized(stream, stream.len());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile.gz");
        let mut sink = perfpipe_profile::kit::SnapshotSink::new(profile, &path, None, None);
        for b in &batches {
            assert_eq!(sink.consume(b).unwrap(), Flow::Continue);
        }
        sink.finish().unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_end(&mut raw)
            .unwrap();
        raw
    }
}

#[cfg(test)]
mod tests {
    use perfpipe_profile::kit::event;
    use perfpipe_stream::synth::SynthStream;

    use super::test_support::symbolized;

    /// Names the event of a synthetic stream of attr `type_`, `config` in each format that names
    /// events; `(format, names)`.
    #[allow(unused_variables, unused_mut)]
    fn event_names(type_: u32, config: u64) -> Vec<(&'static str, Vec<String>)> {
        let mut stream = SynthStream::with_event(type_, config);
        stream.comm(7, 7, "app", false, 1);
        for t in 0..3 {
            stream.sample(7, 7, 10 + t, 0, 0x1000, &[0x1000, 0x2000]);
        }
        let batches = symbolized(stream.bytes(), 1 << 16);
        let mut names = Vec::new();
        #[cfg(feature = "pprof")]
        {
            use perfpipe_profile::kit::Profile;
            use prost::Message;

            let mut profile = crate::pprof::Pprof::default();
            for b in &batches {
                profile.add(b);
            }
            let mut raw = Vec::new();
            profile.encode(None, &mut raw).unwrap();
            let p = crate::pprof::proto::Profile::decode(&raw[..]).unwrap();
            let types = (p.sample_type.iter())
                .map(|t| p.string_table[t.r#type as usize].clone())
                .collect();
            names.push(("pprof", types));
        }
        #[cfg(feature = "parquet")]
        {
            use ::parquet::file::reader::{FileReader, SerializedFileReader};
            use ::parquet::record::RowAccessor;
            use perfpipe_core::{Flow, Sink};

            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("e.parquet");
            let rotate = crate::parquet::Rotate::Never;
            let mut sink = crate::parquet::ParquetSink::new(&path, false, rotate, None, None);
            for b in &batches {
                assert_eq!(sink.consume(b).unwrap(), Flow::Continue);
            }
            sink.finish().unwrap();
            let file = std::fs::File::open(&path).unwrap();
            let r = SerializedFileReader::new(file).unwrap();
            let events = (r.get_row_iter(None).unwrap())
                .map(|row| row.unwrap().get_string(5).unwrap().clone())
                .collect();
            names.push(("parquet", events));
        }
        names
    }

    #[test]
    fn an_event_without_a_name_is_named_the_same_in_every_format() {
        for (type_, config) in [(4, 0x1a2b), (1, 2), (1, 0)] {
            let name = event::name_of(type_, config);
            for (format, names) in event_names(type_, config) {
                let want = match format {
                    // Two sample types an event: its sample count, its period.
                    "pprof" => vec![format!("{name}_samples"), name.clone()],
                    // The `event` column of each of the three rows.
                    _ => vec![name.clone(); 3],
                };
                assert_eq!(names, want, "{format}, type {type_} config {config:#x}");
            }
        }
    }
}
