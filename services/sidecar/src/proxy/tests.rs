//! Unit tests of the gRPC proxy's tap: the two sides of a call brought together in either
//! order, the id a response carries back, and the in-place id reading against prost's decode.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use prost::Message;

use super::exchange::{Exchange, REQUEST_END_WAIT};
use super::grpc::status_of;
use super::request_id::{RequestHead, Unusual, contiguous_message, head_id, request_id};
use super::tap::{Captured, HEAD_BYTES, Tap};
use super::*;
use crate::publish::CapturedCall;

/// A gRPC-framed ModelInferRequest for `model` with the `id` given.
fn framed_request(model: &str, id: &str) -> Bytes {
    let message = featurelog_schemas::inference::ModelInferRequest {
        model_name: model.into(),
        id: id.into(),
        ..Default::default()
    }
    .encode_to_vec();
    let mut body = vec![0u8];
    body.extend((message.len() as u32).to_be_bytes());
    body.extend(message);
    Bytes::from(body)
}

/// The taps of a call are dropped by different tasks, so the response's can be done
/// before the request's (a CI run lost a request's record that way): the call is handed to
/// the publisher once the request's tap is done. A request cut short after its response is
/// counted as incomplete, unless it is a gRPC request that holds its whole message (the
/// model server answered it and reset the stream before the caller's end came).
#[tokio::test]
async fn a_call_whose_response_is_done_before_its_request_is_still_handed_over() {
    use crate::config::PublishConfig;
    let (publisher, metrics, _dir) = crate::publish::tests::unconnected(&PublishConfig::default());
    let publisher = Arc::new(publisher);
    // A model the allow list does not name: handed over, the publisher counts it skipped.
    let message = framed_request("other", "r");
    let half = message.slice(..message.len() / 2);
    type Request = UnsyncBoxBody<Bytes, BoxError>;
    let whole: Request = http_body_util::Full::new(message.clone())
        .map_err(|e| match e {})
        .boxed_unsync();
    // Its one frame, then nothing more: the stream of a call the model server answered and
    // reset before the caller's end of stream came.
    let open =
        |b: &Bytes| -> Request { Frames(vec![Ok(Frame::data(b.clone()))], false).boxed_unsync() };
    // (gRPC, request body, polled to its end, handed over)
    let cases = [
        (false, whole, true, true),
        (false, open(&message), false, false),
        (true, open(&message), false, true),
        (true, open(&half), false, false),
    ];
    let (mut handed, mut incomplete) = (0, 0);
    for (grpc, body, to_the_end, handed_over) in cases {
        let exchange = Exchange::new(&publisher);
        let exchange = Arc::new(if grpc { exchange.grpc() } else { exchange });
        let mut request = exchange.tap(body, 1 << 20);
        let response = Captured {
            complete: true,
            ..Captured::default()
        };
        exchange.finish(
            response,
            metrics.clone(),
            publisher.clone(),
            ("model_infer", "ok", true),
            |request, response| CapturedCall {
                request,
                response,
                ..crate::publish::tests::sized_call(0)
            },
        );
        assert_eq!(
            metrics.skipped_count("not_allow_listed"),
            handed,
            "not before the request's tap is done"
        );
        if to_the_end {
            while request.frame().await.is_some() {}
        } else {
            // Its one frame, then the stream is reset.
            request.frame().await;
        }
        drop(request);
        handed += u64::from(handed_over);
        incomplete += u64::from(!handed_over);
        assert_eq!(metrics.skipped_count("not_allow_listed"), handed);
        assert_eq!(metrics.dropped_count("incomplete_call"), incomplete);
    }
}

/// A response whose request's tap is not done yet waits for it (up to
/// `REQUEST_END_WAIT`) to learn the request's own id, rather than returning a generated one
/// that the logged record would not carry.
#[tokio::test(start_paused = true)]
async fn a_response_waits_for_its_request_tap_to_learn_the_id() {
    let exchange = Arc::new(Exchange::default());
    let late = exchange.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let body = framed_request("ranker", "req-7");
        late.request_done(Captured {
            len: body.len(),
            chunks: vec![body],
            complete: true,
            ..Captured::default()
        });
    });
    exchange.request_seen().await;
    assert_eq!(
        exchange.peek_request_id(None, 1 << 20).as_deref(),
        Some("req-7")
    );

    // A request whose tap is never done: the response goes on without it.
    let never = Exchange::default();
    let started = tokio::time::Instant::now();
    never.request_seen().await;
    assert!(started.elapsed() >= REQUEST_END_WAIT);
    assert_eq!(never.peek_request_id(None, 1 << 20), None);
}

/// What the full decode says, `None` for an error.
fn decoded(message: &[u8]) -> Option<String> {
    RequestHead::decode(message).ok().map(|h| h.id)
}

