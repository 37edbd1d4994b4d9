//! Published numbers and claims of the Nessie paper (Szepesi et al., "Nessie:
//! A Decoupled, Client-Driven Key-Value Store Using RDMA", IEEE TPDS 2017,
//! §6), for the reports to place ours beside.
//!
//! The paper's figures are plots; their numbers are not in the text, so for
//! Figs. 4–14 this module holds the quantitative statements the text makes
//! about them (each cited), and Table 1 in full. Setup: 15 nodes, 12 cores and
//! one 10 `GbE` ConnectX-3 NIC each, 128 B keys, index load factor 0.4, 7
//! filter bits, 3 hash functions.
//!
//! [`CLAIMS`] is the table the experiments judge their runs against: each
//! row says where a claim is, what it says, and how ours is judged
//! ([`Test`]); [`judge`] is the one function that does so.

use crate::report::{Comparison, Verdict};

/// Nodes of every experiment of the paper.
pub const NODES: usize = 15;

/// Value sizes of the paper's sweep (Figs. 5–7: 256 B … 128 KB).
pub const SWEEP_VALUE_SIZES: [usize; 10] = [
    256,
    512,
    1 << 10,
    2 << 10,
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
];

/// GET ratios of Figs. 5, 6 and 7 (and 12, 13 in part).
pub const SWEEP_GET_RATIOS: [f64; 3] = [0.5, 0.9, 0.99];

/// Table 1: data sizes (KB) of its columns (uniform keys, 50 % GETs).
pub const TABLE1_SIZES_KB: [usize; 7] = [2, 4, 8, 16, 32, 64, 128];

/// One system's row group of Table 1.
#[derive(Clone, Copy, Debug)]
pub struct Table1Row {
    /// Mean GET latency, µs.
    pub get_us: [f64; 7],
    /// Mean PUT latency, µs.
    pub put_us: [f64; 7],
    /// Mean latency of all operations, µs.
    pub all_us: [f64; 7],
    /// Total bytes sent over the network in the run, GB.
    pub sent_gb: [f64; 7],
}

/// Table 1, Nessie (CD).
pub const TABLE1_CD: Table1Row = Table1Row {
    get_us: [19.0, 27.0, 46.0, 86.0, 172.0, 391.0, 811.0],
    put_us: [61.0, 83.0, 133.0, 233.0, 447.0, 858.0, 1533.0],
    all_us: [40.0, 55.0, 89.0, 159.0, 310.0, 624.0, 1172.0],
    sent_gb: [514.0, 729.0, 877.0, 975.0, 999.0, 989.0, 1053.0],
};

/// Table 1, `NessieSD` (SD).
pub const TABLE1_SD: Table1Row = Table1Row {
    get_us: [25.0, 43.0, 82.0, 184.0, 412.0, 875.0, 1732.0],
    put_us: [25.0, 41.0, 77.0, 171.0, 381.0, 816.0, 1602.0],
    all_us: [25.0, 42.0, 80.0, 178.0, 397.0, 846.0, 1667.0],
    sent_gb: [1245.0, 1503.0, 1590.0, 1439.0, 1291.0, 1212.0, 1230.0],
};

/// Table 1, `NessieHY` (HY).
pub const TABLE1_HY: Table1Row = Table1Row {
    get_us: [24.0, 47.0, 109.0, 231.0, 524.0, 1193.0, 2455.0],
    put_us: [42.0, 42.0, 69.0, 129.0, 271.0, 709.0, 1388.0],
    all_us: [33.0, 45.0, 89.0, 180.0, 398.0, 951.0, 1922.0],
    sent_gb: [957.0, 1287.0, 1461.0, 1445.0, 1314.0, 1219.0, 1208.0],
};

/// Fig. 4 (§6.1): with no background processes CD and SD perform
/// "equivalently well" and HY "slightly lower"; as CPU hogs are added SD
/// "declines dramatically", HY "somewhat", CD "remains relatively
/// unaffected". §8 sums it up as "more than doubling system throughput".
pub const FIG4_CLAIM: &str =
    "no hogs: CD ≈ SD > HY; with hogs SD falls most, HY less, CD least (CD > 2× SD)";

