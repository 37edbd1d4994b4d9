//! Redis and memcached as reference points, driven over loopback TCP with
//! minimal protocol clients (RESP2 and the memcached text protocol, crate
//! `text-kv`) so that the harness needs no client crates.
//!
//! The harness starts the server on a free port ([`PeerServer`]; another
//! one if the port was taken before the server bound it) of
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
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use text_kv::{TextClient, TextProtocol};

/// Ports [`PeerServer::start`] tries before it gives up.
const START_ATTEMPTS: usize = 3;

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
        // A port found free can be taken before the server binds it (the
        // OS hands it to another process meanwhile): then the server exits
        // at once, and another port is tried.
        let ports = (0..START_ATTEMPTS).map(|_| free_port(host));
        Self::start_on_ports(system, host, threads, memory_bytes, log, ports)
    }

    /// [`PeerServer::start`] on the first of `ports` where the server
    /// stays up; each attempt whose server exits before listening moves on
    /// to the next port.
    fn start_on_ports(
        system: StoreKind,
        host: IpAddr,
        threads: usize,
        memory_bytes: u64,
        log: &Path,
        ports: impl IntoIterator<Item = Result<u16>>,
    ) -> Result<Self> {
        let name = program(system);
        let path = find_program(system).ok_or_else(|| HarnessError::NotAvailable {
            system,
            why: format!("`{name}` is not installed"),
        })?;
        let mut last = None;
        for port in ports {
            match Self::start_on(system, &path, host, port?, threads, memory_bytes, log)? {
                Ok(server) => return Ok(server),
                Err(early_exit) => {
                    eprintln!("nessie-bench: {name} {early_exit}; trying another port");
                    last = Some(early_exit);
                }
            }
        }
        Err(HarnessError::Peer {
            name,
            why: last.unwrap_or_else(|| "no port to listen on".to_owned()),
        })
    }

    /// Starts the server on `port` and waits until it accepts connections;
    /// `Ok(Err(why))` if it exited before it did.
    fn start_on(
        system: StoreKind,
        path: &Path,
        host: IpAddr,
        port: u16,
        threads: usize,
        memory_bytes: u64,
        log: &Path,
    ) -> Result<std::result::Result<Self, String>> {
        let name = program(system);
        let bind = host.to_string();
        let mut cmd = ChildGuard::command(path);
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
            if let Some(status) = server.child.try_wait() {
                let tail = tail(log, 800);
                return Ok(Err(format!(
                    "exited with {status} before listening on {addr}: {tail}"
                )));
            }
            if answers(system, addr) {
                return Ok(Ok(server));
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

/// Whether the server of `system` answers at `addr`: a `PING` (Redis) or
/// `version` (memcached) gets its reply. A bare connection would not do:
/// whatever took the port meanwhile may accept it too.
fn answers(system: StoreKind, addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let wait = Some(Duration::from_millis(500));
    if stream.set_read_timeout(wait).is_err() || stream.set_write_timeout(wait).is_err() {
        return false;
    }
    let (ask, reply): (&[u8], &[u8]) = if system == StoreKind::Redis {
        (b"PING\r\n", b"+PONG")
    } else {
        (b"version\r\n", b"VERSION ")
    };
    if stream.write_all(ask).is_err() {
        return false;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() < reply.len() {
        match stream.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
    got.starts_with(reply)
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

    /// A port taken between being found free and the server binding it:
    /// the server exits at once and the next port is tried (the stranger
    /// on the port accepts connections but never answers); with every
    /// port taken, the error says why.
    #[test]
    fn a_taken_port_moves_the_server_to_another() {
        const TEST: &str = "peers::tests::a_taken_port_moves_the_server_to_another";
        if let Err(e) = check_installed(StoreKind::Memcached) {
            return optional_tools::skip(TEST, &e.to_string(), "apt-get install memcached");
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let host: IpAddr = std::net::Ipv4Addr::LOCALHOST.into();
        let stranger = TcpListener::bind((host, 0)).unwrap();
        let taken = stranger.local_addr().unwrap().port();
        let start = |ports: [Result<u16>; 2]| {
            PeerServer::start_on_ports(StoreKind::Memcached, host, 1, 64 << 20, &log, ports)
        };
        let server = start([Ok(taken), free_port(host)]).unwrap();
        assert_ne!(server.target.addr.port(), taken);
        assert!(answers(StoreKind::Memcached, server.target.addr));
        drop(server);
        let failed = start([Ok(taken), Ok(taken)]);
        assert!(
            matches!(&failed, Err(HarnessError::Peer { why, .. }) if why.contains("exited")),
            "{:?}",
            failed.err()
        );
    }

    /// A stranger on `127.0.0.1` that reads one request on each
    /// connection, writes `reply` and holds the connection open (closes it
    /// at once when `reply` is `None`).
    fn stranger(reply: Option<&'static [u8]>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for mut conn in listener.incoming().flatten() {
                let Some(reply) = reply else { continue };
                let _ = conn.read(&mut [0u8; 64]);
                let _ = conn.write_all(reply);
                held.push(conn);
            }
        });
        addr
    }

    /// Only the server's own reply makes it count as up: not a connection
    /// closed at once (an end of file, which must not be waited on), not
    /// another reply; the start of the right one is enough.
    #[test]
    fn only_the_servers_reply_counts() {
        assert!(!answers(StoreKind::Memcached, stranger(None)));
        assert!(!answers(StoreKind::Redis, stranger(None)));
        assert!(!answers(StoreKind::Memcached, stranger(Some(b"ERROR\r\n"))));
        assert!(!answers(
            StoreKind::Redis,
            stranger(Some(b"-ERR unknown\r\n"))
        ));
        assert!(answers(StoreKind::Memcached, stranger(Some(b"VERSION "))));
        assert!(answers(StoreKind::Redis, stranger(Some(b"+PONG"))));
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
