//! Scripted runs: replay a model-checker counterexample step by step.
//!
//! A [`Script`] holds a cluster on the simulator's fabric and clock with a
//! scripted [`Scheduler`]: each client runs a closure on its own thread, but
//! only when the test says, and only until a predicate on its next verb
//! holds. Keys with prescribed candidate slots are found by search
//! ([`Script::key_with`]), and the test inspects index and data memory
//! directly ([`Script::ite`], [`Script::entry`]) to assert that the racy
//! state of the trace was really reached.

use crate::sim::{quiet_crashes, Crashed, PointInfo, Scheduler, SimClock, SimFabric};
use nessie::data::dte_addr;
use nessie::fabric::{RegionId, RemoteAddr};
use nessie::index::{Candidate, KeyHasher};
use nessie::layout::dte::{DteHeader, DTE_HEADER_BYTES, KEY_OFFSET};
use nessie::layout::{Ite, IteKind, SlotRef};
use nessie::{Client, Clock, Cluster, Config};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A scripted cluster.
#[derive(Debug)]
pub struct Script {
    /// The scheduler the test drives.
    pub sched: Arc<Scheduler>,
    /// The cluster.
    pub cluster: Cluster,
    hasher: KeyHasher,
    config: Config,
}

/// What a scripted client's closure returned, or that it crashed.
pub type Joined<T> = JoinHandle<Option<T>>;

/// The configuration of a one-node cluster with `slots` index slots and
/// `hashes` candidates per key, sized for scripted runs (virtual time).
#[must_use]
pub fn tiny_config(slots: usize, hashes: usize) -> Config {
    Config {
        cluster: "scripted".into(),
        nodes: 1,
        index_slots_per_node: slots,
        hashes,
        key_size_max: 16,
        value_size_max: 256,
        data_bytes_per_node: 64 * nessie::layout::dte::entry_bytes(16, 256),
        expiry: Duration::from_millis(20),
        op_timeout: Duration::from_millis(5),
        max_clock_skew: Duration::from_micros(500),
        cache_entries: 8,
        ..Config::default()
    }
}

impl Script {
    /// A scripted cluster of `config` for `clients` clients.
    ///
    /// # Panics
    /// If the configuration is invalid (a test bug).
    #[must_use]
    pub fn new(config: Config, clients: usize) -> Script {
        quiet_crashes();
        let sched = Scheduler::scripted(clients, config.nodes, 1_000_000);
        let clocks: Vec<Arc<dyn Clock>> = (0..config.nodes)
            .map(|n| Arc::new(SimClock::new(Arc::clone(&sched), n)) as Arc<dyn Clock>)
            .collect();
        let s2 = Arc::clone(&sched);
        let cluster = Cluster::builder(config.clone())
            .clocks(clocks)
            .wrap_fabric(move |f| Arc::new(SimFabric::new(f, s2, false)))
            .recycler(false)
            .build()
            .expect("valid scripted config");
        Script {
            sched,
            hasher: KeyHasher::new(&config),
            cluster,
            config,
        }
    }

    /// A key whose candidates are exactly `slots` (node 0), in order.
    ///
    /// # Panics
    /// If none is found among the first million names.
    #[must_use]
    pub fn key_with(&self, prefix: &str, slots: &[u64]) -> Vec<u8> {
        let want: Vec<Candidate> = slots
            .iter()
            .map(|&slot| Candidate { node: 0, slot })
            .collect();
        (0..1_000_000)
            .map(|i| format!("{prefix}{i}").into_bytes())
            .find(|k| self.hasher.candidates(k) == want)
            .expect("a key with the wanted candidates")
    }

    /// A key whose first candidate is `slot`.
    ///
    /// # Panics
    /// If none is found.
    #[must_use]
    pub fn key_first(&self, prefix: &str, slot: u64) -> Vec<u8> {
        (0..1_000_000)
            .map(|i| format!("{prefix}{i}").into_bytes())
            .find(|k| self.hasher.candidates(k)[0] == Candidate { node: 0, slot })
            .expect("a key with the wanted first candidate")
    }

    /// A client outside the script (setup and audit: it never yields).
    ///
    /// # Panics
    /// Never for node 0.
    #[must_use]
    pub fn direct_client(&self) -> Client {
        self.cluster.client(0).expect("node 0")
    }

