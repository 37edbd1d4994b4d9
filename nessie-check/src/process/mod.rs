//! Real threads and processes: the apparatus that runs the store as users
//! run it (node processes, a killed peer, chaos) and checks what they did.
//!
//! * [`chaos`]: node processes killed, stalled, their tables filled at
//!   random while clients work (with replicas: killed and wiped, then
//!   replaced by a process that rejoins), with the history checked for
//!   linearizability.
//! * [`double_loss`]: two of five members (three replicas) killed
//!   together; the survivors read every key back.
//! * [`peer_death`]: a peer killed mid-run; what the survivors can still do.
//! * [`history`]: histories recorded by node processes, merged and checked.
//! * [`replicated`]: workers of a replicated cluster whose view changes
//!   under them (typed refusals, unknown outcomes, the gap in service).
//! * [`replicated_kill`]: a member of a replicated cluster killed
//!   mid-operation; the survivors' view change, service and history.
//! * [`workload`]: the workload a node process runs for those checks.
//! * [`stress`]: threads of one process hammering a small cluster.

pub mod chaos;
pub mod double_loss;
pub mod history;
pub mod peer_death;
pub mod replicated;
pub mod replicated_kill;
pub mod stress;
pub mod workload;
