//! PUT and DELETE: a new local DTE, one CAS to publish it, duplicate
//! removal, a reverse pass, and a commit CAS on the DTE's state.

use super::help::Helped;
use super::hinted::HintedRead;
use super::mirror::Commit;
use super::view::DteView;
use super::{Ctx, Linked, Retry};
use crate::cache::hints::Hint;
use crate::data::SlotUse;
use crate::index::{Candidate, PerCandidate};
use crate::layout::dte::{DteHeader, DteState, DteStatus};
use crate::layout::{Ite, SlotRef};
use crate::Error;

/// Which write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteKind {
    /// Store a value.
    Put,
    /// Commit a tombstone, then unlink it.
    Delete,
}

/// What a write's forward pass tells of a committed entry from its header
/// (the pass reads no values): whether it is a tombstone, and its value's
/// length.
type Shape = (bool, usize);

/// What the forward pass of a write found.
struct Plan {
    /// Candidate holding a committed entry of the key (the target).
    holder: Option<usize>,
    /// The holder's shape (a committed tombstone, or a value's length).
    holder_shape: Shape,
    /// Further candidates holding committed entries of the key, with their
    /// shapes.
    duplicates: Vec<(usize, Shape)>,
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
        let cands = self.env.hasher.candidate_list(key);
        let (filter, hint_key) = self.env.hasher.filter_and_hint_key(key);
        // Callers checked `value.len() <= value_size_max`.
        let class = self.env.geometry().class_for(value.len()).unwrap_or(0);
        let hints = self.uses_hints();
        // Only the first attempt reads a hinted entry.
        let mut hint = hints.then(|| self.hint_to_read(hint_key)).flatten();
        // The first attempt starts when the operation did (one clock read
        // fewer; every CAS checks the deadline itself); later ones check.
        let mut first = true;
        loop {
            let checked = if std::mem::take(&mut first) {
                Ok(())
            } else {
                self.gate.check_deadline()
            };
            self.op.decided_by = None;
            let attempt = checked.and_then(|()| {
                let entry = (kind, key, value, class);
                self.write_attempt(entry, filter, &cands, hint.take())
            });
            match attempt {
                Ok(Step::Done(existed)) => {
                    if hints {
                        self.keep_hint(hint_key);
                    }
                    return Ok(existed);
                }
                Ok(Step::Again(why)) => self.retry(why)?,
                Err(Error::Timeout) => {
                    let e = self.op.deadline_error();
                    if matches!(e, Error::DataTableFull) {
                        let figures = self.env.data.figures(class);
                        tracing::warn!("{e}: {figures}");
                        self.kept.table_full = Some(figures);
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The forward pass: reads the headers of filter matches (but the
    /// one `hinted` already read, which stands for the read of the
    /// candidate whose ITE holds its value), helps whatever needs help,
    /// and plans the write.
    fn plan(
        &mut self,
        key: &[u8],
        filter: u8,
        cands: &[Candidate],
        ites: &[Ite],
        hinted: Option<HintedRead>,
    ) -> Result<Step<Plan>, Error> {
        let (mut slots, mut reqs) = (PerCandidate::<usize>::new(), PerCandidate::new());
        for (i, req) in self.entries_to_read(ites, filter, key.len(), false) {
            slots.push(i);
            reqs.push(req);
        }
        let read_at = hinted
            .as_ref()
            .and_then(|(ite, _)| slots.iter().position(|&i| ites[i] == *ite));
        // A hint that holds names an entry of this key, so its ITE value
        // carries the key's filter bits and is among the reads planned.
        debug_assert!(
            hinted.is_none() || read_at.is_some(),
            "a hinted header stands for a candidate whose ITE holds its value"
        );
        if let Some(j) = read_at {
            reqs.remove(j);
        }
        let mut views = PerCandidate::new();
        self.read_dtes(&reqs, None, &mut views)?;
        if let Some((_, view)) = hinted {
            match read_at {
                Some(j) => views.insert(j, Some(view)),
                None => self.recycle(view),
            }
        }
        let plan = Plan {
            holder: None,
            holder_shape: (false, 0),
            duplicates: Vec::new(),
            empty: ites.iter().position(|i| i.is_empty()),
        };
        let step = self.plan_from(key, cands, ites, &slots, &views, plan);
        for view in views.into_iter().flatten() {
            self.recycle(view);
        }
        step
    }

    /// Goes through the DTEs the forward pass read, in candidate order.
    fn plan_from(
        &mut self,
        key: &[u8],
        cands: &[Candidate],
        ites: &[Ite],
        slots: &[usize],
        views: &[Option<DteView>],
        mut plan: Plan,
    ) -> Result<Step<Plan>, Error> {
        for (view, &i) in views.iter().zip(slots) {
            let Some(view) = view else {
                return Ok(Step::Again(Retry::Torn));
            };
            let slot = cands[i].addr();
            if ites[i].is_moved() {
                // A stale or stalled marker blocks its slot; help or wait.
                return Ok(match self.help_marker(slot, ites[i], view)? {
                    Helped::Acted => Step::Again(Retry::Helped),
                    Helped::Nothing => Step::Again(Retry::Busy),
                });
            }
            if self.help_entry(slot, ites[i], view)? == Helped::Acted {
                return Ok(Step::Again(Retry::Helped));
            }
            if !view.holds(key) {
                continue;
            }
            if view.status() != DteStatus::Valid {
                // A live owner is writing this key: let it finish.
                return Ok(Step::Again(Retry::Busy));
            }
            let shape = (view.state().is_tombstone(), view.state().value_len());
            if plan.holder.is_none() {
                plan.holder = Some(i);
                plan.holder_shape = shape;
            } else {
                plan.duplicates.push((i, shape));
            }
        }
        Ok(Step::Done(plan))
    }

    fn write_attempt(
        &mut self,
        (kind, key, value, class): (WriteKind, &[u8], &[u8], u8),
        filter: u8,
        cands: &[Candidate],
        hint: Option<(Hint, SlotRef)>,
    ) -> Result<Step<bool>, Error> {
        let (ites, hinted) = self.read_ites_for_write(key, cands, hint)?;
        let plan = match self.plan(key, filter, cands, &ites, hinted)? {
            Step::Done(p) => p,
            Step::Again(why) => return Ok(Step::Again(why)),
        };
        let existed = plan.holder.is_some() && !plan.holder_shape.0;
        if kind == WriteKind::Delete && !existed {
            // Absent (or a committed tombstone): nothing to change, once a
            // reverse pass confirms no writer slipped in. The answer comes
            // from reads alone, so where views change it is checked against
            // the deadline, as a GET's is (docs/replication.md#rp0b).
            return Ok(if self.read_ites(cands, true)? == ites {
                self.gate.check_answer()?;
                Step::Done(false)
            } else {
                Step::Again(Retry::Changed)
            });
        }
        let Some(target) = plan.holder.or(plan.empty) else {
            return Ok(Step::Again(self.make_room(cands, &ites)?));
        };
        let replaced = ites[target];
        let created_at = self.op.created_at;
        let tombstone = kind == WriteKind::Delete;
        let (key_len, value_len) = (key.len(), value.len());
        // A tombstone may take the reserve, so that a full table can still
        // be emptied (docs/design.md#the-tombstone-reserve).
        let purpose = if tombstone {
            SlotUse::Tombstone
        } else {
            SlotUse::Entry
        };
        let Some(mine) = self.write_entry(
            class,
            purpose,
            |generation| DteHeader {
                state: DteState::new(generation, key_len, value_len, tombstone, false),
                created_at,
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
        // With no duplicate to clear in between, the reverse pass may ride
        // in the link's batch (docs/design.md#put, step 7).
        let reread = if self.reverse_pass_rides_link(plan.duplicates.is_empty()) {
            match self.link_and_reread(cands, slot, (replaced, published), mine)? {
                Some(ites) => Some(ites),
                None => return Ok(Step::Again(Retry::CasFailed)),
            }
        } else if self.link(slot, replaced, published, mine)? == Linked::Lost {
            return Ok(Step::Again(Retry::CasFailed));
        } else {
            None
        };
        // Clear the key's other copies; the reverse pass expects them gone.
        // Whoever wins a clear stages what it cleared, whatever happens to
        // this write later (one stager per incarnation).
        let mut expected = ites.clone();
        expected[target] = published;
        for &(d, shape) in &plan.duplicates {
            expected[d] = ites[d].emptied();
            if self.cas_ite(cands[d].addr(), ites[d].0, ites[d].emptied().0)? == ites[d].0 {
                // Our link replaced the holder as the forward pass read it,
                // and this clear the duplicate as read, both after those
                // reads: at the link, both were linked and committed. Two
                // versions of the key that differ must never be.
                debug_assert!(
                    shape == plan.holder_shape,
                    "two linked committed entries of one key differ: {:?} and {shape:?}",
                    plan.holder_shape
                );
                if let Some(old) = ites[d].target() {
                    self.stage(old);
                }
            }
        }
        // The reverse pass carries the link's sync to the mirrors.
        let reverse = match reread {
            Some(ites) => ites,
            None => self.reverse_pass_syncing(cands, (slot, replaced.0, published.0))?,
        };
        if reverse != expected {
            // Someone changed a candidate meanwhile: abort and put back the
            // value we replaced. A helper may have done either step already.
            self.undo_own(mine, state, slot, published.0, replaced.0)?;
            return Ok(Step::Again(Retry::Changed));
        }
        if self.commit(mine, state)? == Commit::Aborted {
            return Ok(Step::Again(Retry::AbortedByHelper));
        }
        // Committed: only now may what we replaced become reusable. A
        // replaced MIGRATE copy whose source marker is still in place is
        // resolved by the recycler before its slot is reused.
        if let Some(old) = replaced.target() {
            self.stage(old);
        }
        if kind == WriteKind::Put {
            self.op.decided_by = Some(published);
        }
        if kind == WriteKind::Delete && !self.gate.past_deadline() {
            // Unlink the committed tombstone. Best effort: readers treat a
            // linked tombstone as absent and writers replace it, and the
            // DELETE took effect whatever this CAS does.
            if let Ok(old) = self.cas_ite(slot, published.0, published.emptied().0) {
                if old == published.0 {
                    self.stage(mine);
                }
            }
        }
        Ok(Step::Done(existed))
    }
}
