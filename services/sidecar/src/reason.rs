//! Every value the sidecar's metrics label a call or a dead letter with: why a call was
//! dropped ([`Dropped`]) or not logged ([`Skipped`]), and what became of a dead letter
//! ([`DeadLetter`]). A leaf module: the proxy, the publisher and the extraction name them; the
//! metrics count them; the README's reference is checked against each type's `ALL`.

/// Declares an enum of label values and the list of them together, so that no value can be
/// left out of `ALL`.
macro_rules! labels {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $value:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every value.
            pub const ALL: &[$name] = &[$($name::$variant,)*];

            /// The value as the metric's label carries it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $value,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

labels! {
    /// Why a call's features were not logged although its model is allow-listed: the `reason`
    /// of `featurelog_sidecar_dropped_total` (and of a dead letter, when the call had one).
    Dropped {
        /// The sidecar was stopping.
        ShuttingDown => "shutting_down",
        /// The adaptive controller shed the call to protect the model's latency.
        AdaptiveShed => "adaptive_shed",
        /// The publish queue was full.
        QueueFull => "queue_full",
        /// The call or its response ended before it was whole.
        IncompleteCall => "incomplete_call",
        /// The brokers did not take the record.
        DeliveryFailed => "delivery_failed",
        /// librdkafka's own queue was full.
        ProducerQueueFull => "producer_queue_full",
        /// librdkafka refused to produce the record.
        ProduceError => "produce_error",
        /// The record is larger than the topic takes.
        TooLarge => "too_large",
        /// The brokers found the record invalid.
        InvalidRecord => "invalid_record",
        /// The topic does not exist or may not be written.
        UnknownTopic => "unknown_topic",
        /// The request is not a valid `ModelInferRequest`.
        MalformedProtobuf => "malformed_protobuf",
        /// The response is not a valid `ModelInferResponse`.
        MalformedResponse => "malformed_response",
        /// A body that is no sequence of gRPC frames.
        MalformedGrpcFrame => "malformed_grpc_frame",
        /// A body compressed in an encoding the sidecar does not read.
        UnsupportedCompression => "unsupported_compression",
        /// A streamed request without an id to log it by.
        NoRequestId => "no_request_id",
        /// A REST body that is not JSON of the Open Inference Protocol.
        MalformedJson => "malformed_json",
        /// A REST body whose tensor data does not fit its datatype or shape.
        BadJsonData => "bad_json_data",
        /// Feature tensors whose rows disagree with the candidates'.
        RowMismatch => "row_mismatch",
        /// A candidate-ids tensor that is no list of ids.
        BadCandidateIds => "bad_candidate_ids",
        /// A top-k output that does not index the candidates.
        BadTopKOutput => "bad_top_k_output",
        /// A tensor of a datatype the protocol does not name.
        UnknownDatatype => "unknown_datatype",
        /// A tensor shape with a negative dimension or too many elements.
        InvalidShape => "invalid_shape",
        /// A tensor whose contents do not hold as many elements as its shape.
        ShapeMismatch => "shape_mismatch",
        /// Raw contents whose length is not the shape's elements times the datatype's size.
        RawLength => "raw_length",
        /// BYTES contents that are not length-prefixed strings.
        BadBytes => "bad_bytes",
        /// Typed contents in the field of another datatype.
        WrongContentsField => "wrong_contents_field",
        /// A value out of its datatype's range.
        ValueOutOfRange => "value_out_of_range",
        /// A call with raw contents for some tensors and not as many as it names.
        RawCountMismatch => "raw_count_mismatch",
    }
}

labels! {
    /// Why a call was not logged by design: the `reason` of `featurelog_sidecar_skipped_total`.
    Skipped {
        /// Sampled out by the model's `sample-rate`.
        NotSampled => "not_sampled",
        /// No allow-list rule names the model.
        NotAllowListed => "not_allow_listed",
        /// The model server answered with an error: there is nothing the model consumed.
        CallFailed => "call_failed",
    }
}

labels! {
    /// What became of a dead letter: the `outcome` of
    /// `featurelog_sidecar_dead_letters_total`.
    DeadLetter {
        /// The dead-letter topic has it.
        Delivered => "delivered",
        /// Producing it failed.
        Failed => "failed",
        /// Over `publish.dead-letter-rate`: counted, not sent.
        RateLimited => "rate_limited",
        /// No dead-letter topic is configured.
        NoTopic => "no_topic",
    }
}

/// Each way a tensor fails to decode is a reason of its own: the variants pair one to one.
impl From<&featurelog_schemas::tensor::TensorError> for Dropped {
    fn from(e: &featurelog_schemas::tensor::TensorError) -> Self {
        use featurelog_schemas::tensor::TensorError as T;
        match e {
            T::UnknownDatatype { .. } => Dropped::UnknownDatatype,
            T::InvalidShape { .. } => Dropped::InvalidShape,
            T::ShapeMismatch { .. } => Dropped::ShapeMismatch,
            T::RawLength { .. } => Dropped::RawLength,
            T::BadBytes { .. } => Dropped::BadBytes,
            T::WrongContentsField { .. } => Dropped::WrongContentsField,
            T::ValueOutOfRange { .. } => Dropped::ValueOutOfRange,
            T::RawCountMismatch { .. } => Dropped::RawCountMismatch,
        }
    }
}
