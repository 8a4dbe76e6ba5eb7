//! The allow list: which input tensors of which model are features to log, where the candidate
//! ids are, which outputs to log, and how much to sample. Deny by default: a model that is not
//! listed is forwarded and not logged.
//!
//! The list lives in its own TOML file so that it can change without a restart. [`AllowListHandle`]
//! polls the file; a new version replaces the old one atomically (readers on the inference path
//! never lock), and a broken file is refused with a log line while the old list stays in force.
//! Polling rather than inotify: Kubernetes updates a mounted ConfigMap by swapping a symlink,
//! which file watchers easily miss, and one read every few seconds costs nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::SidecarError;
use crate::metrics::Metrics;

/// One model's entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ModelRule {
    /// The model's name, as in `ModelInferRequest.model_name`.
    pub name: String,
    /// Only this version; an entry without a version covers every version that has no entry of
    /// its own.
    #[serde(default)]
    pub version: Option<String>,
    /// Input tensors to log, one column each.
    #[serde(default)]
    pub features: Vec<String>,
    /// Output tensors (scores) to log.
    #[serde(default)]
    pub outputs: Vec<String>,
    /// The input tensor that holds the candidate (item) ids, one per row.
    #[serde(default)]
    pub candidate_ids_input: Option<String>,
    /// Or: a request parameter holding them as one comma-separated string.
    #[serde(default)]
    pub candidate_ids_parameter: Option<String>,
    /// Request parameters to copy into the record.
    #[serde(default)]
    pub parameters: Vec<String>,
    /// Request headers (gRPC metadata) to copy into the record's parameters, under their
    /// lower-case names: context an API gateway adds (`x-user-country`, `x-app-version`). A
    /// request parameter of the same name wins.
    #[serde(default)]
    pub headers: Vec<String>,
    /// The fraction of requests logged, chosen by a hash of the request id (see
    /// [`featurelog_schemas::sampling`]) so that the impression side can pick the same requests.
    #[serde(default = "one")]
    pub sample_rate: f64,
    /// Log only the best `k` candidates by an output.
    #[serde(default)]
    pub top_k: Option<TopK>,
}

/// Keep only the `k` candidates with the highest value of output `by`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TopK {
    /// How many candidates to keep.
    pub k: usize,
    /// The output tensor to rank by (one value per candidate).
    pub by: String,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct AllowListFile {
    #[serde(default)]
    model: Vec<ModelRule>,
}

/// A parsed, validated allow list and the version (content hash) it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct AllowList {
    /// `sha256:` and the first 16 hex digits of the file's bytes.
    pub version: String,
    /// The rules, in file order.
    pub models: Vec<ModelRule>,
}

impl AllowList {
    /// Parses and validates the text of an allow-list file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: AllowListFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut seen = BTreeSet::new();
        for rule in &file.model {
            let which = format!(
                "model {:?}{}",
                rule.name,
                rule.version
                    .as_ref()
                    .map(|v| format!(" version {v:?}"))
                    .unwrap_or_default()
            );
            if rule.name.is_empty() {
                return Err("a [[model]] entry has an empty name".into());
            }
            if !seen.insert((rule.name.clone(), rule.version.clone())) {
                return Err(format!("{which} is listed twice"));
            }
            if !(0.0..=1.0).contains(&rule.sample_rate) {
                return Err(format!("{which}: sample-rate must be between 0 and 1"));
            }
            if rule.candidate_ids_input.is_some() && rule.candidate_ids_parameter.is_some() {
                return Err(format!(
                    "{which}: set candidate-ids-input or candidate-ids-parameter, not both"
                ));
            }
            if let Some(top) = &rule.top_k {
                if top.k == 0 {
                    return Err(format!("{which}: top-k.k must be at least 1"));
                }
                if top.by.is_empty() {
                    return Err(format!("{which}: top-k.by must name an output"));
                }
            }
            for h in &rule.headers {
                if http::HeaderName::from_lowercase(h.as_bytes()).is_err() {
                    return Err(format!(
                        "{which}: headers: {h:?} is not a header name in lower case"
                    ));
                }
            }
            let mut names = BTreeSet::new();
            for f in &rule.features {
                if !names.insert(f) {
                    return Err(format!("{which}: feature {f:?} is listed twice"));
                }
            }
        }
        let digest = Sha256::digest(text.as_bytes());
        Ok(Self {
            version: format!("sha256:{}", &hex::encode(digest)[..16]),
            models: file.model,
        })
    }

    /// The rule for a model and version: an exact version entry first, else the entry without
    /// a version; `None` means the model is not logged.
    pub fn rule(&self, model: &str, version: &str) -> Option<&ModelRule> {
        self.models
            .iter()
            .find(|r| r.name == model && r.version.as_deref() == Some(version))
            .or_else(|| {
                self.models
                    .iter()
                    .find(|r| r.name == model && r.version.is_none())
            })
    }
}

