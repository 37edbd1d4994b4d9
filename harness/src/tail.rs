//! Where the slowest operations spend their time, and which of them the
//! kernel preempted.
//!
//! Every measured operation lands in one [`TailBuckets`] bucket by its
//! latency: log-linear buckets, [`SUB_BUCKETS`] per octave from 64 ns up to
//! 2^37 ns (about 137 s), each holding the operation count and the sums of
//! what those operations cost (back-off, scan time, retries by cause,
//! migrations, round trips) and how many were preempted. Bucket sets add up
//! across workers and nodes and need no per-operation storage; the slowest
//! 1 % or 0.1 % is then read off the top buckets ([`TailBuckets::slowest`]),
//! exact up to one bucket's width ([`RESOLUTION`]).
//!
//! Preemption: [`thread_usage`] reads the calling thread's involuntary
//! context switches (`ru_nivcsw` of `getrusage(RUSAGE_THREAD)`), with its
//! voluntary ones and page faults; an operation is preempted if the count
//! grew between a reading at its start and one at its end ([`OpUsage`]). Linux counts a `sched_yield` that hands the CPU
//! to another thread as involuntary too, so clients that wait by yielding
//! (SD's and HY's) show up as preempted whenever they gave their core away.

use nessie::RetryCounts;
use serde::{Deserialize, Serialize};

/// Buckets per octave (log-linear: each octave is split into this many
/// equal parts, so a bucket is 1/16 to 1/32 of its lower edge wide).
pub const SUB_BUCKETS: usize = 16;
/// `log2(SUB_BUCKETS)`.
const SUB_BITS: u32 = 4;
/// Latencies below `2^FIRST_OCTAVE` ns share bucket 0.
const FIRST_OCTAVE: u32 = 6;
/// Latencies of `2^END_OCTAVE` ns and more share the last bucket.
const END_OCTAVE: u32 = 37;
/// Number of buckets: one below 64 ns, then 31 octaves.
pub const BUCKETS: usize = 1 + (END_OCTAVE - FIRST_OCTAVE) as usize * SUB_BUCKETS;
/// The widest bucket relative to its lower edge (1/16 octave-linear step):
/// the resolution of every tail figure.
pub const RESOLUTION: f64 = 1.0 / SUB_BUCKETS as f64;

/// What the kernel counted for the calling thread so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    /// Involuntary context switches: the thread was preempted.
    pub involuntary: u64,
    /// Voluntary context switches: the thread blocked (a contended lock,
    /// a sleep, a socket).
    pub voluntary: u64,
    /// Page faults, minor and major (first touches of memory among them).
    pub faults: u64,
}

/// Reads the calling thread's [`ThreadUsage`], or `None` where the kernel
/// does not say. Injectable so that tests can drive the per-operation
/// bookkeeping with scripted counts.
pub type UsageReader = fn() -> Option<ThreadUsage>;

/// The calling thread's [`ThreadUsage`] (`getrusage(RUSAGE_THREAD)`).
/// Costs one system call (about 0.2 µs on the development machine).
pub fn thread_usage() -> Option<ThreadUsage> {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD).ok()?;
    let n = |v: i64| u64::try_from(v).ok();
    Some(ThreadUsage {
        involuntary: n(u.involuntary_context_switches())?,
        voluntary: n(u.voluntary_context_switches())?,
        faults: n(u.minor_page_faults())?.saturating_add(n(u.major_page_faults())?),
    })
}

/// What the kernel counted for one operation's thread while it ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpUsage {
    /// It was preempted at least once.
    pub preempted: bool,
    /// Times it blocked.
    pub blocked: u64,
    /// Page faults it took.
    pub faults: u64,
}

