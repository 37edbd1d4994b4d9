//! CPU time from `/proc`: a thread doing a fixed amount of work shows
//! increasing CPU-seconds, for itself and for the process. No timing
//! assertion beyond "increased" and "never decreased": CPU time is counted
//! in 10 ms ticks and the machine may be shared.

use std::hint::black_box;
use std::sync::mpsc;

use power_ipmi::{
    process_cpu_times, thread_cpu_times, CpuTimeReport, CpuTimeSampler, EnergyReport, EnergySampler,
};

/// A fixed amount of arithmetic: tens of milliseconds of CPU or more,
/// whatever the machine's load (it is CPU time, not wall time).
fn work(chunk: u64) -> u64 {
    let mut x = chunk | 1;
    for i in 0..3_000_000u64 {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    x
}

fn cpu(report: EnergyReport) -> CpuTimeReport {
    match report {
        EnergyReport::CpuTime(r) => r,
        other => panic!("not a CPU-time report: {other:?}"),
    }
}

#[test]
fn busy_thread_shows_increasing_cpu_time_for_itself_and_the_process() {
    let pid = std::process::id() as i32;
    let mut sampler = CpuTimeSampler::this_process();
    sampler.start().unwrap();

    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (step_tx, step_rx) = mpsc::channel::<()>();
    let (next_tx, next_rx) = mpsc::channel::<()>();
    let busy = std::thread::Builder::new()
        .name("busy-worker".into())
        .spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            go_rx.recv().unwrap();
            let mut acc = 0;
            for chunk in 0..10 {
                acc ^= work(chunk);
                step_tx.send(()).unwrap();
                next_rx.recv().unwrap();
            }
            acc
        })
        .unwrap();
    let tid = tid_rx.recv().unwrap();

    let thread_before = thread_cpu_times(pid, tid).unwrap();
    let process_before = process_cpu_times(pid).unwrap();
    go_tx.send(()).unwrap();
    let (mut thread_last, mut process_last) = (thread_before, process_before);
    for chunk in 0..10 {
        step_rx.recv().unwrap();
        // The thread waits between chunks, so its reading is stable here.
        let t = thread_cpu_times(pid, tid).unwrap();
        let p = process_cpu_times(pid).unwrap();
        assert!(
            t.user_s >= thread_last.user_s && t.system_s >= thread_last.system_s,
            "{t:?} < {thread_last:?}"
        );
        assert!(
            p.cpu_s() >= process_last.cpu_s(),
            "{p:?} < {process_last:?}"
        );
        (thread_last, process_last) = (t, p);
        if chunk < 9 {
            next_tx.send(()).unwrap();
        }
    }
    assert!(
        thread_last.cpu_s() > thread_before.cpu_s(),
        "the busy thread used no CPU time"
    );
    assert!(
        process_last.cpu_s() > process_before.cpu_s(),
        "the process used no CPU time"
    );

    // Stop while the thread is alive: reports list the threads alive at
    // `stop` (the process total includes exited ones).
    let report = cpu(sampler.stop().unwrap());
    next_tx.send(()).unwrap();
    black_box(busy.join().unwrap());
    assert_eq!(report.pid, pid);
    assert!(report.ticks_per_second > 0);
    assert!(report.cpu_s > 0.0);
    assert!((report.cpu_s - (report.user_s + report.system_s)).abs() < 1e-12);
    // The kernel scales a process's and a thread's user and system ticks
    // to their runtimes separately (`cputime_adjust`), so the two totals
    // agree only to a tick of each.
    let tick = 1.0 / report.ticks_per_second as f64;
    assert!(
        report.cpu_s + 2.0 * tick >= thread_last.cpu_s() - thread_before.cpu_s(),
        "{} s for the process against {:?} → {:?} for its busy thread",
        report.cpu_s,
        thread_before,
        thread_last
    );
    let worker = report
        .threads
        .iter()
        .find(|t| t.tid == tid)
        .expect("the busy thread is listed");
    assert_eq!(worker.name, "busy-worker");
    assert!(worker.started_during_run);
    assert!(worker.cpu_s > 0.0);
    assert!(report.utilization() > 0.0);

    let per_op = EnergyReport::CpuTime(report.clone())
        .per_operation(30_000_000)
        .unwrap();
    assert_eq!(per_op.cpu_seconds, Some(report.cpu_s / 30_000_000.0));
    assert_eq!(per_op.joules, None);
}

#[test]
fn a_missing_process_is_an_error_not_zero() {
    // Pid 0 has no /proc entry.
    let mut s = CpuTimeSampler::for_pid(0);
    assert!(s.start().is_err());
    assert!(process_cpu_times(0).is_err());
}
