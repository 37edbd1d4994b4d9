//! The membership thread of a node of a replicated store: it renews the
//! node's lease, learns decided views and activates them after the drain,
//! suspects members whose heartbeats stop, proposes views without them,
//! and takes over an instance whose proposer went quiet
//! (docs/replication.md#a-view-change-step-by-step).

use super::agreement::{Ballot, Disks, Proposer};
use super::reach::post_per_node;
use crate::clock::{Clock, HEARTBEAT_OFFSET};
use crate::config::micros;
use crate::fabric::{Fabric, NodeId, RemoteAddr, Verb, WaitBound};
use crate::layout::membership::{MemberState, ViewRecord};
use crate::layout::region;
use crate::replica::{View, Views};
use crate::runtime::periodic::Periodic;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A running membership thread; stops when dropped.
#[derive(Debug)]
pub(crate) struct Membership {
    wish: Arc<Mutex<Option<(MemberState, u64)>>>,
    _thread: Periodic,
}

/// The time bounds of the agreement, in µs.
#[derive(Debug, Clone, Copy)]
#[expect(clippy::struct_field_names, reason = "the unit is part of each name")]
struct Bounds {
    lease_us: u64,
    failure_us: u64,
    /// From a decision observed to its activation: lease + Δ₀ + σ (RP0).
    drain_us: u64,
    /// The period of the rounds: a quarter of the lease or of the failure
    /// timeout, whichever is shorter, so that either spans four renewals
    /// and heartbeat reads, and one late or failed round neither ends the
    /// lease nor raises a suspicion
    /// (docs/replication.md#failure-detection).
    round_us: u64,
}

impl Bounds {
    fn of(config: &crate::Config) -> Bounds {
        Bounds {
            lease_us: micros(config.effective_lease()),
            failure_us: micros(config.failure_timeout),
            drain_us: micros(
                config.effective_lease() + config.landing_bound() + config.max_clock_skew,
            ),
            round_us: micros(config.effective_lease().min(config.failure_timeout) / 4),
        }
    }
}

/// What the thread keeps between rounds.
struct Member {
    me: NodeId,
    fabric: Arc<dyn Fabric>,
    clock: Arc<dyn Clock>,
    views: Arc<Views>,
    bounds: Bounds,
    /// The active view.
    view: ViewRecord,
    /// A decided view and the monotonic time it may be activated.
    pending: Option<(ViewRecord, u64)>,
    /// Per node: its last heartbeat and when it last changed.
    beats: Vec<(u64, u64)>,
    /// Since when a ballot of the current instance has been visible.
    ballot_since: Option<u64>,
    /// This node's proposer of the current instance, once it proposed.
    proposer: Option<Proposer>,
    /// The highest ballot seen in the current instance.
    highest: u64,
    /// This node is not a member of the active view: it serves nothing.
    evicted: bool,
    /// The state and incarnation this node asks to have in the view (a
    /// replacement's join, then its switch to active).
    wish: Arc<Mutex<Option<(MemberState, u64)>>>,
}

impl Membership {
    /// Starts the thread of node `me` in the active view `view`, with a
    /// round every `min(lease, failure_timeout) / 4`.
    pub(crate) fn start(
        me: NodeId,
        config: &crate::Config,
        fabric: Arc<dyn Fabric>,
        clock: Arc<dyn Clock>,
        views: Arc<Views>,
        view: ViewRecord,
    ) -> std::io::Result<Membership> {
        let bounds = Bounds::of(config);
        let now = clock.mono_us();
        let wish = Arc::new(Mutex::new(None));
        let mut member = Member {
            me,
            view,
            wish: Arc::clone(&wish),
            pending: None,
            beats: vec![(0, now); config.nodes],
            ballot_since: None,
            proposer: None,
            highest: 0,
            evicted: false,
            fabric,
            clock,
            views,
            bounds,
        };
        member.fence_lost(&member.view);
        // Serving starts with the first renewal.
        member.views.set_lease_until(0);
        member.round();
        let period = Duration::from_micros(bounds.round_us);
        let thread = Periodic::start("nessie-membership", period, move || member.round())?;
        Ok(Membership {
            wish,
            _thread: thread,
        })
    }

