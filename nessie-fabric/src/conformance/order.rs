//! What a backend that keeps a node's verbs in batch order promises.

use super::{cluster, Factory, LARGE, SMALL};
use crate::{RemoteAddr, Verb};

/// Where [`Fabric::keeps_batch_order`](crate::Fabric::keeps_batch_order)
/// says so, every view's batches take effect at each node in batch order:
/// a READ after a CAS or a WRITE of the same word sees it, a CAS after a
/// WRITE compares against it, whatever verbs to other nodes lie between
/// and whether the node is the poster's own. A backend that does not say
/// so is not held to it.
///
/// # Panics
/// On any deviation.
pub fn check_batch_order(make: Factory<'_>) {
    let views = cluster(make);
    for (from, view) in views.iter().enumerate() {
        if !view.keeps_batch_order() {
            continue;
        }
        for round in 0..50u64 {
            for node in 0..views.len() {
                // A word of its own per view, and a READ to another node
                // in between: the batch spans two nodes.
                let word = RemoteAddr::new(node, SMALL, 8 * from as u64);
                let other = RemoteAddr::new((node + 1) % views.len(), LARGE, 0);
                assert_ne!(other.node, node, "the suite's cluster has several nodes");
                let was = round * 10;
                let (mut filler, mut after_cas, mut after_write) = ([0u8; 64], [0u8; 8], [0u8; 8]);
                let written = (was + 5).to_le_bytes();
                let mut batch = [
                    Verb::Cas {
                        addr: word,
                        expected: was,
                        new: was + 1,
                        old: 0,
                    },
                    Verb::Read {
                        addr: other,
                        buf: &mut filler,
                    },
                    Verb::Read {
                        addr: word,
                        buf: &mut after_cas,
                    },
                    Verb::Write {
                        addr: word,
                        data: &written,
                    },
                    Verb::Read {
                        addr: word,
                        buf: &mut after_write,
                    },
                    Verb::Cas {
                        addr: word,
                        expected: was + 5,
                        new: was + 10,
                        old: 0,
                    },
                ];
                view.post(&mut batch).expect("an ordered batch");
                let olds: Vec<u64> = [&batch[0], &batch[5]]
                    .iter()
                    .map(|v| match v {
                        Verb::Cas { old, .. } => *old,
                        _ => unreachable!("CASes at 0 and 5"),
                    })
                    .collect();
                assert_eq!(
                    (
                        olds,
                        u64::from_le_bytes(after_cas),
                        u64::from_le_bytes(after_write)
                    ),
                    (vec![was, was + 5], was + 1, was + 5),
                    "view {from}'s batch to node {node} took effect out of order (round {round})"
                );
            }
        }
    }
}
