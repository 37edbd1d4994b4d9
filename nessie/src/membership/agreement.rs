//! One instance of Disk Paxos whose disks are the members' MEMBERSHIP
//! regions (docs/replication.md#views-leases-and-the-drain): instance e
//! decides view e + 1 among the disks of view e.

use super::reach::post_per_node;
use crate::fabric::{Fabric, NodeId, RemoteAddr, Verb};
use crate::layout::membership::{
    block_offset, block_words, parity_offset, view_words, Block, ViewRecord, DECISION_OFFSET,
    INCARNATION_OFFSET, MEMBERSHIP,
};
use crate::layout::WORD;
use std::time::Duration;

/// What one disk showed in one READ of it.
#[derive(Debug, Clone)]
pub(crate) struct DiskRead {
    /// The decided view it records, if any (M4).
    pub(crate) decision: Option<ViewRecord>,
    /// The blocks of the instance read, per proposer (blocks of other
    /// instances read as absent).
    pub(crate) blocks: Vec<Option<Block>>,
}

/// The members' disks as view `view` names them.
pub(crate) struct Disks<'a> {
    pub(crate) fabric: &'a dyn Fabric,
    pub(crate) view: &'a ViewRecord,
    /// How long a verb waits for one disk (a round's period).
    pub(crate) wait: Duration,
}

impl Disks<'_> {
    fn nodes(&self) -> usize {
        self.view.members.len()
    }

    /// A majority of the view's disks.
    pub(crate) fn majority(&self) -> usize {
        self.view.disks().count() / 2 + 1
    }

    /// Reads every disk: its incarnation, its decision and the blocks of
    /// `instance`. `None` for a disk that failed: a verb error, a torn
    /// block, or an incarnation other than the view's, which is another
    /// memory than the one the view counts (M3).
    pub(crate) fn read_all(&self, instance: u64) -> Vec<(NodeId, Option<DiskRead>)> {
        let n = self.nodes();
        let head_len = (1 + view_words(n)) * WORD;
        let blocks_len = n * block_words(n) * WORD;
        let disks: Vec<NodeId> = self.view.disks().collect();
        let mut bufs: Vec<(Vec<u8>, Vec<u8>)> = disks
            .iter()
            .map(|_| (vec![0u8; head_len], vec![0u8; blocks_len]))
            .collect();
        // Two READs per disk: its head and the instance's blocks.
        let mut batch: Vec<Verb<'_>> = Vec::with_capacity(2 * disks.len());
        for (&d, (head, blocks)) in disks.iter().zip(bufs.iter_mut()) {
            batch.push(Verb::Read {
                addr: RemoteAddr::new(d, MEMBERSHIP, INCARNATION_OFFSET),
                buf: head,
            });
            batch.push(Verb::Read {
                addr: RemoteAddr::new(d, MEMBERSHIP, parity_offset(n, instance % 2)),
                buf: blocks,
            });
        }
        let ok = post_per_node(self.fabric, &mut batch, self.wait);
        drop(batch);
        disks
            .iter()
            .zip(bufs)
            .zip(ok)
            .map(|((&d, (head, blocks)), ok)| {
                let read = ok
                    .then(|| self.parse(d, instance, &head, &blocks))
                    .flatten();
                (d, read)
            })
            .collect()
    }

    fn parse(&self, disk: NodeId, instance: u64, head: &[u8], blocks: &[u8]) -> Option<DiskRead> {
        let n = self.nodes();
        let incarnation = crate::layout::read_word(head, 0);
        if incarnation != self.view.members[disk].1 {
            return None;
        }
        let decision = ViewRecord::decode(&head[WORD..], n);
        let size = block_words(n) * WORD;
        let blocks = blocks
            .chunks_exact(size)
            .map(|b| Block::decode(b, n).map(|b| b.filter(|b| b.instance == instance)))
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        Some(DiskRead { decision, blocks })
    }

    /// Writes `block` as proposer `me`'s to every disk; the disks it
    /// reached.
    pub(crate) fn write_block(&self, me: usize, block: &Block) -> Vec<NodeId> {
        let bytes = block.encode();
        let at = block_offset(self.nodes(), block.instance, me);
        self.write_everywhere(at, &bytes)
    }

    /// Writes the decided view into every reachable disk's decision record
    /// (M4).
    pub(crate) fn write_decision(&self, decided: &ViewRecord) {
        self.write_everywhere(DECISION_OFFSET, &decided.encode());
    }

    fn write_everywhere(&self, offset: u64, bytes: &[u8]) -> Vec<NodeId> {
        let disks: Vec<NodeId> = self.view.disks().collect();
        let mut batch: Vec<Verb<'_>> = disks
            .iter()
            .map(|&d| Verb::Write {
                addr: RemoteAddr::new(d, MEMBERSHIP, offset),
                data: bytes,
            })
            .collect();
        let done = post_per_node(self.fabric, &mut batch, self.wait);
        disks
            .into_iter()
            .zip(done)
            .filter_map(|(d, ok)| ok.then_some(d))
            .collect()
    }
}