/// Fig. 5 (§6.2): 2 KB values, 50 % GETs: CD is 30 % below SD.
pub const FIG5_CD_VS_SD_2KB: f64 = -0.30;
/// Fig. 5: 128 KB values, 50 % GETs: CD's throughput about 70 % above SD's.
pub const FIG5_CD_VS_SD_128KB: f64 = 0.70;
/// Fig. 5: CD overtakes SD at this value size (50 % GETs), bytes.
pub const FIG5_CROSSOVER_BYTES: usize = 8 << 10;

/// Figs. 8–11 (§6.2, 50 % GETs, 16 KB): a CD PUT needs at least this many
/// verbs (5 ITE READs and a CAS) in the paper's implementation.
pub const FIG9_CD_PUT_MIN_VERBS: u64 = 6;
/// Figs. 8/9: share of SD operations served without the network (the key's
/// home is the requesting node: 1 in 15).
pub const FIG8_SD_LOCAL_SHARE: f64 = 1.0 / 15.0;
/// Figs. 10/11 claim: CD and SD move similar bytes per GET; CD moves far
/// fewer bytes per PUT than SD and HY (local DTE placement).
pub const FIG11_CLAIM: &str = "bytes/GET: CD ≈ SD; bytes/PUT: CD ≪ SD = HY";

/// Fig. 12 (§6.2, Zipf 0.99): large values, 50 % GETs: CD over 50 % above SD.
pub const FIG12_LARGE_50: f64 = 0.50;
/// Fig. 12: large values, 99 % GETs: CD over 40 % above SD.
pub const FIG12_LARGE_99: f64 = 0.40;
/// Fig. 12 claim about small values.
pub const FIG12_CLAIM: &str =
    "256 B: CD below SD; large values: CD > SD by >50 % (50 % GET), >40 % (99 % GET)";

/// Fig. 13 (§6.2, Zipf, 16 KB): all optimisations vs none, 50 % GETs: +60 %.
pub const FIG13_GAIN_50: f64 = 0.60;
/// Fig. 13: all optimisations vs none, 99 % GETs: +90 %.
pub const FIG13_GAIN_99: f64 = 0.90;

/// Fig. 14 (§6.3): idle power of a node, W.
pub const FIG14_IDLE_W: f64 = 81.0;
/// Fig. 14: power at 100 % load, all systems, W.
pub const FIG14_PEAK_W: f64 = 139.0;
/// Fig. 14: power at 80 % load: (SD, CD), W.
pub const FIG14_AT_80: (f64, f64) = (130.0, 121.0);
/// Fig. 14: power at 20 % load: (SD, CD), W.
pub const FIG14_AT_20: (f64, f64) = (113.0, 100.0);
/// Fig. 14: load levels of the open-loop runs, fraction of peak.
pub const FIG14_LOADS: [f64; 5] = [0.05, 0.2, 0.4, 0.6, 0.8];

/// Power above idle at a load, as the paper's figures give it: the share of
/// the dynamic range (idle → peak) a system uses. Used to compare with our
/// CPU-utilisation proxy.
#[must_use]
pub fn fig14_dynamic_share(watts: f64) -> f64 {
    (watts - FIG14_IDLE_W) / (FIG14_PEAK_W - FIG14_IDLE_W)
}

/// One number a claim's [`Test`] holds against another: `value`, what the
/// claim is about (e.g. CD's bytes per PUT), against `reference`, what it
/// is compared with (SD's, or a bound the claim sets).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evidence {
    /// The number the claim is about.
    pub value: f64,
    /// What it is held against.
    pub reference: f64,
}

/// How our measurement is held against a claim: each test looks at one
/// [`Evidence`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Test {
    /// `value < reference`.
    Below,
    /// `value > reference`.
    Above,
    /// `lo ≤ value / reference ≤ hi` (and `reference > 0`).
    RatioWithin {
        /// Lowest ratio that holds.
        lo: f64,
        /// Highest ratio that holds.
        hi: f64,
    },
    /// `|value - reference| < tolerance`.
    Near {
        /// Largest difference that holds (exclusive).
        tolerance: f64,
    },
}

