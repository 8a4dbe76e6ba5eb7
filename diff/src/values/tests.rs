//! Conversions into the comparison domains, and comparisons of converted columns.

use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, ListArray};
use arrow_schema::{DataType, Field};

use super::classify::LIST_ORDER;
use super::*;

/// Values of a one-column list array in the given domain.
fn list_of(array: ArrayRef, domain: Domain) -> DArr {
    to_domain(&array, domain).unwrap()
}

/// A null inside a list equals only a null: not 0.0, not "", whatever its slot holds.
#[test]
fn null_list_elements_equal_only_nulls() {
    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::types::Float32Type;
    let nums = |rows: Vec<Option<Vec<Option<f32>>>>| {
        let a: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Float32Type, _, _>(rows));
        list_of(a, Domain::NumberList)
    };
    let served = nums(vec![Some(vec![None]), Some(vec![Some(1.0), None])]);
    let offline = nums(vec![Some(vec![Some(0.0)]), Some(vec![Some(1.0), None])]);
    assert_eq!(
        compare(served.get(0), offline.get(0), 0.0, 1e-6),
        Outcome::Differ(None)
    );
    assert_eq!(
        compare(offline.get(0), served.get(0), 0.0, 1e-6),
        Outcome::Differ(None)
    );
    assert_eq!(
        compare(served.get(1), offline.get(1), 0.0, 1e-6),
        Outcome::Equal
    );
    let mut buf = Vec::new();
    served.get(1).encode(&mut buf);
    assert_eq!(decode(&buf).render(), "[1, null]");

    let texts = |rows: &[&[Option<&str>]]| {
        let mut b = ListBuilder::new(StringBuilder::new());
        for row in rows {
            for v in *row {
                b.values().append_option(*v);
            }
            b.append(true);
        }
        let a: ArrayRef = Arc::new(b.finish());
        list_of(a, Domain::TextList)
    };
    let served = texts(&[&[Some("a"), None], &[None, Some("b")]]);
    let offline = texts(&[&[Some("a"), Some("")], &[None, Some("b")]]);
    assert_eq!(
        compare(served.get(0), offline.get(0), 0.0, 0.0),
        Outcome::Differ(None)
    );
    assert_eq!(
        compare(served.get(1), offline.get(1), 0.0, 0.0),
        Outcome::Equal
    );
    let (mut s, mut o) = (Vec::new(), Vec::new());
    served.get(0).encode(&mut s);
    offline.get(0).encode(&mut o);
    assert_ne!(s, o, "distinct pairs");
    assert_eq!(decode(&s).render(), r#"["a", null]"#);
    assert_eq!(decode(&o).render(), r#"["a", ""]"#);
    // Sorting a list with nulls explains an order swap.
    assert_eq!(
        classify(
            &Owned::NumList(vec![None, Some(1.0)]),
            &Owned::NumList(vec![Some(1.0), None])
        ),
        LIST_ORDER
    );
    assert_eq!(
        classify(
            &Owned::NumList(vec![None]),
            &Owned::NumList(vec![Some(0.0)])
        ),
        OTHER
    );
}

/// Temporal values compare in microseconds whatever their unit: 1000 ms is 1000000 us, a
/// date is its midnight UTC, also inside lists (as floats there).
#[test]
fn temporal_units_are_normalised() {
    use arrow_array::types::{TimestampMicrosecondType, TimestampMillisecondType};
    use arrow_array::{
        Date32Array, Date64Array, Time32SecondArray, Time64NanosecondArray,
        TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
        TimestampSecondArray,
    };
    // Scalars are exact, in nanoseconds; compared in microseconds (scale 3).
    let num = |a: ArrayRef| match to_domain(&a, Domain::Number).unwrap() {
        DArr::Exact(v, u) => exact_f64(v.value(0), u),
        other => panic!("{other:?}"),
    };
    let us = 1_700_000_000_000_000i64;
    assert_eq!(
        num(Arc::new(TimestampSecondArray::from(vec![us / 1_000_000]))),
        us as f64
    );
    assert_eq!(
        num(Arc::new(TimestampMillisecondArray::from(vec![us / 1000]))),
        us as f64
    );
    assert_eq!(
        num(Arc::new(
            TimestampMicrosecondArray::from(vec![us]).with_timezone("UTC")
        )),
        us as f64
    );
    assert_eq!(
        num(Arc::new(TimestampNanosecondArray::from(vec![
            us * 1000 + 500
        ]))),
        us as f64 + 0.5
    );
    assert_eq!(
        num(Arc::new(TimestampMillisecondArray::from(vec![1000]))),
        1e6
    );
    // 2023-11-14 as a date, as milliseconds and as its midnight in microseconds.
    let day = 19_675i32;
    let midnight = i64::from(day) * 86_400_000_000;
    assert_eq!(num(Arc::new(Date32Array::from(vec![day]))), midnight as f64);
    assert_eq!(
        num(Arc::new(Date64Array::from(vec![midnight / 1000]))),
        midnight as f64
    );
    assert_eq!(num(Arc::new(Time32SecondArray::from(vec![2]))), 2e6);
    assert_eq!(num(Arc::new(Time64NanosecondArray::from(vec![2000]))), 2.0);

    let ms: ArrayRef = Arc::new(ListArray::from_iter_primitive::<
        TimestampMillisecondType,
        _,
        _,
    >(vec![Some(vec![Some(1000), None])]));
    let micros: ArrayRef = Arc::new(ListArray::from_iter_primitive::<
        TimestampMicrosecondType,
        _,
        _,
    >(vec![Some(vec![Some(1_000_000), None])]));
    let (a, b) = (
        list_of(ms, Domain::NumberList),
        list_of(micros, Domain::NumberList),
    );
    assert_eq!(compare(a.get(0), b.get(0), 0.0, 0.0), Outcome::Equal);
}

/// Structs, maps and lists of lists compare as text (each as Arrow prints it); lists whose
/// elements are structs or maps are refused with why, at planning, not mid-diff.
#[test]
fn nested_types_compare_as_text_or_say_why_not() {
    let item = |dt: DataType| Arc::new(Field::new_list_field(dt, true));
    let list = |dt: DataType| DataType::List(item(dt));
    let st = DataType::Struct(
        vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Utf8, true),
        ]
        .into(),
    );
    let entries = Field::new(
        "entries",
        DataType::Struct(
            vec![
                Field::new("keys", DataType::Utf8, false),
                Field::new("values", DataType::Float64, true),
            ]
            .into(),
        ),
        false,
    );
    let map = DataType::Map(Arc::new(entries), false);
    for (dt, domain) in [
        (st.clone(), Domain::Text),
        (map.clone(), Domain::Text),
        (list(list(DataType::Float32)), Domain::TextList),
        (
            DataType::FixedSizeList(item(list(DataType::Utf8)), 2),
            Domain::TextList,
        ),
        // Inner lists print as text, structs in them too.
        (
            DataType::LargeList(item(list(st.clone()))),
            Domain::TextList,
        ),
    ] {
        assert_eq!(domain_of(&dt, &dt), domain, "{dt}");
        assert_eq!(not_comparable(&dt, &dt, domain), None, "{dt}");
    }
    for (dt, why) in [
        (list(st.clone()), "lists of structs are not compared"),
        (list(map.clone()), "lists of maps are not compared"),
        (
            DataType::FixedSizeList(item(map.clone()), 2),
            "lists of maps are not compared",
        ),
    ] {
        let domain = domain_of(&dt, &dt);
        let reason = not_comparable(&dt, &dt, domain).unwrap_or_default();
        assert!(reason.starts_with(why), "{dt}: {reason}");
        // One side is enough.
        let other = list(DataType::Utf8);
        assert!(not_comparable(&other, &dt, domain_of(&other, &dt)).is_some());
    }
    // Against text, a list of structs prints as text like any value.
    assert_eq!(
        not_comparable(&list(st.clone()), &DataType::Utf8, Domain::Text),
        None
    );
}

