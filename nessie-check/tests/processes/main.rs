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
