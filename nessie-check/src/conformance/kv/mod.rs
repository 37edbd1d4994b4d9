//! A conformance suite for stores behind [`KvClient`]: Nessie itself and
//! both baselines must behave alike through the client interface.
//!
//! Every scenario takes a cluster (a [`Store`]) or the means to start one,
//! checks behaviour through [`KvClient`] only, and panics on the first
//! deviation, like the assertions of a test. What the suite holds a store
//! to:
//!
//! * PUT, GET, `get_into`, DELETE and overwrites agree across nodes, for
//!   many keys and for values of every size class;
//! * bad input gets a typed error, is counted, and changes nothing; a full
//!   index is reported and keeps what it holds;
//! * concurrent clients only ever read values somebody wrote, whole, and
//!   never miss a key while the index moves it;
//! * the same holds for nodes in separate processes on shared memory
//!   ([`nodes`]) and for nodes on the `tcp` fabric.

mod concurrency;
pub mod nodes;

pub use concurrency::{
    concurrent_mixed, last_writer_wins, readers_never_miss_moved_keys, readers_see_whole_values,
};

use nessie::{Config, Error, KvClient};

/// A cluster under test, started in this process.
pub trait Store: Sized + Sync {
    /// Its client type.
    type C: KvClient;
    /// Starts a cluster of `config.nodes` nodes on the local fabric.
    ///
    /// # Errors
    /// When the store refuses `config`.
    fn local(config: Config) -> Result<Self, Error>;
    /// A client on `node`.
    ///
    /// # Errors
    /// When the node has no client slot left or does not exist.
    fn client(&self, node: usize) -> Result<Self::C, Error>;
}

/// Each store's `Cluster` is a [`Store`] through its own `local` and
/// `client`.
macro_rules! impl_store {
    ($($store:ident),*) => {$(
        impl Store for $store::Cluster {
            type C = $store::Client;
            fn local(config: Config) -> Result<Self, Error> {
                $store::Cluster::local(config)
            }
            fn client(&self, node: usize) -> Result<Self::C, Error> {
                $store::Cluster::client(self, node)
            }
        }
    )*};
}

impl_store!(nessie, nessie_sd, nessie_hy);

/// Starts a local cluster of `config`, which the store must accept.
///
/// # Panics
/// When the store refuses `config`.
#[must_use]
pub fn local<S: Store>(config: Config) -> S {
    S::local(config).unwrap_or_else(|e| panic!("starting a local cluster: {e}"))
}

/// The small tables the suite's clusters use (the linearizability checker
/// uses them too).
#[must_use]
pub fn small_config() -> Config {
    Config {
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        ..Config::default()
    }
}

/// [`small_config`] with `workers` server workers per node (where the store
/// has servers).
#[must_use]
pub fn workers_config(workers: usize) -> Config {
    Config {
        server_workers: workers,
        ..small_config()
    }
}

/// A value of `len` bytes that names its writer.
#[must_use]
pub fn value(tag: &str, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = tag.bytes().cycle().take(len).collect();
    if len >= tag.len() {
        v[..tag.len()].copy_from_slice(tag.as_bytes());
    }
    v
}

/// PUT, GET, `get_into`, DELETE and overwrites of one key from two nodes,
/// including an empty value.
///
/// # Panics
/// On any deviation.
pub fn put_get_delete_overwrite<S: Store>(s: &S) {
    let mut a = s.client(0).unwrap();
    let mut b = s.client(2).unwrap();
    assert_eq!(a.get(b"alpha").unwrap(), None);
    a.put(b"alpha", b"one").unwrap();
    assert_eq!(b.get(b"alpha").unwrap(), Some(b"one".to_vec()));
    b.put(b"alpha", b"two, longer than the first").unwrap();
    assert_eq!(
        a.get(b"alpha").unwrap(),
        Some(b"two, longer than the first".to_vec())
    );
    let mut out = vec![9; 3];
    assert!(a.get_into(b"alpha", &mut out).unwrap());
    assert_eq!(out, b"two, longer than the first");
    assert!(a.delete(b"alpha").unwrap());
    assert!(!b.delete(b"alpha").unwrap());
    assert!(!a.get_into(b"alpha", &mut out).unwrap());
    assert!(out.is_empty(), "get_into clears the buffer");
    a.put(b"alpha", b"").unwrap();
    assert_eq!(b.get(b"alpha").unwrap(), Some(Vec::new()));
}

