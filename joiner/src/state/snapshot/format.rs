//! The layout of a state file: a length-delimited [`SnapshotHeader`], then feature logs as
//! their records' bytes, each length-delimited.

use std::collections::BTreeMap;

use crate::event::EventKind;
use crate::log::{Layouts, ServedLog};
use crate::state::table::EarlyLabel;

/// The state file format this joiner writes and reads. Bumped with any change to the messages
/// below that an older joiner would misread; a file of another format is refused at restore.
pub(super) const FORMAT: u32 = 4;

/// Reads one length-delimited feature log of a state file, keeping its bytes.
pub(super) fn read_log(buf: &mut &[u8], layouts: &mut Layouts) -> Result<ServedLog, String> {
    let len = prost::decode_length_delimiter(&mut *buf).map_err(|e| e.to_string())?;
    let bytes = buf.get(..len).ok_or("truncated feature log")?;
    *buf = &buf[len..];
    ServedLog::decode(bytes.to_vec(), layouts).map_err(|e| e.to_string())
}

/// The serialised form of a [`JoinState`](crate::state::JoinState), written beside each
/// checkpoint: this header as a length-delimited protobuf message, then each feature log of
/// `features` (in that order) and of `matched_only`, each length-delimited. Feature logs are
/// copied as their protobuf bytes, with no conversion: a snapshot costs about what writing the
/// held records costs.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct SnapshotHeader {
    #[prost(message, repeated, tag = "1")]
    pub(super) features: Vec<SnapFeature>,
    /// Requests whose features expired while a matched impression still waits for its label
    /// window: their logs follow the held ones.
    #[prost(string, repeated, tag = "2")]
    pub(super) matched_only: Vec<String>,
    #[prost(message, repeated, tag = "3")]
    pub(super) pending: Vec<SnapPending>,
    #[prost(message, repeated, tag = "4")]
    pub(super) emitted: Vec<SnapEmitted>,
    #[prost(int64, tag = "5")]
    pub(super) max_features_us: i64,
    /// Unused since the events' side of the watermark comes from `sources`; kept so that the
    /// tag is never reused with another meaning.
    #[prost(int64, tag = "6")]
    pub(super) max_events_us: i64,
    #[prost(int64, tag = "7")]
    pub(super) watermark_us: i64,
    #[prost(btree_map = "int32, int64", tag = "8")]
    pub(super) sources: BTreeMap<i32, i64>,
    #[prost(int64, optional, tag = "9")]
    pub(super) features_idle_us: Option<i64>,
    /// [`FORMAT`]: the logs are in segments (the state files of earlier epochs and this one),
    /// `SnapFeature::segment` and `matched_only_segments` say which, and `segment_files` names
    /// each segment's file; logs still in the feature-log topic are named by their offset.
    #[prost(uint32, tag = "10")]
    pub(super) format: u32,
    #[prost(uint64, repeated, tag = "11")]
    pub(super) matched_only_segments: Vec<u64>,
    /// Bytes of logs in each segment that this snapshot refers to.
    #[prost(btree_map = "uint64, uint64", tag = "12")]
    pub(super) segment_bytes: BTreeMap<u64, u64>,
    /// The epoch of this file (its own logs are segment `epoch`).
    #[prost(uint64, tag = "13")]
    pub(super) epoch: u64,
    /// Format 3: for each of `matched_only`, the offset of its log in the feature-log
    /// partition, or -1 when a segment holds it.
    #[prost(int64, repeated, tag = "14")]
    pub(super) matched_only_offsets: Vec<i64>,
    /// Format 4: the file of each segment in `segment_bytes` (this one's own included when it
    /// holds logs), as the dataset names it. State files are named per writer: two writers of
    /// one epoch (a zombie and the owner that fenced it) write two files, and only the one
    /// the committed checkpoint names holds the logs this lineage refers to.
    #[prost(btree_map = "uint64, string", tag = "15")]
    pub(super) segment_files: BTreeMap<u64, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct SnapFeature {
    #[prost(string, tag = "1")]
    pub(super) request_id: String,
    #[prost(int64, tag = "2")]
    pub(super) expires_at: i64,
    #[prost(string, repeated, tag = "3")]
    pub(super) impressed: Vec<String>,
    #[prost(uint64, tag = "4")]
    pub(super) segment: u64,
    /// Format 3: the log is the record at this offset of the feature-log partition, and no
    /// segment holds it.
    #[prost(int64, optional, tag = "5")]
    pub(super) offset: Option<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct SnapPending {
    #[prost(string, tag = "1")]
    pub(super) request_id: String,
    #[prost(string, tag = "2")]
    pub(super) item_id: String,
    #[prost(int64, optional, tag = "3")]
    pub(super) impression_us: Option<i64>,
    #[prost(int64, tag = "4")]
    pub(super) first_us: i64,
    #[prost(uint32, tag = "5")]
    pub(super) clicks: u32,
    #[prost(uint32, tag = "6")]
    pub(super) conversions: u32,
    #[prost(btree_map = "string, uint32", tag = "7")]
    pub(super) other: BTreeMap<String, u32>,
    #[prost(btree_map = "string, double", tag = "8")]
    pub(super) values: BTreeMap<String, f64>,
    #[prost(uint64, optional, tag = "9")]
    pub(super) matched_row: Option<u64>,
    /// The ids of the events counted in the entry (none in files of earlier versions).
    #[prost(string, repeated, tag = "10")]
    pub(super) event_ids: Vec<String>,
    /// Label events waiting for the entry's impression (none in files of earlier versions).
    #[prost(message, repeated, tag = "11")]
    pub(super) early: Vec<SnapEarly>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct SnapEarly {
    #[prost(int64, tag = "1")]
    pub(super) time_us: i64,
    /// 1 click, 2 conversion, 3 another event named `name`.
    #[prost(uint32, tag = "2")]
    pub(super) kind: u32,
    #[prost(string, tag = "3")]
    pub(super) name: String,
    #[prost(btree_map = "string, double", tag = "4")]
    pub(super) values: BTreeMap<String, f64>,
}

impl SnapEarly {
    pub(super) fn of(e: &EarlyLabel) -> Self {
        let (kind, name) = match &e.kind {
            EventKind::Click => (1, String::new()),
            EventKind::Conversion => (2, String::new()),
            // An impression is never held as an early label; kept as a named event if it were.
            EventKind::Impression => (3, "impression".to_owned()),
            EventKind::Other(name) => (3, name.clone()),
        };
        SnapEarly {
            time_us: e.time_us,
            kind,
            name,
            values: e.values.clone(),
        }
    }

    pub(super) fn restore(self) -> Result<EarlyLabel, String> {
        let kind = match self.kind {
            1 => EventKind::Click,
            2 => EventKind::Conversion,
            3 => EventKind::Other(self.name),
            k => return Err(format!("unknown kind {k} of an early label event")),
        };
        Ok(EarlyLabel {
            time_us: self.time_us,
            kind,
            values: self.values,
        })
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct SnapEmitted {
    #[prost(string, tag = "1")]
    pub(super) request_id: String,
    #[prost(string, repeated, tag = "2")]
    pub(super) items: Vec<String>,
}
