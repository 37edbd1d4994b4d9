//! Scripted runs: replay a model-checker counterexample or a review's
//! schedule step by step.
//!
//! A [`Script`] holds a cluster of two or more nodes on the simulator's
//! fabric and clocks with a scripted [`Scheduler`]: each client runs a
//! closure on its own thread, but only when the test says, and only until a
//! predicate on its next verb holds. Index slots are numbered globally
//! (slot `g` is slot `g % per_node` of node `g / per_node`); keys with
//! prescribed candidate slots are found by search ([`Script::key_with`]),
//! and the test inspects index and data memory directly ([`Script::ite`],
//! [`Script::entry`]) to assert that the racy state of the trace was really
//! reached. Clients run on node 1 by default and the setup client on node 0,
//! so the clients' reads of preloaded entries are remote and go through
//! their caches.

use crate::sim::divergent_duplicates;
use crate::sim::{quiet_crashes, Crashed, Point, PointInfo, Scheduler, SimClock, SimFabric};
use nessie::data::{dte_addr, Geometry, SlotUse};
use nessie::fabric::RemoteAddr;
use nessie::index::{Candidate, KeyHasher};
use nessie::layout::dte::{self, DteHeader, DteState, DteStatus, DTE_HEADER_BYTES, KEY_OFFSET};
use nessie::layout::region;
use nessie::layout::{Ite, IteKind, SlotRef};
use nessie::{Client, Clock, Cluster, Config};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// A scripted cluster.
#[derive(Debug)]
pub struct Script {
    /// The scheduler the test drives.
    pub sched: Arc<Scheduler>,
    /// The cluster.
    pub cluster: Arc<Cluster>,
    hasher: KeyHasher,
    config: Config,
    /// The simulator's fabric under the store's routing (held weakly: it
    /// holds the scheduler), for [`Script::lose_host`].
    sim: Weak<SimFabric>,
}

/// What a scripted client's closure returned, or that it crashed.
pub type Joined<T> = JoinHandle<Option<T>>;

