//! Clock readings per operation, counted: on `shm` and `local` a reading
//! costs about as much as a verb, so the count is a cost like the verbs'
//! (docs/design.md#the-landing-bound, #f7-two-clocks).

use nessie::{Clock, Cluster, Config, WallClock};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

/// The host's clocks, counting the readings of one thread (the test's: the
/// node's own threads read the clock too).
#[derive(Debug)]
struct CountingClock {
    inner: WallClock,
    counted: Mutex<Option<ThreadId>>,
    wall: AtomicU64,
    mono: AtomicU64,
}

impl CountingClock {
    fn new() -> Self {
        CountingClock {
            inner: WallClock::default(),
            counted: Mutex::new(None),
            wall: AtomicU64::new(0),
            mono: AtomicU64::new(0),
        }
    }

    fn mine(&self) -> bool {
        *self.counted.lock().unwrap() == Some(std::thread::current().id())
    }

    /// Counts from now on the readings of the calling thread; returns the
    /// `(wall, monotonic)` readings counted so far and resets them.
    fn take(&self) -> (u64, u64) {
        *self.counted.lock().unwrap() = Some(std::thread::current().id());
        (
            self.wall.swap(0, Ordering::SeqCst),
            self.mono.swap(0, Ordering::SeqCst),
        )
    }
}

impl Clock for CountingClock {
    fn now_us(&self) -> u64 {
        if self.mine() {
            self.wall.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.now_us()
    }

    fn mono_us(&self) -> u64 {
        if self.mine() {
            self.mono.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.mono_us()
    }

    fn sleep(&self, d: Duration) {
        self.inner.sleep(d);
    }
}

/// Two nodes of `config`'s timing, node 0 on `clock`, node 1 on the host's
/// clocks; no recycler or clock watch reads them in the background.
fn cluster_with_clock_of_node_0(clock: Arc<dyn Clock>, config: Config) -> Cluster {
    Cluster::builder(Config {
        nodes: 2,
        index_slots_per_node: 1024,
        data_bytes_per_node: 4 << 20,
        ..config
    })
    .clocks(vec![clock, Arc::new(WallClock::default())])
    .recycler(false)
    .clock_checks(false)
    .build()
    .unwrap()
}

/// Readings `(wall, monotonic)` of one PUT that replaces a value, then of
/// one GET that finds it through the PUT's location hint, then of a GET by
/// a client without hints, on node 0.
fn readings() -> [(u64, u64); 3] {
    let clock = Arc::new(CountingClock::new());
    let cluster = cluster_with_clock_of_node_0(clock.clone(), Config::default());
    let mut client = cluster.client(0).unwrap();
    let mut fresh = cluster.client(0).unwrap();
    client.put(b"key", b"first").unwrap();
    clock.take();
    client.put(b"key", b"second").unwrap();
    let put = clock.take();
    assert_eq!(client.get(b"key").unwrap().as_deref(), Some(&b"second"[..]));
    let hinted = clock.take();
    assert_eq!(client.stats().get.hint_hits, 1);
    assert_eq!(fresh.get(b"key").unwrap().as_deref(), Some(&b"second"[..]));
    let plain = clock.take();
    assert_eq!(fresh.stats().get.hint_hits, 0);
    assert_eq!(client.stats().put.late_cas, 0);
    [put, hinted, plain]
}

/// A PUT reads the monotonic clock at its start, after its index read (the
/// location hint's test), for each of its two CASes' checks (the second
/// also measures the first's landing) and for the stage's stamp (which
/// measures the commit's landing); it reads the wall clock once, at its
/// start, and derives `expires_at` from it. A GET reads the monotonic clock
/// at its start and once after the read it answers from, for the hint's
/// tests and the checksum policy alike.
#[test]
fn a_put_reads_the_wall_clock_once_and_a_get_never() {
    let [put, hinted, plain] = readings();
    assert_eq!(put, (1, 5), "PUT (wall, monotonic) readings");
    assert_eq!(hinted, (0, 2), "hinted GET (wall, monotonic) readings");
    assert_eq!(plain, (0, 2), "GET (wall, monotonic) readings");
}

/// The host's clocks, the monotonic one stepping `step_us` further at each
/// reading: every CAS then returns, as far as the next reading can tell,
/// one step after its check.
#[derive(Debug)]
struct SteppingClock {
    inner: WallClock,
    step_us: u64,
    steps: AtomicU64,
}

impl Clock for SteppingClock {
    fn now_us(&self) -> u64 {
        self.inner.now_us()
    }

    fn mono_us(&self) -> u64 {
        let n = self.steps.fetch_add(1, Ordering::SeqCst) + 1;
        self.inner.mono_us() + n * self.step_us
    }

    fn sleep(&self, d: Duration) {
        self.inner.sleep(d);
    }
}

/// Late CASes reach the client's counters, the last CAS of an operation
/// included: a PUT of a new key stages nothing after its commit, so only
/// the operation's end measures that CAS's landing.
#[test]
fn late_cases_are_counted_to_the_last_cas_of_an_operation() {
    let landing = Duration::from_micros(100);
    let clock = Arc::new(SteppingClock {
        inner: WallClock::default(),
        step_us: 1_000,
        steps: AtomicU64::new(0),
    });
    let config = Config {
        cas_landing_bound: Some(landing),
        ..Config::default()
    };
    let cluster = cluster_with_clock_of_node_0(clock, config);
    let mut client = cluster.client(0).unwrap();
    client.put(b"new key", b"v").unwrap();
    let put = client.stats().put;
    assert_eq!(put.retries.total(), 0);
    assert_eq!(put.late_cas, 2, "the link and the commit are both late");
}
