//! Unit tests of event decoding: JSON and protobuf events, event times in every unit and
//! format, and the reasons refused events are dead-lettered with.

use super::*;

#[test]
fn json_with_default_and_custom_field_names() {
    let e = from_json(
        br#"{"request_id":"r1","item_id":42,"event_time":1764439200123,"event_type":"click"}"#,
        &JsonFields::default(),
    )
    .unwrap();
    assert_eq!((e.request_id.as_str(), e.item_id.as_str()), ("r1", "42"));
    assert_eq!(e.time_us, 1_764_439_200_123_000);
    assert_eq!(e.kind, EventKind::Click);

    let fields = JsonFields {
        request_id: "rid".into(),
        item_id: "sku".into(),
        event_time: "ts".into(),
        event_type: "action".into(),
        labels: vec!["dwell".into()],
        ..JsonFields::default()
    };
    let e = from_json(
            br#"{"rid":"r2","sku":"a-1","ts":"2025-11-29T18:00:00.5+01:00","action":"impression","dwell":3.5}"#,
            &fields,
        )
        .unwrap();
    assert_eq!(e.time_us, 1_764_435_600_500_000);
    assert_eq!(e.labels.get("dwell"), Some(&3.5));
}

#[test]
fn json_fields_are_read_as_a_full_parse_would_read_them() {
    let f = JsonFields {
        labels: vec!["dwell".into(), "price".into()],
        ..JsonFields::default()
    };
    // Escaped names, other fields of every kind skipped, the last of a repeated name,
    // null as missing, a label that is not a number ignored.
    let e = from_json(
            br#"{"request_id":"r1","extra":{"a":[1,{"b":null}]},"item_id":"i0","item_id":"i1",
                "event_time":1764439201000,"event_type":"click","dwell":null,"price":"12","x":[true]}"#,
            &f,
        )
        .unwrap();
    assert_eq!((e.request_id.as_str(), e.item_id.as_str()), ("r1", "i1"));
    assert_eq!(
        (e.time_us, &e.kind),
        (1_764_439_201_000_000, &EventKind::Click)
    );
    assert!(e.labels.is_empty(), "{:?}", e.labels);
    // One field named twice in the config fills both.
    let twice = JsonFields {
        labels: vec!["event_time".into()],
        ..JsonFields::default()
    };
    let e = from_json(
        br#"{"request_id":7,"item_id":"i","event_time":1764439200005,"event_type":"impression"}"#,
        &twice,
    )
    .unwrap();
    assert_eq!(e.request_id, "7");
    assert_eq!(e.labels.get("event_time"), Some(&1_764_439_200_005.0));
    // Trailing garbage after the object is not JSON.
    assert_eq!(
            from_json(
                br#"{"request_id":"r","item_id":"i","event_time":1764439200123,"event_type":"click"} x"#,
                &f
            )
            .unwrap_err()
            .reason().as_str(),
            "bad_json"
        );
    let err = from_json(
        br#"{"request_id":"r","item_id":true,"event_time":1764439200123,"event_type":"click"}"#,
        &f,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "field \"item_id\": expected a non-empty string or an integer, got true"
    );
}

#[test]
fn bad_events_say_why() {
    let f = JsonFields::default();
    for (payload, reason) in [
        (&b"{not json"[..], "bad_json"),
        (b"[1,2]", "bad_json"),
        (
            br#"{"item_id":"i","event_time":1764439200123,"event_type":"click"}"#,
            "bad_field",
        ),
        (
            br#"{"request_id":"r","item_id":"i","event_time":"yesterday","event_type":"click"}"#,
            "bad_field",
        ),
        (
            br#"{"request_id":"r","item_id":1.5,"event_time":1764439200123,"event_type":"click"}"#,
            "bad_field",
        ),
        (
            br#"{"request_id":"r","item_id":"i","event_time":1764439200123,"event_type":""}"#,
            "unknown_event_type",
        ),
    ] {
        assert_eq!(
            from_json(payload, &f).unwrap_err().reason().as_str(),
            reason,
            "{:?}",
            String::from_utf8_lossy(payload)
        );
    }
    assert_eq!(
        from_protobuf(&[0xff, 0xff]).unwrap_err().reason().as_str(),
        "bad_protobuf"
    );
}

