//! Verbs to every member that one silent member can neither fail nor starve
//! (docs/replication.md#failure-detection).

use crate::fabric::{Fabric, Verb, WaitBound};
use std::time::{Duration, Instant};

/// Posts `batch`, whose verbs are grouped by node (each node's verbs
/// together), and returns, per node in the order of the batch, whether
/// all its verbs succeeded; no verb waits for its node longer than `wait`.
///
/// One round trip while every node answers. If any fails, each node's
/// verbs are posted again on their own, each group under a wait bound of
/// its own: a silent node uses up the batch's bound, and the live nodes'
/// verbs must not fail for it, or a live member would look as silent as
/// the lost one. The cost is time only, at most `wait` per node. Reads and
/// the membership's writes (the same bytes again) are safe to repeat.
pub(crate) fn post_per_node(
    fabric: &dyn Fabric,
    batch: &mut [Verb<'_>],
    wait: Duration,
) -> Vec<bool> {
    debug_assert!(
        grouped_by_node(batch),
        "the verbs of one node must be contiguous"
    );
    let together = {
        let _bound = WaitBound::until(Instant::now() + wait);
        fabric.post(batch).is_ok()
    };
    let groups = batch.chunk_by_mut(|a, b| a.addr().node == b.addr().node);
    if together {
        return vec![true; groups.count()];
    }
    groups
        .map(|group| {
            let _bound = WaitBound::until(Instant::now() + wait);
            fabric.post(group).is_ok()
        })
        .collect()
}

/// Whether no node's verbs are split by another node's.
fn grouped_by_node(batch: &[Verb<'_>]) -> bool {
    let mut seen = Vec::new();
    for verb in batch {
        let node = verb.addr().node;
        if seen.last() != Some(&node) {
            if seen.contains(&node) {
                return false;
            }
            seen.push(node);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::test_fabric::Fences;
    use super::*;
    use crate::fabric::{LocalFabric, NodeId, RegionId, RegionSpec, RemoteAddr};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    const SILENT: NodeId = 2;

    /// Three nodes' memory, node 2 silent: its verbs wait out the thread's
    /// wait bound and fail, as a host cut off without a reset does on
    /// `tcp`.
    fn silent() -> Fences {
        let spec = RegionSpec {
            id: RegionId(0),
            len: 64,
        };
        let fabric = Fences::over(&Arc::new(LocalFabric::new(3, &[spec]).unwrap()));
        fabric.silent.lock().unwrap().push(SILENT);
        fabric
    }

    /// The regression of the partition test's false eviction: a batch
    /// over a live and a silent node used up the membership round's bound
    /// on the silent one, and the retry of the live node's read then failed
    /// too, so a live member looked silent and was voted out.
    #[test]
    fn a_silent_node_fails_only_its_own_verbs() {
        let fabric = silent();
        let mut bufs = [[0u8; 8]; 4];
        let [a, b, c, d] = &mut bufs;
        let mut batch = [
            Verb::Read {
                addr: RemoteAddr::new(0, RegionId(0), 0),
                buf: a,
            },
            Verb::Read {
                addr: RemoteAddr::new(1, RegionId(0), 0),
                buf: b,
            },
            Verb::Read {
                addr: RemoteAddr::new(1, RegionId(0), 8),
                buf: c,
            },
            Verb::Read {
                addr: RemoteAddr::new(SILENT, RegionId(0), 0),
                buf: d,
            },
        ];
        assert_eq!(
            post_per_node(&fabric, &mut batch, Duration::from_millis(20)),
            [true, true, false],
            "nodes 0, 1 and the silent one"
        );
    }

    #[test]
    fn every_node_succeeds_in_one_post_while_all_answer() {
        let fabric = silent();
        let data = 7u64.to_le_bytes();
        let mut batch = [
            Verb::Write {
                addr: RemoteAddr::new(0, RegionId(0), 0),
                data: &data,
            },
            Verb::Write {
                addr: RemoteAddr::new(1, RegionId(0), 0),
                data: &data,
            },
        ];
        assert_eq!(
            post_per_node(&fabric, &mut batch, Duration::from_millis(20)),
            [true, true]
        );
        assert_eq!(fabric.posts.load(Ordering::Relaxed), 1, "one round trip");
        let mut back = [0u8; 8];
        fabric
            .read(RemoteAddr::new(1, RegionId(0), 0), &mut back)
            .unwrap();
        assert_eq!(back, data);
    }

    #[test]
    fn a_node_split_by_another_is_not_grouped() {
        let data = [0u8; 8];
        let at = |n| Verb::Write {
            addr: RemoteAddr::new(n, RegionId(0), 0),
            data: &data,
        };
        assert!(grouped_by_node(&[at(0), at(0), at(1)]));
        assert!(!grouped_by_node(&[at(0), at(1), at(0)]));
    }
}
