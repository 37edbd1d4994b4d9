//! The store as users run it, in real OS processes: node processes on `shm`
//! with one killed mid-run, a peer killed on `tcp` (without and with
//! replicas), `tcp` nodes in network
//! namespaces (and a replicated one cut off from the others there), and the bounded chaos run. One test binary, so that it links
//! once; each module's node processes are this binary again, running that
//! module's ignored child test (`process::workload::test_name`).

mod chaos;
mod linearizable_processes;
mod netns_cluster;
mod netns_partition;
mod peer_death;
mod replicated_kill;

/// The cluster tests measure leases, deadlines and failure detection on a
/// machine of two cores: two clusters at once (a chaos run beside a
/// partition) starve each other's membership threads, so each test holds
/// this while its cluster runs.
static ONE_CLUSTER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits until no other cluster test of this binary runs.
fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
