//! Redis and memcached as reference points, driven over loopback TCP with
//! minimal protocol clients (RESP2 and the memcached text protocol) so that
//! the harness needs no client crates.
//!
//! The harness starts the server on a free loopback port ([`PeerServer`]),
//! the node processes connect one client per worker ([`PeerNode`]), and the
//! server is killed when its guard drops. Each client counts one round trip
//! per operation and the request and reply bytes in [`nessie::Stats`], so
//! the report's bytes-per-operation columns mean the same for every system.

use crate::error::{HarnessError, Result};
use crate::system::{NodeHandle, System};
use nessie::fabric::VerbCounts;
use nessie::{KvClient, OpKind as StoreOp, Stats};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
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
        let stream = TcpStream::connect(self.target.addr).map_err(|e| HarnessError::Peer {
            name: program(self.system),
            why: format!("connecting to {}: {e}", self.target.addr),
        })?;
        let io = |e| HarnessError::Peer {
            name: program(self.system),
            why: format!("socket setup: {e}"),
        };
        stream.set_nodelay(true).map_err(io)?;
        let writer = BufWriter::new(stream.try_clone().map_err(io)?);
        Ok(Box::new(TextClient {
            redis: self.system == System::Redis,
            reader: BufReader::new(stream),
            writer,
            stats: Stats::default(),
            line: Vec::new(),
        }))
    }
}

/// A client of either text protocol (RESP2 for Redis, memcached's text
/// protocol), over one blocking TCP connection.
#[derive(Debug)]
struct TextClient {
    redis: bool,
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    stats: Stats,
    line: Vec<u8>,
}

fn proto(msg: String) -> nessie::Error {
    nessie::Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, msg))
}

