//! The stores the harness can drive, behind one small abstraction: a node of
//! a store ([`StoreKind`], shared with the jobs of `nessie-examples`) is
//! started in a node process and hands out boxed [`KvClient`]s, one per
//! worker thread.
//!
//! CD, SD and HY are built in (`nessie`, `nessie-sd`, `nessie-hy`), and so
//! is LMDB (`lmdb-kv`, whose environment the harness makes for each run);
//! Redis and memcached report [`HarnessError::NotAvailable`] when their
//! server is not installed, and the experiments skip them with that message.

use crate::error::{HarnessError, Result};
use crate::lmdb::LmdbTarget;
use crate::peers::{self, PeerTarget};
use nessie::data::DataTableFigures;
use nessie::{Config, KvClient};
use nessie_examples::StoreKind;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

/// Whether this machine can run `system`: the stores are built in; the
/// peers need their server installed.
///
/// # Errors
/// [`HarnessError::NotAvailable`] saying why not.
pub fn check_available(system: StoreKind) -> Result<()> {
    if system.is_peer() {
        peers::check_installed(system)
    } else {
        Ok(())
    }
}

/// A started node of some system, living as long as the node process's run.
pub trait NodeHandle: Send + Sync + fmt::Debug {
    /// A new client for one worker thread.
    ///
    /// # Errors
    /// The store's error if it cannot make a client (e.g. a peer server does
    /// not accept the connection).
    fn client(&self) -> Result<Box<dyn KvClient>>;

    /// The figures of this node's data tables (CD only; the others have
    /// none to report).
    fn data_tables(&self) -> Vec<DataTableFigures> {
        Vec::new()
    }
}

/// Starts node `node_id` of `system` in this process.
///
/// For the nessie stores this creates the node's regions and maps its
/// peers' (waiting up to `config.attach_timeout` for them); for peer servers
/// it only remembers where the server listens. LMDB needs
/// [`start_run_node`].
///
/// # Errors
/// [`HarnessError::NotAvailable`] for a peer server that is not installed,
/// or the store's start-up error.
pub fn start_node(
    system: StoreKind,
    config: &Config,
    node_id: usize,
    peer: Option<&PeerTarget>,
) -> Result<Box<dyn NodeHandle>> {
    start_run_node(system, config, node_id, peer, None)
}

/// [`start_node`] with everything a run's spec may name: the peer server
/// (Redis, memcached) and the LMDB environment, which an LMDB node opens.
///
/// # Errors
/// As [`start_node`]; for LMDB, [`HarnessError::Usage`] without `lmdb`
/// and [`HarnessError::Lmdb`] if the environment is missing (a node on
/// another host than the harness) or cannot be opened.
pub fn start_run_node(
    system: StoreKind,
    config: &Config,
    node_id: usize,
    peer: Option<&PeerTarget>,
    lmdb: Option<&LmdbTarget>,
) -> Result<Box<dyn NodeHandle>> {
    check_available(system)?;
    match system {
        StoreKind::Cd => Ok(Box::new(StoreNode {
            node: nessie::Node::start(config.clone(), node_id)?,
            client: |n| Ok(Box::new(n.client()?)),
            tables: nessie::Node::data_table_figures,
        })),
        StoreKind::Sd => Ok(store_node(
            nessie_sd::Node::start(config.clone(), node_id)?,
            |n| Ok(Box::new(n.client()?)),
        )),
        StoreKind::Hy => Ok(store_node(
            nessie_hy::Node::start(config.clone(), node_id)?,
            |n| Ok(Box::new(n.client()?)),
        )),
        StoreKind::Redis | StoreKind::Memcached => {
            let target = peer.cloned().ok_or_else(|| {
                HarnessError::Usage(format!("{system} needs the address of its server"))
            })?;
            Ok(Box::new(PeerNode { system, target }))
        }
        StoreKind::Lmdb => {
            let target = lmdb.ok_or_else(|| {
                HarnessError::Usage("LMDB needs the directory of its environment".into())
            })?;
            let store = lmdb_kv::LmdbStore::open(&target.dir, &target.options())?;
            Ok(store_node(store, |s| Ok(Box::new(s.client()))))
        }
        StoreKind::Null => Ok(Box::new(NullNode::default())),
    }
}

/// Starts a replacement for node `node_id` of the client-driven store,
/// whose host was lost: [`nessie::Node::rejoin`] joins the current view with
/// empty memory, restores every copy the node holds and returns once the
/// node is active. Returns the node and what its restore copied.
///
/// # Errors
/// [`HarnessError::Usage`] for another system than CD (only CD keeps
/// replicas); the store's error if the rejoin is refused or times out.
pub fn rejoin_node(
    system: StoreKind,
    config: &Config,
    node_id: usize,
) -> Result<(Box<dyn NodeHandle>, nessie::RestoreFigures)> {
    if system != StoreKind::Cd {
        return Err(HarnessError::Usage(format!(
            "{system} keeps no replicas, so a lost node of it cannot rejoin"
        )));
    }
    let node = nessie::Node::rejoin(config.clone(), node_id)?;
    let figures = node.restore_figures().unwrap_or_default();
    let handle = StoreNode {
        node,
        client: |n| Ok(Box::new(n.client()?)),
        tables: nessie::Node::data_table_figures,
    };
    Ok((Box::new(handle), figures))
}