/// How a ballot ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ballot {
    /// A majority accepted this view.
    Decided(ViewRecord),
    /// A higher ballot was seen: retry above it, or learn its outcome.
    Preempted {
        /// The highest ballot seen.
        mbal: u64,
    },
    /// Fewer than a majority of disks answered.
    NoMajority,
}

/// A proposer's memory of one instance: the value it accepted last.
#[derive(Debug, Clone)]
pub(crate) struct Proposer {
    /// Its index: its block on every disk.
    pub(crate) me: usize,
    /// The instance.
    pub(crate) instance: u64,
    /// Ballot and value last accepted (0: none).
    pub(crate) bal: u64,
    pub(crate) inp: ViewRecord,
}

impl Proposer {
    /// A ballot above `above` that only this proposer uses.
    pub(crate) fn ballot_above(&self, above: u64, members: usize) -> u64 {
        let m = members as u64;
        (above / m + 1) * m + self.me as u64 + 1
    }

    /// One ballot `b`: phase 1 (announce `b`, read every block, adopt the
    /// value of the highest accepted ballot), phase 2 (accept, read again).
    pub(crate) fn run(&mut self, disks: &Disks<'_>, b: u64) -> Ballot {
        let phase1 = Block {
            instance: self.instance,
            mbal: b,
            bal: self.bal,
            inp: self.inp.clone(),
        };
        let (reads, highest) = match self.phase(disks, &phase1) {
            Ok(r) => r,
            Err(e) => return e,
        };
        // Adopt the value of the highest accepted ballot, our own included.
        if let Some(best) = reads
            .iter()
            .flat_map(|r| r.blocks.iter().flatten())
            .filter(|blk| blk.bal > 0)
            .max_by_key(|blk| blk.bal)
        {
            self.inp = best.inp.clone();
        }
        debug_assert!(highest <= b);
        self.bal = b;
        let phase2 = Block {
            instance: self.instance,
            mbal: b,
            bal: b,
            inp: self.inp.clone(),
        };
        match self.phase(disks, &phase2) {
            Ok(_) => Ballot::Decided(self.inp.clone()),
            Err(e) => e,
        }
    }

