//! The protobuf schemas of featurelog, compiled with prost (and tonic's service stubs with the
//! `grpc` feature).
//!
//! - [`inference`]: the Open Inference Protocol (KServe V2) gRPC service and messages, wire-compatible
//!   with Triton, KServe and MLServer.
//! - [`featurelog::v1`]: the records featurelog publishes: [`FeatureLog`](featurelog::v1::FeatureLog)
//!   (what a model consumed, per candidate) and [`Impression`](featurelog::v1::Impression) (what the
//!   app showed and what the user did).
//! - [`sampling`]: which requests a sample rate keeps, as every side computes it.
//! - [`schema_registry`]: Confluent Schema Registry's header in front of a record.
//! - [`wire`]: the protobuf wire format walked by hand, and the field numbers of the messages
//!   walked that way.
//! - `testing` (feature `testing`): what the property tests of every decoder share.

mod datatype;
pub mod sampling;
pub mod schema_registry;
pub mod tensor;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod wire;

/// The `FileDescriptorSet` protoc made of the protos compiled here, imports included (so
/// `google.protobuf.Timestamp` too): the schemas as data, which the tests of [`wire`] hold its
/// field numbers to.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

/// The Open Inference Protocol (KServe V2), package `inference`.
#[allow(clippy::all, clippy::pedantic, missing_docs, rust_2018_idioms)]
pub mod inference {
    include!(concat!(env!("OUT_DIR"), "/inference.rs"));
}

/// featurelog's own records, by package version.
pub mod featurelog {
    /// Version 1 of the record formats, package `featurelog.v1`.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rust_2018_idioms)]
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/featurelog.v1.rs"));
    }

    /// The joiner's state file (`featurelog.state.v1`): the join state of one task.
    pub mod state {
        /// Version 1 of the package.
        #[allow(clippy::all, clippy::pedantic, missing_docs, rust_2018_idioms)]
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/featurelog.state.v1.rs"));
        }
    }
}

pub use datatype::UnknownDataType;

impl featurelog::v1::Feature {
    /// A column named `name` of one `datatype` value per candidate row (each of `row_shape`,
    /// empty for a scalar), holding `values`.
    pub fn column(
        name: impl Into<String>,
        datatype: featurelog::v1::DataType,
        row_shape: Vec<i64>,
        values: featurelog::v1::Values,
    ) -> Self {
        Self {
            name: name.into(),
            datatype: datatype as i32,
            row_shape,
            values: Some(values),
            per_request: false,
        }
    }
}
