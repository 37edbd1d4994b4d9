//! # lmdb-kv: one LMDB environment as a [`KvClient`]
//!
//! LMDB (through the `heed` binding, which builds LMDB's C source) as a
//! reference point for the harness's `peers` experiment: every process of a
//! host opens the same environment, configured as a shared cache would be —
//! `NO_SYNC` and `NO_META_SYNC` (nothing is flushed: the data lives in
//! `/dev/shm` for one run), a map sized for the data with ample headroom
//! ([`map_bytes_for`]), and a reader table for every worker thread.
//!
//! A GET is one read-only transaction, lock-free, whose value is copied out
//! into the caller's buffer before the transaction ends; a PUT or DELETE is
//! one write transaction, and LMDB admits one writer at a time across all
//! processes of the environment.
//!
//! Nothing crosses a network, so each client counts no round trips, no
//! remote verbs and no network bytes in [`nessie::Stats`]; it counts the
//! one local copy of the value instead: a local READ of the value's bytes
//! per GET, a local WRITE per PUT (of the value's bytes) and per DELETE (of
//! none).
//!
//! Errors are typed ([`LmdbError`]); the ones a [`KvClient`] returns are
//! [`nessie::Error::Io`] wrapping an [`LmdbError`] (see [`lmdb_error`]),
//! except bad keys, which are [`nessie::Error::EmptyKey`] and
//! [`nessie::Error::KeyTooLarge`] as for every store.

#![deny(missing_docs)]

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, MdbError};
use nessie::fabric::VerbCounts;
use nessie::{KvClient, OpKind, Stats};
use std::path::{Path, PathBuf};

/// Headroom added to every map, whatever the data.
pub const MAP_SLACK_BYTES: u64 = 64 << 20;

/// Maps are whole MiB, a multiple of every page size LMDB runs with.
const MAP_GRAIN: u64 = 1 << 20;

/// LMDB's page size on the hosts this runs on.
const PAGE: u64 = 4096;

/// The largest node LMDB keeps inside a leaf page (≈ half a page less the
/// page header); a larger value goes to overflow pages of its own.
const NODE_MAX: u64 = 2038;

/// LMDB's data file inside an environment's directory.
const DATA_FILE: &str = "data.mdb";

/// Why an LMDB environment cannot be made, opened or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LmdbError {
    /// The directory holds no environment (the harness creates it before
    /// starting the nodes; a process on another host sees none).
    #[error(
        "no LMDB environment in {} (no {DATA_FILE}): it must be created first, on this host",
        dir.display()
    )]
    Missing {
        /// The environment's directory.
        dir: PathBuf,
    },
    /// The file system of the directory has less room than the map.
    #[error(
        "{} has {} MiB free, but the LMDB map needs {} MiB (twice the data plus 64 MiB): \
         use fewer keys or smaller values, or enlarge that file system \
         (for /dev/shm: mount -o remount,size=…)",
        dir.display(), free_bytes >> 20, need_bytes.div_ceil(1 << 20)
    )]
    NoRoom {
        /// The environment's directory.
        dir: PathBuf,
        /// Bytes free there.
        free_bytes: u64,
        /// Bytes the map needs.
        need_bytes: u64,
    },
    /// The requested map is too small to hold anything, or too large to
    /// address.
    #[error("an LMDB map of {map_bytes} bytes is not usable: {why}")]
    BadMapSize {
        /// The requested size.
        map_bytes: u64,
        /// Why not.
        why: &'static str,
    },
    /// A write found the map full: the data outgrew the size it was given.
    #[error(
        "the LMDB map ({} MiB) is full: the data outgrew the map it was sized for",
        map_bytes >> 20
    )]
    MapFull {
        /// The map's size.
        map_bytes: u64,
    },
    /// Any other error of LMDB or of the file system.
    #[error("LMDB in {}: {source}", dir.display())]
    Lmdb {
        /// The environment's directory.
        dir: PathBuf,
        /// LMDB's error.
        #[source]
        source: heed::Error,
    },
}

/// The [`LmdbError`] inside an error a [`LmdbClient`] returned, if any.
#[must_use]
pub fn lmdb_error(e: &nessie::Error) -> Option<&LmdbError> {
    match e {
        nessie::Error::Io(io) => io.get_ref()?.downcast_ref::<LmdbError>(),
        _ => None,
    }
}

