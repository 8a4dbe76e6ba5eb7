//! Records as JSON, for a person reading a topic: a FeatureLog's columns with their values, an
//! Impression's fields, a JSON event or dead letter as it is, anything else as its bytes.
//!
//! Values are exact: a float is written as the shortest decimal that reads back to the same
//! float (FP16 and BF16 through the f32 they widen to), integers as integers (`INT64` and
//! `UINT64` too: JSON numbers have no size limit, though some readers' do), NaN and the
//! infinities as the strings `"NaN"`, `"Infinity"` and `"-Infinity"` (as protobuf's JSON
//! mapping writes them), BYTES as text when they are UTF-8, else `{"hex": ...}`.

use std::time::{Duration, SystemTime};

use featurelog_schemas::featurelog::v1::{DataType, EventType, Feature, FeatureLog, Impression};
use featurelog_schemas::schema_registry;
use prost::Message;
use serde_json::{Map, Value, json};

/// How a record's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decode {
    /// JSON if it parses, else a FeatureLog, else an Impression, else raw bytes.
    Auto,
    /// A `featurelog.v1.FeatureLog` (the sidecar's records).
    FeatureLog,
    /// A `featurelog.v1.Impression` (events in protobuf).
    Impression,
    /// JSON (events, the sidecar's dead letters).
    Json,
    /// The bytes, as text when UTF-8.
    Raw,
}

impl std::str::FromStr for Decode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "auto" => Decode::Auto,
            "feature-log" => Decode::FeatureLog,
            "impression" => Decode::Impression,
            "json" => Decode::Json,
            "raw" => Decode::Raw,
            _ => {
                return Err(format!(
                    "{s:?}: expected auto, feature-log, impression, json or raw"
                ));
            }
        })
    }
}

/// A record's value as JSON. A value that is not what `decode` asks for is shown raw, with why.
pub fn value(payload: &[u8], decode: Decode) -> Value {
    match decode {
        Decode::Auto => json_value(payload)
            .or_else(|| {
                FeatureLog::decode(payload)
                    .ok()
                    .filter(|l| !l.request_id.is_empty() && l.served_at.is_some())
                    .map(|l| feature_log(&l))
            })
            .or_else(|| {
                Impression::decode(payload)
                    .ok()
                    .filter(|i| !i.request_id.is_empty() && i.event_time.is_some())
                    .map(|i| impression(&i))
            })
            .unwrap_or_else(|| raw(payload, None)),
        Decode::FeatureLog => match FeatureLog::decode(payload) {
            Ok(l) => feature_log(&l),
            Err(e) => raw(payload, Some(format!("not a FeatureLog: {e}"))),
        },
        Decode::Impression => match Impression::decode(payload) {
            Ok(i) => impression(&i),
            Err(e) => raw(payload, Some(format!("not an Impression: {e}"))),
        },
        Decode::Json => {
            json_value(payload).unwrap_or_else(|| raw(payload, Some("not JSON".to_owned())))
        }
        Decode::Raw => raw(payload, None),
    }
}

/// A record's value, with the schema id of its Confluent Schema Registry header when it has one
/// (the Registry's serializers put a 0 byte and a 4-byte schema id in front of a JSON record,
/// and the message's indexes too in front of a protobuf one; the joiner reads both).
pub fn read(payload: &[u8], decode: Decode) -> (Option<u32>, Value) {
    if let Ok(Some((id, rest))) = schema_registry::header(payload) {
        if matches!(decode, Decode::Auto | Decode::Json)
            && let Some(v) = json_value(rest)
        {
            return (Some(id), v);
        }
        if !matches!(decode, Decode::Json | Decode::Raw)
            && let Ok(message) = schema_registry::skip_message_indexes(rest)
        {
            let v = value(message, decode);
            if v["kind"] != "raw" {
                return (Some(id), v);
            }
        }
    }
    (None, value(payload, decode))
}