impl Test {
    /// Whether the evidence passes.
    #[must_use]
    pub fn holds(self, e: Evidence) -> bool {
        let (a, b) = (e.value, e.reference);
        match self {
            Test::Below => a < b,
            Test::Above => a > b,
            Test::RatioWithin { lo, hi } => b > 0.0 && (lo..=hi).contains(&(a / b)),
            Test::Near { tolerance } => (a - b).abs() < tolerance,
        }
    }
}

/// The claims the experiments judge, one row each ([`CLAIMS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[expect(missing_docs)] // the names say which figure; the rows say the rest
pub enum ClaimId {
    Fig4Hogs,
    Fig5GetHeavy,
    Fig6GetHeavy,
    Figs5To7GetHeavy,
    Figs10And11PutBytes,
    Fig11PutBytes,
    Fig9PutVerbs,
    Fig10GetBytes,
    Figs8And9Locality,
    Fig12At50,
    Fig12At99,
    Fig13At50,
    Fig13At99,
    Fig13Other,
    Fig14At20,
    Fig14At80,
    Fig5Crossover,
    Table1Sent,
    Table1GetLatency,
    JobLocalWrites,
}

/// One claim of the paper: where it is, what it says, the published value
/// it rests on, and how ours is judged.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    /// Which claim (its row's index in [`CLAIMS`]).
    pub id: ClaimId,
    /// Figure or table; an experiment may add a qualifier (the value size).
    pub source: &'static str,
    /// The statement, as the report quotes it.
    pub paper: &'static str,
    /// The published number, where the claim has one.
    pub published: Option<f64>,
    /// The tests our evidence must all pass, in order.
    pub tests: &'static [Test],
}

const fn claim(
    id: ClaimId,
    source: &'static str,
    paper: &'static str,
    published: Option<f64>,
    tests: &'static [Test],
) -> Claim {
    Claim {
        id,
        source,
        paper,
        published,
        tests,
    }
}

/// "Similar": within ±25 % (Figs. 5–7) of SD.
const SIMILAR: Test = Test::RatioWithin {
    lo: 0.75,
    hi: 1.0 / 0.75,
};
/// The GET-heavy claim of Figs. 5–7: CD ≈ SD (pair CD, SD), HY below both
/// (pair HY, the lower of CD and SD).
const GET_HEAVY: &str = "GET-heavy, ≥16 KB: CD ≈ SD (judged: within ±25 %); HY below both";