impl OpUsage {
    /// The difference of two readings around an operation (nothing if
    /// either is missing).
    #[must_use]
    pub fn between(before: Option<ThreadUsage>, after: Option<ThreadUsage>) -> OpUsage {
        match (before, after) {
            (Some(b), Some(a)) => OpUsage {
                preempted: a.involuntary > b.involuntary,
                blocked: a.voluntary.saturating_sub(b.voluntary),
                faults: a.faults.saturating_sub(b.faults),
            },
            _ => OpUsage::default(),
        }
    }
}

/// The bucket of a latency in ns.
#[must_use]
pub fn bucket_of(ns: u64) -> usize {
    if ns < 1 << FIRST_OCTAVE {
        return 0;
    }
    let octave = ns.ilog2();
    if octave >= END_OCTAVE {
        return BUCKETS - 1;
    }
    // The bits right below the leading one pick the sub-bucket.
    let sub = ((ns >> (octave - SUB_BITS)) as usize) & (SUB_BUCKETS - 1);
    1 + (octave - FIRST_OCTAVE) as usize * SUB_BUCKETS + sub
}

/// The latencies of bucket `i`, ns: `[low, high)` (the last bucket is open
/// upwards: its `high` is `u64::MAX`).
#[must_use]
pub fn bucket_range(i: usize) -> (u64, u64) {
    if i == 0 {
        return (0, 1 << FIRST_OCTAVE);
    }
    let i = i.min(BUCKETS - 1) - 1;
    let octave = FIRST_OCTAVE + (i / SUB_BUCKETS) as u32;
    let step = 1u64 << (octave - SUB_BITS);
    let low = (SUB_BUCKETS + i % SUB_BUCKETS) as u64 * step;
    if i + 2 == BUCKETS {
        (low, u64::MAX)
    } else {
        (low, low + step)
    }
}

/// The operations of one latency bucket and what they cost, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// Operations.
    pub ops: u64,
    /// Of which preempted.
    pub preempted: u64,
    /// Their latencies, ns.
    pub latency_ns: u64,
    /// Time they slept backing off, µs (the store's counter).
    pub backoff_us: u64,
    /// Time they scanned for a free slot, ns.
    pub scan_ns: u64,
    /// Their retries by cause.
    pub retries: RetryCounts,
    /// MIGRATEs they performed.
    pub migrations: u64,
    /// Round trips (single verbs and batches) they issued.
    pub round_trips: u64,
    /// Times their threads blocked (voluntary context switches).
    #[serde(default)]
    pub blocked: u64,
    /// Page faults their threads took.
    #[serde(default)]
    pub faults: u64,
}

impl Bucket {
    /// Adds `o` (saturating: a sum that overflows stays at its maximum
    /// rather than wrapping to a small, plausible-looking number).
    pub fn add(&mut self, o: &Bucket) {
        self.ops = self.ops.saturating_add(o.ops);
        self.preempted = self.preempted.saturating_add(o.preempted);
        self.latency_ns = self.latency_ns.saturating_add(o.latency_ns);
        self.backoff_us = self.backoff_us.saturating_add(o.backoff_us);
        self.scan_ns = self.scan_ns.saturating_add(o.scan_ns);
        self.retries += o.retries;
        self.migrations = self.migrations.saturating_add(o.migrations);
        self.round_trips = self.round_trips.saturating_add(o.round_trips);
        self.blocked = self.blocked.saturating_add(o.blocked);
        self.faults = self.faults.saturating_add(o.faults);
    }
}

/// Per-latency-bucket sums of one kind of operation. Serialises sparsely
/// (only the buckets that hold operations, by index).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "Vec<(usize, Bucket)>", try_from = "Vec<(usize, Bucket)>")]
pub struct TailBuckets {
    /// Exactly [`BUCKETS`] buckets, dense: recording is one index.
    buckets: Vec<Bucket>,
}

impl Default for TailBuckets {
    fn default() -> Self {
        TailBuckets {
            buckets: vec![Bucket::default(); BUCKETS],
        }
    }
}

