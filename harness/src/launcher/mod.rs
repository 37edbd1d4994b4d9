//! Where a run's node processes come from and what carries their verbs:
//! `--launcher local|srun|mpirun` and `--fabric shm|tcp|verbs`.
//!
//! **`local`** (the default): the harness starts every node process itself,
//! `nessie-bench node --config … --spec … --node-id i` (see
//! [`crate::cluster`]).
//!
//! **`srun`, `mpirun`**: the harness starts one process, the launcher, and
//! the launcher starts the node processes wherever it places them:
//!
//! ```text
//! srun -N n -n n --input=all --kill-on-bad-exit=1 (0 with replicas) --error=RUN/node-%t.stderr [ARG…] \
//!     nessie-bench node --config RUN/config.toml --spec RUN/spec.json --report-dir RUN
//! mpirun -np n --stdin all [-x NESSIE_SECRET_FILE …] [ARG…] \
//!     nessie-bench node --config RUN/config.toml --spec RUN/spec.json --report-dir RUN
//! ```
//!
//! (`ARG…` are the `--launcher-arg` values, in order.) A launched node has no
//! `--node-id`: it takes its id from the launcher's environment
//! ([`nessie::bootstrap::Launch`]). The launcher's stdout merges every
//! node's event lines, each of which names its node, and its stdin reaches
//! every node (`--input=all`, `--stdin all`), so the protocol is that of
//! [`crate::protocol`]. Launchers cut long lines into pieces and may
//! interleave pieces of different tasks' lines, so a launched node writes
//! its report (tens of KiB of histograms) to `RUN/node-<i>.report.json` and
//! prints only a short line naming the file; the other events are short
//! lines written at once. A line that does not parse is copied to
//! `RUN/launcher.stdout` and otherwise ignored: a lost progress line costs
//! nothing, a lost phase line ends in that phase's deadline. The run
//! directory (and the `nessie-bench` binary) must therefore be at the same
//! path on every host, as on a shared file system; network namespaces of
//! one machine (`scripts/slurm-netns.sh --hub`) share everything.
//!
//! The launcher is asked to stop with SIGTERM (also when the harness dies),
//! so that it ends its tasks on every host and gives back an allocation it
//! made, and killed only if it has not exited 10 s later.
//!
//! Fabrics:
//! * **`shm`**: region files in `/dev/shm`, so every node must run on the
//!   harness's host. A launched node checks for a marker file the harness
//!   puts in the cluster's directory and refuses to start without it.
//! * **`tcp`**: the nodes meet at an authenticated rendezvous that node 0
//!   serves: on `127.0.0.1` for `local`, else where the launcher's
//!   environment says (Slurm: the step's first host; Open MPI across hosts:
//!   `NESSIE_RENDEZVOUS`, passed on with `-x`). The cluster secret is never
//!   on a command line: `NESSIE_SECRET` or `NESSIE_SECRET_FILE` when set,
//!   else a fresh random secret in `RUN/secret` (mode 0600, removed after the
//!   run) named by `NESSIE_SECRET_FILE` ([`RunSecret`]).
//! * **`verbs`**: RDMA NICs; needs a build with the `nessie/verbs` feature
//!   and is refused before anything starts otherwise. Queue pairs and rkeys
//!   are exchanged through the same authenticated rendezvous and secret as
//!   on `tcp`.
//!
//! Redis and memcached: the harness starts the server on its own host, on
//! `--peer-host` (default: loopback for `local`, else the first IPv4
//! address of a network interface that is up), where the nodes connect.

mod secret;

pub use secret::RunSecret;

use crate::error::{HarnessError, Result};
use crate::proc::find_on_path;
use nessie::{Config, FabricConfig};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file the harness puts in an `shm` cluster's directory; a launched
/// node that does not see it runs on another host.
pub const SHM_MARKER: &str = "nessie-bench-host";

/// How long a launcher may take to end its tasks once told to stop.
pub const LAUNCHER_GRACE: Duration = Duration::from_secs(10);

/// The variables a launched node may need from the harness's environment
/// besides the secret's (the rendezvous address or port of the `tcp`
/// fabric); `mpirun` is told to pass on those that are set.
const FORWARDED: [&str; 2] = ["NESSIE_RENDEZVOUS", "NESSIE_RENDEZVOUS_PORT"];

/// What carries the verbs between node processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Fabric {
    /// Shared memory: every node on the harness's host.
    #[default]
    Shm,
    /// TCP to a software NIC in each node: any hosts.
    Tcp,
    /// RDMA NICs (a build with the `nessie/verbs` feature).
    Verbs,
}