/// Every claim the experiments judge, in [`ClaimId`] order.
pub const CLAIMS: [Claim; 20] = {
    use ClaimId as C;
    use Test::{Above, Below};
    [
        // Pair: (CD's, SD's) throughput kept at the most hogs.
        claim(C::Fig4Hogs, "Fig. 4", FIG4_CLAIM, None, &[Above]),
        claim(C::Fig5GetHeavy, "Fig. 5", GET_HEAVY, None, &[SIMILAR, Below]),
        claim(C::Fig6GetHeavy, "Fig. 6", GET_HEAVY, None, &[SIMILAR, Below]),
        claim(C::Figs5To7GetHeavy, "Figs. 5–7", GET_HEAVY, None, &[SIMILAR, Below]),
        // Pairs (CD, SD) unless said otherwise.
        claim(C::Figs10And11PutBytes, "Figs. 10/11", FIG11_CLAIM, None, &[Below]),
        claim(
            C::Fig11PutBytes,
            "Fig. 11",
            "CD PUTs move far fewer bytes than SD and HY PUTs",
            None,
            &[Below],
        ),
        claim(
            C::Fig9PutVerbs,
            "Fig. 9",
            "CD PUTs use more verbs than SD's two WRITEs (at least 6 in the paper)",
            Some(FIG9_CD_PUT_MIN_VERBS as f64),
            &[Above],
        ),
        claim(
            C::Fig10GetBytes,
            "Fig. 10",
            "CD and SD move similar bytes per GET",
            None,
            &[Test::RatioWithin { lo: 0.5, hi: 1.5 }],
        ),
        // Pair: (SD's local share, 1 / nodes).
        claim(
            C::Figs8And9Locality,
            "Figs. 8/9 (locality)",
            "about 7% of SD operations are local (1 of 15 nodes)",
            Some(FIG8_SD_LOCAL_SHARE),
            &[Test::Near { tolerance: 0.1 }],
        ),
        // Pairs: (CD vs SD at the largest size, at the smallest), (that, 0).
        claim(
            C::Fig12At50,
            "Fig. 12 (50% GET)",
            "CD below SD at 256 B; large values: CD over +50% above SD",
            Some(FIG12_LARGE_50),
            &[Above, Above],
        ),
        claim(
            C::Fig12At99,
            "Fig. 12 (99% GET)",
            "CD below SD at 256 B; large values: CD over +40% above SD",
            Some(FIG12_LARGE_99),
            &[Above, Above],
        ),
        // Pair: goodput with all optimisations, with none.
        claim(
            C::Fig13At50,
            "Fig. 13 (50% GET)",
            "all optimisations vs basic: +60%",
            Some(FIG13_GAIN_50),
            &[Above],
        ),
        claim(
            C::Fig13At99,
            "Fig. 13 (99% GET)",
            "all optimisations vs basic: +90%",
            Some(FIG13_GAIN_99),
            &[Above],
        ),
        claim(
            C::Fig13Other,
            "Fig. 13",
            "optimisations raise goodput",
            None,
            &[Above],
        ),
        // Pair: (CD's, SD's) CPU at the load, as a share of its own peak's.
        claim(
            C::Fig14At20,
            "Fig. 14 (20% load)",
            "SD 113 W vs CD 100 W (idle 81, peak 139): share of dynamic power SD 55% CD 33%",
            Some(FIG14_AT_20.1),
            &[Below],
        ),
        claim(
            C::Fig14At80,
            "Fig. 14 (80% load)",
            "SD 130 W vs CD 121 W (idle 81, peak 139): share of dynamic power SD 84% CD 69%",
            Some(FIG14_AT_80.1),
            &[Below],
        ),
        // Pair: (CD vs SD at the largest size, at the smallest).
        claim(
            C::Fig5Crossover,
            "Fig. 5 (50% GET)",
            "CD vs SD -30% at 2 KB, overtakes at 8KiB, +70% at 128 KB",
            Some(FIG5_CD_VS_SD_128KB),
            &[Above],
        ),
        // Pair: (the sizes where CD's bytes per operation are not below
        // SD's, 1): fewer at every size.
        claim(
            C::Table1Sent,
            "Table 1 (sent)",
            "CD sends fewer bytes than SD and HY at every size (0.41–0.86× SD)",
            None,
            &[Below],
        ),
        claim(
            C::Table1GetLatency,
            "Table 1 (GET latency)",
            "CD GET latency below SD's at every size (811 vs 1732 µs at 128 KB)",
            Some(811.0),
            &[Below],
        ),
        // Pair: (10 × CD's shuffle bytes over the fabric, the least of SD's
        // and HY's).
        claim(
            C::JobLocalWrites,
            "§1, §3.1 (decoupled design)",
            "writes are local: a decoupled store places new data in the writer's memory, so PUTs of large values need not cross the network (coupled designs send them to the key's node)",
            None,
            &[Below],
        ),
    ]
};

impl ClaimId {
    /// Its row.
    #[must_use]
    pub fn claim(self) -> &'static Claim {
        &CLAIMS[self as usize]
    }
}

