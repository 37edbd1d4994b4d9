//! Launch detection from fake launcher environments, and the sources of the
//! cluster secret.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;

use nessie::bootstrap::{
    expand_hostlist, secret_from, Launch, Launcher, Overrides, LOCAL_RENDEZVOUS_PORT,
};
use nessie::Error;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn detect(pairs: &[(&str, &str)]) -> Result<Option<Launch>, Error> {
    let map = env(pairs);
    Launch::from_vars(|name| map.get(name).cloned())
}

fn launch(pairs: &[(&str, &str)]) -> Launch {
    detect(pairs)
        .unwrap_or_else(|e| panic!("{pairs:?}: {e}"))
        .unwrap_or_else(|| panic!("{pairs:?}: no launch detected"))
}

/// The configuration error's message; panics on anything else.
fn refused(pairs: &[(&str, &str)]) -> String {
    match detect(pairs) {
        Err(Error::Config(message)) => message,
        other => panic!("{pairs:?}: expected a configuration error, got {other:?}"),
    }
}

const SLURM: &[(&str, &str)] = &[
    ("SLURM_PROCID", "4"),
    ("SLURM_NTASKS", "6"),
    ("SLURM_LOCALID", "1"),
    ("SLURM_JOB_ID", "1234567"),
    ("SLURM_STEP_NODELIST", "node[01-02],gpu7"),
];

/// `base` with the variables of `extra` set (replacing `base`'s).
fn with<'a>(base: &[(&'a str, &'a str)], extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all: Vec<_> = base
        .iter()
        .copied()
        .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
        .collect();
    all.extend_from_slice(extra);
    all
}

#[test]
fn nothing_set_is_no_launch() {
    assert_eq!(detect(&[]).unwrap(), None);
    assert_eq!(
        detect(&[("PATH", "/bin"), ("SLURM_NTASKS", "4")]).unwrap(),
        None
    );
    assert_eq!(
        detect(&[("NESSIE_NODE_ID", ""), ("RANK", "")]).unwrap(),
        None
    );
}

#[test]
fn slurm_step() {
    let l = launch(SLURM);
    assert_eq!(l.launcher, Launcher::Slurm);
    assert_eq!((l.node, l.nodes, l.local_rank), (4, 6, 1));
    assert_eq!(l.job_id.as_deref(), Some("1234567"));
    assert_eq!(l.hosts, ["node01", "node02", "gpu7"]);
    assert_eq!(l.rendezvous.as_deref(), Some("node01:24567"));
    assert_eq!(l.require_rendezvous().unwrap(), "node01:24567");
}

#[test]
fn slurm_rendezvous_port_and_missing_parts() {
    let l = launch(&with(SLURM, &[("NESSIE_RENDEZVOUS_PORT", "7001")]));
    assert_eq!(l.rendezvous.as_deref(), Some("node01:7001"));

    let l = launch(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_LOCALID", "0"),
    ]);
    assert_eq!(
        (l.job_id.clone(), l.hosts.len(), l.rendezvous.clone()),
        (None, 0, None)
    );
    let e = l.require_rendezvous().unwrap_err().to_string();
    assert!(
        e.contains("SLURM_STEP_NODELIST") && e.contains("NESSIE_RENDEZVOUS"),
        "{e}"
    );

    let l = launch(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_STEP_NODELIST", "c[7-8]"),
    ]);
    assert_eq!(l.rendezvous.as_deref(), Some("c7:20000"));
}

