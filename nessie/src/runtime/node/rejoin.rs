//! A replacement node: it takes a lost node's id with empty memory, joins
//! the current view as a restoring member, copies its replicas while the
//! cluster serves, and becomes active again
//! (docs/replication.md#restore).

use super::Node;
use crate::data::Geometry;
use crate::fabric::{Fabric, NodeId, RemoteAddr};
use crate::layout::membership::{
    view_words, MemberState, ViewRecord, DECISION_OFFSET, INCARNATION_OFFSET, MEMBERSHIP,
};
use crate::layout::WORD;
use crate::replica::{catch_up, prepare, restore, CopyTime, View};
use crate::runtime::store::store_regions;
use crate::runtime::Hosting;
use crate::{Config, Error};
use std::time::{Duration, Instant};

impl Node {
    /// Starts a replacement for node `node_id`, whose host was lost: with
    /// empty memory it joins the current view as a restoring member (an
    /// incarnation above its predecessor's, so that no member reads the new
    /// memory as the old: M3), copies every replica it holds from the
    /// primaries while the cluster serves, rebuilds its allocator from the
    /// copies, and returns once a view names it active again, its lease
    /// lets it serve and its share's other replicas have caught up with the
    /// commits it took first as a mirror. Its verbs and its join go over the fabric, whose
    /// handshake checks the cluster's secret.
    ///
    /// # Errors
    /// [`Error::RejoinRefused`] with one replica (nothing to restore from:
    /// joining empty would lose the node's share), while `node_id` is
    /// still a member of the current view, or when the copy cannot finish;
    /// [`Error::Timeout`] if no view with it restoring, then active, is
    /// decided within `attach_timeout` each; otherwise as [`Node::start`].
    pub fn rejoin(config: Config, node_id: NodeId) -> Result<Node, Error> {
        if config.replicas < 2 {
            return Err(Error::RejoinRefused {
                reason: format!(
                    "replicas = {}: nothing holds a copy of node {node_id}'s share, so \
                     joining with empty memory would lose it",
                    config.replicas
                ),
            });
        }
        let wait = config.attach_timeout;
        let drain = config.effective_lease() + config.landing_bound() + config.max_clock_skew;
        let regions = store_regions(&config);
        // The new memory stays closed (every verb to it refused) until the
        // members have agreed that the node is lost and drained the view in
        // which it was not: a verb of that view must never read the empty
        // memory as the predecessor's.
        let hosting = Hosting::replacement(config, node_id, regions)?;
        hosting.fabric().close_own_memory(true);
        let geometry = Geometry::new(hosting.config());
        let local = std::sync::Arc::clone(hosting.local_fabric());
        let current = current_view(hosting.fabric().as_ref(), &geometry, node_id);
        let (state, predecessor) = current.members[node_id];
        if state != MemberState::Lost {
            return Err(Error::RejoinRefused {
                reason: format!(
                    "node {node_id} is {state:?} in view {}: a replacement joins only once \
                     the members have agreed that it is lost",
                    current.epoch
                ),
            });
        }
        // That view was decided before this read: a drain from now covers
        // every operation of the view before it (docs/replication.md#rp0).
        std::thread::sleep(drain);
        hosting.fabric().close_own_memory(false);
        prepare(local.as_ref(), &geometry, node_id)?;
        let incarnation = predecessor + 1;
        local.write(
            RemoteAddr::new(node_id, MEMBERSHIP, INCARNATION_OFFSET),
            &incarnation.to_le_bytes(),
        )?;
        let states = current.members.iter().map(|m| m.0).collect();
        hosting
            .views()
            .activate(View::with_states(current.epoch, states));
        let mut node = Node::run(hosting, node_id, current)?;
        let membership = node
            .membership
            .as_ref()
            .ok_or_else(|| Error::RejoinRefused {
                reason: "no membership runs without replicas".into(),
            })?;
        membership.wish(MemberState::Restoring, incarnation);
        node.await_state(MemberState::Restoring, wait)?;
        let started = Instant::now();
        let data = node
            .shared
            .data(node_id)
            .ok_or_else(|| Error::RejoinRefused {
                reason: "the node's tables are not hosted here".into(),
            })?;
        let time = CopyTime {
            clock: node.shared.clock(node_id).as_ref(),
            landing_us: node.shared.config().landing_bound().as_micros() as u64,
        };
        let figures = restore(
            node.shared.fabric().as_ref(),
            local.as_ref(),
            &geometry,
            data,
            node_id,
            time,
        )?;
        tracing::warn!(
            node = node_id,
            copied_ms = started.elapsed().as_millis() as u64,
            index_slots = figures.index_slots,
            data_slots = figures.data_slots,
            bytes = figures.bytes_read,
            entries = figures.entries_adopted,
            "replicas restored; asking to be active"
        );
        membership.wish(MemberState::Active, incarnation);
        node.await_state(MemberState::Active, wait)?;
        // Primary of its share again: the replica that was primary while it
        // restored catches up with the commits it took first
        // (docs/replication.md#rp3c).
        let mut figures = figures;
        figures.caught_up = catch_up(
            node.shared.fabric().as_ref(),
            local.as_ref(),
            &geometry,
            node_id,
        )?;
        node.restored = Some(figures);
        Ok(node)
    }

    /// Waits until the active view gives this node `state` (and, for
    /// [`MemberState::Active`], until its lease lets it serve).
    fn await_state(&self, state: MemberState, wait: Duration) -> Result<(), Error> {
        let until = Instant::now() + wait;
        let views = self.shared.views();
        let clock = self.shared.clock(self.id);
        loop {
            let there = views.current().state(self.id) == state;
            let serving =
                state != MemberState::Active || views.check_serving(clock.mono_us()).is_ok();
            if there && serving {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(Error::Timeout);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// What this node's restore copied, if it joined with
    /// [`Node::rejoin`].
    #[must_use]
    pub fn restore_figures(&self) -> Option<crate::replica::RestoreFigures> {
        self.restored
    }
}

/// The newest view any other node's memory records as decided (the first
/// view if none does).
fn current_view(fabric: &dyn Fabric, geometry: &Geometry, me: NodeId) -> ViewRecord {
    let nodes = geometry.nodes();
    (0..nodes)
        .filter(|&n| n != me)
        .filter_map(|n| {
            let mut bytes = vec![0u8; view_words(nodes) * WORD];
            fabric
                .read(RemoteAddr::new(n, MEMBERSHIP, DECISION_OFFSET), &mut bytes)
                .ok()?;
            ViewRecord::decode(&bytes, nodes)
        })
        .max_by_key(|v| v.epoch)
        .unwrap_or_else(|| ViewRecord::first(nodes))
}