/// Holds our measurement against claim `id`: `ours` is what we saw, in
/// words; `evidence` the numbers its tests judge (`None`, or too few, when a
/// system was not measured: then the claim is not judged). `qualifier`
/// follows the claim's source (e.g. "at 16KiB (90% GET)").
#[must_use]
pub fn judge(
    id: ClaimId,
    qualifier: Option<&str>,
    ours: String,
    evidence: Option<&[Evidence]>,
) -> Comparison {
    let claim = id.claim();
    let verdict = match evidence {
        Some(e) if e.len() == claim.tests.len() => {
            Verdict::of(claim.tests.iter().zip(e).all(|(t, &e)| t.holds(e)))
        }
        _ => Verdict::Unknown,
    };
    Comparison {
        source: qualifier.map_or_else(
            || claim.source.to_owned(),
            |q| format!("{} {q}", claim.source),
        ),
        paper: claim.paper.to_owned(),
        ours,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{pct, share};

    #[test]
    fn rows_are_in_id_order() {
        for (i, c) in CLAIMS.iter().enumerate() {
            assert_eq!(c.id as usize, i, "{:?}", c.id);
        }
    }

    #[test]
    fn claims_quote_the_published_numbers() {
        let fig14 = |(sd, cd): (f64, f64)| {
            format!(
                "SD {sd} W vs CD {cd} W (idle {FIG14_IDLE_W}, peak {FIG14_PEAK_W}): share of dynamic power SD {} CD {}",
                share(fig14_dynamic_share(sd)),
                share(fig14_dynamic_share(cd))
            )
        };
        assert_eq!(ClaimId::Fig14At20.claim().paper, fig14(FIG14_AT_20));
        assert_eq!(ClaimId::Fig14At80.claim().paper, fig14(FIG14_AT_80));
        let fig12 = |c| {
            format!(
                "CD below SD at 256 B; large values: CD over {} above SD",
                pct(c)
            )
        };
        assert_eq!(ClaimId::Fig12At50.claim().paper, fig12(FIG12_LARGE_50));
        assert_eq!(ClaimId::Fig12At99.claim().paper, fig12(FIG12_LARGE_99));
        let fig13 = |c| format!("all optimisations vs basic: {}", pct(c));
        assert_eq!(ClaimId::Fig13At50.claim().paper, fig13(FIG13_GAIN_50));
        assert_eq!(ClaimId::Fig13At99.claim().paper, fig13(FIG13_GAIN_99));
        assert_eq!(
            ClaimId::Figs8And9Locality.claim().paper,
            format!(
                "about {} of SD operations are local (1 of {NODES} nodes)",
                share(FIG8_SD_LOCAL_SHARE)
            )
        );
        assert_eq!(
            ClaimId::Fig9PutVerbs.claim().paper,
            format!(
                "CD PUTs use more verbs than SD's two WRITEs (at least {FIG9_CD_PUT_MIN_VERBS} in the paper)"
            )
        );
        assert_eq!(
            ClaimId::Fig5Crossover.claim().paper,
            format!(
                "CD vs SD {} at 2 KB, overtakes at {}, {} at 128 KB",
                pct(FIG5_CD_VS_SD_2KB),
                crate::workload::bytes_label(FIG5_CROSSOVER_BYTES as f64),
                pct(FIG5_CD_VS_SD_128KB)
            )
        );
        assert_eq!(
            TABLE1_CD.get_us[6],
            ClaimId::Table1GetLatency.claim().published.unwrap()
        );
    }

    #[test]
    fn judging() {
        // Fig. 10: CD's bytes per GET within half of SD's, either way.
        for (cd, verdict) in [(12.0, Verdict::Holds), (16.0, Verdict::Differs)] {
            let c = judge(
                ClaimId::Fig10GetBytes,
                None,
                "x".into(),
                Some(&[Evidence {
                    value: cd,
                    reference: 10.0,
                }]),
            );
            assert_eq!(c.verdict, verdict, "{cd}");
        }
        let c = judge(
            ClaimId::Fig5GetHeavy,
            Some("at 16KiB (50% GET)"),
            "x".into(),
            Some(&[Evidence {
                value: 1.0,
                reference: 1.0,
            }]),
        );
        assert_eq!(c.verdict, Verdict::Unknown, "a missing pair is not judged");
        assert_eq!(c.source, "Fig. 5 at 16KiB (50% GET)");
        assert!(!Test::RatioWithin { lo: 0.5, hi: 2.0 }.holds(Evidence {
            value: 1.0,
            reference: 0.0
        }));
        assert!(Test::Near { tolerance: 0.1 }.holds(Evidence {
            value: 0.3,
            reference: 0.35
        }));
    }
}
