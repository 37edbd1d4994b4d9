//! Histories of key-value operations, as concurrent clients observed them,
//! and the [`Recorder`] that collects them.
//!
//! An [`Operation`] is one call by one client: what it asked ([`Call`]), when
//! it was invoked, and how it ended ([`Outcome`]): either it returned a
//! result ([`Ret`]) at a known instant, or its outcome is unknown (the client
//! crashed or timed out). An unknown operation may have taken effect at any
//! instant after its invocation, or never; its response is at +infinity.
//!
//! Instants are `u64`s of any monotonic clock (logical ticks or
//! nanoseconds). Intervals are closed: two operations of which one responds
//! at the very instant the other is invoked count as concurrent, which is the
//! permissive reading of a tie.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// Identifies the client (thread, process) that issued an operation.
pub type ClientId = u64;

/// What a client asked the store to do.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    /// GET(key).
    Get(Vec<u8>),
    /// PUT(key, value).
    Put(Vec<u8>, Vec<u8>),
    /// DELETE(key).
    Delete(Vec<u8>),
}

impl Call {
    /// GET of `key`.
    pub fn get(key: impl Into<Vec<u8>>) -> Call {
        Call::Get(key.into())
    }

    /// PUT of `value` under `key`.
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Call {
        Call::Put(key.into(), value.into())
    }

    /// DELETE of `key`.
    pub fn delete(key: impl Into<Vec<u8>>) -> Call {
        Call::Delete(key.into())
    }

    /// The key the call is about.
    #[must_use]
    pub fn key(&self) -> &[u8] {
        match self {
            Call::Get(k) | Call::Put(k, _) | Call::Delete(k) => k,
        }
    }
}

impl Call {
    /// Issues the call on `client` and returns what it returned.
    ///
    /// # Errors
    /// Whatever the store returned.
    pub fn apply(&self, client: &mut dyn nessie::KvClient) -> Result<Ret, nessie::Error> {
        match self {
            Call::Get(k) => client.get(k).map(Ret::Get),
            Call::Put(k, v) => client.put(k, v).map(|()| Ret::Put),
            Call::Delete(k) => client.delete(k).map(Ret::Delete),
        }
    }
}

/// What a call returned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ret {
    /// A GET's answer: the value, or `None` if the key was absent.
    Get(Option<Vec<u8>>),
    /// A PUT completed.
    Put,
    /// A DELETE's answer: whether the key existed.
    Delete(bool),
}

impl Ret {
    /// Whether this is the kind of result `call` returns.
    #[must_use]
    pub fn answers(&self, call: &Call) -> bool {
        matches!(
            (call, self),
            (Call::Get(_), Ret::Get(_))
                | (Call::Put(..), Ret::Put)
                | (Call::Delete(_), Ret::Delete(_))
        )
    }
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It returned `ret` at instant `at`.
    Returned {
        /// Response instant (not before the invocation).
        at: u64,
        /// The result.
        ret: Ret,
    },
    /// Unknown: crashed or timed out. It may have taken effect at any
    /// instant after its invocation, or not at all.
    Unknown,
    /// It returned at instant `at` without a result (a timeout, a failed
    /// verb): it took effect at some instant before `at`, or not at all.
    Undecided {
        /// Response instant (not before the invocation).
        at: u64,
    },
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Operation {
    /// Who issued it.
    pub client: ClientId,
    /// What it asked.
    pub call: Call,
    /// Invocation instant.
    pub invoked: u64,
    /// How it ended.
    pub outcome: Outcome,
}

impl Operation {
    /// An operation that returned `ret` at `responded`.
    #[must_use]
    pub fn returned(
        client: ClientId,
        call: Call,
        invoked: u64,
        responded: u64,
        ret: Ret,
    ) -> Operation {
        Operation {
            client,
            call,
            invoked,
            outcome: Outcome::Returned { at: responded, ret },
        }
    }

    /// An operation whose outcome is unknown.
    #[must_use]
    pub fn unknown(client: ClientId, call: Call, invoked: u64) -> Operation {
        Operation {
            client,
            call,
            invoked,
            outcome: Outcome::Unknown,
        }
    }

    /// The response instant; `None` (+infinity) for an unknown outcome.
    #[must_use]
    pub fn responded(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Returned { at, .. } | Outcome::Undecided { at } => Some(at),
            Outcome::Unknown => None,
        }
    }

