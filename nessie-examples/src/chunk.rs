//! Values of any size on a store whose values are at most `value_size_max`
//! bytes: small ones inline, large ones as numbered chunks plus a manifest.
//!
//! The value under `key` always starts with a [`MANIFEST_BYTES`]-byte
//! header (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `NXB1` |
//! | 4 | kind: 0 inline (the data follows the header), 1 chunked |
//! | 5..8 | zero |
//! | 8..16 | data length |
//! | 16..24 | chunk size (chunked) or 0 |
//! | 24..32 | number of chunks (chunked) or 0 |
//! | 32..40 | xxh3-64 of the data |
//!
//! Data that fits in one value with its header is stored inline under
//! `key`; larger data is cut into chunks of `max_value` bytes stored under
//! `key/0`, `key/1`, … (the last one shorter), and the manifest is written
//! **last**, so a reader that finds the manifest (after a barrier) finds
//! every chunk. The reader checks every length and the checksum, so chunks
//! left over from another run of the same stage, or a mix of two writers,
//! are reported ([`JobError::Checksum`]) rather than returned.

use crate::keys::chunk_key;
use crate::{ops, JobError};
use nessie::KvClient;
use twox_hash::XxHash3_64;

/// Bytes of the header that starts every stored value.
pub const MANIFEST_BYTES: usize = 40;

const MAGIC: [u8; 4] = *b"NXB1";
const INLINE: u8 = 0;
const CHUNKED: u8 = 1;

/// How a value was stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// Store values written (or read): chunks plus the manifest.
    pub values: u64,
    /// Data bytes (without headers).
    pub bytes: u64,
    /// Chunks (0 for an inline value).
    pub chunks: u64,
}

/// The decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Manifest {
    kind: u8,
    len: u64,
    chunk: u64,
    chunks: u64,
    checksum: u64,
}

impl Manifest {
    fn encode(&self) -> [u8; MANIFEST_BYTES] {
        let mut b = [0u8; MANIFEST_BYTES];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = self.kind;
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.chunk.to_le_bytes());
        b[24..32].copy_from_slice(&self.chunks.to_le_bytes());
        b[32..40].copy_from_slice(&self.checksum.to_le_bytes());
        b
    }

    fn decode(key: &str, b: &[u8]) -> Result<Manifest, JobError> {
        let bad = |why: String| JobError::malformed(key, "manifest", why);
        if b.len() < MANIFEST_BYTES {
            return Err(bad(format!(
                "{} bytes, shorter than a header ({MANIFEST_BYTES})",
                b.len()
            )));
        }
        if b[0..4] != MAGIC {
            return Err(bad(format!("magic {:02x?} is not {MAGIC:02x?}", &b[0..4])));
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let m = Manifest {
            kind: b[4],
            len: word(8),
            chunk: word(16),
            chunks: word(24),
            checksum: word(32),
        };
        match m.kind {
            INLINE => {
                if m.chunk != 0 || m.chunks != 0 {
                    return Err(bad("an inline value names chunks".into()));
                }
                if b.len() - MANIFEST_BYTES != m.len as usize {
                    return Err(bad(format!(
                        "{} data bytes follow a header saying {}",
                        b.len() - MANIFEST_BYTES,
                        m.len
                    )));
                }
            }
            CHUNKED => {
                if b.len() != MANIFEST_BYTES {
                    return Err(bad("data after a chunk manifest".into()));
                }
                if m.chunk == 0 || m.len.div_ceil(m.chunk) != m.chunks {
                    return Err(bad(format!(
                        "{} bytes in chunks of {} cannot be {} chunks",
                        m.len, m.chunk, m.chunks
                    )));
                }
            }
            k => return Err(bad(format!("unknown kind {k}"))),
        }
        Ok(m)
    }
}

