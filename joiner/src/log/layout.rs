//! The columns' metadata of feature logs, held once per distinct layout and shared by every
//! log that has it.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::{Column, Side};

/// A column as read from a record, before interning: borrows its name from the record.
#[derive(Debug, PartialEq)]
pub(super) struct ColumnRef<'a> {
    pub(super) side: Side,
    pub(super) name: &'a str,
    pub(super) datatype: i32,
    pub(super) row_shape: Vec<i64>,
    pub(super) per_request: bool,
}

impl ColumnRef<'_> {
    fn hash_into(&self, h: &mut impl Hasher) {
        (
            self.side,
            self.name,
            self.datatype,
            &self.row_shape,
            self.per_request,
        )
            .hash(h);
    }

    fn is(&self, c: &Column) -> bool {
        self.side == c.side
            && self.datatype == c.datatype
            && self.per_request == c.per_request
            && self.name == c.name
            // Nearly always two empty shapes: decided without a call to memcmp.
            && (self.row_shape.is_empty() && c.row_shape.is_empty() || self.row_shape == c.row_shape)
    }
}

/// The columns of a log, in order (features, then outputs). Logs with the same columns share
/// one `Layout` through [`Layouts`], so that their metadata is held once, not per record, and
/// building a batch compares two pointers per row instead of every column's name (that
/// comparison was the largest symbol of the profile).
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    pub(super) columns: Vec<Column>,
}

impl Layout {
    /// The columns, features first.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }
}

/// The distinct layouts of the logs a join state holds: a few per model and allow-list
/// version in practice. Layouts that no log refers to any more are dropped as it grows.
#[derive(Debug, Default)]
pub struct Layouts {
    by_hash: HashMap<u64, Vec<Arc<Layout>>>,
    len: usize,
    prune_at: usize,
    /// Candidates of the last log decoded: the next one of the same model most likely has as
    /// many, so its id list is allocated once at that size instead of grown by doubling
    /// (which also left up to half of it unused, counted against the memory bound).
    pub(super) last_candidates: usize,
    /// The layout of the last log decoded.
    last: Option<Arc<Layout>>,
}

impl Layouts {
    /// Columns of the last log decoded: the next one most likely has as many, so its column
    /// lists are allocated once at that size rather than grown push by push.
    pub(super) fn last_width(&self) -> usize {
        self.last.as_ref().map_or(0, |l| l.columns.len())
    }

    pub(super) fn intern(&mut self, columns: &[ColumnRef<'_>]) -> Arc<Layout> {
        // Consecutive logs of a partition are mostly of one model: try its layout first,
        // before hashing every column name.
        if let Some(last) = &self.last
            && last.columns.len() == columns.len()
            && last.columns.iter().zip(columns).all(|(a, b)| b.is(a))
        {
            return last.clone();
        }
        let layout = self.intern_hashed(columns);
        self.last = Some(layout.clone());
        layout
    }

    fn intern_hashed(&mut self, columns: &[ColumnRef<'_>]) -> Arc<Layout> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for c in columns {
            c.hash_into(&mut h);
        }
        let same = self.by_hash.entry(h.finish()).or_default();
        let found = same.iter().find(|l| {
            l.columns.len() == columns.len() && l.columns.iter().zip(columns).all(|(a, b)| b.is(a))
        });
        if let Some(layout) = found {
            return layout.clone();
        }
        let layout = Arc::new(Layout {
            columns: columns
                .iter()
                .map(|c| Column {
                    side: c.side,
                    name: c.name.to_owned(),
                    datatype: c.datatype,
                    row_shape: c.row_shape.clone(),
                    per_request: c.per_request,
                })
                .collect(),
        });
        same.push(layout.clone());
        self.len += 1;
        if self.len > self.prune_at {
            self.by_hash.retain(|_, same| {
                same.retain(|l| Arc::strong_count(l) > 1);
                !same.is_empty()
            });
            self.len = self.by_hash.values().map(Vec::len).sum();
            self.prune_at = 2 * self.len + 64;
        }
        layout
    }

    /// Distinct layouts held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
