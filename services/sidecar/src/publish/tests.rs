//! Unit tests of the publisher: the queue's bounds, the hand-over at a shutdown, and what a call
//! it cannot decode becomes (counted, dead-lettered within the budget, never published).

use prost::Message as _;
use rdkafka::Message as _;

use super::queue::body_bytes;
use super::*;
use crate::extract::framing::tests::frame;

/// A publisher with a ranker rule and no broker behind it: nothing is produced, the
/// queue and the shutdown are what is tested.
pub(crate) fn unconnected(config: &PublishConfig) -> (Publisher, Arc<Metrics>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("allow-list.toml");
    std::fs::write(&list, "[[model]]\nname = \"ranker\"\nfeatures = [\"f\"]\n").unwrap();
    let metrics = Arc::new(Metrics::new());
    let publisher = Publisher::start(
        &KafkaConfig::new("127.0.0.1:1"),
        config,
        AllowListHandle::load(&list).unwrap(),
        metrics.clone(),
        "test".into(),
        CancellationToken::new(),
    )
    .unwrap();
    (publisher, metrics, dir)
}

/// A call of `bytes` body bytes (zeros), half request, half response.
pub(crate) fn sized_call(bytes: usize) -> CapturedCall {
    CapturedCall {
        request: vec![Bytes::from(vec![0u8; bytes / 2])],
        response: vec![Bytes::from(vec![0u8; bytes - bytes / 2])],
        request_encoding: None,
        response_encoding: None,
        fallback_request_id: "r".into(),
        served_at: SystemTime::now(),
        headers: Vec::new(),
        rest: None,
    }
}

/// At a shutdown the connection of a call can be done before the call is handed over (its
/// response body is dropped a moment after the caller got its last frame): the call is
/// still taken, not counted as `shutting_down` (an end-to-end test lost a request's
/// record that way on a loaded machine).
#[tokio::test]
async fn a_call_answered_as_the_drain_ends_is_handed_over_not_dropped() {
    let (publisher, metrics, _dir) = unconnected(&PublishConfig::default());
    let publisher = Arc::new(publisher);
    let in_flight = publisher.call_in_flight();
    let late = publisher.clone();
    let handing_over = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        late.submit(sized_call(10));
        drop(in_flight);
    });
    publisher.shutdown(Duration::from_secs(2)).await;
    handing_over.await.unwrap();
    let dropped = |reason| metrics.dropped_count(reason);
    assert_eq!(dropped("shutting_down"), 0);
    assert_eq!(publisher.shared.calls_in_flight.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_queue_holds_at_most_its_byte_budget_of_bodies() {
    use featurelog_schemas::inference::infer_parameter::ParameterChoice;
    use featurelog_schemas::inference::{InferParameter, ModelInferRequest};

    let config = PublishConfig {
        queue_max_bytes: 1000,
        // No broker answers: on a loaded machine the controller could shed the calls this
        // test counts before a publisher thread takes them. Shedding has tests of its own.
        adaptive: crate::config::AdaptiveConfig {
            enabled: false,
            ..Default::default()
        },
        ..PublishConfig::default()
    };
    let (publisher, metrics, _dir) = unconnected(&config);
    let call = sized_call;
    let dropped = |reason| metrics.dropped_count(reason);
    publisher.submit(call(1001));
    assert_eq!(dropped("queue_full"), 1, "a call larger than the budget");

    // A request that names its model first is judged at once: not listed, it is not
    // queued at all; listed with a rule that reads no outputs, its response is let go.
    // `padding` is a request parameter the rule does not log, to size the request.
    let named = |model: &str, padding: usize, response: usize| {
        let padding = InferParameter {
            parameter_choice: Some(ParameterChoice::StringParam("p".repeat(padding))),
        };
        let message = ModelInferRequest {
            model_name: model.into(),
            id: "r".into(),
            parameters: [("padding".to_string(), padding)].into(),
            ..Default::default()
        }
        .encode_to_vec();
        let mut body = vec![0u8];
        body.extend((message.len() as u32).to_be_bytes());
        body.extend(message);
        CapturedCall {
            request: vec![Bytes::from(body)],
            response: vec![Bytes::from(vec![0u8; response])],
            ..call(0)
        }
    };
    let within = named("ranker", 580, 0);
    assert!((500..1000).contains(&body_bytes(&within)));
    publisher.submit(within);
    assert_eq!(dropped("queue_full"), 1, "a call within the budget");
    let skipped = || metrics.skipped_count("not_allow_listed");
    publisher.submit(named("other", 0, 10));
    assert_eq!(skipped(), 1);
    // Its response alone is twice the budget: kept, the call could never be queued.
    publisher.submit(named("ranker", 0, 2000));
    assert_eq!(dropped("queue_full"), 1);
    // Shutting down through a shared handle, as when connections outlive the drain.
    let shared = Arc::new(publisher);
    let held = shared.clone();
    shared.shutdown(Duration::from_millis(100)).await;
    // The shutdown drains the queue: both calls that were let in became records (handed to
    // the producer; no broker is behind it), so neither was queued only to be lost. Every
    // other outcome is named in the message, so that a failure says where the calls went.
    let counted = |all: &[&'static str], count: &dyn Fn(&'static str) -> u64| {
        let counts = all.iter().map(|r| (*r, count(r)));
        counts.filter(|(_, n)| *n > 0).collect::<Vec<_>>()
    };
    let dropped_reasons: Vec<&'static str> = Dropped::ALL.iter().map(|r| r.as_str()).collect();
    let skipped_reasons: Vec<&'static str> = Skipped::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        metrics.produced().records,
        2,
        "the calls within the budget are published; dropped {:?}, skipped {:?}",
        counted(&dropped_reasons, &|r| metrics.dropped_count(r)),
        counted(&skipped_reasons, &|r| metrics.skipped_count(r)),
    );
    held.submit(call(10));
    assert_eq!(dropped("shutting_down"), 1);
    assert_eq!(shared.shared.queue_bytes.load(Ordering::Relaxed), 0);
}