    /// The result, if known.
    #[must_use]
    pub fn ret(&self) -> Option<&Ret> {
        match &self.outcome {
            Outcome::Returned { ret, .. } => Some(ret),
            Outcome::Unknown | Outcome::Undecided { .. } => None,
        }
    }
}

/// Shows bytes as text when they are printable ASCII, else as hex.
pub(crate) struct Bytes<'a>(pub(crate) &'a [u8]);

impl fmt::Display for Bytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 24;
        let shown = &self.0[..self.0.len().min(MAX)];
        if shown.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
            write!(f, "{:?}", String::from_utf8_lossy(shown))?;
        } else {
            f.write_str("0x")?;
            for b in shown {
                write!(f, "{b:02x}")?;
            }
        }
        if self.0.len() > MAX {
            write!(f, "..({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client {} ", self.client)?;
        match &self.call {
            Call::Get(k) => write!(f, "get({})", Bytes(k))?,
            Call::Put(k, v) => write!(f, "put({}, {})", Bytes(k), Bytes(v))?,
            Call::Delete(k) => write!(f, "delete({})", Bytes(k))?,
        }
        match &self.outcome {
            Outcome::Returned { at, ret } => {
                match ret {
                    Ret::Get(Some(v)) => write!(f, " -> {}", Bytes(v))?,
                    Ret::Get(None) => f.write_str(" -> none")?,
                    Ret::Put => f.write_str(" -> ok")?,
                    Ret::Delete(existed) => write!(f, " -> {existed}")?,
                }
                write!(f, " [{}, {at}]", self.invoked)
            }
            Outcome::Unknown => write!(f, " -> unknown [{}, inf)", self.invoked),
            Outcome::Undecided { at } => write!(f, " -> undecided [{}, {at}]", self.invoked),
        }
    }
}

/// A history: every operation the clients issued, in no particular order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    ops: Vec<Operation>,
}

impl History {
    /// An empty history.
    #[must_use]
    pub fn new() -> History {
        History::default()
    }

    /// Adds an operation.
    pub fn push(&mut self, op: Operation) {
        self.ops.push(op);
    }

    /// Every operation, in the order they were added.
    #[must_use]
    pub fn ops(&self) -> &[Operation] {
        &self.ops
    }

    /// Number of operations.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Number of operations whose outcome is unknown (no result: the
    /// client timed out or its process died).
    #[must_use]
    pub fn unknown_outcomes(&self) -> usize {
        self.ops.iter().filter(|o| o.ret().is_none()).count()
    }

    /// Whether there are no operations.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Appends every operation of `other` (e.g. histories recorded by
    /// separate processes on one clock).
    pub fn extend(&mut self, other: History) {
        self.ops.extend(other.ops);
    }
}

impl From<Vec<Operation>> for History {
    fn from(ops: Vec<Operation>) -> History {
        History { ops }
    }
}

impl FromIterator<Operation> for History {
    fn from_iter<I: IntoIterator<Item = Operation>>(iter: I) -> History {
        History {
            ops: iter.into_iter().collect(),
        }
    }
}

/// An operation a client has invoked and not yet completed. Hand it back to
/// [`Recorder::returned`] or [`Recorder::unknown`]; one that is simply
/// dropped (say, by a panicking client) stays unknown.
#[derive(Debug)]
#[must_use = "complete the operation with Recorder::returned or Recorder::unknown"]
pub struct Pending {
    index: usize,
}

#[derive(Debug)]
struct Recording {
    last: u64,
    ops: Vec<Operation>,
    /// Operations that failed without taking effect (left out).
    failed: Vec<bool>,
}

impl Recording {
    fn history(&self) -> History {
        History {
            ops: self
                .ops
                .iter()
                .zip(&self.failed)
                .filter(|(_, failed)| !**failed)
                .map(|(op, _)| op.clone())
                .collect(),
        }
    }
}

/// Collects a history from concurrent clients.
///
/// Timestamps are nanoseconds since the recorder was made, on the monotonic
/// clock, made strictly increasing across all clients so that an operation
/// that responded before another was invoked always has the smaller stamp.
/// Record the invocation right before issuing the operation and the response
/// right after it returns.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    inner: Mutex<Recording>,
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder::new()
    }
}

