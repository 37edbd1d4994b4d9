//! Redis and memcached as reference points, driven over loopback TCP with
//! minimal protocol clients (RESP2 and the memcached text protocol, crate
//! `text-kv`) so that the harness needs no client crates.
//!
//! The harness starts the server on a free port ([`PeerServer`]) of
//! loopback, or under a launcher of an address the node processes' hosts
//! reach (`--peer-host`, see [`crate::launcher`]); the node processes
//! connect one client per worker
//! ([`crate::system::start_node`]), and the server is killed when its guard
//! drops. Each client counts one round trip
//! per operation and the request and reply bytes in [`nessie::Stats`], so
//! the report's bytes-per-operation columns mean the same for every system.

use crate::error::{HarnessError, Result};
use crate::proc::{find_on_path, interrupted, tail, ChildGuard};
use nessie_examples::StoreKind;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use text_kv::{TextClient, TextProtocol};

/// Where a peer server listens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerTarget {
    /// Host and port.
    pub addr: SocketAddr,
}

/// The server program of `system` (Redis or memcached).
pub(crate) fn program(system: StoreKind) -> &'static str {
    match system {
        StoreKind::Redis => "redis-server",
        _ => "memcached",
    }
}

/// The server binary of `system` on `PATH`, if any.
#[must_use]
pub fn find_program(system: StoreKind) -> Option<PathBuf> {
    find_on_path(program(system))
}

/// Whether the server of `system` is installed.
///
/// # Errors
/// [`HarnessError::NotAvailable`] naming the missing program.
pub fn check_installed(system: StoreKind) -> Result<()> {
    match find_program(system) {
        Some(_) => Ok(()),
        None => Err(HarnessError::NotAvailable {
            system,
            why: format!(
                "`{}` is not installed (e.g. apt-get install {})",
                program(system),
                if system == StoreKind::Redis {
                    "redis-server"
                } else {
                    "memcached"
                }
            ),
        }),
    }
}

/// A running peer server, killed on drop.
#[derive(Debug)]
pub struct PeerServer {
    child: ChildGuard,
    /// Where it listens.
    pub target: PeerTarget,
}

impl PeerServer {
    /// Starts the server of `system` on a free port of `host` (this host's
    /// address on the network its clients use; loopback when they run
    /// here) with `threads` worker threads (memcached) and room for
    /// `memory_bytes` of data, and waits until it accepts connections.
    ///
    /// # Errors
    /// [`HarnessError::NotAvailable`] if not installed, [`HarnessError::Io`]
    /// if `host` is not an address of this host, [`HarnessError::Peer`] if
    /// it does not come up within 10 s.
    pub fn start(
        system: StoreKind,
        host: IpAddr,
        threads: usize,
        memory_bytes: u64,
        log: &Path,
    ) -> Result<Self> {
        let name = program(system);
        let path = find_program(system).ok_or_else(|| HarnessError::NotAvailable {
            system,
            why: format!("`{name}` is not installed"),
        })?;
        let port = free_port(host)?;
        let bind = host.to_string();
        let mut cmd = ChildGuard::command(&path);
        if system == StoreKind::Redis {
            cmd.args(["--port", &port.to_string(), "--bind", &bind])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .args(["--daemonize", "no", "--loglevel", "warning"]);
        } else {
            let mb = (memory_bytes / (1 << 20)).max(64);
            cmd.args(["-p", &port.to_string(), "-l", &bind, "-U", "0"])
                .args(["-m", &mb.to_string(), "-t", &threads.max(1).to_string()])
                .args(["-I", "2m"]);
            if nix::unistd::geteuid().is_root() {
                cmd.args(["-u", "root"]);
            }
        }
        let log_file = std::fs::File::create(log).map_err(HarnessError::io("creating", log))?;
        cmd.stdin(Stdio::null())
            .stdout(
                log_file
                    .try_clone()
                    .map_err(HarnessError::io("opening", log))?,
            )
            .stderr(log_file);
        let child = ChildGuard::spawn(&mut cmd, "starting")?;
        let addr = SocketAddr::from((host, port));
        let mut server = PeerServer {
            child,
            target: PeerTarget { addr },
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(server);
            }
            if let Some(status) = server.child.try_wait() {
                let tail = tail(log, 800);
                return Err(HarnessError::Peer {
                    name,
                    why: format!("exited with {status} before listening: {tail}"),
                });
            }
            if interrupted() {
                return Err(HarnessError::Interrupted);
            }
            if Instant::now() > deadline {
                return Err(HarnessError::Peer {
                    name,
                    why: format!("did not listen on {addr} within 10 s"),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's process id (for its CPU time).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }
}

/// A port of `host` that is free now.
///
/// # Errors
/// [`HarnessError::Io`] if nothing can listen on `host` (not an address of
/// this host).
pub fn free_port(host: IpAddr) -> Result<u16> {
    let at = SocketAddr::from((host, 0)).to_string();
    let l = TcpListener::bind((host, 0)).map_err(HarnessError::io("binding a port of", &at))?;
    let port = l
        .local_addr()
        .map_err(HarnessError::io("binding a port of", &at))?
        .port();
    Ok(port)
}

/// A client of the peer server at `target`, for one worker.
///
/// # Errors
/// [`HarnessError::Peer`] if it cannot connect.
pub fn connect(system: StoreKind, target: &PeerTarget) -> Result<TextClient> {
    let protocol = if system == StoreKind::Redis {
        TextProtocol::Redis
    } else {
        TextProtocol::Memcached
    };
    TextClient::connect(target.addr, protocol).map_err(|e| HarnessError::Peer {
        name: program(system),
        why: format!("connecting to {}: {e}", target.addr),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nessie::KvClient;

    fn roundtrip(test: &str, system: StoreKind) {
        if let Err(e) = check_installed(system) {
            return optional_tools::skip(
                test,
                &e.to_string(),
                &format!("apt-get install {}", program(system)),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let host = std::net::Ipv4Addr::LOCALHOST.into();
        let server = PeerServer::start(system, host, 1, 64 << 20, &dir.path().join("log")).unwrap();
        let mut c = connect(system, &server.target).unwrap();
        let key = crate::workload::key(3, 128);
        let value = vec![7u8; 20_000];
        assert_eq!(c.get(&key).unwrap(), None);
        c.put(&key, &value).unwrap();
        assert_eq!(c.get(&key).unwrap(), Some(value.clone()));
        c.put(&key, b"").unwrap();
        assert_eq!(c.get(&key).unwrap(), Some(Vec::new()));
        assert!(c.delete(&key).unwrap());
        assert!(!c.delete(&key).unwrap());
        let s = c.stats();
        assert_eq!(s.get.ops, 3);
        assert!(s.get.verbs.read_bytes > 20_000);
        assert_eq!(s.put.verbs.round_trips, 2);
    }

    #[test]
    fn redis_client_speaks_resp() {
        roundtrip("peers::tests::redis_client_speaks_resp", StoreKind::Redis);
    }

    #[test]
    fn memcached_client_speaks_text() {
        roundtrip(
            "peers::tests::memcached_client_speaks_text",
            StoreKind::Memcached,
        );
    }
}
