//! YCSB-style workloads: which key each operation touches, whether it is a
//! GET or a PUT, what it stores, and when it arrives.
//!
//! Everything is deterministic for a given seed: the key chooser and the
//! operation mix draw from a [`SplitMix64`] stream seeded per node and worker,
//! so two runs of the same spec issue the same operation sequence (their
//! interleaving across threads differs, of course).
//!
//! * Keys are fixed-size: `key:` followed by the key index in zero-padded
//!   decimal, filling `key_size` bytes exactly (default 128 B, as in the
//!   paper).
//! * Zipf follows YCSB's `ScrambledZipfianGenerator`: a Zipfian rank with
//!   θ = 0.99 (Gray et al.'s method, as in YCSB's `ZipfianGenerator`), then
//!   the FNV-1a 64 hash of the rank modulo the key count, so that popular
//!   keys are spread over the key space (and thus over nodes) rather than
//!   being the lowest indices.
//! * Open-loop arrivals are Poisson: exponential inter-arrival gaps.

use crate::error::{HarnessError, Result};
use rand::RngCore;
use rand_distr::{Distribution as _, Exp};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The Zipf exponent the paper (and YCSB) use.
pub const YCSB_THETA: f64 = 0.99;

/// Prefix of every key.
const KEY_PREFIX: &[u8] = b"key:";

/// How keys are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum KeyDistribution {
    /// Every key equally likely.
    Uniform,
    /// Scrambled Zipf with exponent `theta` (YCSB: 0.99).
    Zipf {
        /// The exponent, in (0, 1).
        theta: f64,
    },
}

impl KeyDistribution {
    /// A short name for tables: `uniform` or `zipf0.99`.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            KeyDistribution::Uniform => "uniform".to_owned(),
            KeyDistribution::Zipf { theta } => format!("zipf{theta}"),
        }
    }
}

/// What a workload does: key space, sizes, mix and seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Number of distinct keys.
    pub keys: u64,
    /// Bytes of every key.
    pub key_size: usize,
    /// Bytes of every value.
    pub value_size: usize,
    /// Fraction of operations that are GETs (the rest are PUTs).
    pub get_ratio: f64,
    /// Key popularity.
    pub distribution: KeyDistribution,
    /// Seed of every random stream of the run.
    pub seed: u64,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            keys: 10_000,
            key_size: 128,
            value_size: 16 << 10,
            get_ratio: 0.9,
            distribution: KeyDistribution::Uniform,
            seed: 0x6e65_7373_6965,
        }
    }
}

impl WorkloadSpec {
    /// Checks that the workload can be generated.
    ///
    /// # Errors
    /// [`HarnessError::Usage`] naming the bad field.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(HarnessError::Usage(m));
        if self.keys == 0 {
            return bad("the workload needs at least one key".into());
        }
        let digits = decimal_digits(self.keys - 1);
        if self.key_size < KEY_PREFIX.len() + digits {
            return bad(format!(
                "key size {} B cannot hold {} distinct keys (needs at least {} B)",
                self.key_size,
                self.keys,
                KEY_PREFIX.len() + digits
            ));
        }
        if self.value_size == 0 {
            return bad("value size must be at least 1 byte".into());
        }
        if !(0.0..=1.0).contains(&self.get_ratio) {
            return bad(format!("GET ratio {} is not within [0, 1]", self.get_ratio));
        }
        if let KeyDistribution::Zipf { theta } = self.distribution {
            if !(theta > 0.0 && theta < 1.0) {
                return bad(format!("Zipf theta {theta} is not within (0, 1)"));
            }
        }
        Ok(())
    }

    /// A one-line description: `16KiB 90%GET uniform 10000 keys`.
    #[must_use]
    pub fn describe(&self) -> String {
        format!(
            "{} {}%GET {} {} keys",
            bytes_label(self.value_size as f64),
            percent(self.get_ratio),
            self.distribution.name(),
            self.keys
        )
    }
}

