//! The `tcp` fabric's handshake: hellos, then HMAC-SHA256 proofs in both
//! directions over fresh nonces, then the server's verdict.
//!
//! ```text
//! client → server   hello(nonce_c)
//! server → client   hello(nonce_s), mac_s = HMAC(K, SERVER_LABEL ‖ hello_c ‖ hello_s)
//! client → server   mac_c = HMAC(K, CLIENT_LABEL ‖ hello_c ‖ hello_s)
//! server → client   verdict
//! ```
//!
//! Each proof covers the other side's fresh nonce, so a recorded proof is
//! worthless on a later connection (replay), and the labels differ, so a
//! side's proof cannot be reflected back as the other's. The server sends
//! its hello even when the client's does not match (other version, cluster,
//! node or sizes) and then closes, so both sides find the same mismatch and
//! report it as the same [`HandshakeFailure`].

use crate::membership::{claimed_regions, PeerClaim};
use crate::wire::frame::{
    word, Hello, HelloError, CLIENT_LABEL, MAC_BYTES, NONCE_BYTES, SERVER_LABEL, VERDICT_ACCEPT,
    VERDICT_BAD_PROOF,
};
use crate::wire::WORD;
use crate::{HandshakeFailure, Membership, NodeId};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use std::fmt;
use std::io::{Read, Write};

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 keyed with `secret`, fed with each of `parts` in order.
/// Verify a tag with its `verify_slice` (constant time).
pub(crate) fn keyed_mac(secret: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes keys of any length.
    let mut mac = HmacSha256::new_from_slice(secret).unwrap_or_else(|_| {
        unreachable!("HMAC accepts keys of every length");
    });
    for part in parts {
        mac.update(part);
    }
    mac
}

/// Fresh random bytes from the operating system, for a nonce.
pub(crate) fn fresh_nonce() -> [u8; NONCE_BYTES] {
    let mut nonce = [0u8; NONCE_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    nonce
}

/// What this node says about itself, and the secret it proves.
pub(super) struct Identity {
    pub(super) membership: Membership,
    pub(super) frame_limit: u64,
    pub(super) secret: Vec<u8>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("membership", &self.membership)
            .field("frame_limit", &self.frame_limit)
            .finish_non_exhaustive()
    }
}

fn io(e: std::io::Error) -> HandshakeFailure {
    HandshakeFailure::Io(e)
}

impl Identity {
    fn hello(&self, to: u32) -> Hello {
        let nonce = fresh_nonce();
        let me = &self.membership;
        Hello {
            format_version: me.format_version,
            cluster_id: me.cluster_id,
            from: me.node as u32,
            to,
            nodes: me.nodes as u32,
            frame_limit: self.frame_limit,
            nonce,
            regions: me.regions.iter().map(|r| (r.id.0, r.len)).collect(),
        }
    }

    /// Checks a peer's hello; `from` is the node the peer must be, if known.
    fn check(&self, peer: &Hello, from: Option<u32>) -> Result<(), HandshakeFailure> {
        let regions = claimed_regions(&peer.regions);
        let claim = PeerClaim {
            format_version: peer.format_version,
            cluster_id: peer.cluster_id,
            from: u64::from(peer.from),
            to_of: Some((u64::from(peer.to), u64::from(peer.nodes))),
            regions: &regions,
        };
        let me = &self.membership;
        me.check(&claim, from.map(|f| f as NodeId), &me.regions)?;
        if peer.frame_limit < WORD as u64 {
            return Err(HandshakeFailure::Malformed);
        }
        Ok(())
    }

    fn mac(&self, label: &[u8], client_hello: &[u8], server_hello: &[u8]) -> HmacSha256 {
        keyed_mac(&self.secret, &[label, client_hello, server_hello])
    }
}

/// Reads a hello: its raw bytes (the proofs cover them) and the decoded form.
fn read_hello(stream: &mut impl Read, version: u32) -> Result<(Vec<u8>, Hello), HandshakeFailure> {
    let mut prefix = [0u8; 2 * WORD];
    stream.read_exact(&mut prefix).map_err(io)?;
    let len = Hello::total_len(&prefix, version).map_err(|e| match e {
        HelloError::BadMagic => HandshakeFailure::BadMagic,
        HelloError::Version(found) => HandshakeFailure::Version {
            found,
            expected: version,
        },
        HelloError::Malformed => HandshakeFailure::Malformed,
    })?;
    let mut bytes = prefix.to_vec();
    bytes.resize(len, 0);
    stream.read_exact(&mut bytes[2 * WORD..]).map_err(io)?;
    let hello = Hello::decode(&bytes).map_err(|_| HandshakeFailure::Malformed)?;
    Ok((bytes, hello))
}

