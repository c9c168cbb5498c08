//! [`Editor`]: keep, remove, replace and insert the records of a [`Batch`] in one pass.
//!
//! A stage that changes which records a batch holds walks it once with [`Batch::edit`]. Records it
//! leaves alone stay zero-copy slices of the buffer; replaced and inserted records are appended to
//! [`Batch::data`] (as [`Batch::append`] does) and only their spans are placed. The new span list is
//! built **in place** in the batch's own `spans` vector: removing a record leaves a gap that later
//! records move into, and when an insert finds no gap, one is opened by moving the records not yet
//! visited further down the vector (a gap at least as large as the number of inserts so far, so a
//! batch with `k` inserts opens one at most `log2(k)` times). So an edit needs no second vector, and
//! in steady state, once the batches in the pool have grown their span vectors, it allocates
//! nothing.
//!
//! ```
//! use perfpipe_core::harness::framed;
//!
//! let mut batch = framed(&[(b"aa", 1), (b"bb", 2), (b"cc", 3)]);
//! let mut ed = batch.edit();
//! while let Some(span) = ed.next_record() {
//!     match span.kind {
//!         1 => ed.insert_before(b"<", 9, 0), // a new record before `aa`
//!         2 => ed.remove(),                  // `bb` goes
//!         _ => ed.replace(b"CC"),            // `cc` is rewritten
//!     }
//! }
//! ed.finish();
//! let records: Vec<&[u8]> = batch.spans.iter().map(|s| batch.bytes(s)).collect();
//! assert_eq!(records, [&b"<"[..], b"aa", b"CC"]);
//! assert_eq!(batch.spans[1].start, 0, "`aa` is still the slice the source framed");
//! ```

use crate::batch::{Batch, Span};

/// Gap opened by the first insert that finds none; later gaps are as large as the inserts so far.
const MIN_GAP: usize = 16;

impl Batch {
    /// Starts a one-pass edit of this batch's records; see [`Editor`]. The edit is complete when
    /// the editor is finished or dropped: records it did not visit are kept.
    pub fn edit(&mut self) -> Editor<'_> {
        let spans = std::mem::take(&mut self.spans);
        Editor {
            batch: self,
            spans,
            write: 0,
            read: 0,
            current: None,
            inserted: 0,
        }
    }
}

/// A one-pass edit of a batch's records, made by [`Batch::edit`].
///
/// [`Editor::next_record`] visits the records in order. The record it returns is the **current**
/// one and is kept unless [`Editor::remove`] drops it or [`Editor::replace`] rewrites it; new
/// records go in before it ([`Editor::insert_before`]) or after it and whatever was inserted after
/// it so far ([`Editor::insert`]). [`Editor::skip`] keeps records without visiting them.
/// Finishing the editor ([`Editor::finish`], or dropping it, e.g. on an early `?` return) keeps
/// the records not visited and puts the new span list in place.
///
/// While the edit is open the batch's `spans` are held by the editor ([`Editor::batch`] shows the
/// batch with no spans); read a record's bytes through [`Editor::bytes`].
///
/// Cost: one pass over the spans (a record kept while nothing before it was removed or inserted
/// is not even moved), plus the bytes of replaced and inserted records.
#[derive(Debug)]
pub struct Editor<'a> {
    batch: &'a mut Batch,
    /// `[0, write)`: the edited list so far; `[write, read)`: a gap; `[read, len)`: not visited.
    spans: Vec<Span>,
    write: usize,
    read: usize,
    /// Where the current record is in `spans[..write]`, if there is one.
    current: Option<usize>,
    /// Records inserted so far: the size of the next gap.
    inserted: usize,
}

