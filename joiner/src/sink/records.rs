//! What the first joiner that wrote the dataset recorded, for every later one to check its
//! configuration against: the feature topic's partition count (docs/JOINER.md, "Partition
//! counts"), the partition layout and the events topics. The dataset's checkpoints and paths
//! depend on them, so the caller refuses to start on a mismatch (events topics may only be
//! appended to). Also the dataset's id, which marks the records routed for it.

use super::Dataset;
use super::error::SinkError;
use super::layout::{MODEL_PARTITION, safe};
use super::paths;

impl Dataset {
    /// The partition count of `topic` (the feature-log topic) this dataset is written with,
    /// recorded by the first joiner that ran on it: `partitions` if none was. A dataset is tied
    /// to that count (a task's checkpoint holds offsets of its partitions, and a request's
    /// partition moves when the count changes), so a joiner started after the topic gained
    /// partitions must know, even where nothing else differs (co-partitioned events grown
    /// alike, or a repartition topic deleted).
    pub fn recorded_partition_count(&self, topic: &str, partitions: i32) -> Result<i32, SinkError> {
        let name = format!("_featurelog/topics/{}.json", safe(topic));
        let record = serde_json::json!({ "topic": topic, "partitions": partitions });
        if self
            .storage
            .create(&name, record.to_string().into_bytes())?
        {
            return Ok(partitions);
        }
        let text = self.storage.get(&name)?;
        serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("partitions")?.as_i64())
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| SinkError::Checkpoint {
                path: self.storage.describe(&name),
                problem: "not a partition count record (`{\"partitions\": N}`)".into(),
            })
    }

    /// This dataset's id, drawn by the first joiner that ran on it and kept in
    /// `_featurelog/dataset.json`. The router marks every repartition record with it, so that
    /// a task refuses another dataset's records (a group reused with a new `output.path`).
    /// A copy of the dataset, with its checkpoints, keeps the id and goes on where it was.
    pub fn recorded_id(&self) -> Result<String, SinkError> {
        let name = "_featurelog/dataset.json";
        let id = uuid::Uuid::new_v4().to_string();
        let record = serde_json::json!({ "id": id });
        if self.storage.create(name, record.to_string().into_bytes())? {
            return Ok(id);
        }
        let text = self.storage.get(name)?;
        serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| Some(v.get("id")?.as_str()?.to_owned()))
            .filter(|id| !id.is_empty())
            .ok_or_else(|| SinkError::Checkpoint {
                path: self.storage.describe(name),
                problem: "not a dataset id record (`{\"id\": \"...\"}`)".into(),
            })
    }

    /// Whether this dataset's rows are partitioned by model (`output.partition-by-model`), as
    /// recorded by the first joiner that ran on it: the configured setting if none was. A
    /// dataset written before the setting existed, with checkpoints and no record, was not.
    /// The caller refuses to write a dataset in the other layout: its markers, its late area
    /// and every reader's path would be split between two.
    pub fn recorded_partition_by_model(&self) -> Result<bool, SinkError> {
        let name = "_featurelog/layout.json";
        let record = |by_model: bool| {
            let columns: &[&str] = if by_model {
                &[MODEL_PARTITION, "dt", "hr"]
            } else {
                &["dt", "hr"]
            };
            serde_json::json!({ "partition-columns": columns }).to_string()
        };
        if !self.storage.exists(name)? {
            let written = !self.storage.children(paths::CHECKPOINTS)?.0.is_empty();
            let by_model = self.options.partition_by_model && !written;
            if self.storage.create(name, record(by_model).into_bytes())? {
                return Ok(by_model);
            }
        }
        let text = self.storage.get(name)?;
        serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| {
                let columns = v.get("partition-columns")?.as_array()?;
                Some(columns.first()?.as_str()? == MODEL_PARTITION)
            })
            .ok_or_else(|| SinkError::Checkpoint {
                path: self.storage.describe(name),
                problem: "not a layout record (`{\"partition-columns\": [...]}`)".into(),
            })
    }

    /// Whether this dataset is a Delta table (`output.format = "delta"`), as recorded in
    /// `_featurelog/format.json` by the first joiner that ran on it: the configured format if
    /// none was. A dataset with checkpoints and no record was written as Parquet. The caller
    /// refuses to write a dataset in the other format: a table begun on a Parquet dataset
    /// would lack every row written before it, and one no longer committed to would silently
    /// stop growing while its directories did not.
    pub fn recorded_delta(&self) -> Result<bool, SinkError> {
        let name = "_featurelog/format.json";
        let record = |delta: bool| {
            let format = if delta { "delta" } else { "parquet" };
            serde_json::json!({ "format": format }).to_string()
        };
        if !self.storage.exists(name)? {
            let written = !self.storage.children(paths::CHECKPOINTS)?.0.is_empty();
            let delta = self.delta.is_some() && !written;
            if self.storage.create(name, record(delta).into_bytes())? {
                return Ok(delta);
            }
        }
        let text = self.storage.get(name)?;
        serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| match v.get("format")?.as_str()? {
                "delta" => Some(true),
                "parquet" => Some(false),
                _ => None,
            })
            .ok_or_else(|| SinkError::Checkpoint {
                path: self.storage.describe(name),
                problem: "not a format record (`{\"format\": \"parquet\" or \"delta\"}`)".into(),
            })
    }

    /// The events topics this dataset was written with (`input.events-topic`), recorded at the
    /// first start, and again when `topics` extends them (appended topics): the list as it
    /// was before this start. The caller refuses a list that is not the recorded one followed
    /// by more, since the checkpoints number the watermark's sources by place in the list.
    pub fn recorded_events_topics(&self, topics: &[String]) -> Result<Vec<String>, SinkError> {
        let name = "_featurelog/events-topics.json";
        let record = |topics: &[String]| serde_json::json!({ "topics": topics }).to_string();
        if self.storage.create(name, record(topics).into_bytes())? {
            return Ok(topics.to_vec());
        }
        let text = self.storage.get(name)?;
        let recorded: Vec<String> = serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| serde_json::from_value(v.get("topics")?.clone()).ok())
            .ok_or_else(|| SinkError::Checkpoint {
                path: self.storage.describe(name),
                problem: "not an events topics record (`{\"topics\": [...]}`)".into(),
            })?;
        if topics.len() > recorded.len() && topics.starts_with(&recorded) {
            self.storage.put(name, record(topics).into_bytes())?;
        }
        Ok(recorded)
    }
}

