//! Published numbers and claims of the Nessie paper (Szepesi et al., "Nessie:
//! A Decoupled, Client-Driven Key-Value Store Using RDMA", IEEE TPDS 2017,
//! §6), for the reports to place ours beside.
//!
//! The paper's figures are plots; their numbers are not in the text, so for
//! Figs. 4–14 this module holds the quantitative statements the text makes
//! about them (each cited), and Table 1 in full. Setup: 15 nodes, 12 cores and
//! one 10 GbE ConnectX-3 NIC each, 128 B keys, index load factor 0.4, 7
//! filter bits, 3 hash functions.

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

/// Table 1, NessieSD (SD).
pub const TABLE1_SD: Table1Row = Table1Row {
    get_us: [25.0, 43.0, 82.0, 184.0, 412.0, 875.0, 1732.0],
    put_us: [25.0, 41.0, 77.0, 171.0, 381.0, 816.0, 1602.0],
    all_us: [25.0, 42.0, 80.0, 178.0, 397.0, 846.0, 1667.0],
    sent_gb: [1245.0, 1503.0, 1590.0, 1439.0, 1291.0, 1212.0, 1230.0],
};

/// Table 1, NessieHY (HY).
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
