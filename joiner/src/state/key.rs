//! Lookups by borrowed ids in the tables keyed by a request id and an item id: the pending
//! entries, and their due index. An owned key built only to look one up cost two allocations
//! and two copies, several times for every impression.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// A pending entry's key, `(request id, item id)`, owned or borrowed.
pub(super) trait PairKey {
    fn pair(&self) -> (&str, &str);
}

impl PairKey for (String, String) {
    fn pair(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl PairKey for (&str, &str) {
    fn pair(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> Borrow<dyn PairKey + 'a> for (String, String) {
    fn borrow(&self) -> &(dyn PairKey + 'a) {
        self
    }
}

/// Hashes as the owned tuple does (each `str` in turn), as `Borrow` requires.
impl Hash for dyn PairKey + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.pair().hash(state);
    }
}

impl PartialEq for dyn PairKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.pair() == other.pair()
    }
}

impl Eq for dyn PairKey + '_ {}

/// An entry of the due index, `(due, request id, item id)`, owned or borrowed.
pub(super) trait DueKey {
    fn due_key(&self) -> (i64, &str, &str);
}

impl DueKey for (i64, String, String) {
    fn due_key(&self) -> (i64, &str, &str) {
        (self.0, &self.1, &self.2)
    }
}

impl DueKey for (i64, &str, &str) {
    fn due_key(&self) -> (i64, &str, &str) {
        (self.0, self.1, self.2)
    }
}

impl<'a> Borrow<dyn DueKey + 'a> for (i64, String, String) {
    fn borrow(&self) -> &(dyn DueKey + 'a) {
        self
    }
}

/// Orders as the owned tuple does, as `Borrow` requires.
impl Ord for dyn DueKey + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.due_key().cmp(&other.due_key())
    }
}

impl PartialOrd for dyn DueKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn DueKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.due_key() == other.due_key()
    }
}

impl Eq for dyn DueKey + '_ {}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::state::HashMap;

    #[test]
    fn borrowed_ids_find_the_entries_their_owned_keys_hold() {
        let mut pending: HashMap<(String, String), u32> = HashMap::default();
        pending.insert(("r1".into(), "a".into()), 1);
        pending.insert(("r1a".into(), String::new()), 2);
        assert_eq!(pending.get(&("r1", "a") as &dyn PairKey), Some(&1));
        // The split between the two ids is part of the key.
        assert_eq!(pending.get(&("r1", "aa") as &dyn PairKey), None);
        assert_eq!(pending.get(&("r1a", "") as &dyn PairKey), Some(&2));
        assert_eq!(pending.get(&("r", "1a") as &dyn PairKey), None);

        let mut due: BTreeSet<(i64, String, String)> = BTreeSet::new();
        for (t, r, i) in [
            (5, "r2", "b"),
            (5, "r1", "z"),
            (3, "r9", "a"),
            (5, "r1", "a"),
        ] {
            due.insert((t, r.into(), i.into()));
        }
        assert!(due.remove(&(5_i64, "r1", "z") as &dyn DueKey));
        assert!(!due.remove(&(4_i64, "r1", "a") as &dyn DueKey));
        let left: Vec<_> = due
            .iter()
            .map(|(t, r, i)| (*t, r.as_str(), i.as_str()))
            .collect();
        assert_eq!(left, [(3, "r9", "a"), (5, "r1", "a"), (5, "r2", "b")]);
    }
}