    /// WRITE `block` everywhere, then READ every disk: the reads of a
    /// majority that saw no ballot above ours, and the highest seen.
    fn phase(&self, disks: &Disks<'_>, block: &Block) -> Result<(Vec<DiskRead>, u64), Ballot> {
        let written = disks.write_block(self.me, block);
        let reads: Vec<DiskRead> = disks
            .read_all(self.instance)
            .into_iter()
            .filter(|(d, _)| written.contains(d))
            .filter_map(|(_, r)| r)
            .collect();
        if reads.len() < disks.majority() {
            return Err(Ballot::NoMajority);
        }
        let highest = reads
            .iter()
            .flat_map(|r| r.blocks.iter().flatten())
            .map(|blk| blk.mbal)
            .max()
            .unwrap_or(0);
        if highest > block.mbal {
            return Err(Ballot::Preempted { mbal: highest });
        }
        Ok((reads, highest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{FabricError, LocalFabric, RegionSpec};
    use crate::layout::membership::{region_bytes, MemberState};
    use std::sync::Arc;

    fn disks_of(nodes: usize) -> Arc<LocalFabric> {
        let spec = RegionSpec {
            id: MEMBERSHIP,
            len: region_bytes(nodes),
        };
        Arc::new(LocalFabric::new(nodes, &[spec]).unwrap())
    }

    fn without(view: &ViewRecord, node: usize) -> ViewRecord {
        let mut next = view.clone();
        next.epoch += 1;
        next.members[node].0 = MemberState::Lost;
        next
    }

    #[test]
    fn racing_proposers_decide_one_view() {
        for round in 0..40 {
            let fabric = disks_of(3);
            let view = ViewRecord::first(3);
            let decided: Vec<Option<ViewRecord>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..3)
                    .map(|me| {
                        let (fabric, view) = (Arc::clone(&fabric), view.clone());
                        s.spawn(move || {
                            let disks = Disks {
                                fabric: fabric.as_ref(),
                                view: &view,
                                wait: Duration::from_secs(1),
                            };
                            let mut p = Proposer {
                                me,
                                instance: 0,
                                bal: 0,
                                inp: without(&view, (me + 1 + round % 2) % 3),
                            };
                            let mut above = 0;
                            for _ in 0..50 {
                                match p.run(&disks, p.ballot_above(above, 3)) {
                                    Ballot::Decided(v) => return Some(v),
                                    Ballot::Preempted { mbal } => above = mbal,
                                    Ballot::NoMajority => return None,
                                }
                                std::thread::yield_now();
                            }
                            None
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let values: Vec<&ViewRecord> = decided.iter().flatten().collect();
            assert!(!values.is_empty(), "round {round}: nobody decided");
            assert!(
                values.iter().all(|v| *v == values[0]),
                "round {round}: two views decided for one epoch: {values:?}"
            );
        }
    }

    #[test]
    fn a_later_proposer_adopts_a_decided_value_and_a_minority_decides_nothing() {
        let fabric = disks_of(3);
        let view = ViewRecord::first(3);
        let disks = Disks {
            fabric: fabric.as_ref(),
            view: &view,
            wait: Duration::from_secs(1),
        };
        let mut first = Proposer {
            me: 0,
            instance: 0,
            bal: 0,
            inp: without(&view, 2),
        };
        let chosen = first.run(&disks, first.ballot_above(0, 3));
        assert_eq!(chosen, Ballot::Decided(without(&view, 2)));
        let mut second = Proposer {
            me: 1,
            instance: 0,
            bal: 0,
            inp: without(&view, 0),
        };
        assert_eq!(second.run(&disks, second.ballot_above(5, 3)), chosen);
        // A memory that comes back with another incarnation is another
        // disk (M3): with two of three such, there is no majority.
        for d in [1, 2] {
            fabric
                .write(
                    RemoteAddr::new(d, MEMBERSHIP, INCARNATION_OFFSET),
                    &7u64.to_le_bytes(),
                )
                .unwrap();
        }
        let mut third = Proposer {
            me: 2,
            instance: 0,
            bal: 0,
            inp: without(&view, 1),
        };
        assert_eq!(
            third.run(&disks, third.ballot_above(20, 3)),
            Ballot::NoMajority
        );
    }

    /// Instance after instance on the same disks: a later proposer of
    /// each adopts what the first decided (its blocks are found at the
    /// instance's parity, not the previous instance's), and the decision
    /// record reads back whole.
    #[test]
    fn instances_follow_one_another_on_the_same_disks() {
        let fabric = disks_of(3);
        let mut view = ViewRecord::first(3);
        for instance in 0..4u64 {
            let disks = Disks {
                fabric: fabric.as_ref(),
                view: &view,
                wait: Duration::from_secs(1),
            };
            let lost = (instance % 3) as usize;
            let wanted = {
                let mut v = view.clone();
                v.epoch += 1;
                v.members[lost].0 = MemberState::Lost;
                v
            };
            let mut first = Proposer {
                me: (lost + 1) % 3,
                instance,
                bal: 0,
                inp: wanted.clone(),
            };
            let chosen = first.run(&disks, first.ballot_above(0, 3));
            assert_eq!(
                chosen,
                Ballot::Decided(wanted.clone()),
                "instance {instance}"
            );
            let mut other = wanted.clone();
            other.members[(lost + 2) % 3].0 = MemberState::Restoring;
            let mut second = Proposer {
                me: (lost + 2) % 3,
                instance,
                bal: 0,
                inp: other,
            };
            let again = second.run(&disks, second.ballot_above(9, 3));
            assert_eq!(
                again, chosen,
                "instance {instance}: the decided view is adopted"
            );
            disks.write_decision(&wanted);
            for (_, read) in disks.read_all(instance + 1) {
                let read = read.expect("every disk answers");
                assert_eq!(read.decision.as_ref(), Some(&wanted));
                assert!(
                    read.blocks.iter().all(Option::is_none),
                    "no block of the next instance yet"
                );
            }
            view = wanted;
            view.members[lost].0 = MemberState::Active;
        }
    }

    /// Five disks: three are a majority, two are not.
    #[test]
    fn a_majority_of_five_disks_is_three() {
        let fabric = disks_of(5);
        let view = ViewRecord::first(5);
        let disks = Disks {
            fabric: fabric.as_ref(),
            view: &view,
            wait: Duration::from_secs(1),
        };
        assert_eq!(disks.majority(), 3);
        let gone = |d: usize| {
            fabric
                .write(
                    RemoteAddr::new(d, MEMBERSHIP, INCARNATION_OFFSET),
                    &9u64.to_le_bytes(),
                )
                .unwrap();
        };
        gone(3);
        gone(4);
        let mut p = Proposer {
            me: 0,
            instance: 0,
            bal: 0,
            inp: without(&view, 4),
        };
        assert_eq!(
            p.run(&disks, p.ballot_above(0, 5)),
            Ballot::Decided(without(&view, 4))
        );
        gone(2);
        let mut q = Proposer {
            me: 1,
            instance: 1,
            bal: 0,
            inp: without(&view, 3),
        };
        assert_eq!(q.run(&disks, q.ballot_above(0, 5)), Ballot::NoMajority);
    }

    /// Disks whose READs fail (their WRITEs land: a connection reset
    /// after the write) count toward no majority, though a READ batch
    /// over every disk fails as a whole.
    #[test]
    fn disks_that_cannot_be_read_count_toward_no_majority() {
        #[derive(Debug)]
        struct Unreadable {
            memory: Arc<LocalFabric>,
            from: NodeId,
        }
        impl Fabric for Unreadable {
            fn nodes(&self) -> usize {
                self.memory.nodes()
            }
            fn region_len(&self, node: NodeId, region: crate::fabric::RegionId) -> Option<u64> {
                self.memory.region_len(node, region)
            }
            fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
                if addr.node >= self.from {
                    return Err(FabricError::Lost { node: addr.node });
                }
                self.memory.read(addr, buf)
            }
            fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
                self.memory.write(addr, data)
            }
            fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
                self.memory.cas(addr, expected, new)
            }
        }
        let view = ViewRecord::first(3);
        for (from, decides) in [(2, true), (1, false)] {
            let fabric = Unreadable {
                memory: disks_of(3),
                from,
            };
            let disks = Disks {
                fabric: &fabric,
                view: &view,
                wait: Duration::from_secs(1),
            };
            let mut p = Proposer {
                me: 0,
                instance: 0,
                bal: 0,
                inp: without(&view, 2),
            };
            let ballot = p.run(&disks, p.ballot_above(0, 3));
            assert_eq!(ballot == Ballot::NoMajority, !decides, "{ballot:?}");
        }
    }

    /// Each proposer's ballots are its own (no two proposers share one)
    /// and above any ballot it has seen, by less than two rounds.
    #[test]
    fn ballots_are_each_proposers_own_and_above_what_was_seen() {
        let view = ViewRecord::first(5);
        for members in [3usize, 5] {
            for above in [0u64, 1, 4, 5, 6, 97, 1000] {
                let mut ballots = std::collections::HashSet::new();
                for me in 0..members {
                    let p = Proposer {
                        me,
                        instance: 0,
                        bal: 0,
                        inp: view.clone(),
                    };
                    let b = p.ballot_above(above, members);
                    assert!(b > above, "{b} is not above {above}");
                    assert!(b <= above + 2 * members as u64, "{b} is far above {above}");
                    assert_eq!((b - 1) % members as u64, me as u64, "{b} is not {me}'s");
                    ballots.insert(b);
                }
                assert_eq!(ballots.len(), members, "proposers share a ballot");
            }
        }
    }

    /// A value a proposer only announced (phase 1, accepted by no ballot)
    /// is not adopted by the next: it decides its own.
    #[test]
    fn a_value_only_announced_is_not_adopted() {
        let fabric = disks_of(3);
        let view = ViewRecord::first(3);
        let disks = Disks {
            fabric: fabric.as_ref(),
            view: &view,
            wait: Duration::from_secs(1),
        };
        let announced = Block {
            instance: 0,
            mbal: 2,
            bal: 0,
            inp: without(&view, 1),
        };
        // Announced by the proposer whose block is read last.
        assert_eq!(disks.write_block(2, &announced).len(), 3);
        let mut p = Proposer {
            me: 0,
            instance: 0,
            bal: 0,
            inp: without(&view, 0),
        };
        assert_eq!(
            p.run(&disks, p.ballot_above(2, 3)),
            Ballot::Decided(without(&view, 0))
        );
    }
}
