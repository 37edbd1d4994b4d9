//! The launcher flags: command lines, refusals, the run's secret.

use super::*;
use clap::Parser;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    cluster: ClusterArgs,
}

fn parse(args: &[&str]) -> std::result::Result<ClusterArgs, clap::Error> {
    Cli::try_parse_from(std::iter::once("nessie-bench").chain(args.iter().copied()))
        .map(|c| c.cluster)
}

fn launching(args: &[&str]) -> Launching {
    parse(args).unwrap().resolve().unwrap()
}

fn files(dir: &str) -> RunFiles {
    RunFiles {
        dir: dir.into(),
        config: format!("{dir}/config.toml").into(),
        spec: format!("{dir}/spec.json").into(),
    }
}

fn strings(args: &[OsString]) -> Vec<String> {
    args.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

fn no_vars(_: &str) -> Option<String> {
    None
}

/// A stand-in for the launcher program `name`: an empty file in a fresh
/// directory. Resolving the flags only checks that the file exists and
/// nothing runs it, so the tests need no Slurm or Open MPI.
fn stand_in(name: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, "").unwrap();
    let path = path.to_str().unwrap().to_owned();
    (dir, path)
}

#[test]
fn srun_gets_the_node_command_after_its_own_and_the_extra_arguments() {
    let (_dir, srun) = stand_in("srun");
    let l = launching(&[
        "--launcher",
        "srun",
        "--launcher-program",
        &srun,
        "--launcher-arg=--partition=bench",
        "--launcher-arg",
        "-w",
        "--launcher-arg",
        "n[0-2]",
    ]);
    assert_eq!(l.program(), Some(Path::new(&srun)));
    let args = l.launcher_args(
        Path::new("/opt/nessie-bench"),
        3,
        &files("/r/run 1"),
        &RunSecret::none(),
        false,
        no_vars,
    );
    assert_eq!(
        strings(&args),
        [
            "-N",
            "3",
            "-n",
            "3",
            "--input=all",
            "--kill-on-bad-exit=1",
            "--error=/r/run 1/node-%t.stderr",
            "--partition=bench",
            "-w",
            "n[0-2]",
            "/opt/nessie-bench",
            "node",
            "--config",
            "/r/run 1/config.toml",
            "--spec",
            "/r/run 1/spec.json",
            "--report-dir",
            "/r/run 1",
        ]
    );
    assert_eq!(
        l.node_log(Path::new("/r"), 2),
        Path::new("/r/node-2.stderr")
    );
}

#[test]
fn a_percent_in_the_run_directory_is_not_an_srun_pattern() {
    let (_dir, srun) = stand_in("srun");
    let l = launching(&["--launcher", "srun", "--launcher-program", &srun]);
    let args = strings(&l.launcher_args(
        Path::new("/b"),
        2,
        &files("/r/50%t"),
        &RunSecret::none(),
        true,
        no_vars,
    ));
    // A replicated store's step outlives a lost rank.
    assert!(args.contains(&"--kill-on-bad-exit=0".to_owned()));
    assert!(
        args.contains(&"--error=/r/50%%t/node-%t.stderr".to_owned()),
        "{args:?}"
    );
}

#[test]
fn mpirun_passes_on_the_secret_by_name_only() {
    let dir = tempfile::tempdir().unwrap();
    let secret = RunSecret::prepare(dir.path(), no_vars).unwrap();
    let file = dir.path().join("secret");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.len(), 64, "32 random bytes in hex");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert_eq!(
        secret.env(),
        [(
            OsString::from("NESSIE_SECRET_FILE"),
            OsString::from(file.clone())
        )]
    );
    let (_programs, mpirun) = stand_in("mpirun");
    let l = launching(&[
        "--launcher",
        "mpirun",
        "--launcher-program",
        &mpirun,
        "--fabric",
        "tcp",
        "--launcher-arg=--hostfile=hosts",
    ]);
    let vars = |name: &str| (name == "NESSIE_RENDEZVOUS").then(|| "h0:20000".to_owned());
    let args = strings(&l.launcher_args(Path::new("/b"), 4, &files("/r"), &secret, false, vars));
    assert_eq!(
        args[..11],
        [
            "-np",
            "4",
            "--stdin",
            "all",
            "-x",
            "NESSIE_SECRET_FILE",
            "-x",
            "NESSIE_RENDEZVOUS",
            "--hostfile=hosts",
            "/b",
            "node"
        ]
    );
    assert!(!args.iter().any(|a| a.contains(&text)), "{args:?}");
    assert_eq!(
        l.node_log(Path::new("/r"), 1),
        Path::new("/r/launcher.stderr")
    );
    drop(secret);
    assert!(!file.exists(), "the run's secret is removed after the run");
}

