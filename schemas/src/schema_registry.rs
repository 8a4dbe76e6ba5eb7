//! Confluent Schema Registry's wire format, as the Registry's serializers (KafkaJsonSchemaSerializer,
//! KafkaProtobufSerializer and their ports) write every record: a 0 byte, a 4-byte big-endian
//! schema id, for protobuf the indexes of the message in its schema, then the record. Recognised
//! by its first byte: neither a JSON text nor a protobuf message can start with 0 (field number 0
//! does not exist), so readers need no setting. The schema id is not looked up here.

/// The first byte of the wire format.
pub const MAGIC: u8 = 0;

/// The schema id and what follows it, when `payload` starts with the Registry's header;
/// `Ok(None)` when it does not (the record is the payload as it is).
pub fn header(payload: &[u8]) -> Result<Option<(u32, &[u8])>, String> {
    match payload {
        [MAGIC, a, b, c, d, rest @ ..] => Ok(Some((u32::from_be_bytes([*a, *b, *c, *d]), rest))),
        [MAGIC, ..] => {
            Err("a Schema Registry header (a 0 byte and a 4-byte schema id) cut short".into())
        }
        _ => Ok(None),
    }
}

/// A protobuf record after the message indexes that follow the schema id: a zigzag varint
/// count, then the indexes; a count of 0 stands for [0], the first message.
pub fn skip_message_indexes(mut rest: &[u8]) -> Result<&[u8], String> {
    let bad = |e: prost::DecodeError| format!("the Schema Registry message indexes: {e}");
    let count = prost::encoding::decode_varint(&mut rest).map_err(bad)?;
    let count = (count >> 1) ^ (count & 1).wrapping_neg();
    if count > 100 {
        return Err(format!(
            "the Schema Registry message indexes: {count} of them is not a header"
        ));
    }
    for _ in 0..count {
        prost::encoding::decode_varint(&mut rest).map_err(bad)?;
    }
    Ok(rest)
}