impl TextClient {
    /// Sends a request made of `parts` (RESP array, or memcached words plus
    /// an optional data block) and counts it.
    fn send(&mut self, parts: &[&[u8]], data: Option<&[u8]>) -> std::io::Result<u64> {
        let w = &mut self.writer;
        let mut sent = 0u64;
        let mut put = |w: &mut BufWriter<TcpStream>, b: &[u8]| -> std::io::Result<()> {
            sent += b.len() as u64;
            w.write_all(b)
        };
        if self.redis {
            put(w, format!("*{}\r\n", parts.len()).as_bytes())?;
            for p in parts {
                put(w, format!("${}\r\n", p.len()).as_bytes())?;
                put(w, p)?;
                put(w, b"\r\n")?;
            }
        } else {
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    put(w, b" ")?;
                }
                put(w, p)?;
            }
            put(w, b"\r\n")?;
            if let Some(d) = data {
                put(w, d)?;
                put(w, b"\r\n")?;
            }
        }
        w.flush()?;
        Ok(sent)
    }

    /// Reads one `\r\n`-terminated line into `self.line` (without the
    /// terminator); returns the bytes consumed.
    fn read_line(&mut self) -> Result<u64, nessie::Error> {
        self.line.clear();
        let n = self.reader.read_until(b'\n', &mut self.line)?;
        if n == 0 {
            return Err(proto("server closed the connection".into()));
        }
        if self.line.ends_with(b"\r\n") {
            self.line.truncate(self.line.len() - 2);
        }
        Ok(n as u64)
    }

    fn read_exact_crlf(&mut self, len: usize, out: &mut Vec<u8>) -> Result<u64, nessie::Error> {
        out.clear();
        out.resize(len, 0);
        self.reader.read_exact(out)?;
        let mut crlf = [0u8; 2];
        self.reader.read_exact(&mut crlf)?;
        Ok(len as u64 + 2)
    }

    fn line_str(&self) -> String {
        String::from_utf8_lossy(&self.line).into_owned()
    }

    fn count(&mut self, op: StoreOp, sent: u64, received: u64) {
        let s = self.stats.of_mut(op);
        s.ops += 1;
        s.verbs += VerbCounts {
            writes: 1,
            write_bytes: sent,
            reads: 1,
            read_bytes: received,
            round_trips: 1,
            remote: 2,
            remote_bytes: sent + received,
            ..VerbCounts::default()
        };
    }

    fn fail<T>(&mut self, op: StoreOp, e: nessie::Error) -> Result<T, nessie::Error> {
        let s = self.stats.of_mut(op);
        s.ops += 1;
        s.errors += 1;
        Err(e)
    }

    fn get_inner(
        &mut self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(bool, u64, u64), nessie::Error> {
        if self.redis {
            let sent = self.send(&[b"GET", key], None)?;
            let mut got = self.read_line()?;
            match self.line.first() {
                Some(b'$') => {
                    let len: i64 = parse_num(&self.line[1..])?;
                    if len < 0 {
                        out.clear();
                        return Ok((false, sent, got));
                    }
                    got += self.read_exact_crlf(len as usize, out)?;
                    Ok((true, sent, got))
                }
                _ => Err(proto(format!("redis GET: {}", self.line_str()))),
            }
        } else {
            let sent = self.send(&[b"get", key], None)?;
            let mut got = self.read_line()?;
            if self.line == b"END" {
                out.clear();
                return Ok((false, sent, got));
            }
            if !self.line.starts_with(b"VALUE ") {
                return Err(proto(format!("memcached get: {}", self.line_str())));
            }
            let len: i64 = self
                .line
                .rsplit(|&b| b == b' ')
                .next()
                .map(parse_num)
                .transpose()?
                .unwrap_or(-1);
            let len =
                usize::try_from(len).map_err(|_| proto("memcached get: bad length".into()))?;
            got += self.read_exact_crlf(len, out)?;
            got += self.read_line()?;
            if self.line != b"END" {
                return Err(proto(format!(
                    "memcached get: expected END, got {}",
                    self.line_str()
                )));
            }
            Ok((true, sent, got))
        }
    }

    fn put_inner(&mut self, key: &[u8], value: &[u8]) -> Result<(u64, u64), nessie::Error> {
        let sent = if self.redis {
            self.send(&[b"SET", key, value], None)?
        } else {
            let len = value.len().to_string();
            self.send(&[b"set", key, b"0", b"0", len.as_bytes()], Some(value))?
        };
        let got = self.read_line()?;
        let ok: &[u8] = if self.redis { b"+OK" } else { b"STORED" };
        if self.line != ok {
            return Err(proto(format!("set: {}", self.line_str())));
        }
        Ok((sent, got))
    }

    fn delete_inner(&mut self, key: &[u8]) -> Result<(bool, u64, u64), nessie::Error> {
        let sent = if self.redis {
            self.send(&[b"DEL", key], None)?
        } else {
            self.send(&[b"delete", key], None)?
        };
        let got = self.read_line()?;
        let found = match self.line.as_slice() {
            b":1" | b"DELETED" => true,
            b":0" | b"NOT_FOUND" => false,
            _ => return Err(proto(format!("delete: {}", self.line_str()))),
        };
        Ok((found, sent, got))
    }
}

fn parse_num(b: &[u8]) -> Result<i64, nessie::Error> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| proto(format!("bad number {:?}", String::from_utf8_lossy(b))))
}

impl KvClient for TextClient {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, nessie::Error> {
        match self.get_inner(key, out) {
            Ok((found, sent, got)) => {
                self.count(StoreOp::Get, sent, got);
                Ok(found)
            }
            Err(e) => self.fail(StoreOp::Get, e),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), nessie::Error> {
        match self.put_inner(key, value) {
            Ok((sent, got)) => {
                self.count(StoreOp::Put, sent, got);
                Ok(())
            }
            Err(e) => self.fail(StoreOp::Put, e),
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, nessie::Error> {
        match self.delete_inner(key) {
            Ok((found, sent, got)) => {
                self.count(StoreOp::Delete, sent, got);
                Ok(found)
            }
            Err(e) => self.fail(StoreOp::Delete, e),
        }
    }

    fn stats(&self) -> Stats {
        self.stats
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