/// A node of one of the nessie stores (CD, SD, HY) or this process's
/// handle on the LMDB environment, with how to get a client of it; SD's
/// and HY's server workers run while it lives.
#[derive(Debug)]
struct StoreNode<N> {
    node: N,
    client: fn(&N) -> Result<Box<dyn KvClient>>,
    tables: fn(&N) -> Vec<DataTableFigures>,
}

impl<N: fmt::Debug + Send + Sync> NodeHandle for StoreNode<N> {
    fn client(&self) -> Result<Box<dyn KvClient>> {
        (self.client)(&self.node)
    }

    fn data_tables(&self) -> Vec<DataTableFigures> {
        (self.tables)(&self.node)
    }
}

fn store_node<N: fmt::Debug + Send + Sync + 'static>(
    node: N,
    client: fn(&N) -> Result<Box<dyn KvClient>>,
) -> Box<dyn NodeHandle> {
    Box::new(StoreNode {
        node,
        client,
        tables: |_| Vec::new(),
    })
}

/// A node process's handle on a peer server: it only knows where the
/// server listens.
#[derive(Debug)]
struct PeerNode {
    system: StoreKind,
    target: PeerTarget,
}

impl NodeHandle for PeerNode {
    fn client(&self) -> Result<Box<dyn KvClient>> {
        Ok(Box::new(peers::connect(self.system, &self.target)?))
    }
}

/// The `null` store's memory: 16 locked maps, by key hash.
type Shards = [Mutex<HashMap<Vec<u8>, Vec<u8>>>; 16];

/// The `null` system's node: a sharded in-memory map private to the process.
#[derive(Debug, Default)]
struct NullNode {
    shards: Arc<Shards>,
}

impl NodeHandle for NullNode {
    fn client(&self) -> Result<Box<dyn KvClient>> {
        Ok(Box::new(NullClient {
            shards: Arc::clone(&self.shards),
            stats: nessie::Stats::default(),
        }))
    }
}

#[derive(Debug)]
struct NullClient {
    shards: Arc<Shards>,
    stats: nessie::Stats,
}

impl NullClient {
    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Vec<u8>>> {
        let h = key
            .iter()
            .fold(0usize, |h, &b| h.wrapping_mul(31).wrapping_add(b.into()));
        self.shards[h % 16]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl KvClient for NullClient {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, nessie::Error> {
        self.stats.get.ops += 1;
        out.clear();
        let found = match self.shard(key).get(key) {
            Some(v) => {
                out.extend_from_slice(v);
                true
            }
            None => false,
        };
        Ok(found)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), nessie::Error> {
        self.stats.put.ops += 1;
        self.shard(key).insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, nessie::Error> {
        self.stats.delete.ops += 1;
        Ok(self.shard(key).remove(key).is_some())
    }

    fn stats(&self) -> nessie::Stats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_store_is_a_map() {
        let node = start_node(StoreKind::Null, &Config::default(), 0, None).unwrap();
        let mut a = node.client().unwrap();
        let mut b = node.client().unwrap();
        a.put(b"k", b"v").unwrap();
        assert_eq!(b.get(b"k").unwrap(), Some(b"v".to_vec()));
        assert!(b.delete(b"k").unwrap());
        assert_eq!(a.get(b"k").unwrap(), None);
        assert_eq!(a.stats().get.ops, 1);
    }

    #[test]
    fn a_cd_node_needs_the_shm_fabric() {
        let e = start_node(StoreKind::Cd, &Config::default(), 0, None).unwrap_err();
        assert!(e.to_string().contains("shm"), "{e}");
    }

    #[test]
    fn an_lmdb_node_needs_its_environment() {
        let e = start_node(StoreKind::Lmdb, &Config::default(), 0, None).unwrap_err();
        assert!(matches!(e, HarnessError::Usage(_)), "{e}");
        let tmp = tempfile::tempdir().unwrap();
        let target = LmdbTarget {
            dir: tmp.path().join("never-made"),
            map_bytes: 64 << 20,
            max_readers: 8,
        };
        let e = start_run_node(StoreKind::Lmdb, &Config::default(), 0, None, Some(&target))
            .unwrap_err();
        assert!(
            matches!(e, HarnessError::Lmdb(lmdb_kv::LmdbError::Missing { .. })),
            "{e}"
        );
    }

    #[test]
    fn lmdb_clients_of_a_node_share_its_environment() {
        let tmp = tempfile::tempdir().unwrap();
        let w = crate::workload::WorkloadSpec {
            keys: 10,
            value_size: 100,
            ..crate::workload::WorkloadSpec::default()
        };
        let target = crate::lmdb::prepare(&w, 2, &tmp.path().join("env")).unwrap();
        let node =
            start_run_node(StoreKind::Lmdb, &Config::default(), 0, None, Some(&target)).unwrap();
        let (mut a, mut b) = (node.client().unwrap(), node.client().unwrap());
        a.put(b"k", b"v").unwrap();
        assert_eq!(b.get(b"k").unwrap(), Some(b"v".to_vec()));
        assert!(b.delete(b"k").unwrap());
        assert_eq!(a.get(b"k").unwrap(), None);
        let s = a.stats();
        assert_eq!((s.get.ops, s.get.verbs.remote_bytes), (1, 0));
        assert_eq!(s.put.verbs.round_trips, 0);
    }
}
