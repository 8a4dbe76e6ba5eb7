//! REST bodies: the protocol's JSON and the binary tensor data extension. What a parse of a
//! whole one reads is in `rest_reference`; the properties of its readers in `rest_json`.

use bytes::Bytes;
use proptest::prelude::*;

use super::requests::PARAMETER_KEYS;

pub(super) type Json = serde_json::Value;
pub(super) type Members = serde_json::Map<String, Json>;

pub(super) const REST_NAMES: &[&str] = &["a", "ids", "b", "x]y{", "q\"uo\\te", "data", "é"];
pub(super) const DATATYPES: &[&str] = &[
    "BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP16",
    "BF16", "FP32", "FP64", "BYTES", "COMPLEX",
];

/// A JSON value of any kind, with the characters the outline steps over in its strings.
fn json_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::from),
        any::<u64>().prop_map(Json::from),
        (-1e9f64..1e9).prop_map(Json::from),
        prop::sample::select(vec!["", "a]b[", "q\"", "\\", "}{", "data", "é\u{1F600}"])
            .prop_map(Json::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::vec((prop::sample::select(vec!["data", "k", "id"]), inner), 0..3)
                .prop_map(|m| Json::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
        ]
    })
}

/// Elements a datatype's JSON `data` may hold, mostly of that type (sometimes out of range).
fn element(datatype: &'static str) -> BoxedStrategy<Json> {
    let ints = |lo: i64, hi: i64| {
        prop_oneof![4 => (lo..=hi).prop_map(Json::from), 1 => any::<i64>().prop_map(Json::from)]
            .boxed()
    };
    match datatype {
        "BOOL" => any::<bool>().prop_map(Json::Bool).boxed(),
        "INT8" => ints(-128, 127),
        "INT16" => ints(-32768, 32767),
        "INT32" => ints(i64::from(i32::MIN), i64::from(i32::MAX)),
        "INT64" => any::<i64>().prop_map(Json::from).boxed(),
        "UINT8" => ints(0, 255),
        "UINT16" => ints(0, 65535),
        "UINT32" => ints(0, i64::from(u32::MAX)),
        "UINT64" => any::<u64>().prop_map(Json::from).boxed(),
        "BYTES" => prop_oneof![
            "\\PC{0,5}".prop_map(Json::from),
            prop::sample::select(vec!["a]b[", "q\"uo\\te\"", "}{"]).prop_map(Json::from),
        ]
        .boxed(),
        _ => prop_oneof![
            any::<i64>().prop_map(Json::from),
            any::<u64>().prop_map(Json::from),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(Json::from),
            (-10f64..10.0).prop_map(Json::from),
        ]
        .boxed(),
    }
}

/// A tensor's JSON data: a flat list, rows of it, or one scalar; or anything at all.
fn tensor_data(datatype: &'static str) -> impl Strategy<Value = Json> {
    prop_oneof![
        4 => (prop::collection::vec(element(datatype), 0..6), 0usize..3).prop_map(|(flat, rows)| {
            if rows == 0 || flat.is_empty() {
                Json::Array(flat)
            } else {
                Json::Array(flat.chunks(rows).map(|r| Json::Array(r.to_vec())).collect())
            }
        }),
        1 => element(datatype),
        1 => json_value(),
    ]
}

/// One tensor of a REST body: its members (in an order of their own), and its binary data.
#[derive(Debug, Clone)]
struct RestTensor {
    members: Vec<(String, Json)>,
    binary: Vec<u8>,
}

