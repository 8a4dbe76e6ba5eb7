//! The S3-compatible test server from `FEATURELOG_S3` (an endpoint URL), which
//! `scripts/test.sh` sets after starting one with `scripts/s3.sh`. Like the Kafka broker: without
//! it a test skips with a message, under `CI=true` it fails.
//!
//! Tests share one bucket and each writes under its own unique prefix, so they run in parallel
//! and can be rerun against the same server.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt as _;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt as _};

/// The environment variable with the endpoint, e.g. `http://127.0.0.1:9000`.
pub const S3_ENV: &str = "FEATURELOG_S3";

/// A handle on the test server.
#[derive(Debug, Clone)]
pub struct TestS3 {
    /// The endpoint URL.
    pub endpoint: String,
    /// The bucket `scripts/s3.sh` created (`FEATURELOG_S3_BUCKET`, default `featurelog-test`).
    pub bucket: String,
    /// Access key (`FEATURELOG_S3_ACCESS_KEY`, default as in `scripts/s3.sh`).
    pub access_key: String,
    /// Secret key (`FEATURELOG_S3_SECRET_KEY`).
    pub secret_key: String,
}

/// The test server, or `None` (after saying so on stderr) when none is configured outside CI.
///
/// # Panics
/// Under `CI=true` when `FEATURELOG_S3` is not set.
pub fn s3(test: &str) -> Option<TestS3> {
    let var = |name: &str, default: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| default.to_owned())
    };
    match std::env::var(S3_ENV) {
        Ok(endpoint) if !endpoint.trim().is_empty() => Some(TestS3 {
            endpoint: endpoint.trim().trim_end_matches('/').to_owned(),
            bucket: var("FEATURELOG_S3_BUCKET", "featurelog-test"),
            access_key: var("FEATURELOG_S3_ACCESS_KEY", "featurelog"),
            secret_key: var("FEATURELOG_S3_SECRET_KEY", "featurelog-secret"),
        }),
        _ if crate::in_ci() => panic!(
            "{test} needs an S3-compatible server but {S3_ENV} is not set; run the tests with scripts/test.sh"
        ),
        _ => {
            eprintln!(
                "SKIPPED {test}: it needs an S3-compatible server. Start one with `scripts/s3.sh start` \
                 and set {S3_ENV}=http://127.0.0.1:9000 (scripts/test.sh does both)."
            );
            None
        }
    }
}

impl TestS3 {
    /// A fresh key prefix for one test: `<name>-<random>`.
    pub fn unique_prefix(&self, name: &str) -> String {
        format!("{name}-{}", uuid::Uuid::new_v4().simple())
    }

    /// `s3://<bucket>/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// The environment a process needs to reach the server as the AWS tools would
    /// (credentials, endpoint, region, plain http).
    pub fn aws_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", self.access_key.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret_key.clone()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// A client of the test bucket.
    ///
    /// # Panics
    /// When the settings are refused.
    pub fn store(&self) -> Arc<dyn ObjectStore> {
        Arc::new(
            AmazonS3Builder::new()
                .with_bucket_name(&self.bucket)
                .with_endpoint(&self.endpoint)
                .with_region("us-east-1")
                .with_allow_http(true)
                .with_access_key_id(&self.access_key)
                .with_secret_access_key(&self.secret_key)
                .build()
                .expect("S3 client for the test server"),
        )
    }

    /// Writes `bytes` at `key` (a test's input).
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub async fn put(&self, key: &str, bytes: Vec<u8>) {
        self.store()
            .put(&ObjectPath::from(key), bytes.into())
            .await
            .unwrap_or_else(|e| panic!("writing {}: {e}", self.url(key)));
    }

    /// Every object under `prefix`, as (key relative to the prefix, content), sorted by key.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub async fn objects(&self, prefix: &str) -> Vec<(String, Bytes)> {
        let store = self.store();
        let base = ObjectPath::from(prefix);
        let metas: Vec<_> = store
            .list(Some(&base))
            .try_collect()
            .await
            .unwrap_or_else(|e| panic!("listing {}: {e}", self.url(prefix)));
        let mut out = Vec::with_capacity(metas.len());
        for meta in metas {
            let relative = meta
                .location
                .prefix_match(&base)
                .map(|parts| {
                    parts
                        .map(|p| p.as_ref().to_owned())
                        .collect::<Vec<_>>()
                        .join("/")
                })
                .unwrap_or_else(|| meta.location.to_string());
            // Listed then deleted (a staged object after its copy): not part of the answer.
            let Ok(got) = store.get(&meta.location).await else {
                continue;
            };
            let bytes = got
                .bytes()
                .await
                .unwrap_or_else(|e| panic!("reading {}: {e}", meta.location));
            out.push((relative, bytes));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}
