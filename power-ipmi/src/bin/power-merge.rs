//! `power-merge`: merges the per-node logs of `scripts/sample.sh` into one
//! CSV table with per-node and total Joules.
//!
//! ```text
//! power-merge [--idle DIR | --idle-watts W] [-o OUT.csv] LOG_DIR_OR_FILE...
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use power_ipmi::logs::{find_logs, merge, write_csv, Idle};
use power_ipmi::PowerError;

const USAGE: &str = "\
usage: power-merge [--idle DIR | --idle-watts W] [-o OUT.csv] LOG_DIR_OR_FILE...

Integrates every node's sample.sh logs (NODE.ipmi.csv, NODE.rapl.csv,
NODE.cpu.csv) and writes one CSV table (stdout, or OUT.csv):

  node,source,start_unix,end_unix,seconds,samples,joules,mean_watts,
  idle_watts,above_idle_joules,cpu_seconds

with a row per node and source (ipmi; rapl = packages + DRAM, and
rapl/ZONE/NAME per zone; cpu) and TOTAL rows summing the nodes.

  --idle DIR       P_idle per node: the mean power of an idle run's IPMI logs
  --idle-watts W   the same P_idle for every node
  -o FILE          write the table to FILE instead of stdout";

struct Args {
    idle: Idle,
    idle_dir: Option<PathBuf>,
    out: Option<PathBuf>,
    logs: Vec<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        idle: Idle::None,
        idle_dir: None,
        out: None,
        logs: Vec::new(),
    };
    let mut it = std::env::args_os().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.to_str() {
            Some("-h" | "--help") => return Err(String::new()),
            Some("--idle") => args.idle_dir = Some(value("--idle")?.into()),
            Some("--idle-watts") => {
                let v = value("--idle-watts")?;
                let w: f64 = v
                    .to_str()
                    .and_then(|s| s.parse().ok())
                    .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                    .ok_or_else(|| format!("--idle-watts: not a power in Watts: {v:?}"))?;
                args.idle = Idle::Watts(w);
            }
            Some("-o") => args.out = Some(value("-o")?.into()),
            Some(s) if s.starts_with('-') && s.len() > 1 => {
                return Err(format!("unknown option {s}"))
            }
            _ => args.logs.push(arg.into()),
        }
    }
    if args.idle_dir.is_some() && args.idle != Idle::None {
        return Err("give --idle or --idle-watts, not both".into());
    }
    if args.logs.is_empty() {
        return Err("no log directory or file given".into());
    }
    Ok(args)
}

fn run(args: Args) -> Result<(), PowerError> {
    let idle = match &args.idle_dir {
        Some(dir) => Idle::from_logs(std::slice::from_ref(dir))?,
        None => args.idle,
    };
    let nodes = find_logs(&args.logs)?;
    let rows = merge(&nodes, &idle)?;
    let write_err = |path: PathBuf| move |e| PowerError::Io { path, source: e };
    match &args.out {
        Some(path) => {
            let file = std::fs::File::create(path).map_err(write_err(path.clone()))?;
            let mut out = std::io::BufWriter::new(file);
            write_csv(&rows, &mut out)
                .and_then(|()| out.flush())
                .map_err(write_err(path.clone()))
        }
        None => write_csv(&rows, std::io::stdout().lock()).map_err(write_err("<stdout>".into())),
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) if msg.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("power-merge: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("power-merge: {e}");
            ExitCode::FAILURE
        }
    }
}
