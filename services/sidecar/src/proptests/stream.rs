//! Streamed messages.

use std::collections::VecDeque;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::sample::Index;

use super::config;
use super::generators::{chunked, framed};

/// A body that yields `chunks`, then ends.
struct Chunks(VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(|c| Ok(http_body::Frame::data(c))))
    }
}

/// The messages of a whole body, cut from it in one piece: each whole one's bytes (prefix
/// included), `None` for one past `limit`; a message the body ends inside is not one.
fn reference_messages(body: &[u8], limit: usize) -> Vec<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(&[_, a, b, c, d]) = body.get(at..at + 5) {
        let len = u32::from_be_bytes([a, b, c, d]) as usize;
        if len > limit {
            out.push(None);
        } else if let Some(message) = body.get(at..at + 5 + len) {
            out.push(Some(message.to_vec()));
        } else {
            break;
        }
        at += 5 + len;
    }
    out
}

proptest! {
    #![proptest_config(config(1536))]

    /// A stream's body cut into its messages as its chunks pass, whatever the chunks: the
    /// messages a cut of the whole body gives, each whole one in its bytes.
    #[test]
    fn streamed_messages_are_cut_as_the_whole_body_cuts(
        messages in prop::collection::vec((any::<bool>(), prop::collection::vec(any::<u8>(), 0..40)), 0..6),
        limit in 0usize..48,
        tail in prop::collection::vec(any::<u8>(), 0..8),
        cuts in prop::collection::vec(any::<Index>(), 0..8),
    ) {
        let mut body: Vec<u8> = messages
            .iter()
            .flat_map(|(compressed, m)| framed(u8::from(*compressed), m))
            .collect();
        body.extend_from_slice(&tail);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut cut = crate::proxy::stream::messages(
            Chunks(chunked(&body, &cuts).into()),
            limit,
            {
                let seen = seen.clone();
                move |m| {
                    let m = match m {
                        crate::proxy::stream::Message::Whole(parts) => Some(parts.concat()),
                        crate::proxy::stream::Message::TooLarge => None,
                    };
                    if let Ok(mut seen) = seen.lock() {
                        seen.push(m);
                    }
                }
            },
            {
                let ended = ended.clone();
                move |_| ended.store(true, std::sync::atomic::Ordering::SeqCst)
            },
        );
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut passed = Vec::new();
        while let std::task::Poll::Ready(Some(frame)) =
            http_body::Body::poll_frame(std::pin::Pin::new(&mut cut), &mut cx)
        {
            let frame = frame.map_err(|e| TestCaseError::fail(e.to_string()))?;
            if let Some(data) = frame.data_ref() {
                passed.extend_from_slice(data);
            }
        }
        drop(cut);
        prop_assert_eq!(&passed, &body, "the body passes unchanged");
        prop_assert!(ended.load(std::sync::atomic::Ordering::SeqCst));
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        prop_assert_eq!(seen, reference_messages(&body, limit));
    }
}
