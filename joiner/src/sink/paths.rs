//! Where the joiner writes, resolved from `[output]` in one place: the run opens its dataset
//! there ([`super::Dataset::from_config`]) and `featurelog join --check-config` prints the
//! same places, so that what an operator checks is what the run uses.
//!
//! The names under the dataset root ([`CHECKPOINTS`], [`STATE`], [`STAGING`], [`LATE`]) are the
//! ones the sink writes to; they are defined here so that the printed paths cannot drift from
//! the written ones.

use std::path::{Path, PathBuf};

use super::SinkError;
use crate::config::{OutputConfig, OutputLocation};

/// Each task's checkpoints: `<root>/_featurelog/checkpoints/<task>/<epoch>.json`.
pub const CHECKPOINTS: &str = "_featurelog/checkpoints";
/// Each task's state files: `<root>/_featurelog/state/<task>/<epoch>-<writer>.bin`.
pub const STATE: &str = "_featurelog/state";
/// Files written and not published yet: `<root>/_featurelog/staging/<task>/<epoch>-<writer>/`.
pub const STAGING: &str = "_featurelog/staging";
/// Rows of hours already complete: `<root>/late/<hour>/`.
pub const LATE: &str = "late";

/// The dataset's place as the run uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetPaths {
    location: OutputLocation,
}

impl DatasetPaths {
    /// Resolves `output.path`: a local path absolute (the config loader has already made a
    /// relative one relative to the config file; one still relative, from a config file named
    /// by a relative path, is relative to the working directory, as the run's file operations
    /// would take it), an `s3://` URL as its bucket and prefix. Touches nothing.
    pub fn resolve(output: &OutputConfig) -> Result<Self, SinkError> {
        let unsupported = |problem: String| SinkError::Unsupported {
            url: output.path.display().to_string(),
            problem,
        };
        let location = match output.location().map_err(unsupported)? {
            OutputLocation::Local(path) => {
                OutputLocation::Local(std::path::absolute(&path).map_err(|source| {
                    SinkError::Io {
                        action: "resolve output.path (the working directory)",
                        path: path.clone(),
                        source,
                    }
                })?)
            }
            s3 @ OutputLocation::S3 { .. } => s3,
        };
        Ok(Self { location })
    }

    /// The local directory or the bucket and prefix.
    pub fn location(&self) -> &OutputLocation {
        &self.location
    }

    /// The root as messages show it: `/abs/dir` or `s3://bucket/prefix`.
    pub fn root(&self) -> String {
        match &self.location {
            OutputLocation::Local(dir) => dir.display().to_string(),
            OutputLocation::S3 { bucket, prefix } if prefix.is_empty() => format!("s3://{bucket}"),
            OutputLocation::S3 { bucket, prefix } => format!("s3://{bucket}/{prefix}"),
        }
    }

    /// `relative` (a `/`-separated name under the root) as messages show it.
    pub fn show(&self, relative: &str) -> String {
        match &self.location {
            OutputLocation::Local(dir) => dir.join(relative).display().to_string(),
            OutputLocation::S3 { .. } => format!("{}/{relative}", self.root()),
        }
    }

    /// What the run writes where, for `--check-config`: `(what, path)`, in the order an
    /// operator looks for them. `<task>` directories are named after the feature-log topic's
    /// partitions.
    pub fn listing(
        &self,
        output: &OutputConfig,
        features_topic: &str,
    ) -> Vec<(&'static str, String)> {
        let hours = if output.partition_by_model {
            format!("{}=<model>/dt=YYYY-MM-DD/hr=HH/", super::MODEL_PARTITION)
        } else {
            "dt=YYYY-MM-DD/hr=HH/".to_owned()
        };
        let task = format!("{}-<partition>/", super::safe(features_topic));
        vec![
            ("dataset", self.root()),
            ("hours", self.show(&hours)),
            ("late rows", self.show(&format!("{LATE}/{hours}"))),
            ("checkpoints", self.show(&format!("{CHECKPOINTS}/{task}"))),
            ("state", self.show(&format!("{STATE}/{task}"))),
            ("staging", self.show(&format!("{STAGING}/{task}"))),
        ]
    }

