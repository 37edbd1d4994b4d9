use super::*;
use crate::history::{Call, History, Operation, Ret};
use std::collections::BTreeMap;

fn get(client: u64, key: &str, inv: u64, resp: u64, value: Option<&str>) -> Operation {
    Operation::returned(
        client,
        Call::get(key),
        inv,
        resp,
        Ret::Get(value.map(|v| v.as_bytes().to_vec())),
    )
}

fn put(client: u64, key: &str, value: &str, inv: u64, resp: u64) -> Operation {
    Operation::returned(client, Call::put(key, value), inv, resp, Ret::Put)
}

fn del(client: u64, key: &str, inv: u64, resp: u64, existed: bool) -> Operation {
    Operation::returned(client, Call::delete(key), inv, resp, Ret::Delete(existed))
}

fn put_unknown(client: u64, key: &str, value: &str, inv: u64) -> Operation {
    Operation::unknown(client, Call::put(key, value), inv)
}

fn del_unknown(client: u64, key: &str, inv: u64) -> Operation {
    Operation::unknown(client, Call::delete(key), inv)
}

fn put_undecided(client: u64, key: &str, value: &str, inv: u64, resp: u64) -> Operation {
    Operation {
        client,
        call: Call::put(key, value),
        invoked: inv,
        outcome: Outcome::Undecided { at: resp },
    }
}

fn del_undecided(client: u64, key: &str, inv: u64, resp: u64) -> Operation {
    Operation {
        client,
        call: Call::delete(key),
        invoked: inv,
        outcome: Outcome::Undecided { at: resp },
    }
}

fn ok(ops: Vec<Operation>) {
    let h = History::from(ops);
    if let Err(e) = check(&h) {
        panic!("expected linearizable, got:\n{e}");
    }
}

fn violation(ops: Vec<Operation>) -> Violation {
    match check(&History::from(ops)) {
        Err(CheckError::Violation(v)) => *v,
        other => panic!("expected a violation, got {other:?}"),
    }
}

// ---- known good -------------------------------------------------------

#[test]
fn empty_history_is_linearizable() {
    ok(vec![]);
}

#[test]
fn sequential_history_is_linearizable() {
    ok(vec![
        get(1, "a", 0, 1, None),
        put(1, "a", "1", 2, 3),
        get(2, "a", 4, 5, Some("1")),
        put(2, "a", "2", 6, 7),
        get(1, "a", 8, 9, Some("2")),
        del(1, "a", 10, 11, true),
        get(2, "a", 12, 13, None),
        del(2, "a", 14, 15, false),
        put(1, "a", "3", 16, 17),
        get(1, "a", 18, 19, Some("3")),
    ]);
}

#[test]
fn overlapping_puts_may_take_effect_in_either_order() {
    for last in ["1", "2"] {
        ok(vec![
            put(1, "a", "1", 0, 10),
            put(2, "a", "2", 1, 9),
            get(3, "a", 11, 12, Some(last)),
            get(3, "a", 13, 14, Some(last)),
        ]);
    }
}

#[test]
fn overlapping_puts_take_effect_once() {
    // Whichever order they took, the register cannot flip back afterwards.
    let v = violation(vec![
        put(1, "a", "1", 0, 10),
        put(2, "a", "2", 1, 9),
        get(3, "a", 11, 12, Some("1")),
        get(3, "a", 13, 14, Some("2")),
    ]);
    assert_eq!(v.blocked.index, 3);
}

#[test]
fn read_concurrent_with_put_sees_old_or_new_value() {
    for seen in [None, Some("1")] {
        ok(vec![put(1, "a", "1", 0, 10), get(2, "a", 2, 4, seen)]);
    }
    // Reads overlapping each other and the put may disagree only in the
    // order "old, then new".
    ok(vec![
        put(1, "a", "1", 0, 10),
        get(2, "a", 1, 5, Some("1")),
        get(3, "a", 2, 6, None),
    ]);
    violation(vec![
        put(1, "a", "1", 0, 10),
        get(2, "a", 1, 3, Some("1")),
        get(3, "a", 4, 6, None),
    ]);
}

#[test]
fn responses_and_invocations_at_the_same_instant_are_concurrent() {
    ok(vec![put(1, "a", "1", 0, 5), get(2, "a", 5, 6, None)]);
    violation(vec![put(1, "a", "1", 0, 5), get(2, "a", 6, 7, None)]);
}

