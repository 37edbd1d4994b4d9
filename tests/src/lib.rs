//! Cross-crate integration tests of Nessie and its baselines, and the tools
//! they share: history recording and a linearizability checker, and a
//! conformance suite for fabric backends.
//!
//! * [`history`]: [`History`] of operations with known or unknown outcomes,
//!   and the thread-safe [`Recorder`] clients use to collect one.
//! * [`linearizability`]: [`check`] a history against a map of registers.
//! * [`conformance`]: checks every [`nessie::fabric::Fabric`] backend must
//!   pass, run on each backend by `tests/fabric_conformance.rs`.

pub mod conformance;
pub mod history;
pub mod linearizability;

pub use history::{Call, ClientId, History, Operation, Outcome, Pending, Recorder, Ret};
pub use linearizability::{check, CheckError, NumberedOp, Violation};
