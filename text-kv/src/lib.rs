//! # text-kv: Redis and memcached as a [`KvClient`]
//!
//! A [`KvClient`] for Redis (RESP2) and memcached (text protocol) over one
//! blocking TCP connection, so that the jobs of `nessie-examples` and the
//! harness's `peers` experiment, which both run on these servers, need no
//! client crates.
//!
//! Each operation is one request and one reply: the client counts one
//! round trip, a WRITE of the request bytes and a READ of the reply bytes,
//! all remote, in [`nessie::Stats`], so bytes-per-operation figures mean the
//! same as for the nessie stores.

#![deny(missing_docs)]

use nessie::fabric::VerbCounts;
use nessie::{KvClient, OpKind, Stats};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};

/// Which text protocol a server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextProtocol {
    /// Redis: RESP2 arrays of bulk strings; `GET`, `SET`, `DEL`.
    Redis,
    /// memcached: `get`, `set <key> 0 0 <len>`, `delete`.
    Memcached,
}

/// A client of either text protocol, over one blocking TCP connection.
#[derive(Debug)]
pub struct TextClient {
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
    /// Connects to the server at `addr` (with `TCP_NODELAY`).
    ///
    /// # Errors
    /// The socket's error.
    pub fn connect(addr: SocketAddr, protocol: TextProtocol) -> std::io::Result<TextClient> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let writer = BufWriter::new(stream.try_clone()?);
        Ok(TextClient {
            redis: protocol == TextProtocol::Redis,
            reader: BufReader::new(stream),
            writer,
            stats: Stats::default(),
            line: Vec::new(),
        })
    }

    /// [`TextClient::connect`] to a Redis server.
    ///
    /// # Errors
    /// The socket's error.
    pub fn connect_redis(addr: SocketAddr) -> std::io::Result<TextClient> {
        Self::connect(addr, TextProtocol::Redis)
    }

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

    fn count(&mut self, op: OpKind, sent: u64, received: u64) {
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

    fn fail<T>(&mut self, op: OpKind, e: nessie::Error) -> Result<T, nessie::Error> {
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
                    let len =
                        usize::try_from(len).map_err(|_| proto("redis GET: bad length".into()))?;
                    got += self.read_exact_crlf(len, out)?;
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
                self.count(OpKind::Get, sent, got);
                Ok(found)
            }
            Err(e) => self.fail(OpKind::Get, e),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), nessie::Error> {
        match self.put_inner(key, value) {
            Ok((sent, got)) => {
                self.count(OpKind::Put, sent, got);
                Ok(())
            }
            Err(e) => self.fail(OpKind::Put, e),
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, nessie::Error> {
        match self.delete_inner(key) {
            Ok((found, sent, got)) => {
                self.count(OpKind::Delete, sent, got);
                Ok(found)
            }
            Err(e) => self.fail(OpKind::Delete, e),
        }
    }

    fn stats(&self) -> Stats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Reads a RESP header line (`*n` or `$len`) and returns its number.
    fn header(r: &mut impl BufRead, line: &mut Vec<u8>) -> usize {
        line.clear();
        r.read_until(b'\n', line).unwrap();
        std::str::from_utf8(&line[1..])
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// A fake server: answers each request with the next canned reply.
    fn fake(replies: &'static [&'static [u8]]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            let mut line = Vec::new();
            for reply in replies {
                // Read one RESP request: "*n", then n × ("$len", data).
                let n = header(&mut r, &mut line);
                for _ in 0..n {
                    let len = header(&mut r, &mut line);
                    let mut data = vec![0u8; len + 2];
                    r.read_exact(&mut data).unwrap();
                }
                w.write_all(reply).unwrap();
            }
        });
        addr
    }

    #[test]
    fn resp_replies_are_decoded_and_counted() {
        let addr = fake(&[
            b"+OK\r\n",
            b"$5\r\nhello\r\n",
            b"$-1\r\n",
            b":1\r\n",
            b"-ERR no\r\n",
        ]);
        let mut c = TextClient::connect_redis(addr).unwrap();
        c.put(b"k", b"hello").unwrap();
        assert_eq!(c.get(b"k").unwrap(), Some(b"hello".to_vec()));
        assert_eq!(c.get(b"x").unwrap(), None);
        assert!(c.delete(b"k").unwrap());
        assert!(c.put(b"k", b"v").is_err());
        let s = c.stats();
        assert_eq!((s.get.ops, s.put.ops, s.put.errors), (2, 2, 1));
        assert_eq!(s.get.verbs.round_trips, 2);
        assert!(s.put.verbs.remote_bytes > 5);
    }
}
