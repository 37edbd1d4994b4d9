//! Location hints (docs/design.md#location-hints): what a hinted GET costs
//! in verbs and round trips, what a stale or old hint costs, and that a
//! hint is never an answer.

mod common;

use common::key_away_from;
use nessie::clock::{Clock, WallClock};
use nessie::data::dte_addr;
use nessie::index::KeyHasher;
use nessie::layout::{dte, Ite, IteKind, SlotRef};
use nessie::{Client, Cluster, Config, OpStats, Optimizations};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The cache off, so that every hinted GET reads its entry.
fn config() -> Config {
    Config {
        index_slots_per_node: 4096,
        data_bytes_per_node: 16 << 20,
        value_size_max: 16 << 10,
        optimizations: Optimizations {
            cache: false,
            ..Optimizations::default()
        },
        ..Config::default()
    }
}

/// A cluster of `config`, a writer on node 1, a reader on node 0, and a
/// key whose candidates avoid node 0 (so the reader's index reads are
/// remote).
fn writer_reader_key(config: Config) -> (Cluster, Client, Client, Vec<u8>) {
    let key = key_away_from(&config, 0);
    let cluster = Cluster::local(config).unwrap();
    let writer = cluster.client(1).unwrap();
    let reader = cluster.client(0).unwrap();
    (cluster, writer, reader, key)
}

/// The entry the first occupied candidate of `key` names now.
fn linked_entry(cluster: &Cluster, config: &Config, key: &[u8]) -> SlotRef {
    let fabric = cluster.fabric();
    KeyHasher::new(config)
        .candidates(key)
        .iter()
        .find_map(|c| {
            let mut w = [0u8; 8];
            fabric.read(c.addr(), &mut w).unwrap();
            match Ite(u64::from_le_bytes(w)).kind() {
                IteKind::Occupied { dte, .. } => Some(dte),
                _ => None,
            }
        })
        .unwrap()
}

/// What one GET by `c` of `key` answered and cost.
fn get(c: &mut Client, key: &[u8]) -> (Option<Vec<u8>>, OpStats) {
    let before = c.stats().get;
    let got = c.get(key).unwrap();
    let after = c.stats().get;
    let mut d = after;
    d.verbs = after.verbs - before.verbs;
    d.hint_hits = after.hint_hits - before.hint_hits;
    d.hint_misses = after.hint_misses - before.hint_misses;
    d.values_landed = after.values_landed - before.values_landed;
    d.cache_hits = after.cache_hits - before.cache_hits;
    d.retries.torn = after.retries.torn - before.retries.torn;
    (got, d)
}

#[test]
fn a_hinted_get_reads_index_and_entry_in_one_round_trip() {
    let config = config();
    let key = key_away_from(&config, 0);
    let slot = config.class_slot_bytes(config.class_for(16 << 10).unwrap()) as u64;
    let cluster = Cluster::local(config).unwrap();
    let mut writer = cluster.client(1).unwrap();
    let mut reader = cluster.client(0).unwrap();
    let value = vec![7u8; 16 << 10];
    writer.put(&key, &value).unwrap();

    // No hint yet: the ITE batch, then the entry.
    let (got, first) = get(&mut reader, &key);
    assert_eq!(got.as_deref(), Some(&value[..]));
    assert_eq!((first.verbs.reads, first.verbs.round_trips), (4, 2));
    assert_eq!((first.hint_hits, first.hint_misses), (0, 0));

    // Hinted: the same reads and bytes in one batch.
    let (got, hinted) = get(&mut reader, &key);
    assert_eq!(got.as_deref(), Some(&value[..]));
    assert_eq!((hinted.verbs.reads, hinted.verbs.round_trips), (4, 1));
    assert_eq!(hinted.verbs.read_bytes, 24 + slot);
    assert_eq!((hinted.hint_hits, hinted.hint_misses), (1, 0));
    assert_eq!(
        hinted.values_landed, 1,
        "the value lands in the caller's Vec"
    );
}

#[test]
fn a_stale_hint_costs_one_read_and_answers_the_new_value() {
    let (_cluster, mut writer, mut reader, key) = writer_reader_key(config());
    writer.put(&key, b"old").unwrap();
    assert_eq!(get(&mut reader, &key).0.as_deref(), Some(&b"old"[..]));
    writer.put(&key, b"new").unwrap();

    // The hinted entry is the old one, still whole: no ITE holds it now.
    let (got, stale) = get(&mut reader, &key);
    assert_eq!(got.as_deref(), Some(&b"new"[..]));
    assert_eq!((stale.hint_hits, stale.hint_misses), (0, 1));
    assert_eq!((stale.verbs.reads, stale.verbs.round_trips), (5, 2));

    // The hint follows the answer.
    let (got, hit) = get(&mut reader, &key);
    assert_eq!(got.as_deref(), Some(&b"new"[..]));
    assert_eq!((hit.hint_hits, hit.verbs.round_trips), (1, 1));
}