    /// Asks for a view in which this node has `state` and `incarnation`:
    /// the thread proposes it while the active view says otherwise.
    pub(crate) fn wish(&self, state: MemberState, incarnation: u64) {
        *self.wish.lock().unwrap_or_else(PoisonError::into_inner) = Some((state, incarnation));
    }
}

impl Member {
    fn round(&mut self) {
        if self.evicted {
            return;
        }
        let period = Duration::from_micros(self.bounds.round_us);
        // A silent peer holds no verb of this round longer than a period:
        // the membership's posts bound each member's verbs on their own
        // (`reach.rs`), and this bound covers any other verb
        // (docs/replication.md#failure-detection).
        let _wait = WaitBound::until(Instant::now() + period);
        let now = self.clock.mono_us();
        if let Some((_, at)) = &self.pending {
            if now < *at {
                return;
            }
            self.activate(now);
        }
        self.renew(now);
        if self.pending.is_some() || self.evicted {
            return;
        }
        if self.ballot_since.is_some() {
            return;
        }
        let wish = *self.wish.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(wish) = wish.filter(|&w| self.view.members.get(self.me) != Some(&w)) {
            let mut next = self.next_view();
            next.members[self.me] = wish;
            tracing::warn!(node = self.me, epoch = next.epoch, state = ?wish.0, "proposing a view with this node's new state");
            self.propose(next, now);
            return;
        }
        let suspects = self.suspects(now);
        if !suspects.is_empty() {
            let mut next = self.next_view();
            for &s in &suspects {
                next.members[s].0 = MemberState::Lost;
            }
            tracing::warn!(
                node = self.me,
                epoch = next.epoch,
                ?suspects,
                "proposing a view without unresponsive members"
            );
            self.propose(next, now);
        }
    }

    /// The current view with the next epoch.
    fn next_view(&self) -> ViewRecord {
        ViewRecord {
            epoch: self.view.epoch + 1,
            members: self.view.members.clone(),
        }
    }

    /// Reads every disk: learns a decision, renews the lease while no
    /// ballot of the current instance is visible on a majority, and takes
    /// over an instance stuck longer than `failure_timeout`.
    fn renew(&mut self, began: u64) {
        let disks = Disks {
            fabric: self.fabric.as_ref(),
            view: &self.view,
            wait: Duration::from_micros(self.bounds.round_us),
        };
        let reads = disks.read_all(self.view.epoch);
        let majority = disks.majority();
        let good: Vec<_> = reads.iter().filter_map(|(_, r)| r.as_ref()).collect();
        if let Some(decided) = good
            .iter()
            .filter_map(|r| r.decision.clone())
            .filter(|d| d.epoch > self.view.epoch)
            .max_by_key(|d| d.epoch)
        {
            self.learn(decided, began);
            return;
        }
        let ballot = good
            .iter()
            .flat_map(|r| r.blocks.iter().flatten())
            .map(|b| b.mbal)
            .max()
            .unwrap_or(0);
        self.highest = self.highest.max(ballot);
        if ballot == 0 {
            self.ballot_since = None;
            let active = self.view.members.get(self.me).map(|m| m.0) == Some(MemberState::Active);
            if good.len() >= majority && active {
                self.views.set_lease_until(began + self.bounds.lease_us);
            } else if active {
                let unread: Vec<NodeId> = reads
                    .iter()
                    .filter(|(_, r)| r.is_none())
                    .map(|&(d, _)| d)
                    .collect();
                tracing::debug!(
                    node = self.me,
                    epoch = self.view.epoch,
                    ?unread,
                    "lease not renewed: too few disks read"
                );
            }
            return;
        }
        let since = *self.ballot_since.get_or_insert(began);
        if self.clock.mono_us().saturating_sub(since) > self.bounds.failure_us {
            // Its proposer went quiet: finish the instance, adopting any
            // value a majority may have accepted.
            let proposal = self
                .proposer
                .as_ref()
                .map_or_else(|| self.next_view(), |p| p.inp.clone());
            self.propose(proposal, began);
        }
    }