fn json_value(payload: &[u8]) -> Option<Value> {
    serde_json::from_slice(payload).ok()
}

/// Bytes as text when they are UTF-8, else as `{"hex": ...}`.
pub fn bytes(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => json!({ "hex": hex::encode(b) }),
    }
}

fn raw(payload: &[u8], why: Option<String>) -> Value {
    let mut out = Map::new();
    out.insert("kind".into(), "raw".into());
    out.insert("size".into(), payload.len().into());
    out.insert("bytes".into(), bytes(payload));
    if let Some(why) = why {
        out.insert("error".into(), why.into());
    }
    Value::Object(out)
}

/// A protobuf timestamp as RFC 3339 (UTC, microseconds), or its numbers if it is not a time.
fn timestamp(t: Option<&prost_types::Timestamp>) -> Value {
    let Some(t) = t else {
        return Value::Null;
    };
    match (u64::try_from(t.seconds), u32::try_from(t.nanos)) {
        (Ok(s), Ok(n)) if n < 1_000_000_000 => {
            let at = SystemTime::UNIX_EPOCH + Duration::new(s, n);
            humantime::format_rfc3339_micros(at).to_string().into()
        }
        _ => json!({ "seconds": t.seconds, "nanos": t.nanos }),
    }
}

/// A FeatureLog: its fields, and each column with its values row by row.
pub fn feature_log(log: &FeatureLog) -> Value {
    json!({
        "kind": "feature_log",
        "request_id": log.request_id,
        "model_name": log.model_name,
        "model_version": log.model_version,
        "served_at": timestamp(log.served_at.as_ref()),
        "sidecar_instance": log.sidecar_instance,
        "allow_list_version": log.allow_list_version,
        "row_count": log.row_count,
        // Each under the record's own field name: a reader of the dataset, or a consumer of
        // the topic, finds integer ids in `candidate_int_ids`, never in `candidate_ids`.
        "candidate_ids": log.candidate_ids,
        "candidate_int_ids": log.candidate_int_ids,
        "parameters": log.parameters,
        "features": log.features.iter().map(column).collect::<Vec<_>>(),
        "outputs": log.outputs.iter().map(column).collect::<Vec<_>>(),
    })
}

/// One column: its datatype and shape, and its values, one element per row for scalars and
/// one array per row for vectors and matrices (flattened, row-major).
fn column(f: &Feature) -> Value {
    let datatype = DataType::try_from(f.datatype).unwrap_or(DataType::Unspecified);
    let name = datatype
        .as_str_name()
        .strip_prefix("DATA_TYPE_")
        .unwrap_or("UNSPECIFIED");
    let mut out = json!({
        "name": f.name,
        "datatype": name,
        "row_shape": f.row_shape,
        "per_request": f.per_request,
    });
    let values = match elements(datatype, f.values.clone().unwrap_or_default()) {
        Some(values) => values,
        None => {
            out["error"] = format!("datatype {} is not one this reader knows", f.datatype).into();
            return out;
        }
    };
    let width = f
        .row_shape
        .iter()
        .try_fold(1usize, |w, &d| w.checked_mul(usize::try_from(d).ok()?));
    out["values"] = match width {
        Some(width) if !f.row_shape.is_empty() && width > 0 && values.len() % width == 0 => values
            .chunks(width)
            .map(|row| Value::Array(row.to_vec()))
            .collect(),
        _ => Value::Array(values),
    };
    out
}