#[test]
fn a_deleted_key_is_absent_and_its_hint_goes() {
    let (_cluster, mut writer, mut reader, key) = writer_reader_key(config());
    writer.put(&key, b"v").unwrap();
    assert!(get(&mut reader, &key).0.is_some());
    assert!(writer.delete(&key).unwrap());

    let (got, gone) = get(&mut reader, &key);
    assert_eq!(got, None);
    assert_eq!(gone.hint_misses, 1);
    // Absent with no hint: the ITE batch and the reverse pass only.
    let (got, miss) = get(&mut reader, &key);
    assert_eq!(got, None);
    assert_eq!((miss.verbs.reads, miss.hint_misses), (6, 0));
}

#[test]
fn a_writer_keeps_a_hint_of_what_it_committed() {
    let config = config();
    let key = key_away_from(&config, 0);
    let cluster = Cluster::local(config).unwrap();
    let mut c = cluster.client(0).unwrap();
    c.put(&key, b"mine").unwrap();
    let (got, own) = get(&mut c, &key);
    assert_eq!(got.as_deref(), Some(&b"mine"[..]));
    assert_eq!((own.hint_hits, own.verbs.round_trips), (1, 1));
    assert!(c.delete(&key).unwrap());
    let (got, after_delete) = get(&mut c, &key);
    assert_eq!(got, None);
    assert_eq!(after_delete.verbs.reads, 6, "a DELETE leaves no hint");
}

#[test]
fn with_hints_off_a_get_reads_as_before() {
    let config = Config {
        optimizations: Optimizations {
            hints: false,
            ..config().optimizations
        },
        ..config()
    };
    let key = key_away_from(&config, 0);
    let cluster = Cluster::local(config).unwrap();
    let mut writer = cluster.client(1).unwrap();
    let mut reader = cluster.client(0).unwrap();
    writer.put(&key, b"v").unwrap();
    for _ in 0..2 {
        let (got, g) = get(&mut reader, &key);
        assert_eq!(got.as_deref(), Some(&b"v"[..]));
        assert_eq!((g.verbs.round_trips, g.hint_hits + g.hint_misses), (2, 0));
    }
}

/// The host's clocks, both moved forward together by a settable leap; a
/// frozen one's monotonic clock moves by the leap alone.
#[derive(Debug, Default)]
struct Leaping {
    leap: AtomicU64,
    frozen: bool,
}

impl Clock for Leaping {
    fn now_us(&self) -> u64 {
        WallClock::default().now_us() + self.leap.load(Ordering::SeqCst)
    }
    fn mono_us(&self) -> u64 {
        let base = if self.frozen {
            1_000_000
        } else {
            WallClock::default().mono_us()
        };
        base + self.leap.load(Ordering::SeqCst)
    }
    fn sleep(&self, d: Duration) {
        WallClock::default().sleep(d);
    }
}

/// One [`Leaping`] clock for each of `nodes` nodes, all the same.
fn leaping_clocks(nodes: usize, frozen: bool) -> (Arc<Leaping>, Vec<Arc<dyn Clock>>) {
    let leap = Arc::new(Leaping {
        leap: AtomicU64::new(0),
        frozen,
    });
    let clocks = (0..nodes)
        .map(|_| Arc::clone(&leap) as Arc<dyn Clock>)
        .collect();
    (leap, clocks)
}

/// A reader with a hint to a key whose value then rots in memory (its first
/// word flipped in place), on [`Leaping`] clocks (`frozen` or not) shared
/// by every node; returns the reader, the key, the rotted value, the clock
/// and the cluster, which must outlive the reader.
fn rotted_value_with_a_hint(frozen: bool) -> (Client, Vec<u8>, Vec<u8>, Arc<Leaping>, Cluster) {
    let config = config();
    let key = key_away_from(&config, 0);
    let (leap, clocks) = leaping_clocks(config.nodes, frozen);
    let cluster = Cluster::builder(config.clone())
        .clocks(clocks)
        .build()
        .unwrap();
    let mut writer = cluster.client(1).unwrap();
    let mut reader = cluster.client(0).unwrap();
    writer.put(&key, b"a value that will rot").unwrap();
    assert!(get(&mut reader, &key).0.is_some());

    let fabric = cluster.fabric();
    let at = linked_entry(&cluster, &config, &key);
    let slot = config.class_slot_bytes(usize::from(at.class));
    let value_at = dte_addr(at, slot).add(dte::value_offset(key.len()) as u64);
    let mut word = [0u8; 8];
    fabric.read(value_at, &mut word).unwrap();
    word[0] ^= 0xff;
    fabric.write(value_at, &word).unwrap();
    let mut rotted = b"a value that will rot".to_vec();
    rotted[0] ^= 0xff;
    (reader, key, rotted, leap, cluster)
}

