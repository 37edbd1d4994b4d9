//! A small HTTP/1.1 server on its own thread: `GET /metrics` answers the
//! node's metrics in the Prometheus text format (version 0.0.4); anything
//! else gets 404 or 405. One connection at a time, each bounded by short
//! timeouts and a request-size limit, closed after the answer.

use super::export::NodeCollector;
use crate::fabric::{NodeId, TcpFabric};
use crate::runtime::store::Shared;
use crate::Error;
use prometheus_client::registry::Registry;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The largest request head read; a longer one gets 431.
const MAX_REQUEST: usize = 8 << 10;
/// How long a client may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// A node's running metrics endpoint; stops (and joins its thread) when
/// dropped.
#[derive(Debug)]
pub(crate) struct MetricsServer {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds node `node`'s address from `config.metrics` and starts
    /// serving; `tcp` adds the tcp fabric's counters.
    ///
    /// # Errors
    /// [`Error::Io`] if the address cannot be bound or the thread cannot
    /// start.
    pub(crate) fn start(
        shared: Arc<Shared>,
        node: NodeId,
        tcp: Option<Arc<TcpFabric>>,
    ) -> Result<Option<MetricsServer>, Error> {
        let Some(metrics) = shared.config().metrics.clone() else {
            return Ok(None);
        };
        let wanted = metrics.address(node);
        let listener = TcpListener::bind(wanted).map_err(|e| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("metrics endpoint of node {node} cannot bind {wanted}: {e}"),
            ))
        })?;
        let address = listener.local_addr()?;
        let mut registry = Registry::default();
        registry.register_collector(Box::new(NodeCollector { shared, node, tcp }));
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("nessie-metrics-{node}"))
            .spawn(move || serve(&listener, &registry, &stopping))?;
        tracing::info!(node, %address, "metrics endpoint (unauthenticated) listening");
        Ok(Some(MetricsServer {
            address,
            stop,
            thread: Some(thread),
        }))
    }

    /// The address it listens on.
    #[must_use]
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.address, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(listener: &TcpListener, registry: &Registry, stop: &AtomicBool) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut conn) = conn else { continue };
        if let Err(e) = answer(&mut conn, registry) {
            tracing::debug!("metrics request failed: {e}");
        }
    }
}

/// Reads one request head and answers it.
fn answer(conn: &mut TcpStream, registry: &Registry) -> std::io::Result<()> {
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_REQUEST {
            respond(
                conn,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"",
            )?;
            // Read on a little before closing, so the client gets the
            // answer rather than a reset for the bytes left unread.
            conn.shutdown(std::net::Shutdown::Write)?;
            let mut rest = 0;
            while rest < 16 * MAX_REQUEST {
                match conn.read(&mut chunk)? {
                    0 => break,
                    n => rest += n,
                }
            }
            return Ok(());
        }
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    match (method, path) {
        (b"GET", b"/metrics") => {
            let mut body = String::new();
            if prometheus_client::encoding::prometheus_text::encode(&mut body, registry).is_err() {
                return respond(
                    conn,
                    "500 Internal Server Error",
                    "text/plain",
                    b"encoding failed\n",
                );
            }
            respond(
                conn,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                body.as_bytes(),
            )
        }
        (b"GET", b"/") => respond(
            conn,
            "200 OK",
            "text/plain; charset=utf-8",
            b"Nessie-rs node metrics: GET /metrics\n",
        ),
        (b"GET", _) => respond(conn, "404 Not Found", "text/plain", b"not found\n"),
        _ => respond(conn, "405 Method Not Allowed", "text/plain", b"GET only\n"),
    }
}

fn respond(conn: &mut TcpStream, status: &str, kind: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()
}