/// The elements of `datatype`'s field, as JSON.
fn elements(
    datatype: DataType,
    v: featurelog_schemas::featurelog::v1::Values,
) -> Option<Vec<Value>> {
    Some(match datatype {
        DataType::Bool => v.bool_values.into_iter().map(Value::from).collect(),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => {
            v.int32_values.into_iter().map(Value::from).collect()
        }
        DataType::Int64 => v.int64_values.into_iter().map(Value::from).collect(),
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => {
            v.uint32_values.into_iter().map(Value::from).collect()
        }
        DataType::Uint64 => v.uint64_values.into_iter().map(Value::from).collect(),
        DataType::Fp32 => v.fp32_values.into_iter().map(float32).collect(),
        DataType::Fp64 => v.fp64_values.into_iter().map(float64).collect(),
        // The 16-bit pattern is in the low half; the f32 it widens to is exact.
        DataType::Fp16 => v
            .half_bits
            .into_iter()
            .map(|b| float32(half::f16::from_bits(b as u16).to_f32()))
            .collect(),
        DataType::Bf16 => v
            .half_bits
            .into_iter()
            .map(|b| float32(half::bf16::from_bits(b as u16).to_f32()))
            .collect(),
        DataType::Bytes => v.bytes_values.iter().map(|b| bytes(b)).collect(),
        DataType::Unspecified => return None,
    })
}

fn non_finite(x: f64) -> Value {
    if x.is_nan() {
        "NaN".into()
    } else if x > 0.0 {
        "Infinity".into()
    } else {
        "-Infinity".into()
    }
}

/// The shortest decimal that reads back as `x` (an f32), rather than the f64 it widens to
/// (`0.1`, not `0.10000000149011612`).
fn float32(x: f32) -> Value {
    if !x.is_finite() {
        return non_finite(f64::from(x));
    }
    // Rust's `Display` of an f32 is the shortest decimal that parses back to it.
    let shortest: f64 = x.to_string().parse().unwrap_or(f64::from(x));
    serde_json::Number::from_f64(shortest).map_or(Value::Null, Value::Number)
}

fn float64(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or_else(|| non_finite(x), Value::Number)
}