#[test]
fn unknown_put_may_have_taken_effect() {
    ok(vec![
        put(1, "a", "1", 0, 1),
        put_unknown(2, "a", "2", 2),
        get(1, "a", 10, 11, Some("2")),
        get(3, "a", 12, 13, Some("2")),
    ]);
}

#[test]
fn unknown_put_may_never_take_effect() {
    ok(vec![
        put(1, "a", "1", 0, 1),
        put_unknown(2, "a", "2", 2),
        get(1, "a", 10, 11, Some("1")),
        get(3, "a", 100, 101, Some("1")),
    ]);
}

#[test]
fn unknown_put_may_take_effect_long_after_its_invocation() {
    ok(vec![
        put_unknown(2, "a", "2", 0),
        get(1, "a", 10, 11, None),
        put(1, "a", "1", 12, 13),
        get(1, "a", 14, 15, Some("1")),
        get(1, "a", 16, 17, Some("2")),
    ]);
}

#[test]
fn unknown_put_takes_effect_at_most_once() {
    violation(vec![
        put(1, "a", "1", 0, 1),
        put_unknown(2, "a", "2", 2),
        get(1, "a", 10, 11, Some("2")),
        get(1, "a", 12, 13, Some("1")),
    ]);
}

#[test]
fn unknown_put_cannot_take_effect_before_its_invocation() {
    let v = violation(vec![
        get(1, "a", 0, 1, Some("2")),
        put_unknown(2, "a", "2", 5),
    ]);
    assert_eq!(v.blocked.index, 0);
}

#[test]
fn unknown_delete_may_or_may_not_take_effect() {
    for seen in [None, Some("1")] {
        ok(vec![
            put(1, "a", "1", 0, 1),
            del_unknown(2, "a", 2),
            get(1, "a", 10, 11, seen),
        ]);
    }
    violation(vec![
        put(1, "a", "1", 0, 1),
        del_unknown(2, "a", 2),
        get(1, "a", 10, 11, None),
        get(1, "a", 12, 13, Some("1")),
    ]);
}

#[test]
fn unknown_get_constrains_nothing() {
    ok(vec![
        Operation::unknown(1, Call::get("a"), 0),
        put(1, "a", "1", 2, 3),
    ]);
}

#[test]
fn keys_are_independent() {
    ok(vec![
        put(1, "a", "1", 0, 10),
        put(2, "b", "1", 0, 10),
        get(1, "a", 11, 12, Some("1")),
        get(2, "b", 11, 12, Some("1")),
        del(1, "b", 13, 14, true),
        get(2, "a", 15, 16, Some("1")),
        get(2, "b", 15, 16, None),
    ]);
}

// ---- known bad --------------------------------------------------------

#[test]
fn stale_read_after_completed_put_is_a_violation() {
    let v = violation(vec![
        put(1, "a", "1", 0, 1),
        put(1, "a", "2", 2, 3),
        get(2, "a", 4, 5, Some("1")),
    ]);
    assert_eq!(v.key, b"a");
    assert_eq!(v.key_ops, 3);
    assert_eq!(v.blocked.index, 2);
    assert_eq!(v.longest_prefix, 2);
    assert_eq!(v.state.as_deref(), Some(&b"2"[..]));
    let tail: Vec<usize> = v.prefix_tail.iter().map(|o| o.index).collect();
    assert_eq!(tail, [0, 1]);
}

#[test]
fn read_of_a_value_never_written_is_a_violation() {
    let v = violation(vec![put(1, "a", "1", 0, 1), get(2, "a", 0, 5, Some("9"))]);
    assert_eq!(v.blocked.index, 1);
}

#[test]
fn read_of_a_value_written_to_another_key_is_a_violation() {
    let v = violation(vec![
        put(1, "a", "1", 0, 1),
        put(1, "b", "2", 0, 1),
        get(2, "a", 2, 3, Some("2")),
    ]);
    assert_eq!(v.key, b"a");
}

#[test]
fn delete_reporting_an_absent_key_existed_is_a_violation() {
    violation(vec![del(1, "a", 0, 1, true)]);
    violation(vec![
        put(1, "a", "1", 0, 1),
        del(1, "a", 2, 3, true),
        del(2, "a", 4, 5, true),
    ]);
}

#[test]
fn delete_reporting_a_present_key_absent_is_a_violation() {
    violation(vec![put(1, "a", "1", 0, 1), del(2, "a", 2, 3, false)]);
}

