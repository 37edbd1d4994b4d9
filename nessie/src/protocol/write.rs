//! PUT and DELETE: a new local DTE, one CAS to publish it, duplicate
//! removal, a reverse pass, and a commit CAS on the DTE's state.

use super::help::Helped;
use super::{Ctx, Retry};
use crate::index::Candidate;
use crate::layout::dte::{DteHeader, DteState, DteStatus};
use crate::layout::Ite;
use crate::Error;

/// Which write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteKind {
    /// Store a value.
    Put,
    /// Commit a tombstone, then unlink it.
    Delete,
}

/// What the forward pass of a write found.
struct Plan {
    /// Candidate holding a committed entry of the key (the target).
    holder: Option<usize>,
    /// Whether the holder is a committed tombstone.
    holder_is_tombstone: bool,
    /// The holder's header.
    holder_header: Option<DteHeader>,
    /// Further candidates holding committed entries of the key, with their
    /// headers.
    duplicates: Vec<(usize, DteHeader)>,
    /// First empty candidate.
    empty: Option<usize>,
}

enum Step<T> {
    Done(T),
    Again(Retry),
}

impl Ctx<'_> {
    /// PUT (`value` is `Some`) or DELETE; returns whether the key held a
    /// value before.
    pub(crate) fn write(
        &mut self,
        kind: WriteKind,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool, Error> {
        let cands = self.hasher.candidates(key);
        let filter = self.hasher.filter(key);
        let class = self.class_of(value.len());
        loop {
            self.check_deadline()?;
            match self.write_attempt(kind, key, value, class, filter, &cands)? {
                Step::Done(existed) => return Ok(existed),
                Step::Again(Retry::NoFreeSlot) if self.past_deadline() => {
                    return Err(Error::DataTableFull)
                }
                Step::Again(why) => self.retry(why)?,
            }
        }
    }

    /// The forward pass: reads the candidates and the headers of filter
    /// matches, helps whatever needs help, and plans the write.
    fn plan(
        &mut self,
        key: &[u8],
        filter: u8,
        cands: &[Candidate],
        ites: &[Ite],
    ) -> Result<Step<Plan>, Error> {
        let (slots, reqs): (Vec<usize>, Vec<_>) = self
            .entries_to_read(ites, filter, key.len(), false)
            .into_iter()
            .unzip();
        let views = self.read_dtes(&reqs)?;
        let mut plan = Plan {
            holder: None,
            holder_is_tombstone: false,
            holder_header: None,
            duplicates: Vec::new(),
            empty: ites.iter().position(|i| i.is_empty()),
        };
        for (view, &i) in views.into_iter().zip(&slots) {
            let Some(view) = view else {
                return Ok(Step::Again(Retry::Torn));
            };
            let slot = cands[i].addr();
            if ites[i].is_moved() {
                // A stale or stalled marker blocks its slot; help or wait.
                return Ok(match self.help_marker(slot, ites[i], &view)? {
                    Helped::Acted => Step::Again(Retry::Helped),
                    Helped::Nothing => Step::Again(Retry::Busy),
                });
            }
            if self.help_entry(slot, ites[i], &view)? == Helped::Acted {
                return Ok(Step::Again(Retry::Helped));
            }
            if view.key() != key {
                continue;
            }
            if view.status() != DteStatus::Valid {
                // A live owner is writing this key: let it finish.
                return Ok(Step::Again(Retry::Busy));
            }
            if plan.holder.is_none() {
                plan.holder = Some(i);
                plan.holder_is_tombstone = view.state().is_tombstone();
                plan.holder_header = Some(view.header);
            } else {
                plan.duplicates.push((i, view.header));
            }
        }
        Ok(Step::Done(plan))
    }

    fn write_attempt(
        &mut self,
        kind: WriteKind,
        key: &[u8],
        value: &[u8],
        class: u8,
        filter: u8,
        cands: &[Candidate],
    ) -> Result<Step<bool>, Error> {
        let ites = self.read_ites(cands, false)?;
        let plan = match self.plan(key, filter, cands, &ites)? {
            Step::Done(p) => p,
            Step::Again(why) => return Ok(Step::Again(why)),
        };
        let existed = plan.holder.is_some() && !plan.holder_is_tombstone;
        if kind == WriteKind::Delete && !existed {
            // Absent (or a committed tombstone): nothing to change, once a
            // reverse pass confirms no writer slipped in.
            return Ok(if self.read_ites(cands, true)? == ites {
                Step::Done(false)
            } else {
                Step::Again(Retry::Changed)
            });
        }
        let Some(target) = plan.holder.or(plan.empty) else {
            self.make_room(cands, &ites)?;
            return Ok(Step::Again(Retry::Changed));
        };
        let replaced = ites[target];
        let start = self.start;
        let tombstone = kind == WriteKind::Delete;
        let key_len = key.len();
        let value_len = value.len();
        let Some(mine) = self.write_entry(
            class,
            |generation| DteHeader {
                state: DteState::new(generation, key_len, value_len, tombstone, false),
                created_at: start,
                prev: replaced.0,
                replaced: replaced.0,
                ..DteHeader::default()
            },
            key,
            value,
        )?
        else {
            return Ok(Step::Again(Retry::NoFreeSlot));
        };
        let state = DteState::new(mine.generation, key_len, value_len, tombstone, false);
        let published = Ite::occupied(mine, filter);
        let slot = cands[target].addr();
        match self.cas(slot, replaced.0, published.0) {
            Ok(old) if old == replaced.0 => {}
            Ok(_) => {
                self.data.release_unpublished(mine);
                return Ok(Step::Again(Retry::CasFailed));
            }
            Err(Error::Timeout) => {
                // The deadline check refused the CAS: never published.
                self.data.release_unpublished(mine);
                return Err(Error::Timeout);
            }
            // A transport error leaves the CAS's fate unknown: keep the slot.
            Err(e) => return Err(e),
        }
        // Clear the key's other copies; the reverse pass expects them gone.
        let mut expected = ites.clone();
        expected[target] = published;
        let mut cleared = Vec::new();
        for &(d, header) in &plan.duplicates {
            expected[d] = ites[d].emptied();
            if self.cas(cands[d].addr(), ites[d].0, ites[d].emptied().0)? == ites[d].0 {
                cleared.push((d, header));
            }
        }
        if self.read_ites(cands, true)? != expected {
            // Someone changed a candidate meanwhile: abort and put back the
            // value we replaced. A helper may have done either step already.
            self.cas_state(mine, state, DteStatus::Aborted)?;
            if self.cas(slot, published.0, replaced.0)? == published.0 {
                self.stage(mine)?;
            }
            return Ok(Step::Again(Retry::Changed));
        }
        let found = self.cas_state(mine, state, DteStatus::Valid)?;
        if found.status() == DteStatus::Aborted {
            return Ok(Step::Again(Retry::AbortedByHelper));
        }
        // Committed: only now may what we replaced become reusable.
        if let (Some(old), Some(header)) = (replaced.target(), plan.holder_header) {
            self.retire(old, &header)?;
        }
        for (d, header) in cleared {
            if let Some(old) = ites[d].target() {
                self.retire(old, &header)?;
            }
        }
        if kind == WriteKind::Delete && !self.past_deadline() {
            // Unlink the committed tombstone (best effort: readers treat a
            // linked tombstone as absent, and writers replace it).
            if self.cas(slot, published.0, published.emptied().0)? == published.0 {
                self.stage(mine)?;
            }
        }
        Ok(Step::Done(existed))
    }
}
