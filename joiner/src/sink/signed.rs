//! Unsigned columns as the signed types Delta Lake has, for the files of a Delta table: UInt8,
//! UInt16 and UInt32 become Int16, Int32 and Int64, UInt64 becomes Decimal(20, 0), each value
//! exact (docs/JOINER.md, "Delta table output").
//!
//! Delta's schema has no unsigned integers, and readers of a Delta table read a file's columns
//! as the table's types: a UInt64 column declared as `long` would read values past `i64::MAX`
//! wrongly. So the files hold types every reader agrees on, and the table declares those.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, FixedSizeListArray, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema};

/// The type a column of `data_type` is written as in a Delta table (itself when it is signed).
pub(crate) fn signed_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::UInt8 => DataType::Int16,
        DataType::UInt16 => DataType::Int32,
        DataType::UInt32 => DataType::Int64,
        // 20 digits hold u64::MAX (18446744073709551615).
        DataType::UInt64 => DataType::Decimal128(20, 0),
        DataType::FixedSizeList(child, width) => DataType::FixedSizeList(
            Arc::new(Field::new(
                child.name(),
                signed_type(child.data_type()),
                child.is_nullable(),
            )),
            *width,
        ),
        other => other.clone(),
    }
}

/// `batch` with every unsigned column (also inside fixed-size lists) cast to its signed type;
/// the batch itself, without a copy, when it has none.
pub(crate) fn signed(batch: RecordBatch) -> Result<RecordBatch, ArrowError> {
    let schema = batch.schema();
    if schema
        .fields()
        .iter()
        .all(|f| &signed_type(f.data_type()) == f.data_type())
    {
        return Ok(batch);
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let target = signed_type(field.data_type());
        let column = if &target == field.data_type() {
            column.clone()
        } else {
            cast(column, &target)?
        };
        fields.push(field.as_ref().clone().with_data_type(target));
        columns.push(column);
    }
    let schema = Schema::new_with_metadata(fields, schema.metadata().clone());
    RecordBatch::try_new(Arc::new(schema), columns)
}

fn cast(column: &ArrayRef, target: &DataType) -> Result<ArrayRef, ArrowError> {
    match (column.data_type(), target) {
        // arrow's cast of a fixed-size list keeps the child's field (and its nullability) only
        // when told to: cast the values and rebuild the list with the target field.
        (DataType::FixedSizeList(_, _), DataType::FixedSizeList(child, width)) => {
            let list = column
                .as_any()
                .downcast_ref::<FixedSizeListArray>()
                .ok_or_else(|| ArrowError::CastError("not a fixed-size list".into()))?;
            let values = cast(list.values(), child.data_type())?;
            Ok(Arc::new(FixedSizeListArray::try_new(
                child.clone(),
                *width,
                values,
                list.nulls().cloned(),
            )?))
        }
        _ => arrow_cast::cast(column, target),
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray as _;
    use arrow_array::types::{Decimal128Type, Int16Type, Int64Type};
    use arrow_array::{Float32Array, UInt8Array, UInt32Array, UInt64Array};

    use super::*;

    #[test]
    fn unsigned_columns_become_wider_signed_types_with_every_value_exact() {
        let list_field = Arc::new(Field::new_list_field(DataType::UInt8, false));
        let list = FixedSizeListArray::new(
            list_field.clone(),
            2,
            Arc::new(UInt8Array::from(vec![0, 255, 7, 8])),
            None,
        );
        let schema = Schema::new(vec![
            Field::new("clicks", DataType::UInt32, false),
            Field::new("big", DataType::UInt64, true),
            Field::new("v", DataType::FixedSizeList(list_field, 2), true),
            Field::new("f", DataType::Float32, true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(UInt32Array::from(vec![u32::MAX, 0])),
                Arc::new(UInt64Array::from(vec![Some(u64::MAX), None])),
                Arc::new(list),
                Arc::new(Float32Array::from(vec![1.5, 2.5])),
            ],
        )
        .unwrap();
        let out = signed(batch).unwrap();
        let clicks = out.column(0).as_primitive::<Int64Type>();
        assert_eq!(clicks.values(), &[i64::from(u32::MAX), 0]);
        let big = out.column(1).as_primitive::<Decimal128Type>();
        assert_eq!(big.value(0), i128::from(u64::MAX));
        assert!(big.is_null(1));
        let v = out.column(2).as_fixed_size_list();
        assert_eq!(
            v.values().as_primitive::<Int16Type>().values(),
            &[0, 255, 7, 8]
        );
        assert_eq!(out.schema().field(3).data_type(), &DataType::Float32);
        assert!(!out.schema().field(0).is_nullable());
    }

    #[test]
    fn a_batch_without_unsigned_columns_is_kept_as_it_is() {
        let schema = Schema::new(vec![Field::new("f", DataType::Float32, true)]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(Float32Array::from(vec![1.0]))],
        )
        .unwrap();
        let out = signed(batch.clone()).unwrap();
        assert!(Arc::ptr_eq(out.column(0), batch.column(0)));
    }
}