/// How an environment is opened: the same for every process that shares
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The map's size, bytes (a whole number of MiB; see
    /// [`map_bytes_for`]).
    pub map_bytes: u64,
    /// Slots of the reader table: at least one per thread that reads at
    /// once, in all processes.
    pub max_readers: u32,
}

/// The map for `keys` entries of `key_size`-byte keys and
/// `value_size`-byte values: twice their size in LMDB's pages (a value
/// larger than half a page takes whole overflow pages; the factor covers
/// half-full leaves and the pages a write transaction copies before older
/// ones are free again) plus [`MAP_SLACK_BYTES`], in whole MiB. `None` if
/// that overflows.
#[must_use]
pub fn map_bytes_for(keys: u64, key_size: usize, value_size: usize) -> Option<u64> {
    let (k, v) = (key_size as u64, value_size as u64);
    // Node header (8 bytes) and the leaf's 2-byte offset entry.
    let inline = 8 + 2 + k.checked_add(v)?;
    let entry = if inline <= NODE_MAX {
        inline
    } else {
        // The leaf keeps the key and a page number; the value's pages carry
        // a 16-byte header.
        8 + 2 + k + 8 + v.checked_add(16)?.div_ceil(PAGE) * PAGE
    };
    let bytes = keys
        .checked_mul(entry)?
        .checked_mul(2)?
        .checked_add(MAP_SLACK_BYTES)?;
    bytes.checked_next_multiple_of(MAP_GRAIN)
}

/// Checks `options` and turns the map size into LMDB's.
fn map_size(options: &Options) -> Result<usize, LmdbError> {
    let bad = |why| LmdbError::BadMapSize {
        map_bytes: options.map_bytes,
        why,
    };
    if options.map_bytes < MAP_GRAIN || options.map_bytes % MAP_GRAIN != 0 {
        return Err(bad("it must be a positive whole number of MiB"));
    }
    usize::try_from(options.map_bytes).map_err(|_| bad("it is larger than the address space"))
}

/// Bytes free on the file system of `dir`.
fn free_bytes(dir: &Path) -> Result<u64, LmdbError> {
    let s = nix::sys::statvfs::statvfs(dir).map_err(|e| LmdbError::Lmdb {
        dir: dir.to_owned(),
        source: heed::Error::Io(e.into()),
    })?;
    Ok(s.blocks_available().saturating_mul(s.fragment_size()))
}

/// Creates a fresh environment in the existing, empty directory `dir`,
/// after checking that its file system has room for the whole map, and
/// closes it again: the processes that share it then [`LmdbStore::open`]
/// it with the same `options`.
///
/// # Errors
/// [`LmdbError::BadMapSize`], [`LmdbError::NoRoom`], or LMDB's error.
pub fn create(dir: &Path, options: &Options) -> Result<(), LmdbError> {
    map_size(options)?;
    let free = free_bytes(dir)?;
    if free < options.map_bytes {
        return Err(LmdbError::NoRoom {
            dir: dir.to_owned(),
            free_bytes: free,
            need_bytes: options.map_bytes,
        });
    }
    let store = open_env(dir, options)?;
    drop(store);
    Ok(())
}

/// Opens (creating its files if need be) the environment in `dir`.
#[expect(
    unsafe_code,
    reason = "heed marks opening an LMDB environment and its sync flags unsafe"
)]
fn open_env(dir: &Path, options: &Options) -> Result<LmdbStore, LmdbError> {
    let lmdb = |source| LmdbError::Lmdb {
        dir: dir.to_owned(),
        source,
    };
    let mut open = EnvOpenOptions::new();
    open.map_size(map_size(options)?)
        .max_readers(options.max_readers.max(1));
    // SAFETY: NO_SYNC and NO_META_SYNC only drop the flushes that make
    // commits durable across a crash of the host; the environment lives in
    // /dev/shm for one run and is removed afterwards, so nothing relies on
    // durability. NO_LOCK, the one flag that needs outside locking, is not
    // set.
    unsafe { open.flags(EnvFlags::NO_SYNC | EnvFlags::NO_META_SYNC) };
    // SAFETY: the directory is made fresh for the environment by its
    // creator and is only ever opened through LMDB, with LMDB's own lock
    // file (no NO_LOCK), on a local file system (/dev/shm or a scratch
    // directory), by processes of one host; nothing truncates or writes the
    // files behind LMDB's back while they are mapped. heed refuses a second
    // open of the same path in one process, so each process maps it once.
    let env = unsafe { open.open(dir) }.map_err(lmdb)?;
    let mut wtxn = env.write_txn().map_err(lmdb)?;
    let db: Database<Bytes, Bytes> = env.create_database(&mut wtxn, None).map_err(lmdb)?;
    wtxn.commit().map_err(lmdb)?;
    Ok(LmdbStore {
        env,
        db,
        dir: dir.to_owned(),
        map_bytes: options.map_bytes,
    })
}

