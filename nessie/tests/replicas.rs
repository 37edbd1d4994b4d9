//! With `replicas` = 2, every mirror holds what its primary holds once the
//! writers are done: each index slot's value, and each linked entry's image
//! and state (docs/replication.md#replicated-writes). A mirror that matches
//! is what the survivors serve from when a primary's host is lost.

use nessie::data::Geometry;
use nessie::fabric::{Fabric, RemoteAddr};
use nessie::layout::dte::{DteHeader, DteStatus};
use nessie::layout::{region, Ite, IteKind};
use nessie::{Cluster, Config, Error};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::time::Duration;

fn replicated(nodes: usize, replicas: usize) -> Config {
    Config {
        nodes,
        replicas,
        // Small enough that keys collide and MIGRATE runs.
        index_slots_per_node: 96,
        data_bytes_per_node: 4 << 20,
        value_size_max: 2048,
        // No deadline may cut a sync short in this test: a mirror behind
        // is legal after a timeout, and none is expected here.
        op_timeout: Duration::from_secs(5),
        expiry: Duration::from_secs(12),
        lease: Duration::from_secs(60),
        ..Config::default()
    }
}

fn word(fabric: &dyn Fabric, at: RemoteAddr) -> u64 {
    let mut w = [0u8; 8];
    fabric.read(at, &mut w).unwrap();
    u64::from_le_bytes(w)
}

/// Compares every replica of every share with replica 0: index slots
/// exactly; for each slot linking an entry, the entry's whole slot. Returns
/// how many entries were compared.
fn audit_mirrors(cluster: &Cluster) -> usize {
    let config = cluster.config();
    let geometry = Geometry::new(config);
    let fabric = cluster.fabric();
    let mut entries = 0;
    for node in 0..config.nodes {
        for slot in 0..geometry.index_slots() {
            let primary = geometry.index_slot(node as u16, slot).unwrap();
            let ite = Ite(word(&*fabric, primary));
            for mirror in geometry.mirrors(primary) {
                assert_eq!(
                    Ite(word(&*fabric, mirror)),
                    ite,
                    "index slot {slot} of share {node}: mirror at {mirror} differs"
                );
            }
            let dte = match ite.kind() {
                IteKind::Occupied { dte, .. } | IteKind::Moved { copy: dte } => dte,
                IteKind::Empty => continue,
            };
            let at = geometry.dte_addr(dte).unwrap();
            let mut image = vec![0u8; geometry.slot_bytes(dte.class)];
            fabric.read(at, &mut image).unwrap();
            let header = DteHeader::decode(&image);
            assert_eq!(header.state.generation(), dte.generation);
            assert_eq!(header.state.status(), DteStatus::Valid, "{dte} linked");
            for mirror in geometry.mirrors(at) {
                let mut copy = vec![0u8; image.len()];
                fabric.read(mirror, &mut copy).unwrap();
                assert!(copy == image, "entry {dte}: mirror at {mirror} differs");
            }
            entries += 1;
        }
    }
    entries
}