impl From<TailBuckets> for Vec<(usize, Bucket)> {
    fn from(t: TailBuckets) -> Self {
        t.buckets
            .into_iter()
            .enumerate()
            .filter(|(_, b)| b.ops > 0)
            .collect()
    }
}

impl TryFrom<Vec<(usize, Bucket)>> for TailBuckets {
    type Error = String;

    fn try_from(v: Vec<(usize, Bucket)>) -> Result<Self, String> {
        let mut t = TailBuckets::default();
        for (i, b) in v {
            t.buckets
                .get_mut(i)
                .ok_or_else(|| format!("latency bucket {i} is not below {BUCKETS}"))?
                .add(&b);
        }
        Ok(t)
    }
}

impl TailBuckets {
    /// Records one operation: `op` holds its latency, whether it was
    /// preempted and what it cost, with `ops` = 1.
    pub fn record(&mut self, op: &Bucket) {
        self.buckets[bucket_of(op.latency_ns)].add(op);
    }

    /// Adds `o`'s buckets.
    pub fn add(&mut self, o: &TailBuckets) {
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            a.add(b);
        }
    }

    /// The buckets, by index.
    #[must_use]
    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// Operations recorded.
    #[must_use]
    pub fn ops(&self) -> u64 {
        self.buckets.iter().map(|b| b.ops).sum()
    }

    /// The slowest `per_100k` / 100 000 of the operations (at least one, if
    /// any): every bucket above the one where that share begins, plus the
    /// needed part of that bucket pro rata (its operations are within one
    /// bucket width of each other, so their costs are taken as alike).
    #[must_use]
    pub fn slowest(&self, per_100k: u64) -> TailSlice {
        let total = self.ops();
        let per_100k = per_100k.min(100_000);
        // Rounded up, in integers: 1 % of 150 operations is 2 of them.
        let want = ((u128::from(total) * u128::from(per_100k)).div_ceil(100_000) as u64).max(1);
        let want = want.min(total);
        let mut acc = Sums::default();
        let mut from_ns = 0;
        for (i, b) in self.buckets.iter().enumerate().rev() {
            if acc.ops >= want as f64 || b.ops == 0 {
                continue;
            }
            let part = ((want as f64 - acc.ops) / b.ops as f64).min(1.0);
            acc.add(b, part);
            from_ns = bucket_range(i).0;
        }
        acc.slice(per_100k, want, from_ns)
    }
}

/// Pro-rated sums of a slice of buckets.
#[derive(Default)]
struct Sums {
    ops: f64,
    preempted: f64,
    latency_ns: f64,
    backoff_us: f64,
    scan_ns: f64,
    retries: [f64; CAUSES],
    migrations: f64,
    round_trips: f64,
    blocked: f64,
    faults: f64,
}

impl Sums {
    fn add(&mut self, b: &Bucket, part: f64) {
        self.ops += b.ops as f64 * part;
        self.preempted += b.preempted as f64 * part;
        self.latency_ns += b.latency_ns as f64 * part;
        self.backoff_us += b.backoff_us as f64 * part;
        self.scan_ns += b.scan_ns as f64 * part;
        for (s, (_, n)) in self.retries.iter_mut().zip(b.retries.by_cause()) {
            *s += n as f64 * part;
        }
        self.migrations += b.migrations as f64 * part;
        self.round_trips += b.round_trips as f64 * part;
        self.blocked += b.blocked as f64 * part;
        self.faults += b.faults as f64 * part;
    }

