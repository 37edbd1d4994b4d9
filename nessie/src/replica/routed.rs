//! The fabric of a replicated store: every verb addressed to replica 0 of a
//! share goes to the share's primary in the current view, so the protocol,
//! the recycler and the caches address entries and index slots the same
//! way in every view (docs/replication.md#placement).

use super::view::Views;
use crate::fabric::{Fabric, FabricError, NodeId, RegionId, RemoteAddr, Verb};
use smallvec::SmallVec;
use std::sync::Arc;

/// A fabric that routes by the current view.
#[derive(Debug)]
pub(crate) struct RoutedFabric {
    inner: Arc<dyn Fabric>,
    views: Arc<Views>,
}

impl RoutedFabric {
    pub(crate) fn new(inner: Arc<dyn Fabric>, views: Arc<Views>) -> RoutedFabric {
        RoutedFabric { inner, views }
    }

    /// Posts `batch` with every address routed, through `post`, and gives
    /// the caller its batch back with the addresses it wrote. A caller
    /// reads a verb's address again after the post (a sync's loop goes on
    /// at the mirror its first CAS reached): a restoring node's alias
    /// routed in place would come back as replica 0's plain address, which
    /// routes to the share's primary, and the loop would never reach the
    /// mirror (docs/replication.md#restore).
    fn post_routed(
        &self,
        batch: &mut [Verb<'_>],
        post: impl FnOnce(&mut [Verb<'_>]) -> Result<(), FabricError>,
    ) -> Result<(), FabricError> {
        let asked: SmallVec<[RemoteAddr; 8]> = batch.iter_mut().map(|v| *address(v)).collect();
        for verb in batch.iter_mut() {
            let addr = address(verb);
            *addr = self.views.route(*addr);
        }
        let result = post(batch);
        for (verb, asked) in batch.iter_mut().zip(asked) {
            *address(verb) = asked;
        }
        result
    }
}

/// The address of a verb.
fn address<'v>(verb: &'v mut Verb<'_>) -> &'v mut RemoteAddr {
    match verb {
        Verb::Read { addr, .. }
        | Verb::ReadScatter { addr, .. }
        | Verb::Write { addr, .. }
        | Verb::Cas { addr, .. } => addr,
    }
}

impl Fabric for RoutedFabric {
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }

    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.inner.region_len(node, region)
    }

    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.inner.read(self.views.route(addr), buf)
    }

