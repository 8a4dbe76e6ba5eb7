//! The join stage's steps for one record: find or recover its task, skip what the task's
//! checkpoint covers, join it by its kind (a feature log, a co-partitioned app event, a batch
//! of routed events, the router's progress), align the task's inputs, and commit the task
//! when its rows fill a file.

use crate::reason::Reason;
use rdkafka::Message;
use rdkafka::error::KafkaResult;
use rdkafka::message::BorrowedMessage;

use super::consumer::fatal;
use super::error::JoinError;
use super::join::{Join, Running};
use super::partitions::check_partitions;
use super::reading::Positions;
use super::repartition::{
    EVENTS_HEADER, PROGRESS_HEADER, RoutedEvents, RouterProgress, has_header, murmur2_partition,
    same_dataset,
};
use super::task::{Task, decode_event, in_sample};
use crate::align::Input;
use crate::dead_letter::{dead_letter_bytes, in_future};
use crate::event;
use crate::log::ServedLog;
use crate::state::Row;

/// Joins one record the join consumer received.
pub(super) fn receive(
    join: &Join,
    running: &mut Running,
    message: KafkaResult<BorrowedMessage<'_>>,
) -> Result<(), JoinError> {
    join.drop_revoked(&mut running.tasks);
    let message = match message {
        Ok(m) => m,
        Err(err) => {
            fatal(&join.consumer, "join consumer")?;
            tracing::warn!(%err, "join consumer");
            return Ok(());
        }
    };
    let p = message.partition();
    let input = if message.topic() == join.topics.features {
        Input::Features
    } else {
        Input::Events
    };
    if input == Input::Features && p >= join.partitions {
        check_partitions(
            &join.consumer,
            &join.topics.features,
            join.partitions,
            Some(p),
        )?;
    }
    let task = match running.tasks.entry(p) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(join.recover(p, running.event_sources)?)
        }
    };
    // Already covered by the task's checkpoint: its rows are in the dataset.
    if message.offset() < *task.next.get(input) {
        return Ok(());
    }
    if input == Input::Events && !join.direct {
        same_dataset(
            &message,
            &join.dataset_id,
            &join.config.group,
            &join.dataset,
        )?;
    }
    *task.next.get_mut(input) = message.offset() + 1;
    task.dirty = true;
    let rows = rows_of(join, task, input, &message);
    task.rows.extend(rows);
    join.align(p, task, &Positions::new(&join.consumer));
    let output = &join.config.output;
    if (task.rows.len() >= output.flush_rows || task.rows.bytes() >= output.flush_bytes)
        && !join.flush(task)?
    {
        join.follow_fence(&mut running.tasks, p, running.event_sources)?;
    }
    Ok(())
}

/// Joins a record of `input` by its kind; the rows it completes.
fn rows_of(join: &Join, task: &mut Task, input: Input, message: &BorrowedMessage<'_>) -> Vec<Row> {
    let unkeyed = message.key().is_none();
    match input {
        Input::Features => features(join, task, message),
        Input::Events if join.direct => direct_event(join, task, message),
        Input::Events if unkeyed && has_header(message, EVENTS_HEADER) => {
            routed_events(join, task, message)
        }
        Input::Events if unkeyed && has_header(message, PROGRESS_HEADER) => {
            router_progress(join, task, message)
        }
        Input::Events => event(join, task, message),
    }
}

/// A feature log, held until its impressions' events arrive.
fn features(join: &Join, task: &mut Task, message: &BorrowedMessage<'_>) -> Vec<Row> {
    task.last_features = std::time::Instant::now();
    let payload = message.payload().unwrap_or_default();
    let decoded = ServedLog::decode(payload.to_vec(), task.state.layouts())
        .map_err(|e| e.to_string())
        .and_then(|log| {
            crate::rows::validate(&log)
                .map_err(|e| e.to_string())
                .map(|()| log)
        });
    match decoded {
        Ok(log) if join.held_in_topic => task.state.add_features(log.with_offset(message.offset())),
        Ok(log) => task.state.add_features(log),
        Err(reason) => {
            tracing::debug!(%reason, "bad feature log");
            join.dead_letter(message, Reason::BadFeatureLog, &reason);
            task.state.advance()
        }
    }
}

