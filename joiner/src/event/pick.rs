//! Takes the configured fields out of a JSON event's payload in one streaming pass, without
//! building the fields it skips.

use serde::Deserialize;

use super::{EventError, JsonFields};

/// The configured fields of a JSON event, each the last occurrence of its name (as a parse
/// into a map keeps). Every other field is skipped without being built, and names are
/// compared where they lie in the payload: parsing whole events into `serde_json::Value`
/// maps allocated every key, and that was most of the cost of reading an event.
///
/// A dotted name is taken from the longest top-level key that reaches it (see [`reach`]): the
/// key that is the name itself, else the longest dotted prefix of it, whatever their order in
/// the event, and from that key's last occurrence even when it lacks the path.
#[derive(Default)]
pub(super) struct Picked {
    pub(super) request_id: Option<serde_json::Value>,
    pub(super) item_id: Option<serde_json::Value>,
    pub(super) event_time: Option<serde_json::Value>,
    pub(super) event_type: Option<serde_json::Value>,
    pub(super) event_id: Option<serde_json::Value>,
    /// By position in `JsonFields::labels`.
    pub(super) labels: Vec<Option<serde_json::Value>>,
}

/// A picked value, if the event has it.
type Slot = Option<serde_json::Value>;

impl Picked {
    /// The named fields' slots, in the order of `Pick::visit_map`'s names, and the labels'.
    fn slots_mut(&mut self) -> ([&mut Slot; 5], &mut Vec<Slot>) {
        let fields = [
            &mut self.request_id,
            &mut self.item_id,
            &mut self.event_time,
            &mut self.event_type,
            &mut self.event_id,
        ];
        (fields, &mut self.labels)
    }

    pub(super) fn parse(payload: &[u8], fields: &JsonFields) -> Result<Self, EventError> {
        use serde::de::DeserializeSeed as _;
        let json = |e: serde_json::Error| EventError::Json(e.to_string());
        let mut de = serde_json::Deserializer::from_slice(payload);
        let picked = Pick(fields).deserialize(&mut de).map_err(json)?;
        de.end().map_err(json)?;
        Ok(picked)
    }
}

struct Pick<'f>(&'f JsonFields);

impl<'de> serde::de::DeserializeSeed<'de> for Pick<'_> {
    type Value = Picked;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Picked, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Pick<'_> {
    type Value = Picked;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Picked, A::Error> {
        let f = self.0;
        let mut picked = Picked {
            labels: vec![None; f.labels.len()],
            ..Picked::default()
        };
        // Per slot, the length of the key it was taken from: a shorter key that also reaches
        // the name (`a` for `a.b`, after the key `a.b`) does not replace it.
        let mut taken_from = [None::<usize>; 5];
        let mut labels_taken_from = vec![None::<usize>; f.labels.len()];
        let nearest = |taken_from: &mut Option<usize>, k: &str| {
            let nearer = taken_from.is_none_or(|len| k.len() >= len);
            if nearer {
                *taken_from = Some(k.len());
            }
            nearer
        };
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let k = key.0.as_ref();
            let slots = [
                reach(&f.request_id, k),
                reach(&f.item_id, k),
                reach(&f.event_time, k),
                reach(&f.event_type, k),
                f.event_id.as_deref().and_then(|name| reach(name, k)),
            ];
            let label = f.labels.iter().any(|l| reach(l, k).is_some());
            if !label {
                let mut wanted = slots.iter().enumerate().filter(|(_, path)| path.is_some());
                match (wanted.next(), wanted.next()) {
                    (None, _) => {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        continue;
                    }
                    // Most keys are one configured name, whole: the value goes straight to its
                    // slot, without the walk over every slot below.
                    (Some((j, Some(""))), None) => {
                        if nearest(&mut taken_from[j], k) {
                            *picked.slots_mut().0[j] = Some(map.next_value()?);
                        } else {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                        continue;
                    }
                    _ => {}
                }
            }
            // A name configured twice (say, one field as two labels) fills every slot.
            let mut value: serde_json::Value = map.next_value()?;
            let (fields, labels) = picked.slots_mut();
            let mut slots = slots
                .into_iter()
                .zip(&mut taken_from)
                .zip(fields)
                .chain(
                    f.labels
                        .iter()
                        .map(|name| reach(name, k))
                        .zip(&mut labels_taken_from)
                        .zip(labels.iter_mut()),
                )
                .filter_map(|((path, taken_from), slot)| {
                    path.filter(|_| nearest(taken_from, k)).map(|p| (slot, p))
                })
                .peekable();
            // The last slot that wants the whole value takes it rather than a copy.
            while let Some((slot, path)) = slots.next() {
                *slot = if path.is_empty() && slots.peek().is_none() {
                    Some(std::mem::take(&mut value))
                } else {
                    at(&value, path).cloned()
                };
            }
        }
        Ok(picked)
    }
}

/// How the configured field `name` reaches into the value of the top-level key `k`: all of it
/// (`Some("")`, the name is the key), the part under a dotted path (`properties.item_id` in the
/// key `properties`: `Some("item_id")`), or not at all. Analytics events nest their fields
/// (`{"event": ..., "properties": {"product_id": ...}}`); a top-level key that itself holds
/// a dot is still taken as it is.
fn reach<'n>(name: &'n str, k: &str) -> Option<&'n str> {
    // Each key of each event is compared with every configured name, and most differ at
    // their first byte: a byte compare spares the two calls to memcmp below.
    if let (Some(n), Some(first)) = (name.as_bytes().first(), k.as_bytes().first())
        && n != first
    {
        return None;
    }
    if name == k {
        return Some("");
    }
    name.strip_prefix(k).and_then(|rest| rest.strip_prefix('.'))
}

/// The value at the dotted `path` under `value` (object keys, or array positions).
fn at<'v>(value: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    if path.is_empty() {
        return Some(value);
    }
    path.split('.').try_fold(value, |v, segment| match v {
        serde_json::Value::Object(m) => m.get(segment),
        serde_json::Value::Array(a) => segment.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// An object key, borrowed from the payload unless it has escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}