    /// A local root that cannot become a directory because a path above it (or the root
    /// itself) is a regular file: the error that names that file. `None` on S3, and when
    /// nothing is in the way (missing directories are created by the run).
    pub fn file_in_the_way(&self) -> Option<SinkError> {
        let OutputLocation::Local(root) = &self.location else {
            return None;
        };
        file_in_the_way(root)
    }
}

/// The error for a local dataset `root` under (or at) a regular file, if it is; see
/// [`DatasetPaths::file_in_the_way`]. Also what the sink reports when creating the root fails.
pub(crate) fn file_in_the_way(root: &Path) -> Option<SinkError> {
    // The nearest path that exists, the root first: it must be a directory (following links,
    // as creating the directories below it would).
    let existing: &Path = root.ancestors().find(|p| p.exists())?;
    if existing.is_dir() {
        return None;
    }
    Some(SinkError::NotADirectory {
        root: root.to_owned(),
        file: PathBuf::from(existing),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::JoinerConfig;

    fn config(path: &str, env: &[(&str, &str)], partition_by_model: bool) -> JoinerConfig {
        let text = format!(
            "[kafka]\nbootstrap-servers = \"k:9092\"\n[input]\nevents-topic = \"app.events\"\n\
             [output]\npath = \"{path}\"\npartition-by-model = {partition_by_model}\n"
        );
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        JoinerConfig::from_toml_with_env(
            Path::new("/etc/fl/join.toml"),
            &text,
            env.collect::<Vec<_>>(),
        )
        .unwrap()
    }

    #[test]
    fn local_paths_resolve_against_the_config_file_and_the_environment_wins() {
        let c = config("data", &[], false);
        let paths = DatasetPaths::resolve(&c.output).unwrap();
        assert_eq!(paths.root(), "/etc/fl/data");
        let listed: Vec<_> = paths.listing(&c.output, &c.input.features_topic);
        assert_eq!(
            listed,
            [
                ("dataset", "/etc/fl/data".to_owned()),
                ("hours", "/etc/fl/data/dt=YYYY-MM-DD/hr=HH/".to_owned()),
                (
                    "late rows",
                    "/etc/fl/data/late/dt=YYYY-MM-DD/hr=HH/".to_owned()
                ),
                (
                    "checkpoints",
                    "/etc/fl/data/_featurelog/checkpoints/featurelog_feature-log_v1-<partition>/"
                        .to_owned()
                ),
                (
                    "state",
                    "/etc/fl/data/_featurelog/state/featurelog_feature-log_v1-<partition>/"
                        .to_owned()
                ),
                (
                    "staging",
                    "/etc/fl/data/_featurelog/staging/featurelog_feature-log_v1-<partition>/"
                        .to_owned()
                ),
            ]
        );
        let c = config(
            "data",
            &[("FEATURELOG_JOIN__OUTPUT__PATH", "/srv/joined")],
            true,
        );
        let paths = DatasetPaths::resolve(&c.output).unwrap();
        assert_eq!(
            paths.listing(&c.output, "f")[1].1,
            "/srv/joined/model=<model>/dt=YYYY-MM-DD/hr=HH/"
        );
    }

    #[test]
    fn s3_urls_stay_urls() {
        let c = config("s3://training/joined/v1/", &[], false);
        let paths = DatasetPaths::resolve(&c.output).unwrap();
        assert_eq!(paths.root(), "s3://training/joined/v1");
        assert_eq!(
            paths.listing(&c.output, "f")[3].1,
            "s3://training/joined/v1/_featurelog/checkpoints/f-<partition>/"
        );
        assert!(paths.file_in_the_way().is_none());
    }

    #[test]
    fn a_regular_file_above_the_root_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file.txt");
        std::fs::write(&file, "x").unwrap();
        for root in [file.join("dataset/deeper"), file.clone()] {
            let err = file_in_the_way(&root).unwrap().to_string();
            assert!(
                err.contains(&format!("{} is a regular file", file.display())),
                "{err}"
            );
        }
        assert!(file_in_the_way(&dir.path().join("missing/dataset")).is_none());
        assert!(file_in_the_way(dir.path()).is_none());
    }
}