    fn slice(&self, per_100k: u64, ops: u64, from_ns: u64) -> TailSlice {
        let per = |v: f64| if self.ops > 0.0 { v / self.ops } else { 0.0 };
        let retries: f64 = self.retries.iter().sum();
        let top = self
            .retries
            .iter()
            .zip(RetryCounts::default().by_cause().map(|(name, _)| name))
            .filter(|(n, _)| **n > 0.0)
            .max_by(|a, b| a.0.total_cmp(b.0));
        let mean_us = per(self.latency_ns) / 1e3;
        let backoff_us = per(self.backoff_us);
        let scan_us = per(self.scan_ns) / 1e3;
        TailSlice {
            share: per_100k as f64 / 100_000.0,
            ops: if self.ops > 0.0 { ops } else { 0 },
            from_us: from_ns as f64 / 1e3,
            mean_us,
            preempted_share: per(self.preempted),
            backoff_us,
            scan_us,
            retries: per(retries),
            top_cause: top.map(|(_, name)| (*name).to_owned()),
            top_cause_share: top.map_or(0.0, |(n, _)| n / retries),
            migrations: per(self.migrations),
            round_trips: per(self.round_trips),
            blocked: per(self.blocked),
            faults: per(self.faults),
            remainder_us: mean_us - backoff_us - scan_us,
        }
    }
}

/// Number of retry causes.
const CAUSES: usize = RetryCounts::CAUSES;

