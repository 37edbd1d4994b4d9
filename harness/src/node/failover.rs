//! A node process of a run measured as a time series (`failover`): its
//! workers record what each operation ended with per time bucket
//! ([`crate::measure::timeline`]) until the harness says `stop`; and the
//! replacement of a lost node, which rejoins before it takes part.
//!
//! Unlike the measured phase of the other experiments, an operation may be
//! refused (`ViewChanging`, `NoQuorum`) or fail while the cluster changes its
//! view; neither ends the run. In the open loop (the `failover` default) a
//! worker keeps to its arrival times whatever the outcome; in the closed
//! loop it pauses [`CLOSED_LOOP_BACKOFF`] after an operation that did not
//! succeed, as a client retrying would, rather than spin on refusals.

use super::{emit, stamp, wait_until, Commands, Heard};
use crate::error::{HarnessError, Result};
use crate::measure::timeline::{
    unix_now_us, Ended, NodeTimeline, RestoreReport, SliceRecorder, UnixClock,
};
use crate::protocol::{NodeCommand, NodeEvent};
use crate::spec::{RunSpec, TimelineSpec};
use crate::system::{self, NodeHandle};
use crate::workload::{self, KeyChooser, OpKind, OpStream};
use nessie::{Config, KvClient};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a closed-loop worker waits after an operation that was
/// refused or failed.
const CLOSED_LOOP_BACKOFF: Duration = Duration::from_millis(1);

/// How often the node looks for the harness's `stop`.
const LISTEN_EVERY: Duration = Duration::from_millis(20);

/// Starts the replacement of lost node `node` ([`system::rejoin_node`]) and
/// reports what its restore did and when ([`NodeEvent::Restored`]).
///
/// # Errors
/// The store's refusal or timeout of the rejoin.
pub(super) fn rejoin(spec: &RunSpec, config: &Config, node: usize) -> Result<Box<dyn NodeHandle>> {
    let called_us = unix_now_us();
    let (handle, figures) = system::rejoin_node(spec.system, config, node)?;
    let returned_us = unix_now_us();
    emit(&NodeEvent::Restored {
        restore: RestoreReport::new(node, called_us, returned_us, &figures),
    });
    Ok(handle)
}

/// What every worker of a node shares.
struct Work<'a> {
    spec: &'a RunSpec,
    node: usize,
    keys: KeyChooser,
    clock: UnixClock,
    bucket: Duration,
    stop: &'a AtomicBool,
}

/// The phase: workers on `clients` until the harness says `stop` (or the
/// timeline's limit passes); returns the node's buckets. On `flush` it
/// reports the buckets so far ([`NodeEvent::Timeline`]) and goes on.
///
/// # Errors
/// [`HarnessError::Protocol`] if the harness aborted the run (`exit` or
/// stdin closed) or a worker panicked; a bad open-loop rate.
pub(super) fn phase(
    spec: &RunSpec,
    timeline: TimelineSpec,
    node: usize,
    replacement: bool,
    clients: &mut [Box<dyn KvClient>],
    commands: &Commands,
) -> Result<NodeTimeline> {
    let stop = AtomicBool::new(false);
    let limit = Instant::now() + Duration::from_millis(timeline.limit_ms);
    let work = Work {
        spec,
        node,
        keys: KeyChooser::new(&spec.workload),
        clock: UnixClock::now(),
        bucket: Duration::from_millis(timeline.bucket_ms),
        stop: &stop,
    };
    let mut aborted = false;
    // Each worker's buckets, behind a lock only a flush contends for.
    let recorders: Vec<Mutex<SliceRecorder>> = clients
        .iter()
        .map(|_| Mutex::new(SliceRecorder::new(work.bucket)))
        .collect();
    let so_far = || {
        let mut all = SliceRecorder::new(work.bucket);
        for r in &recorders {
            all.add(&r.lock().unwrap_or_else(PoisonError::into_inner));
        }
        all.into_timeline(node, replacement)
    };
    let outs: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .zip(&recorders)
            .enumerate()
            .map(|(i, (c, rec))| {
                let work = &work;
                s.spawn(move || run_worker(work, i, c.as_mut(), rec))
            })
            .collect();
        while !handles
            .iter()
            .all(std::thread::ScopedJoinHandle::is_finished)
        {
            match commands.listen(LISTEN_EVERY) {
                Heard::Said(NodeCommand::Stop) => stop.store(true, Ordering::Relaxed),
                Heard::Said(NodeCommand::Flush) => emit(&NodeEvent::Timeline {
                    timeline: Box::new(so_far()),
                }),
                Heard::Said(NodeCommand::Exit) | Heard::Gone => {
                    aborted = true;
                    stop.store(true, Ordering::Relaxed);
                }
                Heard::Said(_) | Heard::Nothing => {}
            }
            if Instant::now() >= limit {
                stop.store(true, Ordering::Relaxed);
            }
        }
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(HarnessError::Protocol("a worker thread panicked".into()))
                })
            })
            .collect()
    });
    if aborted {
        return Err(HarnessError::Protocol("the harness aborted the run".into()));
    }
    for out in outs {
        out?;
    }
    Ok(so_far())
}

