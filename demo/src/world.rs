//! The demo's synthetic world: users, items and the features a recommender scores them on.
//!
//! Every value is a pure function of the seed and the ids, so the same world can be computed
//! twice: once the way the serving path computes it (sent to the model, so logged by the
//! sidecar), and once the way a careless offline pipeline recomputes it for training, with the
//! bugs that cause training/serving skew in practice.

use bytes::Bytes;
use featurelog_schemas::inference::ModelInferRequest;
use featurelog_schemas::inference::model_infer_request::InferInputTensor;
use featurelog_schemas::tensor::TensorValues;

/// The model the demo's traffic calls.
pub const MODEL: &str = "ranker";

/// Features the allow list logs (the request also carries others, which it does not).
pub const LOGGED_FEATURES: &[&str] = &[
    "user_locale",
    "user_device",
    "user_age",
    "item_category",
    "item_price",
    "item_popularity",
    "item_embedding",
];

const LOCALES: &[&str] = &["en-US", "de-DE", "jp-JA", "pt-BR", "fr-FR", "en-GB"];
const DEVICES: &[&str] = &[
    "ios-phone",
    "android-phone",
    "android-tablet",
    "web-desktop",
];
const CATEGORIES: &[&str] = &[
    "books", "garden", "sports", "music", "toys", "kitchen", "travel", "games",
];
const EMBEDDING_DIM: usize = 8;
const USERS: u64 = 500;
const ITEMS: u64 = 20_000;

/// SplitMix64: a small, well-mixed hash, so that the world needs no random-number crate.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A uniform draw in [0, 1) from a hash.
pub fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// One scored request: who asked and which items were scored.
#[derive(Debug, Clone)]
pub struct Request {
    /// The request id, also used by the app's impression events.
    pub id: String,
    /// The user.
    pub user: u64,
    /// The candidates, in the order the model scored them.
    pub items: Vec<i64>,
}

/// The world of one demo run.
#[derive(Debug, Clone, Copy)]
pub struct World {
    /// Everything derives from it.
    pub seed: u64,
    /// Candidates per request.
    pub candidates: usize,
}

impl World {
    /// Request number `n` of run `run`.
    pub fn request(&self, run: &str, n: u64) -> Request {
        let h = mix(self.seed ^ mix(n));
        let user = h % USERS;
        // Distinct items: a stride walk that never wraps onto itself within a request.
        let base = mix(h ^ 1) % ITEMS;
        let step = 1 + mix(h ^ 2) % (ITEMS / self.candidates.max(1) as u64).max(1);
        let items = (0..self.candidates as u64)
            .map(|slot| ((base + slot * step) % (ITEMS * 10)) as i64 + 100_000)
            .collect();
        Request {
            id: format!("{run}-{n:06}"),
            user,
            items,
        }
    }

    /// Whether the app showed `item` of `request`, and whether the user clicked it.
    pub fn outcome(
        &self,
        request: &Request,
        slot: usize,
        impression_rate: f64,
        click_rate: f64,
    ) -> (bool, bool) {
        let h = mix(self.seed
            ^ mix(request.user)
            ^ mix(slot as u64 + 7)
            ^ mix(request.items[slot] as u64));
        let shown = unit(h) < impression_rate;
        let clicked = shown && unit(mix(h)) < click_rate;
        (shown, clicked)
    }

