//! CPU time of the calling thread and of the whole process.

use nix::sys::resource::{getrusage, UsageWho};

fn secs(who: UsageWho) -> f64 {
    getrusage(who).map_or(0.0, |u| {
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 * 1e-6;
        t(u.user_time()) + t(u.system_time())
    })
}

/// CPU seconds (user + system) the calling thread has used so far.
#[must_use]
pub fn thread_cpu_secs() -> f64 {
    secs(UsageWho::RUSAGE_THREAD)
}

/// CPU seconds (user + system) this process — every thread of it — has
/// used so far.
#[must_use]
pub fn process_cpu_secs() -> f64 {
    secs(UsageWho::RUSAGE_SELF)
}