#[test]
fn slurm_malformed() {
    assert!(
        refused(&with(SLURM, &[("SLURM_STEP_NODELIST", "node[01-")]))
            .contains("SLURM_STEP_NODELIST")
    );
    assert!(refused(&with(SLURM, &[("SLURM_JOB_ID", "12x")])).contains("SLURM_JOB_ID"));
    assert!(refused(&with(SLURM, &[("NESSIE_RENDEZVOUS_PORT", "0")]))
        .contains("NESSIE_RENDEZVOUS_PORT"));
    assert!(
        refused(&with(SLURM, &[("NESSIE_RENDEZVOUS_PORT", "70000")]))
            .contains("NESSIE_RENDEZVOUS_PORT")
    );
    assert!(refused(&with(SLURM, &[("SLURM_PROCID", "6")]))
        .contains("SLURM_PROCID is 6 but SLURM_NTASKS is 6"));
    assert!(refused(&with(SLURM, &[("SLURM_PROCID", "four")])).contains("SLURM_PROCID=\"four\""));
    assert!(refused(&with(SLURM, &[("SLURM_NTASKS", "0")])).contains("SLURM_NTASKS is 0"));
    assert!(refused(&with(SLURM, &[("SLURM_LOCALID", "-1")])).contains("SLURM_LOCALID"));
    assert!(refused(&with(SLURM, &[("SLURM_LOCALID", "6")])).contains("SLURM_LOCALID is 6"));

    let no_size: Vec<_> = SLURM
        .iter()
        .copied()
        .filter(|(k, _)| *k != "SLURM_NTASKS")
        .collect();
    let e = refused(&no_size);
    assert!(
        e.contains("SLURM_PROCID is set but SLURM_NTASKS is not"),
        "{e}"
    );
    let no_local: Vec<_> = SLURM
        .iter()
        .copied()
        .filter(|(k, _)| *k != "SLURM_LOCALID")
        .collect();
    assert!(refused(&no_local).contains("SLURM_LOCALID"));
}

#[test]
fn open_mpi() {
    let base = [
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
    ];
    let l = launch(&base);
    assert_eq!(l.launcher, Launcher::OpenMpi);
    assert_eq!((l.node, l.nodes, l.local_rank), (3, 8, 1));
    assert_eq!((l.job_id.clone(), l.rendezvous.clone()), (None, None));
    let e = l.require_rendezvous().unwrap_err().to_string();
    assert!(e.contains("NESSIE_RENDEZVOUS"), "{e}");

    let l = launch(&with(&base, &[("NESSIE_RENDEZVOUS", "head:9000")]));
    assert_eq!(l.rendezvous.as_deref(), Some("head:9000"));

    // Every rank on this host.
    let one_host = with(&base, &[("OMPI_COMM_WORLD_LOCAL_SIZE", "8")]);
    let l = launch(&one_host);
    assert_eq!(
        l.rendezvous,
        Some(format!("127.0.0.1:{LOCAL_RENDEZVOUS_PORT}"))
    );
    let l = launch(&with(&one_host, &[("NESSIE_RENDEZVOUS_PORT", "6000")]));
    assert_eq!(l.rendezvous.as_deref(), Some("127.0.0.1:6000"));

    assert!(
        refused(&base[..1]).contains("OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not")
    );
    assert!(refused(&base[..2]).contains("OMPI_COMM_WORLD_LOCAL_RANK"));
    assert!(refused(&with(&base, &[("OMPI_COMM_WORLD_RANK", "8")]))
        .contains("OMPI_COMM_WORLD_RANK is 8"));
    assert!(
        refused(&with(&base, &[("OMPI_COMM_WORLD_SIZE", "8.0")])).contains("OMPI_COMM_WORLD_SIZE")
    );
    assert!(
        refused(&with(&base, &[("OMPI_COMM_WORLD_LOCAL_SIZE", "x")]))
            .contains("OMPI_COMM_WORLD_LOCAL_SIZE")
    );
}

#[test]
fn pmi() {
    let l = launch(&[("PMI_RANK", "2"), ("PMI_SIZE", "4")]);
    assert_eq!(l.launcher, Launcher::Pmi);
    assert_eq!((l.node, l.nodes, l.local_rank), (2, 4, 0));
    assert_eq!(l.rendezvous, None);

    let l = launch(&[
        ("PMI_RANK", "2"),
        ("PMI_SIZE", "4"),
        ("MPI_LOCALRANKID", "2"),
        ("MPI_LOCALNRANKS", "4"),
    ]);
    assert_eq!(l.local_rank, 2);
    assert_eq!(
        l.rendezvous,
        Some(format!("127.0.0.1:{LOCAL_RENDEZVOUS_PORT}"))
    );

    let l = launch(&[("PMI_RANK", "0"), ("PMI_SIZE", "1")]);
    assert!(l.rendezvous.is_some(), "a one-rank job is on one host");

    assert!(refused(&[("PMI_RANK", "0")]).contains("PMI_SIZE"));
    assert!(refused(&[("PMI_RANK", "4"), ("PMI_SIZE", "4")]).contains("PMI_RANK is 4"));
    assert!(refused(&[
        ("PMI_RANK", "0"),
        ("PMI_SIZE", "4"),
        ("MPI_LOCALRANKID", "x")
    ])
    .contains("MPI_LOCALRANKID"));
}

