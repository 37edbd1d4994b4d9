//! The flags the experiments share, and parsers of their values.

use crate::launcher::ClusterArgs;
use crate::workload::WorkloadSpec;
use nessie_examples::StoreKind;
use std::path::PathBuf;

/// Flags of every subcommand that writes a report (the experiments, `job`
/// and `chaos`).
#[derive(Clone, Debug, clap::Args, serde::Serialize)]
pub struct OutputArgs {
    /// A complete but short run (under a minute on 2 cores): fewer points,
    /// fewer keys or less input, shorter phases.
    #[arg(long)]
    pub quick: bool,
    /// Where to write the report (default `results/<subcommand>-<timestamp>`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print only machine-readable JSON (results.json) on stdout.
    #[arg(long)]
    pub json: bool,
}

impl OutputArgs {
    /// `--out`, or `results/<name>-<local time>`.
    #[must_use]
    pub fn dir(&self, name: &str) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            PathBuf::from("results").join(format!(
                "{name}-{}",
                chrono::Local::now().format("%Y%m%d-%H%M%S")
            ))
        })
    }
}

/// The workload point of the experiments that measure one (16 KiB values,
/// 90 % GETs unless told otherwise).
#[derive(Clone, Debug, clap::Args)]
pub struct PointArgs {
    /// Value size (e.g. 16KiB, 256, 2m).
    #[arg(long, default_value = "16KiB", value_parser = parse_size)]
    pub value_size: usize,
    /// Fraction of GETs (0.9 or 90%).
    #[arg(long, default_value = "0.9", value_parser = parse_fraction)]
    pub get_ratio: f64,
}

/// The value sizes and GET fractions of the experiments that measure a grid
/// of them (`sweep`: 256 B … 128 KiB, --quick 2KiB,16KiB,128KiB; `zipf`:
/// 256B,2KiB,16KiB,128KiB, --quick 256B,16KiB).
#[derive(Clone, Debug, clap::Args)]
pub struct GridArgs {
    /// Value sizes (default: the experiment's; see its description).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub value_sizes: Option<Vec<usize>>,
    /// GET fractions (default 0.5,0.9,0.99; --quick: sweep 0.5,0.9, zipf
    /// 0.5,0.99).
    #[arg(long, value_delimiter = ',', value_parser = parse_fraction)]
    pub get_ratios: Option<Vec<f64>>,
}

/// Flags every experiment takes.
#[derive(Clone, Debug, clap::Args, serde::Serialize)]
pub struct Common {
    /// Output flags.
    #[command(flatten)]
    #[serde(flatten)]
    pub output: OutputArgs,
    /// Fabric and launcher of the node processes.
    #[command(flatten)]
    #[serde(flatten)]
    pub cluster: ClusterArgs,
    /// Systems to run (default: the experiment's own list).
    #[arg(long, value_delimiter = ',', value_name = "SYSTEM,...")]
    pub systems: Option<Vec<StoreKind>>,
    /// Node processes per cluster.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub nodes: u16,
    /// Worker threads per node. CD and the peers' clients use them all;
    /// SD and HY give `--server-workers` of them to server threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// Server worker threads per node of SD and HY.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub server_workers: u16,
    /// Number of keys (default: from the value size, about 256 MiB of data
    /// and 1,000 to 200,000 keys; with --quick 8 MiB and 256 to 4,096 keys).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: Option<u64>,
    /// Key size in bytes.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u16).range(8..=1024))]
    pub key_size: u16,
    /// Background CPU hogs (unpinned busy processes) beside every run, to
    /// emulate a shared host (`contention` sets its own).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=256))]
    pub cpu_hogs: u16,
    /// Open loop: Poisson arrivals at this many operations per second over
    /// the whole cluster (default: closed loop; `energy` sets its own).
    #[arg(long, value_name = "OPS_PER_SEC", value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Where CD places a key's candidate index slots: `one_node` (all in
    /// the index table of one node, so a pass reads from one node) or
    /// `spread` (over all nodes: the paper's layout, the store's default).
    #[arg(long, default_value = "one_node", value_parser = parse_placement)]
    pub placement: nessie::Placement,
    /// Seed of every random stream.
    #[arg(long, default_value_t = WorkloadSpec::default().seed)]
    pub seed: u64,
    /// Measured phase of every run, ms (overrides the experiment's default).
    #[arg(long, hide = true)]
    pub duration_ms: Option<u64>,
    /// Warm-up of every run, ms (overrides the default).
    #[arg(long, hide = true)]
    pub warmup_ms: Option<u64>,
}

