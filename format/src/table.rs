//! [`AttrTable`]: what a reader needs to know about a stream to read its records: byte order and
//! the attrs seen so far, indexed by event id, and which attr a record belongs to.

use std::collections::HashMap;

use super::attr::Attr;
use super::endian::Endian;
use super::record::Record;

/// Most distinct attrs a stream may declare: an attr index is a `u16`.
pub const MAX_ATTRS: usize = u16::MAX as usize;

/// Byte order and attrs of a stream.
#[derive(Clone, Debug, Default)]
pub struct AttrTable {
    /// Byte order, from the pipe header.
    pub endian: Endian,
    /// Attrs in the order of their HEADER_ATTR records; an attr index (see
    /// [`attr_index`](AttrTable::attr_index)) indexes this.
    pub attrs: Vec<Attr>,
    ids: HashMap<u64, u16>,
    /// First attr of each [`attr_hash`], to find repeated attrs in constant time.
    by_hash: HashMap<u64, u16>,
}

/// A hash of the fields that make an attr (the layout derives from them).
fn attr_hash(a: &Attr) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        a.type_,
        a.size,
        a.config,
        a.sample_type,
        a.read_format,
        a.flags,
    )
        .hash(&mut h);
    a.ids.hash(&mut h);
    h.finish()
}

impl AttrTable {
    /// A stream of this byte order with no attrs yet.
    pub fn new(endian: Endian) -> AttrTable {
        AttrTable {
            endian,
            ..AttrTable::default()
        }
    }

    /// Adds an attr and indexes its ids. An attr equal to one already known (same fields, same
    /// ids: a stream that repeats its preamble, like concatenated recordings) is not added again,
    /// so the table does not grow with repetitions (found by the soak: it grew by one attr per
    /// repetition and every batch copied it). Returns `false`, adding nothing, when the attr is
    /// new and the table already holds [`MAX_ATTRS`].
    pub fn add_attr(&mut self, attr: Attr) -> bool {
        if self.has_attr(&attr) {
            return true;
        }
        if self.attrs.len() >= MAX_ATTRS {
            return false;
        }
        let index = self.attrs.len() as u16;
        self.by_hash.entry(attr_hash(&attr)).or_insert(index);
        for &id in &attr.ids {
            self.ids.entry(id).or_insert(index);
        }
        self.attrs.push(attr);
        true
    }

    /// Whether `attr` is already in the table.
    pub fn has_attr(&self, attr: &Attr) -> bool {
        self.by_hash
            .get(&attr_hash(attr))
            .is_some_and(|&i| self.attrs[usize::from(i)] == *attr)
    }

    /// Index of the attr a record belongs to, as perf's `evlist__event2evsel()` decides: the only
    /// attr; else the attr of the record's id (sample id at `id_pos`, trailer id at `is_pos`); else
    /// (id 0 for synthesized records, unknown id, no id) the first attr.
    #[inline]
    pub fn attr_index(&self, type_: u32, rec: &[u8]) -> u16 {
        if self.attrs.len() <= 1 {
            return 0;
        }
        let layout = &self.attrs[0].layout;
        let id = if type_ == super::RecordType::SAMPLE.0 {
            layout
                .sample_id_offset
                .and_then(|o| self.endian.u64(rec, o as usize))
        } else if type_ < super::RecordType::USER_TYPE_START {
            layout.trailer.and_then(|t| {
                let o = rec.len().checked_sub(usize::from(t.id_offset()?))?;
                self.endian.u64(rec, o)
            })
        } else {
            None
        };
        id.and_then(|id| self.ids.get(&id).copied()).unwrap_or(0)
    }

    /// The attr at `index`, if any.
    pub fn attr(&self, index: u16) -> Option<&Attr> {
        self.attrs.get(usize::from(index))
    }

    /// A typed view of the record `bytes`, whose attr index is `index` (as
    /// [`attr_index`](AttrTable::attr_index) gave it).
    pub fn view<'a>(&'a self, bytes: &'a [u8], index: u16) -> Record<'a> {
        Record::new(bytes, self.endian, self.attr(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constants::{sample, RecordType};

    /// A HEADER_ATTR body: IDENTIFIER|TID, sample_id_all, config `config`, ids as given.
    fn attr(config: u64, ids: &[u64]) -> Attr {
        let mut body = vec![0u8; 64];
        body[4..8].copy_from_slice(&64u32.to_le_bytes());
        body[8..16].copy_from_slice(&config.to_le_bytes());
        body[24..32].copy_from_slice(&(sample::IDENTIFIER | sample::TID).to_le_bytes());
        body[40..48].copy_from_slice(&(1u64 << 18).to_le_bytes());
        for id in ids {
            body.extend_from_slice(&id.to_le_bytes());
        }
        Attr::parse(&body, Endian::Little).unwrap()
    }

    #[test]
    fn records_find_their_attr_by_id_and_repeats_are_not_added() {
        let mut t = AttrTable::new(Endian::Little);
        assert!(t.add_attr(attr(0, &[10, 11])));
        assert!(t.add_attr(attr(1, &[20])));
        assert!(t.add_attr(attr(0, &[10, 11])), "a repeat is accepted");
        assert_eq!(t.attrs.len(), 2, "and not added again");
        // A sample with IDENTIFIER 20 (first field) belongs to attr 1.
        let mut s = vec![0u8; 8];
        s.extend_from_slice(&20u64.to_le_bytes());
        s.extend_from_slice(&[0; 8]);
        assert_eq!(t.attr_index(RecordType::SAMPLE.0, &s), 1);
        // A COMM whose trailer ends with IDENTIFIER 11 belongs to attr 0; an unknown id too.
        let mut c = vec![0u8; 24];
        c.extend_from_slice(&11u64.to_le_bytes());
        assert_eq!(t.attr_index(RecordType::COMM.0, &c), 0);
        c[24..].copy_from_slice(&20u64.to_le_bytes());
        assert_eq!(t.attr_index(RecordType::COMM.0, &c), 1);
        c[24..].copy_from_slice(&99u64.to_le_bytes());
        assert_eq!(t.attr_index(RecordType::COMM.0, &c), 0);
        assert_eq!(t.view(&s, 1).attr.map(|a| a.config), Some(1));
    }
}
