//! `scripts/sample.sh` around a command, against `ipmi_sim` and a fake
//! powercap tree, then `power-merge` over the logs it wrote. Without
//! `ipmi_sim` the IPMI part is skipped loudly and the rest still runs.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use power_ipmi::logs::{find_logs, merge, read_ipmi_log, Idle, TOTAL};
use support::{Simulator, POWER};

const RANGE: u64 = 262_143_328_850;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/sample.sh")
}

fn fake_powercap(dir: &Path, start_uj: u64) -> PathBuf {
    let root = dir.join("powercap");
    let zone = root.join("intel-rapl:0");
    std::fs::create_dir_all(&zone).unwrap();
    std::fs::write(zone.join("name"), "package-0\n").unwrap();
    std::fs::write(zone.join("max_energy_range_uj"), format!("{RANGE}\n")).unwrap();
    std::fs::write(zone.join("energy_uj"), format!("{start_uj}\n")).unwrap();
    root
}

#[test]
fn sample_sh_logs_a_run_and_power_merge_integrates_it() {
    let sim = Simulator::start(
        "sample_sh_logs_a_run_and_power_merge_integrates_it (IPMI part)",
        &[POWER],
        false,
    );
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    // The package counter wraps during the command: 0.5 J to the top of
    // its range, 0.5 J past zero.
    let powercap = fake_powercap(dir.path(), RANGE - 500_000);
    let counter = powercap.join("intel-rapl:0/energy_uj");
    let command = format!(
        "awk 'BEGIN {{ for (i = 0; i < 2000000; i++) s += i }}'; echo 500000 > '{}'; sleep 1.2",
        counter.display()
    );

    // Bounded: a sampler that never stops fails the test instead of
    // hanging it.
    let mut cmd = Command::new("timeout");
    cmd.args(["120", "bash"])
        .arg(script())
        .args(["-n", "node1", "-i", "0.3", "-o"])
        .arg(&logs);
    cmd.env("POWERCAP_ROOT", &powercap);
    match &sim {
        Some(sim) => {
            sim.set(POWER, 120.0);
            sim.wait_for(POWER, 120.0);
            cmd.args([
                "-H",
                "127.0.0.1",
                "-p",
                &sim.port().to_string(),
                "-U",
                support::USER,
                "-C",
                "3",
            ]);
            cmd.env("IPMI_PASSWORD", support::PASSWORD);
        }
        None => {
            cmd.args(["-m", "off"]);
        }
    }
    cmd.args(["--", "sh", "-c", &command]);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "sample.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let nodes = find_logs(std::slice::from_ref(&logs)).unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].node, "node1");
    let rows = merge(&nodes, &Idle::Watts(50.0)).unwrap();
    let row = |node: &str, source: &str| {
        rows.iter()
            .find(|r| r.node == node && r.source == source)
            .unwrap_or_else(|| panic!("no row {node},{source} in {rows:#?}"))
    };

    let rapl = row("node1", "rapl");
    assert!((rapl.joules.unwrap() - 1.0).abs() < 1e-9, "{rapl:?}");
    assert_eq!(row(TOTAL, "rapl").joules, rapl.joules);

    let cpu = row("node1", "cpu");
    assert!(cpu.cpu_seconds.unwrap() > 0.0, "{cpu:?}");
    assert!(cpu.seconds.unwrap() > 1.0);

    if sim.is_some() {
        let (_, trace) = read_ipmi_log(nodes[0].ipmi.as_ref().expect("an IPMI log")).unwrap();
        assert!(trace.len() >= 3, "{trace:?}");
        assert!(
            trace.samples().iter().all(|s| s.watts == 120.0),
            "{trace:?}"
        );
        let ipmi = row("node1", "ipmi");
        let seconds = ipmi.seconds.unwrap();
        // The log spans the command (first reading before it, last after).
        assert!(seconds >= cpu.seconds.unwrap(), "{ipmi:?} vs {cpu:?}");
        assert!((ipmi.joules.unwrap() - 120.0 * seconds).abs() < 1e-6);
        assert!((ipmi.mean_watts.unwrap() - 120.0).abs() < 1e-9, "{ipmi:?}");
        assert!((ipmi.above_idle_joules.unwrap() - 70.0 * seconds).abs() < 1e-6);
    } else {
        assert!(nodes[0].ipmi.is_none());
    }

    // The binary writes the same table.
    let merged = dir.path().join("merged.csv");
    let status = Command::new(env!("CARGO_BIN_EXE_power-merge"))
        .args(["--idle-watts", "50", "-o"])
        .arg(&merged)
        .arg(&logs)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&merged).unwrap();
    assert!(text.starts_with("node,source,"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("node1,rapl,") && l.contains(",1.000,")),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("TOTAL,cpu,")), "{text}");
}

#[test]
fn sample_sh_passes_the_exit_status_through_and_power_merge_rejects_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let out = Command::new("bash")
        .arg(script())
        .args(["-n", "n", "-m", "off", "-r", "off", "-o"])
        .arg(&logs)
        .args(["--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let cpu = std::fs::read_to_string(logs.join("n.cpu.csv")).unwrap();
    assert!(
        cpu.lines().nth(1).unwrap().contains(",3,\"sh -c exit 3\""),
        "{cpu}"
    );

    let usage = Command::new("bash").arg(script()).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));

    std::fs::write(logs.join("n.ipmi.csv"), "timestamp,watts\n1.0,oops\n").unwrap();
    let merge = Command::new(env!("CARGO_BIN_EXE_power-merge"))
        .arg(&logs)
        .output()
        .unwrap();
    assert!(!merge.status.success());
    let err = String::from_utf8_lossy(&merge.stderr);
    assert!(
        err.contains("n.ipmi.csv:2") && err.contains("oops"),
        "{err}"
    );
}