/// This process's handle on a shared environment; hands out clients.
#[derive(Debug)]
pub struct LmdbStore {
    env: Env,
    db: Database<Bytes, Bytes>,
    dir: PathBuf,
    map_bytes: u64,
}

impl LmdbStore {
    /// Opens the environment that [`create`] made in `dir`, with the same
    /// `options`. At most one store per directory may be open in a process.
    ///
    /// # Errors
    /// [`LmdbError::Missing`] if `dir` holds no environment (e.g. on
    /// another host than its creator's), [`LmdbError::BadMapSize`], or
    /// LMDB's error (also if this process has it open already).
    pub fn open(dir: &Path, options: &Options) -> Result<Self, LmdbError> {
        if !dir.join(DATA_FILE).is_file() {
            return Err(LmdbError::Missing {
                dir: dir.to_owned(),
            });
        }
        open_env(dir, options)
    }

    /// A client for one thread.
    #[must_use]
    pub fn client(&self) -> LmdbClient {
        LmdbClient {
            env: self.env.clone(),
            db: self.db,
            dir: self.dir.clone(),
            map_bytes: self.map_bytes,
            stats: Stats::default(),
        }
    }

    /// The environment's directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// A client of a shared environment, for one thread.
#[derive(Debug)]
pub struct LmdbClient {
    env: Env,
    db: Database<Bytes, Bytes>,
    dir: PathBuf,
    map_bytes: u64,
    stats: Stats,
}

impl LmdbClient {
    fn error(&self, e: heed::Error) -> nessie::Error {
        let e = match e {
            heed::Error::Mdb(MdbError::MapFull) => LmdbError::MapFull {
                map_bytes: self.map_bytes,
            },
            source => LmdbError::Lmdb {
                dir: self.dir.clone(),
                source,
            },
        };
        nessie::Error::Io(std::io::Error::other(e))
    }

    fn check_key(&self, key: &[u8]) -> Result<(), nessie::Error> {
        if key.is_empty() {
            Err(nessie::Error::EmptyKey)
        } else if key.len() > self.env.max_key_size() {
            Err(nessie::Error::KeyTooLarge)
        } else {
            Ok(())
        }
    }