impl Editor<'_> {
    /// Visits the next record, which becomes the current one (and is kept unless changed), or
    /// returns `None` when every record has been visited.
    #[inline]
    pub fn next_record(&mut self) -> Option<Span> {
        let Some(&span) = self.spans.get(self.read) else {
            self.current = None;
            return None;
        };
        self.spans[self.write] = span;
        self.read += 1;
        self.write += 1;
        self.current = Some(self.write - 1);
        Some(span)
    }

    /// Keeps the next `n` records (fewer if fewer are left) without visiting them; returns how many.
    /// Afterwards there is no current record.
    pub fn skip(&mut self, n: usize) -> usize {
        let n = n.min(self.spans.len() - self.read);
        if self.write != self.read {
            self.spans.copy_within(self.read..self.read + n, self.write);
        }
        self.read += n;
        self.write += n;
        if n != 0 {
            self.current = None;
        }
        n
    }

    /// Removes the current record. Afterwards there is no current record.
    ///
    /// # Panics
    /// Panics if there is no current record (before the first [`Editor::next_record`], or after
    /// `remove` or [`Editor::skip`]).
    #[inline]
    pub fn remove(&mut self) {
        let c = self
            .current
            .take()
            .expect("Editor::remove: no current record");
        // Records inserted after the current one move down.
        self.spans.copy_within(c + 1..self.write, c);
        self.write -= 1;
    }

    /// Rewrites the current record: appends `bytes` to the buffer and points its span at them,
    /// keeping its kind and tag. The old bytes stay in the buffer, unreferenced.
    ///
    /// # Panics
    /// Panics if there is no current record (see [`Editor::remove`]), or if the buffer would
    /// exceed 4 GiB.
    pub fn replace(&mut self, bytes: &[u8]) {
        let c = self.current.expect("Editor::replace: no current record");
        let Span { kind, tag, .. } = self.spans[c];
        self.spans[c] = self.batch.append(bytes, kind, tag);
    }

    /// Inserts a new record after the current one (and after the records inserted after it so
    /// far), before the next record not yet visited: appends `bytes` to the buffer with this kind
    /// and tag. Without a current record, that is after everything visited so far.
    ///
    /// # Panics
    /// Panics if the buffer would exceed 4 GiB.
    #[inline]
    pub fn insert(&mut self, bytes: &[u8], kind: u32, tag: u32) {
        let span = self.batch.append(bytes, kind, tag);
        self.insert_span(span);
    }

    /// Inserts a new record just before the current one (after the records inserted before it so
    /// far); without a current record, the same as [`Editor::insert`].
    ///
    /// # Panics
    /// Panics if the buffer would exceed 4 GiB.
    pub fn insert_before(&mut self, bytes: &[u8], kind: u32, tag: u32) {
        let span = self.batch.append(bytes, kind, tag);
        self.insert_span(span);
        if let Some(c) = self.current {
            self.spans[c..self.write].rotate_right(1);
            self.current = Some(c + 1);
        }
    }

    /// Inserts a span that already lies in the buffer (e.g. bytes a stage appended itself), where
    /// [`Editor::insert`] would put a new record.
    pub fn insert_span(&mut self, span: Span) {
        if self.write == self.read {
            self.open_gap();
        }
        self.spans[self.write] = span;
        self.write += 1;
        self.inserted += 1;
    }

    /// Removes every record not yet visited; returns how many.
    pub fn remove_rest(&mut self) -> usize {
        let n = self.spans.len() - self.read;
        self.spans.truncate(self.read);
        n
    }

    /// Records not yet visited.
    pub fn remaining(&self) -> usize {
        self.spans.len() - self.read
    }

    /// The bytes of a span (one [`Editor::next_record`] returned, or one this edit inserted).
    ///
    /// # Panics
    /// Panics if the span lies outside the buffer, which only a buggy stage can cause.
    #[inline]
    pub fn bytes(&self, span: &Span) -> &[u8] {
        self.batch.bytes(span)
    }

    /// The batch being edited, for its buffer and context. Its `spans` are empty until the edit
    /// is finished.
    pub fn batch(&self) -> &Batch {
        self.batch
    }

    /// Ends the edit: keeps the records not visited and puts the new span list in the batch.
    /// Dropping the editor does the same.
    pub fn finish(self) {}

    /// Makes room for inserts at `write` by moving the records not visited further down.
    #[cold]
    fn open_gap(&mut self) {
        let gap = self.inserted.max(MIN_GAP);
        let len = self.spans.len();
        self.spans.resize(len + gap, Span::default());
        self.spans.copy_within(self.read..len, self.read + gap);
        self.read += gap;
    }
}

