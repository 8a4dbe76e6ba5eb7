//! End to end through the real broker: a FeatureLog carrying every datatype of the protocol is
//! encoded, produced, consumed back and decoded, and every field comes back bit for bit; and a
//! transaction of a `BaseProducer` aborts with featurelog's abort.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::time::Duration;

use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};
use prost::Message as _;
use rdkafka::Message as _;
use rdkafka::producer::FutureRecord;

fn feature(name: &str, datatype: DataType, row_shape: Vec<i64>, values: Values) -> Feature {
    Feature {
        // A one-element column stands for a value shared by the whole request.
        per_request: name == "user_segment",
        ..Feature::column(name, datatype, row_shape, values)
    }
}

/// Three candidates, one column per datatype, with the values that break careless encoders:
/// extremes, negative zero, a NaN with a payload, a subnormal, bytes that are not UTF-8.
fn sample_record() -> FeatureLog {
    let nan_with_payload = f32::from_bits(0x7fc0_1234);
    FeatureLog {
        request_id: "req-7f3a".into(),
        model_name: "ranker".into(),
        model_version: "3".into(),
        served_at: Some(prost_types::Timestamp {
            seconds: 1_764_432_000,
            nanos: 123_456_789,
        }),
        sidecar_instance: "pod-ranker-0".into(),
        allow_list_version: "sha256:ab12".into(),
        row_count: 3,
        candidate_ids: vec!["item-1".into(), "item-2".into(), "42".into()],
        candidate_int_ids: Vec::new(),
        features: vec![
            feature(
                "is_new",
                DataType::Bool,
                vec![],
                Values {
                    bool_values: vec![true, false, true],
                    ..Values::default()
                },
            ),
            feature(
                "age_bucket",
                DataType::Int8,
                vec![],
                Values {
                    int32_values: vec![i8::MIN.into(), 0, i8::MAX.into()],
                    ..Values::default()
                },
            ),
            feature(
                "user_segment",
                DataType::Int32,
                vec![],
                Values {
                    int32_values: vec![7],
                    ..Values::default()
                },
            ),
            feature(
                "user_id",
                DataType::Int64,
                vec![],
                Values {
                    int64_values: vec![i64::MIN, -1, i64::MAX],
                    ..Values::default()
                },
            ),
            feature(
                "views",
                DataType::Uint16,
                vec![],
                Values {
                    uint32_values: vec![0, 1, u16::MAX.into()],
                    ..Values::default()
                },
            ),
            feature(
                "item_hash",
                DataType::Uint64,
                vec![],
                Values {
                    uint64_values: vec![0, 1 << 63, u64::MAX],
                    ..Values::default()
                },
            ),
            feature(
                "ctr_prior",
                DataType::Fp32,
                vec![],
                Values {
                    fp32_values: vec![-0.0, nan_with_payload, f32::from_bits(1)],
                    ..Values::default()
                },
            ),
            feature(
                "embedding",
                DataType::Fp32,
                vec![2],
                Values {
                    fp32_values: vec![0.1, 0.2, 1.5, -2.5, f32::INFINITY, f32::MIN_POSITIVE],
                    ..Values::default()
                },
            ),
            feature(
                "price",
                DataType::Fp64,
                vec![],
                Values {
                    fp64_values: vec![0.1 + 0.2, f64::MAX, -f64::EPSILON],
                    ..Values::default()
                },
            ),
            feature(
                "score_half",
                DataType::Fp16,
                vec![],
                Values {
                    half_bits: vec![0x3c00, 0x7e01, 0x8000],
                    ..Values::default()
                },
            ),
            feature(
                "locale",
                DataType::Bytes,
                vec![],
                Values {
                    bytes_values: vec![
                        "en-US".into(),
                        "jp_JA".into(),
                        bytes::Bytes::from_static(&[0xff, 0x00, 0xfe]),
                    ],
                    ..Values::default()
                },
            ),
        ],
        outputs: vec![feature(
            "score",
            DataType::Fp32,
            vec![],
            Values {
                fp32_values: vec![0.91, 0.05, 0.5],
                ..Values::default()
            },
        )],
        parameters: [("surface".to_string(), "home".to_string())].into(),
    }
}