impl Fabric {
    /// The name on the command line.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Fabric::Shm => "shm",
            Fabric::Tcp => "tcp",
            Fabric::Verbs => "verbs",
        }
    }

    /// The fabric settings of cluster `cluster` as the harness writes them:
    /// what only a node's launch knows (rendezvous, secret) is left empty; `threads` is the tcp fabric's connections per peer.
    #[must_use]
    pub fn config(self, cluster: &str, threads: usize) -> FabricConfig {
        match self {
            Fabric::Shm => FabricConfig::Shm {
                dir: Some(PathBuf::from(format!("/dev/shm/nessie-{cluster}"))),
            },
            Fabric::Tcp => FabricConfig::Tcp {
                peers: Vec::new(),
                rendezvous: None,
                join: Vec::new(),
                secret: String::new(),
                threads,
            },
            Fabric::Verbs => FabricConfig::Verbs {
                device: None,
                peers: Vec::new(),
                rendezvous: None,
                join: Vec::new(),
                secret: String::new(),
                gid_index: None,
            },
        }
    }
}

/// `config` with what a node's launch fills in replaced by stand-ins, so
/// that the rest can be checked before any process starts.
#[must_use]
pub fn checkable(config: &Config) -> Config {
    let mut c = config.clone();
    let stand_in = || "127.0.0.1:1".to_owned();
    if let Some((peers, rendezvous, secret)) = c.fabric.meeting_mut() {
        if peers.is_empty() && rendezvous.is_none() {
            *rendezvous = Some(stand_in());
        }
        if secret.is_empty() {
            *secret = "x".repeat(32);
        }
    }
    c
}

/// Who starts the node processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LauncherKind {
    /// The harness, on this host.
    #[default]
    Local,
    /// Slurm's `srun`.
    Srun,
    /// Open MPI's `mpirun`.
    Mpirun,
}

impl LauncherKind {
    /// The launcher's program name (`None` for `local`).
    #[must_use]
    pub fn program(self) -> Option<&'static str> {
        match self {
            LauncherKind::Local => None,
            LauncherKind::Srun => Some("srun"),
            LauncherKind::Mpirun => Some("mpirun"),
        }
    }
}

/// Flags that place a run's node processes (every experiment of
/// [`crate::cluster`] runs takes them).
#[derive(Clone, Debug, Default, clap::Args, Serialize)]
pub struct ClusterArgs {
    /// What carries the verbs: shm (one host), tcp (any hosts; a software
    /// NIC over TCP) or verbs (RDMA NICs; builds with `nessie/verbs` only).
    #[arg(long, value_enum, default_value_t)]
    pub fabric: Fabric,
    /// Who starts the node processes: the harness itself (local), or one
    /// `srun` or `mpirun` that places them on the hosts of a job.
    #[arg(long, value_enum, default_value_t)]
    pub launcher: LauncherKind,
    /// An extra argument for the launcher, placed before the node command
    /// (repeatable, in order), e.g. `--launcher-arg=--partition=bench`.
    #[arg(long = "launcher-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub launcher_args: Vec<String>,
    /// The launcher program (default: `srun` or `mpirun` on PATH).
    #[arg(long, value_name = "PROGRAM")]
    pub launcher_program: Option<PathBuf>,
    /// The address Redis and memcached listen on, which the nodes connect
    /// to (default: 127.0.0.1 for `--launcher local`, else the first IPv4
    /// address of a network interface of this host that is up).
    #[arg(long, value_name = "ADDR")]
    pub peer_host: Option<IpAddr>,
    /// One line saying what network joins the nodes' hosts, for the report
    /// (e.g. "3 hosts, 100 Gbit/s Ethernet"); the namespace scripts set it.
    #[arg(long, value_name = "TEXT", env = "NESSIE_BENCH_NETWORK")]
    pub network: Option<String>,
}

