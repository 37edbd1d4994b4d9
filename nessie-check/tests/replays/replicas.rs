//! Replication (docs/replication.md) replayed: the schedules of the flaws
//! the simulator's replicated runs found, step by step, on the real code.

use nessie::data::Geometry;
use nessie::fabric::{Fabric, RemoteAddr};
use nessie::layout::dte::EXPIRES_AT_OFFSET;
use nessie::Config;
use nessie_check::scripted::{tiny_config, Script};
use nessie_check::sim::Point;
use std::time::Duration;

/// Three nodes, two replicas of every share, two index slots per node and
/// two candidates per key; a landing bound short enough that a reader's
/// cache entry outlives a view change's drain.
fn replicated() -> Config {
    Config {
        nodes: 3,
        replicas: 2,
        index_slots_per_node: 2,
        cas_landing_bound: Some(Duration::from_millis(2)),
        ..tiny_config(6, 2)
    }
}

fn word(fabric: &dyn Fabric, at: RemoteAddr) -> u64 {
    let mut w = [0u8; 8];
    fabric.read(at, &mut w).unwrap();
    u64::from_le_bytes(w)
}

/// A PUT that replaced an entry stages it, and its WRITE of `expires_at`
/// to the entry's mirror is delayed past the entry's expiry. Were the
/// primary's stamp written first, the slot would be reused meanwhile and
/// the late stamp would land on the mirror of its next occupant; the
/// mirrors' stamps come first (docs/replication.md#rp5), so the slot is not
/// staged, and not reused, before every replica carries its stamp.
#[test]
fn a_late_stamp_on_a_mirror_never_lands_on_the_slots_next_occupant() {
    let script = Script::new(replicated(), 1);
    let geometry = Geometry::new(script.config());
    let key = script.key_first("k-", 0);
    let mut setup = script.direct_client();
    setup.put(&key, b"v1").unwrap();
    let (old, _, _) = script.target(script.ite(0));
    let at = geometry.dte_addr(old).unwrap();
    let primary = at.add(EXPIRES_AT_OFFSET as u64);
    let mirror = geometry.mirrors(primary).next().unwrap();
    let k = key.clone();
    let writer = script.spawn_on(0, 2, move |c| c.put(&k, b"v2").unwrap());
    script
        .sched
        .run_until(0, move |p| p.kind == Point::Write && p.addr == Some(mirror))
        .expect("the PUT stages the entry it replaced");
    script.let_slots_expire();
    script.reuse_slots();
    script.sched.run_to_end(0);
    writer.join().unwrap().unwrap();
    let fabric = script.cluster.fabric();
    let stamp = word(&*fabric, primary);
    assert_eq!(word(&*fabric, mirror), stamp, "the replicas' stamps differ");
    assert_ne!(stamp, 0, "the entry is staged once every stamp landed");
}