    /// Runs one ballot of the current instance for `proposal`.
    fn propose(&mut self, proposal: ViewRecord, now: u64) {
        let instance = self.view.epoch;
        let me = self.me;
        let proposer = self.proposer.get_or_insert(Proposer {
            me,
            instance,
            bal: 0,
            inp: proposal,
        });
        let b = proposer.ballot_above(self.highest, self.view.members.len());
        self.highest = b;
        let disks = Disks {
            fabric: self.fabric.as_ref(),
            view: &self.view,
            wait: Duration::from_micros(self.bounds.round_us),
        };
        match proposer.run(&disks, b) {
            Ballot::Decided(decided) => {
                disks.write_decision(&decided);
                tracing::warn!(node = me, epoch = decided.epoch, members = ?decided.members, "view decided");
                self.learn(decided, now);
            }
            Ballot::Preempted { mbal } => self.highest = self.highest.max(mbal),
            Ballot::NoMajority => {}
        }
    }

    /// A decided view: operations stop now and resume in it after the
    /// drain (docs/replication.md#rp0).
    fn learn(&mut self, decided: ViewRecord, now: u64) {
        let wished = self
            .wish
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        if decided.members.get(self.me).map(|m| m.0) == Some(MemberState::Lost) && !wished {
            tracing::error!(
                node = self.me,
                epoch = decided.epoch,
                "this node is not a member of the new view; it serves nothing from now on"
            );
            self.views.set_lease_until(0);
            self.evicted = true;
            return;
        }
        self.views.begin_change(decided.epoch);
        self.views.set_lease_until(0);
        self.fence_lost(&decided);
        self.readmit_members(&decided);
        self.pending = Some((decided, now + self.bounds.drain_us));
    }

    /// Fences, on the fabric, every other node `view` names lost: a zombie
    /// of it can no longer reach this node's memory, and verbs to it fail
    /// at once (docs/replication.md#fencing-a-zombie-of-the-lost-node).
    /// Done at the decision: from then on no operation starts until the
    /// view is active, and none of the new view needs the node; one still
    /// under way that needs it ends with an unknown outcome, as it would
    /// at the node's loss.
    fn fence_lost(&self, view: &ViewRecord) {
        for (node, member) in view.members.iter().enumerate() {
            if member.0 == MemberState::Lost && node != self.me {
                self.fabric.fence_node(node);
            }
        }
    }

    /// Lifts, on the fabric, the fence of every other node `view` names a
    /// member (a replacement restoring, once fenced): its replacement's
    /// memory is open by now, which it opens before it asks for the view
    /// (docs/replication.md#joining-after-start-up). Nodes never fenced
    /// are left as they are.
    fn readmit_members(&self, view: &ViewRecord) {
        for (node, member) in view.members.iter().enumerate() {
            if member.0 != MemberState::Lost && node != self.me {
                self.fabric.readmit_node(node);
            }
        }
    }

    fn activate(&mut self, now: u64) {
        let Some((decided, _)) = self.pending.take() else {
            return;
        };
        let states = decided.members.iter().map(|m| m.0).collect();
        self.views
            .activate(View::with_states(decided.epoch, states));
        tracing::warn!(node = self.me, epoch = decided.epoch, members = ?decided.members, "view active");
        self.view = decided;
        self.proposer = None;
        self.highest = 0;
        self.ballot_since = None;
        for b in &mut self.beats {
            b.1 = now;
        }
    }