/// The configuration of a two-node cluster with `slots` global index slots
/// (rounded up to even) and `hashes` candidates per key, sized for scripted
/// runs (virtual time).
#[must_use]
pub fn tiny_config(slots: usize, hashes: usize) -> Config {
    Config {
        cluster: "scripted".into(),
        nodes: 2,
        index_slots_per_node: slots.div_ceil(2),
        hashes,
        key_size_max: 48,
        value_size_max: 256,
        data_bytes_per_node: 64 * dte::entry_bytes(48, 256),
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
        Script::build(config, clients, false)
    }

    /// A scripted cluster whose CASes carry land-by times that their
    /// targets enforce, as on the `tcp` fabric.
    ///
    /// # Panics
    /// If the configuration is invalid (a test bug).
    #[must_use]
    pub fn with_land_by(config: Config, clients: usize) -> Script {
        Script::build(config, clients, true)
    }

    fn build(config: Config, clients: usize, land_by: bool) -> Script {
        quiet_crashes();
        let sched = Scheduler::scripted(clients, config.nodes, 1_000_000);
        let clocks: Vec<Arc<dyn Clock>> = (0..config.nodes)
            .map(|n| Arc::new(SimClock::new(Arc::clone(&sched), n)) as Arc<dyn Clock>)
            .collect();
        let s2 = Arc::clone(&sched);
        let geometry = Geometry::new(&config);
        let check_config = config.clone();
        let sim = Arc::new(OnceLock::new());
        let keep = Arc::clone(&sim);
        let cluster = Arc::new(
            Cluster::builder(config.clone())
                .clocks(clocks)
                .wrap_fabric(move |f| {
                    let fabric = Arc::new(
                        SimFabric::new(f, s2, land_by)
                            .watching_stages(geometry.clone())
                            .checking_after_cas(Box::new(move |f| {
                                divergent_duplicates(f, &check_config, &geometry)
                            })),
                    );
                    let _ = keep.set(Arc::downgrade(&fabric));
                    fabric
                })
                .recycler(false)
                .build()
                .expect("valid scripted config"),
        );
        Script {
            sched,
            hasher: KeyHasher::new(&config),
            cluster,
            config,
            sim: sim.get().cloned().unwrap_or_default(),
        }
    }

    /// Loses node `node`'s host (replicated clusters): its memory is wiped
    /// and every verb to it refused; the view without it is decided at
    /// once and activated after the drain (`op_timeout` + the landing
    /// bound + 2·`max_clock_skew` of virtual time). Stop its scripted
    /// clients first: they would go on.
    pub fn lose_host(&self, node: usize) {
        if let Some(f) = self.sim.upgrade() {
            f.lose(node, &nessie::store_regions(&self.config));
        }
        let views = self.cluster.views();
        let next = views.current().without(node);
        views.begin_change(next.epoch());
        let c = &self.config;
        let drain = c.op_timeout + c.landing_bound() + c.max_clock_skew * 2;
        self.sched.advance(drain.as_micros() as u64 + 1);
        views.activate(next);
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn candidate(&self, global: u64) -> Candidate {
        let per_node = self.config.index_slots_per_node as u64;
        Candidate {
            node: (global / per_node) as usize,
            slot: global % per_node,
        }
    }

    /// A key whose candidates are exactly the global slots `slots`, in
    /// order.
    ///
    /// # Panics
    /// If none is found among the first million names.
    #[must_use]
    pub fn key_with(&self, prefix: &str, slots: &[u64]) -> Vec<u8> {
        let want: Vec<Candidate> = slots.iter().map(|&g| self.candidate(g)).collect();
        self.find(prefix, |k| self.hasher.candidates(k) == want)
    }

    /// A key whose first candidate is global slot `slot`.
    ///
    /// # Panics
    /// If none is found.
    #[must_use]
    pub fn key_first(&self, prefix: &str, slot: u64) -> Vec<u8> {
        let want = self.candidate(slot);
        self.find(prefix, |k| self.hasher.candidates(k)[0] == want)
    }

    /// The first name `{prefix}{i}` that satisfies `pred`.
    ///
    /// # Panics
    /// If none of the first million does.
    #[must_use]
    pub fn find(&self, prefix: &str, pred: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        (0..1_000_000)
            .map(|i| format!("{prefix}{i}").into_bytes())
            .find(|k| pred(k))
            .expect("a key with the wanted candidates")
    }

    /// The key's candidate slots and filter bits.
    #[must_use]
    pub fn hasher(&self) -> &KeyHasher {
        &self.hasher
    }

    /// A client outside the script on node 0 (setup and audit: it never
    /// yields).
    ///
    /// # Panics
    /// Never.
    #[must_use]
    pub fn direct_client(&self) -> Client {
        self.cluster.client(0).expect("node 0")
    }

    /// Writes `entries`, in order, from a direct client while `parker`
    /// holds its first candidate (written first, deleted last), so that an
    /// entry whose first candidate that is lands in a later one and the
    /// slot is left empty with a cleared value. Returns the client.
    ///
    /// # Panics
    /// If a write fails (a test bug).
    #[must_use]
    pub fn put_around_parked(&self, parker: &[u8], entries: &[(&[u8], &[u8])]) -> Client {
        let mut c = self.direct_client();
        c.put(parker, b"parked").unwrap();
        for (k, v) in entries {
            c.put(k, v).unwrap();
        }
        assert!(c.delete(parker).unwrap());
        c
    }

    /// Starts scripted client `id` on node 1 running `work`; it waits for
    /// the script.
    pub fn spawn<T: Send + 'static>(
        &self,
        id: usize,
        work: impl FnOnce(&mut Client) -> T + Send + 'static,
    ) -> Joined<T> {
        self.spawn_on(id, 1 % self.config.nodes, work)
    }

    /// Starts scripted client `id` on `node` running `work`.
    ///
    /// # Panics
    /// If `node` is not in the cluster.
    pub fn spawn_on<T: Send + 'static>(
        &self,
        id: usize,
        node: usize,
        work: impl FnOnce(&mut Client) -> T + Send + 'static,
    ) -> Joined<T> {
        let mut client = self.cluster.client(node).expect("node in the cluster");
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

    /// Starts scripted thread `id` running `work` on the cluster itself
    /// (e.g. a recycling scan of one node), a client like the others for the
    /// scheduler.
    pub fn spawn_task<T: Send + 'static>(
        &self,
        id: usize,
        work: impl FnOnce(&Cluster) -> T + Send + 'static,
    ) -> Joined<T> {
        let cluster = Arc::clone(&self.cluster);
        let sched = Arc::clone(&self.sched);
        std::thread::spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(|| {
                sched.enter(id);
                work(&cluster)
            }));
            sched.leave();
            match result {
                Ok(v) => Some(v),
                Err(p) if p.downcast_ref::<Crashed>().is_some() => None,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }

    /// Address of global index slot `slot`.
    #[must_use]
    pub fn slot(&self, slot: u64) -> RemoteAddr {
        self.candidate(slot).addr()
    }

    /// The ITE in global index slot `slot` now.
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
        let n = h.state.key_len().min(self.config.key_size_max);
        let key = buf[KEY_OFFSET..KEY_OFFSET + n].to_vec();
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

    /// Lets virtual time pass until every slot staged now may be reused.
    pub fn let_slots_expire(&self) {
        let wait = self.config.expiry + self.config.max_clock_skew * 2;
        self.sched.advance(wait.as_micros() as u64 + 1);
    }

    /// Allocates every slot of `class` on `node` that an entry may take now
    /// (recycling first, leaving the tombstone reserve), and returns them:
    /// the class is full for entries while the caller holds them.
    ///
    /// # Panics
    /// If `node` is not in the cluster, or on a fabric error (a test bug).
    #[must_use]
    pub fn take_entry_slots(&self, node: usize, class: u8) -> Vec<SlotRef> {
        let data = self.cluster.node_data(node).expect("node in the cluster");
        let access = self.cluster.table_access(node);
        std::iter::from_fn(|| data.allocate(class, access).expect("allocation")).collect()
    }

    /// Reuses every slot of every node that may be reused now (see
    /// [`reuse_every_free_slot`]).
    ///
    /// # Panics
    /// On a fabric error (a test bug).
    pub fn reuse_slots(&self) {
        for node in 0..self.config.nodes {
            reuse_every_free_slot(&self.cluster, node).expect("reuse slots");
        }
    }
}