#[cfg(test)]
mod tests {
    use crate::sink::fixtures::*;
    use crate::sink::{SinkOptions, model_dir};

    #[test]
    fn a_dataset_keeps_the_layout_it_was_first_written_with() {
        let by_model = SinkOptions {
            partition_by_model: true,
            ..SinkOptions::default()
        };
        let store = memory();
        let first = on_memory(&store, by_model.clone());
        assert!(first.recorded_partition_by_model().unwrap());
        let other = on_memory(&store, SinkOptions::default());
        assert!(other.recorded_partition_by_model().unwrap(), "recorded");
        // A dataset written before the setting existed (checkpoints, no record) was by hour.
        let old = memory();
        let ds = on_memory(&old, SinkOptions::default());
        let staged = ds.stage("t-0", 1, &rows(0), i64::MIN).unwrap();
        ds.commit(&committed("t-0", 1, &staged)).unwrap();
        let now = on_memory(&old, by_model);
        assert!(!now.recorded_partition_by_model().unwrap());
        assert_eq!(model_dir(""), "model=__HIVE_DEFAULT_PARTITION__");
        assert_eq!(model_dir("resnet-50_v1.2"), "model=resnet-50_v1.2");
        assert!(model_dir(&"é".repeat(100)).starts_with("model=sha256."));
    }

    #[test]
    fn a_dataset_keeps_the_format_it_was_first_written_with() {
        let dir = tempfile::tempdir().unwrap();
        let delta = || {
            crate::sink::Dataset::open(dir.path(), SinkOptions::default())
                .unwrap()
                .with_delta(crate::sink::delta::DeltaTable::local(dir.path()).unwrap())
        };
        assert!(delta().recorded_delta().unwrap());
        let parquet = crate::sink::Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        assert!(parquet.recorded_delta().unwrap(), "recorded");
        // A dataset written before the record existed (checkpoints, no record) is Parquet.
        let old = memory();
        let ds = on_memory(&old, SinkOptions::default());
        let staged = ds.stage("t-0", 1, &rows(0), i64::MIN).unwrap();
        ds.commit(&committed("t-0", 1, &staged)).unwrap();
        let dir2 = tempfile::tempdir().unwrap();
        let table = crate::sink::delta::DeltaTable::local(dir2.path()).unwrap();
        let now = on_memory(&old, SinkOptions::default()).with_delta(table);
        assert!(!now.recorded_delta().unwrap());
    }

    #[test]
    fn a_dataset_keeps_the_id_it_was_first_given() {
        let store = memory();
        let id = on_memory(&store, SinkOptions::default())
            .recorded_id()
            .unwrap();
        assert_eq!(id.len(), 36, "{id}");
        // Another process on the same dataset reads the same id; another dataset has its own.
        let again = on_memory(&store, SinkOptions::default());
        assert_eq!(again.recorded_id().unwrap(), id);
        let other = on_memory(&memory(), SinkOptions::default());
        assert_ne!(other.recorded_id().unwrap(), id);
    }

    #[test]
    fn the_first_partition_count_recorded_is_the_datasets() {
        let store = memory();
        let ds = on_memory(&store, SinkOptions::default());
        assert_eq!(ds.recorded_partition_count("features", 4).unwrap(), 4);
        assert_eq!(ds.recorded_partition_count("features", 4).unwrap(), 4);
        // The topic gained partitions: the dataset still says 4, in another process too.
        let again = on_memory(&store, SinkOptions::default());
        assert_eq!(again.recorded_partition_count("features", 8).unwrap(), 4);
        // Another topic's dataset in the same root is its own.
        assert_eq!(again.recorded_partition_count("other", 2).unwrap(), 2);
    }

    #[test]
    fn the_events_topics_recorded_grow_only_by_appending() {
        let store = memory();
        let list = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let ds = on_memory(&store, SinkOptions::default());
        assert_eq!(
            ds.recorded_events_topics(&list(&["a"])).unwrap(),
            list(&["a"])
        );
        // Appended: the list before this start, and the longer one is recorded.
        assert_eq!(
            ds.recorded_events_topics(&list(&["a", "b"])).unwrap(),
            list(&["a"])
        );
        let again = on_memory(&store, SinkOptions::default());
        assert_eq!(
            again.recorded_events_topics(&list(&["a", "b"])).unwrap(),
            list(&["a", "b"])
        );
        // Reordered or shortened: the record stays, for the caller to refuse the start.
        assert_eq!(
            again.recorded_events_topics(&list(&["b", "a"])).unwrap(),
            list(&["a", "b"])
        );
        assert_eq!(
            again.recorded_events_topics(&list(&["a"])).unwrap(),
            list(&["a", "b"])
        );
        assert_eq!(
            again.recorded_events_topics(&list(&["a", "b"])).unwrap(),
            list(&["a", "b"])
        );
    }
}
