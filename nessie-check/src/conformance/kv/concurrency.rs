//! Many clients of one store at once.

use super::{local, small_config, value, Store};
use nessie::{Config, Error, KvClient};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// `threads` threads on all nodes run mixed operations on `keys` keys;
/// every value read and every final value must be one somebody wrote, and
/// every node must agree on the final values.
///
/// # Panics
/// On any deviation.
pub fn concurrent_mixed<S: Store>(s: &S, threads: usize, keys: usize, ops: usize) {
    let written: Vec<HashMap<String, Vec<Vec<u8>>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| scope.spawn(move || mixed_operations(s, t, keys, ops)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut c = s.client(0).unwrap();
    for k in 0..keys {
        let key = format!("hot-{k}");
        if let Some(v) = c.get(key.as_bytes()).unwrap() {
            assert!(
                written
                    .iter()
                    .any(|m| m.get(&key).is_some_and(|vs| vs.contains(&v))),
                "{key} holds a value nobody wrote"
            );
        }
        for n in 1..3 {
            let mut other = s.client(n).unwrap();
            let v2 = other.get(key.as_bytes()).unwrap();
            assert_eq!(c.get(key.as_bytes()).unwrap(), v2, "{key}");
        }
    }
}

/// Thread `t` of [`concurrent_mixed`]: returns what it wrote, by key.
fn mixed_operations<S: Store>(
    s: &S,
    t: usize,
    keys: usize,
    ops: usize,
) -> HashMap<String, Vec<Vec<u8>>> {
    let mut c = s.client(t % 3).unwrap();
    let mut mine: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
    let mut x = t as u64 * 7919 + 1;
    for i in 0..ops {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let key = format!("hot-{}", (x >> 33) as usize % keys);
        match (x >> 40) % 4 {
            0 | 1 => {
                let len = [3, 100, 300, 2000][((x >> 50) % 4) as usize];
                let v = value(&format!("t{t}-{i}-"), len);
                c.put(key.as_bytes(), &v).unwrap();
                mine.entry(key).or_default().push(v);
            }
            2 => {
                if let Some(v) = c.get(key.as_bytes()).unwrap() {
                    assert!(
                        v.starts_with(b"t") && v.contains(&b'-'),
                        "read a value nobody wrote: {:?}",
                        String::from_utf8_lossy(&v[..v.len().min(40)])
                    );
                }
            }
            _ => {
                c.delete(key.as_bytes()).unwrap();
            }
        }
    }
    mine
}

/// Same-key writers from many threads: the last write of every thread is
/// ordered, so after all threads finish, the key holds the last value of
/// one of them.
///
/// # Panics
/// On any deviation.
pub fn last_writer_wins<S: Store>(s: &S, threads: usize, rounds: usize) {
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                let mut c = s.client(t % 3).unwrap();
                for r in 0..rounds {
                    c.put(b"contended", format!("t{t}-r{r}").as_bytes())
                        .unwrap();
                }
            });
        }
    });
    let v = s.client(1).unwrap().get(b"contended").unwrap().unwrap();
    let last: Vec<String> = (0..threads)
        .map(|t| format!("t{t}-r{}", rounds - 1))
        .collect();
    assert!(
        last.iter().any(|l| l.as_bytes() == v.as_slice()),
        "{:?}",
        String::from_utf8_lossy(&v)
    );
}

/// One node with a small index and `workers` server workers: inserts
/// displace the resident keys while GETs on three other threads look for
/// them; no GET may miss one. The inserts must displace entries.
///
/// # Panics
/// On any deviation.
pub fn readers_never_miss_moved_keys<S: Store>(workers: usize) {
    let cluster: S = local(Config {
        nodes: 1,
        index_slots_per_node: 64,
        server_workers: workers,
        ..small_config()
    });
    let mut setup = cluster.client(0).unwrap();
    let resident: Vec<String> = (0..16).map(|i| format!("resident-{i}")).collect();
    for k in &resident {
        setup.put(k.as_bytes(), k.as_bytes()).unwrap();
    }
    let done = AtomicBool::new(false);
    let migrations = std::thread::scope(|s| {
        let readers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut c = cluster.client(0).unwrap();
                    let mut rounds = 0;
                    while !done.load(Ordering::Relaxed) || rounds == 0 {
                        for k in &resident {
                            assert_eq!(
                                c.get(k.as_bytes()).unwrap().as_deref(),
                                Some(k.as_bytes()),
                                "{k} went missing"
                            );
                        }
                        rounds += 1;
                    }
                })
            })
            .collect();
        let mut w = cluster.client(0).unwrap();
        for i in 0..30 {
            match w.put(format!("filler-{i}").as_bytes(), b"f") {
                Ok(()) | Err(Error::IndexFull) => {}
                Err(e) => panic!("{e}"),
            }
        }
        done.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        w.stats().put.migrations
    });
    assert!(migrations > 0, "the test must displace entries");
}

/// Values of different lengths and contents, overwritten while clients on
/// every node read them: every read must be one complete value.
///
/// # Panics
/// On any deviation.
pub fn readers_see_whole_values<S: Store>(cluster: &S) {
    let values: Vec<Vec<u8>> = (0..6)
        .map(|i| value(&format!("v{i}-"), 100 + i * 900))
        .collect();
    let mut w = cluster.client(1).unwrap();
    w.put(b"shared", &values[0]).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for n in 0..3 {
            let (values, done) = (&values, &done);
            s.spawn(move || {
                let mut c = cluster.client(n).unwrap();
                while !done.load(Ordering::Relaxed) {
                    let v = c.get(b"shared").unwrap().unwrap();
                    assert!(values.contains(&v), "a torn or foreign value");
                }
            });
        }
        for round in 0..60 {
            w.put(b"shared", &values[round % values.len()]).unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
}
