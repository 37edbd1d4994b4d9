//! A linearizability checker for histories of a key-value store.
//!
//! The store is a map of independent registers, so a history is
//! linearizable iff its restriction to each key is (linearizability is
//! compositional, Herlihy & Wing 1990). [`check`] splits the history per key
//! and, for each key, searches for a linearization with the algorithm of
//! Wing & Gong as improved by Lowe ("Testing for linearizability", 2017):
//!
//! * Invocations and responses form one list in time order. Walking it from
//!   the head, every invocation met before the first response is a candidate
//!   to be linearized next; the first response met bounds the search, since
//!   that operation must be linearized before anything invoked after it.
//! * Linearizing a candidate applies it to the register model (`Option` of
//!   a value) and removes its two entries from the list; meeting a response
//!   of an operation not yet linearized backtracks.
//! * A cache of every (set of linearized operations, register state) already
//!   reached prunes the search: the future of a configuration depends on
//!   nothing else. Sets are bitsets hashed incrementally (Zobrist hashing).
//!
//! Operations of unknown outcome respond at +infinity: they never bound the
//! search and may be linearized anywhere after their invocation, or dropped.
//! Placing them eagerly makes the search exponential in their number (each
//! one may or may not have been placed at every point), so they are placed
//! lazily, which loses no linearization of a register:
//!
//! * an unknown PUT or DELETE overwrites the whole state, so of two unknown
//!   operations placed back to back the first is wasted, and dropping it
//!   instead leaves strictly more options; nothing observes one placed last;
//! * so some linearization, if any exists, places each unknown operation
//!   right before a known one, at most one there, and only where the known
//!   one's result is impossible without it (a known PUT ignores the state; a
//!   GET or DELETE that succeeds directly leaves the same state either way);
//! * two unknown operations with the same effect that are both candidates
//!   are interchangeable (nothing constrains them any more), so one per
//!   effect is tried.
//!
//! Once the first response left in the list is an unknown operation's,
//! every known operation has been linearized and the remaining unknown ones
//! are dropped (they never took effect). An unknown GET constrains nothing
//! and is ignored.
//!
//! An *undecided* operation ([`Outcome::Undecided`]: it returned without a
//! result) is unknown until its response, which bounds it like a known
//! one's: the search may place it lazily before a known operation as above,
//! and when it meets the response of one not yet placed, it either takes
//! effect there, the latest instant it may (nothing between placing it
//! earlier and there observes it, or a known PUT in between overwrites it),
//! or is dropped.
//!
//! On failure the report names the key, the longest valid partial
//! linearization found (its length, final state and last few operations),
//! the operation that could not be placed after it, and the operations that
//! were still candidates there.

use crate::history::{Bytes, Call, History, Operation, Outcome, Ret};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};

/// Why a history is not linearizable, or cannot be checked.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckError {
    /// The operations on one key admit no linearization.
    Violation(Box<Violation>),
    /// An operation is malformed (the history is not a valid input).
    Malformed {
        /// Its index in the history.
        index: usize,
        /// The operation.
        op: Operation,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::Violation(v) => v.fmt(f),
            CheckError::Malformed { index, op, reason } => {
                write!(f, "malformed operation #{index} ({op}): {reason}")
            }
        }
    }
}

impl std::error::Error for CheckError {}

/// An operation of a report, with its index in the checked history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumberedOp {
    /// Index in [`History::ops`].
    pub index: usize,
    /// The operation.
    pub op: Operation,
}

impl fmt::Display for NumberedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}", self.index, self.op)
    }
}

/// A key whose operations admit no linearization, and the deepest point the
/// search reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The key.
    pub key: Vec<u8>,
    /// Operations on the key that the search considered (unknown GETs are
    /// left out).
    pub key_ops: usize,
    /// Known operations in the longest valid partial linearization found.
    pub longest_prefix: usize,
    /// The register's value after that prefix.
    pub state: Option<Vec<u8>>,
    /// The last (up to [`Violation::TAIL`]) operations of that prefix, in
    /// linearization order (unknown ones included where they took effect).
    pub prefix_tail: Vec<NumberedOp>,
    /// The operation whose response came first among those not in the
    /// prefix, and which cannot be linearized next.
    pub blocked: NumberedOp,
    /// Other operations that were candidates after the prefix (invoked
    /// before `blocked` responded), up to [`Violation::CONCURRENT`].
    pub concurrent: Vec<NumberedOp>,
}

