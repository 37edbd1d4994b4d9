//! The audit after a run (see the module docs of the simulation).

use super::scenario::KEY_MAX;
use super::{divergent_duplicates, Scenario, SimOutcome};
use crate::history::{Call, Recorder, Ret};
use crate::scripted::reuse_every_free_slot;
use crate::sim::Scheduler;
use nessie::index::KeyHasher;
use nessie::layout::dte::{self, DteHeader, DteStatus};
use nessie::layout::{Ite, SlotRef};
use nessie::{Client, Cluster, Error};
use std::collections::HashSet;

/// Steps 1–4 of the audit (see the module docs), through the survivors
/// when node `lost`'s host is lost: its allocator is skipped (its slots
/// are never reused), every key is read through the view without it.
pub(super) fn audit(
    scenario: &Scenario,
    (cluster, sched, recorder): (&Cluster, &Scheduler, &Recorder),
    keys: &[Vec<u8>],
    (lossy, lost): (bool, Option<usize>),
    outcome: &mut SimOutcome,
) -> Result<(), String> {
    let alive: Vec<usize> = (0..cluster.config().nodes)
        .filter(|&n| Some(n) != lost)
        .collect();
    let config = cluster.config();
    let geometry = nessie::data::Geometry::new(config);
    let divergent = |when: &str| {
        divergent_duplicates(cluster.fabric().as_ref(), config, &geometry).map_or(Ok(()), |d| {
            Err(format!("{when}: {d}\nindex:\n{}", dump_index(cluster)))
        })
    };
    divergent("after the run")?;
    // 1. Every owner is dead, every CAS landed, every staged slot expired;
    // 2. every slot that may be reused is reused. Resolving a copy's marker
    //    stages the copy's predecessor, which a later round reuses.
    let landing = config.landing_bound().as_micros() as u64;
    let wait = scenario.expiry_us + scenario.op_timeout_us + landing + 4 * scenario.skew_us + 1;
    if scenario.watched() {
        // The clock that stepped ahead is put right first.
        sched.end_forward_step();
    }
    for _round in 0..2 + config.max_migrate_depth {
        sched.advance(wait);
        if scenario.watched() {
            check_clocks_past_the_lag(cluster, sched);
        }
        for &node in &alive {
            reuse_every_free_slot(cluster, node)
                .map_err(|e| format!("audit reuse on node {node}: {e}"))?;
        }
        if staged(cluster, &alive).is_empty() {
            break;
        }
    }
    for node in 0..config.nodes {
        if let Some(data) = cluster.node_data(node) {
            let c = data.recycle_counts();
            let r = &mut outcome.recycling;
            r.scans += c.scans;
            r.reclaimed += c.reclaimed;
            r.markers_cleared += c.markers_cleared;
            r.markers_restored += c.markers_restored;
            r.in_doubt_freed += c.in_doubt_freed;
            r.kept_after_error += c.kept_after_error;
        }
    }
    let left = staged(cluster, &alive);
    if !left.is_empty() {
        let shown: String = left.iter().map(|r| describe_dte(cluster, *r)).collect();
        return Err(format!("staged slots were never reused:\n{shown}"));
    }
    // 3. Leaks.
    let leaks = leaked(cluster, &alive);
    outcome.leaked = leaks.len() as u64;
    if !leaks.is_empty() && !lossy {
        let shown: String = leaks.iter().map(|r| describe_dte(cluster, *r)).collect();
        return Err(format!(
            "{} DTE slots leaked in a run without crashes or transport errors:\n{shown}index:\n{}",
            leaks.len(),
            dump_index(cluster)
        ));
    }
    // 4. Read, write and read again every key.
    let on = alive
        .iter()
        .copied()
        .find(|&n| n == 1 % config.nodes)
        .unwrap_or(alive[0]);
    let mut auditor = cluster.client(on).map_err(|e| e.to_string())?;
    let wedged = |k: &[u8], what: &str, e: &Error, auditor: &Client| {
        format!(
            "key {} wedged after the run ({what}): {e} (auditor: {:?})\n{}",
            String::from_utf8_lossy(k),
            auditor.stats().total().retries,
            dump_key(cluster, k)
        )
    };
    for k in keys {
        let p = recorder.invoke(u64::MAX - 1, Call::get(k.clone()));
        match auditor.get(k) {
            Ok(v) => recorder.returned(p, Ret::Get(v)),
            Err(e) => return Err(wedged(k, "GET", &e, &auditor)),
        }
    }
    for k in keys {
        let v = format!("audit-{}", String::from_utf8_lossy(k)).into_bytes();
        let p = recorder.invoke(u64::MAX - 1, Call::put(k.clone(), v.clone()));
        match auditor.put(k, &v) {
            Ok(()) => recorder.returned(p, Ret::Put),
            Err(Error::IndexFull | Error::DataTableFull) => recorder.failed(p),
            Err(e) => return Err(wedged(k, "PUT", &e, &auditor)),
        }
        let p = recorder.invoke(u64::MAX - 1, Call::get(k.clone()));
        match auditor.get(k) {
            Ok(v) => recorder.returned(p, Ret::Get(v)),
            Err(e) => return Err(wedged(k, "GET after PUT", &e, &auditor)),
        }
    }
    divergent("after the audit")
}