#[test]
fn torchrun() {
    let base = [
        ("RANK", "5"),
        ("WORLD_SIZE", "16"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "10.1.2.3"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_RUN_ID", "train-7"),
    ];
    let l = launch(&base);
    assert_eq!(l.launcher, Launcher::Torchrun);
    assert_eq!((l.node, l.nodes, l.local_rank), (5, 16, 1));
    assert_eq!(l.rendezvous.as_deref(), Some("10.1.2.3:29501"));
    let l = launch(&with(&base, &[("NESSIE_RENDEZVOUS_PORT", "4000")]));
    assert_eq!(l.rendezvous.as_deref(), Some("10.1.2.3:4000"));
    assert_eq!(l.job_id.as_deref(), Some("train-7"));

    let l = launch(&with(&base, &[("MASTER_ADDR", "fe80::1")]));
    assert_eq!(l.rendezvous.as_deref(), Some("[fe80::1]:29501"));

    let l = launch(&base[..3]);
    assert_eq!(l.rendezvous, None);

    assert!(refused(&base[..4]).contains("MASTER_ADDR is set but MASTER_PORT is not"));
    let no_addr: Vec<_> = base
        .iter()
        .copied()
        .filter(|(k, _)| *k != "MASTER_ADDR")
        .collect();
    assert!(refused(&no_addr).contains("MASTER_PORT is set but MASTER_ADDR is not"));
    assert!(refused(&with(&base, &[("MASTER_PORT", "http")])).contains("MASTER_PORT"));
    assert!(refused(&base[..1]).contains("WORLD_SIZE"));
    assert!(refused(&base[..2]).contains("LOCAL_RANK"));
    assert!(refused(&with(&base, &[("RANK", "16")])).contains("RANK is 16 but WORLD_SIZE is 16"));
}

#[test]
fn explicit_settings_win() {
    // Over every launcher, even a broken one.
    let mut all = with(SLURM, &[("SLURM_NTASKS", "garbage")]);
    all.extend_from_slice(&[
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("RANK", "1"),
        ("NESSIE_NODE_ID", "2"),
        ("NESSIE_NODES", "3"),
    ]);
    let l = launch(&all);
    assert_eq!(l.launcher, Launcher::Explicit);
    assert_eq!((l.node, l.nodes, l.local_rank), (2, 3, 0));
    assert_eq!(
        (l.job_id.clone(), l.hosts.len(), l.rendezvous.clone()),
        (None, 0, None)
    );
    assert!(l
        .require_rendezvous()
        .unwrap_err()
        .to_string()
        .contains("NESSIE_RENDEZVOUS"));

    let l = launch(&[
        ("NESSIE_NODE_ID", "0"),
        ("NESSIE_NODES", "2"),
        ("NESSIE_RENDEZVOUS", "[::1]:7000"),
    ]);
    assert_eq!(l.rendezvous.as_deref(), Some("[::1]:7000"));

    // NESSIE_RENDEZVOUS alone overrides the launcher's address.
    let l = launch(&with(SLURM, &[("NESSIE_RENDEZVOUS", "head:9")]));
    assert_eq!(
        (l.launcher, l.rendezvous.as_deref()),
        (Launcher::Slurm, Some("head:9"))
    );

    // The caller's values win over the variables.
    let map = env(&[
        ("NESSIE_NODE_ID", "9"),
        ("NESSIE_NODES", "10"),
        ("NESSIE_RENDEZVOUS", "a:1"),
    ]);
    let overrides = Overrides {
        node: Some(1),
        nodes: None,
        rendezvous: Some("b:2".to_owned()),
    };
    let l = Launch::from_vars_with(&overrides, |n| map.get(n).cloned())
        .unwrap()
        .unwrap();
    assert_eq!((l.launcher, l.node, l.nodes), (Launcher::Explicit, 1, 10));
    assert_eq!(l.rendezvous.as_deref(), Some("b:2"));

    let overrides = Overrides {
        node: Some(0),
        nodes: Some(1),
        rendezvous: None,
    };
    let l = Launch::from_vars_with(&overrides, |_| None)
        .unwrap()
        .unwrap();
    assert_eq!((l.launcher, l.node, l.nodes), (Launcher::Explicit, 0, 1));

    let overrides = Overrides {
        node: Some(3),
        nodes: Some(3),
        rendezvous: None,
    };
    let e = Launch::from_vars_with(&overrides, |_| None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("the node id given by the caller is 3"), "{e}");
}

#[test]
fn explicit_settings_malformed() {
    assert!(refused(&[("NESSIE_NODE_ID", "1")])
        .contains("NESSIE_NODE_ID is set but NESSIE_NODES is not"));
    assert!(
        refused(&[("NESSIE_NODES", "2")]).contains("NESSIE_NODES is set but NESSIE_NODE_ID is not")
    );
    assert!(
        refused(&[("NESSIE_NODE_ID", "2"), ("NESSIE_NODES", "2")]).contains("NESSIE_NODE_ID is 2")
    );
    assert!(
        refused(&[("NESSIE_NODE_ID", "0"), ("NESSIE_NODES", "0")]).contains("NESSIE_NODES is 0")
    );
    assert!(refused(&[("NESSIE_NODE_ID", "one"), ("NESSIE_NODES", "2")])
        .contains("NESSIE_NODE_ID=\"one\""));
    for bad in ["head", "head:", ":80", "head:0", "::1:80", "head:99999"] {
        let e = refused(&[
            ("NESSIE_NODE_ID", "0"),
            ("NESSIE_NODES", "2"),
            ("NESSIE_RENDEZVOUS", bad),
        ]);
        assert!(e.contains("NESSIE_RENDEZVOUS"), "{bad:?}: {e}");
    }
    let e = refused(&[("NESSIE_RENDEZVOUS", "head:80")]);
    assert!(e.contains("NESSIE_NODE_ID"), "{e}");
    // A stray port setting alone is not a launch.
    assert_eq!(detect(&[("NESSIE_RENDEZVOUS_PORT", "5")]).unwrap(), None);
}

#[test]
fn inner_launcher_wins_over_slurm() {
    // mpirun inside a Slurm allocation: Slurm's variables describe the task
    // that started mpirun's daemon, Open MPI's describe this process.
    let mut mpirun_in_srun = SLURM.to_vec();
    mpirun_in_srun.extend_from_slice(&[
        ("OMPI_COMM_WORLD_RANK", "17"),
        ("OMPI_COMM_WORLD_SIZE", "24"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "5"),
    ]);
    let l = launch(&mpirun_in_srun);
    assert_eq!(
        (l.launcher, l.node, l.nodes, l.local_rank),
        (Launcher::OpenMpi, 17, 24, 5)
    );
    assert!(l.hosts.is_empty());

    // srun starting the processes itself through a PMI plugin: both agree,
    // and Slurm's launch knows the hosts.
    let mut srun_pmi = SLURM.to_vec();
    srun_pmi.extend_from_slice(&[("PMI_RANK", "4"), ("PMI_SIZE", "6")]);
    let l = launch(&srun_pmi);
    assert_eq!((l.launcher, l.node, l.nodes), (Launcher::Slurm, 4, 6));
    assert_eq!(l.hosts.len(), 3);

    // torchrun started by srun (one agent per host).
    let mut torchrun_in_srun = SLURM.to_vec();
    torchrun_in_srun.extend_from_slice(&[("RANK", "9"), ("WORLD_SIZE", "12"), ("LOCAL_RANK", "3")]);
    let l = launch(&torchrun_in_srun);
    assert_eq!((l.launcher, l.node, l.nodes), (Launcher::Torchrun, 9, 12));

    // The ignored outer launcher's variables may be malformed.
    let mut broken_outer = with(SLURM, &[("SLURM_NTASKS", "x")]);
    broken_outer.extend_from_slice(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]);
    assert_eq!(launch(&broken_outer).launcher, Launcher::Pmi);
}

