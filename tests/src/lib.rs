//! Cross-crate integration tests of Nessie and its baselines, and the tools
//! they share: a linearizability checker, history recording, and the
//! deterministic simulator.

pub mod history;
pub mod linearizability;
pub mod proc_history;
pub mod scripted;
pub mod sim;
pub mod simulation;
pub mod stress;
