//! JSON events.

use proptest::prelude::*;

use super::generators::{mutate, mutation};
use super::{config, same_event};
use crate::event::{JsonFields, TimeUnit, from_json};

/// Top-level keys and configured names drawn from a few that overlap: dotted names that are
/// also keys, keys that are prefixes of configured paths, array positions.
const KEYS: &[&str] = &["a", "a.b", "b", "rid", "x", "t", "ty", "a.b.c", "x.1"];
const NAMES: &[&str] = &[
    "a", "a.b", "a.b.c", "b", "rid", "x.1", "x.0", "t", "ty", "b.c",
];

fn json_scalar() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{Value, json};
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(vec![
            "r1",
            "i-7",
            "",
            "click",
            "IMPRESSION",
            "view",
            "1764439200123",
            "2025-11-29T18:00:00.25+01:00",
            "1764439200.5",
            "x\"y\\z",
            "é"
        ])
        .prop_map(|s| json!(s)),
        prop_oneof![
            Just(1_764_439_200_123i64),
            Just(1_764_439_200i64),
            any::<i64>(),
            -3i64..3,
        ]
        .prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just(1.764_439_200_123_5e12),
            Just(2.5),
            any::<f64>().prop_filter("finite", |f| f.is_finite())
        ]
        .prop_map(|f| json!(f)),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    json_scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::vec((prop::sample::select(KEYS.to_vec()), inner), 0..4).prop_map(
                |members| serde_json::Value::Object(
                    members
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect()
                )
            ),
        ]
    })
}

/// A key as JSON text: plain, or with a letter escaped (`\u0061`), as serde reads it the same.
fn key_text(key: &str, escape: bool) -> String {
    if escape && key.starts_with('a') {
        format!("\"\\u0061{}\"", &key[1..])
    } else {
        serde_json::to_string(key).unwrap_or_default()
    }
}

/// An event's JSON text with `members` in order (repeated keys kept, which a `Value` cannot
/// hold), spaced or not.
fn event_text(members: &[(String, serde_json::Value, bool)], spaced: bool) -> Vec<u8> {
    let sep = if spaced { " , " } else { "," };
    let body: Vec<String> = members
        .iter()
        .map(|(k, v, escape)| {
            let value = if spaced {
                serde_json::to_string_pretty(v)
            } else {
                serde_json::to_string(v)
            }
            .unwrap_or_default();
            format!(
                "{}{}{}",
                key_text(k, *escape),
                if spaced { " : " } else { ":" },
                value
            )
        })
        .collect();
    format!("{{{}}}", body.join(sep)).into_bytes()
}

fn json_fields() -> impl Strategy<Value = JsonFields> {
    let name = || prop::sample::select(NAMES.to_vec()).prop_map(str::to_owned);
    (
        prop_oneof![Just("rid".to_owned()), name()],
        prop_oneof![Just("a.b".to_owned()), name()],
        prop_oneof![Just("t".to_owned()), name()],
        prop_oneof![Just("ty".to_owned()), name()],
        prop::collection::vec(name(), 0..3),
        prop::option::of(name()),
        prop::sample::select(vec![
            TimeUnit::Seconds,
            TimeUnit::Milliseconds,
            TimeUnit::Microseconds,
            TimeUnit::Nanoseconds,
        ]),
    )
        .prop_map(
            |(request_id, item_id, event_time, event_type, labels, event_id, unit)| JsonFields {
                request_id,
                item_id,
                event_time,
                event_time_unit: unit,
                event_type,
                labels,
                event_id,
                ..JsonFields::default()
            },
        )
}

/// An event: mostly the configured fields with plausible values, and other members, in any
/// order, some keys repeated.
fn json_event() -> impl Strategy<Value = Vec<(String, serde_json::Value, bool)>> {
    use serde_json::json;
    let plausible = prop_oneof![
        Just(("rid".to_owned(), json!("r1"))),
        Just(("t".to_owned(), json!(1_764_439_200_123i64))),
        Just(("t".to_owned(), json!("2025-11-29T18:00:00Z"))),
        Just(("ty".to_owned(), json!("click"))),
        Just(("ty".to_owned(), json!("impression"))),
        Just(("a".to_owned(), json!({"b": "item-1", "b.c": 5}))),
        Just(("a.b".to_owned(), json!(42))),
        Just(("x".to_owned(), json!([1.5, true, null]))),
    ];
    let other = (
        prop::sample::select(KEYS.to_vec()).prop_map(str::to_owned),
        json_value(),
    );
    prop::collection::vec(
        (prop_oneof![3 => plausible, 2 => other], any::<bool>())
            .prop_map(|((k, v), escape)| (k, v, escape)),
        0..9,
    )
}