/// The race of the write tests: a script of two clients on two nodes of
/// one index slot whose key holds `v1`; client 0 runs `owner` (which PUTs
/// the key), client 1 runs `rival`, and the owner is stopped before its
/// commit CAS. Returns the script, the key and both clients.
///
/// # Panics
/// If the owner never reaches a commit.
pub fn owner_stopped_before_commit<T: Send + 'static, U: Send + 'static>(
    owner: impl FnOnce(&mut Client, &[u8]) -> T + Send + 'static,
    rival: impl FnOnce(&mut Client, &[u8]) -> U + Send + 'static,
) -> (Script, Vec<u8>, Joined<T>, Joined<U>) {
    let script = Script::new(tiny_config(2, 1), 2);
    let k = script.key_first("k-", 0);
    script.direct_client().put(&k, b"v1").unwrap();
    let (ka, kb) = (k.clone(), k.clone());
    let owner = script.spawn(0, move |c| owner(c, &ka));
    let rival = script.spawn(1, move |c| rival(c, &kb));
    script
        .sched
        .run_until(0, state_cas())
        .expect("the owner stops before its commit");
    (script, k, owner, rival)
}

/// Layout A of the model checks and the review: k1 has candidates (s1, s0)
/// and sits in s0 with `v1`; k2 has (s0, s2); k3 sits in s2 with `v3`; s1
/// is empty (with a cleared value, not 0). Written by node 0. Returns
/// (k1, k2).
///
/// # Panics
/// If the layout cannot be built (a test bug).
#[must_use]
pub fn layout_a(script: &Script) -> (Vec<u8>, Vec<u8>) {
    let k1 = script.key_with("k1-", &[1, 0]);
    let k2 = script.key_with("k2-", &[0, 2]);
    let k3 = script.key_first("k3-", 2);
    let parker = script.key_first("t-", 1);
    let _c = script.put_around_parked(&parker, &[(&k1, b"v1"), (&k3, b"v3")]);
    assert!(script.ite(1).is_empty());
    assert_eq!(script.target(script.ite(0)).2, k1, "k1 sits in s0");
    assert_eq!(script.target(script.ite(2)).2, k3, "k3 sits in s2");
    (k1, k2)
}

