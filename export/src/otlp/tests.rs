use std::collections::BTreeMap;

use prost::Message;

use super::proto::{any_value, ExportProfilesServiceRequest};
use super::*;

const MULTIPROC: &[u8] = include_bytes!("../../../tests/fixtures/multiproc.pipe.data");

/// The request of a whole stream.
fn request_of(stream: &[u8]) -> ExportProfilesServiceRequest {
    let batches = crate::test_support::symbolized(stream, 1 << 16);
    let mut p = Otlp::new(StreamFacts::now());
    for b in &batches {
        p.add(b);
    }
    p.finish();
    ExportProfilesServiceRequest::decode(&p.encode(None)[..]).unwrap()
}

#[test]
fn the_request_counts_every_sample_and_refers_only_to_its_tables() {
    let r = request_of(MULTIPROC);
    let d = r.dictionary.as_ref().unwrap();
    let s = |i: i32| d.string_table[i as usize].as_str();
    assert_eq!(s(0), "");
    for (len, what) in [
        (d.mapping_table.len(), "mappings"),
        (d.location_table.len(), "locations"),
        (d.function_table.len(), "functions"),
        (d.stack_table.len(), "stacks"),
        (d.attribute_table.len(), "attributes"),
    ] {
        assert!(len > 1, "{what}: the zero entry and more");
    }
    // fixtures/README.md: 1664 samples, -c 200000, in 4 processes or more.
    let (mut count, mut period) = (0, 0);
    let mut types = std::collections::BTreeSet::new();
    assert!(r.resource_profiles.len() >= 3, "one resource per process");
    for rp in &r.resource_profiles {
        let keys: Vec<&str> = (rp.resource.as_ref().unwrap().attributes.iter())
            .map(|a| a.key.as_str())
            .collect();
        assert!(keys.contains(&"process.pid") && keys.contains(&"process.executable.name"));
        for p in &rp.scope_profiles[0].profiles {
            let t = p.sample_type.unwrap();
            types.insert((s(t.type_strindex), s(t.unit_strindex)));
            assert_eq!(p.period, 200_000);
            for x in &p.samples {
                assert_eq!(x.values.len(), x.timestamps_unix_nano.len());
                count += x.values.len();
                period += x.values.iter().sum::<i64>();
                let stack = &d.stack_table[x.stack_index as usize];
                assert!(!stack.location_indices.is_empty());
                for &l in &stack.location_indices {
                    let loc = &d.location_table[l as usize];
                    assert!(
                        loc.mapping_index > 0
                            && (loc.mapping_index as usize) < d.mapping_table.len()
                    );
                    assert!(loc
                        .lines
                        .iter()
                        .all(|l| (l.function_index as usize) < d.function_table.len()));
                }
                let attrs: BTreeMap<&str, &Option<any_value::Value>> = (x.attribute_indices.iter())
                    .map(|&a| {
                        let kv = &d.attribute_table[a as usize];
                        (s(kv.key_strindex), &kv.value.as_ref().unwrap().value)
                    })
                    .collect();
                assert!(attrs.contains_key("thread.id") && attrs.contains_key("thread.name"));
                assert!(x
                    .timestamps_unix_nano
                    .iter()
                    .all(|&t| t >= p.time_unix_nano && t <= p.time_unix_nano + p.duration_nano));
            }
        }
    }
    assert_eq!((count, period), (1664, 1664 * 200_000));
    assert_eq!(
        types.into_iter().collect::<Vec<_>>(),
        [("cpu-clock", "nanoseconds")]
    );
    // libc's mapping names its file and carries its build id.
    let libc = (d.mapping_table.iter())
        .find(|m| s(m.filename_strindex).ends_with("libc.so.6"))
        .unwrap();
    let build_ids: Vec<&str> = (libc.attribute_indices.iter())
        .map(|&a| &d.attribute_table[a as usize])
        .filter(|kv| s(kv.key_strindex) == "process.executable.build_id.gnu")
        .filter_map(|kv| match &kv.value.as_ref()?.value {
            Some(any_value::Value::StringValue(v)) => Some(v.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(build_ids.len(), 1);
    assert_eq!(build_ids[0].len(), 40, "a GNU build id is 20 bytes");
}
