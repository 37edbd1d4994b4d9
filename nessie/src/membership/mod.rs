//! Membership of a replicated store without a master: views decided by
//! Disk Paxos on the members' own memory, leases that stop a cut-off node,
//! and the drain before a view is activated
//! (docs/replication.md#views-leases-and-the-drain).
//!
//! * `agreement` — one instance of Disk Paxos over the MEMBERSHIP regions
//!   ([`crate::layout::membership`]).
//! * `reach` — verbs to every member that a silent one cannot starve.
//! * `service` — the per-node thread: lease renewals, suspicion from
//!   heartbeats, proposals, takeover, activation.

mod agreement;
mod reach;
mod service;
#[cfg(test)]
mod test_fabric;

pub(crate) use service::Membership;