#[test]
fn mirrors_match_their_primaries_after_concurrent_writers() {
    let cluster = Cluster::local(replicated(3, 2)).unwrap();
    let keys = 120;
    let acknowledged: Vec<HashMap<u32, Option<Vec<u8>>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|node| {
                let mut client = cluster.client(node).unwrap();
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(node as u64);
                    let mut last = HashMap::new();
                    for i in 0..600u32 {
                        // Each writer owns the keys ≡ node (mod 3), so the
                        // last acknowledged value of each key is known.
                        let k = rng.gen_range(0..keys / 3) * 3 + node as u32;
                        let key = format!("key-{k}");
                        if rng.gen_range(0..5) == 0 {
                            client.delete(key.as_bytes()).unwrap();
                            last.insert(k, None);
                        } else {
                            let len = [0, 8, 100, 700, 2000][rng.gen_range(0..5)];
                            let value = vec![(i % 251) as u8; len];
                            match client.put(key.as_bytes(), &value) {
                                Ok(()) => {
                                    last.insert(k, Some(value));
                                }
                                Err(Error::IndexFull) => {}
                                Err(e) => panic!("put {key}: {e}"),
                            }
                        }
                    }
                    let behind: u64 = [client.stats().put, client.stats().delete]
                        .iter()
                        .map(|s| s.mirrors_behind)
                        .sum();
                    assert_eq!(behind, 0, "no sync may be cut short here");
                    last
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let compared = audit_mirrors(&cluster);
    assert!(compared > 20, "only {compared} entries linked");
    let mut reader = cluster.client(1).unwrap();
    for last in &acknowledged {
        for (k, value) in last {
            let key = format!("key-{k}");
            assert_eq!(reader.get(key.as_bytes()).unwrap(), *value, "{key}");
        }
    }
}

#[test]
fn three_replicas_on_five_nodes_mirror_every_write() {
    let cluster = Cluster::local(replicated(5, 3)).unwrap();
    let mut client = cluster.client(2).unwrap();
    for i in 0..150u32 {
        let key = format!("k{}", i % 70);
        let value = vec![i as u8; (i as usize * 13) % 1500];
        match client.put(key.as_bytes(), &value) {
            Ok(()) | Err(Error::IndexFull) => {}
            Err(e) => panic!("{e}"),
        }
        if i % 7 == 0 {
            client.delete(format!("k{}", i % 11).as_bytes()).unwrap();
        }
    }
    assert!(audit_mirrors(&cluster) > 10);
}

#[test]
fn the_mirror_regions_are_registered_under_their_replica_ids() {
    let config = replicated(3, 2);
    let cluster = Cluster::local(config.clone()).unwrap();
    let fabric = cluster.fabric();
    let geometry = Geometry::new(&config);
    for node in 0..3 {
        assert_eq!(
            fabric.region_len(node, region::replica(1, region::INDEX)),
            Some(geometry.index_region().len)
        );
        assert_eq!(
            fabric.region_len(node, region::replica(2, region::INDEX)),
            None
        );
    }
}

#[test]
fn replicas_need_three_nodes_and_no_more_than_the_nodes() {
    for (nodes, replicas) in [(2, 2), (3, 4), (5, 0), (8, 5)] {
        let config = Config {
            nodes,
            replicas,
            ..replicated(3, 2)
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(
            err.contains("replicas"),
            "{nodes} nodes, r = {replicas}: {err}"
        );
    }
    assert!(replicated(3, 3).validate().is_ok());
}

/// A fabric on which a node can be lost: its memory is wiped and every
/// verb to it is refused, as on a host that is gone.
#[derive(Debug)]
struct Losable {
    inner: std::sync::Arc<dyn Fabric>,
    lost: std::sync::atomic::AtomicUsize,
}

impl Losable {
    const NONE: usize = usize::MAX;

    fn check(&self, at: RemoteAddr) -> Result<(), nessie::fabric::FabricError> {
        if at.node == self.lost.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(nessie::fabric::FabricError::Disconnected {
                node: at.node,
                source: std::io::Error::other("the host is lost"),
            });
        }
        Ok(())
    }

    fn lose(&self, node: usize, regions: &[nessie::fabric::RegionSpec]) {
        for spec in regions {
            let zeros = vec![0u8; spec.len as usize];
            self.inner
                .write(RemoteAddr::new(node, spec.id, 0), &zeros)
                .unwrap();
        }
        self.lost.store(node, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Fabric for Losable {
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }

    fn fence_node(&self, node: usize) {
        self.inner.fence_node(node);
    }

    fn readmit_node(&self, node: usize) {
        self.inner.readmit_node(node);
    }
    fn region_len(&self, node: usize, region: nessie::fabric::RegionId) -> Option<u64> {
        self.inner.region_len(node, region)
    }
    fn read(&self, at: RemoteAddr, buf: &mut [u8]) -> Result<(), nessie::fabric::FabricError> {
        self.check(at)?;
        self.inner.read(at, buf)
    }
    fn write(&self, at: RemoteAddr, data: &[u8]) -> Result<(), nessie::fabric::FabricError> {
        self.check(at)?;
        self.inner.write(at, data)
    }
    fn cas(
        &self,
        at: RemoteAddr,
        expected: u64,
        new: u64,
    ) -> Result<u64, nessie::fabric::FabricError> {
        self.check(at)?;
        self.inner.cas(at, expected, new)
    }
}

/// A cluster whose fabric can lose a node, and the handle that loses it.
fn losable_cluster(config: &Config) -> (Cluster, std::sync::Arc<Losable>) {
    let slot = std::sync::Arc::new(std::sync::OnceLock::new());
    let set = std::sync::Arc::clone(&slot);
    let cluster = Cluster::builder(config.clone())
        .wrap_fabric(move |inner| {
            let losable = std::sync::Arc::new(Losable {
                inner,
                lost: std::sync::atomic::AtomicUsize::new(Losable::NONE),
            });
            let _ = set.set(std::sync::Arc::clone(&losable));
            losable as std::sync::Arc<dyn Fabric>
        })
        .recycler(false)
        .build()
        .unwrap();
    let losable = std::sync::Arc::clone(slot.get().unwrap());
    (cluster, losable)
}

#[test]
fn after_a_lost_node_the_survivors_serve_every_acknowledged_value() {
    for lost in 0..3 {
        let config = replicated(3, 2);
        let (cluster, losable) = losable_cluster(&config);
        let mut clients: Vec<_> = (0..3).map(|n| cluster.client(n).unwrap()).collect();
        let mut model = HashMap::new();
        for i in 0..150u32 {
            let key = format!("key-{}", i % 60);
            let c = &mut clients[i as usize % 3];
            if i % 9 == 4 {
                c.delete(key.as_bytes()).unwrap();
                model.insert(key, None);
            } else {
                let value = vec![i as u8; (i as usize * 29) % 1800];
                c.put(key.as_bytes(), &value).unwrap();
                model.insert(key, Some(value));
            }
        }
        // The host of `lost` goes; the survivors decide a view without it
        // and, nothing being in flight, activate it at once.
        losable.lose(lost, &nessie::store_regions(&config));
        let views = cluster.views();
        let next = views.current().without(lost);
        views.begin_change(next.epoch());
        assert!(matches!(
            clients[(lost + 1) % 3].get(b"key-1"),
            Err(Error::ViewChanging { epoch: 1 })
        ));
        views.activate(next);
        for n in (0..3).filter(|&n| n != lost) {
            for (key, value) in &model {
                assert_eq!(
                    clients[n].get(key.as_bytes()).unwrap(),
                    *value,
                    "{key} read on node {n} after node {lost} was lost"
                );
            }
        }
        // And the survivors write on, into the lost node's shares too.
        let survivor = (lost + 2) % 3;
        for (i, key) in model.keys().enumerate().take(40) {
            let value = vec![i as u8; 300];
            clients[survivor].put(key.as_bytes(), &value).unwrap();
            assert_eq!(
                clients[(lost + 1) % 3].get(key.as_bytes()).unwrap(),
                Some(value)
            );
        }
    }
}

#[test]
fn a_lease_must_outlast_an_operation_and_failure_detection_four_heartbeats() {
    let base = replicated(3, 2);
    let short = Config {
        lease: base.op_timeout,
        ..base.clone()
    };
    assert!(short.validate().unwrap_err().to_string().contains("lease"));
    let hasty = Config {
        failure_timeout: Duration::from_millis(1),
        ..base.clone()
    };
    assert!(hasty
        .validate()
        .unwrap_err()
        .to_string()
        .contains("failure_timeout"));
    // 0 (the default) derives the lease from the operation's bound.
    let auto = Config {
        lease: Duration::ZERO,
        ..base
    };
    assert!(auto.validate().is_ok());
    assert_eq!(
        auto.effective_lease(),
        ((auto.op_timeout + auto.landing_bound()) * 2).max(Duration::from_secs(2))
    );
    assert!(auto.effective_lease() > auto.op_timeout + auto.landing_bound());
}

/// A mirror left behind by a sync that met its deadline (modelled by
/// putting an index slot's mirror back to an older value) is brought up to
/// date by the next winner of that slot, through the sync's loop
/// (docs/replication.md#rp2).
#[test]
fn the_next_winner_of_a_slot_brings_a_lagging_mirror_forward() {
    let cluster = Cluster::local(replicated(3, 2)).unwrap();
    let config = cluster.config().clone();
    let geometry = Geometry::new(&config);
    let fabric = cluster.fabric();
    let mut c = cluster.client(0).unwrap();
    let mut lagged = 0;
    let index = |f: &dyn Fabric| -> Vec<(RemoteAddr, u64)> {
        (0..config.nodes)
            .flat_map(|node| (0..geometry.index_slots()).map(move |slot| (node, slot)))
            .map(|(node, slot)| {
                let at = geometry.index_slot(node as u16, slot).unwrap();
                (at, word(f, at))
            })
            .collect()
    };
    for i in 0..40u32 {
        let key = format!("lag-{i}");
        let before = index(&*fabric);
        c.put(key.as_bytes(), b"first").unwrap();
        // The slot this PUT linked: its mirror goes back to the old value,
        // as if the link's sync had met its deadline.
        for ((at, old), (_, new)) in before.iter().zip(index(&*fabric)) {
            if *old != new {
                for mirror in geometry.mirrors(*at) {
                    assert_eq!(word(&*fabric, mirror), new);
                    fabric.write(mirror, &old.to_le_bytes()).unwrap();
                    lagged += 1;
                }
            }
        }
        c.put(key.as_bytes(), b"second").unwrap();
        assert_eq!(
            c.get(key.as_bytes()).unwrap().as_deref(),
            Some(&b"second"[..])
        );
    }
    assert!(lagged >= 40, "{lagged} mirrors put back");
    // Every overwrite's sync found its mirror behind and caught it up.
    audit_mirrors(&cluster);
}

/// A fabric on which each mirror's copy of an entry reads as never copied
/// (UNSET) when its commit CAS arrives, as on a restoring mirror that joined
/// after the entry's image was written.
#[derive(Debug)]
struct MissedImages {
    inner: std::sync::Arc<dyn Fabric>,
    missed: std::sync::atomic::AtomicU64,
    seen: std::sync::Mutex<std::collections::HashSet<(usize, u16, u64, u64)>>,
}

impl Fabric for MissedImages {
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }

    fn fence_node(&self, node: usize) {
        self.inner.fence_node(node);
    }

    fn readmit_node(&self, node: usize) {
        self.inner.readmit_node(node);
    }
    fn region_len(&self, node: usize, region: nessie::fabric::RegionId) -> Option<u64> {
        self.inner.region_len(node, region)
    }
    fn read(&self, at: RemoteAddr, buf: &mut [u8]) -> Result<(), nessie::fabric::FabricError> {
        self.inner.read(at, buf)
    }
    fn write(&self, at: RemoteAddr, data: &[u8]) -> Result<(), nessie::fabric::FabricError> {
        self.inner.write(at, data)
    }
    fn cas(
        &self,
        at: RemoteAddr,
        expected: u64,
        new: u64,
    ) -> Result<u64, nessie::fabric::FabricError> {
        let mirror_entry =
            at.region.0 >= region::REPLICA_STRIDE && at.region != region::replica(1, region::INDEX);
        let commit = nessie::layout::DteState(expected).status() == DteStatus::Invalid
            && nessie::layout::DteState(new).status() == DteStatus::Valid;
        let first = mirror_entry
            && commit
            && self
                .seen
                .lock()
                .unwrap()
                .insert((at.node, at.region.0, at.offset, expected));
        if first {
            self.inner
                .write(at, &nessie::layout::DteState::UNSET.0.to_le_bytes())?;
            self.missed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.cas(at, expected, new)
    }
}

#[test]
fn a_commit_that_finds_its_mirror_uncopied_copies_the_entry_first() {
    let config = replicated(3, 2);
    let slot = std::sync::Arc::new(std::sync::OnceLock::new());
    let set = std::sync::Arc::clone(&slot);
    let cluster = Cluster::builder(config)
        .wrap_fabric(move |inner| {
            let wrapper = std::sync::Arc::new(MissedImages {
                inner,
                missed: std::sync::atomic::AtomicU64::new(0),
                seen: std::sync::Mutex::default(),
            });
            let _ = set.set(std::sync::Arc::clone(&wrapper));
            wrapper as std::sync::Arc<dyn Fabric>
        })
        .recycler(false)
        .build()
        .unwrap();
    let counted = std::sync::Arc::clone(slot.get().unwrap());
    let mut c = cluster.client(1).unwrap();
    for i in 0..30u32 {
        c.put(format!("k{i}").as_bytes(), &vec![i as u8; 100 + i as usize])
            .unwrap();
    }
    assert!(counted.missed.load(std::sync::atomic::Ordering::Relaxed) >= 30);
    audit_mirrors(&cluster);
}

#[test]
fn a_restore_copies_while_writers_go_on_and_the_next_loss_loses_nothing() {
    use nessie::layout::membership::MemberState;
    let config = replicated(3, 2);
    let (cluster, losable) = losable_cluster(&config);
    let views = cluster.views();
    // Writer w owns the keys ≡ w (mod 2) and writes through node 2w.
    let write_round = |round: u32, model: &mut HashMap<String, Option<Vec<u8>>>, w: u32| {
        let mut c = cluster.client(2 * w as usize).unwrap();
        for i in 0..60u32 {
            let key = format!("key-{}", (i % 30) * 2 + w);
            if (i + round) % 7 == 3 {
                c.delete(key.as_bytes()).unwrap();
                model.insert(key, None);
            } else {
                let value = vec![(round * 31 + i) as u8; 64 + ((round + i) as usize * 97) % 1500];
                c.put(key.as_bytes(), &value).unwrap();
                model.insert(key, Some(value));
            }
        }
    };
    let mut models = [HashMap::new(), HashMap::new()];
    for (w, model) in models.iter_mut().enumerate() {
        write_round(0, model, w as u32);
    }
    // Node 1's own entries (its share's data), written before its loss.
    let mut ones = HashMap::new();
    let mut c1 = cluster.client(1).unwrap();
    for i in 0..40u32 {
        let key = format!("one-{i}");
        let value = vec![0xc0 ^ i as u8; 100 + i as usize * 30];
        c1.put(key.as_bytes(), &value).unwrap();
        ones.insert(key, Some(value));
    }
    drop(c1);
    losable.lose(1, &nessie::store_regions(&config));
    views.activate(views.current().without(1));
    for (w, model) in models.iter_mut().enumerate() {
        write_round(1, model, w as u32);
    }
    // The replacement: empty memory, restoring, copies while both writers
    // go on.
    losable
        .lost
        .store(Losable::NONE, std::sync::atomic::Ordering::SeqCst);
    cluster.prepare_replacement(1).unwrap();
    views.activate(views.current().next_with(1, MemberState::Restoring));
    let figures = std::thread::scope(|s| {
        let writers: Vec<_> = models
            .iter_mut()
            .enumerate()
            .map(|(w, model)| {
                s.spawn(move || {
                    for round in 2..8 {
                        write_round(round, model, w as u32);
                    }
                })
            })
            .collect();
        let figures = cluster.copy_replicas(1).unwrap();
        for w in writers {
            w.join().unwrap();
        }
        figures
    });
    assert!(figures.entries_adopted > 0, "{figures:?}");
    // Every slot of the r replicas node 1 holds, each index word read once
    // and each data slot twice (copy, then verify), plus one READ more of
    // a chunk per recopy.
    let r = config.replicas as u64;
    assert_eq!(figures.index_slots, r * config.index_slots_per_node as u64);
    let classes = config.size_classes().len();
    let slots: u64 = (0..classes).map(|c| config.class_slots(c) as u64).sum();
    assert_eq!(figures.data_slots, r * slots, "{figures:?}");
    let table_bytes: u64 = (0..classes)
        .map(|c| (config.class_slots(c) * config.class_slot_bytes(c)) as u64)
        .sum();
    let once = figures.index_slots * 8 + 2 * r * table_bytes;
    assert!(figures.bytes_read >= once, "{figures:?}");
    assert_eq!(
        figures.bytes_read > once,
        figures.recopies > 0,
        "bytes beyond one copy and one verification are recopies: {figures:?}"
    );
    views.activate(views.current().next_with(1, MemberState::Active));
    audit_mirrors(&cluster);
    let check = |nodes: &[usize], models: &[HashMap<String, Option<Vec<u8>>>; 2]| {
        for &n in nodes {
            let mut c = cluster.client(n).unwrap();
            for (key, value) in models.iter().flatten().chain(&ones) {
                assert_eq!(c.get(key.as_bytes()).unwrap(), *value, "{key} on node {n}");
            }
        }
    };
    check(&[0, 1, 2], &models);
    losable.lose(2, &nessie::store_regions(&config));
    views.activate(views.current().without(2));
    check(&[0, 1], &models);
}

/// An index larger than one of the restorer's chunks (64 KiB of index
/// words, 8,192 slots) is copied chunk after chunk: every slot of every
/// replica matches its primary afterwards, the last partial chunk
/// included, and every key reads back on every node.
#[test]
fn a_restore_copies_an_index_of_several_chunks() {
    use nessie::layout::membership::MemberState;
    let config = Config {
        index_slots_per_node: 2 * 8192 + 1000,
        ..replicated(3, 2)
    };
    let (cluster, losable) = losable_cluster(&config);
    let views = cluster.views();
    let mut model = HashMap::new();
    let mut c = cluster.client(0).unwrap();
    for i in 0..400u32 {
        let key = format!("key-{i}");
        let value = vec![i as u8; 32 + i as usize % 200];
        c.put(key.as_bytes(), &value).unwrap();
        model.insert(key, value);
    }
    drop(c);
    losable.lose(1, &nessie::store_regions(&config));
    views.activate(views.current().without(1));
    losable
        .lost
        .store(Losable::NONE, std::sync::atomic::Ordering::SeqCst);
    cluster.prepare_replacement(1).unwrap();
    views.activate(views.current().next_with(1, MemberState::Restoring));
    let figures = cluster.copy_replicas(1).unwrap();
    assert_eq!(figures.index_slots, 2 * config.index_slots_per_node as u64);
    views.activate(views.current().next_with(1, MemberState::Active));
    assert!(audit_mirrors(&cluster) > 0);
    for n in 0..3 {
        let mut c = cluster.client(n).unwrap();
        for (key, value) in &model {
            assert_eq!(
                c.get(key.as_bytes()).unwrap().as_ref(),
                Some(value),
                "{key} on node {n}"
            );
        }
    }
}