/// The quick reading where it has an answer, else the decode it falls back to.
fn quick(message: &[u8]) -> Option<String> {
    match request_id(&mut &message[..]) {
        Ok(id) => Some(id),
        Err(Unusual) => decoded(message),
    }
}

#[test]
fn the_quick_id_reading_agrees_with_the_full_decode() {
    use featurelog_schemas::inference::ModelInferRequest;
    use featurelog_schemas::inference::model_infer_request::InferInputTensor;
    let mut request = ModelInferRequest {
        model_name: "ranker".into(),
        id: "req-7".into(),
        ..Default::default()
    };
    request.inputs.push(InferInputTensor {
        name: "f0".into(),
        datatype: "FP32".into(),
        shape: vec![2],
        ..Default::default()
    });
    request.raw_input_contents.push(Bytes::from_static(&[0; 8]));
    let plain = request.encode_to_vec();
    let mut cases: Vec<Vec<u8>> = vec![plain.clone(), Vec::new()];
    // A later id wins; unknown fields of every wire type; a varint where a string belongs;
    // a group; a truncated field; invalid UTF-8 in the model name; tag 0.
    let extra: &[&[u8]] = &[
        &[0x1a, 2, b'z', b'z'],
        &[
            0x40, 0x96, 0x01, 0x49, 1, 2, 3, 4, 5, 6, 7, 8, 0x4d, 1, 2, 3, 4,
        ],
        &[0x18, 5],
        &[0x4b, 0x4c],
        &[0x1a, 9, b'x'],
        &[0x0a, 1, 0xff],
        &[0x02, 0],
        &[
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ],
    ];
    for e in extra {
        let mut m = plain.clone();
        m.extend_from_slice(e);
        cases.push(m);
        cases.push(e.to_vec());
    }
    for case in cases {
        assert_eq!(quick(&case), decoded(&case), "{case:?}");
    }
    assert_eq!(quick(&plain).as_deref(), Some("req-7"));
    // Bytes changed at random: the id handed back to the caller (and put on the record)
    // is always the one the model server decodes, or none when it decodes none.
    let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
    let mut next = || rng.u64(..);
    let mut ids = 0;
    for _ in 0..20_000 {
        let mut m = plain.clone();
        for _ in 0..1 + next() % 3 {
            let at = (next() % m.len() as u64) as usize;
            match next() % 4 {
                0 | 1 => m[at] = m[at].wrapping_add(1 + (next() % 3) as u8),
                2 => m[at] = next() as u8,
                _ => m.insert(at, next() as u8),
            }
        }
        let want = decoded(&m);
        ids += usize::from(want.is_some());
        assert_eq!(quick(&m), want, "{m:?}");
    }
    assert!(ids > 5_000, "only {ids} mutations had an id");
}

/// A body that yields `frames`, then, when `ends`, says it has ended (as an h2 body does
/// after a reset too); otherwise it stays open.
struct Frames(Vec<Result<Frame<Bytes>, BoxError>>, bool);

impl Body for Frames {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match (self.0.is_empty(), self.1) {
            (false, _) => Poll::Ready(Some(self.0.remove(0))),
            (true, true) => Poll::Ready(None),
            (true, false) => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.1
    }
}

/// What a tap over `frames` hands on when polled to its end and dropped.
async fn tapped(frames: Vec<Result<Frame<Bytes>, BoxError>>) -> Captured {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut tap = Tap::new(Frames(frames, true), 1 << 20, move |c| {
        tx.send(c).unwrap();
    });
    while let Some(Ok(_)) = tap.frame().await {}
    drop(tap);
    rx.recv().unwrap()
}

#[tokio::test]
async fn a_response_cut_by_a_reset_is_not_complete() {
    let message = || Ok(Frame::data(Bytes::from_static(b"message")));
    let ended = tapped(vec![message()]).await;
    assert!(ended.complete);
    let reset = tapped(vec![message(), Err("stream reset".into())]).await;
    assert!(
        !reset.complete,
        "a reset after the message is not a finished call"
    );
}

#[test]
fn a_response_without_any_grpc_status_is_not_a_success() {
    let mut headers = HeaderMap::new();
    assert_eq!(status_of(&headers), None);
    headers.insert("grpc-status", HeaderValue::from_static("0"));
    assert_eq!(status_of(&headers), Some("ok"));
    headers.insert("grpc-status", HeaderValue::from_static("13"));
    assert_eq!(status_of(&headers), Some("error"));
}