impl Recorder {
    /// A recorder with an empty history.
    #[must_use]
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            inner: Mutex::new(Recording {
                last: 0,
                ops: Vec::new(),
                failed: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recording> {
        // A client that panicked while holding the lock cannot have left the
        // recording half-updated (every update is one push or one store).
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stamp(&self, rec: &mut Recording) -> u64 {
        let now = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        rec.last = now.max(rec.last + 1);
        rec.last
    }

    /// Records that `client` invokes `call` now.
    pub fn invoke(&self, client: ClientId, call: Call) -> Pending {
        let mut rec = self.lock();
        let invoked = self.stamp(&mut rec);
        rec.ops.push(Operation::unknown(client, call, invoked));
        rec.failed.push(false);
        Pending {
            index: rec.ops.len() - 1,
        }
    }

    /// Records that the operation returned `ret` now.
    pub fn returned(&self, pending: Pending, ret: Ret) {
        let mut rec = self.lock();
        let at = self.stamp(&mut rec);
        rec.ops[pending.index].outcome = Outcome::Returned { at, ret };
    }

    /// Records that the operation's outcome is unknown (it timed out or its
    /// client crashed). Dropping the [`Pending`] has the same effect.
    pub fn unknown(&self, pending: Pending) {
        let _ = pending;
    }

    /// Records that the operation returned now without a result: whether
    /// it took effect is unknown, but it cannot take effect any later
    /// ([`Outcome::Undecided`]).
    pub fn undecided(&self, pending: Pending) {
        let mut rec = self.lock();
        let at = self.stamp(&mut rec);
        rec.ops[pending.index].outcome = Outcome::Undecided { at };
    }

    /// Records that the operation failed without taking effect (an error
    /// that promises nothing changed, such as `IndexFull` or
    /// `DataTableFull`): it is left out of the history, so that the checker
    /// catches it if it did take effect after all.
    pub fn failed(&self, pending: Pending) {
        self.lock().failed[pending.index] = true;
    }

    /// How many operations failed without effect (left out of the history).
    #[must_use]
    pub fn failed_count(&self) -> usize {
        self.lock().failed.iter().filter(|f| **f).count()
    }

    /// The history so far; operations still pending are unknown.
    #[must_use]
    pub fn history(&self) -> History {
        self.lock().history()
    }

    /// Consumes the recorder, returning its history.
    #[must_use]
    pub fn into_history(self) -> History {
        self.inner
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .history()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_stamps_are_strictly_increasing_across_threads() {
        let rec = Recorder::new();
        std::thread::scope(|s| {
            for client in 0..4 {
                let rec = &rec;
                s.spawn(move || {
                    for i in 0..200u32 {
                        let p = rec.invoke(client, Call::put("k", i.to_le_bytes()));
                        rec.returned(p, Ret::Put);
                    }
                });
            }
        });
        let h = rec.into_history();
        assert_eq!(h.len(), 800);
        let mut stamps: Vec<u64> = h
            .ops()
            .iter()
            .flat_map(|o| [o.invoked, o.responded().unwrap()])
            .collect();
        for o in h.ops() {
            assert!(o.invoked < o.responded().unwrap());
        }
        stamps.sort_unstable();
        stamps.dedup();
        assert_eq!(stamps.len(), 1600, "every stamp is unique");
    }

    #[test]
    fn pending_and_dropped_operations_are_unknown() {
        let rec = Recorder::new();
        let a = rec.invoke(1, Call::put("k", "v"));
        let b = rec.invoke(2, Call::get("k"));
        let c = rec.invoke(3, Call::delete("k"));
        let d = rec.invoke(4, Call::put("k", "w"));
        rec.returned(b, Ret::Get(None));
        rec.unknown(a);
        drop(c);
        rec.failed(d);
        let h = rec.history();
        assert_eq!(h.len(), 3, "the failed operation is left out");
        assert_eq!(h.ops()[0].outcome, Outcome::Unknown);
        assert_eq!(h.ops()[1].ret(), Some(&Ret::Get(None)));
        assert_eq!(h.ops()[2].outcome, Outcome::Unknown);
        assert_eq!(h.ops()[0].responded(), None);
    }

    #[test]
    fn operations_display_readably() {
        let op = Operation::returned(7, Call::get("key"), 3, 9, Ret::Get(Some(vec![0, 255])));
        assert_eq!(op.to_string(), "client 7 get(\"key\") -> 0x00ff [3, 9]");
        let op = Operation::unknown(1, Call::put("k", "v"), 4);
        assert_eq!(
            op.to_string(),
            "client 1 put(\"k\", \"v\") -> unknown [4, inf)"
        );
    }
}
