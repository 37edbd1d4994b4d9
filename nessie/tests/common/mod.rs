//! What the store's tests share: waiting out a view change, and keys whose
//! candidates avoid a node.
#![allow(dead_code, reason = "each test binary uses a part")]

use nessie::index::KeyHasher;
use nessie::{Client, Config, Error};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Retries `op` while the cluster changes its view (typed refusals,
/// timeouts and fabric errors of verbs to a lost node); panics on any other
/// error or once `limit` has passed.
pub(crate) fn until_served<T>(limit: Instant, mut op: impl FnMut() -> Result<T, Error>) -> T {
    loop {
        match op() {
            Ok(v) => return v,
            Err(
                e @ (Error::ViewChanging { .. }
                | Error::NoQuorum { .. }
                | Error::Timeout
                | Error::Fabric(_)),
            ) => {
                assert!(Instant::now() < limit, "not served again in time: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// Waits until every client of `clients` reads every key of `model` with
/// its value.
pub(crate) fn all_served(clients: &mut [Client], model: &HashMap<String, Vec<u8>>, limit: Instant) {
    for (key, value) in model {
        for c in clients.iter_mut() {
            let got = until_served(limit, || c.get(key.as_bytes()));
            assert_eq!(got.as_deref(), Some(&value[..]), "{key}");
        }
    }
}

/// The first key `key-{i}` with three candidates, none on node `not_on`.
pub(crate) fn key_away_from(config: &Config, not_on: usize) -> Vec<u8> {
    let h = KeyHasher::new(config);
    (0..)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| {
            let c = h.candidates(k);
            c.len() == 3 && c.iter().all(|c| c.node != not_on)
        })
        .expect("some key avoids the node")
}