fn rest_tensor() -> impl Strategy<Value = RestTensor> {
    (
        prop::sample::select(REST_NAMES.to_vec()),
        prop::sample::select(DATATYPES.to_vec()),
        prop_oneof![
            5 => prop::collection::vec(0i64..4, 0..3).prop_map(Json::from),
            1 => json_value(),
        ],
        0u8..8,
        prop::option::of(prop::collection::vec(
            (
                prop::sample::select(vec!["data", "k", "shape", "binary_data"]),
                json_value(),
            ),
            0..3,
        )),
        prop::collection::vec(any::<u8>(), 0..12),
        any::<u64>(),
    )
        .prop_flat_map(|(name, datatype, shape, how, parameters, binary, seed)| {
            tensor_data(datatype).prop_map(move |data| {
                let mut rng = fastrand::Rng::with_seed(seed);
                let mut parameters: Option<Members> = parameters
                    .clone()
                    .map(|p| p.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
                let mut binary_size = |value: Json| {
                    parameters
                        .get_or_insert_with(Members::new)
                        .insert("binary_data_size".into(), value);
                };
                let (data, binary) = match how {
                    // JSON data (the common case), binary data (tritonclient's default).
                    0..=3 => (Some(data), Vec::new()),
                    4 | 5 => {
                        binary_size(Json::from(binary.len()));
                        (None, binary.clone())
                    }
                    // Both, neither, or a size that is no size.
                    6 => {
                        binary_size(Json::from(binary.len()));
                        (Some(data), binary.clone())
                    }
                    _ => match rng.u8(..4) {
                        0 => (None, Vec::new()),
                        1 => {
                            binary_size(Json::from(-1));
                            (None, Vec::new())
                        }
                        2 => {
                            binary_size(Json::from(binary.len() as f64 + 0.5));
                            (None, binary.clone())
                        }
                        _ => {
                            binary_size(Json::Null);
                            (Some(data), Vec::new())
                        }
                    },
                };
                let mut members = vec![
                    ("name".to_owned(), Json::from(name)),
                    ("shape".to_owned(), shape.clone()),
                    ("datatype".to_owned(), Json::from(datatype)),
                ];
                if let Some(p) = parameters {
                    members.push(("parameters".into(), Json::Object(p)));
                } else if rng.u8(..4) == 0 {
                    members.push(("parameters".into(), Json::Null));
                }
                if let Some(d) = data {
                    members.push(("data".into(), d));
                }
                rng.shuffle(&mut members);
                RestTensor { members, binary }
            })
        })
}

/// A request body: members in any order, keys escaped or not, spaced or not, with the binary
/// part after the JSON when some tensor has binary data (or when `extension`).
#[derive(Debug, Clone)]
pub(super) struct RestBody {
    pub(super) json: Vec<u8>,
    pub(super) binary: Vec<u8>,
    extension: bool,
}

impl RestBody {
    pub(super) fn bytes(&self) -> Bytes {
        Bytes::from([&self.json[..], &self.binary].concat())
    }

    pub(super) fn header_length(&self) -> Option<usize> {
        self.extension.then_some(self.json.len())
    }
}

/// An object's JSON text from members in order (repeated names kept), keys escaped (a letter
/// as `\u00XX`, as serde reads it the same) where `escape`.
fn object_text(members: &[(String, String)], escape: bool, spaced: bool) -> String {
    let key = |k: &str| {
        let plain = serde_json::to_string(k).unwrap_or_default();
        match k.char_indices().find(|(_, c)| c.is_ascii_lowercase()) {
            Some((at, c)) if escape => {
                format!(
                    "\"{}\\u{:04x}{}\"",
                    &plain[1..at + 1],
                    c as u32,
                    &plain[at + 2..]
                )
            }
            _ => plain,
        }
    };
    let (colon, comma) = if spaced { (" : ", ",\n  ") } else { (":", ",") };
    let body: Vec<String> = members
        .iter()
        .map(|(k, v)| format!("{}{colon}{v}", key(k)))
        .collect();
    format!("{{{}}}", body.join(comma))
}

fn value_text(v: &Json, spaced: bool) -> String {
    if spaced {
        serde_json::to_string_pretty(v)
    } else {
        serde_json::to_string(v)
    }
    .unwrap_or_default()
}

/// A body; with `decoys`, a requested output may have a `data` member (which is no member of
/// it), and a request parameter or an unknown top-level member may hold objects with one: the
/// outline steps over every `data` value at that depth unparsed, as an unread tensor's.
pub(super) fn rest_body(decoys: bool) -> impl Strategy<Value = RestBody> {
    (
        prop_oneof![
            3 => "[a-z0-9\\-\\[\\]\"\\\\{}]{0,6}".prop_map(|s| Some(Json::from(s))),
            1 => Just(None),
            1 => Just(Some(Json::Null)),
            1 => any::<i64>().prop_map(|n| Some(Json::from(n))),
        ],
        prop::option::of(prop::collection::vec(
            (prop::sample::select(PARAMETER_KEYS.to_vec()), json_value()),
            0..3,
        )),
        prop::collection::vec(rest_tensor(), 0..5),
        prop::option::of(prop::collection::vec(
            (
                prop::sample::select(REST_NAMES.to_vec()),
                prop::option::of(json_value()),
            ),
            0..2,
        )),
        prop::option::of(json_value()),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<u64>()),
    )
        .prop_map(
            move |(id, parameters, tensors, outputs, decoy, (escape, spaced, extension, seed))| {
                let mut rng = fastrand::Rng::with_seed(seed);
                let text = |v: &Json| value_text(v, spaced);
                let mut members: Vec<(String, String)> = Vec::new();
                if let Some(id) = id {
                    members.push(("id".into(), text(&id)));
                }
                if let Some(p) = parameters {
                    // Without decoys, scalars only: an object value's `data` member is stepped
                    // over unparsed too (depth 3, as a tensor's), and dropped (no scalar).
                    let scalar = |v: Json| match v {
                        Json::Array(_) | Json::Object(_) if !decoys => Json::Null,
                        v => v,
                    };
                    let p: Members = p
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), scalar(v)))
                        .collect();
                    members.push(("parameters".into(), text(&Json::Object(p))));
                }
                let mut binary = Vec::new();
                let inputs: Vec<String> = tensors
                    .iter()
                    .map(|t| {
                        binary.extend_from_slice(&t.binary);
                        let m: Vec<(String, String)> = t
                            .members
                            .iter()
                            .map(|(k, v)| (k.clone(), text(v)))
                            .collect();
                        object_text(&m, escape && rng.bool(), spaced)
                    })
                    .collect();
                members.push(("inputs".into(), format!("[{}]", inputs.join(","))));
                if let Some(outputs) = outputs {
                    let outputs: Vec<String> = outputs
                        .iter()
                        .map(|(name, decoy)| {
                            let mut m = vec![("name".to_owned(), text(&Json::from(*name)))];
                            if let Some(d) = decoy.as_ref().filter(|_| decoys) {
                                m.push(("data".into(), text(d)));
                            }
                            object_text(&m, false, spaced)
                        })
                        .collect();
                    members.push(("outputs".into(), format!("[{}]", outputs.join(","))));
                }
                if let Some(d) = decoy {
                    let d = match d {
                        // Objects in it would have their `data` stepped over as tensors' are.
                        Json::Array(_) | Json::Object(_) if !decoys => Json::Null,
                        d => d,
                    };
                    members.push(("data".into(), text(&d)));
                }
                rng.shuffle(&mut members);
                let json = object_text(&members, escape, spaced).into_bytes();
                RestBody {
                    json,
                    extension: extension || !binary.is_empty(),
                    binary,
                }
            },
        )
}