/// The connecting side. Returns the peer's frame limit.
pub(super) fn client<S: Read + Write>(
    stream: &mut S,
    me: &Identity,
    peer: NodeId,
) -> Result<u64, HandshakeFailure> {
    let hello_c = me.hello(peer as u32).encode();
    stream.write_all(&hello_c).map_err(io)?;
    let (hello_s, server) = read_hello(stream, me.membership.format_version)?;
    me.check(&server, Some(peer as u32))?;
    let mut mac_s = [0u8; MAC_BYTES];
    stream.read_exact(&mut mac_s).map_err(io)?;
    me.mac(SERVER_LABEL, &hello_c, &hello_s)
        .verify_slice(&mac_s)
        .map_err(|_| HandshakeFailure::Authentication)?;
    let mac_c = me
        .mac(CLIENT_LABEL, &hello_c, &hello_s)
        .finalize()
        .into_bytes();
    stream.write_all(&mac_c).map_err(io)?;
    let mut verdict = [0u8; WORD];
    stream.read_exact(&mut verdict).map_err(io)?;
    match word(&verdict, 0) {
        Some(VERDICT_ACCEPT) => Ok(server.frame_limit),
        _ => Err(HandshakeFailure::Authentication),
    }
}

/// The accepting side. Returns the peer's node id and frame limit.
pub(super) fn server<S: Read + Write>(
    stream: &mut S,
    me: &Identity,
) -> Result<(NodeId, u64), HandshakeFailure> {
    let (hello_c, client) = match read_hello(stream, me.membership.format_version) {
        Ok(h) => h,
        Err(e @ HandshakeFailure::Version { .. }) => {
            // Tell the peer which version we speak, then give up.
            let _ = stream.write_all(&me.hello(u32::MAX).encode());
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let hello_s = me.hello(client.from).encode();
    let mac_s = me
        .mac(SERVER_LABEL, &hello_c, &hello_s)
        .finalize()
        .into_bytes();
    let mut reply = hello_s.clone();
    reply.extend_from_slice(&mac_s);
    stream.write_all(&reply).map_err(io)?;
    me.check(&client, None)?;
    let mut mac_c = [0u8; MAC_BYTES];
    stream.read_exact(&mut mac_c).map_err(io)?;
    if me
        .mac(CLIENT_LABEL, &hello_c, &hello_s)
        .verify_slice(&mac_c)
        .is_err()
    {
        let _ = stream.write_all(&VERDICT_BAD_PROOF.to_le_bytes());
        return Err(HandshakeFailure::Authentication);
    }
    stream
        .write_all(&VERDICT_ACCEPT.to_le_bytes())
        .map_err(io)?;
    Ok((client.from as NodeId, client.frame_limit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    const FORMAT_VERSION: u32 = 5;

    fn identity(node: NodeId, secret: &str) -> Identity {
        Identity {
            membership: Membership {
                cluster_id: 7,
                format_version: FORMAT_VERSION,
                node,
                nodes: 3,
                regions: vec![crate::RegionSpec {
                    id: crate::RegionId(0),
                    len: 4096,
                }],
            },
            frame_limit: 1 << 20,
            secret: secret.as_bytes().to_vec(),
        }
    }

    fn run(
        client_id: &Identity,
        server_id: &Identity,
        to: NodeId,
    ) -> (
        Result<u64, HandshakeFailure>,
        Result<(NodeId, u64), HandshakeFailure>,
    ) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        std::thread::scope(|s| {
            let server = s.spawn(move || {
                let r = server(&mut b, server_id);
                drop(b);
                r
            });
            let c = client(&mut a, client_id, to);
            drop(a);
            (c, server.join().unwrap())
        })
    }

    #[test]
    fn matching_peers_agree() {
        let (c, s) = run(&identity(0, "k"), &identity(1, "k"), 1);
        assert_eq!(c.unwrap(), 1 << 20);
        assert_eq!(s.unwrap(), (0, 1 << 20));
    }

    #[test]
    fn other_secret_fails_on_both_sides() {
        let (c, s) = run(&identity(0, "k"), &identity(1, "other"), 1);
        assert!(matches!(c, Err(HandshakeFailure::Authentication)), "{c:?}");
        assert!(s.is_err());
    }

    #[test]
    fn wrong_node_and_sizes_are_named() {
        let (c, _) = run(&identity(0, "k"), &identity(2, "k"), 1);
        assert!(
            matches!(
                c,
                Err(HandshakeFailure::Node {
                    found: 2,
                    expected: 1
                })
            ),
            "{c:?}"
        );
        let mut big = identity(1, "k");
        big.membership.regions[0].len = 8192;
        let (c, s) = run(&identity(0, "k"), &big, 1);
        assert!(
            matches!(
                c,
                Err(HandshakeFailure::RegionSize {
                    found: Some(8192),
                    expected: Some(4096),
                    ..
                })
            ),
            "{c:?}"
        );
        assert!(matches!(s, Err(HandshakeFailure::RegionSize { .. })));
    }

    #[test]
    fn other_version_is_named_on_both_sides() {
        let server_id = identity(1, "k");
        let mut future = identity(0, "k").hello(1);
        future.format_version = FORMAT_VERSION + 1;
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let s = std::thread::scope(|s| {
            let srv = s.spawn(|| server(&mut b, &server_id));
            a.write_all(&future.encode()).unwrap();
            srv.join().unwrap()
        });
        assert!(
            matches!(s, Err(HandshakeFailure::Version { found, expected })
                if found == FORMAT_VERSION + 1 && expected == FORMAT_VERSION),
            "{s:?}"
        );
        // The server told the peer its own version, so the peer (of the
        // other build) reports the mismatch too.
        let mut prefix = [0u8; 16];
        a.read_exact(&mut prefix).unwrap();
        assert_eq!(
            Hello::total_len(&prefix, FORMAT_VERSION + 1),
            Err(HelloError::Version(FORMAT_VERSION))
        );
    }

    /// Records what a client sends.
    struct Tap<'a> {
        inner: &'a mut UnixStream,
        sent: Vec<u8>,
    }

    impl Read for Tap<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.inner.read(buf)
        }
    }

    impl Write for Tap<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = self.inner.write(buf)?;
            self.sent.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }

    /// An eavesdropper who recorded an honest client's hello and proof
    /// cannot open a connection by replaying them: the server's nonce is
    /// fresh each time, so the old proof does not verify.
    #[test]
    fn replayed_proof_is_refused() {
        let me = identity(0, "k");
        let server_id = identity(1, "k");
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let recorded = std::thread::scope(|s| {
            let srv = s.spawn(|| server(&mut b, &server_id));
            let mut tap = Tap {
                inner: &mut a,
                sent: Vec::new(),
            };
            client(&mut tap, &me, 1).unwrap();
            srv.join().unwrap().unwrap();
            tap.sent
        });
        let (hello_c, mac_c) = recorded.split_at(recorded.len() - MAC_BYTES);
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let result = std::thread::scope(|s| {
            let srv = s.spawn(|| server(&mut b, &server_id));
            a.write_all(hello_c).unwrap();
            let (_, _) = read_hello(&mut a, FORMAT_VERSION).unwrap();
            let mut mac_s = [0u8; MAC_BYTES];
            a.read_exact(&mut mac_s).unwrap();
            a.write_all(mac_c).unwrap();
            srv.join().unwrap()
        });
        assert!(matches!(result, Err(HandshakeFailure::Authentication)));
    }

    /// Nor can it impersonate a server by replaying a recorded answer: the
    /// server's proof covers the client's fresh nonce.
    #[test]
    fn replayed_server_answer_is_refused() {
        let me = identity(0, "k");
        let server_id = identity(1, "k");
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let recorded = std::thread::scope(|s| {
            let srv = s.spawn(|| {
                let mut tap = Tap {
                    inner: &mut b,
                    sent: Vec::new(),
                };
                server(&mut tap, &server_id).unwrap();
                tap.sent
            });
            client(&mut a, &me, 1).unwrap();
            srv.join().unwrap()
        });
        // The recorded answer: hello and proof, without the final verdict.
        let answer = &recorded[..recorded.len() - WORD];
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let result = std::thread::scope(|s| {
            s.spawn(move || {
                let _ = read_hello(&mut b, FORMAT_VERSION);
                let _ = b.write_all(answer);
                let _ = b.write_all(&VERDICT_ACCEPT.to_le_bytes());
            });
            client(&mut a, &me, 1)
        });
        assert!(
            matches!(result, Err(HandshakeFailure::Authentication)),
            "{result:?}"
        );
    }
}
