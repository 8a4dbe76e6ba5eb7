//! Why a record goes to the dead-letter topic ([`Reason`]): a leaf module, so that the event
//! decoders, which name the reasons, and the dead-letter producer, which sends them, do not
//! depend on each other.

/// Declares [`Reason`] and the list of its values together, so that no reason can be left
/// out of [`Reason::ALL`] (which the documentation's tests read).
macro_rules! reasons {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// Why a record went to the dead-letter topic: its `featurelog-error` header and the
        /// `name` of `featurelog_join_dead_letters_total`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Reason {
            $($(#[$doc])* $variant,)*
        }

        impl Reason {
            /// Every reason.
            pub const ALL: &[Reason] = &[$(Reason::$variant,)*];

            /// The reason's name, as headers and metrics carry it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $name,)*
                }
            }
        }
    };
}

reasons! {
    /// An event that is not a protobuf `Impression`.
    BadProtobuf => "bad_protobuf",
    /// An event that is not the JSON the config describes.
    BadJson => "bad_json",
    /// An event field of the wrong type or value.
    BadField => "bad_field",
    /// An event whose type maps to no impression, click or conversion.
    UnknownEventType => "unknown_event_type",
    /// An event time outside the range the joiner accepts.
    EventTimeOutOfRange => "event_time_out_of_range",
    /// An event dated more than `join.max-event-time-ahead` ahead of the watermark.
    EventTimeInFuture => "event_time_in_future",
    /// A record on the feature-log topic that is no FeatureLog.
    BadFeatureLog => "bad_feature_log",
    /// A co-partitioned event on a partition its request id does not hash to.
    NotCoPartitioned => "not_co_partitioned",
    /// A record of the repartition topic that is no batch of routed events.
    BadRoutedEvents => "bad_routed_events",
    /// A record of the repartition topic that is no router progress report.
    BadRouterProgress => "bad_router_progress",
}