/// A value that rots in memory is answered unverified through a hint seen
/// within an expiry (as by any fresh read under `AfterStall`), and verified
/// through an older one: the generation may have come round since.
#[test]
fn a_hint_older_than_the_expiry_has_its_answer_verified() {
    let (mut reader, key, rotted, leap, _cluster) = rotted_value_with_a_hint(false);
    let (got, fresh) = get(&mut reader, &key);
    assert_eq!(got.as_deref(), Some(&rotted[..]));
    assert_eq!((fresh.hint_hits, fresh.retries.torn), (1, 0));

    leap.leap
        .fetch_add(2 * config().expiry.as_micros() as u64, Ordering::SeqCst);
    let (got, old) = get(&mut reader, &key);
    // Verified, found torn; the pass without a hint reads it fresh.
    assert_eq!(got.as_deref(), Some(&rotted[..]));
    assert_eq!((old.hint_hits, old.retries.torn), (1, 1));
}

/// The boundary, on a monotonic clock that stands still but for the
/// leaps: a hint seen exactly an expiry ago is trusted unverified, one a
/// microsecond older is verified.
#[test]
fn a_hint_is_verified_only_past_an_expiry() {
    let expiry = config().expiry.as_micros() as u64;
    let (mut reader, key, rotted, leap, _cluster) = rotted_value_with_a_hint(true);
    leap.leap.store(expiry, Ordering::SeqCst);
    let (got, at) = get(&mut reader, &key);
    assert_eq!(got.as_deref(), Some(&rotted[..]));
    assert_eq!((at.hint_hits, at.retries.torn), (1, 0));

    // That GET's answer saw the hint again: a full expiry and one µs more.
    leap.leap.store(2 * expiry + 1, Ordering::SeqCst);
    let (got, past) = get(&mut reader, &key);
    assert_eq!(got.as_deref(), Some(&rotted[..]));
    assert_eq!((past.hint_hits, past.retries.torn), (1, 1));
}

/// What one PUT by `c` cost.
fn put(c: &mut Client, key: &[u8], value: &[u8]) -> OpStats {
    let before = c.stats().put;
    c.put(key, value).unwrap();
    let after = c.stats().put;
    let mut d = after;
    d.verbs = after.verbs - before.verbs;
    d.hint_hits = after.hint_hits - before.hint_hits;
    d.hint_misses = after.hint_misses - before.hint_misses;
    d
}

/// A PUT over another node's entry reads that entry's header in the batch
/// of the key's ITEs when its hint names it: one round trip fewer, the
/// same verbs.
#[test]
fn a_hinted_put_reads_the_holders_header_with_the_index() {
    let (_cluster, mut other, mut c, key) = writer_reader_key(config());
    let mut unhinted = None;
    for hinted in [false, true] {
        other.put(&key, b"theirs").unwrap();
        if hinted {
            assert!(get(&mut c, &key).0.is_some(), "the GET leaves a hint");
        }
        let p = put(&mut c, &key, b"mine");
        assert_eq!(p.hint_hits, u64::from(hinted));
        let u = *unhinted.get_or_insert(p.verbs);
        if hinted {
            assert_eq!(p.verbs.round_trips + 1, u.round_trips, "{p:?} {u:?}");
            assert_eq!((p.verbs.reads, p.verbs.cas), (u.reads, u.cas));
        }
        assert_eq!(get(&mut other, &key).0.as_deref(), Some(&b"mine"[..]));
    }
}

/// A stale hint costs a PUT its header read and nothing else: the PUT
/// replaces what the index holds.
#[test]
fn a_put_with_a_stale_hint_replaces_the_present_version() {
    let (_cluster, mut other, mut c, key) = writer_reader_key(config());
    other.put(&key, b"1").unwrap();
    assert!(get(&mut c, &key).0.is_some());
    other.put(&key, b"2").unwrap();
    let p = put(&mut c, &key, b"3");
    assert_eq!((p.hint_hits, p.hint_misses), (0, 1));
    assert_eq!(get(&mut other, &key).0.as_deref(), Some(&b"3"[..]));
    // Debug builds assert that each replaced version is staged once.
    assert!(c.delete(&key).unwrap());
    assert_eq!(get(&mut other, &key).0, None);
}

