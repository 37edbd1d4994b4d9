//! A run's keys, setup and first operations.

use super::{Layout, Scenario};
use crate::history::Call;
use nessie::index::KeyHasher;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::ops::RangeInclusive;

/// A run's keys, the writes that set its index up, and the operations its
/// clients start with.
pub(super) struct World {
    /// The keys clients write.
    pub(super) keys: Vec<Vec<u8>>,
    /// Further keys, preloaded (clients read them if `read_fillers`).
    pub(super) fillers: Vec<Vec<u8>>,
    /// Setup writes, each from node `i % nodes`; `true`: it must succeed
    /// (a prescribed layout), `false`: a full index or table is fine.
    pub(super) setup: Vec<(Call, bool)>,
    /// Per client, the operations it starts with, if prescribed.
    pub(super) first: Vec<Vec<Call>>,
}

/// A key of exactly `len` bytes (or the shortest that is unique), distinct
/// for every `(prefix, i)`: the index in hex, then `.` and padding.
fn name(prefix: char, i: usize, len: usize) -> Vec<u8> {
    let base = format!("{prefix}{i:x}");
    if len <= base.len() {
        return base.into_bytes();
    }
    let mut k = base.into_bytes();
    k.push(b'.');
    k.resize(len, b'y');
    k
}

/// The keys, setup and first operations of `scenario`'s run of `seed`.
pub(super) fn world(scenario: &Scenario, seed: u64) -> World {
    let config = scenario.config(seed);
    let hasher = KeyHasher::new(&config);
    let per_node = config.index_slots_per_node as u64;
    let at = |g: u64| nessie::index::Candidate {
        node: (g / per_node) as usize,
        slot: g % per_node,
    };
    // A key named `{prefix}{i}` whose candidates are exactly the global
    // slots `exact`, or whose first candidate is `first`.
    let find = |prefix: &str, exact: &[u64], first: Option<u64>| -> Vec<u8> {
        let want: Vec<_> = exact.iter().map(|&g| at(g)).collect();
        (0..1_000_000)
            .map(|i| format!("{prefix}{i}").into_bytes())
            .find(|k| {
                let c = hasher.candidates(k);
                match first {
                    Some(f) => c[0] == at(f),
                    None => c == want,
                }
            })
            .unwrap_or_default()
    };
    let put = |k: &Vec<u8>, v: &str| (Call::put(k.clone(), v.as_bytes().to_vec()), true);
    let mut first = vec![Vec::new(); scenario.clients];
    match scenario.layout {
        Layout::A => {
            let (k1, k2, k4) = (
                find("k1-", &[1, 0], None),
                find("k2-", &[0, 2], None),
                find("k4-", &[1, 2], None),
            );
            let (k3, parker) = (find("k3-", &[], Some(2)), find("t-", &[], Some(1)));
            prescribe(&mut first, 0, vec![Call::put(k2.clone(), b"v4".to_vec())]);
            World {
                setup: vec![
                    put(&parker, "parked"),
                    put(&k1, "v1"),
                    put(&k3, "v3"),
                    (Call::delete(parker.clone()), true),
                ],
                keys: vec![k1, k2, k4],
                fillers: vec![parker, k3],
                first,
            }
        }
        Layout::F2 => {
            let k1 = find("k1-", &[0, 1, 2], None);
            let (kx, ky) = (find("kx-", &[0, 3], None), find("ky-", &[1, 3], None));
            let f3 = find("f3-", &[], Some(3));
            prescribe(&mut first, 0, vec![Call::put(kx.clone(), b"x".to_vec())]);
            prescribe(&mut first, 1, vec![Call::put(ky.clone(), b"y".to_vec())]);
            World {
                setup: vec![put(&k1, "v1"), put(&f3, "v9")],
                keys: vec![k1, kx, ky],
                fillers: vec![f3],
                first,
            }
        }
        Layout::M2a => m2a_world(&find, first),
        Layout::M3a => m3a_world(&find, first),
        Layout::Random => {
            let mut rng = StdRng::seed_from_u64(seed ^ 0x6b65_7973);
            let keys = (0..scenario.keys)
                .map(|i| name('k', i, rng.gen_range(scenario.key_len.clone())))
                .collect();
            let fillers: Vec<Vec<u8>> = (0..scenario.fillers)
                .map(|i| name('f', i, rng.gen_range(scenario.key_len.clone())))
                .collect();
            World {
                setup: fillers
                    .iter()
                    .map(|f| (Call::put(f.clone(), b"filler".to_vec()), false))
                    .collect(),
                keys,
                fillers,
                first,
            }
        }
    }
}

/// Names a key `{prefix}{i}` whose candidates are exactly the given global
/// slots, or whose first candidate is the given one (see [`world`]).
type FindKey<'a> = dyn Fn(&str, &[u64], Option<u64>) -> Vec<u8> + 'a;

/// The world of [`Layout::M2a`]; `find` names keys by their candidates (see
/// [`world`]).
fn m2a_world(find: &FindKey<'_>, mut first: Vec<Vec<Call>>) -> World {
    let put = |k: &Vec<u8>, v: &str| (Call::put(k.clone(), v.as_bytes().to_vec()), true);
    let (k1, k2) = (find("k1-", &[0, 1], None), find("k2-", &[0, 2], None));
    prescribe(&mut first, 0, vec![Call::put(k1.clone(), b"v5".to_vec())]);
    prescribe(
        &mut first,
        1,
        vec![
            Call::delete(k2.clone()),
            // Another length than v5: a write's forward pass, which
            // reads no values, can tell the two apart.
            Call::put(k1.clone(), b"v6.".to_vec()),
            Call::get(k1.clone()),
        ],
    );
    prescribe(&mut first, 2, vec![Call::delete(k1.clone())]);
    World {
        setup: vec![put(&k2, "v2")],
        keys: vec![k1, k2],
        fillers: Vec::new(),
        first,
    }
}

/// The world of [`Layout::M3a`] (see [`m2a_world`]).
fn m3a_world(find: &FindKey<'_>, mut first: Vec<Vec<Call>>) -> World {
    let put = |k: &Vec<u8>, v: &str| (Call::put(k.clone(), v.as_bytes().to_vec()), true);
    let (k1, k2) = (find("k1-", &[0, 1], None), find("k2-", &[1, 2], None));
    let (parker, filler) = (find("t-", &[], Some(0)), find("f-", &[], Some(2)));
    prescribe(&mut first, 0, vec![Call::delete(k1.clone())]);
    prescribe(&mut first, 1, vec![Call::put(k2.clone(), b"v5".to_vec())]);
    World {
        setup: vec![
            put(&parker, "parked"),
            put(&k1, "v1"),
            put(&filler, "v9"),
            (Call::delete(parker.clone()), true),
        ],
        keys: vec![k1, k2],
        fillers: vec![parker, filler],
        first,
    }
}

/// Makes `calls` the first operations of `client`, if it exists.
fn prescribe(first: &mut [Vec<Call>], client: usize, calls: Vec<Call>) {
    if let Some(f) = first.get_mut(client) {
        *f = calls;
    }
}

/// A value of a length drawn from `range` that starts with `tag`.
pub(super) fn value(rng: &mut StdRng, range: &RangeInclusive<usize>, tag: &str) -> Vec<u8> {
    let mut v = tag.as_bytes().to_vec();
    let len = rng.gen_range(range.clone()).max(v.len());
    v.resize(len, b'.');
    v
}