/// The slowest share of one kind of operation: what its operations cost on
/// average. Figures are means per operation of the slice.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailSlice {
    /// The share of all operations (0.01 = the slowest 1 %).
    pub share: f64,
    /// Operations in the slice.
    pub ops: u64,
    /// The lower edge of the slowest bucket it draws from, µs (its
    /// operations took at least about this long).
    pub from_us: f64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// Fraction that were preempted.
    pub preempted_share: f64,
    /// Mean time slept backing off, µs.
    pub backoff_us: f64,
    /// Mean time spent scanning for a free slot, µs.
    pub scan_us: f64,
    /// Mean retries.
    pub retries: f64,
    /// The most frequent retry cause, if any retried.
    pub top_cause: Option<String>,
    /// Its share of the retries.
    pub top_cause_share: f64,
    /// Mean MIGRATEs.
    pub migrations: f64,
    /// Mean round trips.
    pub round_trips: f64,
    /// Mean times blocked (voluntary context switches).
    #[serde(default)]
    pub blocked: f64,
    /// Mean page faults.
    #[serde(default)]
    pub faults: f64,
    /// Mean latency not spent backing off or scanning, µs.
    pub remainder_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's involuntary context switches so far.
    fn involuntary_switches() -> Option<u64> {
        thread_usage().map(|u| u.involuntary)
    }

    /// One operation of `ns` that retried `retries` times as busy and
    /// backed off `backoff_us`.
    fn op(ns: u64, preempted: bool, retries: u64, backoff_us: u64) -> Bucket {
        Bucket {
            ops: 1,
            preempted: u64::from(preempted),
            latency_ns: ns,
            backoff_us,
            retries: RetryCounts {
                busy: retries,
                ..RetryCounts::default()
            },
            ..Bucket::default()
        }
    }

    #[test]
    fn every_latency_lands_in_the_bucket_that_holds_it() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(63), 0);
        assert_eq!(bucket_of(64), 1);
        assert_eq!(bucket_of(67), 1, "the 64 ns octave steps by 4 ns");
        assert_eq!(bucket_of(68), 2);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        for ns in (0..5000).chain((0..200).map(|i| 1u64 << (i % 40) | (i * 7919))) {
            let i = bucket_of(ns);
            let (lo, hi) = bucket_range(i);
            assert!(lo <= ns && ns < hi, "{ns} in bucket {i} [{lo}, {hi})");
        }
        // Consecutive buckets tile the axis, none wider than the resolution.
        for i in 1..BUCKETS - 1 {
            let (lo, hi) = bucket_range(i);
            assert_eq!(hi, bucket_range(i + 1).0);
            assert!((hi - lo) as f64 <= lo as f64 * RESOLUTION + 1e-9, "{i}");
        }
        // 100 ns and 100 s are both inside the resolved range.
        assert!(bucket_of(100) > 0 && bucket_of(100_000_000_000) < BUCKETS - 1);
    }

    #[test]
    fn merges_add_up_and_survive_json() {
        let mut a = TailBuckets::default();
        let mut b = TailBuckets::default();
        a.record(&op(1_000, false, 1, 5));
        a.record(&op(1_000, true, 2, 0));
        b.record(&op(1_001, false, 0, 0));
        b.record(&op(5_000_000, true, 3, 100));
        a.add(&b);
        assert_eq!(a.ops(), 4);
        let k = &a.buckets()[bucket_of(1_000)];
        assert_eq!((k.ops, k.preempted, k.latency_ns), (3, 1, 3_001));
        assert_eq!((k.retries.busy, k.backoff_us), (3, 5));
        let json = serde_json::to_string(&a).unwrap();
        let sparse: Vec<(usize, Bucket)> = serde_json::from_str(&json).unwrap();
        assert_eq!(sparse.len(), 2, "only the buckets with operations: {json}");
        let back: TailBuckets = serde_json::from_str(&json).unwrap();
        assert_eq!(back, a);
        assert!(serde_json::from_str::<TailBuckets>(&format!("[[{BUCKETS},{{}}]]")).is_err());
    }

    #[test]
    fn the_slowest_share_is_the_right_operations() {
        // 9,900 fast operations without retries, then 100 slow ones of
        // 1,000..1,099 µs that retried 3 times and backed off 500 µs each.
        let mut t = TailBuckets::default();
        for i in 0..9_900u64 {
            t.record(&op(10_000 + i % 50, false, 0, 0));
        }
        for i in 0..100u64 {
            t.record(&op(1_000_000 + i * 1_000, i % 4 == 0, 3, 500));
        }
        let s = t.slowest(1_000);
        assert_eq!(s.ops, 100);
        let mean = 1_049.5;
        assert!((s.mean_us - mean).abs() <= mean * RESOLUTION, "{s:?}");
        assert!((s.retries - 3.0).abs() < 1e-9, "{s:?}");
        assert!((s.backoff_us - 500.0).abs() < 1e-9);
        assert!((s.preempted_share - 0.25).abs() < 1e-9);
        assert_eq!(s.top_cause.as_deref(), Some("busy"));
        assert!((s.remainder_us - (s.mean_us - 500.0)).abs() < 1e-9);
        assert!(s.from_us <= 1_000.0 && s.from_us >= 1_000.0 * (1.0 - RESOLUTION));
        // The slowest 0.1 %: the 10 slowest of the slow ones, pro rata
        // within their buckets.
        let s = t.slowest(100);
        assert_eq!(s.ops, 10);
        let mean = 1_094.5;
        assert!((s.mean_us - mean).abs() <= mean * RESOLUTION, "{s:?}");
        // A share that ends inside the fast bucket takes part of it.
        let s = t.slowest(2_000);
        assert_eq!(s.ops, 200);
        assert!((s.retries - 1.5).abs() < 1e-9, "{s:?}");
        assert_eq!(TailBuckets::default().slowest(1_000).ops, 0);
    }

    /// Voluntary and involuntary switches of the calling thread.
    fn switches() -> (u64, u64) {
        let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD).unwrap();
        (
            u.voluntary_context_switches() as u64,
            u.involuntary_context_switches() as u64,
        )
    }

    /// Pins the calling thread to `cpu`.
    fn pin(cpu: usize) {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
    }

    /// A CPU this process may run on.
    fn some_cpu() -> usize {
        let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
        (0..nix::sched::CpuSet::count())
            .find(|&c| set.is_set(c).unwrap_or(false))
            .unwrap()
    }

    /// Threads pinned to one CPU with a busy partner, each running `wait`
    /// between readings until its involuntary count grew (or a generous
    /// limit passed, so that a broken kernel fails the test instead of
    /// hanging it): whether each one's count grew.
    fn pinned_pair(wait: [fn(); 2]) -> [bool; 2] {
        let cpu = some_cpu();
        let grown = std::sync::atomic::AtomicUsize::new(0);
        let limit = std::time::Instant::now() + std::time::Duration::from_secs(60);
        std::thread::scope(|s| {
            let handles = wait.map(|wait| {
                let grown = &grown;
                s.spawn(move || {
                    pin(cpu);
                    let start = involuntary_switches().unwrap();
                    let mut counted = false;
                    // Both keep running until both were counted: a thread is
                    // preempted only while its partner wants the CPU.
                    while grown.load(std::sync::atomic::Ordering::Relaxed) < 2
                        && std::time::Instant::now() < limit
                    {
                        if !counted && involuntary_switches().unwrap() > start {
                            counted = true;
                            grown.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        wait();
                    }
                    counted
                })
            });
            handles.map(|h| h.join().unwrap())
        })
    }

    #[test]
    fn busy_threads_forced_off_the_cpu_count_as_preempted() {
        let spin = || {
            for _ in 0..1_000 {
                std::hint::spin_loop();
            }
        };
        assert_eq!(pinned_pair([spin, spin]), [true, true]);
    }

    #[test]
    fn linux_counts_a_yield_to_a_waiting_thread_as_involuntary() {
        // Why SD's and HY's clients, which wait for replies by yielding,
        // show up as preempted on a busy CPU.
        let spin = || std::hint::spin_loop();
        let [yielded, _] = pinned_pair([std::thread::yield_now, spin]);
        assert!(yielded);
    }

    #[test]
    fn sleeping_is_not_preemption() {
        let (voluntary, involuntary) = switches();
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let (v, i) = switches();
        // Every sleep blocks: a voluntary switch each. An involuntary one
        // needs the thread to be preempted in the microseconds it runs
        // between sleeps, which never adds up to one per sleep.
        assert!(v - voluntary >= 20, "{} voluntary", v - voluntary);
        assert!(i - involuntary < 20, "{} involuntary", i - involuntary);
    }

    /// The cost of one reading (`cargo test -p harness --release --lib
    /// reading_cost -- --ignored --nocapture`).
    #[test]
    fn an_operations_usage_is_the_difference_of_its_readings() {
        let before = ThreadUsage {
            involuntary: 3,
            voluntary: 5,
            faults: 10,
        };
        let after = ThreadUsage {
            voluntary: 7,
            faults: 14,
            ..before
        };
        let quiet = OpUsage::between(Some(before), Some(after));
        assert_eq!(
            quiet,
            OpUsage {
                preempted: false,
                blocked: 2,
                faults: 4
            }
        );
        let preempted = ThreadUsage {
            involuntary: 4,
            ..after
        };
        assert!(OpUsage::between(Some(before), Some(preempted)).preempted);
        assert_eq!(OpUsage::between(None, Some(after)), OpUsage::default());
        assert_eq!(OpUsage::between(Some(after), None), OpUsage::default());
        // Readings out of order (a reset) count nothing rather than wrap.
        assert_eq!(
            OpUsage::between(Some(after), Some(before)),
            OpUsage::default()
        );
    }

    #[test]
    fn touching_fresh_memory_counts_page_faults() {
        let before = thread_usage().expect("Linux reports thread usage");
        // Large enough to be mapped fresh (not reused heap): every page
        // touched is a first touch.
        let mut fresh = vec![0u8; 16 << 20];
        for page in fresh.chunks_mut(4096) {
            page[0] = 1;
        }
        std::hint::black_box(&fresh);
        let after = thread_usage().unwrap();
        let usage = OpUsage::between(Some(before), Some(after));
        assert!(usage.faults >= 1024, "{usage:?}");
    }

    #[test]
    #[ignore = "a measurement, not a test"]
    fn reading_cost() {
        let n = 1_000_000u32;
        let start = std::time::Instant::now();
        let mut sink = 0;
        for _ in 0..n {
            sink += std::hint::black_box(involuntary_switches()).unwrap_or(0);
        }
        let each = start.elapsed() / n;
        println!("involuntary_switches(): {each:?} per reading ({sink})");
    }
}