#[test]
fn a_callers_secret_is_used_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let given = |name: &str| (name == "NESSIE_SECRET").then(|| "s".repeat(32));
    let secret = RunSecret::prepare(dir.path(), given).unwrap();
    assert!(secret.env().is_empty());
    assert_eq!(secret.forwarded(), ["NESSIE_SECRET"]);
    assert!(!dir.path().join("secret").exists());
    let missing =
        |name: &str| (name == "NESSIE_SECRET_FILE").then(|| "/nonexistent/secret".to_owned());
    let e = RunSecret::prepare(dir.path(), missing).unwrap_err();
    assert!(e.to_string().contains("NESSIE_SECRET_FILE"), "{e}");
}

#[test]
fn nodes_the_harness_starts_get_their_id() {
    let args = strings(&files("/r").node_args(Some(2)));
    assert_eq!(
        args,
        [
            "node",
            "--config",
            "/r/config.toml",
            "--spec",
            "/r/spec.json",
            "--node-id",
            "2"
        ]
    );
    let local = launching(&[]);
    assert!(local.program().is_none());
    assert!(local
        .launcher_args(
            Path::new("/b"),
            3,
            &files("/r"),
            &RunSecret::none(),
            false,
            no_vars
        )
        .is_empty());
    assert_eq!(
        local.peer_host().unwrap(),
        IpAddr::from(Ipv4Addr::LOCALHOST)
    );
    let chosen = launching(&["--peer-host", "10.213.0.254"]);
    assert_eq!(chosen.peer_host().unwrap().to_string(), "10.213.0.254");
}

#[test]
fn bad_combinations_are_refused() {
    let (_dir, srun) = stand_in("srun");
    for args in [&["--launcher-arg=-N1"][..], &["--launcher-program", &srun]] {
        let e = parse(args).unwrap().resolve().unwrap_err();
        assert!(
            matches!(&e, HarnessError::Usage(m) if m.contains("--launcher srun or mpirun")),
            "{args:?}: {e}"
        );
    }
    let verbs = parse(&["--fabric", "verbs"]).unwrap().resolve();
    if nessie::VERBS_BUILT {
        assert_eq!(verbs.unwrap().fabric, Fabric::Verbs);
    } else {
        let e = verbs.unwrap_err();
        assert!(
            matches!(&e, HarnessError::Usage(m) if m.contains("nessie/verbs")),
            "{e}"
        );
    }
    let missing = parse(&[
        "--launcher",
        "srun",
        "--launcher-program",
        "/nonexistent/srun",
    ]);
    assert!(matches!(
        missing.unwrap().resolve(),
        Err(HarnessError::Usage(m)) if m.contains("no such file")
    ));
    assert!(parse(&["--launcher", "pbs"]).is_err());
    assert!(parse(&["--fabric", "ib"]).is_err());
    assert!(parse(&["--peer-host", "hub"]).is_err(), "an address");
}

#[test]
fn what_a_launch_fills_in_is_left_empty_and_checked_apart() {
    let mut c = Config {
        nodes: 3,
        fabric: Fabric::Tcp.config("t", 2),
        ..Config::default()
    };
    assert!(c.validate().is_err(), "no secret, no rendezvous yet");
    checkable(&c).validate().unwrap();
    c.fabric = Fabric::Verbs.config("t", 2);
    checkable(&c).validate().unwrap();
    assert_eq!(
        Fabric::Shm.config("t", 2),
        FabricConfig::Shm {
            dir: Some("/dev/shm/nessie-t".into())
        }
    );
}

#[test]
fn the_setup_names_launcher_fabric_and_network() {
    let (_dir, srun) = stand_in("srun");
    let l = launching(&[
        "--launcher",
        "srun",
        "--launcher-program",
        &srun,
        "--fabric",
        "tcp",
        "--network",
        "3 hosts, tbf 10gbit",
    ]);
    let d = l.describe(3);
    for part in ["`srun -N 3 -n 3 --input=all`", "`tcp` fabric", "tbf 10gbit"] {
        assert!(d.contains(part), "{part}: {d}");
    }
    assert!(launching(&[]).describe(3).contains("`shm` fabric"));
}