/// Allocates every slot node `node` can hand out, its tombstone reserve's
/// included (recycling first, which
/// resolves the markers of expired MIGRATE copies), overwrites it with
/// poison under its new generation, and frees it again: afterwards any ITE
/// still pointing at a reused slot reads as torn for ever. With replicas,
/// the poison goes to every replica the view keeps, as a new entry's image
/// would (docs/replication.md#rp1).
///
/// # Errors
/// A fabric error.
pub fn reuse_every_free_slot(cluster: &Cluster, node: usize) -> Result<(), String> {
    let Some(data) = cluster.node_data(node) else {
        return Ok(());
    };
    let fabric = cluster.fabric();
    let access = cluster.table_access(node);
    for class in 0..data.classes() as u8 {
        let mut taken = Vec::new();
        // As a tombstone: the reserve's slots are reused and poisoned too.
        let mut none = nessie::data::Stagings::default();
        while let Some(r) = data
            .allocate_for(class, SlotUse::Tombstone, access, &mut none, &mut 0)
            .map_err(|e| e.to_string())?
        {
            let bytes = data.slot_bytes(class);
            let mut poison: Vec<u8> = (0..bytes).map(|i| (i as u8).wrapping_mul(151)).collect();
            let header = DteHeader {
                state: DteState::new(r.generation, 1, 0, false, false)
                    .with_status(DteStatus::Aborted),
                ..DteHeader::default()
            };
            poison[..DTE_HEADER_BYTES].copy_from_slice(&header.encode());
            let addr = data
                .geometry()
                .dte_addr(r)
                .ok_or("allocated slot has no address")?;
            let view = cluster.views().current();
            let mirrors = data
                .geometry()
                .mirrors(addr)
                .filter(|m| !view.is_lost(m.node));
            for replica in std::iter::once(addr).chain(mirrors) {
                fabric.write(replica, &poison).map_err(|e| e.to_string())?;
            }
            taken.push(r);
        }
        for r in taken {
            data.release_unpublished(r);
        }
    }
    Ok(())
}

/// Stop before a CAS on `slot`.
pub fn cas_at(slot: RemoteAddr) -> impl Fn(&PointInfo) -> bool + Send + 'static {
    move |p| p.kind == Point::Cas && p.addr == Some(slot)
}

/// Stop before a CAS on `slot` whose expected value satisfies `pred`.
pub fn cas_at_if(
    slot: RemoteAddr,
    pred: fn(Ite) -> bool,
) -> impl Fn(&PointInfo) -> bool + Send + 'static {
    move |p| p.kind == Point::Cas && p.addr == Some(slot) && pred(Ite(p.expected))
}

/// Stop before a READ of `slot`.
pub fn read_at(slot: RemoteAddr) -> impl Fn(&PointInfo) -> bool + Send + 'static {
    move |p| p.kind == Point::Read && p.addr == Some(slot)
}

/// Stop before a READ of a DTE.
pub fn dte_read() -> impl Fn(&PointInfo) -> bool + Send + 'static {
    |p| p.kind == Point::Read && p.addr.is_some_and(|a| a.region != region::INDEX)
}

/// Stop before a CAS on a DTE state word (a commit or abort).
pub fn state_cas() -> impl Fn(&PointInfo) -> bool + Send + 'static {
    |p| p.kind == Point::Cas && p.addr.is_some_and(|a| a.region != region::INDEX)
}

/// Stop before any CAS.
pub fn any_cas() -> impl Fn(&PointInfo) -> bool + Send + 'static {
    |p| p.kind == Point::Cas
}

/// Stop before any WRITE.
pub fn any_write() -> impl Fn(&PointInfo) -> bool + Send + 'static {
    |p| p.kind == Point::Write
}

/// Stop at a back-off sleep.
pub fn backoff() -> impl Fn(&PointInfo) -> bool + Send + 'static {
    |p| p.kind == Point::Sleep
}

/// Stop at the `n`-th point (from 1) for which `pred` holds.
pub fn nth(
    n: usize,
    pred: impl Fn(&PointInfo) -> bool + Send + 'static,
) -> impl Fn(&PointInfo) -> bool + Send + 'static {
    let seen = AtomicUsize::new(0);
    move |p| pred(p) && seen.fetch_add(1, Ordering::Relaxed) + 1 == n
}