fn bits32(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

fn bits64(values: &[f64]) -> Vec<u64> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// Field-by-field, floats by their bits: `==` would call a NaN different from itself and `-0.0`
/// equal to `0.0`, and both would hide exactly the corruption this test is for.
fn assert_same_column(got: &Feature, want: &Feature) {
    let name = &want.name;
    assert_eq!(got.name, want.name);
    assert_eq!(got.datatype, want.datatype, "{name}: datatype");
    assert_eq!(got.row_shape, want.row_shape, "{name}: row shape");
    assert_eq!(got.per_request, want.per_request, "{name}: per request");
    let (g, w) = (got.values.as_ref().unwrap(), want.values.as_ref().unwrap());
    assert_eq!(g.bool_values, w.bool_values, "{name}: BOOL");
    assert_eq!(g.int32_values, w.int32_values, "{name}: INT8..INT32");
    assert_eq!(g.int64_values, w.int64_values, "{name}: INT64");
    assert_eq!(g.uint32_values, w.uint32_values, "{name}: UINT8..UINT32");
    assert_eq!(g.uint64_values, w.uint64_values, "{name}: UINT64");
    assert_eq!(
        bits32(&g.fp32_values),
        bits32(&w.fp32_values),
        "{name}: FP32 bits"
    );
    assert_eq!(
        bits64(&g.fp64_values),
        bits64(&w.fp64_values),
        "{name}: FP64 bits"
    );
    assert_eq!(g.bytes_values, w.bytes_values, "{name}: BYTES");
    assert_eq!(g.half_bits, w.half_bits, "{name}: FP16/BF16 bits");
}

#[tokio::test]
async fn feature_log_survives_the_real_broker_field_by_field() {
    let Some(kafka) = featurelog_testkit::kafka("feature_log_survives_the_real_broker") else {
        return;
    };
    let topic = kafka.unique_topic("roundtrip", 3).await;
    let sent = sample_record();
    let payload = sent.encode_to_vec();

    let delivery = kafka
        .producer()
        .send(
            FutureRecord::to(&topic)
                .key(&sent.request_id)
                .payload(&payload),
            Duration::from_secs(30),
        )
        .await
        .map_err(|(err, _)| err)
        .expect("the broker acknowledged the record");

    let consumer = kafka.consumer(&topic);
    let message = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
        .await
        .expect("the record came back within 60 s")
        .expect("consuming from the broker");
    assert_eq!(
        (message.partition(), message.offset()),
        (delivery.partition, delivery.offset)
    );
    assert_eq!(message.key(), Some(sent.request_id.as_bytes()));

    let got = FeatureLog::decode(message.payload().expect("a payload")).expect("a FeatureLog");
    assert_eq!(got.request_id, sent.request_id);
    assert_eq!(got.model_name, sent.model_name);
    assert_eq!(got.model_version, sent.model_version);
    assert_eq!(got.served_at, sent.served_at);
    assert_eq!(got.sidecar_instance, sent.sidecar_instance);
    assert_eq!(got.allow_list_version, sent.allow_list_version);
    assert_eq!(got.row_count, sent.row_count);
    assert_eq!(got.candidate_ids, sent.candidate_ids);
    assert_eq!(got.parameters, sent.parameters);
    assert_eq!(got.features.len(), sent.features.len());
    for (g, w) in got.features.iter().zip(&sent.features) {
        assert_same_column(g, w);
    }
    assert_eq!(got.outputs.len(), sent.outputs.len());
    for (g, w) in got.outputs.iter().zip(&sent.outputs) {
        assert_same_column(g, w);
    }
    // And the datatypes map back to the protocol's names a reader would see.
    let names: Vec<_> = got
        .features
        .iter()
        .map(|f| {
            DataType::try_from(f.datatype)
                .unwrap()
                .protocol_name()
                .unwrap()
        })
        .collect();
    assert_eq!(
        names,
        [
            "BOOL", "INT8", "INT32", "INT64", "UINT16", "UINT64", "FP32", "FP32", "FP64", "FP16",
            "BYTES"
        ]
    );
}

/// The joiner's router aborts its transaction when a rebalance takes its partitions, at a
/// moment of librdkafka's choosing: records of the transaction may have been sent a moment ago
/// and their delivery reports not yet polled. featurelog's abort still aborts, and a
/// read_committed reader (the join stage) sees none of the aborted records, only those of the
/// next transaction. (librdkafka's own abort, called as is on a `BaseProducer`, waits for the
/// application to poll those reports, which it cannot do while it is blocked in the abort: it
/// failed after its whole timeout, and the router stopped.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_with_delivery_reports_not_yet_polled_aborts() {
    use rdkafka::consumer::Consumer as _;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
    let Some(kafka) =
        featurelog_testkit::kafka("a_transaction_with_delivery_reports_not_yet_polled_aborts")
    else {
        return;
    };
    let topic = kafka.unique_topic("txn-abort", 1).await;
    let transactional_id = kafka.unique_group("txn-abort");
    let producer: BaseProducer = kafka
        .config
        .client_config(&[("transactional.id", &transactional_id)])
        .create()
        .unwrap();
    let producer = tokio::task::spawn_blocking(move || {
        producer.init_transactions(Duration::from_secs(60)).unwrap();
        producer.begin_transaction().unwrap();
        for i in 0..20 {
            producer
                .send(
                    BaseRecord::<str, str>::to(&topic)
                        .key("aborted")
                        .payload(&format!("aborted {i}")),
                )
                .map_err(|(err, _)| err)
                .unwrap();
        }
        // Delivered by now, most likely, and their reports waiting to be polled; or some still
        // in flight: either way the abort must not wait for the application.
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            producer.in_flight_count() > 0,
            "the reports were not polled"
        );
        featurelog_kafka::txn::abort_transaction(&producer, Duration::from_secs(20))
            .expect("the transaction aborts");
        producer.begin_transaction().unwrap();
        producer
            .send(
                BaseRecord::<str, str>::to(&topic)
                    .key("committed")
                    .payload("committed"),
            )
            .map_err(|(err, _)| err)
            .unwrap();
        producer
            .commit_transaction(Duration::from_secs(30))
            .unwrap();
        (producer, topic)
    })
    .await
    .unwrap();
    let (_producer, topic) = producer;

    let consumer: rdkafka::consumer::StreamConsumer = kafka
        .config
        .client_config(&[
            ("group.id", &kafka.unique_group("txn-abort-reader")),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
        ])
        .create()
        .unwrap();
    consumer.subscribe(&[&topic]).unwrap();
    let message = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
        .await
        .expect("the committed record within 60 s")
        .unwrap();
    // The aborted records come first in the partition: read_committed skips every one.
    assert_eq!(message.payload(), Some(&b"committed"[..]));
}
