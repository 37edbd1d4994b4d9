//! The verification apparatus of Nessie and its baselines: a deterministic
//! simulator, a linearizability checker, chaos runs, and the conformance
//! suites every fabric backend and every store must pass.
//!
//! * [`history`]: [`History`] of operations with known or unknown outcomes,
//!   and the thread-safe [`Recorder`] clients use to collect one.
//! * [`linearizability`]: [`check`] a history against a map of registers.
//! * [`conformance`]: the suite every store ([`conformance::kv`]) must pass
//!   (the fabric's suites are `nessie_fabric::conformance`).
//! * [`sim`]: the deterministic simulator — its scheduler, clocks and fabric,
//!   the seeded scenarios it runs, their audit and invariants; [`scripted`]
//!   replays model-checker counterexamples step by step on the same
//!   machinery.
//! * [`process`]: real threads and processes — stress runs of any
//!   [`nessie::KvClient`], histories written by separate processes and the
//!   workload they run, a peer killed on a fabric between processes, and
//!   chaos runs with kills, stalls, full tables and a crowded index.

pub mod conformance;
pub mod history;
pub mod linearizability;
pub mod process;
pub mod scripted;
pub mod sim;

pub use history::{Call, ClientId, History, Operation, Outcome, Pending, Recorder, Ret};
pub use linearizability::{check, CheckError, NumberedOp, Violation};