impl Violation {
    /// Most operations of the prefix a report shows.
    pub const TAIL: usize = 8;
    /// Most concurrent candidates a report shows.
    pub const CONCURRENT: usize = 16;
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key {}: its {} operations are not linearizable; the longest valid prefix orders {} of them",
            Bytes(&self.key),
            self.key_ops,
            self.longest_prefix
        )?;
        match &self.state {
            Some(v) => writeln!(f, " and leaves value {}", Bytes(v))?,
            None => writeln!(f, " and leaves the key absent")?,
        }
        if !self.prefix_tail.is_empty() {
            writeln!(f, "  prefix ends with:")?;
            for op in &self.prefix_tail {
                writeln!(f, "    {op}")?;
            }
        }
        writeln!(
            f,
            "  then this operation cannot take effect before it responds:"
        )?;
        writeln!(f, "    {}", self.blocked)?;
        if !self.concurrent.is_empty() {
            writeln!(f, "  other candidates at that point:")?;
            for op in &self.concurrent {
                writeln!(f, "    {op}")?;
            }
        }
        Ok(())
    }
}

/// Checks that `history` is linearizable as a map of registers.
///
/// # Errors
/// [`CheckError::Violation`] for the first key (in byte order) whose
/// operations admit no linearization; [`CheckError::Malformed`] for an
/// operation whose result does not answer its call or that responded before
/// it was invoked.
pub fn check(history: &History) -> Result<(), CheckError> {
    let mut by_key: BTreeMap<&[u8], Vec<usize>> = BTreeMap::new();
    for (index, op) in history.ops().iter().enumerate() {
        let malformed = |reason| {
            Err(CheckError::Malformed {
                index,
                op: op.clone(),
                reason,
            })
        };
        match &op.outcome {
            Outcome::Returned { ret, .. } if !ret.answers(&op.call) => {
                return malformed("its result is of another kind than its call");
            }
            Outcome::Returned { at, .. } if *at < op.invoked => {
                return malformed("it responded before it was invoked");
            }
            Outcome::Unknown | Outcome::Undecided { .. } if matches!(op.call, Call::Get(_)) => {
                continue
            }
            _ => {}
        }
        by_key.entry(op.call.key()).or_default().push(index);
    }
    for (key, indices) in by_key {
        KeySearch::new(history, key, &indices)
            .run()
            .map_err(CheckError::Violation)?;
    }
    Ok(())
}

/// Register states: 0 is "absent", `v` is the `v`-th distinct value.
type State = u32;
const ABSENT: State = 0;

/// One operation on the key, as the model sees it.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// GET that returned this state.
    Get(State),
    /// PUT of this value (known or unknown outcome).
    Put(State),
    /// DELETE that returned whether the key existed, or `None` if unknown.
    Delete(Option<bool>),
}

impl Step {
    /// The state after applying the step to `state`, if the step's result
    /// is possible in `state`.
    fn apply(self, state: State) -> Option<State> {
        match self {
            Step::Get(seen) => (seen == state).then_some(state),
            Step::Put(value) => Some(value),
            Step::Delete(Some(existed)) => ((state != ABSENT) == existed).then_some(ABSENT),
            Step::Delete(None) => Some(ABSENT),
        }
    }

    /// The state an unknown operation leaves (whatever the state before).
    fn effect(self) -> State {
        match self {
            Step::Put(value) => value,
            Step::Get(_) | Step::Delete(_) => ABSENT,
        }
    }
}

/// End of the entry list.
const NIL: usize = usize::MAX;

/// A configuration of the search already explored: the set of linearized
/// operations and the state they leave. Hashes by the incremental hash only.
#[derive(Debug, Eq)]
struct Config {
    hash: u64,
    linearized: Box<[u64]>,
    state: State,
}

impl PartialEq for Config {
    fn eq(&self, other: &Config) -> bool {
        self.hash == other.hash && self.state == other.state && self.linearized == other.linearized
    }
}