/// An Impression (or click, or conversion) event.
pub fn impression(i: &Impression) -> Value {
    let event_type = EventType::try_from(i.event_type)
        .map(|t| {
            t.as_str_name()
                .strip_prefix("EVENT_TYPE_")
                .unwrap_or("UNSPECIFIED")
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|_| i.event_type.to_string());
    json!({
        "kind": "impression",
        "request_id": i.request_id,
        "item_id": i.item_id,
        "event_time": timestamp(i.event_time.as_ref()),
        "event_type": event_type,
        "event_name": i.event_name,
        "labels": i.labels,
        "event_id": i.event_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use featurelog_schemas::featurelog::v1::Values;

    #[test]
    fn floats_read_back_bit_exact_from_their_shortest_decimal() {
        // Every f32 written and read back as a JSON reader would (an f64, then the f32).
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut checked = 0;
        for _ in 0..200_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let x = f32::from_bits(rng as u32);
            if !x.is_finite() {
                continue;
            }
            let text = serde_json::to_string(&float32(x)).unwrap();
            let back: f64 = serde_json::from_str(&text).unwrap();
            assert_eq!(
                (back as f32).to_bits(),
                x.to_bits(),
                "{x:e} written as {text}"
            );
            checked += 1;
        }
        assert!(checked > 190_000);
        assert_eq!(serde_json::to_string(&float32(0.1)).unwrap(), "0.1");
        assert_eq!(float32(f32::NAN), "NaN");
        assert_eq!(float32(f32::NEG_INFINITY), "-Infinity");
        assert_eq!(float64(f64::INFINITY), "Infinity");
    }

    #[test]
    fn a_feature_log_shows_every_column_with_its_rows() {
        let log = FeatureLog {
            request_id: "req-1".into(),
            model_name: "ranker".into(),
            served_at: Some(prost_types::Timestamp {
                seconds: 1_764_590_400,
                nanos: 123_456_000,
            }),
            row_count: 2,
            candidate_int_ids: vec![7001, -7],
            features: vec![
                Feature::column(
                    "price",
                    DataType::Fp32,
                    vec![],
                    Values {
                        fp32_values: vec![9.99, -0.0],
                        ..Values::default()
                    },
                ),
                Feature::column(
                    "emb",
                    DataType::Fp16,
                    vec![2],
                    Values {
                        half_bits: vec![0x3c00, 0xc000, 0x7e00, 0x0001],
                        ..Values::default()
                    },
                ),
                Feature::column(
                    "locale",
                    DataType::Bytes,
                    vec![],
                    Values {
                        bytes_values: vec![b"en-US".to_vec().into(), vec![0xff, 0x00].into()],
                        ..Values::default()
                    },
                ),
                Feature::column(
                    "big",
                    DataType::Uint64,
                    vec![],
                    Values {
                        uint64_values: vec![u64::MAX, 0],
                        ..Values::default()
                    },
                ),
            ],
            ..FeatureLog::default()
        };
        let shown = feature_log(&log);
        assert_eq!(shown["served_at"], "2025-12-01T12:00:00.123456Z");
        assert_eq!(shown["candidate_int_ids"], json!([7001, -7]));
        assert_eq!(shown["candidate_ids"], json!([]));
        let columns = shown["features"].as_array().unwrap();
        assert_eq!(columns[0]["datatype"], "FP32");
        assert_eq!(
            serde_json::to_string(&columns[0]["values"]).unwrap(),
            "[9.99,-0.0]"
        );
        assert_eq!(columns[1]["datatype"], "FP16");
        // The smallest subnormal FP16, 2^-24, as the shortest decimal of its f32.
        let tiny: f64 = "5.9604645e-8".parse().unwrap();
        assert_eq!(
            columns[1]["values"],
            json!([[1.0, -2.0], ["NaN", tiny]]),
            "one array per row of a vector"
        );
        assert_eq!(columns[2]["values"], json!(["en-US", {"hex": "ff00"}]));
        assert_eq!(
            serde_json::to_string(&columns[3]["values"]).unwrap(),
            "[18446744073709551615,0]"
        );
        // The same bytes read as auto, since a FeatureLog is not JSON.
        assert_eq!(value(&log.encode_to_vec(), Decode::Auto), shown);
    }

    #[test]
    fn auto_tells_the_topics_records_apart() {
        let event = Impression {
            request_id: "req-1".into(),
            item_id: "7001".into(),
            event_time: Some(prost_types::Timestamp {
                seconds: 1_764_590_400,
                nanos: 0,
            }),
            event_type: EventType::Click as i32,
            ..Impression::default()
        };
        let shown = value(&event.encode_to_vec(), Decode::Auto);
        assert_eq!(shown["kind"], "impression");
        assert_eq!(shown["event_type"], "click");
        let letter = br#"{"reason":"shape_mismatch","model":"ranker"}"#;
        assert_eq!(value(letter, Decode::Auto)["reason"], "shape_mismatch");
        let garbage = [0xff, 0xfe, 0x00];
        assert_eq!(
            value(&garbage, Decode::Auto),
            json!({"kind": "raw", "size": 3, "bytes": {"hex": "fffe00"}})
        );
        // Behind a Schema Registry header, JSON and protobuf alike.
        let mut framed = vec![0, 0, 0, 0, 42];
        framed.extend_from_slice(letter);
        assert_eq!(read(&framed, Decode::Auto).0, Some(42));
        assert_eq!(read(&framed, Decode::Auto).1["reason"], "shape_mismatch");
        let mut framed = vec![0, 0, 0, 1, 7, 0];
        framed.extend(event.encode_to_vec());
        let (id, shown) = read(&framed, Decode::Auto);
        assert_eq!((id, &shown["kind"]), (Some(263), &json!("impression")));
        assert_eq!(
            read(letter, Decode::Auto),
            (None, value(letter, Decode::Auto))
        );
        let forced = value(letter, Decode::FeatureLog);
        assert_eq!(forced["kind"], "raw");
        assert!(
            forced["error"]
                .as_str()
                .unwrap()
                .starts_with("not a FeatureLog")
        );
    }
}
