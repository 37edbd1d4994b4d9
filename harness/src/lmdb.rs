//! LMDB as a reference point (crate `lmdb-kv`): one environment in a fresh
//! directory under `/dev/shm`, made by the harness for a run
//! ([`prepare`]) and opened by every node process of the run
//! ([`crate::system::start_run_node`]); the directory goes with the
//! cluster's other shared-memory files when the run ends.
//!
//! The environment is configured as a shared cache would be: `NO_SYNC` and
//! `NO_META_SYNC`, a map of twice the data plus 64 MiB
//! ([`lmdb_kv::map_bytes_for`]), and a reader slot for every worker thread
//! of every node with room to spare. It cannot be shared across hosts, so
//! runs under a launcher on other hosts skip it ([`check_host`]).

use crate::error::{HarnessError, Result};
use crate::workload::WorkloadSpec;
use nessie_examples::StoreKind;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Reader slots beyond one per worker thread (a node's preload threads,
/// threads that end while their slot is still being released).
const SPARE_READERS: u32 = 32;

/// Where a run's environment is and how every process opens it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LmdbTarget {
    /// The environment's directory (under `/dev/shm`).
    pub dir: PathBuf,
    /// The map's size, bytes.
    pub map_bytes: u64,
    /// Slots of the reader table.
    pub max_readers: u32,
}

impl LmdbTarget {
    /// The options every process opens the environment with.
    #[must_use]
    pub fn options(&self) -> lmdb_kv::Options {
        lmdb_kv::Options {
            map_bytes: self.map_bytes,
            max_readers: self.max_readers,
        }
    }
}

/// Whether LMDB can run with its nodes where `launched_peer_host` says:
/// `None` when the harness starts them itself on this host; under a
/// launcher, the address Redis and memcached would listen on, which is
/// loopback only when every node runs on this host. Nodes on other hosts
/// could not share the environment.
///
/// # Errors
/// [`HarnessError::NotAvailable`] saying why not.
pub fn check_host(launched_peer_host: Option<Result<IpAddr>>) -> Result<()> {
    let not_here = |host: String| HarnessError::NotAvailable {
        system: StoreKind::Lmdb,
        why: format!(
            "its environment lives in this host's /dev/shm and cannot be shared with nodes a \
             launcher may place on other hosts ({host}; give --peer-host 127.0.0.1 when every \
             node runs on this host)"
        ),
    };
    match launched_peer_host {
        None => Ok(()),
        Some(Ok(host)) if host.is_loopback() => Ok(()),
        Some(Ok(host)) => Err(not_here(format!("peer host {host}"))),
        Some(Err(_)) => Err(not_here("no peer host".into())),
    }
}

/// Whether LMDB can hold keys of `key_size` bytes (at most 511 in LMDB's
/// default build).
///
/// # Errors
/// [`HarnessError::NotAvailable`] for longer keys.
pub fn check_keys(key_size: usize) -> Result<()> {
    const MAX_KEY: usize = 511;
    if key_size > MAX_KEY {
        return Err(HarnessError::NotAvailable {
            system: StoreKind::Lmdb,
            why: format!("its keys are at most {MAX_KEY} bytes, and this run's have {key_size}"),
        });
    }
    Ok(())
}

/// Makes `dir` (which must not exist yet) and a fresh environment in it
/// for `workload` and `threads` worker threads in all.
///
/// # Errors
/// [`HarnessError::Usage`] for a workload too large to map,
/// [`HarnessError::Io`] if `dir` cannot be made, [`HarnessError::Lmdb`] if
/// its file system has no room for the map (or LMDB fails).
pub fn prepare(workload: &WorkloadSpec, threads: usize, dir: &Path) -> Result<LmdbTarget> {
    let w = workload;
    let map_bytes = lmdb_kv::map_bytes_for(w.keys, w.key_size, w.value_size).ok_or_else(|| {
        HarnessError::Usage(format!(
            "{} keys of {} bytes are too many to map for LMDB",
            w.keys, w.value_size
        ))
    })?;
    let max_readers = u32::try_from(threads)
        .unwrap_or(u32::MAX)
        .saturating_add(SPARE_READERS);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(HarnessError::io("creating", dir))?;
    }
    let target = LmdbTarget {
        dir: dir.to_owned(),
        map_bytes,
        max_readers,
    };
    lmdb_kv::create(dir, &target.options())?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(keys: u64, value_size: usize) -> WorkloadSpec {
        WorkloadSpec {
            keys,
            value_size,
            ..WorkloadSpec::default()
        }
    }

    #[test]
    fn a_run_gets_a_roomy_environment() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("env");
        let w = workload(1000, 16 << 10);
        let t = prepare(&w, 6, &dir).unwrap();
        assert!(t.map_bytes >= 2 * 1000 * (16 << 10) + (64 << 20));
        assert!(t.max_readers >= 6);
        assert!(dir.join("data.mdb").is_file());
        // The directory must be fresh: a run never reuses another's.
        assert!(matches!(prepare(&w, 6, &dir), Err(HarnessError::Io { .. })));
    }

    #[test]
    fn too_little_room_is_a_typed_error() {
        let tmp = tempfile::tempdir().unwrap();
        let e = prepare(&workload(1 << 40, 1 << 20), 2, &tmp.path().join("a")).unwrap_err();
        assert!(
            matches!(e, HarnessError::Lmdb(lmdb_kv::LmdbError::NoRoom { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("MiB free"), "{e}");
        let e = prepare(&workload(u64::MAX, 1 << 20), 2, &tmp.path().join("b")).unwrap_err();
        assert!(matches!(e, HarnessError::Usage(_)), "{e}");
    }

    #[test]
    fn long_keys_and_other_hosts_skip_lmdb() {
        assert!(check_keys(128).is_ok());
        assert!(matches!(
            check_keys(1024),
            Err(HarnessError::NotAvailable { .. })
        ));
        let here: IpAddr = std::net::Ipv4Addr::LOCALHOST.into();
        let there: IpAddr = std::net::Ipv4Addr::new(10, 0, 0, 1).into();
        assert!(check_host(None).is_ok());
        assert!(check_host(Some(Ok(here))).is_ok());
        let e = check_host(Some(Ok(there))).unwrap_err();
        assert!(matches!(e, HarnessError::NotAvailable { .. }));
        assert!(e.to_string().contains("other hosts"), "{e}");
    }
}
