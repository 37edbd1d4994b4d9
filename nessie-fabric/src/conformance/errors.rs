//! Verbs that must fail, and how.

use super::{cluster, read_vec, Factory, SMALL, SMALL_LEN, UNREGISTERED};
use crate::{Fabric, FabricError, RemoteAddr, Verb};

fn expect_err(what: &str, result: Result<(), FabricError>, ok: impl Fn(&FabricError) -> bool) {
    match result {
        Err(e) if ok(&e) => {
            // The message names the verb's coordinates.
            assert!(!e.to_string().is_empty());
        }
        other => panic!("{what}: unexpected {other:?}"),
    }
}

/// READ and WRITE of 16 bytes and CAS at `addr` all fail as `ok` says.
fn expect_every_verb_err(
    f: &dyn Fabric,
    what: &str,
    addr: RemoteAddr,
    ok: impl Fn(&FabricError) -> bool,
) {
    let mut buf16 = [0u8; 16];
    expect_err(&format!("READ of {what}"), f.read(addr, &mut buf16), &ok);
    expect_err(&format!("WRITE of {what}"), f.write(addr, &[0xee; 16]), &ok);
    expect_err(&format!("CAS of {what}"), f.cas(addr, 0, 1).map(drop), &ok);
}

/// Out-of-bounds, misaligned, unknown-node and unknown-region verbs fail
/// with their own error, carrying the verb's coordinates, through READ,
/// WRITE, CAS and batches, and change nothing.
///
/// # Panics
/// On any deviation.
pub fn check_errors(make: Factory<'_>) {
    let views = cluster(make);
    let nodes = views.len();
    for (v, f) in views.iter().enumerate() {
        let node = (v + 1) % nodes;
        check_out_of_bounds(&**f, node);
        check_misaligned(&**f, node);
        check_unknown_targets(&**f, node, nodes);
    }
    // Nothing above changed any memory.
    for node in 0..nodes {
        let all = read_vec(
            &*views[0],
            RemoteAddr::new(node, SMALL, 0),
            SMALL_LEN as usize,
        );
        assert!(
            all.iter().all(|&b| b == 0),
            "failed verbs changed node {node}'s memory"
        );
    }
}

/// An [`FabricError::OutOfBounds`] of `len` bytes at `off` of node `node`'s
/// [`SMALL`] region.
fn out_of_bounds(node: usize, off: u64, len: u64) -> impl Fn(&FabricError) -> bool {
    move |e: &FabricError| {
        matches!(e, FabricError::OutOfBounds { node: n, region, offset, len: l, region_len }
            if *n == node && *region == SMALL && *offset == off && *l == len && *region_len == SMALL_LEN)
    }
}

/// Verbs across or past the end of node `node`'s [`SMALL`] region, also
/// where the end overflows.
fn check_out_of_bounds(f: &dyn Fabric, node: usize) {
    let mut buf16 = [0u8; 16];
    let data16 = [0xeeu8; 16];
    let out = |off, len| out_of_bounds(node, off, len);
    let past_end = RemoteAddr::new(node, SMALL, SMALL_LEN - 8);
    expect_err(
        "READ across the end",
        f.read(past_end, &mut buf16),
        out(SMALL_LEN - 8, 16),
    );
    expect_err(
        "WRITE across the end",
        f.write(past_end, &data16),
        out(SMALL_LEN - 8, 16),
    );
    let at_end = RemoteAddr::new(node, SMALL, SMALL_LEN);
    expect_err(
        "CAS past the end",
        f.cas(at_end, 0, 1).map(drop),
        out(SMALL_LEN, 8),
    );
    expect_err(
        "READ far past the end",
        f.read(RemoteAddr::new(node, SMALL, 1 << 40), &mut buf16),
        out(1 << 40, 16),
    );
    let wrap = u64::MAX - 7;
    expect_err(
        "READ whose end overflows",
        f.read(RemoteAddr::new(node, SMALL, wrap), &mut buf16),
        out(wrap, 16),
    );
    expect_err(
        "CAS whose end overflows",
        f.cas(RemoteAddr::new(node, SMALL, wrap), 0, 1).map(drop),
        out(wrap, 8),
    );
    expect_err(
        "batched verb across the end",
        f.post(&mut [Verb::Read {
            addr: past_end,
            buf: &mut buf16,
        }]),
        out(SMALL_LEN - 8, 16),
    );
}

/// Verbs at offsets or of lengths that are not whole words.
fn check_misaligned(f: &dyn Fabric, node: usize) {
    let mut buf16 = [0u8; 16];
    let data16 = [0xeeu8; 16];
    let mis = |off: u64, len: u64| {
        move |e: &FabricError| {
            matches!(e, FabricError::Misaligned { node: n, region, offset, len: l }
                if *n == node && *region == SMALL && *offset == off && *l == len)
        }
    };
    let odd = RemoteAddr::new(node, SMALL, 4);
    expect_err("misaligned READ", f.read(odd, &mut buf16), mis(4, 16));
    expect_err("misaligned WRITE", f.write(odd, &data16), mis(4, 16));
    expect_err("misaligned CAS", f.cas(odd, 0, 1).map(drop), mis(4, 8));
    let word = RemoteAddr::new(node, SMALL, 8);
    expect_err(
        "READ of a partial word",
        f.read(word, &mut buf16[..12]),
        mis(8, 12),
    );
    expect_err(
        "WRITE of a partial word",
        f.write(word, &data16[..3]),
        mis(8, 3),
    );
}

/// Verbs of a node beyond the cluster of `nodes` nodes, or of a region
/// node `node` never registered.
fn check_unknown_targets(f: &dyn Fabric, node: usize, nodes: usize) {
    expect_every_verb_err(
        f,
        "an unknown node",
        RemoteAddr::new(nodes, SMALL, 0),
        |e| matches!(e, FabricError::UnknownNode { node: n, nodes: c } if *n == nodes && *c == nodes),
    );
    let mut buf16 = [0u8; 16];
    expect_err(
        "READ of a far unknown node",
        f.read(RemoteAddr::new(usize::MAX, SMALL, 0), &mut buf16),
        |e| {
            matches!(
                e,
                FabricError::UnknownNode {
                    node: usize::MAX,
                    ..
                }
            )
        },
    );
    let missing = UNREGISTERED;
    let unknown_region = |e: &FabricError| matches!(e, FabricError::UnknownRegion { node: n, region } if *n == node && *region == missing);
    let unregistered = RemoteAddr::new(node, missing, 0);
    expect_every_verb_err(f, "an unknown region", unregistered, unknown_region);
    expect_err(
        "batched verb of an unknown region",
        f.post(&mut [Verb::Write {
            addr: unregistered,
            data: &[0xee; 16],
        }]),
        unknown_region,
    );
}