/// `count` keys written, read and half deleted from three nodes.
///
/// # Panics
/// On any deviation.
pub fn many_keys<S: Store>(s: &S, count: usize) {
    let mut clients: Vec<_> = (0..3).map(|n| s.client(n).unwrap()).collect();
    for i in 0..count {
        let key = format!("key-{i}");
        if let Err(e) = clients[i % 3].put(key.as_bytes(), &value(&key, 20 + i % 300)) {
            panic!("put {key}: {e}");
        }
    }
    for i in 0..count {
        let key = format!("key-{i}");
        assert_eq!(
            clients[(i + 1) % 3].get(key.as_bytes()).unwrap(),
            Some(value(&key, 20 + i % 300)),
            "{key}"
        );
    }
    for i in (0..count).step_by(2) {
        assert!(clients[i % 3]
            .delete(format!("key-{i}").as_bytes())
            .unwrap());
    }
    for i in 0..count {
        let key = format!("key-{i}");
        let expect = (i % 2 == 1).then(|| value(&key, 20 + i % 300));
        assert_eq!(clients[2].get(key.as_bytes()).unwrap(), expect, "{key}");
    }
}

/// Values of every size class up to `value_size_max`, each overwritten
/// with a value of another class.
///
/// # Panics
/// On any deviation.
pub fn every_size_class<S: Store>(s: &S, value_size_max: usize) {
    let mut a = s.client(1).unwrap();
    let mut b = s.client(0).unwrap();
    let mut sizes = vec![0, 1, 7, 8, 255, 256, 257, 4095, 16 << 10, value_size_max];
    sizes.push(value_size_max / 3);
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("size-{i}");
        a.put(key.as_bytes(), &value(&key, len)).unwrap();
    }
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("size-{i}");
        assert_eq!(
            b.get(key.as_bytes()).unwrap(),
            Some(value(&key, len)),
            "{len}"
        );
        let other = sizes[(i + 3) % sizes.len()];
        b.put(key.as_bytes(), &value("x", other)).unwrap();
        assert_eq!(a.get(key.as_bytes()).unwrap(), Some(value("x", other)));
    }
}

/// Empty and oversized keys and values get their typed error and change
/// nothing; a key of the largest size works. Where `counted` (the
/// baselines), the store also counts each refusal as an error of its
/// operation and `get_into` clears the buffer before refusing the key.
///
/// # Panics
/// On any deviation.
pub fn bad_input_changes_nothing<S: Store>(s: &S, config: &Config, counted: bool) {
    let mut c = s.client(0).unwrap();
    c.put(b"k", b"v").unwrap();
    let long_key = vec![1u8; config.key_size_max + 1];
    let big = vec![2u8; config.value_size_max + 1];
    assert!(matches!(c.get(b""), Err(Error::EmptyKey)));
    assert!(matches!(c.put(b"", b"v"), Err(Error::EmptyKey)));
    assert!(matches!(c.delete(b""), Err(Error::EmptyKey)));
    assert!(matches!(c.get(&long_key), Err(Error::KeyTooLarge)));
    assert!(matches!(c.put(&long_key, b"v"), Err(Error::KeyTooLarge)));
    assert!(matches!(c.delete(&long_key), Err(Error::KeyTooLarge)));
    assert!(matches!(c.put(b"k", &big), Err(Error::ValueTooLarge)));
    let mut out = vec![1];
    assert!(matches!(c.get_into(b"", &mut out), Err(Error::EmptyKey)));
    if counted {
        assert!(out.is_empty());
    }
    assert_eq!(c.get(b"k").unwrap(), Some(b"v".to_vec()));
    let max_key = vec![3u8; config.key_size_max];
    c.put(&max_key, b"edge").unwrap();
    assert_eq!(c.get(&max_key).unwrap(), Some(b"edge".to_vec()));
    if counted {
        let stats = c.stats();
        assert_eq!(stats.get.errors, 3);
        assert_eq!(stats.put.errors, 3);
        assert_eq!(stats.delete.errors, 2);
    }
}

/// Forty keys into one node of eight index slots: some PUTs report
/// [`Error::IndexFull`] after trying to displace entries, at least half the
/// slots fill, every key stored stays readable, an absent key reads as
/// absent, and overwriting a stored key needs no new slot.
///
/// # Panics
/// On any deviation.
pub fn full_index_is_reported<S: Store>() {
    let cluster: S = local(Config {
        nodes: 1,
        index_slots_per_node: 8,
        ..small_config()
    });
    let mut c = cluster.client(0).unwrap();
    let mut stored = Vec::new();
    let mut full = 0;
    for i in 0..40 {
        let key = format!("k{i}");
        match c.put(key.as_bytes(), key.as_bytes()) {
            Ok(()) => stored.push(key),
            Err(Error::IndexFull) => full += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        full > 0 && stored.len() <= 8 && stored.len() >= 4,
        "{stored:?}"
    );
    assert!(c.stats().put.migrations > 0, "displacement was tried");
    for key in &stored {
        assert_eq!(
            c.get(key.as_bytes()).unwrap(),
            Some(key.as_bytes().to_vec())
        );
    }
    assert_eq!(c.get(b"k-absent").unwrap(), None);
    c.put(stored[0].as_bytes(), b"new").unwrap();
    assert_eq!(c.get(stored[0].as_bytes()).unwrap(), Some(b"new".to_vec()));
}