#[test]
fn lost_acknowledged_put_is_a_violation() {
    let v = violation(vec![
        get(1, "a", 0, 1, None),
        put(1, "a", "1", 2, 3),
        get(2, "a", 4, 5, None),
    ]);
    assert_eq!(v.blocked.index, 2);
    assert!(v.to_string().contains("get(\"a\") -> none [4, 5]"), "{v}");
}

#[test]
fn the_first_violating_key_is_reported() {
    let v = violation(vec![
        put(1, "b", "1", 0, 1),
        get(1, "b", 2, 3, None),
        put(1, "c", "1", 0, 1),
        get(1, "c", 2, 3, None),
        put(1, "a", "1", 0, 1),
        get(1, "a", 2, 3, Some("1")),
    ]);
    assert_eq!(v.key, b"b");
}

#[test]
fn report_shows_the_prefix_and_the_remaining_candidates() {
    // After put(1), put(0) and get -> 0, neither get -> 1 nor get -> 2 can
    // take effect; get -> 1 responds first.
    let v = violation(vec![
        put(1, "a", "1", 0, 1),
        put(1, "a", "0", 2, 3),
        get(2, "a", 4, 10, Some("1")),
        get(3, "a", 4, 10, Some("2")),
        get(4, "a", 4, 5, Some("0")),
    ]);
    assert_eq!(v.longest_prefix, 3);
    assert_eq!(v.state.as_deref(), Some(&b"0"[..]));
    let tail: Vec<usize> = v.prefix_tail.iter().map(|o| o.index).collect();
    assert_eq!(tail, [0, 1, 4]);
    assert_eq!(v.blocked.index, 2);
    let concurrent: Vec<usize> = v.concurrent.iter().map(|o| o.index).collect();
    assert_eq!(concurrent, [3]);
    let text = v.to_string();
    assert!(text.starts_with("key \"a\": its 5 operations"), "{text}");
    assert!(
        text.contains("#2 client 2 get(\"a\") -> \"1\" [4, 10]"),
        "{text}"
    );
    assert!(
        text.contains("#3 client 3 get(\"a\") -> \"2\" [4, 10]"),
        "{text}"
    );
}

#[test]
fn report_shows_where_unknown_operations_took_effect() {
    let v = violation(vec![
        put(1, "a", "1", 0, 1),
        put_unknown(2, "a", "2", 2),
        get(1, "a", 10, 11, Some("2")),
        get(1, "a", 12, 13, Some("1")),
    ]);
    let tail: Vec<usize> = v.prefix_tail.iter().map(|o| o.index).collect();
    assert_eq!(tail, [0, 1, 2]);
    assert_eq!(v.longest_prefix, 2);
    assert_eq!(v.blocked.index, 3);
}

#[test]
fn malformed_operations_are_refused() {
    let wrong_kind = Operation::returned(1, Call::get("a"), 0, 1, Ret::Put);
    assert!(matches!(
        check(&History::from(vec![put(1, "a", "1", 0, 1), wrong_kind])),
        Err(CheckError::Malformed { index: 1, .. })
    ));
    let backwards = put(1, "a", "1", 5, 4);
    assert!(matches!(
        check(&History::from(vec![backwards])),
        Err(CheckError::Malformed { index: 0, .. })
    ));
}

// ---- scale ------------------------------------------------------------

/// A long, nearly sequential history of one key: each operation overlaps
/// its neighbours, and every tenth PUT has an unknown outcome (half of them
/// took effect).
fn long_history(ops: u64) -> History {
    let mut h = History::new();
    let mut current: Option<String> = None;
    for i in 0..ops {
        let (inv, resp) = (10 * i, 10 * i + 15);
        let client = i % 4;
        match i % 5 {
            0 | 2 => {
                let v = format!("v{i}");
                if i % 50 == 0 {
                    h.push(put_unknown(client, "k", &v, inv));
                    if i % 100 == 0 {
                        current = Some(v);
                    }
                } else {
                    h.push(put(client, "k", &v, inv, resp));
                    current = Some(v);
                }
            }
            4 if i % 15 == 4 => {
                h.push(del(client, "k", inv, resp, current.is_some()));
                current = None;
            }
            _ => h.push(get(client, "k", inv, resp, current.as_deref())),
        }
    }
    h
}

#[test]
fn long_nearly_sequential_history_is_checked() {
    let h = long_history(5000);
    check(&h).unwrap();
}