impl Hash for Config {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.hash);
    }
}

/// A known operation the search linearized, possibly right after an
/// unknown one.
#[derive(Debug)]
struct Frame {
    /// Invocation entry of the known operation.
    call: usize,
    /// State before both.
    before: State,
    /// Invocation entry of the unknown operation placed right before it.
    used: Option<usize>,
    /// Which option of [`KeySearch::option`] this was.
    option: usize,
    /// Whether this was an undecided operation met at its response: option
    /// 0 took effect there, option 1 was dropped.
    decided: bool,
}

/// The deepest point of the search, for the report.
#[derive(Debug)]
struct Deepest {
    depth: usize,
    state: State,
    tail: Vec<usize>,
    blocked: usize,
    concurrent: Vec<usize>,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The search over one key's operations.
#[derive(Debug)]
struct KeySearch<'h> {
    history: &'h History,
    key: &'h [u8],
    /// History index of each of the key's operations.
    index: Vec<usize>,
    step: Vec<Step>,
    unknown: Vec<bool>,
    /// Values by state (`values[s - 1]` is state `s`).
    values: Vec<&'h [u8]>,
    /// The entry list: entries `0..2n` plus the head sentinel `2n`.
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Per entry: its operation, and whether it is the invocation.
    entry_op: Vec<usize>,
    is_call: Vec<bool>,
    /// Per operation: its response entry.
    ret_entry: Vec<usize>,
}

