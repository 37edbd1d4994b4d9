//! The view: which nodes serve, and so which replica of each share is its
//! primary and which are its mirrors
//! (docs/replication.md#views-leases-and-the-drain).

use crate::data::Geometry;
use crate::fabric::{NodeId, RemoteAddr};
use crate::layout::membership::MemberState;
use crate::layout::region;
use crate::Error;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// One address per replica of a share, inline for the replica counts
/// allowed.
pub(crate) type PerReplica<T> = SmallVec<[T; region::MAX_REPLICAS]>;

/// A view of the cluster: its epoch and each node's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    epoch: u64,
    states: Vec<MemberState>,
}

impl View {
    /// The first view of a cluster of `nodes`: every node serves.
    #[must_use]
    pub fn first(nodes: usize) -> View {
        View {
            epoch: 0,
            states: vec![MemberState::Active; nodes],
        }
    }

    /// A view of `epoch` with these per-node states.
    #[must_use]
    pub fn with_states(epoch: u64, states: Vec<MemberState>) -> View {
        View { epoch, states }
    }

    /// The next view, with `node` lost.
    #[must_use]
    pub fn without(&self, node: NodeId) -> View {
        self.next_with(node, MemberState::Lost)
    }

    /// The next view, with `node` in `state`.
    #[must_use]
    pub fn next_with(&self, node: NodeId, state: MemberState) -> View {
        let mut next = self.clone();
        next.epoch += 1;
        if let Some(s) = next.states.get_mut(node) {
            *s = state;
        }
        next
    }

    /// The view's number; each change adds one.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// `node`'s state in this view.
    #[must_use]
    pub fn state(&self, node: NodeId) -> MemberState {
        self.states.get(node).copied().unwrap_or(MemberState::Lost)
    }

    /// Whether `node` is lost in this view.
    #[must_use]
    pub fn is_lost(&self, node: NodeId) -> bool {
        self.state(node) == MemberState::Lost
    }

    /// The lost nodes.
    pub fn lost(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.states.len()).filter(|&n| self.is_lost(n))
    }

    /// Whether every node is active.
    #[must_use]
    pub fn all_active(&self) -> bool {
        self.states.iter().all(|&s| s == MemberState::Active)
    }

    /// The replica that serves as share `share`'s primary: the first of its
    /// replicas, in order, on an active node
    /// (docs/replication.md#placement); `None` when there is none.
    #[must_use]
    pub fn primary_replica(&self, share: NodeId, geometry: &Geometry) -> Option<usize> {
        (0..geometry.replicas())
            .find(|&j| self.state((share + j) % geometry.nodes()) == MemberState::Active)
    }
}

/// The view a process serves in, shared by its clients, its recycler and
/// the fabric that routes their verbs.
#[derive(Debug)]
pub struct Views {
    geometry: Geometry,
    /// Whether the current view has a node that is not active: while not,
    /// a verb's address needs no routing.
    any_lost: AtomicBool,
    /// The epoch of a view decided but not yet active (0: none).
    changing_to: AtomicU64,
    /// Monotonic µs until which the node's lease lasts (`u64::MAX` where no
    /// membership runs: a single process, or one replica).
    lease_until: AtomicU64,
    current: Mutex<Arc<View>>,
}

impl Views {
    /// The first view of a cluster with tables of `geometry`.
    #[must_use]
    pub fn new(geometry: Geometry) -> Views {
        Views {
            current: Mutex::new(Arc::new(View::first(geometry.nodes()))),
            geometry,
            any_lost: AtomicBool::new(false),
            changing_to: AtomicU64::new(0),
            lease_until: AtomicU64::new(u64::MAX),
        }
    }

    /// The node's lease now lasts until monotonic time `until_us`.
    pub(crate) fn set_lease_until(&self, until_us: u64) {
        self.lease_until.store(until_us, Ordering::Release);
    }