/// Parses a [`nessie::Placement`]: `one_node` or `spread`.
///
/// # Errors
/// A message for clap.
pub(super) fn parse_placement(s: &str) -> std::result::Result<nessie::Placement, String> {
    match s.trim().replace('-', "_").as_str() {
        "one_node" => Ok(nessie::Placement::OneNode),
        "spread" => Ok(nessie::Placement::Spread),
        _ => Err(format!("`{s}`: expected `one_node` or `spread`")),
    }
}

/// Parses a size: `16384`, `16k`, `16KiB`, `2m`.
///
/// # Errors
/// A message for clap.
pub fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: usize = digits.parse().map_err(|_| format!("`{s}` is not a size"))?;
    let mult = match unit.trim() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        _ => return Err(format!("`{s}`: unknown unit (use B, KiB or MiB)")),
    };
    match n.checked_mul(mult) {
        Some(v) if (1..=nessie::MAX_VALUE_SIZE).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not between 1 B and 1 GiB")),
    }
}

/// Parses `--replicas`: a copy count from 1 to the store's most
/// ([`nessie::layout::region::MAX_REPLICAS`]). Whether the nodes can hold
/// them is checked with the node count ([`crate::spec::check_replicas`]).
///
/// # Errors
/// A message for clap.
pub fn parse_replicas(s: &str) -> std::result::Result<usize, String> {
    let max = nessie::layout::region::MAX_REPLICAS;
    match s.trim().parse::<usize>() {
        Ok(r) if (1..=max).contains(&r) => Ok(r),
        _ => Err(format!(
            "`{s}` is not a replica count from 1 (unreplicated) to {max}"
        )),
    }
}

/// Parses a positive rate (operations per second).
///
/// # Errors
/// A message for clap.
pub fn parse_rate(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a positive number of operations per second"
        )),
    }
}

/// Parses a fraction: `0.9` or `90%`.
///
/// # Errors
/// A message for clap.
pub fn parse_fraction(s: &str) -> std::result::Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("`{s}` is not a fraction (e.g. 0.9 or 90%)"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("`{s}` is not within 0 and 1 (0 % and 100 %)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_parse() {
        use nessie::Placement;
        assert_eq!(parse_placement("one_node"), Ok(Placement::OneNode));
        assert_eq!(parse_placement("one-node"), Ok(Placement::OneNode));
        assert_eq!(parse_placement("spread"), Ok(Placement::Spread));
        assert!(parse_placement("both").is_err());
    }

    #[test]
    fn sizes_and_fractions_parse() {
        assert_eq!(parse_size("16KiB"), Ok(16384));
        assert_eq!(parse_size("16k"), Ok(16384));
        assert_eq!(parse_size("256"), Ok(256));
        assert_eq!(parse_size("2m"), Ok(2 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12q").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert_eq!(parse_fraction("90%"), Ok(0.9));
        assert_eq!(parse_fraction("0.5"), Ok(0.5));
        assert!(parse_fraction("1.5").is_err());
        assert!(parse_fraction("x").is_err());
        assert_eq!(parse_rate("2500"), Ok(2500.0));
        assert!(parse_rate("0").is_err() && parse_rate("inf").is_err());
        assert_eq!(parse_replicas("2"), Ok(2));
        assert!(parse_replicas("0").is_err() && parse_replicas("5").is_err());
    }
}
