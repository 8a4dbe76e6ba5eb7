//! A task's two inputs by name: its feature-log partition and its events partition (the
//! repartition topic's, or the events topic's when co-partitioned), for the values kept of
//! each, such as the topic read and the next offset to take.

use crate::align::Input;

/// One value for each of a task's inputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Inputs<T> {
    /// The feature-log partition's.
    pub(super) features: T,
    /// The events partition's.
    pub(super) events: T,
}

impl<T> Inputs<T> {
    /// The value of `input`.
    pub(super) fn get(&self, input: Input) -> &T {
        match input {
            Input::Features => &self.features,
            Input::Events => &self.events,
        }
    }

    /// The value of `input`, to change it.
    pub(super) fn get_mut(&mut self, input: Input) -> &mut T {
        match input {
            Input::Features => &mut self.features,
            Input::Events => &mut self.events,
        }
    }
}
