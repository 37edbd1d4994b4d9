//! The window of a scan between its stamp reads without the allocator's
//! lock and its verdicts under it: another thread may free and reallocate a
//! slot whose stale stamp the scan read, so the verdict must read the stamp
//! again. The simulator runs other threads there through
//! [`nessie::fabric::Fabric::yield_point`].

use nessie_check::scripted::{tiny_config, Script};
use nessie_check::sim::Point;

/// A scan of node 0 reads the expired stamp of slot `s` and pauses; a PUT
/// on node 0 finds no free slot, frees `s` by its own scan and writes its
/// entry there. The first scan's verdict must keep `s` (its stamp is 0
/// now), not free the slot of a live entry.
#[test]
fn a_slot_reallocated_between_the_stamp_read_and_the_verdict_stays_in_use() {
    let script = Script::new(tiny_config(4, 2), 2);
    let data = script.cluster.node_data(0).unwrap();
    let access = script.cluster.table_access(0);
    let class = 0;
    // Every slot of the class held, but two: the PUTs of k take those, and
    // the second stages the first's slot.
    let mut held = script.take_entry_slots(0, class);
    for r in held.drain(held.len() - 2..) {
        data.release_unpublished(r);
    }
    let mut direct = script.direct_client();
    let k = script.key_first("k-", 0);
    direct.put(&k, b"a").unwrap();
    direct.put(&k, b"b").unwrap();
    // Only the tombstone reserve is free: nothing for an entry.
    assert_eq!(data.available(class), data.reserve(class));
    script.let_slots_expire();
    let scan = script.spawn_task(0, move |cluster| {
        let data = cluster.node_data(0).unwrap();
        data.recycle(class, cluster.table_access(0)).unwrap()
    });
    script
        .sched
        .run_until(0, |p| p.kind == Point::Pause)
        .expect("the scan pauses before its verdicts");
    let k2 = script.key_first("k2-", 1);
    let k2a = k2.clone();
    let writer = script.spawn_on(1, 0, move |c| c.put(&k2a, b"c"));
    script.sched.run_to_end(1);
    writer.join().unwrap().unwrap().unwrap();
    script.sched.run_to_end(0);
    assert_eq!(scan.join().unwrap().unwrap(), 0, "the scan frees nothing");
    assert_eq!(
        data.available(class),
        data.reserve(class),
        "no slot of a live entry is free"
    );
    // An allocation now must not hand out the PUT's slot.
    assert_eq!(data.allocate(class, access).unwrap(), None);
    assert_eq!(direct.get(&k2).unwrap().as_deref(), Some(&b"c"[..]));
    assert_eq!(direct.get(&k).unwrap().as_deref(), Some(&b"b"[..]));
    drop(held);
}