/// Runs the clock watch's checks until they vouch for the clocks as they
/// read now (the nodes reuse staged slots only on their word): one check
/// to clear the alarms of a clock that was ahead, one more to start a run
/// of agreeing checks, and the detection lag.
fn check_clocks_past_the_lag(cluster: &Cluster, sched: &Scheduler) {
    let skew = cluster.config().max_clock_skew;
    let period = nessie::clock::heartbeat_period(skew).as_micros() as u64;
    let lag = nessie::clock::detection_lag(skew).as_micros() as u64;
    for _ in 0..2 + lag.div_ceil(period) {
        cluster.check_clocks();
        sched.advance(period);
    }
    cluster.check_clocks();
}

/// Every ITE of every node.
fn all_ites(cluster: &Cluster) -> Vec<(usize, u64, Ite)> {
    let config = cluster.config();
    let fabric = cluster.fabric();
    let mut out = Vec::new();
    for node in 0..config.nodes {
        for slot in 0..config.index_slots_per_node as u64 {
            let c = nessie::index::Candidate { node, slot };
            let mut w = [0u8; 8];
            let _ = fabric.read(c.addr(), &mut w);
            out.push((node, slot, Ite(u64::from_le_bytes(w))));
        }
    }
    out
}

/// Slots in use that nothing in the index can reach. Reachable: linked
/// entries, the `prev` and `replaced` of linked entries not committed
/// (a helper may restore them), the copies behind markers and those copies'
/// predecessors (the marker's clearer stages them).
fn leaked(cluster: &Cluster, alive: &[usize]) -> Vec<SlotRef> {
    let fabric = cluster.fabric();
    let mut reachable: HashSet<(u16, u8, u32)> = HashSet::new();
    let key = |r: SlotRef| (r.node, r.class, r.slot);
    let header = |t: SlotRef| {
        let addr = cluster.node_data(0)?.geometry().dte_addr(t)?;
        let mut h = [0u8; dte::DTE_HEADER_BYTES];
        fabric.read(addr, &mut h).ok()?;
        let h = DteHeader::decode(&h);
        (h.state.generation() == t.generation).then_some(h)
    };
    for (_, _, ite) in all_ites(cluster) {
        let Some(t) = ite.target() else { continue };
        reachable.insert(key(t));
        let Some(h) = header(t) else { continue };
        let mut also = Vec::new();
        if ite.is_moved() {
            also.push(h.prev);
        } else if h.state.status() != DteStatus::Valid {
            also.extend([h.prev, h.replaced]);
        }
        for v in also {
            if let Some(r) = Ite(v).target() {
                reachable.insert(key(r));
            }
        }
    }
    alive
        .iter()
        .filter_map(|&n| cluster.node_data(n))
        .flat_map(|d| (0..d.classes() as u8).flat_map(move |c| d.in_use_slots(c)))
        .filter(|r| !reachable.contains(&key(*r)))
        .collect()
}

/// The slots in use on the nodes `alive` that are staged (waiting for
/// their expiry).
fn staged(cluster: &Cluster, alive: &[usize]) -> Vec<SlotRef> {
    let fabric = cluster.fabric();
    let mut out = Vec::new();
    for &node in alive {
        let Some(data) = cluster.node_data(node) else {
            continue;
        };
        for class in 0..data.classes() as u8 {
            for r in data.in_use_slots(class) {
                let Some(addr) = data.geometry().dte_addr(r) else {
                    continue;
                };
                let mut w = [0u8; 8];
                let at = addr.add(dte::EXPIRES_AT_OFFSET as u64);
                if fabric.read(at, &mut w).is_ok() && u64::from_le_bytes(w) != 0 {
                    out.push(r);
                }
            }
        }
    }
    out
}

/// The key's candidate ITEs and the headers they point at, for diagnostics.
fn dump_key(cluster: &Cluster, key: &[u8]) -> String {
    let config = cluster.config();
    let mut out = String::new();
    for c in KeyHasher::new(config).candidates(key) {
        let mut w = [0u8; 8];
        let _ = cluster.fabric().read(c.addr(), &mut w);
        out.push_str(&describe(
            cluster,
            c.node,
            c.slot,
            Ite(u64::from_le_bytes(w)),
        ));
    }
    out
}

/// Every non-empty ITE of the cluster, for diagnostics.
fn dump_index(cluster: &Cluster) -> String {
    all_ites(cluster)
        .into_iter()
        .filter(|(_, _, ite)| !ite.is_empty())
        .map(|(node, slot, ite)| describe(cluster, node, slot, ite))
        .collect()
}

fn describe(cluster: &Cluster, node: usize, slot: u64, ite: Ite) -> String {
    let out = format!("  node {node} slot {slot}: {:?}\n", ite.kind());
    match ite.target() {
        Some(t) => out + &describe_dte(cluster, t),
        None => out,
    }
}

fn describe_dte(cluster: &Cluster, t: SlotRef) -> String {
    let mut out = String::new();
    let Some(data) = cluster.node_data(0) else {
        return out;
    };
    let Some(addr) = data.geometry().dte_addr(t) else {
        return out;
    };
    let mut buf = vec![0u8; data.slot_bytes(t.class)];
    let _ = cluster.fabric().read(addr, &mut buf);
    let h = DteHeader::decode(&buf);
    let key_len = h.state.key_len().min(KEY_MAX);
    out.push_str(&format!(
        "    -> {t:?}: gen {} status {:?} migrated {} tomb {} key {:?} created {} expires {} prev {:?} replaced {:?}\n",
        h.state.generation(),
        h.state.status(),
        h.state.is_migrated(),
        h.state.is_tombstone(),
        String::from_utf8_lossy(&buf[dte::KEY_OFFSET..dte::KEY_OFFSET + key_len]),
        h.created_at,
        h.expires_at,
        Ite(h.prev).kind(),
        Ite(h.replaced).kind()
    ));
    out
}