impl ClusterArgs {
    /// Checks the flags and finds the launcher.
    ///
    /// # Errors
    /// [`HarnessError::Usage`] for `--fabric verbs` in a build without the
    /// `verbs` backend, launcher flags with `--launcher local`, or a
    /// launcher that is not installed.
    pub fn resolve(&self) -> Result<Launching> {
        let usage = |m: String| Err(HarnessError::Usage(m));
        if self.fabric == Fabric::Verbs && !nessie::VERBS_BUILT {
            return usage(
                "--fabric verbs: this nessie-bench was built without the RDMA backend; \
                 rebuild with `cargo build --release -p harness --features nessie/verbs`"
                    .into(),
            );
        }
        let program = match self.launcher.program() {
            None => {
                if !self.launcher_args.is_empty() || self.launcher_program.is_some() {
                    return usage(
                        "--launcher-arg and --launcher-program need --launcher srun or mpirun"
                            .into(),
                    );
                }
                None
            }
            Some(name) => Some(match &self.launcher_program {
                Some(p) if !p.is_file() => {
                    return usage(format!("--launcher-program {}: no such file", p.display()));
                }
                Some(p) => p.clone(),
                None => find_on_path(name).ok_or_else(|| {
                    HarnessError::Usage(format!(
                        "--launcher {name}: `{name}` is not on PATH (or give --launcher-program)"
                    ))
                })?,
            }),
        };
        Ok(Launching {
            fabric: self.fabric,
            kind: self.launcher,
            program,
            extra: self.launcher_args.clone(),
            peer_host: self.peer_host,
            network: self.network.clone(),
        })
    }
}

/// The first IPv4 address of a network interface (not loopback) that is up.
fn network_address() -> Option<IpAddr> {
    use nix::net::if_::InterfaceFlags;
    nix::ifaddrs::getifaddrs().ok()?.find_map(|i| {
        let up = i.flags.contains(InterfaceFlags::IFF_UP)
            && !i.flags.contains(InterfaceFlags::IFF_LOOPBACK);
        let v4 = i.address.as_ref()?.as_sockaddr_in()?.ip();
        up.then_some(IpAddr::V4(v4))
    })
}

/// The files of one run that its node processes read.
#[derive(Clone, Debug)]
pub struct RunFiles {
    /// The run directory (absolute).
    pub dir: PathBuf,
    /// The cluster's configuration.
    pub config: PathBuf,
    /// The run's spec.
    pub spec: PathBuf,
}

impl RunFiles {
    /// The files of a run in `dir`, made absolute (a launched node does not
    /// start in the harness's directory).
    ///
    /// # Errors
    /// [`HarnessError::Io`] if the working directory is unknown.
    pub fn in_dir(dir: &Path) -> Result<Self> {
        let dir = std::path::absolute(dir).map_err(HarnessError::io("resolving", dir))?;
        Ok(RunFiles {
            config: dir.join("config.toml"),
            spec: dir.join("spec.json"),
            dir,
        })
    }

    /// The arguments of a node process: `node --config … --spec …`, then
    /// `--node-id i` for a node the harness starts, or `--report-dir …` for
    /// a launched one, which learns its id from the launcher.
    #[must_use]
    pub fn node_args(&self, node: Option<usize>) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "node".into(),
            "--config".into(),
            self.config.clone().into(),
            "--spec".into(),
            self.spec.clone().into(),
        ];
        match node {
            Some(i) => args.extend(["--node-id".into(), i.to_string().into()]),
            None => args.extend(["--report-dir".into(), self.dir.clone().into()]),
        }
        args
    }
}

/// The launcher settings of an experiment, checked ([`ClusterArgs::resolve`]).
#[derive(Clone, Debug)]
pub struct Launching {
    /// The fabric.
    pub fabric: Fabric,
    /// The launcher.
    pub kind: LauncherKind,
    /// The launcher's program (`None` for `local`).
    program: Option<PathBuf>,
    /// `--launcher-arg` values.
    extra: Vec<String>,
    /// `--peer-host`.
    peer_host: Option<IpAddr>,
    /// What the user said the network is.
    pub network: Option<String>,
}

impl Default for Launching {
    fn default() -> Self {
        Launching {
            fabric: Fabric::Shm,
            kind: LauncherKind::Local,
            program: None,
            extra: Vec::new(),
            peer_host: None,
            network: None,
        }
    }
}

impl Launching {
    /// The launcher's program, if the nodes are launched rather than
    /// started by the harness.
    #[must_use]
    pub fn program(&self) -> Option<&Path> {
        self.program.as_deref()
    }

    /// Where Redis and memcached listen: `--peer-host`, else loopback when
    /// the harness starts the nodes, else the first IPv4 address of a
    /// network interface of this host that is up.
    ///
    /// # Errors
    /// [`HarnessError::Usage`] if there is no such interface.
    pub fn peer_host(&self) -> Result<IpAddr> {
        match (self.peer_host, &self.program) {
            (Some(host), _) => Ok(host),
            (None, None) => Ok(Ipv4Addr::LOCALHOST.into()),
            (None, Some(_)) => network_address().ok_or_else(|| {
                HarnessError::Usage(
                    "no network interface with an IPv4 address is up for Redis and memcached \
                     to listen on: give --peer-host"
                        .into(),
                )
            }),
        }
    }