#[test]
fn hostlist_expansion() {
    let ok = |list: &str| expand_hostlist(list).unwrap_or_else(|e| panic!("{list:?}: {e}"));
    assert_eq!(
        ok("node[01-03],gpu7"),
        ["node01", "node02", "node03", "gpu7"]
    );
    assert_eq!(ok("n[009-011]"), ["n009", "n010", "n011"]);
    assert_eq!(ok("n[98-100]"), ["n98", "n99", "n100"]);
    assert_eq!(ok("n[1,4-5,007]"), ["n1", "n4", "n5", "n007"]);
    assert_eq!(
        ok("rack[1-2]-n[01-02].ib"),
        [
            "rack1-n01.ib",
            "rack1-n02.ib",
            "rack2-n01.ib",
            "rack2-n02.ib"
        ]
    );
    assert_eq!(ok("alpha,beta.example.org"), ["alpha", "beta.example.org"]);
    for bad in ["", "n[1-3", "n[3-1]", "n[x]", "a,,b", "n[1-100000]"] {
        assert!(
            matches!(expand_hostlist(bad), Err(Error::Config(_))),
            "{bad:?}"
        );
    }
}

fn secret_with(configured: &str, pairs: &[(&str, &str)]) -> Result<String, Error> {
    let map = env(pairs);
    secret_from(configured, |name| map.get(name).cloned())
}

