//! Real-thread stress runs: several OS threads hammer a few keys of any
//! store through [`KvClient`], recording a history for the checker.

use crate::history::{Call, Recorder};
use nessie::{Error, KvClient};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// Shape of a stress run.
#[derive(Debug, Clone, Copy)]
pub struct StressPlan {
    /// Client threads.
    pub threads: usize,
    /// Operations per thread.
    pub ops_per_thread: usize,
    /// Keys they share.
    pub keys: usize,
    /// Largest value, bytes (values are unique per operation).
    pub max_value: usize,
    /// Seed of the operation mix.
    pub seed: u64,
}

/// The key of index `i`.
#[must_use]
pub fn stress_key(i: usize) -> Vec<u8> {
    format!("stress-{i}").into_bytes()
}

/// A unique value of `len` bytes for operation `n` of client `client`.
#[must_use]
pub fn unique_value(client: u64, n: usize, len: usize) -> Vec<u8> {
    let mut v = format!("c{client}n{n}:").into_bytes();
    v.resize(len.max(v.len()), b'.');
    v
}

/// Runs one client's share of a stress plan, recording into `recorder`.
/// Timeouts and full tables count as unknown outcomes; any other error is
/// returned.
///
/// # Errors
/// The first unexpected store error.
pub fn run_client(
    client: &mut dyn KvClient,
    id: u64,
    plan: StressPlan,
    recorder: &Recorder,
) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(plan.seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for n in 0..plan.ops_per_thread {
        let key = stress_key(rng.gen_range(0..plan.keys));
        let call = match rng.gen_range(0..10) {
            0..=3 => Call::put(key, unique_value(id, n, rng.gen_range(0..=plan.max_value))),
            4 => Call::delete(key),
            _ => Call::get(key),
        };
        let pending = recorder.invoke(id, call.clone());
        let result = call.apply(client);
        match result {
            Ok(ret) => recorder.returned(pending, ret),
            Err(Error::Timeout | Error::DataTableFull | Error::IndexFull) => {
                recorder.unknown(pending);
            }
            Err(e) => return Err(format!("client {id}: {call:?}: {e}")),
        }
    }
    Ok(())
}

/// Runs `plan` with one thread per client from `make_client(thread)`, and
/// returns the recorded history's checker verdict.
///
/// # Errors
/// An unexpected store error or a linearizability violation.
pub fn stress<C, F>(plan: StressPlan, make_client: F) -> Result<crate::history::History, String>
where
    C: KvClient + 'static,
    F: Fn(usize) -> C,
{
    let recorder = Arc::new(Recorder::new());
    let mut handles = Vec::new();
    for t in 0..plan.threads {
        let mut client = make_client(t);
        let recorder = Arc::clone(&recorder);
        handles.push(std::thread::spawn(move || {
            run_client(&mut client, t as u64, plan, &recorder)
        }));
    }
    for h in handles {
        h.join()
            .map_err(|_| "a client thread panicked".to_string())??;
    }
    let history = recorder.history();
    crate::linearizability::check(&history).map_err(|e| e.to_string())?;
    Ok(history)
}
