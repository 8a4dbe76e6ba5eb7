//! A TCP proxy a test can cut, for outages of a server that other tests share (the S3 test
//! server): the process under test reaches the server through the proxy, and while the proxy
//! is cut, connecting is refused and every open connection is dropped, as when the server is
//! down, without touching the server itself. It can also lose the answer to one HTTP request:
//! the server gets the request and acts on it, the client sees its connection close instead of
//! the answer.
#![allow(clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The proxy; it stops when dropped.
#[derive(Debug)]
pub struct CutProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    up: Arc<watch::Sender<bool>>,
    lose: Lose,
    runtime: Option<tokio::runtime::Runtime>,
}

/// The request whose answer to lose: its method and a part of its target, until one is seen.
type Lose = Arc<Mutex<Option<(&'static str, &'static str)>>>;

impl CutProxy {
    /// Starts a proxy on a free local port to `target`, passing traffic.
    ///
    /// # Panics
    /// When no local port can be bound.
    pub fn start(target: SocketAddr) -> Self {
        // A runtime of its own: the proxy keeps working whatever the test's runtime is doing.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-proxy")
            .enable_all()
            .build()
            .expect("proxy runtime");
        // Bound here (not with the runtime's `block_on`, which a test's async code cannot
        // call), then handed to the runtime.
        // Below the ephemeral range, so that it can listen again after a cut (crate::ports).
        let listener =
            std::net::TcpListener::bind(crate::ports::restartable_addr()).expect("proxy port");
        listener
            .set_nonblocking(true)
            .expect("non-blocking proxy port");
        let addr = listener.local_addr().expect("proxy address");
        let (up, _) = watch::channel(true);
        let up = Arc::new(up);
        let lose = Lose::default();
        let (passing, losing) = (up.clone(), lose.clone());
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("proxy listener");
            serve(listener, addr, target, passing, losing).await;
        });
        Self {
            addr,
            up,
            lose,
            runtime: Some(runtime),
        }
    }

    /// Loses the answer to the next HTTP request with `method` whose request line holds
    /// `target_part`: the request reaches the server, and when the server answers, the
    /// connection is closed instead (once).
    pub fn lose_next_answer(&self, method: &'static str, target_part: &'static str) {
        *self.lose.lock().expect("proxy state") = Some((method, target_part));
    }

    /// Whether the answer [`CutProxy::lose_next_answer`] asked for is still to be lost.
    pub fn losing(&self) -> bool {
        self.lose.lock().expect("proxy state").is_some()
    }

    /// Refuses new connections and drops the open ones until [`CutProxy::restore`].
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Passes traffic again.
    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn serve(
    mut listener: TcpListener,
    addr: SocketAddr,
    target: SocketAddr,
    up: Arc<watch::Sender<bool>>,
    lose: Lose,
) {
    let mut state = up.subscribe();
    loop {
        let cut = tokio::select! {
            accepted = listener.accept() => {
                if let Ok((client, _)) = accepted {
                    tokio::spawn(pass(client, target, up.subscribe(), lose.clone()));
                }
                false
            }
            _ = state.wait_for(|up| !*up) => true,
        };
        if cut {
            // Closing the listener makes connecting fail at once (refused), as with a server
            // that is down; a listener left open would queue connections instead.
            drop(listener);
            let _ = state.wait_for(|up| *up).await;
            listener = loop {
                match TcpListener::bind(addr).await {
                    Ok(l) => break l,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
        }
    }
}

async fn pass(client: TcpStream, target: SocketAddr, mut up: watch::Receiver<bool>, lose: Lose) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    // Set when this connection carries the request whose answer is to be lost.
    let doomed = AtomicBool::new(false);
    let upstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let chunk = &buf[..n];
            if let Ok(mut lose) = lose.lock() {
                // A request's head arrives in one write: its first line is at the start.
                let line = chunk.split(|b| *b == b'\n').next().unwrap_or_default();
                let line = String::from_utf8_lossy(line);
                if let Some((method, part)) = *lose
                    && line.starts_with(&format!("{method} "))
                    && line.contains(part)
                {
                    *lose = None;
                    doomed.store(true, Ordering::SeqCst);
                }
            }
            if to_server.write_all(chunk).await.is_err() {
                return;
            }
        }
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_server.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // The server has acted on the request and answers: the client never hears it.
            if doomed.load(Ordering::SeqCst) {
                return;
            }
            if to_client.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Either side closing ends the connection (HTTP needs no half-close here). Dropped
    // mid-request when the proxy is cut: the client sees the connection reset or closed, as
    // when the server goes away.
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = up.wait_for(|up| !*up) => {}
    }
}
