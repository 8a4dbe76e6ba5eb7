//! A set of one feature log's candidates, one bit per row: the entry's impressed and emitted
//! candidates.
//!
//! As sets of item ids they would cost a copy of the id and a hash insert per row, and each
//! request an entry in a map of sets: about a tenth of the join thread's CPU on a backlog. The
//! row is known wherever a candidate is added (its impression was matched against the log),
//! and the ids are read back from the log for a state file.

/// Rows of a log's candidate list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct CandidateSet {
    words: Vec<u64>,
}

impl CandidateSet {
    /// Adds `row`; false if it was in the set.
    pub(super) fn insert(&mut self, row: usize) -> bool {
        let (word, bit) = (row / 64, 1u64 << (row % 64));
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        let new = self.words[word] & bit == 0;
        self.words[word] |= bit;
        new
    }

    pub(super) fn contains(&self, row: usize) -> bool {
        self.words
            .get(row / 64)
            .is_some_and(|w| w & (1u64 << (row % 64)) != 0)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The rows, in increasing order.
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                Some(i * 64 + bit)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::CandidateSet;

    proptest! {
        /// Any sequence of inserts answers as a set of rows does.
        #[test]
        fn answers_as_a_set_of_rows(rows in proptest::collection::vec(0usize..300, 0..64)) {
            let (mut set, mut reference) = (CandidateSet::default(), BTreeSet::new());
            for row in rows {
                prop_assert_eq!(set.insert(row), reference.insert(row));
            }
            for row in 0..320 {
                prop_assert_eq!(set.contains(row), reference.contains(&row));
            }
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), reference.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(set.is_empty(), reference.is_empty());
        }
    }

    #[test]
    fn holds_each_row_once_and_lists_them_in_order() {
        let mut set = CandidateSet::default();
        assert!(set.is_empty());
        for row in [130, 0, 63, 64, 5] {
            assert!(set.insert(row), "{row} is new");
        }
        assert!(!set.insert(63), "63 again");
        assert!(set.contains(130) && set.contains(0) && set.contains(64));
        assert!(!set.contains(1) && !set.contains(1000));
        assert_eq!(set.iter().collect::<Vec<_>>(), [0, 5, 63, 64, 130]);
        assert!(!set.is_empty());
    }
}
