//! The rows a task has joined and not yet committed, with the memory they hold.
//!
//! A row points at its request's feature log, so a row keeps the whole log alive after the
//! join state has let it go. Reading a backlog at full speed, a task joins rows far faster
//! than a flush interval lets it write them; counting rows alone then lets the logs behind
//! them fill the memory (a hundred candidates with five impressions: a 7 KiB log per five
//! rows). [`Rows::bytes`] counts each log once, with the rows' own bytes, so that a task
//! commits early on `output.flush-bytes` as it does on `output.flush-rows`.

use std::sync::Arc;

use crate::log::ServedLog;
use crate::state::Row;

/// What a row costs beside its strings and its log (the struct, its labels' maps).
const ROW_BYTES: usize = 160;

/// A task's uncommitted rows.
#[derive(Default)]
pub struct Rows {
    rows: Vec<Row>,
    bytes: usize,
}

impl Rows {
    /// Adds rows. Each log is counted when a row points at a log other than the row before it:
    /// the rows of one request come together, so a log is counted about once.
    pub fn extend(&mut self, rows: Vec<Row>) {
        for row in rows {
            let same_log = self
                .rows
                .last()
                .is_some_and(|last| Arc::ptr_eq(&last.features, &row.features));
            if !same_log {
                self.bytes += log_bytes(&row.features);
            }
            self.bytes += ROW_BYTES + row.request_id.len() + row.item_id.len();
            self.rows.push(row);
        }
    }

    /// The rows, in the order they were joined.
    pub fn as_slice(&self) -> &[Row] {
        &self.rows
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// The memory they hold, estimated: their own bytes and those of the logs they point at.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Forgets them (committed).
    pub fn clear(&mut self) {
        self.rows.clear();
        self.bytes = 0;
    }
}

fn log_bytes(log: &ServedLog) -> usize {
    log.raw().len() + std::mem::size_of::<ServedLog>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Layouts;
    use crate::state::Labels;
    use featurelog_schemas::featurelog::v1::FeatureLog;
    use prost::Message as _;

    fn log(request: &str, candidates: usize) -> Arc<ServedLog> {
        let record = FeatureLog {
            request_id: request.into(),
            model_name: "m".into(),
            candidate_ids: (0..candidates).map(|i| i.to_string()).collect(),
            ..FeatureLog::default()
        };
        Arc::new(ServedLog::decode(record.encode_to_vec(), &mut Layouts::default()).unwrap())
    }

    fn row(features: &Arc<ServedLog>, item: usize) -> Row {
        Row {
            request_id: features.request_id.clone(),
            item_id: item.to_string(),
            features: features.clone(),
            row: item,
            impression_time_us: Some(0),
            labels: Labels::default(),
        }
    }

    #[test]
    fn each_log_is_counted_once_for_its_rows() {
        let (a, b) = (log("a", 500), log("b", 500));
        let mut rows = Rows::default();
        rows.extend((0..5).map(|i| row(&a, i)).collect());
        let one = rows.bytes();
        assert!(one > a.raw().len(), "the log is counted");
        rows.extend((5..10).map(|i| row(&a, i)).collect());
        let same = rows.bytes() - one;
        assert!(
            same < a.raw().len(),
            "not again for more rows of it: {same}"
        );
        rows.extend(vec![row(&b, 0)]);
        assert!(rows.bytes() - one - same > b.raw().len(), "another log is");
        assert_eq!(rows.len(), 11);
        rows.clear();
        assert_eq!((rows.len(), rows.bytes()), (0, 0));
    }
}
