//! Bodies passed through the proxies frame by frame, unchanged, with each frame shown to a
//! watcher on the way: a [`Tap`] keeps a reference to each chunk (no copy) for the publisher.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::BoxError;

/// What a tap saw of one body.
#[derive(Debug, Default)]
pub struct Captured {
    /// The data chunks, by reference.
    pub chunks: Vec<Bytes>,
    /// Their total length.
    pub len: usize,
    /// True when the data passed the size limit (chunks were then let go).
    pub overflow: bool,
    /// When it passed the limit, a copy of the body's first bytes (up to 4 KiB): where a
    /// request's id is.
    pub head: Vec<u8>,
    /// True when the body reached its end (not cut by an error or a reset).
    pub complete: bool,
    /// The trailers, if any.
    pub trailers: Option<HeaderMap>,
}

/// What a body passing through the proxy shows whoever watches it on the way.
pub(crate) trait Watch {
    /// A data chunk, as it passes.
    fn data(&mut self, data: &Bytes);
    /// The trailers, as they pass.
    fn trailers(&mut self, trailers: &HeaderMap);
    /// The body is dropped; `ended` says whether it reached its end (rather than being cut by
    /// an error or a reset).
    fn done(&mut self, ended: bool);
}

/// A body passed through frame by frame, unchanged, with `watch` shown each frame.
pub(crate) struct Watched<B: Body, W: Watch> {
    inner: B,
    watch: W,
    /// The body ended in an error (a reset, a broken connection): never complete.
    errored: bool,
    finished: bool,
}

impl<B: Body, W: Watch> Watched<B, W> {
    pub(crate) fn around(inner: B, watch: W) -> Self {
        Self {
            inner,
            watch,
            errored: false,
            finished: false,
        }
    }
}

impl<B, W> Body for Watched<B, W>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
    W: Watch + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.watch.data(data);
                } else if let Some(trailers) = frame.trailers_ref() {
                    this.watch.trailers(trailers);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => {
                this.errored = true;
                Poll::Ready(Some(Err(err.into())))
            }
            Poll::Ready(None) => {
                this.finished = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: Body, W: Watch> Drop for Watched<B, W> {
    fn drop(&mut self) {
        // hyper may stop polling once the body says it has ended, without asking for the final
        // `None`: the end of stream is as good as that. But an h2 body that was reset also says
        // it has ended; the error it returned tells the two apart.
        let ended = !self.errored && (self.finished || self.inner.is_end_stream());
        self.watch.done(ended);
    }
}

type OnDone = Box<dyn FnOnce(Captured) + Send>;

/// Keeps a reference to each data chunk of a body; when the body is dropped (after its end, or
/// cut short) hands what it saw to `on_done`.
pub(crate) struct Capture {
    captured: Captured,
    limit: usize,
    on_done: Option<OnDone>,
}

/// A body passed through with its chunks captured (see [`Capture`]).
pub(crate) type Tap<B> = Watched<B, Capture>;

impl<B: Body> Tap<B> {
    pub(crate) fn new(
        inner: B,
        limit: usize,
        on_done: impl FnOnce(Captured) + Send + 'static,
    ) -> Self {
        Watched::around(
            inner,
            Capture {
                captured: Captured::default(),
                limit,
                on_done: Some(Box::new(on_done)),
            },
        )
    }
}

impl Watch for Capture {
    fn data(&mut self, data: &Bytes) {
        let c = &mut self.captured;
        c.len += data.len();
        if c.len > self.limit {
            // Not logged now, but a request's first bytes still tell whether it names itself
            // (see `Exchange::peek_request_id`).
            extend_head(&mut c.head, c.chunks.iter().chain([data]));
            c.overflow = true;
            c.chunks.clear();
        } else if !c.overflow {
            c.chunks.push(data.clone());
        }
    }

    fn trailers(&mut self, trailers: &HeaderMap) {
        self.captured.trailers = Some(trailers.clone());
    }

    fn done(&mut self, ended: bool) {
        self.captured.complete = ended;
        if let Some(on_done) = self.on_done.take() {
            on_done(std::mem::take(&mut self.captured));
        }
    }
}

/// How much of a body past the size limit a tap keeps, copied: the head of a request message
/// (model name, version, id) fits many times over.
pub(super) const HEAD_BYTES: usize = 4096;

/// Fills `head` with the next `chunks` of a body until it holds [`HEAD_BYTES`].
fn extend_head<'a>(head: &mut Vec<u8>, chunks: impl IntoIterator<Item = &'a Bytes>) {
    for chunk in chunks {
        let take = HEAD_BYTES.saturating_sub(head.len()).min(chunk.len());
        if take == 0 {
            return;
        }
        head.extend_from_slice(&chunk[..take]);
    }
}