#[test]
fn protobuf_events_decode() {
    let m = Impression {
        request_id: "r".into(),
        item_id: "i".into(),
        event_time: Some(prost_types::Timestamp {
            seconds: 1_764_439_200,
            nanos: 5_000,
        }),
        event_type: EventType::Conversion as i32,
        event_name: String::new(),
        labels: [("revenue".to_string(), 9.5)].into(),
        event_id: "ev-7".into(),
    };
    let e = from_protobuf(&m.encode_to_vec()).unwrap();
    assert_eq!(e.time_us, 1_764_439_200_000_005);
    assert_eq!(e.kind, EventKind::Conversion);
    assert_eq!(e.labels.get("revenue"), Some(&9.5));
    assert_eq!(e.event_id.as_deref(), Some("ev-7"));
    // Unset, it is no id (proto3 cannot tell an empty string from a missing one).
    let e = from_protobuf(
        &Impression {
            event_id: String::new(),
            ..m
        }
        .encode_to_vec(),
    )
    .unwrap();
    assert_eq!(e.event_id, None);
}

#[test]
fn rfc3339_matches_known_instants() {
    let us = |s: &str| crate::time::parse_rfc3339(s).map(|(s, ns)| s * 1_000_000 + ns / 1000);
    assert_eq!(us("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(us("2000-03-01T00:00:00Z"), Some(951_868_800_000_000));
    assert_eq!(us("2025-11-29T18:00:00.25Z"), Some(1_764_439_200_250_000));
    assert_eq!(
        us("2025-11-29T19:30:00.123456789+01:30"),
        Some(1_764_439_200_123_456)
    );
    assert_eq!(
        us("2025-11-29 16:00:00.0000001-02:00"),
        Some(1_764_439_200_000_000)
    );
    assert_eq!(
        crate::time::parse_rfc3339("2200-01-01T00:00:00Z"),
        Some((END_EVENT_TIME_S, 0))
    );
    assert_eq!(us("2026-13-29T18:00:00Z"), None);
}

/// Event times in JSON with a malformed offset or other bytes where digits belong, non-ASCII
/// characters included: each is refused as a bad field, none panics (slicing text by byte
/// positions used to panic inside a multi-byte character).
#[test]
fn malformed_rfc3339_times_are_bad_fields_not_panics() {
    let f = JsonFields::default();
    for time in [
        "2025-11-29T18:00:00+0é00",
        "2025-11-29T18:00:00+00é0",
        "2025-11-29T18:00:00+é:00",
        "2025-11-29T18:00:00+00:é",
        "2025-11-29T18:00:00é0:00",
        "2025-11-29T18:00:00.5+0é00",
        "2025-11-29T18:00:00.é",
        "2025-11-29T18:00:00+01x00",
        "2025-11-29T18:00:00+1:000",
        "2025-11-29T18:00:00+-1:00",
        "2025-11-29T18:00:00++1:00",
        "2025-11-29T18:00:00+24:00",
        "2025-11-29T18:00:00+01:60",
        "2025-11-29T18:00:00+01:00Z",
        "2025-11-29T18:00:00+01",
        "2025-11-29T18:00:00+",
        "2025-11-29T18:00:00",
        "2025-11-29T18:00:00.Z",
        "2025-11-29T+8:00:00Z",
        "2025-11-29T18x00x00Z",
        "2025-11-29T18:00:0éZ",
        "2025-1é-29T18:00:00Z",
        "é025-11-29T18:00:00Z",
        "2025-11-29T18:00:00ZZ",
        "2025-11-29T18:00:00Zé",
    ] {
        let payload = format!(
            r#"{{"request_id":"r","item_id":"i","event_time":"{time}","event_type":"click"}}"#
        );
        let err = from_json(payload.as_bytes(), &f).unwrap_err();
        assert_eq!(err.reason().as_str(), "bad_field", "{time:?}: {err}");
    }
}

/// Event times before 2000 or from 2200 on, however they come, are refused with their own
/// reason: microseconds in an epoch-milliseconds field (the year ~57,000) used to pass and
/// pin the watermark in the far future, and seconds there (January 1970) joined nothing.
#[test]
fn event_times_outside_the_window_are_refused_and_say_so() {
    let f = JsonFields::default();
    let json = |time: &str| {
        from_json(
            format!(
                r#"{{"request_id":"r","item_id":"i","event_time":{time},"event_type":"click"}}"#
            )
            .as_bytes(),
            &f,
        )
    };
    for time in [
        "1764439200123000",
        "7258118400000",
        "-1",
        "0",
        "1764439200",
        "946684799999",
        "9223372036854775807",
        "-9223372036854775808",
        "18446744073709551615",
        r#""2200-01-01T00:00:00Z""#,
        r#""9999-12-31T23:59:59.999999Z""#,
        r#""1969-12-31T23:59:59.999999Z""#,
        r#""1970-01-01T00:30:00+01:00""#,
        r#""1999-12-31T23:59:59.999999Z""#,
        r#""1764439200""#,
        r#""0000-01-01T00:00:00Z""#,
    ] {
        let err = json(time).unwrap_err();
        assert_eq!(
            err.reason().as_str(),
            "event_time_out_of_range",
            "{time}: {err}"
        );
        assert!(err.to_string().contains(EVENT_TIME_WINDOW), "{err}");
    }
    // The edges of the window.
    assert_eq!(
        json("946684800000").map(|e| e.time_us),
        Ok(946_684_800_000_000)
    );
    assert_eq!(
        json("7258118399999").map(|e| e.time_us),
        Ok(7_258_118_399_999_000)
    );
    assert_eq!(
        json(r#""2199-12-31T23:59:59.999999Z""#).map(|e| e.time_us),
        Ok(7_258_118_399_999_999)
    );

    let impression = |seconds: i64, nanos: i32| {
        from_impression(Impression {
            request_id: "r".into(),
            item_id: "i".into(),
            event_time: Some(prost_types::Timestamp { seconds, nanos }),
            event_type: EventType::Impression as i32,
            event_name: String::new(),
            labels: Default::default(),
            event_id: String::new(),
        })
    };
    for (seconds, nanos) in [
        (i64::MAX, 999_999_999),
        (i64::MIN, 0),
        (-1, 999_999_999),
        (0, 0),
        (MIN_EVENT_TIME_S - 1, 999_999_999),
        (END_EVENT_TIME_S, 0),
        (1_764_439_200_123, 0),
    ] {
        let err = impression(seconds, nanos).unwrap_err();
        assert_eq!(
            err.reason().as_str(),
            "event_time_out_of_range",
            "{seconds} {nanos}: {err}"
        );
    }
    for nanos in [-1, i32::MIN, 1_000_000_000, i32::MAX] {
        let err = impression(1_764_439_200, nanos).unwrap_err();
        assert_eq!(err.reason().as_str(), "bad_field", "{nanos}: {err}");
        assert!(err.to_string().contains("nanos"), "{err}");
    }
    assert_eq!(
        impression(END_EVENT_TIME_S - 1, 999_999_999).map(|e| e.time_us),
        Ok(7_258_118_399_999_999)
    );
    assert_eq!(
        impression(MIN_EVENT_TIME_S, 0).map(|e| e.time_us),
        Ok(946_684_800_000_000)
    );
}

/// The event time of a JSON click whose `event_time` is `time` (JSON text) in `unit`.
fn time_at(unit: TimeUnit, time: &str) -> Result<i64, EventError> {
    let f = JsonFields {
        event_time_unit: unit,
        ..JsonFields::default()
    };
    from_json(
        format!(r#"{{"request_id":"r","item_id":"i","event_time":{time},"event_type":"click"}}"#)
            .as_bytes(),
        &f,
    )
    .map(|e| e.time_us)
}

/// A fraction is read from the number's decimal digits, not from the double nearest them.
#[test]
fn fractional_times_are_read_from_their_digits_to_the_microsecond() {
    let at = time_at;
    // Every microsecond of a millisecond, from numbers and from text: the nearest double
    // of `...547.283` is below it, and read through it the time was 1 us early.
    let ms = 1_796_222_028_547i64;
    for us in 0..1000 {
        let want = Ok(ms * 1000 + us);
        let text = format!("{ms}.{us:03}");
        assert_eq!(at(TimeUnit::Milliseconds, &text), want, "{text}");
        assert_eq!(at(TimeUnit::Milliseconds, &format!("\"{text}\"")), want);
    }
    assert_eq!(
        at(TimeUnit::Milliseconds, "1796222028547.283"),
        Ok(1_796_222_028_547_283)
    );
    // Seconds written to the microsecond, and a fraction past it dropped, not rounded.
    for us in [0, 1, 283, 999_999, 547_283] {
        let want = Ok(1_796_222_028_000_000 + us);
        assert_eq!(at(TimeUnit::Seconds, &format!("1796222028.{us:06}")), want);
        assert_eq!(
            at(TimeUnit::Seconds, &format!("\"1796222028.{us:06}\"")),
            want
        );
    }
    assert_eq!(
        at(TimeUnit::Seconds, r#""1796222028.5472839""#),
        Ok(1_796_222_028_547_283)
    );
    assert_eq!(
        at(TimeUnit::Microseconds, r#""1796222028547283.9""#),
        Ok(1_796_222_028_547_283)
    );
}

#[test]
fn an_rfc3339_day_the_calendar_lacks_is_a_bad_field() {
    let event = br#"{"request_id":"r","item_id":"i","event_time":"2026-02-31T00:00:00Z","event_type":"click"}"#;
    let err = from_json(event, &JsonFields::default()).unwrap_err();
    assert_eq!(err.reason().as_str(), "bad_field", "{err}");
    assert!(err.to_string().contains("2026-02-31"), "{err}");
}

/// Apps send event times in the unit their language makes easy: each configured unit reads
/// integers exactly, fractions to the nanosecond, and numbers sent as text; the same instant
/// comes out of each.
#[test]
fn event_times_in_every_unit_read_the_same_instant() {
    let at = time_at;
    let instant = Ok(1_764_439_200_250_000);
    for (unit, times) in [
        (
            TimeUnit::Seconds,
            ["1764439200.25", r#""1764439200.25""#, "1764439200.250000"],
        ),
        (
            TimeUnit::Milliseconds,
            ["1764439200250", r#""1764439200250""#, "1764439200250.0"],
        ),
        (
            TimeUnit::Microseconds,
            [
                "1764439200250000",
                r#""1764439200250000""#,
                "1.76443920025e15",
            ],
        ),
        (
            TimeUnit::Nanoseconds,
            [
                "1764439200250000000",
                r#""1764439200250000000""#,
                r#""1764439200250000000""#,
            ],
        ),
    ] {
        for time in times {
            assert_eq!(at(unit, time), instant, "{unit:?} {time}");
        }
    }
    // A millisecond's fraction is kept to the microsecond.
    assert_eq!(
        at(TimeUnit::Milliseconds, "1764439200250.5"),
        Ok(1_764_439_200_250_500)
    );
    // Seconds where milliseconds are configured: refused, and the message says how to fix it.
    let err = at(TimeUnit::Milliseconds, "1764439200").unwrap_err();
    assert_eq!(err.reason().as_str(), "event_time_out_of_range");
    assert!(
        err.to_string().contains("1764439200 (milliseconds)"),
        "{err}"
    );
    assert!(err.to_string().contains("event-time-unit"), "{err}");
    // Milliseconds where seconds are configured: the year ~57,000.
    assert_eq!(
        at(TimeUnit::Seconds, "1764439200250")
            .unwrap_err()
            .reason()
            .as_str(),
        "event_time_out_of_range"
    );
    // Text that is neither a number nor RFC 3339, and numbers that are not times.
    for time in [
        r#""1e12""#,
        r#""NaN""#,
        r#""inf""#,
        r#""1.2.3""#,
        r#""-""#,
        r#""""#,
        r#"" 1764439200250""#,
    ] {
        let err = at(TimeUnit::Milliseconds, time).unwrap_err();
        assert_eq!(err.reason().as_str(), "bad_field", "{time}: {err}");
    }
    assert_eq!(
        at(TimeUnit::Seconds, "1e300")
            .unwrap_err()
            .reason()
            .as_str(),
        "bad_field"
    );
    // Config spelling (the joiner's config tests read it from TOML and the environment).
    let fields: JsonFields = serde_json::from_str(r#"{"event-time-unit":"seconds"}"#).unwrap();
    assert_eq!(fields.event_time_unit, TimeUnit::Seconds);
    assert!(serde_json::from_str::<JsonFields>(r#"{"event-time-unit":"minutes"}"#).is_err());
}

/// An app's own names for its events, in any case, are the events they are configured
/// as; the defaults match in any case too; names that cannot be meant are refused.
#[test]
fn event_types_are_the_apps_names_in_any_case() {
    let kind = |fields: &JsonFields, name: &str| {
        from_json(
                format!(
                    r#"{{"request_id":"r","item_id":"i","event_time":1764439200123,"event_type":"{name}"}}"#
                )
                .as_bytes(),
                fields,
            )
            .map(|e| e.kind)
    };
    let defaults = JsonFields::default();
    for (name, expected) in [
        ("impression", EventKind::Impression),
        ("IMPRESSION", EventKind::Impression),
        ("Click", EventKind::Click),
        ("CONVERSION", EventKind::Conversion),
        ("view", EventKind::Other("view".into())),
        ("Dwell", EventKind::Other("Dwell".into())),
    ] {
        assert_eq!(kind(&defaults, name), Ok(expected), "{name}");
    }
    let app: JsonFields = serde_json::from_str(
        r#"{"event-types":{"impression":["view","exposure"],"conversion":["purchase"]}}"#,
    )
    .unwrap();
    assert!(app.event_types.check().is_ok());
    for (name, expected) in [
        ("VIEW", EventKind::Impression),
        ("exposure", EventKind::Impression),
        // Not an impression any more: only the names given are.
        ("impression", EventKind::Other("impression".into())),
        ("click", EventKind::Click),
        ("Purchase", EventKind::Conversion),
        ("conversion", EventKind::Other("conversion".into())),
    ] {
        assert_eq!(kind(&app, name), Ok(expected), "{name}");
    }
    for (types, says) in [
        (r#"{"impression":[]}"#, "at least one"),
        (r#"{"click":[""]}"#, "empty name"),
        (
            r#"{"impression":["view"],"click":["View"]}"#,
            "names both impressions and clicks",
        ),
        (
            r#"{"click":["tap"],"conversion":["TAP"]}"#,
            "names both clicks and conversions",
        ),
    ] {
        let t: EventTypes = serde_json::from_str(types).unwrap();
        let err = t.check().unwrap_err();
        assert!(err.contains(says), "{types}: {err}");
    }
}

/// Apps whose producers use Confluent Schema Registry serializers put a header in front of
/// every record: the events read as without it, JSON and protobuf (message indexes of every
/// length); a header cut short is a bad record, not a panic.
#[test]
fn schema_registry_framed_events_read_as_plain_ones() {
    let json =
        br#"{"request_id":"r","item_id":"i","event_time":1764439200123,"event_type":"click"}"#;
    let header = [schema_registry::MAGIC, 0, 0, 0, 42];
    let plain = from_json(json, &JsonFields::default()).unwrap();
    let framed = from_json(&[&header[..], json].concat(), &JsonFields::default()).unwrap();
    assert_eq!(framed, plain);

    let m = Impression {
        request_id: "r".into(),
        item_id: "i".into(),
        event_time: Some(prost_types::Timestamp {
            seconds: 1_764_439_200,
            nanos: 0,
        }),
        event_type: EventType::Impression as i32,
        event_name: String::new(),
        labels: Default::default(),
        event_id: String::new(),
    }
    .encode_to_vec();
    let plain = from_protobuf(&m).unwrap();
    // [0] as its shorthand, [0] spelled out, and [1, 2] (zigzag: count 2 is 4).
    for indexes in [&[0u8][..], &[2, 0], &[4, 1, 2]] {
        let framed = [&header[..], indexes, &m].concat();
        assert_eq!(from_protobuf(&framed).unwrap(), plain, "{indexes:?}");
    }
    for cut in [&[0u8][..], &[0, 0, 0], &[0, 0, 0, 0, 42]] {
        assert_eq!(
            from_protobuf(cut).unwrap_err().reason().as_str(),
            "bad_protobuf",
            "{cut:?}"
        );
        assert_eq!(
            from_json(cut, &JsonFields::default())
                .unwrap_err()
                .reason()
                .as_str(),
            "bad_json",
            "{cut:?}"
        );
    }
    let too_many = [&header[..], &[0xff, 0x01]].concat();
    assert!(
        from_protobuf(&too_many)
            .unwrap_err()
            .to_string()
            .contains("indexes"),
        "{:?}",
        from_protobuf(&too_many)
    );
}

/// Fields of nested objects (as analytics events nest them) are reached by dotted paths;
/// a missing one is missing; a top-level key that holds a dot is taken as it is.
#[test]
fn dotted_field_names_reach_into_nested_objects() {
    let fields = JsonFields {
        request_id: "context.request.id".into(),
        item_id: "properties.product_id".into(),
        event_time: "timestamp".into(),
        event_type: "event".into(),
        labels: vec!["properties.price".into(), "properties.tags.1".into()],
        ..JsonFields::default()
    };
    let e = from_json(
        br#"{"event":"click","timestamp":"2025-11-29T18:00:00Z",
                "context":{"request":{"id":"r1"},"ip":"10.0.0.1"},
                "properties":{"product_id":42,"price":9.5,"tags":[0,3]}}"#,
        &fields,
    )
    .unwrap();
    assert_eq!((e.request_id.as_str(), e.item_id.as_str()), ("r1", "42"));
    assert_eq!(e.labels.get("properties.price"), Some(&9.5));
    assert_eq!(e.labels.get("properties.tags.1"), Some(&3.0));
    let err = from_json(
        br#"{"event":"click","timestamp":"2025-11-29T18:00:00Z","context":{"request":{}},
                "properties":{"product_id":42}}"#,
        &fields,
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "field \"context.request.id\": missing");
    let literal = JsonFields {
        request_id: "meta.rid".into(),
        ..JsonFields::default()
    };
    let e = from_json(
        br#"{"meta.rid":"r2","item_id":"i","event_time":1764439200123,"event_type":"click"}"#,
        &literal,
    )
    .unwrap();
    assert_eq!(e.request_id, "r2");
}

#[test]
fn boolean_labels_read_as_one_and_zero() {
    let f = JsonFields {
        labels: vec!["purchased".into(), "returned".into(), "price".into()],
        ..JsonFields::default()
    };
    let e = from_json(
        br#"{"request_id":"r","item_id":"i","event_time":1764439200123,"event_type":"conversion",
                "purchased":true,"returned":false,"price":"12"}"#,
        &f,
    )
    .unwrap();
    assert_eq!(e.labels.get("purchased"), Some(&1.0));
    assert_eq!(e.labels.get("returned"), Some(&0.0));
    // Text is not a number, even when it spells one.
    assert_eq!(e.labels.get("price"), None);
}

#[test]
fn event_ids_are_read_when_configured_and_absent_ones_are_no_id() {
    let f = JsonFields {
        event_id: Some("meta.event_id".into()),
        ..JsonFields::default()
    };
    let base = r#""request_id":"r","item_id":"i","event_time":1764439200123,"event_type":"click""#;
    let read = |extra: &str| from_json(format!("{{{base}{extra}}}").as_bytes(), &f);
    assert_eq!(
        read(r#","meta":{"event_id":"3f1c"}"#)
            .unwrap()
            .event_id
            .as_deref(),
        Some("3f1c")
    );
    assert_eq!(
        read(r#","meta":{"event_id":77}"#)
            .unwrap()
            .event_id
            .as_deref(),
        Some("77")
    );
    // An app that does not send one yet: its events count as they always did.
    for extra in [
        "",
        r#","meta":{}"#,
        r#","meta":{"event_id":null}"#,
        r#","meta":{"event_id":""}"#,
    ] {
        assert_eq!(read(extra).unwrap().event_id, None, "{extra}");
    }
    let err = read(r#","meta":{"event_id":{"a":1}}"#).unwrap_err();
    assert_eq!(err.reason().as_str(), "bad_field");
    assert!(err.to_string().contains("meta.event_id"), "{err}");
    // Not configured: never read, even when the event carries one.
    let e = from_json(
        format!(r#"{{{base},"event_id":"x"}}"#).as_bytes(),
        &JsonFields::default(),
    )
    .unwrap();
    assert_eq!(e.event_id, None);
}

#[test]
fn saturating_us_saturates() {
    let t = |seconds, nanos| saturating_us(&prost_types::Timestamp { seconds, nanos });
    assert_eq!(t(10, 5_000), 10_000_005);
    assert_eq!(t(i64::MAX, 999_999_999), i64::MAX);
    assert_eq!(t(i64::MIN, -999_999_999), i64::MIN);
}
