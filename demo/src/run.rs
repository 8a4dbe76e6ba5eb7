//! The demo's steps: the broker and its topics, the model server, the sidecar and the joiner
//! started in this process, traffic sent until the joiner has written every row, then the
//! offline table and the diff.

use std::time::{Duration, Instant};

use featurelog_kafka::{DevBroker, KafkaConfig};
use tokio_util::sync::CancellationToken;

use crate::configs::{self, Topics};
use crate::error::{DemoError, io, write};
use crate::offline::write_offline;
use crate::rows::{STALL_LIMIT, count_rows, wait_for_rows};
use crate::traffic::send_traffic;
use crate::world::{self, World};
use crate::{DemoOptions, Progress, Stage, Summary};

/// Runs the demo. `progress` is called about once a second while traffic runs and while the
/// joiner catches up. `shutdown` stops it early (with an error, since the figures would be
/// partial).
pub async fn run(
    options: DemoOptions,
    shutdown: CancellationToken,
    mut progress: impl FnMut(Progress),
) -> Result<Summary, DemoError> {
    let started = Instant::now();
    let out = options.out_dir.clone();
    std::fs::create_dir_all(&out).map_err(io(&out))?;
    let out = out.canonicalize().map_err(io(&out))?;
    let dataset = out.join("dataset");
    if dataset.exists() {
        // A previous run's rows would be counted as this run's.
        std::fs::remove_dir_all(&dataset).map_err(io(&dataset))?;
    }
    let run_id = format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default()
    );
    let topics = Topics::new(&run_id);

    // The broker.
    let embedded = match &options.kafka {
        Some(_) => None,
        None => Some(DevBroker::start(1).map_err(|source| DemoError::Kafka {
            bootstrap: "embedded".into(),
            source: Box::new(source),
        })?),
    };
    let bootstrap = match (&options.kafka, &embedded) {
        (Some(b), _) => b.clone(),
        (None, Some(broker)) => broker.bootstrap_servers(),
        (None, None) => String::new(),
    };
    let kafka = KafkaConfig::new(bootstrap.clone());
    let kafka_err = |source| DemoError::Kafka {
        bootstrap: bootstrap.clone(),
        source: Box::new(source),
    };
    // The embedded broker implements no CreateTopics request: its topics, the joiner's
    // repartition topic included, are made directly in it.
    let repartition = format!("{}.impressions-by-request", topics.group);
    for (topic, partitions) in [
        (&topics.features, 4),
        (&topics.events, 3),
        (&topics.dead_letter, 1),
        (&repartition, 4),
    ] {
        match &embedded {
            Some(broker) => broker.create_topic(topic, partitions).map_err(kafka_err)?,
            None if *topic != repartition => featurelog_kafka::admin::ensure_topic(
                &kafka,
                topic,
                partitions,
                1,
                Duration::from_secs(30),
            )
            .await
            .map_err(kafka_err)?,
            None => {}
        }
    }

    // The model server.
    let model_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| DemoError::ModelServer(e.to_string()))?;
    let model_addr = model_listener
        .local_addr()
        .map_err(|e| DemoError::ModelServer(e.to_string()))?;
    let stop_model = CancellationToken::new();
    let model_task = tokio::spawn(featurelog_model_server::serve(
        featurelog_model_server::ReferenceModelServer::new([world::MODEL]),
        model_listener,
        stop_model.clone().cancelled_owned(),
    ));

    // The sidecar, from the files a deployment would use.
    let sidecar_toml = configs::write_sidecar(&out, model_addr, &bootstrap, &topics)?;
    let sidecar_config = featurelog_sidecar::SidecarConfig::load(&sidecar_toml)?;
    let stop_sidecar = CancellationToken::new();
    let sidecar = featurelog_sidecar::start(sidecar_config, stop_sidecar.clone()).await?;

    // The joiner, likewise.
    let join_toml = configs::write_joiner(&out, &bootstrap, &topics, embedded.is_some())?;
    let join_config = featurelog_joiner::config::JoinerConfig::load(&join_toml)
        .map_err(|e| DemoError::Joiner(e.to_string()))?;
    let dataset = join_config.output.path.clone();
    let stop_joiner = CancellationToken::new();
    let joiner = tokio::spawn(featurelog_joiner::run::run(
        join_config,
        stop_joiner.clone(),
    ));

    let world = World {
        seed: options.seed,
        candidates: options.candidates,
    };
    let traffic = send_traffic(
        &options,
        &world,
        &run_id,
        sidecar.local_addr,
        &kafka,
        &topics.events,
        &sidecar.metrics,
        &dataset,
        &shutdown,
        &mut progress,
    )
    .await;
    let traffic = match traffic {
        Ok(t) => t,
        Err(e) => {
            stop_joiner.cancel();
            stop_sidecar.cancel();
            stop_model.cancel();
            return Err(e);
        }
    };

    // Wait for the joiner to write a row per impression, for as long as rows keep coming.
    let expected = traffic.impressions;
    let wait_started = Instant::now();
    wait_for_rows(expected, STALL_LIMIT, || {
        let counted = count_rows(&dataset)?;
        progress(Progress {
            stage: Stage::Joining,
            requests: traffic.requests,
            records: sidecar.metrics.produced().records,
            rows: counted.rows,
            expected_rows: expected,
        });
        Ok((
            counted.rows,
            shutdown.is_cancelled() || joiner.is_finished(),
        ))
    })
    .await?;
    stop_joiner.cancel();
    let joined = joiner.await;
    stop_sidecar.cancel();
    let produced = sidecar.metrics.produced();
    let (request_bytes, record_bytes, records) = (
        produced.request_bytes,
        produced.record_bytes,
        produced.records,
    );
    sidecar.wait().await;
    stop_model.cancel();
    let _ = model_task.await;
    match joined {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(DemoError::Joiner(e.to_string())),
        Err(e) => return Err(DemoError::Joiner(e.to_string())),
    }
    let counted = count_rows(&dataset)?;
    if counted.rows < expected {
        return Err(DemoError::Incomplete {
            written: counted.rows,
            expected,
            waited: wait_started.elapsed(),
            dataset,
        });
    }

    // The careless offline pipeline, then the diff.
    let offline = out.join("offline.parquet");
    write_offline(&offline, &world, &traffic.impressed)?;
    let mut diff_options = featurelog_diff::DiffOptions::new(
        &dataset,
        &offline,
        vec!["request_id".into(), "item_id".into()],
    );
    // What the joiner adds around the features (labels, times, the score, the partitions) has
    // no offline counterpart to compare with.
    diff_options.ignore = [
        "model_name",
        "model_version",
        "served_at",
        "impression_time",
        "impressed",
        "clicks",
        "conversions",
        "output_score",
        "labels",
        "parameters",
        "dt",
        "hr",
    ]
    .map(String::from)
    .to_vec();
    let report = featurelog_diff::run(&diff_options)?;
    let html = out.join("report.html");
    write(&html, &report.render_html())?;

    Ok(Summary {
        out_dir: out,
        dataset,
        offline,
        html,
        requests: traffic.requests,
        candidates: traffic.requests * options.candidates as u64,
        impressions: traffic.impressions,
        clicks: traffic.clicks,
        request_bytes,
        record_bytes,
        records,
        rows: counted.rows,
        files: counted.files,
        report,
        elapsed: started.elapsed(),
    })
}
