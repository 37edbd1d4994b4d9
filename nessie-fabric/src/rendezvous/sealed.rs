//! Sealed rendezvous messages: key proof, tag and nonces (see the
//! parent module), and the refusal bodies that carry a
//! [`RendezvousFailure`] across the wire.

use crate::tcp::handshake::keyed_mac;
use crate::wire::frame::{MAC_BYTES, NONCE_BYTES};
use crate::wire::rendezvous::{
    DecodeError, Reply, SealedHeader, GO_LABEL, GO_PROOF_LABEL, KIND_GO, KIND_READY, KIND_REGISTER,
    MAX_DETAIL_WORDS, NO_REGION, READY_LABEL, READY_PROOF_LABEL, REGISTER_LABEL,
    REGISTER_PROOF_LABEL, REPLY_LABEL, REPLY_PROOF_LABEL, SEALED_HEADER_BYTES,
    STATUS_AUTHENTICATION, STATUS_CLUSTER, STATUS_DUPLICATE, STATUS_MALFORMED, STATUS_MISSING,
    STATUS_NODE, STATUS_NODES, STATUS_NOT_READY, STATUS_REGION, STATUS_REPLAYED, STATUS_TAMPERED,
    STATUS_VERSION,
};
use crate::{HandshakeFailure, NodeId, RegionId, RendezvousFailure};
use hmac::Mac;
use std::io::Read;
use std::time::Duration;

pub(super) fn decode_failure(e: DecodeError) -> RendezvousFailure {
    match e {
        DecodeError::BadMagic => RendezvousFailure::BadMagic,
        DecodeError::Version(_) | DecodeError::Malformed | DecodeError::TooLarge => {
            RendezvousFailure::Malformed
        }
    }
}

/// The nonces of one connection, client's first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Session {
    pub(super) client: [u8; NONCE_BYTES],
    pub(super) server: [u8; NONCE_BYTES],
}

/// The key-proof and tag labels of a sealed message of `kind`.
fn labels(kind: u32) -> (&'static [u8], &'static [u8]) {
    match kind {
        KIND_REGISTER => (REGISTER_PROOF_LABEL, REGISTER_LABEL),
        KIND_READY => (READY_PROOF_LABEL, READY_LABEL),
        KIND_GO => (GO_PROOF_LABEL, GO_LABEL),
        _ => (REPLY_PROOF_LABEL, REPLY_LABEL),
    }
}

/// A sealed message of `kind` for `session`: header, body, tag.
pub(super) fn seal(secret: &[u8], kind: u32, session: &Session, body: &[u8]) -> Vec<u8> {
    let (proof_label, label) = labels(kind);
    let proof = keyed_mac(secret, &[proof_label, &session.client, &session.server])
        .finalize()
        .into_bytes();
    let mut out = SealedHeader {
        kind,
        body_len: body.len() as u32,
        client_nonce: session.client,
        server_nonce: session.server,
        proof: proof.into(),
    }
    .encode();
    out.extend_from_slice(body);
    let tag = keyed_mac(secret, &[label, &out]).finalize().into_bytes();
    out.extend_from_slice(&tag);
    out
}

/// Reads a sealed message of `kind` and returns its body once its key
/// proof, its tag and its nonces check out (in that order).
pub(super) fn unseal(
    stream: &mut impl Read,
    secret: &[u8],
    kind: u32,
    session: &Session,
    max_body: usize,
) -> Result<Vec<u8>, RendezvousFailure> {
    let mut head = [0u8; SEALED_HEADER_BYTES];
    stream
        .read_exact(&mut head)
        .map_err(RendezvousFailure::Io)?;
    let header = SealedHeader::decode(&head, kind, max_body).map_err(decode_failure)?;
    let body_len = header.body_len as usize;
    let mut rest = vec![0u8; body_len + MAC_BYTES];
    stream
        .read_exact(&mut rest)
        .map_err(RendezvousFailure::Io)?;
    let carried = Session {
        client: header.client_nonce,
        server: header.server_nonce,
    };
    let (proof_label, label) = labels(kind);
    let (body, tag) = rest.split_at(body_len);
    if keyed_mac(secret, &[proof_label, &carried.client, &carried.server])
        .verify_slice(&header.proof)
        .is_err()
    {
        // An honest peer of another secret names this connection's nonces;
        // other nonces that do not verify were altered.
        return Err(if carried == *session {
            RendezvousFailure::Authentication
        } else {
            RendezvousFailure::Tampered
        });
    }
    if keyed_mac(secret, &[label, &head, body])
        .verify_slice(tag)
        .is_err()
    {
        return Err(RendezvousFailure::Tampered);
    }
    if carried != *session {
        return Err(RendezvousFailure::Replayed);
    }
    rest.truncate(body_len);
    Ok(rest)
}