    /// The launcher's arguments for a run of `nodes` nodes of `exe` with
    /// `files`, passing on `secret` and the rendezvous variables of `tcp` and `verbs`
    /// (`NESSIE_RENDEZVOUS`, `NESSIE_RENDEZVOUS_PORT`) that
    /// `var` finds set (to `mpirun`; `srun` passes the whole environment).
    /// With `survives_lost_ranks` (a replicated store) an `srun` step goes
    /// on when one of its tasks dies.
    #[must_use]
    pub fn launcher_args(
        &self,
        exe: &Path,
        nodes: usize,
        files: &RunFiles,
        secret: &RunSecret,
        survives_lost_ranks: bool,
        var: impl Fn(&str) -> Option<String>,
    ) -> Vec<OsString> {
        let n = nodes.to_string();
        let mut args: Vec<OsString> = Vec::new();
        match self.kind {
            LauncherKind::Local => return Vec::new(),
            LauncherKind::Srun => {
                // %t is the task's rank; a literal % is written %%.
                let dir = files.dir.to_string_lossy().replace('%', "%%");
                args.extend(
                    [
                        "-N",
                        &n,
                        "-n",
                        &n,
                        "--input=all",
                        // A replicated store outlives a lost rank
                        // (docs/replication.md#launchers): the step
                        // must not end with it.
                        if survives_lost_ranks {
                            "--kill-on-bad-exit=0"
                        } else {
                            "--kill-on-bad-exit=1"
                        },
                        &format!("--error={dir}/node-%t.stderr"),
                    ]
                    .map(OsString::from),
                );
            }
            LauncherKind::Mpirun => {
                args.extend(["-np", &n, "--stdin", "all"].map(OsString::from));
                let set = FORWARDED
                    .iter()
                    .filter(|name| var(name).is_some_and(|v| !v.is_empty()));
                for name in secret.forwarded().iter().chain(set) {
                    args.extend(["-x".into(), (*name).into()]);
                }
            }
        }
        args.extend(self.extra.iter().map(OsString::from));
        args.push(exe.into());
        args.extend(files.node_args(None));
        args
    }

    /// Node `node`'s stderr file in run directory `dir`: its own file for
    /// `local` and `srun` (`--error`), the launcher's for `mpirun`.
    #[must_use]
    pub fn node_log(&self, dir: &Path, node: usize) -> PathBuf {
        match self.kind {
            LauncherKind::Mpirun => dir.join("launcher.stderr"),
            _ => dir.join(format!("node-{node}.stderr")),
        }
    }

    /// What a run of `nodes` nodes runs on, in one paragraph for the report.
    #[must_use]
    pub fn describe(&self, nodes: usize) -> String {
        let who = match (self.kind, &self.program) {
            (LauncherKind::Local, _) | (_, None) => {
                format!("{nodes} node processes on this host, started by the harness")
            }
            (kind, Some(program)) => {
                let name = kind.program().unwrap_or_default();
                let fixed = match kind {
                    LauncherKind::Mpirun => format!("-np {nodes} --stdin all"),
                    _ => format!("-N {nodes} -n {nodes} --input=all"),
                };
                let extra = if self.extra.is_empty() {
                    String::new()
                } else {
                    format!(" {}", self.extra.join(" "))
                };
                format!(
                    "{nodes} node processes started by `{name} {fixed}{extra}` ({}) from the harness's host",
                    program.display()
                )
            }
        };
        let fabric = match self.fabric {
            Fabric::Shm => {
                "`shm` fabric: one-sided verbs are memory copies and atomics, not RDMA"
            }
            Fabric::Tcp => {
                "`tcp` fabric: one-sided verbs travel over TCP to a software NIC in each node (not RDMA), the nodes meet at an authenticated rendezvous on node 0"
            }
            Fabric::Verbs => "`verbs` fabric: RDMA NICs",
        };
        let network = self
            .network
            .as_deref()
            .map_or(String::new(), |n| format!("; network: {n}"));
        format!(
            "{who}; {fabric}{network}. The paper used 15 nodes with 10 GbE RDMA NICs: compare shapes, not absolute numbers."
        )
    }
}

#[cfg(test)]
mod tests;