    /// Starts scripted client `id` running `work`; it waits for the script.
    ///
    /// # Panics
    /// Never for node 0.
    pub fn spawn<T: Send + 'static>(
        &self,
        id: usize,
        work: impl FnOnce(&mut Client) -> T + Send + 'static,
    ) -> Joined<T> {
        let mut client = self.cluster.client(0).expect("node 0");
        let sched = Arc::clone(&self.sched);
        std::thread::spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(|| {
                sched.enter(id);
                work(&mut client)
            }));
            sched.leave();
            match result {
                Ok(v) => Some(v),
                Err(p) if p.downcast_ref::<Crashed>().is_some() => None,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }

    /// Address of index slot `slot`.
    #[must_use]
    pub fn slot(&self, slot: u64) -> RemoteAddr {
        Candidate { node: 0, slot }.addr()
    }

    /// The ITE in index slot `slot` now.
    ///
    /// # Panics
    /// On a fabric error (a test bug).
    #[must_use]
    pub fn ite(&self, slot: u64) -> Ite {
        let mut w = [0u8; 8];
        self.cluster
            .fabric()
            .read(self.slot(slot), &mut w)
            .expect("read ITE");
        Ite(u64::from_le_bytes(w))
    }

    /// Header and key of the DTE `at`.
    ///
    /// # Panics
    /// On a fabric error (a test bug).
    #[must_use]
    pub fn entry(&self, at: SlotRef) -> (DteHeader, Vec<u8>) {
        let bytes = self.config.class_slot_bytes(usize::from(at.class));
        let mut buf = vec![0u8; bytes];
        self.cluster
            .fabric()
            .read(dte_addr(at, bytes), &mut buf)
            .expect("read DTE");
        let h = DteHeader::decode(&buf[..DTE_HEADER_BYTES]);
        let key = buf[KEY_OFFSET..KEY_OFFSET + h.state.key_len()].to_vec();
        (h, key)
    }

    /// The DTE an occupied ITE or a marker points at.
    ///
    /// # Panics
    /// If the ITE is empty.
    #[must_use]
    pub fn target(&self, ite: Ite) -> (SlotRef, DteHeader, Vec<u8>) {
        let at = match ite.kind() {
            IteKind::Occupied { dte, .. } => dte,
            IteKind::Moved { copy } => copy,
            IteKind::Empty => panic!("ITE {ite:?} is empty"),
        };
        let (h, k) = self.entry(at);
        (at, h, k)
    }

    /// Lets virtual time pass until every owner stalled now is dead.
    pub fn let_owners_die(&self) {
        let margin = self.config.op_timeout + self.config.max_clock_skew * 2;
        self.sched.advance(margin.as_micros() as u64 + 1);
    }
}

/// Stop before a CAS on index slot `slot`.
pub fn cas_at(slot: RemoteAddr) -> impl Fn(&PointInfo) -> bool + Send + 'static {
    move |p| p.kind == crate::sim::Point::Cas && p.addr == Some(slot)
}

/// Stop before a CAS on index slot `slot` whose expected value satisfies
/// `pred`.
pub fn cas_at_if(
    slot: RemoteAddr,
    pred: fn(Ite) -> bool,
) -> impl Fn(&PointInfo) -> bool + Send + 'static {
    move |p| p.kind == crate::sim::Point::Cas && p.addr == Some(slot) && pred(Ite(p.expected))
}

/// Stop before a READ of `slot`.
pub fn read_at(slot: RemoteAddr) -> impl Fn(&PointInfo) -> bool + Send + 'static {
    move |p| p.kind == crate::sim::Point::Read && p.addr == Some(slot)
}

/// Stop before a CAS on a DTE state word (a commit or abort).
pub fn state_cas() -> impl Fn(&PointInfo) -> bool + Send + 'static {
    |p| p.kind == crate::sim::Point::Cas && p.addr.is_some_and(|a| a.region != RegionId::INDEX)
}

/// Stop before any CAS.
pub fn any_cas() -> impl Fn(&PointInfo) -> bool + Send + 'static {
    |p| p.kind == crate::sim::Point::Cas
}

/// Stop at a back-off sleep.
pub fn backoff() -> impl Fn(&PointInfo) -> bool + Send + 'static {
    |p| p.kind == crate::sim::Point::Sleep
}