/// The allow list in force, swapped atomically on reload.
#[derive(Debug, Clone)]
pub struct AllowListHandle {
    path: PathBuf,
    current: Arc<ArcSwap<AllowList>>,
    /// The version of a changed file read once and not yet taken: a change is taken when the
    /// file reads the same twice in a row, so a file caught mid-write (truncated to nothing,
    /// or half written, which can parse as a valid but different list) is never taken.
    settling: Arc<std::sync::Mutex<Option<String>>>,
}

impl AllowListHandle {
    /// Loads the file; a sidecar does not start with a broken allow list.
    pub fn load(path: &Path) -> Result<Self, SidecarError> {
        let list = read(path).map_err(|message| SidecarError::AllowList {
            path: path.to_owned(),
            message,
        })?;
        Ok(Self {
            path: path.to_owned(),
            current: Arc::new(ArcSwap::from_pointee(list)),
            settling: Arc::default(),
        })
    }

    /// The list in force now.
    pub fn current(&self) -> Arc<AllowList> {
        self.current.load_full()
    }

    /// The list in force, for a look that does not keep it (no reference count taken: the
    /// inference path's header capture).
    pub fn peek(&self) -> arc_swap::Guard<Arc<AllowList>> {
        self.current.load()
    }

    /// Checks the file once: returns true if a new version was taken, false if unchanged or
    /// still settling (changed since the last check), and an error (the old list stays) if the
    /// file cannot be read or, having settled, is invalid.
    pub fn reload(&self) -> Result<bool, String> {
        let text =
            std::fs::read_to_string(&self.path).map_err(|e| format!("cannot read it: {e}"))?;
        let version = format!(
            "sha256:{}",
            &hex::encode(Sha256::digest(text.as_bytes()))[..16]
        );
        let mut settling = self
            .settling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if version == self.current.load().version {
            *settling = None;
            return Ok(false);
        }
        if settling.as_deref() != Some(version.as_str()) {
            *settling = Some(version);
            return Ok(false);
        }
        let list = AllowList::parse(&text)?;
        self.current.store(Arc::new(list));
        *settling = None;
        Ok(true)
    }

    /// Polls the file every `interval` until `shutdown`.
    pub async fn watch(
        self,
        interval: Duration,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The last refused version, so a broken file is reported once, not every tick.
        let mut refused: Option<String> = None;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let this = self.clone();
            let outcome = tokio::task::spawn_blocking(move || this.reload()).await;
            match outcome {
                Ok(Ok(true)) => {
                    refused = None;
                    let version = self.current().version.clone();
                    metrics.allow_list_reloaded(&version, true);
                    tracing::info!(path = %self.path.display(), %version, "allow list reloaded");
                }
                Ok(Ok(false)) => {}
                Ok(Err(message)) => {
                    if refused.as_deref() != Some(message.as_str()) {
                        metrics.allow_list_reloaded(&self.current().version, false);
                        tracing::error!(
                            path = %self.path.display(),
                            kept = %self.current().version,
                            "allow list refused, keeping the previous one: {message}"
                        );
                        refused = Some(message);
                    }
                }
                Err(err) => tracing::error!("allow-list reload task failed: {err}"),
            }
        }
    }
}

