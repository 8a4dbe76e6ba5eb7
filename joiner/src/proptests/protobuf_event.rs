//! Protobuf events.

use featurelog_schemas::featurelog::v1::Impression;
use proptest::prelude::*;
use prost::Message;
use prost::encoding::encode_varint;

use super::generators::{mutate, mutation, text};
use super::{config, same_event};
use crate::event::{from_impression, from_protobuf};

fn impression() -> impl Strategy<Value = Impression> {
    (
        (text(), text(), text(), text()),
        prop::option::of((
            prop_oneof![
                3 => crate::event::MIN_EVENT_TIME_S..crate::event::END_EVENT_TIME_S,
                1 => any::<i64>(),
            ],
            prop_oneof![3 => 0i32..1_000_000_000, 1 => any::<i32>()],
        )),
        prop_oneof![4 => 0i32..5, 1 => any::<i32>()],
        prop::collection::hash_map(text(), any::<f64>(), 0..3),
    )
        .prop_map(
            |((request_id, item_id, event_name, event_id), time, event_type, labels)| Impression {
                request_id,
                item_id,
                event_time: time.map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
                event_type,
                event_name,
                labels,
                event_id,
            },
        )
}

/// The Schema Registry's protobuf framing: magic byte, schema id, message indexes (a zigzag
/// count, then each index; a count of 0 is the first message, [0]).
fn registry_framed(message: &[u8], schema_id: u32, indexes: &[u32], shorthand: bool) -> Vec<u8> {
    let mut out = vec![0];
    out.extend(schema_id.to_be_bytes());
    if shorthand {
        out.push(0);
    } else {
        let zigzag = |n: i64| ((n << 1) ^ (n >> 63)) as u64;
        encode_varint(zigzag(indexes.len() as i64), &mut out);
        for &i in indexes {
            encode_varint(zigzag(i64::from(i)), &mut out);
        }
    }
    out.extend_from_slice(message);
    out
}

proptest! {
    #![proptest_config(config(2048))]

    /// An Impression reads as prost decodes it, plain or framed by the Schema Registry.
    #[test]
    fn protobuf_events_read_as_prost_decodes_them(
        m in impression(),
        schema_id in any::<u32>(),
        indexes in prop::collection::vec(0u32..1000, 0..4),
        shorthand in any::<bool>(),
    ) {
        let plain = m.encode_to_vec();
        // What prost reads back (not `m` itself: prost leaves out a map's -0.0, as a default).
        let decoded = Impression::decode(&plain[..]).map_err(|e| e.to_string());
        prop_assert_eq!(decoded.as_ref(), Ok(&m));
        let decoded = decoded.unwrap_or_default();
        same_event(from_protobuf(&plain), from_impression(decoded.clone()))?;
        let framed = registry_framed(&plain, schema_id, &indexes, shorthand);
        same_event(from_protobuf(&framed), from_impression(decoded))?;
    }

    /// Changed at random: refused exactly when prost refuses the message, read as it reads it
    /// otherwise. A payload that starts with 0 is the Registry's framing (no protobuf message
    /// starts with field number 0), whose header is skipped first.
    #[test]
    fn mutated_protobuf_events_read_as_prost_decodes_them(
        m in impression(),
        framed in any::<bool>(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut raw = m.encode_to_vec();
        if framed {
            raw = registry_framed(&raw, 7, &[], true);
        }
        mutate(&mut raw, &mutations);
        let got = from_protobuf(&raw);
        let message = match raw.first() {
            Some(0) if raw.len() >= 6 && raw[5] == 0 => Some(&raw[6..]),
            Some(0) => None, // a header the property above covers; here only: no panic
            _ => Some(&raw[..]),
        };
        if let Some(message) = message {
            let want = match Impression::decode(message) {
                Ok(m) => from_impression(m),
                Err(e) => Err(crate::event::EventError::Protobuf(e.to_string())),
            };
            same_event(got, want)?;
        }
    }
}