    /// Members whose heartbeat has not moved for `failure_timeout`.
    fn suspects(&mut self, now: u64) -> Vec<NodeId> {
        let others: Vec<NodeId> = self.view.disks().filter(|&n| n != self.me).collect();
        let mut words = vec![[0u8; 8]; others.len()];
        let mut batch: Vec<Verb<'_>> = others
            .iter()
            .zip(words.iter_mut())
            .map(|(&n, w)| Verb::Read {
                addr: RemoteAddr::new(n, region::META, HEARTBEAT_OFFSET),
                buf: &mut w[..],
            })
            .collect();
        let read = post_per_node(
            self.fabric.as_ref(),
            &mut batch,
            Duration::from_micros(self.bounds.round_us),
        );
        drop(batch);
        let mut out = Vec::new();
        for (i, &n) in others.iter().enumerate() {
            let beat = read[i].then(|| u64::from_le_bytes(words[i]));
            let (last, changed) = &mut self.beats[n];
            if let Some(beat) = beat.filter(|b| b != last) {
                *last = beat;
                *changed = now;
            } else if now.saturating_sub(*changed) > self.bounds.failure_us {
                out.push(n);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_fabric::Fences;
    use super::*;
    use crate::clock::WallClock;
    use crate::data::Geometry;
    use crate::fabric::{LocalFabric, RegionSpec};
    use crate::layout::membership::{region_bytes, MEMBERSHIP};

    /// Monotonic and wall time that move only when a test sets them.
    #[derive(Debug, Default)]
    struct SetClock(std::sync::atomic::AtomicU64);

    impl SetClock {
        /// A clock 10 s past its origin (so that earlier times exist),
        /// which the members given it share.
        fn shared_by(members: &mut [&mut Member]) -> Arc<SetClock> {
            let clock = Arc::new(SetClock::default());
            clock.sleep(Duration::from_secs(10));
            for m in members {
                m.clock = Arc::clone(&clock) as Arc<dyn Clock>;
            }
            clock
        }
    }

    impl Clock for SetClock {
        fn now_us(&self) -> u64 {
            self.mono_us()
        }
        fn mono_us(&self) -> u64 {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
        fn sleep(&self, d: Duration) {
            self.0
                .fetch_add(micros(d), std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// The MEMBERSHIP regions of three nodes, and the word of their META
    /// regions that holds the heartbeat, in one memory.
    fn disks() -> Arc<LocalFabric> {
        let specs = [
            RegionSpec {
                id: MEMBERSHIP,
                len: region_bytes(3),
            },
            RegionSpec {
                id: region::META,
                len: HEARTBEAT_OFFSET + 8,
            },
        ];
        Arc::new(LocalFabric::new(3, &specs).unwrap())
    }

    fn member(me: NodeId, memory: &Arc<LocalFabric>) -> (Member, Arc<Fences>) {
        let config = crate::Config {
            nodes: 3,
            replicas: 2,
            ..crate::Config::default()
        };
        let fences = Arc::new(Fences::over(memory));
        let member = Member {
            me,
            fabric: Arc::clone(&fences) as Arc<dyn Fabric>,
            clock: Arc::new(WallClock::default()),
            views: Arc::new(Views::new(Geometry::new(&config))),
            bounds: Bounds {
                lease_us: 1_000_000,
                failure_us: 1_000_000,
                drain_us: 1_000_000,
                round_us: 250_000,
            },
            view: ViewRecord::first(3),
            pending: None,
            beats: vec![(0, 0); 3],
            ballot_since: None,
            proposer: None,
            highest: 0,
            evicted: false,
            wish: Arc::new(Mutex::new(None)),
        };
        (member, fences)
    }

    /// RP0's drain is the lease, the landing bound and the skew bound,
    /// from the configuration's own figures.
    #[test]
    fn the_drain_outlasts_the_lease_by_the_landing_and_skew_bounds() {
        let config = crate::Config {
            nodes: 3,
            replicas: 2,
            lease: Duration::from_millis(1500),
            failure_timeout: Duration::from_millis(400),
            ..crate::Config::default()
        };
        let b = Bounds::of(&config);
        assert_eq!(b.lease_us, 1_500_000);
        assert_eq!(b.failure_us, 400_000);
        assert_eq!(b.round_us, 100_000, "a quarter of the failure timeout");
        assert_eq!(
            b.drain_us,
            1_500_000 + micros(config.landing_bound()) + micros(config.max_clock_skew)
        );
    }

    /// A decided view is refused to operations from the decision and
    /// becomes active only once the drain has passed, not a microsecond
    /// before (docs/replication.md#rp0).
    #[test]
    fn a_decided_view_activates_only_after_the_drain() {
        let memory = disks();
        let (mut m, _) = member(0, &memory);
        let clock = SetClock::shared_by(&mut [&mut m]);
        let first = m.view.epoch;
        let mut next = m.next_view();
        next.members[2].0 = MemberState::Lost;
        let decided_at = clock.mono_us();
        m.propose(next, decided_at);
        assert!(m.pending.is_some(), "decided");
        assert!(
            m.views.check_serving(decided_at).is_err(),
            "refused meanwhile"
        );
        // A wish during the drain waits for it: no new proposal, which
        // would learn the decided view again and restart the drain.
        *m.wish.lock().unwrap() = Some((MemberState::Active, 9));
        clock.sleep(Duration::from_micros(m.bounds.drain_us / 2));
        m.round();
        *m.wish.lock().unwrap() = None;
        clock.sleep(Duration::from_micros(
            m.bounds.drain_us - m.bounds.drain_us / 2 - 1,
        ));
        m.round();
        assert_eq!(m.view.epoch, first, "not active a microsecond early");
        assert!(m.pending.is_some());
        clock.sleep(Duration::from_micros(1));
        m.round();
        assert_eq!(m.view.epoch, first + 1, "active once the drain has passed");
        assert!(m.pending.is_none());
    }

    /// A renewal extends the lease, from the round's start, only for an
    /// active member that read a majority of the disks: not for a node cut
    /// off from the others, nor for one still restoring
    /// (docs/replication.md#views-leases-and-the-drain).
    #[test]
    fn a_lease_is_renewed_only_by_an_active_member_that_reads_a_majority() {
        let memory = disks();
        let (mut m, fences) = member(0, &memory);
        m.views.set_lease_until(0);
        *fences.cut.lock().unwrap() = vec![1, 2];
        m.renew(100);
        assert_eq!(m.views.lease_until(), 0, "one disk of three");
        *fences.cut.lock().unwrap() = vec![2];
        m.renew(100);
        assert_eq!(
            m.views.lease_until(),
            100 + m.bounds.lease_us,
            "two of three"
        );
        m.views.set_lease_until(0);
        m.view.members[0].0 = MemberState::Restoring;
        m.renew(200);
        assert_eq!(
            m.views.lease_until(),
            0,
            "a restoring member serves nothing"
        );
    }

    /// A silent member uses up a round's wait bound inside its batches;
    /// the live members' disks and heartbeats are read all the same: the
    /// lease is renewed, and the view proposed is without the silent member
    /// only. The regression of a false eviction in the `nftables`
    /// partition test, where the retry of a live member's READ found the
    /// round's bound spent, the member looked as silent as the cut-off one,
    /// and a view without both was decided.
    #[test]
    fn a_silent_member_starves_neither_the_renewal_nor_the_others_heartbeats() {
        let memory = disks();
        let (mut m, fences) = member(0, &memory);
        let clock = SetClock::shared_by(&mut [&mut m]);
        m.bounds.round_us = 20_000;
        m.beats = vec![(0, clock.mono_us()); 3];
        *fences.silent.lock().unwrap() = vec![2];
        let beat = |b: u64| {
            memory
                .write(
                    RemoteAddr::new(1, region::META, HEARTBEAT_OFFSET),
                    &b.to_le_bytes(),
                )
                .unwrap();
        };
        m.views.set_lease_until(0);
        beat(1);
        m.round();
        assert_eq!(
            m.views.lease_until(),
            clock.mono_us() + m.bounds.lease_us,
            "renewed with two disks of three"
        );
        clock.sleep(Duration::from_micros(m.bounds.failure_us + 1));
        beat(2);
        m.round();
        let (proposed, _) = m.pending.as_ref().expect("a view without node 2");
        assert_eq!(
            proposed.members.iter().map(|m| m.0).collect::<Vec<_>>(),
            [MemberState::Active, MemberState::Active, MemberState::Lost]
        );
    }

    /// A round is a quarter of the lease or of the failure timeout,
    /// whichever is shorter.
    #[test]
    fn a_round_is_a_quarter_of_the_shorter_of_lease_and_failure_timeout() {
        let config = crate::Config {
            nodes: 3,
            replicas: 2,
            lease: Duration::from_millis(800),
            failure_timeout: Duration::from_secs(4),
            ..crate::Config::default()
        };
        assert_eq!(
            Bounds::of(&config).round_us,
            micros(config.effective_lease()) / 4
        );
    }

    /// An instance whose proposer went quiet is finished by another member
    /// once its ballot has been visible for longer than `failure_timeout`,
    /// not before (docs/replication.md#failure-detection).
    #[test]
    fn a_stuck_instance_is_taken_over_after_the_failure_timeout_only() {
        let memory = disks();
        let (mut m0, cut0) = member(0, &memory);
        let (mut m1, _) = member(1, &memory);
        let clock = SetClock::shared_by(&mut [&mut m0, &mut m1]);
        // Node 0, cut off, leaves a ballot on its own disk only.
        *cut0.cut.lock().unwrap() = vec![1, 2];
        let mut next = m0.next_view();
        next.members[2].0 = MemberState::Lost;
        m0.propose(next, clock.mono_us());
        assert!(m0.pending.is_none(), "no majority");
        m1.renew(clock.mono_us());
        assert!(m1.pending.is_none(), "not at once");
        clock.sleep(Duration::from_micros(m1.bounds.failure_us));
        m1.renew(clock.mono_us());
        assert!(m1.pending.is_none(), "not at the timeout itself");
        clock.sleep(Duration::from_micros(1));
        m1.renew(clock.mono_us());
        // Node 0 never got past its ballot's first phase: nothing was
        // accepted, so node 1 decides a view of its own.
        let decided = &m1.pending.as_ref().expect("taken over and decided").0;
        assert_eq!(decided.epoch, m1.view.epoch + 1);
    }

    /// A member is suspected once its heartbeat has not moved for longer
    /// than `failure_timeout`, not at the timeout itself.
    #[test]
    fn a_silent_member_is_suspected_after_the_failure_timeout_only() {
        let memory = disks();
        let (mut m, _) = member(0, &memory);
        let t0 = 10_000_000;
        m.beats = vec![(0, t0); 3];
        assert!(m.suspects(t0 + m.bounds.failure_us).is_empty());
        assert_eq!(m.suspects(t0 + m.bounds.failure_us + 1), [1, 2]);
    }

    /// A decided view that names a fenced node a member again (its
    /// replacement restoring) lifts the fence; lost nodes and this node
    /// are never readmitted.
    #[test]
    fn a_view_naming_a_node_a_member_again_readmits_it() {
        let memory = disks();
        let (mut m, fences) = member(0, &memory);
        let mut next = m.next_view();
        next.members[1].0 = MemberState::Lost;
        next.members[2].0 = MemberState::Restoring;
        m.learn(next, 0);
        assert_eq!(*fences.fenced.lock().unwrap(), [1]);
        assert_eq!(*fences.readmitted.lock().unwrap(), [2]);
    }

    #[test]
    fn members_fence_the_node_a_decided_view_names_lost_and_it_fences_nothing() {
        let memory = disks();
        let mut members: Vec<_> = (0..3).map(|me| member(me, &memory)).collect();
        let fenced = |m: &(Member, Arc<Fences>)| m.1.fenced.lock().unwrap().clone();
        // Renewals in an all-active view fence nothing.
        for (m, _) in &mut members {
            m.renew(0);
        }
        assert!(members.iter().all(|m| fenced(m).is_empty()));
        let mut next = members[0].0.next_view();
        next.members[2].0 = MemberState::Lost;
        members[0].0.propose(next, 0);
        assert!(members[0].0.pending.is_some(), "node 0 decided the view");
        assert_eq!(fenced(&members[0]), [2], "the proposer fences node 2");
        members[1].0.renew(0);
        assert!(members[1].0.pending.is_some(), "node 1 learnt the view");
        assert_eq!(fenced(&members[1]), [2], "a member that learns it too");
        // Node 2, alive after all, learns that it was removed: it stops
        // serving and fences no one.
        members[2].0.renew(0);
        assert!(members[2].0.evicted);
        assert!(fenced(&members[2]).is_empty());
    }
}