impl<'h> KeySearch<'h> {
    fn new(history: &'h History, key: &'h [u8], indices: &[usize]) -> KeySearch<'h> {
        let mut ids: HashMap<&[u8], State> = HashMap::new();
        let mut values = Vec::new();
        let mut intern = |v: &'h [u8]| {
            *ids.entry(v).or_insert_with(|| {
                values.push(v);
                State::try_from(values.len()).expect("fewer than 2^32 values per key")
            })
        };
        let ops = history.ops();
        let mut step = Vec::with_capacity(indices.len());
        let mut unknown = Vec::with_capacity(indices.len());
        // (instant, rank, operation, is invocation): at equal instants
        // invocations sort first (closed intervals), and unknown responses
        // (at +infinity) after every known one.
        let mut entries: Vec<(u64, u8, usize, bool)> = Vec::with_capacity(2 * indices.len());
        for (i, &h) in indices.iter().enumerate() {
            let op = &ops[h];
            let s = match (&op.call, op.ret()) {
                (Call::Get(_), Some(Ret::Get(v))) => {
                    Step::Get(v.as_deref().map_or(ABSENT, &mut intern))
                }
                (Call::Put(_, v), _) => Step::Put(intern(v)),
                (Call::Delete(_), Some(Ret::Delete(existed))) => Step::Delete(Some(*existed)),
                (Call::Delete(_), None) => Step::Delete(None),
                _ => unreachable!("check() validated and filtered the operations"),
            };
            step.push(s);
            unknown.push(op.ret().is_none());
            entries.push((op.invoked, 0, i, true));
            match op.responded() {
                Some(at) => entries.push((at, 1, i, false)),
                None => entries.push((u64::MAX, 2, i, false)),
            }
        }
        entries.sort_unstable();
        let n = entries.len();
        let mut ret_entry = vec![NIL; indices.len()];
        for (e, &(_, _, op, call)) in entries.iter().enumerate() {
            if !call {
                ret_entry[op] = e;
            }
        }
        debug_assert!(n >= 2, "a key has at least one operation");
        let head = n;
        let mut next: Vec<usize> = (1..=n).collect();
        next[n - 1] = NIL;
        next.push(if n == 0 { NIL } else { 0 });
        let mut prev: Vec<usize> = (0..n).map(|e| if e == 0 { head } else { e - 1 }).collect();
        prev.push(NIL);
        KeySearch {
            history,
            key,
            index: indices.to_vec(),
            step,
            unknown,
            values,
            next,
            prev,
            entry_op: entries.iter().map(|e| e.2).collect(),
            is_call: entries.iter().map(|e| e.3).collect(),
            ret_entry,
        }
    }

    fn head(&self) -> usize {
        self.next.len() - 1
    }

    fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = e;
        if n != NIL {
            self.prev[n] = e;
        }
    }

    /// Removes an invocation and its response from the list.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.ret_entry[self.entry_op[call]]);
    }

    /// Undoes [`KeySearch::lift`] (entries keep their own links, so
    /// re-inserting in reverse order restores the list exactly).
    fn unlift(&mut self, call: usize) {
        self.relink(self.ret_entry[self.entry_op[call]]);
        self.relink(call);
    }

    /// The `k`-th way to linearize the known operation of invocation entry
    /// `call` next, from `state`: directly (the only way when its result is
    /// possible in `state`), or preceded by an unknown operation that is a
    /// candidate now, one per distinct effect that makes the result
    /// possible. Returns the unknown operation's invocation entry, if any,
    /// and the state after.
    fn option(&self, call: usize, state: State, k: usize) -> Option<(Option<usize>, State)> {
        let step = self.step[self.entry_op[call]];
        if let Some(after) = step.apply(state) {
            return (k == 0).then_some((None, after));
        }
        let mut effects: Vec<State> = Vec::new();
        let mut e = self.next[self.head()];
        while e != NIL && self.is_call[e] {
            let u = self.entry_op[e];
            if self.unknown[u] {
                let effect = self.step[u].effect();
                if effect != state && !effects.contains(&effect) {
                    if let Some(after) = step.apply(effect) {
                        if effects.len() == k {
                            return Some((Some(e), after));
                        }
                        effects.push(effect);
                    }
                }
            }
            e = self.next[e];
        }
        None
    }

    fn run(mut self) -> Result<(), Box<Violation>> {
        let ops = self.step.len();
        let zobrist: Vec<u64> = (0..ops as u64).map(splitmix64).collect();
        let mut linearized = vec![0u64; ops.div_ceil(64)];
        let mut hash = 0u64;
        let mut state = ABSENT;
        let mut seen: HashSet<Config> = HashSet::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut deepest: Option<Deepest> = None;
        let head = self.head();
        let mut entry = self.next[head];
        // The first option to try at `entry` (after backtracking to it).
        let mut first_option = 0;
        let flip = |bits: &mut [u64], op: usize| bits[op / 64] ^= 1 << (op % 64);
        loop {
            if entry == NIL {
                return Ok(());
            }
            let op = self.entry_op[entry];
            if self.is_call[entry] {
                let mut placed = false;
                if !self.unknown[op] {
                    let mut k = first_option;
                    while let Some((used, after)) = self.option(entry, state, k) {
                        let mut h = hash ^ zobrist[op];
                        flip(&mut linearized, op);
                        if let Some(u) = used {
                            h ^= zobrist[self.entry_op[u]];
                            flip(&mut linearized, self.entry_op[u]);
                        }
                        let config = Config {
                            hash: h ^ splitmix64(u64::from(after) ^ 0x5eed),
                            linearized: linearized.clone().into_boxed_slice(),
                            state: after,
                        };
                        if seen.insert(config) {
                            hash = h;
                            stack.push(Frame {
                                call: entry,
                                before: state,
                                used,
                                option: k,
                                decided: false,
                            });
                            state = after;
                            self.lift(entry);
                            if let Some(u) = used {
                                self.lift(u);
                            }
                            placed = true;
                            break;
                        }
                        flip(&mut linearized, op);
                        if let Some(u) = used {
                            flip(&mut linearized, self.entry_op[u]);
                        }
                        k += 1;
                    }
                }
                first_option = 0;
                entry = if placed {
                    self.next[head]
                } else {
                    self.next[entry]
                };
            } else {
                if self.unknown[op] && self.history.ops()[self.index[op]].responded().is_none() {
                    // Only unknown operations are left unlinearized; they
                    // never took effect.
                    return Ok(());
                }
                if self.unknown[op] {
                    let call = self.call_entry(op);
                    let k = first_option;
                    first_option = 0;
                    if let Some(frame) =
                        self.decide(call, state, k, (&mut linearized, &mut hash), &mut seen)
                    {
                        state = match frame.option {
                            0 => self.step[op].effect(),
                            _ => state,
                        };
                        stack.push(frame);
                        entry = self.next[head];
                        continue;
                    }
                }
                if deepest.as_ref().is_none_or(|d| stack.len() > d.depth) {
                    deepest = Some(self.deepest(&stack, state, entry));
                }
                let Some(frame) = stack.pop() else {
                    return Err(Box::new(self.report(deepest.expect("recorded just above"))));
                };
                let undone = self.entry_op[frame.call];
                flip(&mut linearized, undone);
                hash ^= zobrist[undone];
                if let Some(u) = frame.used {
                    flip(&mut linearized, self.entry_op[u]);
                    hash ^= zobrist[self.entry_op[u]];
                    self.unlift(u);
                }
                self.unlift(frame.call);
                state = frame.before;
                entry = if frame.decided {
                    self.ret_entry[undone]
                } else {
                    frame.call
                };
                first_option = frame.option + 1;
            }
        }
    }

    /// The invocation entry of operation `op`.
    fn call_entry(&self, op: usize) -> usize {
        (0..self.entry_op.len())
            .find(|&e| self.is_call[e] && self.entry_op[e] == op)
            .unwrap_or(NIL)
    }

    /// At the response of the undecided operation of invocation entry
    /// `call`, from option `k` on: it takes effect there (option 0, where
    /// that changes the state) or never (option 1), whichever leads to a
    /// configuration not yet explored; lifts it and returns its frame.
    fn decide(
        &mut self,
        call: usize,
        state: State,
        k: usize,
        (linearized, hash): (&mut Vec<u64>, &mut u64),
        seen: &mut HashSet<Config>,
    ) -> Option<Frame> {
        let op = self.entry_op[call];
        let flip = |bits: &mut [u64]| bits[op / 64] ^= 1 << (op % 64);
        for option in k..2 {
            let after = if option == 0 {
                let effect = self.step[op].effect();
                if effect == state {
                    continue;
                }
                effect
            } else {
                state
            };
            flip(linearized);
            let h = *hash ^ splitmix64(op as u64);
            let config = Config {
                hash: h ^ splitmix64(u64::from(after) ^ 0x5eed),
                linearized: linearized.clone().into_boxed_slice(),
                state: after,
            };
            if seen.insert(config) {
                *hash = h;
                self.lift(call);
                return Some(Frame {
                    call,
                    before: state,
                    used: None,
                    option,
                    decided: true,
                });
            }
            flip(linearized);
        }
        None
    }

    fn deepest(&self, stack: &[Frame], state: State, blocked: usize) -> Deepest {
        let mut tail: Vec<usize> = stack
            .iter()
            .rev()
            .flat_map(|f| {
                let placed = Some(self.entry_op[f.call]);
                [placed, f.used.map(|u| self.entry_op[u])]
            })
            .flatten()
            .take(Violation::TAIL)
            .collect();
        tail.reverse();
        let mut concurrent = Vec::new();
        let mut e = self.next[self.head()];
        while e != blocked && concurrent.len() < Violation::CONCURRENT {
            if self.is_call[e] && self.entry_op[e] != self.entry_op[blocked] {
                concurrent.push(self.entry_op[e]);
            }
            e = self.next[e];
        }
        Deepest {
            depth: stack.len(),
            state,
            tail,
            blocked: self.entry_op[blocked],
            concurrent,
        }
    }

    fn numbered(&self, op: usize) -> NumberedOp {
        let index = self.index[op];
        NumberedOp {
            index,
            op: self.history.ops()[index].clone(),
        }
    }

    fn report(&self, d: Deepest) -> Violation {
        Violation {
            key: self.key.to_vec(),
            key_ops: self.step.len(),
            longest_prefix: d.depth,
            state: (d.state != ABSENT).then(|| self.values[d.state as usize - 1].to_vec()),
            prefix_tail: d.tail.iter().map(|&op| self.numbered(op)).collect(),
            blocked: self.numbered(d.blocked),
            concurrent: d.concurrent.iter().map(|&op| self.numbered(op)).collect(),
        }
    }
}

#[cfg(test)]
mod tests;