/// The refusal body that tells a node `reason`.
pub(super) fn refusal(reason: &RendezvousFailure) -> Vec<u8> {
    use HandshakeFailure as H;
    use RendezvousFailure as R;
    let (status, detail): (u32, Vec<u64>) = match reason {
        R::Authentication => (STATUS_AUTHENTICATION, Vec::new()),
        R::Tampered => (STATUS_TAMPERED, Vec::new()),
        R::Replayed => (STATUS_REPLAYED, Vec::new()),
        R::Duplicate(node) => (STATUS_DUPLICATE, vec![*node as u64]),
        R::Missing { nodes, waited } => (STATUS_MISSING, waited_for(nodes, *waited)),
        R::NotReady { nodes, waited } => (STATUS_NOT_READY, waited_for(nodes, *waited)),
        R::Membership(H::Version { found, expected }) => {
            (STATUS_VERSION, vec![(*found).into(), (*expected).into()])
        }
        R::Membership(H::Cluster { found, expected }) => (STATUS_CLUSTER, vec![*found, *expected]),
        R::Membership(H::Nodes { found, expected }) => {
            (STATUS_NODES, vec![(*found).into(), (*expected).into()])
        }
        R::Membership(H::Node { found, expected }) => {
            (STATUS_NODE, vec![(*found).into(), (*expected).into()])
        }
        R::Membership(H::RegionSize {
            region,
            found,
            expected,
        }) => (
            STATUS_REGION,
            vec![
                region.0.into(),
                found.unwrap_or(NO_REGION),
                expected.unwrap_or(NO_REGION),
            ],
        ),
        _ => (STATUS_MALFORMED, Vec::new()),
    };
    Reply::Refuse { status, detail }.encode()
}

/// The detail of a refusal that names nodes waited for: the wait in ms,
/// then their ids.
fn waited_for(nodes: &[NodeId], waited: Duration) -> Vec<u64> {
    std::iter::once(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX))
        .chain(nodes.iter().map(|&n| n as u64))
        .take(MAX_DETAIL_WORDS)
        .collect()
}