    /// The user's locale as the serving path knows it.
    pub fn locale(&self, user: u64) -> &'static str {
        LOCALES[(mix(self.seed ^ user) % LOCALES.len() as u64) as usize]
    }

    /// The user's device as the serving path knows it.
    pub fn device(&self, user: u64) -> &'static str {
        DEVICES[(mix(self.seed ^ user ^ 0xd) % DEVICES.len() as u64) as usize]
    }

    /// The user's age.
    pub fn age(&self, user: u64) -> i64 {
        18 + (mix(self.seed ^ user ^ 0xa) % 60) as i64
    }

    /// The item's category.
    pub fn category(&self, item: i64) -> &'static str {
        CATEGORIES[(mix(self.seed ^ item as u64) % CATEGORIES.len() as u64) as usize]
    }

    /// The item's price in the catalog, in the catalog's own precision (f64).
    pub fn price(&self, item: i64) -> f64 {
        (mix(self.seed ^ item as u64 ^ 0x9) % 20_000) as f64 / 100.0 + 0.99
    }

    /// The item's popularity today (what serving reads from the online store).
    pub fn popularity(&self, item: i64) -> f32 {
        (mix(self.seed ^ item as u64 ^ 0x7) % 1000) as f32 / 1000.0
    }

    /// The item's embedding.
    pub fn embedding(&self, item: i64) -> [f32; EMBEDDING_DIM] {
        let mut e = [0f32; EMBEDDING_DIM];
        for (k, v) in e.iter_mut().enumerate() {
            *v = (unit(mix(self.seed ^ item as u64 ^ (k as u64) << 32)) * 2.0 - 1.0) as f32;
        }
        e
    }

    /// The ModelInferRequest the app sends, with raw tensors as Triton's clients send them.
    /// Besides the logged features it carries two the allow list leaves out.
    pub fn infer_request(&self, request: &Request) -> ModelInferRequest {
        let n = request.items.len() as i64;
        let items = &request.items;
        let mut out = ModelInferRequest {
            model_name: MODEL.into(),
            id: request.id.clone(),
            ..Default::default()
        };
        let mut add = |name: &str, datatype: &str, shape: Vec<i64>, values: TensorValues| {
            out.inputs.push(InferInputTensor {
                name: name.into(),
                datatype: datatype.into(),
                shape,
                ..Default::default()
            });
            out.raw_input_contents.push(values.to_raw());
        };
        add(
            "item_id",
            "INT64",
            vec![n],
            TensorValues::Int64(items.clone()),
        );
        let user = request.user;
        let text = |s: &str| TensorValues::Bytes(vec![Bytes::from(s.to_owned())]);
        add("user_locale", "BYTES", vec![1], text(self.locale(user)));
        add("user_device", "BYTES", vec![1], text(self.device(user)));
        add(
            "user_age",
            "INT64",
            vec![1],
            TensorValues::Int64(vec![self.age(user)]),
        );
        add(
            "item_category",
            "BYTES",
            vec![n],
            TensorValues::Bytes(
                items
                    .iter()
                    .map(|&i| Bytes::from_static(self.category(i).as_bytes()))
                    .collect(),
            ),
        );
        add(
            "item_price",
            "FP32",
            vec![n],
            TensorValues::Fp32(items.iter().map(|&i| self.price(i) as f32).collect()),
        );
        add(
            "item_popularity",
            "FP32",
            vec![n],
            TensorValues::Fp32(items.iter().map(|&i| self.popularity(i)).collect()),
        );
        add(
            "item_embedding",
            "FP32",
            vec![n, EMBEDDING_DIM as i64],
            TensorValues::Fp32(items.iter().flat_map(|&i| self.embedding(i)).collect()),
        );
        // Not allow-listed: the ranker's other inputs (a user-item cross-feature block) and an
        // experiment bucket.
        add(
            "cross_features",
            "FP32",
            vec![n, 48],
            TensorValues::Fp32(
                (0..n * 48)
                    .map(|k| unit(mix(self.seed ^ user ^ k as u64)) as f32)
                    .collect(),
            ),
        );
        add(
            "ab_bucket",
            "INT64",
            vec![1],
            TensorValues::Int64(vec![(user % 4) as i64]),
        );
        out
    }
}

/// The careless offline pipeline: the same features, recomputed for training from the
/// warehouse, with three classic bugs.
pub mod offline {
    use super::World;

    /// The warehouse keeps the language only: `en-US` becomes `en`.
    pub fn locale(world: &World, user: u64) -> String {
        let served = world.locale(user);
        served.split('-').next().unwrap_or(served).to_owned()
    }

    /// The warehouse's device enum uses underscores: `ios-phone` becomes `ios_phone`.
    pub fn device(world: &World, user: u64) -> String {
        world.device(user).replace('-', "_")
    }

    /// Popularity from yesterday's snapshot: the join picked a stale partition.
    pub fn popularity(world: &World, item: i64) -> f32 {
        let today = world.popularity(item);
        let drift = (super::unit(super::mix(world.seed ^ item as u64 ^ 0x51)) - 0.5) as f32 * 0.2;
        (today + drift).clamp(0.0, 1.0)
    }
}