    fn read_scatter(
        &self,
        addr: RemoteAddr,
        head: &mut [u8],
        tail: &mut [u8],
    ) -> Result<(), FabricError> {
        self.inner.read_scatter(self.views.route(addr), head, tail)
    }

    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.inner.write(self.views.route(addr), data)
    }

    fn write_streaming(
        &self,
        addr: RemoteAddr,
        parts: &[&[u8]],
        cached: usize,
    ) -> Result<(), FabricError> {
        self.inner
            .write_streaming(self.views.route(addr), parts, cached)
    }

    fn yield_point(&self) {
        self.inner.yield_point();
    }

    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        self.inner.cas(self.views.route(addr), expected, new)
    }

    fn cas_by(
        &self,
        addr: RemoteAddr,
        expected: u64,
        new: u64,
        land_by_us: u64,
    ) -> Result<u64, FabricError> {
        self.inner
            .cas_by(self.views.route(addr), expected, new, land_by_us)
    }

    fn enforces_land_by(&self) -> bool {
        self.inner.enforces_land_by()
    }

    fn remote_reads_cost_more(&self) -> bool {
        self.inner.remote_reads_cost_more()
    }

    fn keeps_batch_order(&self) -> bool {
        // Routing rewrites addresses in place and posts the batch as given.
        self.inner.keeps_batch_order()
    }

    fn close_own_memory(&self, closed: bool) {
        self.inner.close_own_memory(closed);
    }

    fn fence_node(&self, node: NodeId) {
        self.inner.fence_node(node);
    }

    fn readmit_node(&self, node: NodeId) {
        self.inner.readmit_node(node);
    }

    fn post(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        self.post_routed(batch, |b| self.inner.post(b))
    }

    fn post_by(&self, batch: &mut [Verb<'_>], land_by_us: u64) -> Result<(), FabricError> {
        self.post_routed(batch, |b| self.inner.post_by(b, land_by_us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Geometry;
    use crate::fabric::LocalFabric;
    use crate::layout::region;
    use crate::replica::View;
    use crate::Config;

    /// Three nodes' memory with two replicas, their views and the fabric
    /// routing by them.
    fn three_nodes() -> (Arc<dyn Fabric>, Arc<Views>, RoutedFabric) {
        let config = Config {
            replicas: 2,
            index_slots_per_node: 16,
            data_bytes_per_node: 1 << 16,
            value_size_max: 256,
            ..Config::default()
        };
        let local: Arc<dyn Fabric> =
            Arc::new(LocalFabric::new(3, &crate::store_regions(&config)).unwrap());
        let views = Arc::new(Views::new(Geometry::new(&config)));
        let routed = RoutedFabric::new(Arc::clone(&local), Arc::clone(&views));
        (local, views, routed)
    }

    #[test]
    fn verbs_to_a_lost_share_reach_its_mirror_and_others_are_untouched() {
        let (local, views, routed) = three_nodes();
        let slot = RemoteAddr::new(2, region::INDEX, 8);
        let mirror = RemoteAddr::new(0, region::replica(1, region::INDEX), 8);
        routed.write(slot, &7u64.to_le_bytes()).unwrap();
        local.write(mirror, &9u64.to_le_bytes()).unwrap();
        let word = |f: &dyn Fabric, at| {
            let mut w = [0u8; 8];
            f.read(at, &mut w).unwrap();
            u64::from_le_bytes(w)
        };
        assert_eq!(word(&routed, slot), 7);
        views.activate(View::first(3).without(2));
        assert_eq!(word(&routed, slot), 9, "share 2's primary is node 0 now");
        assert_eq!(routed.cas(slot, 9, 10).unwrap(), 9);
        let mut w = [0u8; 8];
        let mut batch = [Verb::Read {
            addr: slot,
            buf: &mut w,
        }];
        routed.post(&mut batch).unwrap();
        assert_eq!(u64::from_le_bytes(w), 10);
        assert_eq!(word(&*local, slot), 7, "the lost replica is not written");
    }

    /// A sync's loop reads back the address its first CAS was posted to: a
    /// restoring mirror's alias must come back as it was written, or the
    /// loop's next CAS routes to the share's primary instead (found by the
    /// simulator's host-returns-empty fault: the restoring mirror kept a
    /// stale link and served it once active).
    #[test]
    fn a_posted_batch_keeps_the_addresses_it_was_given() {
        use crate::layout::membership::MemberState;
        let (local, views, routed) = three_nodes();
        let lost = View::first(3).without(2);
        views.activate(lost.next_with(2, MemberState::Restoring));
        let slot = RemoteAddr::new(2, region::INDEX, 8);
        let mirror = views.mirrors(slot)[0];
        assert_eq!(mirror.region, region::aliased(region::INDEX));
        let mut batch = [Verb::Cas {
            addr: mirror,
            expected: 0,
            new: 5,
            old: 0,
        }];
        routed.post(&mut batch).unwrap();
        let Verb::Cas { addr, old, .. } = batch[0] else {
            unreachable!()
        };
        assert_eq!((addr, old), (mirror, 0), "the alias comes back");
        assert_eq!(
            routed.cas(addr, 5, 6).unwrap(),
            5,
            "and still reaches node 2"
        );
        let primary = RemoteAddr::new(0, region::replica(1, region::INDEX), 8);
        let word = |at| {
            let mut w = [0u8; 8];
            local.read(at, &mut w).unwrap();
            u64::from_le_bytes(w)
        };
        assert_eq!((word(slot), word(primary)), (6, 0));
    }

    /// A fabric that enforces land-by times and counts its yield points.
    #[derive(Debug)]
    struct Strict {
        inner: LocalFabric,
        yields: std::sync::atomic::AtomicUsize,
        scatters: std::sync::atomic::AtomicUsize,
    }

    impl Fabric for Strict {
        fn nodes(&self) -> usize {
            self.inner.nodes()
        }

        fn fence_node(&self, node: usize) {
            self.inner.fence_node(node);
        }

        fn readmit_node(&self, node: usize) {
            self.inner.readmit_node(node);
        }
        fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
            self.inner.region_len(node, region)
        }
        fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
            self.inner.read(addr, buf)
        }
        fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
            self.inner.write(addr, data)
        }
        fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
            self.inner.cas(addr, expected, new)
        }
        fn read_scatter(
            &self,
            addr: RemoteAddr,
            head: &mut [u8],
            tail: &mut [u8],
        ) -> Result<(), FabricError> {
            self.scatters
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.read_scatter(addr, head, tail)
        }
        fn enforces_land_by(&self) -> bool {
            true
        }
        fn yield_point(&self) {
            self.yields
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn what_is_not_an_address_passes_through_unchanged() {
        let config = Config {
            replicas: 2,
            index_slots_per_node: 16,
            data_bytes_per_node: 1 << 16,
            value_size_max: 256,
            ..Config::default()
        };
        let strict = Arc::new(Strict {
            inner: LocalFabric::new(3, &crate::store_regions(&config)).unwrap(),
            yields: std::sync::atomic::AtomicUsize::new(0),
            scatters: std::sync::atomic::AtomicUsize::new(0),
        });
        let views = Arc::new(Views::new(Geometry::new(&config)));
        let routed = RoutedFabric::new(Arc::clone(&strict) as Arc<dyn Fabric>, views);
        assert_eq!(routed.nodes(), 3);
        // A scatter READ stays one READ of the inner fabric (one round
        // trip there), not two.
        let at = RemoteAddr::new(1, crate::layout::region::data(0), 0);
        strict.inner.write(at, &[7; 24]).unwrap();
        let (mut head, mut tail) = ([0u8; 8], [0u8; 16]);
        routed.read_scatter(at, &mut head, &mut tail).unwrap();
        assert_eq!((head, tail), ([7; 8], [7; 16]));
        assert_eq!(
            strict.scatters.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        assert!(routed.enforces_land_by());
        // What the inner fabric promises of a batch's order, routing keeps.
        assert!(!routed.keeps_batch_order());
        routed.yield_point();
        routed.yield_point();
        assert_eq!(strict.yields.load(std::sync::atomic::Ordering::Relaxed), 2);
        let local = LocalFabric::new(3, &crate::store_regions(&config)).unwrap();
        let plain = RoutedFabric::new(
            Arc::new(local),
            Arc::new(Views::new(Geometry::new(&config))),
        );
        assert!(!plain.enforces_land_by());
        assert!(plain.keeps_batch_order());
    }
}