/// Calls whose request does not decode are described on the dead-letter topic (the model
/// and the id the app knows, never the body), at most the budget's burst at once; the
/// others are counted. The embedded broker stands in for Kafka: what is tested is what
/// the publisher hands the producer (tests/sidecar_faults.rs does it on a real broker).
#[tokio::test]
async fn calls_it_cannot_decode_are_dead_lettered_within_the_budget() {
    use rdkafka::Message as _;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Headers;

    let broker = featurelog_kafka::DevBroker::start(1).unwrap();
    broker.create_topic("dead", 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("allow-list.toml");
    std::fs::write(&list, "[[model]]\nname = \"ranker\"\nfeatures = [\"f\"]\n").unwrap();
    let metrics = Arc::new(Metrics::new());
    let config = PublishConfig {
        dead_letter_topic: "dead".into(),
        dead_letters_per_second: 2,
        ..PublishConfig::default()
    };
    let kafka = KafkaConfig::new(broker.bootstrap_servers());
    let handle = AllowListHandle::load(&list).unwrap();
    let publisher = Publisher::start(
        &kafka,
        &config,
        handle,
        metrics.clone(),
        "pod-a".into(),
        CancellationToken::new(),
    )
    .unwrap();
    // Names its model, then is not protobuf. The tensor bytes must not leave.
    let mut message = featurelog_schemas::inference::ModelInferRequest {
        model_name: "ranker".into(),
        ..Default::default()
    }
    .encode_to_vec();
    message.extend([0xff, 0xff, 0xff, b'S', b'E', b'C', b'R', b'E', b'T']);
    let mut body = vec![0u8];
    body.extend((message.len() as u32).to_be_bytes());
    body.extend(message);
    for i in 0..10 {
        publisher.submit(CapturedCall {
            request: vec![Bytes::from(body.clone())],
            fallback_request_id: format!("req-{i}"),
            ..sized_call(0)
        });
    }
    assert_eq!(publisher.shutdown(Duration::from_secs(10)).await, 0);
    assert_eq!(metrics.dropped_count("malformed_protobuf"), 10);
    let delivered = metrics.dead_letter_count("delivered");
    // A burst of twice the rate; one more if the ten took over half a second.
    assert!((4..=5).contains(&delivered), "{delivered} delivered");
    assert_eq!(metrics.dead_letter_count("rate_limited"), 10 - delivered);

    let consumer: BaseConsumer = kafka
        .client_config(&[("group.id", "t"), ("auto.offset.reset", "earliest")])
        .create()
        .unwrap();
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment
        .add_partition_offset("dead", 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let mut letters = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while (letters.len() as u64) < delivered && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            letters.push(m.detach());
        }
    }
    assert_eq!(letters.len() as u64, delivered);
    for (i, letter) in letters.iter().enumerate() {
        assert_eq!(letter.key(), Some(format!("req-{i}").as_bytes()));
        let headers = letter.headers().unwrap();
        let header = |name: &str| {
            headers
                .iter()
                .find(|h| h.key == name)
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(
            header("featurelog-error").as_deref(),
            Some("malformed_protobuf")
        );
        assert_eq!(
            header("featurelog-source").as_deref(),
            Some("sidecar/pod-a")
        );
        let payload = letter.payload().unwrap();
        assert!(
            !payload.windows(6).any(|w| w == b"SECRET"),
            "the body left the pod"
        );
        let json: serde_json::Value = serde_json::from_slice(payload).unwrap();
        assert_eq!(json["reason"], "malformed_protobuf");
        assert_eq!(json["model"], "ranker");
        assert_eq!(json["request_id"], format!("req-{i}").as_str());
        assert_eq!(json["request_bytes"], body.len());
        assert_eq!(json["sidecar"], "pod-a");
    }
}

/// A call whose tensor does not decode is dropped under the reason that says why, and
/// nothing of it reaches the topic; a good call among them is still logged. The fast path
/// (`direct`) must hand each of them to the general path, which owns the reasons. The
/// embedded broker stands in for Kafka, to read what was produced.
#[tokio::test]
async fn each_undecodable_tensor_is_counted_under_its_reason_and_never_published() {
    use featurelog_schemas::inference::ModelInferRequest;
    use featurelog_schemas::inference::model_infer_request::InferInputTensor;
    use featurelog_schemas::tensor::TensorValues;
    use rdkafka::consumer::{BaseConsumer, Consumer};

    let broker = featurelog_kafka::DevBroker::start(1).unwrap();
    broker.create_topic("features", 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("allow-list.toml");
    std::fs::write(&list, "[[model]]\nname = \"ranker\"\nfeatures = [\"f\"]\n").unwrap();
    let metrics = Arc::new(Metrics::new());
    let config = PublishConfig {
        topic: "features".into(),
        dead_letter_topic: String::new(),
        ..PublishConfig::default()
    };
    let kafka = KafkaConfig::new(broker.bootstrap_servers());
    let publisher = Publisher::start(
        &kafka,
        &config,
        AllowListHandle::load(&list).unwrap(),
        metrics.clone(),
        "pod-a".into(),
        CancellationToken::new(),
    )
    .unwrap();
    // The logged input `f`, in raw contents as Triton's clients send it.
    let call = |id: &str, datatype: &str, shape: &[i64], raw: Bytes| {
        let message = ModelInferRequest {
            model_name: "ranker".into(),
            id: id.into(),
            inputs: vec![InferInputTensor {
                name: "f".into(),
                datatype: datatype.into(),
                shape: shape.to_vec(),
                ..Default::default()
            }],
            raw_input_contents: vec![raw],
            ..Default::default()
        }
        .encode_to_vec();
        CapturedCall {
            request: frame(&message),
            ..sized_call(0)
        }
    };
    let six_floats = TensorValues::Fp32(vec![1.0; 6]).to_raw();
    publisher.submit(call("shape", "FP32", &[2, 4], six_floats.clone()));
    publisher.submit(call("datatype", "FP8", &[6], six_floats.clone()));
    // A length prefix of 10 before one byte.
    let bad_bytes = Bytes::from_static(&[10, 0, 0, 0, b'a']);
    publisher.submit(call("bytes", "BYTES", &[1], bad_bytes));
    publisher.submit(call("good", "FP32", &[6], six_floats));
    assert_eq!(publisher.shutdown(Duration::from_secs(10)).await, 0);

    for reason in ["shape_mismatch", "unknown_datatype", "bad_bytes"] {
        assert_eq!(metrics.dropped_count(reason), 1, "{reason}");
    }
    assert_eq!(metrics.produced().records, 1);
    let consumer: BaseConsumer = kafka
        .client_config(&[("group.id", "t"), ("auto.offset.reset", "earliest")])
        .create()
        .unwrap();
    let (_, end) = consumer
        .fetch_watermarks("features", 0, Duration::from_secs(10))
        .unwrap();
    assert_eq!(end, 1, "records on the topic");
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment
        .add_partition_offset("features", 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let record = loop {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            break m.detach();
        }
        assert!(
            Instant::now() < deadline,
            "the good call's record never came"
        );
    };
    assert_eq!(record.key(), Some(&b"good"[..]));
    let log =
        featurelog_schemas::featurelog::v1::FeatureLog::decode(record.payload().unwrap()).unwrap();
    assert_eq!(log.row_count, 6);
    assert_eq!(
        log.features[0].values.as_ref().unwrap().fp32_values,
        [1.0; 6]
    );
}