/// The reason a refusal names.
pub(super) fn refusal_reason(status: u32, detail: &[u64]) -> RendezvousFailure {
    use HandshakeFailure as H;
    use RendezvousFailure as R;
    let d = |i: usize| detail.get(i).copied().unwrap_or_default();
    let d32 = |i: usize| u32::try_from(d(i)).unwrap_or(u32::MAX);
    let size = |i: usize| Some(d(i)).filter(|&v| v != NO_REGION);
    match status {
        STATUS_AUTHENTICATION => R::Authentication,
        STATUS_TAMPERED => R::Tampered,
        STATUS_REPLAYED => R::Replayed,
        STATUS_DUPLICATE => R::Duplicate(d(0) as NodeId),
        STATUS_MISSING | STATUS_NOT_READY => {
            let nodes = detail.iter().skip(1).map(|&n| n as NodeId).collect();
            let waited = Duration::from_millis(d(0));
            if status == STATUS_MISSING {
                R::Missing { nodes, waited }
            } else {
                R::NotReady { nodes, waited }
            }
        }
        STATUS_VERSION | STATUS_NODES | STATUS_NODE => {
            // (found, expected) pairs of 32-bit fields.
            let (found, expected) = (d32(0), d32(1));
            R::Membership(match status {
                STATUS_VERSION => H::Version { found, expected },
                STATUS_NODES => H::Nodes { found, expected },
                _ => H::Node { found, expected },
            })
        }
        STATUS_CLUSTER => R::Membership(H::Cluster {
            found: d(0),
            expected: d(1),
        }),
        STATUS_REGION => R::Membership(H::RegionSize {
            region: RegionId(d(0) as u16),
            found: size(1),
            expected: size(2),
        }),
        _ => R::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::rendezvous::KIND_REPLY;

    #[test]
    fn every_refusal_survives_the_wire() {
        use HandshakeFailure as H;
        use RendezvousFailure as R;
        let m = R::Membership;
        let reasons = [
            R::Authentication,
            R::Tampered,
            R::Replayed,
            R::Duplicate(2),
            R::Missing {
                nodes: vec![1, 4],
                waited: Duration::from_millis(1500),
            },
            R::NotReady {
                nodes: vec![2],
                waited: Duration::from_millis(700),
            },
            m(H::Version {
                found: 2,
                expected: 1,
            }),
            m(H::Cluster {
                found: 9,
                expected: 8,
            }),
            m(H::Nodes {
                found: 4,
                expected: 3,
            }),
            m(H::Node {
                found: 7,
                expected: 0,
            }),
            R::Membership(H::RegionSize {
                region: RegionId(3),
                found: None,
                expected: Some(64),
            }),
            R::Malformed,
        ];
        for reason in reasons {
            let Reply::Refuse { status, detail } = Reply::decode(&refusal(&reason)).unwrap() else {
                panic!("not a refusal");
            };
            let back = refusal_reason(status, &detail);
            assert_eq!(back.to_string(), reason.to_string());
        }
    }

    #[test]
    fn sealed_messages_name_what_is_wrong() {
        let session = Session {
            client: [1; NONCE_BYTES],
            server: [2; NONCE_BYTES],
        };
        let other = Session {
            server: [3; NONCE_BYTES],
            ..session
        };
        let sealed = seal(b"k", KIND_REGISTER, &session, &[5; 16]);
        let open = |bytes: &[u8], secret: &[u8], s: &Session| {
            unseal(&mut &bytes[..], secret, KIND_REGISTER, s, 64)
        };
        assert_eq!(open(&sealed, b"k", &session).unwrap(), vec![5; 16]);
        assert!(matches!(
            open(&sealed, b"other", &session),
            Err(RendezvousFailure::Authentication)
        ));
        assert!(matches!(
            open(&sealed, b"k", &other),
            Err(RendezvousFailure::Replayed)
        ));
        let mut body = sealed.clone();
        body[SEALED_HEADER_BYTES + 3] ^= 1;
        assert!(matches!(
            open(&body, b"k", &session),
            Err(RendezvousFailure::Tampered)
        ));
        let mut nonce = sealed.clone();
        nonce[2 * 8 + 40] ^= 1;
        assert!(matches!(
            open(&nonce, b"k", &session),
            Err(RendezvousFailure::Tampered)
        ));
        // A reply's labels differ: a registration is no reply, and a
        // node's ready report is no go.
        assert!(matches!(
            unseal(&mut &sealed[..], b"k", KIND_REPLY, &session, 64),
            Err(RendezvousFailure::Malformed)
        ));
        let ready = seal(b"k", KIND_READY, &session, &[]);
        assert!(matches!(
            unseal(&mut &ready[..], b"k", KIND_GO, &session, 64),
            Err(RendezvousFailure::Malformed)
        ));
        // Relabelled as a go, its tag no longer verifies.
        let mut relabelled = ready.clone();
        relabelled[8..12].copy_from_slice(&KIND_GO.to_le_bytes());
        assert!(unseal(&mut &relabelled[..], b"k", KIND_GO, &session, 64).is_err());
    }
}