#[test]
fn secret_sources_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secret");
    std::fs::write(&file, "from-file\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let path = file.to_str().unwrap();

    let all = [("NESSIE_SECRET", "from-env"), ("NESSIE_SECRET_FILE", path)];
    assert_eq!(secret_with("configured", &all).unwrap(), "configured");
    assert_eq!(secret_with("", &all).unwrap(), "from-env");
    assert_eq!(secret_with("", &all[1..]).unwrap(), "from-file");
    assert_eq!(
        secret_with("", &[("NESSIE_SECRET", ""), ("NESSIE_SECRET_FILE", path)]).unwrap(),
        "from-file"
    );

    let e = secret_with("", &[]).unwrap_err().to_string();
    for place in [
        "fabric.secret",
        "NESSIE_SECRET",
        "NESSIE_SECRET_FILE",
        "0600",
    ] {
        assert!(e.contains(place), "{e}");
    }
}

#[test]
fn secret_file_checks() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &[u8], mode: u32| {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        file.to_str().unwrap().to_owned()
    };
    let read = |path: &str| secret_with("", &[("NESSIE_SECRET_FILE", path)]);
    let refusal = |path: &str| match read(path) {
        Err(Error::Config(m)) => m,
        other => panic!("{path}: expected a refusal, got {other:?}"),
    };

    assert_eq!(read(&write("ok", b"s3cret\n", 0o600)).unwrap(), "s3cret");
    assert_eq!(
        read(&write("crlf", b"s3cret\r\n", 0o400)).unwrap(),
        "s3cret"
    );
    assert_eq!(
        read(&write("two", b"s3cret\n\n", 0o600)).unwrap(),
        "s3cret\n"
    );
    assert_eq!(
        read(&write("bare", b" spaced ", 0o600)).unwrap(),
        " spaced "
    );

    let open = write("open", b"s3cret\n", 0o644);
    let e = refusal(&open);
    assert!(
        e.contains("NESSIE_SECRET_FILE") && e.contains("0644") && e.contains("chmod 600"),
        "{e}"
    );
    assert!(refusal(&write("group", b"x", 0o620)).contains("0620"));
    assert!(refusal(&write("empty", b"\n", 0o600)).contains("empty"));
    assert!(refusal(&write("binary", &[0xff, 0xfe], 0o600)).contains("UTF-8"));
    assert!(refusal(&write("big", &vec![b'a'; 70 * 1024], 0o600)).contains("larger"));
    assert!(refusal(dir.path().to_str().unwrap()).contains("not a regular file"));
    assert!(refusal(dir.path().join("absent").to_str().unwrap()).contains("NESSIE_SECRET_FILE"));

    // Another user's file, where this process may hand one away (root).
    let theirs = write("theirs", b"s3cret", 0o600);
    if std::os::unix::fs::chown(&theirs, Some(4242), None).is_ok() {
        assert!(refusal(&theirs).contains("owned by user 4242"));
    }
}
