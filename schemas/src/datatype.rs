//! The mapping between the protocol's datatype names ("FP32", "BYTES", ...) and
//! [`DataType`], and what each datatype occupies on the wire.

use crate::featurelog::v1::DataType;

/// A datatype name that the Open Inference Protocol does not define.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown tensor datatype {0:?}; the protocol defines BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64 and BYTES"
)]
pub struct UnknownDataType(pub String);

impl DataType {
    /// Every datatype of the protocol, in enum order.
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
        DataType::Bf16,
    ];

    /// Parses the protocol's name of a datatype (`"FP32"`), as found in a tensor's `datatype`.
    pub fn from_protocol_name(name: &str) -> Result<Self, UnknownDataType> {
        Ok(match name {
            "BOOL" => DataType::Bool,
            "UINT8" => DataType::Uint8,
            "UINT16" => DataType::Uint16,
            "UINT32" => DataType::Uint32,
            "UINT64" => DataType::Uint64,
            "INT8" => DataType::Int8,
            "INT16" => DataType::Int16,
            "INT32" => DataType::Int32,
            "INT64" => DataType::Int64,
            "FP16" => DataType::Fp16,
            "FP32" => DataType::Fp32,
            "FP64" => DataType::Fp64,
            "BYTES" => DataType::Bytes,
            "BF16" => DataType::Bf16,
            other => return Err(UnknownDataType(other.to_owned())),
        })
    }

    /// The protocol's name of this datatype, or `None` for [`DataType::Unspecified`].
    pub fn protocol_name(self) -> Option<&'static str> {
        Some(match self {
            DataType::Unspecified => return None,
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
            DataType::Bf16 => "BF16",
        })
    }

    /// Bytes per element in raw (little-endian) contents; `None` for BYTES, whose elements are
    /// length-prefixed, and for [`DataType::Unspecified`].
    pub fn raw_element_size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes | DataType::Unspecified => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_protocol_name_round_trips() {
        for dt in DataType::ALL {
            let name = dt.protocol_name().unwrap();
            assert_eq!(DataType::from_protocol_name(name).unwrap(), dt);
        }
        assert_eq!(DataType::Unspecified.protocol_name(), None);
    }

    #[test]
    fn unknown_names_are_refused_with_the_name() {
        let err = DataType::from_protocol_name("fp32").unwrap_err();
        assert_eq!(err, UnknownDataType("fp32".into()));
        assert!(err.to_string().contains("\"fp32\""));
    }
}
