//! `featurelog dev-broker` serves the Kafka protocol to other processes: this test process
//! produces to it and consumes from it, then stops it with SIGTERM and expects a clean exit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use featurelog_kafka::KafkaConfig;
use rdkafka::Message as _;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};

#[tokio::test]
async fn another_process_can_produce_to_and_consume_from_the_dev_broker() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args(["dev-broker", "--topic", "greetings:2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("featurelog dev-broker starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let bootstrap = line
        .trim()
        .strip_prefix("bootstrap.servers=")
        .unwrap_or_else(|| panic!("first line names the bootstrap servers, got {line:?}"))
        .to_owned();

    let kafka = KafkaConfig::new(bootstrap);
    let producer: FutureProducer = kafka.client_config(&[]).create().unwrap();
    for i in 0..5 {
        producer
            .send(
                FutureRecord::to("greetings")
                    .key(&format!("k{i}"))
                    .payload(&format!("hello {i}")),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }

    let consumer: StreamConsumer = kafka
        .client_config(&[
            ("group.id", "dev-broker-test"),
            ("auto.offset.reset", "earliest"),
        ])
        .create()
        .unwrap();
    consumer.subscribe(&["greetings"]).unwrap();
    let mut payloads = Vec::new();
    while payloads.len() < 5 {
        let message = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("messages within 30 s")
            .unwrap();
        payloads.push(String::from_utf8(message.payload().unwrap().to_vec()).unwrap());
    }
    payloads.sort();
    assert_eq!(
        payloads,
        ["hello 0", "hello 1", "hello 2", "hello 3", "hello 4"]
    );
    drop(consumer);
    drop(producer);

    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "dev-broker exits cleanly on SIGTERM: {status}"
    );
}