impl Drop for Editor<'_> {
    fn drop(&mut self) {
        let len = self.spans.len();
        if self.write != self.read {
            self.spans.copy_within(self.read..len, self.write);
        }
        self.spans.truncate(self.write + (len - self.read));
        self.batch.spans = std::mem::take(&mut self.spans);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::harness::framed;
    use crate::{Batch, Span};

    /// The records of a batch, as (bytes, kind, tag).
    fn records(b: &Batch) -> Vec<(Vec<u8>, u32, u32)> {
        b.spans
            .iter()
            .map(|s| (b.bytes(s).to_vec(), s.kind, s.tag))
            .collect()
    }

    fn rec(bytes: &[u8], kind: u32) -> (Vec<u8>, u32, u32) {
        (bytes.to_vec(), kind, 0)
    }

    #[test]
    fn empty_batch() {
        let mut b = Batch::default();
        let mut ed = b.edit();
        assert_eq!(ed.next_record(), None);
        assert_eq!(ed.remaining(), 0);
        ed.finish();
        assert!(b.spans.is_empty());

        // Inserting into an empty batch gives a framed batch.
        let mut ed = b.edit();
        ed.insert(b"new", 5, 1);
        ed.insert_before(b"first?", 6, 0); // no current record: appended in order
        drop(ed);
        assert_eq!(records(&b), [(b"new".to_vec(), 5, 1), rec(b"first?", 6)]);
    }

    #[test]
    fn untouched_batch_is_unchanged_and_allocates_nothing() {
        let mut b = framed(&[(b"a", 0), (b"bc", 1), (b"def", 2)]);
        let before = (b.spans.clone(), b.data.clone(), b.spans.as_ptr());
        let mut ed = b.edit();
        while ed.next_record().is_some() {}
        ed.finish();
        assert_eq!((b.spans.clone(), b.data.clone(), b.spans.as_ptr()), before);
        // A partial visit keeps the rest.
        let mut ed = b.edit();
        ed.next_record();
        drop(ed);
        assert_eq!(b.spans, before.0);
    }

    #[test]
    fn all_removed() {
        let mut b = framed(&[(b"a", 0), (b"b", 0), (b"c", 0)]);
        let mut ed = b.edit();
        while ed.next_record().is_some() {
            ed.remove();
        }
        ed.finish();
        assert!(b.spans.is_empty());
        assert!(!b.is_framed());

        let mut b = framed(&[(b"a", 0), (b"b", 0), (b"c", 0)]);
        let mut ed = b.edit();
        ed.next_record();
        assert_eq!(ed.remove_rest(), 2);
        assert_eq!(ed.next_record(), None);
        ed.finish();
        assert_eq!(records(&b), [rec(b"a", 0)]);
    }

    #[test]
    fn keep_remove_replace_insert_mix() {
        let mut b = framed(&[(b"a", 1), (b"b", 2), (b"c", 3), (b"d", 4), (b"e", 5)]);
        let original_len = b.data.len();
        let mut ed = b.edit();
        ed.insert(b"0", 0, 0); // before everything
        assert_eq!(ed.next_record().map(|s| s.kind), Some(1)); // a kept
        ed.insert(b"a+", 1, 7); // after a
        ed.next_record(); // b: replaced by two records
        ed.remove();
        ed.insert(b"b1", 2, 0);
        ed.insert(b"b2", 2, 0);
        ed.next_record(); // c: rewritten, with one before and one after
        ed.insert(b"c+", 3, 0);
        ed.insert_before(b"-c", 3, 0);
        ed.replace(b"C");
        assert_eq!(ed.skip(1), 1); // d kept unvisited
        ed.next_record(); // e: something after it, then it goes
        ed.insert(b"e+", 5, 0);
        ed.remove();
        ed.insert(b"end", 9, 0);
        assert_eq!(ed.skip(3), 0);
        ed.finish();
        let want = [
            rec(b"0", 0),
            rec(b"a", 1),
            (b"a+".to_vec(), 1, 7),
            rec(b"b1", 2),
            rec(b"b2", 2),
            rec(b"-c", 3),
            rec(b"C", 3),
            rec(b"c+", 3),
            rec(b"d", 4),
            rec(b"e+", 5),
            rec(b"end", 9),
        ];
        assert_eq!(records(&b), want);
        // Kept records are still the source's slices; changed ones were appended.
        assert_eq!(b.spans[1].start, 0);
        assert_eq!(b.spans[8].start, 3);
        assert!(b.spans[6].start as usize >= original_len);
    }

    #[test]
    fn many_inserts_open_gaps_and_keep_order() {
        let mut b = framed(&[(b"x", 0), (b"y", 1), (b"z", 2)]);
        let mut ed = b.edit();
        ed.next_record();
        for i in 0..1000u32 {
            ed.insert(&i.to_le_bytes(), 7, i);
        }
        ed.finish();
        let r = records(&b);
        assert_eq!(r.len(), 1003);
        assert_eq!(r[0], rec(b"x", 0));
        assert!((0..1000u32).all(|i| r[1 + i as usize] == (i.to_le_bytes().to_vec(), 7, i)));
        assert_eq!(&r[1001..], [rec(b"y", 1), rec(b"z", 2)]);
    }

    #[test]
    #[should_panic(expected = "no current record")]
    fn remove_twice_panics() {
        let mut b = framed(&[(b"a", 0)]);
        let mut ed = b.edit();
        ed.next_record();
        ed.remove();
        ed.remove();
    }

    /// One decision per visited record, for the property test.
    #[derive(Clone, Debug)]
    enum Op {
        Keep,
        Remove,
        Replace(Vec<u8>),
        Before(Vec<u8>),
        After(Vec<u8>),
        /// Replaced by several records.
        Expand(Vec<Vec<u8>>),
        /// Keep this many records unvisited.
        Skip(usize),
        RemoveRest,
    }

    fn op() -> impl Strategy<Value = Op> {
        let bytes = || proptest::collection::vec(any::<u8>(), 1..6);
        prop_oneof![
            4 => Just(Op::Keep),
            2 => Just(Op::Remove),
            1 => bytes().prop_map(Op::Replace),
            1 => bytes().prop_map(Op::Before),
            1 => bytes().prop_map(Op::After),
            1 => proptest::collection::vec(bytes(), 0..40).prop_map(Op::Expand),
            1 => (0usize..5).prop_map(Op::Skip),
            1 => Just(Op::RemoveRest),
        ]
    }

    proptest! {
        /// The editor's result equals rebuilding the record list naively into a new Vec, and the
        /// records it kept are still the source's slices.
        #[test]
        fn equals_a_naive_rebuild(
            input in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..8), 0..60),
            ops in proptest::collection::vec(op(), 0..80),
        ) {
            let recs: Vec<(&[u8], u32)> =
                input.iter().enumerate().map(|(i, r)| (&r[..], i as u32)).collect();
            let mut b = framed(&recs);
            let original: Vec<Span> = b.spans.clone();
            // (bytes, kind, tag, start of the original slice if kept as it was)
            let kept = |i: usize| (input[i].clone(), i as u32, 0, Some(original[i].start));
            let mut want: Vec<(Vec<u8>, u32, u32, Option<u32>)> = Vec::new();
            let mut next = 0;
            {
                let mut ed = b.edit();
                for op in ops {
                    if let Op::Skip(n) = op {
                        let n = n.min(input.len() - next);
                        prop_assert_eq!(ed.skip(n), n);
                        want.extend((next..next + n).map(kept));
                        next += n;
                        continue;
                    }
                    if let Op::RemoveRest = op {
                        prop_assert_eq!(ed.remove_rest(), input.len() - next);
                        next = input.len();
                        continue;
                    }
                    let Some(span) = ed.next_record() else { break };
                    prop_assert_eq!(span, original[next]);
                    let kind = next as u32;
                    let this = kept(next);
                    next += 1;
                    match op {
                        Op::Keep => want.push(this),
                        Op::Remove => ed.remove(),
                        Op::Replace(new) => {
                            ed.replace(&new);
                            want.push((new, kind, 0, None));
                        }
                        Op::Before(new) => {
                            ed.insert_before(&new, 100, 1);
                            want.push((new, 100, 1, None));
                            want.push(this);
                        }
                        Op::After(new) => {
                            ed.insert(&new, 200, 2);
                            want.push(this);
                            want.push((new, 200, 2, None));
                        }
                        Op::Expand(parts) => {
                            ed.remove();
                            for p in parts {
                                ed.insert(&p, kind, 3);
                                want.push((p, kind, 3, None));
                            }
                        }
                        Op::Skip(_) | Op::RemoveRest => unreachable!(),
                    }
                }
                prop_assert_eq!(ed.remaining(), input.len() - next);
            }
            // What was not visited is kept.
            want.extend((next..input.len()).map(kept));
            let got = records(&b);
            prop_assert_eq!(got.len(), want.len());
            for ((span, got), want) in b.spans.iter().zip(got).zip(want) {
                prop_assert_eq!(&got, &(want.0, want.1, want.2));
                if let Some(start) = want.3 {
                    prop_assert_eq!(span.start, start, "a kept record was copied");
                }
            }
        }
    }
}