#[test]
fn a_compressed_request_s_own_id_is_the_id_returned_to_the_caller() {
    let message = featurelog_schemas::inference::ModelInferRequest {
        model_name: "ranker".into(),
        id: "req-gz".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &message).unwrap();
    let gz = gz.finish().unwrap();
    let mut body = vec![1u8];
    body.extend((gz.len() as u32).to_be_bytes());
    body.extend(&gz);
    let exchange = Exchange::default();
    exchange.request_done(Captured {
        // Split across chunks, as a large body arrives.
        chunks: vec![
            Bytes::copy_from_slice(&body[..7]),
            Bytes::copy_from_slice(&body[7..]),
        ],
        len: body.len(),
        complete: true,
        ..Captured::default()
    });
    assert_eq!(
        exchange.peek_request_id(Some("gzip"), 1 << 20).as_deref(),
        Some("req-gz")
    );
    // Larger than the limit once inflated, or an encoding the publisher cannot read: no id
    // here, and no record there.
    assert_eq!(exchange.peek_request_id(Some("gzip"), 3), None);
    assert_eq!(exchange.peek_request_id(Some("snappy"), 1 << 20), None);
}

#[tokio::test]
async fn a_request_past_the_size_limit_still_gives_its_id_from_its_first_bytes() {
    use featurelog_schemas::inference::ModelInferRequest;
    let body = |id: &str| {
        let mut request = ModelInferRequest {
            model_name: "ranker".into(),
            id: id.into(),
            ..Default::default()
        };
        request
            .raw_input_contents
            .push(Bytes::from(vec![7; 20_000]));
        let message = request.encode_to_vec();
        let mut body = vec![0u8];
        body.extend((message.len() as u32).to_be_bytes());
        body.extend(message);
        body
    };
    let peek = |captured: Captured| {
        let exchange = Exchange::default();
        exchange.request_done(captured);
        exchange.peek_request_id(None, 1 << 20)
    };
    for (id, split) in [("req-big", 3), ("req-big", 10), ("", 1000)] {
        let body = body(id);
        let (tx, rx) = std::sync::mpsc::channel();
        let mut tap = Tap::new(
            Frames(
                body.chunks(split)
                    .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                    .collect(),
                true,
            ),
            100,
            move |c| tx.send(c).unwrap(),
        );
        while let Some(Ok(_)) = tap.frame().await {}
        drop(tap);
        let captured = rx.recv().unwrap();
        assert!(captured.overflow && captured.chunks.is_empty());
        assert_eq!(captured.head, body[..HEAD_BYTES]);
        assert_eq!(peek(captured).as_deref(), Some(id), "split {split}");
    }
    // Cut inside the head, or compressed: no answer (an id is generated).
    let head = body("req-big")[..12].to_vec();
    assert_eq!(head_id(&head), None);
    let mut compressed = body("req-big")[..HEAD_BYTES].to_vec();
    compressed[0] = 1;
    assert_eq!(head_id(&compressed), None);
}

#[test]
fn only_an_uncompressed_message_within_the_first_chunk_is_read_in_place() {
    let framed = |flag: u8, len: u32, body: &[u8]| {
        let mut out = vec![flag];
        out.extend(len.to_be_bytes());
        out.extend_from_slice(body);
        Bytes::from(out)
    };
    let whole = framed(0, 3, b"abcde");
    assert_eq!(
        contiguous_message(&[Bytes::new(), whole]),
        Some(&b"abc"[..])
    );
    assert_eq!(contiguous_message(&[framed(1, 3, b"abc")]), None);
    let split = [framed(0, 5, b"abc"), Bytes::from_static(b"de")];
    assert_eq!(contiguous_message(&split), None);
    assert_eq!(contiguous_message(&[Bytes::from_static(&[0, 0])]), None);
}

#[test]
fn the_request_id_is_read_across_chunk_boundaries() {
    let head = RequestHead {
        model_name: "ranker".into(),
        model_version: String::new(),
        id: "req-42".into(),
    };
    let message = head.encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend((message.len() as u32).to_be_bytes());
    framed.extend(&message);
    let whole = Bytes::copy_from_slice(&framed);
    let mut layouts = vec![vec![whole.clone()], vec![Bytes::new(), whole, Bytes::new()]];
    for split in 1..framed.len() {
        let (a, b) = framed.split_at(split);
        layouts.push(vec![
            Bytes::copy_from_slice(a),
            Bytes::new(),
            Bytes::copy_from_slice(b),
        ]);
    }
    for (layout, chunks) in layouts.into_iter().enumerate() {
        let exchange = Exchange::default();
        exchange.request_done(Captured {
            chunks,
            len: framed.len(),
            overflow: false,
            head: Vec::new(),
            complete: true,
            trailers: None,
        });
        assert_eq!(
            exchange.peek_request_id(None, 1 << 20).as_deref(),
            Some("req-42"),
            "layout {layout}"
        );
    }
}