    /// Monotonic µs at which the node's lease ends: no operation issues a
    /// CAS or answers after it (docs/replication.md#rp0).
    pub(crate) fn lease_until(&self) -> u64 {
        self.lease_until.load(Ordering::Acquire)
    }

    /// A view of epoch `epoch` was decided: operations are refused with
    /// [`Error::ViewChanging`] until it is activated, while those under
    /// way drain (docs/replication.md#rp0).
    pub fn begin_change(&self, epoch: u64) {
        self.changing_to.store(epoch, Ordering::Release);
    }

    /// Whether an operation may start at monotonic time `now_us`: not
    /// between a decision and its activation ([`Error::ViewChanging`]), and
    /// only under a lease ([`Error::NoQuorum`]).
    ///
    /// # Errors
    /// [`Error::ViewChanging`], [`Error::NoQuorum`].
    pub fn check_serving(&self, now_us: u64) -> Result<(), Error> {
        match self.changing_to.load(Ordering::Acquire) {
            0 if now_us < self.lease_until() => Ok(()),
            0 => Err(Error::NoQuorum {
                epoch: self.current().epoch(),
            }),
            epoch => Err(Error::ViewChanging { epoch }),
        }
    }

    /// The current view.
    #[must_use]
    pub fn current(&self) -> Arc<View> {
        Arc::clone(&self.current.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Makes `view` current: operations from now on run in it. The caller
    /// has let every operation of the previous view drain
    /// (docs/replication.md#rp0), so none of its verbs can land after this.
    pub fn activate(&self, view: View) {
        let any = !view.all_active();
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(view);
        self.any_lost.store(any, Ordering::Release);
        self.changing_to.store(0, Ordering::Release);
    }

    /// Where a verb addressed to replica 0 of a share's index or data
    /// tables goes in the current view: to the share's primary replica.
    /// Every other address (a mirror's, the META page, another store's
    /// region) and every address of a share with no active replica is
    /// unchanged: the fabric refuses a verb to a lost node. An address of
    /// replica 0 named as a mirror ([`Views::mirrors`]) goes to replica 0.
    pub(crate) fn route(&self, at: RemoteAddr) -> RemoteAddr {
        if let Some(own) = region::unaliased(at.region) {
            return RemoteAddr::new(at.node, own, at.offset);
        }
        if !self.any_lost.load(Ordering::Acquire) || !is_share_region(at) {
            return at;
        }
        let view = self.current();
        match view.primary_replica(at.node, &self.geometry) {
            Some(j) if j > 0 => self.geometry.replica_addr(at, j),
            _ => at,
        }
    }

    /// `e`, or [`Error::DataLost`] when `e` is a fabric error on a node
    /// that the current view names lost and whose share has no active
    /// replica left: the verb went to the share's first node only because
    /// no replica could take it ([`Views::route`]), and no later view
    /// brings the share back (docs/replication.md#questions-the-design-must-answer).
    pub(crate) fn name_lost_share(&self, e: Error) -> Error {
        if !self.any_lost.load(Ordering::Acquire) {
            return e;
        }
        let Some(node) = (match &e {
            Error::Fabric(f) => f.peer(),
            _ => None,
        }) else {
            return e;
        };
        let view = self.current();
        if view.is_lost(node) && view.primary_replica(node, &self.geometry).is_none() {
            Error::DataLost { share: node }
        } else {
            e
        }
    }

    /// The mirrors, in the current view, of what replica 0 of a share keeps
    /// at `at`: every replica but the primary on a node not lost (a
    /// restoring replica 0 included, named so that routing leaves it
    /// there).
    pub(crate) fn mirrors(&self, at: RemoteAddr) -> PerReplica<RemoteAddr> {
        if !self.any_lost.load(Ordering::Acquire) {
            return self.geometry.mirrors(at).collect();
        }
        let view = self.current();
        let Some(primary) = view.primary_replica(at.node, &self.geometry) else {
            return PerReplica::new();
        };
        (0..self.geometry.replicas())
            .filter(|&j| j != primary)
            .map(|j| self.geometry.replica_addr(at, j))
            .filter(|m| !view.is_lost(m.node))
            .map(|m| {
                if m.region.0 < region::REPLICA_STRIDE {
                    RemoteAddr::new(m.node, region::aliased(m.region), m.offset)
                } else {
                    m
                }
            })
            .collect()
    }
}

/// Whether `at` is in replica 0 of a share's index or data tables.
fn is_share_region(at: RemoteAddr) -> bool {
    at.region == region::INDEX || region::data_class(at.region).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn views(nodes: usize, replicas: usize) -> Views {
        Views::new(Geometry::new(&Config {
            nodes,
            replicas,
            index_slots_per_node: 64,
            data_bytes_per_node: 1 << 20,
            value_size_max: 1024,
            ..Config::default()
        }))
    }

    #[test]
    fn a_lost_primary_is_served_by_its_next_replica() {
        let v = views(3, 2);
        let at = RemoteAddr::new(1, region::INDEX, 64);
        assert_eq!(v.route(at), at);
        assert_eq!(
            v.mirrors(at).as_slice(),
            &[RemoteAddr::new(2, region::replica(1, region::INDEX), 64)]
        );
        v.activate(View::first(3).without(1));
        assert_eq!(
            v.route(at),
            RemoteAddr::new(2, region::replica(1, region::INDEX), 64)
        );
        assert!(v.mirrors(at).is_empty(), "r = 2 less one: no mirror left");
        // Share 0's mirror was on node 1: gone; its primary stays.
        let zero = RemoteAddr::new(0, region::data(2), 128);
        assert_eq!(v.route(zero), zero);
        assert!(v.mirrors(zero).is_empty());
        // A mirror's address and the META page are never rerouted.
        let m = RemoteAddr::new(1, region::replica(1, region::INDEX), 8);
        assert_eq!(v.route(m), m);
        let meta = RemoteAddr::new(1, region::META, 0);
        assert_eq!(v.route(meta), meta);
    }

    #[test]
    fn with_three_replicas_two_losses_leave_one_copy() {
        let v = views(5, 3);
        let at = RemoteAddr::new(4, region::data(0), 0);
        v.activate(View::first(5).without(4).without(0));
        assert_eq!(v.current().epoch(), 2);
        assert_eq!(v.current().lost().collect::<Vec<_>>(), vec![0, 4]);
        assert!(!v.current().all_active() && View::first(5).all_active());
        assert_eq!(
            v.route(at),
            RemoteAddr::new(1, region::replica(2, region::data(0)), 0)
        );
        assert!(v.mirrors(at).is_empty());
        let three = RemoteAddr::new(3, region::INDEX, 0);
        assert_eq!(
            v.mirrors(three).as_slice(),
            &[] as &[RemoteAddr],
            "3's mirrors were 4 and 0"
        );
        let two = RemoteAddr::new(2, region::INDEX, 0);
        assert_eq!(
            v.mirrors(two).as_slice(),
            &[RemoteAddr::new(3, region::replica(1, region::INDEX), 0)]
        );
    }

    #[test]
    fn a_share_with_every_replica_lost_is_left_to_the_fabric_to_refuse() {
        let v = views(3, 2);
        v.activate(View::first(3).without(0).without(1));
        let at = RemoteAddr::new(0, region::INDEX, 0);
        assert_eq!(v.route(at), at);
    }

    /// An operation starts only before the lease's end, and not between a
    /// decision and its activation.
    #[test]
    fn operations_start_only_under_the_lease_and_outside_a_change() {
        let v = views(3, 2);
        v.set_lease_until(100);
        assert!(v.check_serving(99).is_ok());
        assert!(matches!(v.check_serving(100), Err(Error::NoQuorum { .. })));
        v.set_lease_until(u64::MAX);
        v.begin_change(1);
        assert!(matches!(
            v.check_serving(0),
            Err(Error::ViewChanging { epoch: 1 })
        ));
    }
}