/// Stores `data` under `key`: inline if it fits in `max_value` bytes with
/// its header, else in chunks of `max_value` bytes, then the manifest.
///
/// # Errors
/// [`JobError::Spec`] if `max_value` cannot hold a header and one byte;
/// [`JobError::Store`] if a PUT fails.
pub fn put_blob<C: KvClient + ?Sized>(
    client: &mut C,
    key: &str,
    data: &[u8],
    max_value: usize,
) -> Result<Stored, JobError> {
    if max_value <= MANIFEST_BYTES {
        return Err(JobError::Spec(format!(
            "values of {max_value} bytes cannot hold a {MANIFEST_BYTES}-byte header and data"
        )));
    }
    let checksum = XxHash3_64::oneshot(data);
    if data.len() + MANIFEST_BYTES <= max_value {
        let header = Manifest {
            kind: INLINE,
            len: data.len() as u64,
            chunk: 0,
            chunks: 0,
            checksum,
        };
        let mut value = Vec::with_capacity(MANIFEST_BYTES + data.len());
        value.extend_from_slice(&header.encode());
        value.extend_from_slice(data);
        ops::put(client, key, &value)?;
        return Ok(Stored {
            values: 1,
            bytes: data.len() as u64,
            chunks: 0,
        });
    }
    let mut chunks = 0u64;
    for (i, chunk) in data.chunks(max_value).enumerate() {
        ops::put(client, &chunk_key(key, i), chunk)?;
        chunks += 1;
    }
    let manifest = Manifest {
        kind: CHUNKED,
        len: data.len() as u64,
        chunk: max_value as u64,
        chunks,
        checksum,
    };
    ops::put(client, key, &manifest.encode())?;
    Ok(Stored {
        values: chunks + 1,
        bytes: data.len() as u64,
        chunks,
    })
}

/// Reads the value [`put_blob`] stored under `key` into `out` (cleared
/// first).
///
/// # Errors
/// [`JobError::Missing`] if the key or a chunk is absent,
/// [`JobError::Malformed`] for a bad header or chunk length,
/// [`JobError::Checksum`] if the data does not match the manifest,
/// [`JobError::Store`] if a GET fails.
pub fn get_blob<C: KvClient + ?Sized>(
    client: &mut C,
    key: &str,
    out: &mut Vec<u8>,
) -> Result<Stored, JobError> {
    let mut head = Vec::new();
    ops::get_required(client, key, &mut head)?;
    let m = Manifest::decode(key, &head)?;
    out.clear();
    let stored = if m.kind == INLINE {
        out.extend_from_slice(&head[MANIFEST_BYTES..]);
        Stored {
            values: 1,
            bytes: m.len,
            chunks: 0,
        }
    } else {
        let mut chunk = Vec::new();
        for i in 0..m.chunks {
            let ck = chunk_key(key, i as usize);
            ops::get_required(client, &ck, &mut chunk)?;
            let expected = m.chunk.min(m.len.saturating_sub(i.saturating_mul(m.chunk)));
            if chunk.len() as u64 != expected {
                return Err(JobError::malformed(
                    &ck,
                    "chunk",
                    format!("{} bytes, the manifest says {expected}", chunk.len()),
                ));
            }
            out.extend_from_slice(&chunk);
        }
        Stored {
            values: m.chunks + 1,
            bytes: m.len,
            chunks: m.chunks,
        }
    };
    if XxHash3_64::oneshot(out) != m.checksum {
        out.clear();
        return Err(JobError::Checksum {
            key: key.to_owned(),
        });
    }
    Ok(stored)
}

