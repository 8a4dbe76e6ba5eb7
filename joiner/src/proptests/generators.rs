//! Bytes changed at random, and the text records and events are made of: what the
//! properties of every decoder share.

use proptest::prelude::*;

pub(super) use featurelog_schemas::testing::{mutate, mutation};

pub(super) fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9_-]{0,6}",
        1 => "\\PC{0,4}",
    ]
}