    /// Counts one operation of `op`: its local copy of `bytes` on success.
    fn count<T>(
        &mut self,
        op: OpKind,
        result: Result<T, nessie::Error>,
        bytes: u64,
    ) -> Result<T, nessie::Error> {
        let s = self.stats.of_mut(op);
        s.ops += 1;
        match &result {
            Ok(_) if op == OpKind::Get => {
                s.verbs += VerbCounts {
                    reads: 1,
                    read_bytes: bytes,
                    local: 1,
                    ..VerbCounts::default()
                };
            }
            Ok(_) => {
                s.verbs += VerbCounts {
                    writes: 1,
                    write_bytes: bytes,
                    local: 1,
                    ..VerbCounts::default()
                };
            }
            Err(_) => s.errors += 1,
        }
        result
    }

    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, nessie::Error> {
        self.check_key(key)?;
        let rtxn = self.env.read_txn().map_err(|e| self.error(e))?;
        // The value is copied out while the read transaction pins its page.
        match self.db.get(&rtxn, key).map_err(|e| self.error(e))? {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn write(&self, key: &[u8], value: Option<&[u8]>) -> Result<bool, nessie::Error> {
        self.check_key(key)?;
        let mut wtxn = self.env.write_txn().map_err(|e| self.error(e))?;
        let existed = match value {
            Some(v) => {
                self.db.put(&mut wtxn, key, v).map_err(|e| self.error(e))?;
                true
            }
            None => self.db.delete(&mut wtxn, key).map_err(|e| self.error(e))?,
        };
        wtxn.commit().map_err(|e| self.error(e))?;
        Ok(existed)
    }
}

impl KvClient for LmdbClient {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, nessie::Error> {
        out.clear();
        let result = self.read(key, out);
        let copied = out.len() as u64;
        self.count(OpKind::Get, result, copied)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), nessie::Error> {
        let result = self.write(key, Some(value)).map(|_| ());
        self.count(OpKind::Put, result, value.len() as u64)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, nessie::Error> {
        let result = self.write(key, None);
        self.count(OpKind::Delete, result, 0)
    }

    fn stats(&self) -> Stats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            map_bytes: 8 << 20,
            max_readers: 8,
        }
    }

    #[test]
    fn clients_share_one_environment() {
        let dir = tempfile::tempdir().unwrap();
        create(dir.path(), &options()).unwrap();
        let store = LmdbStore::open(dir.path(), &options()).unwrap();
        let (mut a, mut b) = (store.client(), store.client());
        assert_eq!(a.get(b"k").unwrap(), None);
        a.put(b"k", b"one").unwrap();
        assert_eq!(b.get(b"k").unwrap(), Some(b"one".to_vec()));
        b.put(b"k", b"").unwrap();
        assert_eq!(a.get(b"k").unwrap(), Some(Vec::new()));
        assert!(a.delete(b"k").unwrap());
        assert!(!b.delete(b"k").unwrap());
        let s = a.stats();
        assert_eq!((s.get.ops, s.put.ops, s.delete.ops), (2, 1, 1));
        assert_eq!(s.get.verbs.read_bytes, 0, "one miss, one empty value");
        assert_eq!(s.put.verbs.write_bytes, 3);
        let all = s.get.verbs + s.put.verbs + s.delete.verbs;
        assert_eq!((all.round_trips, all.remote, all.remote_bytes), (0, 0, 0));
        assert_eq!(all.local, 4);
    }

    #[test]
    fn bad_keys_are_typed() {
        let dir = tempfile::tempdir().unwrap();
        create(dir.path(), &options()).unwrap();
        let store = LmdbStore::open(dir.path(), &options()).unwrap();
        let mut c = store.client();
        assert!(matches!(c.put(b"", b"v"), Err(nessie::Error::EmptyKey)));
        let long = vec![b'k'; 4096];
        assert!(matches!(c.get(&long), Err(nessie::Error::KeyTooLarge)));
        assert_eq!(c.stats().put.errors, 1);
    }

    #[test]
    fn a_missing_environment_is_typed() {
        let dir = tempfile::tempdir().unwrap();
        let e = LmdbStore::open(dir.path(), &options()).unwrap_err();
        assert!(matches!(e, LmdbError::Missing { .. }), "{e}");
        assert!(e.to_string().contains("no LMDB environment"), "{e}");
    }

    #[test]
    fn a_full_map_is_typed() {
        let dir = tempfile::tempdir().unwrap();
        let small = Options {
            map_bytes: 1 << 20,
            max_readers: 8,
        };
        create(dir.path(), &small).unwrap();
        let store = LmdbStore::open(dir.path(), &small).unwrap();
        let mut c = store.client();
        let value = vec![7u8; 64 << 10];
        let e = (0u32..64)
            .find_map(|i| c.put(&i.to_le_bytes(), &value).err())
            .expect("64 values of 64 KiB do not fit 1 MiB");
        assert!(
            matches!(lmdb_error(&e), Some(LmdbError::MapFull { map_bytes }) if *map_bytes == 1 << 20),
            "{e}"
        );
    }

    #[test]
    fn maps_are_checked_before_anything_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let odd = Options {
            map_bytes: 12_345,
            max_readers: 1,
        };
        assert!(matches!(
            create(dir.path(), &odd),
            Err(LmdbError::BadMapSize { .. })
        ));
        let huge = Options {
            map_bytes: 1 << 60,
            max_readers: 1,
        };
        let e = create(dir.path(), &huge).unwrap_err();
        assert!(matches!(e, LmdbError::NoRoom { .. }), "{e}");
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[test]
    fn maps_have_headroom() {
        let m = map_bytes_for(1000, 128, 16 << 10).unwrap();
        // A 16 KiB value takes five overflow pages.
        let want: u64 = 2 * 1000 * (8 + 2 + 128 + 8 + 5 * 4096) + (64 << 20);
        assert_eq!(m, want.next_multiple_of(1 << 20));
        assert!(map_bytes_for(100, 16, 100).unwrap() >= MAP_SLACK_BYTES);
        assert_eq!(map_bytes_for(u64::MAX, 128, 1 << 20), None);
    }
}