/// One worker: the run's workload (open or closed loop) until `stop`,
/// recorded into `rec`.
fn run_worker(
    w: &Work<'_>,
    worker: usize,
    client: &mut dyn KvClient,
    rec: &Mutex<SliceRecorder>,
) -> Result<()> {
    let load = &w.spec.workload;
    let mut stream = OpStream::new(load, w.keys.clone(), w.node, worker);
    let mut arrivals = super::worker_arrivals(w.spec, w.node, worker)?;
    let mut key = vec![0; load.key_size];
    let mut value = vec![0; load.value_size];
    workload::fill_value(worker as u64, w.node as u64, &mut value);
    let mut out = Vec::with_capacity(load.value_size);
    let mut version = 0u64;
    let mut next = Instant::now();
    loop {
        if let Some(a) = arrivals.as_mut() {
            next += Duration::from_secs_f64(a.next_gap());
            if !wait_until(next, w.stop) {
                break;
            }
        } else if w.stop.load(Ordering::Relaxed) {
            break;
        }
        let (kind, index) = stream.next_op();
        workload::write_key(index, &mut key);
        let t0 = Instant::now();
        let result = match kind {
            OpKind::Get => client.get_into(&key, &mut out),
            OpKind::Put => {
                version += 1;
                stamp(&mut value, index, version);
                client.put(&key, &value).map(|()| true)
            }
        };
        let done = Instant::now();
        let ended = Ended::of(kind, done - t0, &result);
        let ok = ended.is_ok();
        rec.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(w.clock.unix_us(done), ended);
        if !ok && arrivals.is_none() {
            std::thread::sleep(CLOSED_LOOP_BACKOFF);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::timeline::Slice;
    use crate::spec::Load;
    use crate::workload::WorkloadSpec;
    use nessie_examples::StoreKind;

    #[test]
    fn a_null_node_records_its_buckets_until_its_limit() {
        let w = WorkloadSpec {
            keys: 100,
            value_size: 64,
            ..WorkloadSpec::default()
        };
        let mut spec = RunSpec::new("t", StoreKind::Null, w);
        spec.nodes = 1;
        spec.load = Load::Open {
            ops_per_sec: 2_000.0,
        };
        let node = system::start_node(StoreKind::Null, &Config::default(), 0, None).unwrap();
        let mut clients: Vec<_> = (0..2).map(|_| node.client().unwrap()).collect();
        let timeline = TimelineSpec {
            bucket_ms: 50,
            limit_ms: 400,
        };
        let t = phase(
            &spec,
            timeline,
            0,
            false,
            &mut clients,
            &Commands::new(false),
        )
        .unwrap();
        assert_eq!((t.node, t.replacement, t.bucket_us), (0, false, 50_000));
        let ok: u64 = t.slices.values().map(Slice::ok).sum();
        assert!((400..=1_200).contains(&ok), "{ok} ops at 2000/s for 0.4 s");
        assert!(t.slices.len() >= 6, "{} buckets of 50 ms", t.slices.len());
        assert!(t.slices.values().all(|s| s.refused() + s.failed == 0));
    }
}