#[test]
fn domains() {
    assert_eq!(
        domain_of(&DataType::Float32, &DataType::Int64),
        Domain::Number
    );
    assert_eq!(domain_of(&DataType::Utf8, &DataType::Int64), Domain::Text);
    let l = DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true)));
    let f = DataType::FixedSizeList(Arc::new(Field::new_list_field(DataType::Float32, false)), 2);
    assert_eq!(domain_of(&l, &f), Domain::NumberList);
    assert_eq!(logical_type(&l), logical_type(&f));
    let arr: ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![1]));
    match to_domain(&arr, Domain::Text).unwrap() {
        DArr::Text(b) => assert_eq!(b.value(0), b"1"),
        other => panic!("{other:?}"),
    }
}

/// Integers, booleans and decimals are exact; floats and Decimal256 are floats; the
/// tolerances that apply follow (a float on either side makes a float feature, a time
/// one a time feature).
#[test]
fn exact_and_float_forms() {
    use arrow_array::{BooleanArray, Decimal128Array, Int32Array, UInt64Array};
    let exact = |a: ArrayRef| match to_domain(&a, Domain::Number).unwrap() {
        DArr::Exact(v, u) => (v.value(0), u),
        other => panic!("{other:?}"),
    };
    assert_eq!(exact(Arc::new(Int32Array::from(vec![-7]))), (-7, Unit::Int));
    assert_eq!(
        exact(Arc::new(UInt64Array::from(vec![u64::MAX]))),
        (i128::from(u64::MAX), Unit::Int)
    );
    assert_eq!(
        exact(Arc::new(BooleanArray::from(vec![true]))),
        (1, Unit::Bool)
    );
    let dec = Decimal128Array::from(vec![12345i128])
        .with_precision_and_scale(10, 3)
        .unwrap();
    assert_eq!(exact(Arc::new(dec)), (12345, Unit::Decimal(3)));
    let f: ArrayRef = Arc::new(arrow_array::Float32Array::from(vec![0.5f32]));
    assert!(matches!(
        to_domain(&f, Domain::Number).unwrap(),
        DArr::Num(_)
    ));

    use DataType::*;
    let ts = Timestamp(arrow_schema::TimeUnit::Millisecond, None);
    let list = |dt: DataType| DataType::List(Arc::new(Field::new_list_field(dt, true)));
    for (a, b, domain, want) in [
        (Int64, Int64, Domain::Number, Tolerance::Exact),
        (Int64, Float32, Domain::Number, Tolerance::Float),
        (Decimal128(10, 2), Int32, Domain::Number, Tolerance::Exact),
        (Boolean, Boolean, Domain::Number, Tolerance::Exact),
        (ts.clone(), Date32, Domain::Number, Tolerance::Time),
        (ts.clone(), Int64, Domain::Number, Tolerance::Time),
        (
            list(Int64),
            list(Int32),
            Domain::NumberList,
            Tolerance::Exact,
        ),
        (
            list(Float32),
            list(Int32),
            Domain::NumberList,
            Tolerance::Float,
        ),
        (
            list(ts.clone()),
            list(ts),
            Domain::NumberList,
            Tolerance::Time,
        ),
        (Utf8, Int64, Domain::Text, Tolerance::None),
    ] {
        assert_eq!(domain_of(&a, &b), domain, "{a} {b}");
        assert_eq!(tolerance_of(&a, &b, domain), want, "{a} {b}");
    }
}