/// Deletes the value [`put_blob`] stored under `key` and its chunks; how
/// many store values were removed.
///
/// # Errors
/// As [`get_blob`] for the manifest, [`JobError::Store`] if a DELETE fails.
pub fn delete_blob<C: KvClient + ?Sized>(client: &mut C, key: &str) -> Result<u64, JobError> {
    let mut head = Vec::new();
    if !ops::get_into(client, key, &mut head)? {
        return Ok(0);
    }
    let m = Manifest::decode(key, &head)?;
    // The manifest goes first: once it is gone no reader looks for chunks.
    let mut removed = u64::from(ops::delete(client, key)?);
    for i in 0..m.chunks {
        removed += u64::from(ops::delete(client, &chunk_key(key, i as usize))?);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemStore;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn small_values_are_inline_and_large_ones_chunked() {
        let store = MemStore::default();
        let mut c = store.client();
        let mut out = Vec::new();
        for (len, chunks) in [
            (0, 0),
            (60, 0),
            (61, 1),
            (100, 1),
            (101, 2),
            (200, 2),
            (201, 3),
        ] {
            let key = format!("k{len}");
            let d = data(len);
            let put = put_blob(&mut c, &key, &d, 100).unwrap();
            assert_eq!(put.chunks, chunks, "len {len}");
            assert_eq!(put.values, chunks + 1);
            let got = get_blob(&mut c, &key, &mut out).unwrap();
            assert_eq!(out, d, "len {len}");
            assert_eq!(got, put);
            assert!(store.longest_value() <= 100);
        }
    }

    #[test]
    fn every_chunk_and_the_manifest_are_checked() {
        let store = MemStore::default();
        let mut c = store.client();
        let d = data(1000);
        put_blob(&mut c, "k", &d, 100).unwrap();
        let mut out = Vec::new();

        // A chunk of another run (same length, other bytes).
        let mut other = d[100..200].to_vec();
        other[5] ^= 1;
        c.put(b"k/1", &other).unwrap();
        assert!(matches!(
            get_blob(&mut c, "k", &mut out),
            Err(JobError::Checksum { .. })
        ));
        assert!(out.is_empty());

        // A chunk of the wrong length.
        c.put(b"k/1", &d[100..150]).unwrap();
        assert!(matches!(
            get_blob(&mut c, "k", &mut out),
            Err(JobError::Malformed { what: "chunk", .. })
        ));

        // A chunk that is gone.
        c.delete(b"k/1").unwrap();
        assert!(
            matches!(get_blob(&mut c, "k", &mut out), Err(JobError::Missing { key }) if key == "k/1")
        );

        // Headers that do not add up.
        for bad in [
            b"short".to_vec(),
            [&b"XXXX"[..], &[0u8; 36]].concat(),
            {
                let mut m = Manifest {
                    kind: CHUNKED,
                    len: 1000,
                    chunk: 100,
                    chunks: 9,
                    checksum: 0,
                }
                .encode()
                .to_vec();
                m.truncate(MANIFEST_BYTES);
                m
            },
            Manifest {
                kind: 7,
                len: 0,
                chunk: 0,
                chunks: 0,
                checksum: 0,
            }
            .encode()
            .to_vec(),
            Manifest {
                kind: CHUNKED,
                len: 10,
                chunk: 0,
                chunks: 0,
                checksum: 0,
            }
            .encode()
            .to_vec(),
            [
                &Manifest {
                    kind: INLINE,
                    len: 3,
                    chunk: 0,
                    chunks: 0,
                    checksum: 0,
                }
                .encode()[..],
                b"ab",
            ]
            .concat(),
        ] {
            c.put(b"k", &bad).unwrap();
            assert!(
                matches!(
                    get_blob(&mut c, "k", &mut out),
                    Err(JobError::Malformed {
                        what: "manifest",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            get_blob(&mut c, "absent", &mut out),
            Err(JobError::Missing { .. })
        ));
    }

    #[test]
    fn delete_removes_manifest_and_chunks() {
        let store = MemStore::default();
        let mut c = store.client();
        put_blob(&mut c, "k", &data(1000), 100).unwrap();
        assert_eq!(store.len(), 11);
        assert_eq!(delete_blob(&mut c, "k").unwrap(), 11);
        assert_eq!(store.len(), 0);
        assert_eq!(delete_blob(&mut c, "k").unwrap(), 0);
    }

    #[test]
    fn tiny_value_limits_are_refused() {
        let store = MemStore::default();
        let mut c = store.client();
        assert!(matches!(
            put_blob(&mut c, "k", b"x", MANIFEST_BYTES),
            Err(JobError::Spec(_))
        ));
    }
}