/// `0.9` → `"90"`, `0.995` → `"99.5"`.
#[must_use]
pub fn percent(ratio: f64) -> String {
    let p = (ratio * 1000.0).round() / 10.0;
    if p.fract() == 0.0 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    }
}

fn decimal_digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// Writes the fixed-size key of index `index` into `buf` (of `key_size`
/// bytes): `key:000…0123`.
pub fn write_key(index: u64, buf: &mut [u8]) {
    let (prefix, digits) = buf.split_at_mut(KEY_PREFIX.len().min(buf.len()));
    prefix.copy_from_slice(&KEY_PREFIX[..prefix.len()]);
    let mut n = index;
    for b in digits.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// The key of index `index`, as a new vector.
#[must_use]
pub fn key(index: u64, key_size: usize) -> Vec<u8> {
    let mut k = vec![0; key_size];
    write_key(index, &mut k);
    k
}

/// Fills `buf` with a value for key `index`, version `version`: a
/// deterministic byte pattern with the key index and version in its first
/// 16 bytes (as far as they fit).
pub fn fill_value(index: u64, version: u64, buf: &mut [u8]) {
    let mut state = SplitMix64::new(index ^ version.rotate_left(32));
    for chunk in buf.chunks_mut(8) {
        let word = state.next_u64().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    let stamp = [index.to_le_bytes(), version.to_le_bytes()].concat();
    let n = stamp.len().min(buf.len());
    buf[..n].copy_from_slice(&stamp[..n]);
}

/// `SplitMix64`: a tiny, fast, seedable generator whose stream never changes
/// with crate versions (unlike `StdRng`), so seeds stay reproducible.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The seed of worker `worker` on node `node` of a run seeded `seed`.
    #[must_use]
    pub fn for_worker(seed: u64, node: usize, worker: usize) -> Self {
        let mut s = SplitMix64::new(seed ^ ((node as u64) << 40) ^ ((worker as u64) << 20));
        s.next_u64();
        s
    }

    /// A uniform double in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl RngCore for SplitMix64 {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> std::result::Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// FNV-1a 64 over the eight little-endian bytes of `v` (YCSB's
/// `Utils.FNVhash64`).
#[must_use]
pub fn fnv1a64(v: u64) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    v.to_le_bytes()
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// YCSB's Zipfian rank generator over `0..n` (rank 0 most popular), after
/// Gray et al., "Quickly generating billion-record synthetic databases".
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipf {
    /// A generator over `n ≥ 1` items with exponent `theta` in (0, 1).
    /// Costs O(n) once (the zeta sum).
    #[must_use]
    pub fn new(n: u64, theta: f64) -> Self {
        let n = n.max(1);
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2.min(n), theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = if n > 1 {
            (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        } else {
            0.0
        };
        Zipf {
            n,
            theta,
            alpha,
            zetan,
            eta,
            half_pow_theta: 0.5f64.powf(theta),
        }
    }

    /// The probability of rank `r` (0-based).
    #[must_use]
    pub fn probability(&self, rank: u64) -> f64 {
        1.0 / ((rank + 1) as f64).powf(self.theta) / self.zetan
    }

    /// The next rank.
    pub fn rank(&self, rng: &mut SplitMix64) -> u64 {
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if self.n > 1 && uz < 1.0 + self.half_pow_theta {
            return 1;
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// Draws key indices of a workload.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    /// Uniform over `0..n`.
    Uniform(u64),
    /// Scrambled Zipf: `fnv1a64(rank) mod n`.
    Zipf(Arc<Zipf>),
}

impl KeyChooser {
    /// The chooser of a workload (the Zipf constants are computed here, once;
    /// clones share them).
    #[must_use]
    pub fn new(spec: &WorkloadSpec) -> Self {
        match spec.distribution {
            KeyDistribution::Uniform => KeyChooser::Uniform(spec.keys),
            KeyDistribution::Zipf { theta } => {
                KeyChooser::Zipf(Arc::new(Zipf::new(spec.keys, theta)))
            }
        }
    }

    /// The next key index.
    pub fn next(&self, rng: &mut SplitMix64) -> u64 {
        match self {
            KeyChooser::Uniform(n) => rng.next_u64() % n,
            KeyChooser::Zipf(z) => fnv1a64(z.rank(rng)) % z.n,
        }
    }
}

/// A GET or a PUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// Read a key.
    Get,
    /// Write a key.
    Put,
}

impl OpKind {
    /// Both kinds, in report order.
    pub const ALL: [OpKind; 2] = [OpKind::Get, OpKind::Put];

    /// `GET` or `PUT`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Get => "GET",
            OpKind::Put => "PUT",
        }
    }

    /// 0 for GET, 1 for PUT (for per-kind arrays).
    #[must_use]
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One worker's operation stream.
#[derive(Clone, Debug)]
pub struct OpStream {
    rng: SplitMix64,
    keys: KeyChooser,
    get_ratio: f64,
}

impl OpStream {
    /// The stream of worker `worker` on node `node`.
    #[must_use]
    pub fn new(spec: &WorkloadSpec, keys: KeyChooser, node: usize, worker: usize) -> Self {
        OpStream {
            rng: SplitMix64::for_worker(spec.seed, node, worker),
            keys,
            get_ratio: spec.get_ratio,
        }
    }

    /// The next operation: its kind and key index.
    pub fn next_op(&mut self) -> (OpKind, u64) {
        let kind = if self.rng.next_f64() < self.get_ratio {
            OpKind::Get
        } else {
            OpKind::Put
        };
        (kind, self.keys.next(&mut self.rng))
    }
}

/// Poisson arrivals: exponential gaps with mean `1 / rate`.
#[derive(Clone, Debug)]
pub struct Arrivals {
    rng: SplitMix64,
    exp: Exp<f64>,
}

impl Arrivals {
    /// Arrivals at `rate` per second for worker `worker` of node `node`.
    ///
    /// # Errors
    /// [`HarnessError::Usage`] if `rate` is not a positive finite number.
    pub fn new(rate: f64, seed: u64, node: usize, worker: usize) -> Result<Self> {
        let exp = Exp::new(rate)
            .ok()
            .filter(|_| rate.is_finite() && rate > 0.0)
            .ok_or_else(|| HarnessError::Usage(format!("arrival rate {rate}/s is not positive")))?;
        Ok(Arrivals {
            rng: SplitMix64::for_worker(seed ^ 0xa5a5_a5a5, node, worker),
            exp,
        })
    }

    /// Seconds until the next arrival.
    pub fn next_gap(&mut self) -> f64 {
        self.exp.sample(&mut self.rng)
    }
}

/// `16384` → `16KiB`, `256` → `256B`, `1.5e6` → `1.4MiB`.
#[must_use]
pub fn bytes_label(bytes: f64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}{}", UNITS[u])
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(spec: &WorkloadSpec, n: usize) -> Vec<(OpKind, u64)> {
        let mut s = OpStream::new(spec, KeyChooser::new(spec), 1, 2);
        (0..n).map(|_| s.next_op()).collect()
    }

    #[test]
    fn keys_are_fixed_size_and_distinct() {
        let a = key(7, 128);
        let b = key(70, 128);
        assert_eq!(a.len(), 128);
        assert_ne!(a, b);
        assert!(a.starts_with(b"key:0000"));
        assert!(a.ends_with(b"0007"));
        assert_eq!(key(12345, 9), b"key:12345");
    }

    #[test]
    fn validation_names_the_problem() {
        let bad = WorkloadSpec {
            keys: 100_000,
            key_size: 8,
            ..WorkloadSpec::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("key size"));
        let bad = WorkloadSpec {
            get_ratio: 1.5,
            ..WorkloadSpec::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("GET ratio"));
        WorkloadSpec::default().validate().unwrap();
    }

    #[test]
    fn streams_are_deterministic_per_seed() {
        let spec = WorkloadSpec::default();
        assert_eq!(draw(&spec, 1000), draw(&spec, 1000));
        let zipf = WorkloadSpec {
            distribution: KeyDistribution::Zipf { theta: YCSB_THETA },
            ..spec.clone()
        };
        assert_eq!(draw(&zipf, 1000), draw(&zipf, 1000));
        let other = WorkloadSpec {
            seed: 1,
            ..spec.clone()
        };
        assert_ne!(draw(&spec, 1000), draw(&other, 1000));
    }

    #[test]
    fn mix_follows_the_get_ratio() {
        let spec = WorkloadSpec::default();
        let ops = draw(&spec, 100_000);
        let gets = ops.iter().filter(|(k, _)| *k == OpKind::Get).count();
        let ratio = gets as f64 / ops.len() as f64;
        assert!((ratio - 0.9).abs() < 0.01, "{ratio}");
        assert!(ops.iter().all(|&(_, k)| k < spec.keys));
    }

    #[test]
    fn zipf_ranks_follow_the_power_law() {
        let n = 1000;
        let z = Zipf::new(n, YCSB_THETA);
        let mut rng = SplitMix64::new(42);
        let draws = 400_000;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            counts[z.rank(&mut rng) as usize] += 1;
        }
        // Rank 0 and 1 come out at their exact probabilities.
        for (r, &count) in counts.iter().enumerate().take(2) {
            let p = count as f64 / f64::from(draws);
            let want = z.probability(r as u64);
            assert!((p - want).abs() < 0.1 * want, "rank {r}: {p} vs {want}");
        }
        // Frequency falls with rank: the top 10 ranks take far more than 1 %.
        let top10: u64 = counts[..10].iter().sum();
        let want: f64 = (0..10).map(|r| z.probability(r)).sum();
        let got = top10 as f64 / f64::from(draws);
        assert!((got - want).abs() < 0.15 * want, "top10 {got} vs {want}");
        assert!(
            got > 0.3,
            "top 10 of 1000 keys should draw over 30 %: {got}"
        );
        assert!(counts[0] > counts[9] * 5);
    }

    #[test]
    fn scrambled_zipf_spreads_popular_keys() {
        let spec = WorkloadSpec {
            keys: 1000,
            distribution: KeyDistribution::Zipf { theta: YCSB_THETA },
            ..WorkloadSpec::default()
        };
        let chooser = KeyChooser::new(&spec);
        let mut rng = SplitMix64::new(7);
        let mut counts = vec![0u64; 1000];
        for _ in 0..100_000 {
            counts[chooser.next(&mut rng) as usize] += 1;
        }
        let hottest = (0..1000).max_by_key(|&i| counts[i]).unwrap();
        assert_eq!(hottest as u64, fnv1a64(0) % 1000);
        assert_ne!(hottest, 0, "scrambling moves the hottest key off index 0");
        let uniform_share = 100_000 / 1000;
        assert!(counts[hottest] > 20 * uniform_share);
    }

    #[test]
    fn fnv_matches_ycsb() {
        // FNV-1a 64 of eight zero bytes.
        assert_eq!(fnv1a64(0), 0xa8c7_f832_281a_39c5);
    }

    #[test]
    fn poisson_gaps_have_the_right_mean() {
        let mut a = Arrivals::new(1000.0, 3, 0, 0).unwrap();
        let mean = (0..50_000).map(|_| a.next_gap()).sum::<f64>() / 50_000.0;
        assert!((mean - 0.001).abs() < 0.00005, "{mean}");
        assert!(Arrivals::new(0.0, 3, 0, 0).is_err());
    }

    #[test]
    fn values_carry_key_and_version() {
        let mut v = vec![0; 64];
        fill_value(5, 9, &mut v);
        assert_eq!(&v[..8], &5u64.to_le_bytes());
        assert_eq!(&v[8..16], &9u64.to_le_bytes());
        let mut short = vec![0; 3];
        fill_value(5, 9, &mut short);
        assert_eq!(short, vec![5, 0, 0]);
    }
}