/// An app event read from the events topic itself (co-partitioned events): its time is its
/// partition's progress, as the router's would be.
fn direct_event(join: &Join, task: &mut Task, message: &BorrowedMessage<'_>) -> Vec<Row> {
    let (config, metrics) = (&join.config, &join.metrics);
    let p = message.partition();
    task.last_events = std::time::Instant::now();
    let payload = message.payload().unwrap_or_default();
    let decoded = decode_event(config, message.topic(), payload);
    match decoded {
        Ok(e) if murmur2_partition(e.request_id.as_bytes(), join.partitions) == p => {
            match in_future(&task.state, e.time_us, config) {
                // Its time is no progress of its partition either.
                Some(detail) => {
                    join.dead_letter(message, Reason::EventTimeInFuture, &detail);
                    task.state.advance()
                }
                None => {
                    let time_us = e.time_us;
                    let mut rows = if in_sample(config, &e) {
                        task.state.take_event(e)
                    } else {
                        metrics.events_not_sampled.inc();
                        task.state.advance()
                    };
                    // After the event: progress up to its time must not make it late.
                    rows.extend(task.state.source_progress(p, time_us));
                    rows
                }
            }
        }
        Ok(e) => {
            if task.misplaced == 0 {
                tracing::error!(
                    task = %task.name,
                    request_id = %e.request_id,
                    expected_partition = murmur2_partition(e.request_id.as_bytes(), join.partitions),
                    "an event is not in the partition of its request's feature logs, so it cannot join here: it goes to the dead-letter topic as not_co_partitioned. Apps must key events by request id with the murmur2 partitioner (librdkafka clients: partitioner = murmur2_random), or set input.events-partitioning = \"any\""
                );
            }
            task.misplaced += 1;
            join.dead_letter(message, Reason::NotCoPartitioned, "");
            task.state.advance()
        }
        Err(err) => {
            join.dead_letter(message, err.reason(), &err.to_string());
            task.state.advance()
        }
    }
}

/// A batch of events the router routed to this partition.
fn routed_events(join: &Join, task: &mut Task, message: &BorrowedMessage<'_>) -> Vec<Row> {
    let config = &join.config;
    let payload = message.payload().unwrap_or_default();
    let Ok(batch) = <RoutedEvents as prost::Message>::decode(payload) else {
        join.dead_letter(message, Reason::BadRoutedEvents, "");
        return task.state.advance();
    };
    let mut rows = Vec::new();
    for e in batch.events {
        let time_us = e.event_time.as_ref().map(event::saturating_us);
        if let Some(detail) = time_us.and_then(|t| in_future(&task.state, t, config)) {
            // The event as the router passed it on (a protobuf Impression), and the batch it
            // came in.
            let source = format!(
                "{}/{}/{} (routed)",
                message.topic(),
                message.partition(),
                message.offset()
            );
            let payload = prost::Message::encode_to_vec(&e);
            dead_letter_bytes(
                &join.dead_letters,
                &config.input.dead_letter_topic,
                (Some(e.request_id.as_bytes()), &payload),
                &source,
                Reason::EventTimeInFuture,
                &detail,
                &join.metrics,
            );
            continue;
        }
        match event::from_impression(e) {
            Ok(e) => rows.extend(task.state.take_event(e)),
            // The router sends only events it decoded and checked.
            Err(err) => tracing::warn!(%err, "a routed event is invalid"),
        }
    }
    rows
}

/// The router's progress: how far each events partition has been routed.
fn router_progress(join: &Join, task: &mut Task, message: &BorrowedMessage<'_>) -> Vec<Row> {
    let payload = message.payload().unwrap_or_default();
    let Ok(progress) = <RouterProgress as prost::Message>::decode(payload) else {
        join.dead_letter(message, Reason::BadRouterProgress, "");
        return task.state.advance();
    };
    let mut rows = Vec::new();
    for (source, up_to_us) in progress.sources {
        rows.extend(task.state.source_progress(source, up_to_us));
    }
    rows
}

/// A keyed record of one app event, the repartition topic's older format.
fn event(join: &Join, task: &mut Task, message: &BorrowedMessage<'_>) -> Vec<Row> {
    let payload = message.payload().unwrap_or_default();
    match event::from_protobuf(payload) {
        Ok(e) => match in_future(&task.state, e.time_us, &join.config) {
            Some(detail) => {
                join.dead_letter(message, Reason::EventTimeInFuture, &detail);
                task.state.advance()
            }
            None => task.state.take_event(e),
        },
        Err(err) => {
            join.dead_letter(message, err.reason(), &err.to_string());
            task.state.advance()
        }
    }
}
