//! Redis and memcached as reference points, driven over loopback TCP with
//! minimal protocol clients (RESP2 and the memcached text protocol) so that
//! the harness needs no client crates. The clients ([`TextClient`]) live in
//! `nessie-examples`, whose jobs run on Redis too.
//!
//! The harness starts the server on a free loopback port ([`PeerServer`]),
//! the node processes connect one client per worker ([`PeerNode`]), and the
//! server is killed when its guard drops. Each client counts one round trip
//! per operation and the request and reply bytes in [`nessie::Stats`], so
//! the report's bytes-per-operation columns mean the same for every system.

use crate::error::{HarnessError, Result};
use crate::system::{NodeHandle, System};
use nessie::KvClient;
/// The protocol client, which lives in `nessie-examples` (whose jobs run on
/// Redis too) and is re-exported here.
pub use nessie_examples::text::{TextClient, TextProtocol};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where a peer server listens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerTarget {
    /// Host and port.
    pub addr: SocketAddr,
}

fn program(system: System) -> &'static str {
    match system {
        System::Redis => "redis-server",
        _ => "memcached",
    }
}

/// The server binary of `system` on `PATH`, if any.
#[must_use]
pub fn find_program(system: System) -> Option<PathBuf> {
    let name = program(system);
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| is_executable(p))
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether the server of `system` is installed.
///
/// # Errors
/// [`HarnessError::NotAvailable`] naming the missing program.
pub fn check_installed(system: System) -> Result<()> {
    match find_program(system) {
        Some(_) => Ok(()),
        None => Err(HarnessError::NotAvailable {
            system,
            why: format!(
                "`{}` is not installed (e.g. apt-get install {})",
                program(system),
                if system == System::Redis {
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
    child: Child,
    /// Where it listens.
    pub target: PeerTarget,
}

impl PeerServer {
    /// Starts the server of `system` on a free loopback port with `threads`
    /// worker threads (memcached) and room for `memory_bytes` of data, and
    /// waits until it accepts connections.
    ///
    /// # Errors
    /// [`HarnessError::NotAvailable`] if not installed, [`HarnessError::Peer`]
    /// if it does not come up within 10 s.
    pub fn start(system: System, threads: usize, memory_bytes: u64, log: &Path) -> Result<Self> {
        let name = program(system);
        let path = find_program(system).ok_or_else(|| HarnessError::NotAvailable {
            system,
            why: format!("`{name}` is not installed"),
        })?;
        let port = free_port()?;
        let mut cmd = Command::new(&path);
        match system {
            System::Redis => {
                cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                    .args(["--daemonize", "no", "--loglevel", "warning"]);
            }
            _ => {
                let mb = (memory_bytes / (1 << 20)).max(64);
                cmd.args(["-p", &port.to_string(), "-l", "127.0.0.1", "-U", "0"])
                    .args(["-m", &mb.to_string(), "-t", &threads.max(1).to_string()])
                    .args(["-I", "2m"]);
                if nix::unistd::geteuid().is_root() {
                    cmd.args(["-u", "root"]);
                }
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
        crate::cluster::tie_to_harness(&mut cmd);
        let child = cmd.spawn().map_err(HarnessError::io("starting", &path))?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut server = PeerServer {
            child,
            target: PeerTarget { addr },
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                let tail = crate::cluster::tail(log, 800);
                return Err(HarnessError::Peer {
                    name,
                    why: format!("exited with {status} before listening: {tail}"),
                });
            }
            if crate::cluster::interrupted() {
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
        self.child.id()
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(HarnessError::io("binding a loopback port", "127.0.0.1:0"))?;
    let port = l
        .local_addr()
        .map_err(HarnessError::io("binding a loopback port", "127.0.0.1:0"))?
        .port();
    Ok(port)
}

/// A node process's handle on a peer server.
#[derive(Debug)]
pub struct PeerNode {
    /// Redis or memcached.
    pub system: System,
    /// Where the server listens.
    pub target: PeerTarget,
}

impl NodeHandle for PeerNode {
    fn client(&self) -> Result<Box<dyn KvClient>> {
        let protocol = if self.system == System::Redis {
            TextProtocol::Redis
        } else {
            TextProtocol::Memcached
        };
        let client =
            TextClient::connect(self.target.addr, protocol).map_err(|e| HarnessError::Peer {
                name: program(self.system),
                why: format!("connecting to {}: {e}", self.target.addr),
            })?;
        Ok(Box::new(client))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(system: System) {
        if check_installed(system).is_err() {
            eprintln!("{system} not installed; skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let server = PeerServer::start(system, 1, 64 << 20, &dir.path().join("log")).unwrap();
        let node = PeerNode {
            system,
            target: server.target.clone(),
        };
        let mut c = node.client().unwrap();
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
        roundtrip(System::Redis);
    }

    #[test]
    fn memcached_client_speaks_text() {
        roundtrip(System::Memcached);
    }
}