/// The value a configured `name` names in a parsed event, as documented on `JsonFields`: a
/// top-level key that is the name itself, else the longest top-level key that is a dotted
/// prefix of it, followed into its value by the rest of the path (object keys, or array
/// positions). A repeated key is its last occurrence, as in any parse into a map.
fn reference_pick<'v>(
    event: &'v serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Option<&'v serde_json::Value> {
    let (key, rest) = event
        .keys()
        .filter_map(|k| {
            if k == name {
                Some((k, ""))
            } else {
                name.strip_prefix(k.as_str())
                    .and_then(|r| r.strip_prefix('.'))
                    .map(|r| (k, r))
            }
        })
        .max_by_key(|(k, _)| k.len())?;
    let mut value = &event[key];
    if rest.is_empty() {
        return Some(value);
    }
    for segment in rest.split('.') {
        value = match value {
            serde_json::Value::Object(m) => m.get(segment)?,
            serde_json::Value::Array(a) => a.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

/// `payload` with what serde_json checks only in the values it builds made valid: bytes that are
/// not UTF-8 read as U+FFFD, numbers past an f64's range as 0; `None` when nothing needed to be.
/// serde_json skips the members `from_json` does not read without those checks, so the joiner
/// reads an event whose other members hold them; where they are in a member it reads, it
/// refuses the event as JSON, as the parse of the whole text does.
fn sanitized(payload: &[u8]) -> Option<Vec<u8>> {
    // A Schema Registry header (see `reference_json`) is kept as it is.
    let (header, payload) = match payload {
        [0, _, _, _, _, ..] => payload.split_at(5),
        _ => (&[][..], payload),
    };
    let text = String::from_utf8_lossy(payload);
    let mut changed = std::str::from_utf8(payload).is_err();
    let b = text.as_bytes();
    let (mut out, mut at) = (header.to_vec(), 0);
    while at < b.len() {
        match b[at] {
            b'"' => {
                let start = at;
                at += 1;
                while at < b.len() && b[at] != b'"' {
                    at += if b[at] == b'\\' { 2 } else { 1 };
                }
                at = (at + 1).min(b.len());
                out.extend_from_slice(&b[start..at]);
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                while at < b.len()
                    && matches!(b[at], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    at += 1;
                }
                let token = &b[start..at];
                let infinite = std::str::from_utf8(token)
                    .ok()
                    .and_then(|t| t.parse::<f64>().ok())
                    .is_some_and(f64::is_infinite);
                if infinite {
                    out.push(b'0');
                    changed = true;
                } else {
                    out.extend_from_slice(token);
                }
            }
            c => {
                out.push(c);
                at += 1;
            }
        }
    }
    changed.then_some(out)
}

/// What `from_json` must make of `payload`: its configured fields picked from a whole parse
/// (`reference_pick`), put in a flat event under plain names of their own, read by `from_json`
/// (whose picking is then trivial), labels named back. Errors come out by their reason.
fn reference_json(
    payload: &[u8],
    fields: &JsonFields,
) -> Result<crate::event::Event, crate::event::EventError> {
    let json_error = |e: String| crate::event::EventError::Json(e);
    // The Schema Registry's framing, recognised by its first byte.
    let payload = match payload {
        [0, _, _, _, _, rest @ ..] => rest,
        [0, ..] => return Err(json_error("cut header".into())),
        _ => payload,
    };
    let parsed: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| json_error(e.to_string()))?;
    let serde_json::Value::Object(event) = parsed else {
        return Err(json_error("not an object".into()));
    };
    let mut flat = serde_json::Map::new();
    let flat_fields = JsonFields {
        request_id: "f_request_id".into(),
        item_id: "f_item_id".into(),
        event_time: "f_event_time".into(),
        event_type: "f_event_type".into(),
        event_id: fields.event_id.as_ref().map(|_| "f_event_id".into()),
        labels: (0..fields.labels.len())
            .map(|i| format!("f_label_{i}"))
            .collect(),
        ..fields.clone()
    };
    let mut configured = vec![
        (fields.request_id.as_str(), flat_fields.request_id.clone()),
        (fields.item_id.as_str(), flat_fields.item_id.clone()),
        (fields.event_time.as_str(), flat_fields.event_time.clone()),
        (fields.event_type.as_str(), flat_fields.event_type.clone()),
    ];
    if let (Some(name), Some(flat_name)) = (&fields.event_id, &flat_fields.event_id) {
        configured.push((name.as_str(), flat_name.clone()));
    }
    for (name, flat_name) in fields.labels.iter().zip(&flat_fields.labels) {
        configured.push((name.as_str(), flat_name.clone()));
    }
    for (name, flat_name) in configured {
        if let Some(v) = reference_pick(&event, name) {
            flat.insert(flat_name, v.clone());
        }
    }
    let text = serde_json::to_vec(&serde_json::Value::Object(flat))
        .map_err(|e| json_error(e.to_string()))?;
    let mut read = from_json(&text, &flat_fields)?;
    read.labels = std::mem::take(&mut read.labels)
        .into_iter()
        .map(|(flat_name, v)| {
            let i = flat_fields
                .labels
                .iter()
                .position(|l| *l == flat_name)
                .unwrap_or(0);
            (fields.labels[i].clone(), v)
        })
        .collect();
    Ok(read)
}

proptest! {
    #![proptest_config(config(3072))]

    /// The fields picked from the event's text as it streams by are the ones a whole parse
    /// names, whatever else the event holds, in any order, with keys repeated or escaped.
    #[test]
    fn json_events_read_as_a_whole_parse_reads_them(
        fields in json_fields(),
        members in json_event(),
        spaced in any::<bool>(),
    ) {
        let payload = event_text(&members, spaced);
        same_event(from_json(&payload, &fields), reference_json(&payload, &fields))?;
    }

    /// The same changed at random: refused when serde_json refuses the text, read as the whole
    /// parse reads it otherwise.
    #[test]
    fn mutated_json_events_read_as_a_whole_parse_reads_them(
        fields in json_fields(),
        members in json_event(),
        mutations in prop::collection::vec(mutation(), 1..3),
    ) {
        let mut payload = event_text(&members, false);
        mutate(&mut payload, &mutations);
        let got = from_json(&payload, &fields);
        match sanitized(&payload) {
            None => same_event(got, reference_json(&payload, &fields))?,
            // Refused for what serde_json checks in what it builds (see `sanitized`).
            Some(_) if got.as_ref().is_err_and(|e| e.reason().as_str() == "bad_json") => {}
            // Else read as the whole text is once made valid where the joiner does not read.
            Some(valid) => same_event(got, reference_json(&valid, &fields))?,
        }
    }
}

#[test]
fn the_reference_pick_is_what_the_docs_say() {
    let event = serde_json::json!({"a.b": 1, "a": {"b": 2, "c": [3, 4]}, "x": [5]});
    let serde_json::Value::Object(event) = event else {
        unreachable!()
    };
    let pick = |name| reference_pick(&event, name).cloned();
    assert_eq!(pick("a.b"), Some(serde_json::json!(1)));
    assert_eq!(pick("a.c.1"), Some(serde_json::json!(4)));
    assert_eq!(pick("x.0"), Some(serde_json::json!(5)));
    assert_eq!(pick("a.d"), None);
    assert_eq!(pick("b"), None);
}

// ---------------------------------------------------------------------------------------------
// What the properties found, kept as the exact inputs.

/// A configured dotted name is the top-level key of that very name, whatever comes after it
/// (the key `a` used to replace the value of `a.b` when it came later), and the last of a
/// repeated key (an earlier `a` that held `b` used to survive a later one that does not).
#[test]
fn a_dotted_name_is_read_from_its_nearest_key_in_any_order() {
    let fields = JsonFields {
        request_id: "rid".into(),
        item_id: "a.b".into(),
        event_time: "t".into(),
        event_type: "ty".into(),
        ..JsonFields::default()
    };
    let item = |members: &str| {
        let payload = format!(r#"{{"rid":"r","t":1764439200123,"ty":"click",{members}}}"#);
        let got = from_json(payload.as_bytes(), &fields).map(|e| e.item_id);
        let want = reference_json(payload.as_bytes(), &fields).map(|e| e.item_id);
        let reason = |e: crate::event::EventError| e.reason();
        assert_eq!(
            got.clone().map_err(reason),
            want.map_err(reason),
            "{payload}"
        );
        got.map_err(|e| e.to_string())
    };
    let exact = Ok("42".to_owned());
    assert_eq!(item(r#""a.b":42,"a":{"b":"item-1"}"#), exact);
    assert_eq!(item(r#""a":{"b":"item-1"},"a.b":42"#), exact);
    assert_eq!(
        item(r#""a":{"b":"item-1"},"a.b":42,"a":{"b":"item-2"}"#),
        exact
    );
    assert_eq!(
        item(r#""a":{"b":"item-1"},"a":{"c":1}"#),
        Err("field \"a.b\": missing".into())
    );
    assert_eq!(
        item(r#""a":{"c":1},"a":{"b":"item-2"}"#),
        Ok("item-2".into())
    );
    // The same for labels.
    let labels = JsonFields {
        item_id: "rid".into(),
        labels: vec!["a.b".into()],
        ..fields.clone()
    };
    let payload =
        br#"{"rid":"r","a.b":1.5,"t":1764439200123,"ty":"click","a":{"b":2.5},"a.b":{"c":1}}"#;
    let e = from_json(payload, &labels).unwrap();
    assert!(
        e.labels.is_empty(),
        "the last `a.b` is no number: {:?}",
        e.labels
    );
}