fn read(path: &Path) -> Result<AllowList, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    AllowList::parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"
        [[model]]
        name = "ranker"
        features = ["user_age", "locale"]
        outputs = ["score"]
        candidate-ids-input = "item_id"
        top-k = { k = 5, by = "score" }

        [[model]]
        name = "ranker"
        version = "2"
        features = ["user_age"]
        sample-rate = 0.5
    "#;

    #[test]
    fn exact_version_wins_over_the_versionless_entry() {
        let list = AllowList::parse(LIST).unwrap();
        assert_eq!(list.rule("ranker", "2").unwrap().features, ["user_age"]);
        assert_eq!(
            list.rule("ranker", "7").unwrap().features,
            ["user_age", "locale"]
        );
        assert_eq!(list.rule("ranker", "").unwrap().sample_rate, 1.0);
        assert!(list.rule("other", "").is_none(), "deny by default");
        assert!(list.version.starts_with("sha256:"));
    }

    #[test]
    fn invalid_lists_are_refused_with_the_reason() {
        for (text, expect) in [
            ("[[model]]\nname = \"a\"\nsample-rate = 2.0", "sample-rate"),
            ("[[model]]\nname = \"a\"\n[[model]]\nname = \"a\"", "twice"),
            ("[[model]]\nname = \"a\"\nfeaturez = []", "unknown field"),
            (
                "[[model]]\nname = \"a\"\ntop-k = { k = 0, by = \"s\" }",
                "top-k",
            ),
            ("[[model", "expected"),
            (
                "[[model]]\nname = \"a\"\nheaders = [\"X-User-Country\"]",
                "not a header name in lower case",
            ),
        ] {
            let err = AllowList::parse(text).unwrap_err();
            assert!(err.contains(expect), "{text:?}: {err}");
        }
    }

    /// A handle on `LIST` written to a file of its own (the directory lives as long as the
    /// first element).
    fn loaded() -> (tempfile::TempDir, std::path::PathBuf, AllowListHandle) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allow.toml");
        std::fs::write(&path, LIST).unwrap();
        let handle = AllowListHandle::load(&path).unwrap();
        (dir, path, handle)
    }

    #[test]
    fn reload_keeps_the_old_list_when_the_new_file_is_broken() {
        let (_dir, path, handle) = loaded();
        let v1 = handle.current().version.clone();
        assert_eq!(handle.reload(), Ok(false));

        std::fs::write(&path, "[[model]]\nname = \"ranker\"\nfeatures = [\"x\"]").unwrap();
        assert_eq!(
            handle.reload(),
            Ok(false),
            "a change is taken once it reads the same twice"
        );
        assert_eq!(handle.reload(), Ok(true));
        assert_ne!(handle.current().version, v1);
        assert_eq!(handle.current().rule("ranker", "").unwrap().features, ["x"]);

        std::fs::write(&path, "this is not toml [").unwrap();
        assert_eq!(handle.reload(), Ok(false));
        assert!(handle.reload().is_err());
        assert_eq!(handle.current().rule("ranker", "").unwrap().features, ["x"]);
    }

    #[test]
    fn a_file_caught_mid_write_is_never_taken() {
        let (_dir, path, handle) = loaded();
        let v1 = handle.current().version.clone();
        // `fs::write` truncates first: a check between truncate and write reads an empty file,
        // which is a valid list that logs nothing.
        std::fs::write(&path, "").unwrap();
        assert_eq!(handle.reload(), Ok(false));
        let full = "[[model]]\nname = \"ranker\"\nfeatures = [\"y\"]\n";
        std::fs::write(&path, full).unwrap();
        assert_eq!(handle.reload(), Ok(false));
        assert_eq!(
            handle.current().version,
            v1,
            "the empty read was never in force"
        );
        assert_eq!(handle.reload(), Ok(true));
        assert_eq!(handle.current().rule("ranker", "").unwrap().features, ["y"]);
    }
}