#[test]
fn long_history_with_a_late_stale_read_is_a_violation() {
    let mut h = long_history(5000);
    h.push(get(9, "k", 1_000_000, 1_000_001, Some("v2")));
    match check(&h) {
        Err(CheckError::Violation(v)) => {
            assert_eq!(v.blocked.index, 5000);
            assert!(v.longest_prefix > 4000);
        }
        other => panic!("expected a violation, got {other:?}"),
    }
}

// ---- randomized comparison with brute force -----------------------------

/// splitmix64: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix64(self.0)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Whether some order of the known operations (and a subset of the unknown
/// ones) respects real time and the sequential semantics of a map.
fn brute_force(h: &History) -> bool {
    fn go(
        ops: &[Operation],
        remaining: &mut Vec<usize>,
        map: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    ) -> bool {
        if remaining.iter().all(|&i| ops[i].responded().is_none()) {
            return true;
        }
        for pos in 0..remaining.len() {
            let o = &ops[remaining[pos]];
            let preceded = remaining
                .iter()
                .any(|&p| p != remaining[pos] && ops[p].responded().is_some_and(|r| r < o.invoked));
            if preceded {
                continue;
            }
            let key = o.call.key().to_vec();
            let before = map.get(&key).cloned();
            let possible = match (&o.call, o.ret()) {
                (Call::Get(_), Some(Ret::Get(v))) => *v == before,
                (Call::Delete(_), Some(Ret::Delete(existed))) => *existed == before.is_some(),
                _ => true,
            };
            if !possible {
                continue;
            }
            match &o.call {
                Call::Put(_, v) => {
                    map.insert(key.clone(), v.clone());
                }
                Call::Delete(_) => {
                    map.remove(&key);
                }
                Call::Get(_) => {}
            }
            let taken = remaining.remove(pos);
            let found = go(ops, remaining, map);
            remaining.insert(pos, taken);
            match before {
                Some(v) => map.insert(key, v),
                None => map.remove(&key),
            };
            if found {
                return true;
            }
        }
        false
    }
    let mut remaining: Vec<usize> = (0..h.len()).collect();
    go(h.ops(), &mut remaining, &mut BTreeMap::new())
}

/// A random history: operations on random intervals take effect at a random
/// instant inside them (unknown ones after their invocation, or never), and
/// return what a map would; then, if `corrupt`, half the time one result is
/// corrupted.
/// Random history parameters.
struct Shape {
    ops: usize,
    keys: u64,
    /// Invocations fall in `0..span`.
    span: u64,
    /// One operation in this many has an unknown outcome.
    unknown_one_in: u64,
    /// Whether to corrupt one result half the time.
    corrupt: bool,
}

fn random_history(rng: &mut Rng, shape: &Shape) -> History {
    let Shape {
        ops,
        keys,
        span,
        unknown_one_in,
        corrupt,
    } = *shape;
    struct Gen {
        call: Call,
        inv: u64,
        resp: u64,
        unknown: bool,
        at: Option<u64>,
    }
    let mut gens = Vec::new();
    for _ in 0..ops {
        let key = vec![b'a' + rng.below(keys) as u8];
        let value = vec![b'1' + rng.below(3) as u8];
        let call = match rng.below(3) {
            0 => Call::Get(key),
            1 => Call::Put(key, value),
            _ => Call::Delete(key),
        };
        let inv = rng.below(span);
        let resp = inv + rng.below(6);
        let unknown = rng.below(unknown_one_in) == 0;
        let at = if unknown {
            (rng.below(2) == 0).then(|| inv + rng.below(span))
        } else {
            Some(inv + rng.below(resp - inv + 1))
        };
        gens.push(Gen {
            call,
            inv,
            resp,
            unknown,
            at,
        });
    }
    let mut order: Vec<usize> = (0..gens.len()).filter(|&i| gens[i].at.is_some()).collect();
    order.sort_by_key(|&i| gens[i].at);
    let mut rets = vec![None; gens.len()];
    let mut map: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for i in order {
        rets[i] = Some(match &gens[i].call {
            Call::Get(k) => Ret::Get(map.get(k).cloned()),
            Call::Put(k, v) => {
                map.insert(k.clone(), v.clone());
                Ret::Put
            }
            Call::Delete(k) => Ret::Delete(map.remove(k).is_some()),
        });
    }
    let mut h: History = gens
        .iter()
        .zip(rets)
        .enumerate()
        .map(|(client, (g, ret))| {
            if g.unknown {
                Operation::unknown(client as u64, g.call.clone(), g.inv)
            } else {
                let ret = ret.expect("known operations took effect");
                Operation::returned(client as u64, g.call.clone(), g.inv, g.resp, ret)
            }
        })
        .collect();
    if corrupt && rng.below(2) == 0 {
        let i = rng.below(ops as u64) as usize;
        let op = &h.ops()[i];
        if let Outcome::Returned { at, ret } = &op.outcome {
            let corrupted = match ret {
                Ret::Get(_) if rng.below(3) == 0 => Ret::Get(None),
                Ret::Get(_) => Ret::Get(Some(vec![b'1' + rng.below(3) as u8])),
                Ret::Delete(existed) => Ret::Delete(!existed),
                Ret::Put => Ret::Put,
            };
            let replaced =
                Operation::returned(op.client, op.call.clone(), op.invoked, *at, corrupted);
            let mut ops = h.ops().to_vec();
            ops[i] = replaced;
            h = History::from(ops);
        }
    }
    h
}