/// A float variant of an integer feature fills its nulls as a float.
#[test]
fn variants_of_another_number_form_fill_nulls() {
    let ints: ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![Some(1), None]));
    let floats: ArrayRef = Arc::new(Float64Array::from(vec![None, Some(2.5)]));
    let merged = to_domain(&ints, Domain::Number)
        .unwrap()
        .or_else(&to_domain(&floats, Domain::Number).unwrap())
        .unwrap();
    assert_eq!(merged.null_count(), 0);
    assert!(matches!(merged.get(1), Val::Num(v) if v == 2.5));
    assert!(matches!(merged.get(0), Val::Num(v) if v == 1.0));
}

/// Structs print as JSON objects with their fields in name order: two writers' field
/// orders compare equal, and are not a type difference.
#[test]
fn structs_compare_by_field_name() {
    use arrow_array::{Int64Array, StringArray, StructArray, TimestampSecondArray};
    let a: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None]));
    let b: ArrayRef = Arc::new(StringArray::from(vec!["x", "y\"z"]));
    let t: ArrayRef = Arc::new(TimestampSecondArray::from(vec![0, 86_400]).with_timezone("+02:00"));
    let ab = StructArray::from(vec![
        (
            Arc::new(Field::new("a", a.data_type().clone(), true)),
            a.clone(),
        ),
        (
            Arc::new(Field::new("b", b.data_type().clone(), true)),
            b.clone(),
        ),
        (
            Arc::new(Field::new("t", t.data_type().clone(), true)),
            t.clone(),
        ),
    ]);
    let ba = StructArray::from(vec![
        (Arc::new(Field::new("t", t.data_type().clone(), true)), t),
        (Arc::new(Field::new("b", b.data_type().clone(), true)), b),
        (Arc::new(Field::new("a", a.data_type().clone(), true)), a),
    ]);
    assert_eq!(logical_type(ab.data_type()), logical_type(ba.data_type()));
    let (ab, ba): (ArrayRef, ArrayRef) = (Arc::new(ab), Arc::new(ba));
    let (x, y) = (
        to_domain(&ab, Domain::Text).unwrap(),
        to_domain(&ba, Domain::Text).unwrap(),
    );
    for i in 0..2 {
        assert_eq!(
            compare(x.get(i), y.get(i), 0.0, 0.0),
            Outcome::Equal,
            "row {i}"
        );
    }
    let Val::Text(row) = x.get(1) else {
        panic!("not text")
    };
    assert_eq!(
        std::str::from_utf8(row).unwrap(),
        r#"{"a": null, "b": "y\"z", "t": "1970-01-02T00:00:00Z"}"#
    );
}
