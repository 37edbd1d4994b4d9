//! `failover --quick` end to end on a local three-process cluster, on
//! `shm` and on `tcp`: a node is lost mid-run and replaced, the report has
//! its time series, plot and summary, the survivors saw the view change
//! before they served again, the restore finished and the cluster served
//! after it; nothing is left behind. Counts and the order of events only:
//! the host is shared, so no time is held to a bound.

mod support;

use std::path::Path;
use support::{assert_ok, bench, leftover_processes, leftover_shm, results, run};

/// The time series' rows: (`t_s`, `ok_per_s`, `view_changing`).
fn series(dir: &Path) -> Vec<(f64, f64, u64)> {
    let text = std::fs::read_to_string(dir.join("timeline.csv")).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|c| *c == name).unwrap();
    let (t, ok, vc) = (col("t_s"), col("ok_per_s"), col("view_changing"));
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            assert_eq!(cells.len(), head.len(), "{l}");
            (
                cells[t].parse().unwrap(),
                cells[ok].parse().unwrap(),
                cells[vc].parse().unwrap(),
            )
        })
        .collect()
}

fn quick_failover(fabric: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(fabric);
    let args = [
        "failover",
        "--quick",
        "--fabric",
        fabric,
        "--value-size",
        "1KiB",
        "--keys",
        "600",
        "--threads",
        "1",
    ];
    let (out, pid) = run(&args, &dir, &[]);
    assert_ok(&out);
    for f in [
        "timeline.csv",
        "failover.csv",
        "restore.csv",
        "phases.csv",
        "report.md",
        "failover.svg",
        "failover.png",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let json = results(&dir);
    assert_eq!(
        json["runs"][0]["status"], "ok",
        "{}",
        json["runs"][0]["reason"]
    );
    let o = &json["outcome"];
    let time = |name: &str| {
        o[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name} missing: {o}"))
    };
    let (detect, serve) = (time("detect_s"), time("serve_again_s"));
    assert!(0.0 < detect && detect < serve, "{o}");
    assert!(time("restore_s") > 0.0, "{o}");
    assert!(o["restore"]["data_slots"].as_u64().unwrap() > 0, "{o}");
    assert!(o["restore"]["bytes_read"].as_u64().unwrap() > 0, "{o}");
    assert!(o["ok_after_restore"].as_u64().unwrap() > 0, "{o}");

    let rows = series(&dir);
    let restored = time("restored_at_s");
    assert!(rows.iter().any(|r| r.2 > 0), "a survivor saw ViewChanging");
    let after: f64 = rows.iter().filter(|r| r.0 >= restored).map(|r| r.1).sum();
    assert!(after > 0.0, "nothing succeeded after the restore");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for says in ["detect", "serve again", "restore done", "timeline.csv"] {
        assert!(md.contains(says), "{says}: {md}");
    }
    assert!(
        leftover_processes(&dir).is_empty(),
        "{:?}",
        leftover_processes(&dir)
    );
    assert!(leftover_shm(pid).is_empty(), "{:?}", leftover_shm(pid));
}

#[test]
fn failover_quick_on_shm_detects_serves_again_and_restores() {
    quick_failover("shm");
}

#[test]
fn failover_quick_on_tcp_detects_serves_again_and_restores() {
    quick_failover("tcp");
}

#[test]
fn failover_flags_that_cannot_run_are_refused_before_anything_starts() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, says) in [
        (&["failover", "--replicas", "1"][..], "--replicas 2 or more"),
        (&["failover", "--nodes", "2"], "at least 3 nodes"),
        (&["failover", "--victim", "3"], "not a node"),
        (
            &["failover", "--kill-at", "5", "--rejoin-at", "4"],
            "--kill-at",
        ),
        (&["failover", "--launcher", "srun"], "--launcher local"),
        (&["failover", "--systems", "sd"], "CD only"),
    ] {
        let out = bench()
            .args(args)
            .arg("--out")
            .arg(tmp.path().join("refused"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(!tmp.path().join("refused").exists());
}