/// With the cache on, an entry the cache holds answers from the ITE read
/// alone, with no hinted read; one the cache let go is read through its
/// hint.
#[test]
fn a_cached_entry_is_not_read_through_its_hint() {
    let config = Config {
        cache_entries: 1,
        optimizations: Optimizations::default(),
        ..config()
    };
    let a = key_away_from(&config, 0);
    let h = KeyHasher::new(&config);
    let b = (0..)
        .map(|i| format!("other-{i}").into_bytes())
        .find(|k| h.candidates(k).iter().all(|c| c.node != 0) && h.candidates(k).len() == 3)
        .unwrap();
    let cluster = Cluster::local(config).unwrap();
    let mut writer = cluster.client(1).unwrap();
    let mut reader = cluster.client(0).unwrap();
    writer.put(&a, b"a").unwrap();
    writer.put(&b, b"b").unwrap();
    assert!(get(&mut reader, &a).0.is_some());
    assert!(
        get(&mut reader, &b).0.is_some(),
        "b takes the cache's one entry"
    );
    let (got, hinted) = get(&mut reader, &a);
    assert_eq!(got.as_deref(), Some(&b"a"[..]));
    assert_eq!((hinted.hint_hits, hinted.cache_hits), (1, 0));
    let (got, cached) = get(&mut reader, &a);
    assert_eq!(got.as_deref(), Some(&b"a"[..]));
    assert_eq!(
        (cached.hint_hits + cached.hint_misses, cached.cache_hits),
        (0, 1)
    );
    assert_eq!(cached.verbs.reads, 3, "the ITE batch alone");
}

/// A hinted batch that took half the expiry or more is not used: a
/// generation could have come round between its two reads.
#[test]
fn a_batch_slower_than_half_the_expiry_is_not_used() {
    let config = config();
    let key = key_away_from(&config, 0);
    let (leap, clocks) = leaping_clocks(config.nodes, false);
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (clock, arm) = (Arc::clone(&leap), Arc::clone(&armed));
    let half = config.expiry.as_micros() as u64 / 2;
    // Once armed, the next READ of a data region first moves the clocks
    // half an expiry forward: a batch that took that long.
    let before_read: common::Hook = Box::new(move |addr| {
        if addr.region != nessie::layout::region::INDEX && arm.swap(false, Ordering::SeqCst) {
            clock.leap.fetch_add(half, Ordering::SeqCst);
        }
    });
    let cluster = Cluster::builder(config)
        .clocks(clocks)
        .wrap_fabric(move |inner| {
            Arc::new(common::Hooked {
                inner,
                before_read,
                before_cas: common::Hooked::none(),
            })
        })
        .build()
        .unwrap();
    let mut writer = cluster.client(1).unwrap();
    let mut reader = cluster.client(0).unwrap();
    writer.put(&key, b"v").unwrap();
    assert!(get(&mut reader, &key).0.is_some());
    let (got, quick) = get(&mut reader, &key);
    assert_eq!((got.as_deref(), quick.hint_hits), (Some(&b"v"[..]), 1));
    armed.store(true, Ordering::SeqCst);
    let (got, slow) = get(&mut reader, &key);
    assert_eq!(got.as_deref(), Some(&b"v"[..]));
    assert_eq!((slow.hint_hits, slow.hint_misses), (0, 1));
}

/// A hinted slot that holds another generation now (its entry was
/// replaced and the slot reused) is a miss, for a GET and for a PUT.
#[test]
fn a_hinted_slot_reused_since_is_a_miss() {
    for reader_puts in [false, true] {
        let config = config();
        let key = key_away_from(&config, 0);
        let cluster = Cluster::local(config.clone()).unwrap();
        let mut writer = cluster.client(1).unwrap();
        let mut reader = cluster.client(0).unwrap();
        writer.put(&key, b"1").unwrap();
        let fabric = cluster.fabric();
        let first = linked_entry(&cluster, &config, &key);
        assert!(get(&mut reader, &key).0.is_some());
        writer.put(&key, b"2").unwrap();
        // A reuse would overwrite the old entry's state word with the next
        // generation's; zeroes name no generation.
        let slot = config.class_slot_bytes(usize::from(first.class));
        fabric.write(dte_addr(first, slot), &[0u8; 8]).unwrap();
        if reader_puts {
            let p = put(&mut reader, &key, b"3");
            assert_eq!((p.hint_hits, p.hint_misses), (0, 1));
            assert_eq!(get(&mut writer, &key).0.as_deref(), Some(&b"3"[..]));
        } else {
            let (got, g) = get(&mut reader, &key);
            assert_eq!(got.as_deref(), Some(&b"2"[..]));
            assert_eq!((g.hint_hits, g.hint_misses), (0, 1));
        }
    }
}