fn compare_with_brute_force(seed: u64, cases: usize, unknown_one_in: u64) {
    let mut rng = Rng(seed);
    let (mut good, mut bad) = (0, 0);
    for case in 0..cases {
        let shape = Shape {
            ops: 1 + rng.below(7) as usize,
            keys: 1 + rng.below(2),
            span: 12,
            unknown_one_in,
            corrupt: true,
        };
        let h = random_history(&mut rng, &shape);
        let expected = brute_force(&h);
        let got = check(&h);
        assert_eq!(
            got.is_ok(),
            expected,
            "case {case}: checker says {got:?}, brute force says {expected} for {h:#?}"
        );
        if expected {
            good += 1;
        } else {
            bad += 1;
        }
    }
    // The generator must exercise both answers.
    assert!(
        good > cases / 20 && bad > cases / 20,
        "good {good}, bad {bad}"
    );
}

#[test]
fn checker_agrees_with_brute_force_on_small_random_histories() {
    compare_with_brute_force(42, 3000, 6);
}

#[test]
fn checker_agrees_with_brute_force_when_many_outcomes_are_unknown() {
    compare_with_brute_force(4242, 3000, 2);
}

#[test]
fn random_uncorrupted_histories_with_heavy_overlap_pass() {
    let mut rng = Rng(7);
    let shape = Shape {
        ops: 400,
        keys: 3,
        span: 300,
        unknown_one_in: 8,
        corrupt: false,
    };
    for _ in 0..40 {
        let h = random_history(&mut rng, &shape);
        if let Err(e) = check(&h) {
            panic!("{e}");
        }
    }
}

// ---- undecided: unknown until a known response ------------------------

#[test]
fn an_undecided_put_may_have_taken_effect_or_not() {
    for seen in [Some("2"), Some("1")] {
        ok(vec![
            put(1, "a", "1", 0, 1),
            put_undecided(2, "a", "2", 2, 5),
            get(3, "a", 6, 7, seen),
            get(3, "a", 8, 9, seen),
        ]);
    }
}

#[test]
fn an_undecided_put_cannot_take_effect_after_its_response() {
    // The same history with an unknown PUT is linearizable (it takes
    // effect between the two reads); an undecided one is not.
    let undecided = vec![
        put(1, "a", "1", 0, 1),
        put_undecided(2, "a", "2", 2, 5),
        get(3, "a", 6, 7, Some("1")),
        get(3, "a", 8, 9, Some("2")),
    ];
    let v = violation(undecided);
    assert_eq!(v.key, b"a".to_vec());
    ok(vec![
        put(1, "a", "1", 0, 1),
        put_unknown(2, "a", "2", 2),
        get(3, "a", 6, 7, Some("1")),
        get(3, "a", 8, 9, Some("2")),
    ]);
}

#[test]
fn an_undecided_put_may_take_effect_under_a_concurrent_read() {
    ok(vec![
        put(1, "a", "1", 0, 1),
        get(3, "a", 2, 9, Some("2")),
        put_undecided(2, "a", "2", 3, 5),
        get(3, "a", 10, 11, Some("2")),
    ]);
}

#[test]
fn an_undecided_delete_before_a_known_put_is_overwritten() {
    ok(vec![
        put(1, "a", "1", 0, 1),
        del_undecided(2, "a", 2, 5),
        get(3, "a", 6, 7, None),
        put(1, "a", "3", 8, 9),
        get(3, "a", 10, 11, Some("3")),
    ]);
    violation(vec![
        put(1, "a", "1", 0, 1),
        del_undecided(2, "a", 2, 5),
        get(3, "a", 6, 7, Some("1")),
        get(3, "a", 8, 9, None),
    ]);
}
