//! Where a process of a job learns its place: node id, node count, local
//! rank, hosts and rendezvous address from the launcher that started it
//! (Slurm, Open MPI, an MPICH/Hydra-style PMI launcher, torchrun) or from
//! explicit settings; and where the cluster secret comes from ([`secret`]).
//!
//! [`Launch::detect`] reads the process's environment;
//! [`Launch::from_vars`] reads any variable source. A variable set to the
//! empty string counts as unset everywhere.
//!
//! ```
//! use nessie::bootstrap::{Launch, Launcher};
//!
//! let vars = [
//!     ("SLURM_PROCID", "2"),
//!     ("SLURM_NTASKS", "4"),
//!     ("SLURM_LOCALID", "0"),
//!     ("SLURM_JOB_ID", "81234"),
//!     ("SLURM_STEP_NODELIST", "cn[07-10]"),
//! ];
//! let var = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned());
//! let launch = Launch::from_vars(var)?.expect("a Slurm step");
//! assert_eq!((launch.launcher, launch.node, launch.nodes), (Launcher::Slurm, 2, 4));
//! assert_eq!(launch.hosts, ["cn07", "cn08", "cn09", "cn10"]);
//! assert_eq!(launch.rendezvous.as_deref(), Some("cn07:21234"));
//! # Ok::<(), nessie::Error>(())
//! ```
//!
//! # Detection order
//!
//! 1. **Explicit settings always win.** A node id and node count given by the
//!    caller ([`Overrides`]) or by `NESSIE_NODE_ID` and `NESSIE_NODES` (the
//!    caller's value wins over the variable, field by field) make the launch
//!    [`Launcher::Explicit`]: both must be given, and no launcher variable is
//!    read (so a broken launcher environment can be worked around). The local
//!    rank is then 0, and there is no job id and no host list.
//! 2. Otherwise the launcher whose rank variable is set, the innermost first,
//!    since an inner launcher's variables describe this process while an
//!    outer one's describe the process that started the inner launcher
//!    (`mpirun` inside an `srun` step or batch script sees `SLURM_*`
//!    variables of the step's task, not its own):
//!
//!    | launcher | rank | size | local rank | also read |
//!    |---|---|---|---|---|
//!    | torchrun | `RANK` | `WORLD_SIZE` | `LOCAL_RANK` | `MASTER_ADDR`, `MASTER_PORT`, `TORCHELASTIC_RUN_ID` (job id) |
//!    | Open MPI | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` | `OMPI_COMM_WORLD_LOCAL_SIZE` |
//!    | PMI (MPICH, Hydra, Intel MPI) | `PMI_RANK` | `PMI_SIZE` | `MPI_LOCALRANKID` (0 if unset) | `MPI_LOCALNRANKS` |
//!    | Slurm | `SLURM_PROCID` | `SLURM_NTASKS` | `SLURM_LOCALID` | `SLURM_JOB_ID`, `SLURM_STEP_NODELIST` |
//!
//!    One exception: when Open MPI's or PMI's rank and size equal Slurm's,
//!    `srun` started this process itself (through an MPI plugin that sets
//!    both), and the launch is Slurm's, which knows the hosts and the job.
//! 3. Otherwise there is no launch: `Ok(None)`. Setting `NESSIE_RENDEZVOUS`
//!    alone is then an error (it says the job spans hosts, but not which node
//!    this process is).
//!
//! Once a launcher is chosen, its size and local-rank variables must be set
//! (except PMI's local rank) and every number must be a plain non-negative
//! decimal, with a size of at least 1 and rank and local rank below the
//! size; otherwise [`Error::Config`] names the variable.
//!
//! # Rendezvous address
//!
//! Where the processes of the job meet, as `host:port`:
//!
//! 1. `NESSIE_RENDEZVOUS` (or the caller's value) wins, for every launcher.
//! 2. torchrun: `MASTER_ADDR`, on `NESSIE_RENDEZVOUS_PORT` if set, else on
//!    `MASTER_PORT + 1` (torch's own store holds `MASTER_PORT`); both or
//!    neither of `MASTER_ADDR` and `MASTER_PORT` must be set.
//! 3. Slurm: the first host of the expanded `SLURM_STEP_NODELIST` (where
//!    rank 0 runs under Slurm's block and cyclic distributions), port
//!    `NESSIE_RENDEZVOUS_PORT` if set, else
//!    [`RENDEZVOUS_PORT_BASE`]` + job id % `[`RENDEZVOUS_PORT_SPAN`]
//!    (20000–29999), so that two jobs sharing hosts do not collide; no job id
//!    gives [`RENDEZVOUS_PORT_BASE`]. Two steps of one job that run at once
//!    on the same hosts need `NESSIE_RENDEZVOUS_PORT` to differ.
//! 4. Open MPI and PMI: when every rank is on this host (the local size
//!    equals the size, or the size is 1), `127.0.0.1` with port
//!    `NESSIE_RENDEZVOUS_PORT` if set, else [`LOCAL_RENDEZVOUS_PORT`] (19999);
//!    across hosts `NESSIE_RENDEZVOUS` is required.
//! 5. `None` when it cannot be known: explicit settings without
//!    `NESSIE_RENDEZVOUS`, Open MPI or PMI across hosts (or with no local
//!    size), Slurm without a step node list, torchrun without `MASTER_ADDR`.
//!    [`Launch::require_rendezvous`] turns that into an error that says what
//!    to set.
//!
//! An IPv6 host is written in brackets (`[::1]:7000`).

mod hostlist;
mod secret;

pub use hostlist::{expand_hostlist, MAX_HOSTS};
pub use secret::{secret, secret_from};

use std::fmt;

use crate::{Config, Error, FabricConfig};

/// The lowest port of a Slurm job's default rendezvous address.
pub const RENDEZVOUS_PORT_BASE: u16 = 20_000;

/// How many ports Slurm jobs' default rendezvous addresses spread over:
/// port = [`RENDEZVOUS_PORT_BASE`]` + job id % RENDEZVOUS_PORT_SPAN`.
pub const RENDEZVOUS_PORT_SPAN: u16 = 10_000;

/// The default port of the rendezvous address of an Open MPI or PMI job all
/// of whose ranks run on one host (`127.0.0.1:19999`).
pub const LOCAL_RENDEZVOUS_PORT: u16 = 19_999;

/// What started this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Launcher {
    /// Explicit settings: the caller's values or `NESSIE_NODE_ID` and
    /// `NESSIE_NODES`.
    Explicit,
    /// A Slurm step (`srun`).
    Slurm,
    /// Open MPI's `mpirun`/`mpiexec`.
    OpenMpi,
    /// A PMI launcher: MPICH's or Intel MPI's Hydra `mpiexec`.
    Pmi,
    /// `PyTorch`'s `torchrun` (or anything that sets its variables).
    Torchrun,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Launcher::Explicit => "explicit settings",
            Launcher::Slurm => "Slurm",
            Launcher::OpenMpi => "Open MPI",
            Launcher::Pmi => "PMI",
            Launcher::Torchrun => "torchrun",
        })
    }
}

/// This process's place in its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Which launcher (or explicit setting) it came from.
    pub launcher: Launcher,
    /// This process's node id (its rank), below `nodes`.
    pub node: usize,
    /// How many processes (nodes of the store) the job has; at least 1.
    pub nodes: usize,
    /// This process's rank among the job's processes on its host (0 when
    /// the launcher does not say).
    pub local_rank: usize,
    /// The launcher's job id, if it gives one (Slurm, torchrun).
    pub job_id: Option<String>,
    /// The job's hosts in launcher order (Slurm's expanded step node list);
    /// empty when the launcher does not say.
    pub hosts: Vec<String>,
    /// Where the job's processes meet, `host:port` (see the module
    /// documentation); `None` when it cannot be known.
    pub rendezvous: Option<String>,
}

/// Values the caller sets explicitly; each one that is `Some` wins over its
/// environment variable (`NESSIE_NODE_ID`, `NESSIE_NODES`,
/// `NESSIE_RENDEZVOUS`) and over any launcher.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// This process's node id.
    pub node: Option<usize>,
    /// The job's node count.
    pub nodes: Option<usize>,
    /// The rendezvous address, `host:port`.
    pub rendezvous: Option<String>,
}

impl Launch {
    /// Fits `config` to this launch: its node count, and on the `tcp` and
    /// `verbs` fabrics without a peer list the rendezvous address, and the
    /// cluster secret, from the configuration or else the environment
    /// ([`secret`]).
    ///
    /// # Errors
    /// [`Error::Config`] if the rendezvous address cannot be known (see
    /// [`Launch::require_rendezvous`]) or no secret is available.
    pub fn configure(&self, config: &mut Config) -> Result<(), Error> {
        config.nodes = self.nodes;
        if let Some((peers, rendezvous, configured)) = config.fabric.meeting_mut() {
            if peers.is_empty() && rendezvous.is_none() {
                *rendezvous = Some(self.require_rendezvous()?.to_owned());
            }
            *configured = secret(configured)?;
        }
        if let FabricConfig::Tcp {
            rendezvous: Some(address),
            join,
            ..
        }
        | FabricConfig::Verbs {
            rendezvous: Some(address),
            join,
            ..
        } = &mut config.fabric
        {
            if join.is_empty() {
                *join = self.join_addresses(address);
            }
        }
        Ok(())
    }

    /// Where members may serve joins after start-up: the port of
    /// `rendezvous` on each of the job's hosts but the rendezvous's own
    /// (docs/replication.md#joining-after-start-up).
    fn join_addresses(&self, rendezvous: &str) -> Vec<String> {
        let Some((first, Ok(port))) = rendezvous
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()))
        else {
            return Vec::new();
        };
        let mut hosts: Vec<String> = Vec::new();
        for host in &self.hosts {
            let address = join_address(host, port);
            if host != first && !hosts.contains(&address) {
                hosts.push(address);
            }
        }
        hosts
    }

    /// This process's launch, from its environment; `Ok(None)` when no
    /// launcher and no explicit setting is present.
    ///
    /// # Errors
    /// As [`Launch::from_vars_with`].
    pub fn detect() -> Result<Option<Launch>, Error> {
        Self::from_vars(env_var)
    }

    /// The same as [`Launch::detect`], with the caller's explicit values.
    ///
    /// # Errors
    /// As [`Launch::from_vars_with`].
    pub fn detect_with(overrides: &Overrides) -> Result<Option<Launch>, Error> {
        Self::from_vars_with(overrides, env_var)
    }

    /// The launch described by the variables `var` returns (a test passes a
    /// map; `None` is an unset variable).
    ///
    /// # Errors
    /// As [`Launch::from_vars_with`].
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>, Error> {
        Self::from_vars_with(&Overrides::default(), var)
    }

    /// The launch described by the caller's values and the variables `var`
    /// returns, by the rules of the module documentation.
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable (or caller's value) at fault: a
    /// node id without a node count or the reverse, a launcher's rank without
    /// its size or local rank, a number that is not a plain non-negative
    /// decimal, a size of 0, a rank or local rank not below the size, a
    /// malformed host list, port or `host:port` address, `MASTER_ADDR`
    /// without `MASTER_PORT` or the reverse, or `NESSIE_RENDEZVOUS` set with
    /// nothing that says which node this process is.
    pub fn from_vars_with(
        overrides: &Overrides,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Launch>, Error> {
        let env = Vars(&var);
        let node = match overrides.node {
            Some(node) => Some((node, "the node id given by the caller".to_owned())),
            None => env
                .number("NESSIE_NODE_ID")?
                .map(|n| (n, "NESSIE_NODE_ID".to_owned())),
        };
        let nodes = match overrides.nodes {
            Some(nodes) => Some((nodes, "the node count given by the caller".to_owned())),
            None => env
                .number("NESSIE_NODES")?
                .map(|n| (n, "NESSIE_NODES".to_owned())),
        };
        let rendezvous = match &overrides.rendezvous {
            Some(address) => Some(check_address(
                address,
                "the rendezvous address given by the caller",
            )?),
            None => match env.get("NESSIE_RENDEZVOUS") {
                Some(address) => Some(check_address(&address, "NESSIE_RENDEZVOUS")?),
                None => None,
            },
        };
        let mut launch =
            match (node, nodes) {
                (Some((node, node_name)), Some((nodes, nodes_name))) => {
                    check_rank(node, &node_name, nodes, &nodes_name)?;
                    Launch {
                        launcher: Launcher::Explicit,
                        node,
                        nodes,
                        local_rank: 0,
                        job_id: None,
                        hosts: Vec::new(),
                        rendezvous: None,
                    }
                }
                (Some((_, name)), None) => {
                    return Err(config(format!(
                "{name} is set but NESSIE_NODES is not: give both the node id and the node count"
            )))
                }
                (None, Some((_, name))) => {
                    return Err(config(format!(
                "{name} is set but NESSIE_NODE_ID is not: give both the node id and the node count"
            )))
                }
                (None, None) => match detect_launcher(&env)? {
                    Some(launch) => launch,
                    None if rendezvous.is_some() => return Err(config(
                        "NESSIE_RENDEZVOUS is set but nothing says which node this process is: \
                         start it with a launcher (srun, mpirun, mpiexec, torchrun) or set \
                         NESSIE_NODE_ID and NESSIE_NODES"
                            .to_owned(),
                    )),
                    None => return Ok(None),
                },
            };
        if rendezvous.is_some() {
            launch.rendezvous = rendezvous;
        }
        Ok(Some(launch))
    }

    /// The rendezvous address.
    ///
    /// # Errors
    /// [`Error::Config`] saying what to set when the address cannot be known
    /// (`rendezvous` is `None`).
    pub fn require_rendezvous(&self) -> Result<&str, Error> {
        if let Some(address) = &self.rendezvous {
            return Ok(address);
        }
        let why = match self.launcher {
            Launcher::Explicit => "explicit settings give no rendezvous address",
            Launcher::Slurm => "SLURM_STEP_NODELIST is not set",
            Launcher::OpenMpi | Launcher::Pmi => "the job's ranks are not all on this host",
            Launcher::Torchrun => "MASTER_ADDR and MASTER_PORT are not set",
        };
        Err(config(format!(
            "no rendezvous address ({} launch): {why}; set NESSIE_RENDEZVOUS=host:port",
            self.launcher
        )))
    }
}

/// Reads one variable of this process's environment (a value that is not
/// UTF-8 is kept lossily, to be refused by its parser).
fn env_var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

fn config(message: String) -> Error {
    Error::Config(message)
}

/// A variable source in which an empty value is an unset one.
struct Vars<'a, F: Fn(&str) -> Option<String>>(&'a F);

impl<F: Fn(&str) -> Option<String>> Vars<'_, F> {
    fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.is_empty())
    }

    fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// An optional non-negative decimal.
    fn number(&self, name: &str) -> Result<Option<usize>, Error> {
        self.get(name).map(|v| parse_number(name, &v)).transpose()
    }

    /// A number that must be set because `because` is.
    fn partner(&self, name: &str, because: &str) -> Result<usize, Error> {
        self.number(name)?.ok_or_else(|| {
            config(format!(
                "{because} is set but {name} is not: the launcher's environment is incomplete \
                 (or set NESSIE_NODE_ID and NESSIE_NODES)"
            ))
        })
    }

    /// An optional port (1–65535).
    fn port(&self, name: &str) -> Result<Option<u16>, Error> {
        self.get(name).map(|v| parse_port(name, &v)).transpose()
    }
}

fn parse_number(name: &str, value: &str) -> Result<usize, Error> {
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(config(format!(
            "{name}={value:?} is not a non-negative decimal number"
        )));
    }
    value
        .parse()
        .map_err(|e| config(format!("{name}={value:?} is not a usable number: {e}")))
}

fn parse_port(name: &str, value: &str) -> Result<u16, Error> {
    match value.parse::<u16>() {
        Ok(port) if port != 0 && value.bytes().all(|b| b.is_ascii_digit()) => Ok(port),
        _ => Err(config(format!("{name}={value:?} is not a port (1-65535)"))),
    }
}

/// Checks a `host:port` address; returns it unchanged.
fn check_address(address: &str, name: &str) -> Result<String, Error> {
    let bad = |why: &str| config(format!("{name}={address:?} is not host:port: {why}"));
    let (host, port) = address.rsplit_once(':').ok_or_else(|| bad("no ':port'"))?;
    parse_port(name, port).map_err(|_| bad("the port is not 1-65535"))?;
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if bare.is_empty() {
        return Err(bad("the host is empty"));
    }
    if bare == host && host.contains(':') {
        return Err(bad("an IPv6 host must be in brackets, as in [::1]:7000"));
    }
    if bare
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '[' | ']' | '/'))
    {
        return Err(bad("the host holds a character no host name has"));
    }
    Ok(address.to_owned())
}

/// `host:port`, with an IPv6 host in brackets.
fn join_address(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn check_rank(rank: usize, rank_name: &str, size: usize, size_name: &str) -> Result<(), Error> {
    if size == 0 {
        return Err(config(format!(
            "{size_name} is 0: a job has at least one node"
        )));
    }
    if rank >= size {
        return Err(config(format!(
            "{rank_name} is {rank} but {size_name} is {size}: the rank must be below the size"
        )));
    }
    Ok(())
}

/// The launcher whose variables describe this process, by the module's
/// detection order.
fn detect_launcher<F: Fn(&str) -> Option<String>>(
    env: &Vars<'_, F>,
) -> Result<Option<Launch>, Error> {
    if env.is_set("RANK") {
        return torchrun(env).map(Some);
    }
    let inner = if env.is_set("OMPI_COMM_WORLD_RANK") {
        Some(open_mpi(env)?)
    } else if env.is_set("PMI_RANK") {
        Some(pmi(env)?)
    } else {
        None
    };
    let slurm_set = env.is_set("SLURM_PROCID");
    match inner {
        Some(inner) if slurm_set && slurm_rank_size(env) == Some((inner.node, inner.nodes)) => {
            slurm(env).map(Some)
        }
        Some(inner) => Ok(Some(inner)),
        None if slurm_set => slurm(env).map(Some),
        None => Ok(None),
    }
}

/// Slurm's rank and size, if both parse.
fn slurm_rank_size<F: Fn(&str) -> Option<String>>(env: &Vars<'_, F>) -> Option<(usize, usize)> {
    Some((
        env.number("SLURM_PROCID").ok()??,
        env.number("SLURM_NTASKS").ok()??,
    ))
}

/// Rank, size and local rank, checked.
fn ranks<F: Fn(&str) -> Option<String>>(
    env: &Vars<'_, F>,
    rank_name: &str,
    size_name: &str,
    local_name: &str,
    local_required: bool,
) -> Result<(usize, usize, usize), Error> {
    let rank = env.partner(rank_name, rank_name)?;
    let size = env.partner(size_name, rank_name)?;
    check_rank(rank, rank_name, size, size_name)?;
    let local = if local_required {
        env.partner(local_name, rank_name)?
    } else {
        env.number(local_name)?.unwrap_or(0)
    };
    check_rank(local, local_name, size, size_name)?;
    Ok((rank, size, local))
}

fn torchrun<F: Fn(&str) -> Option<String>>(env: &Vars<'_, F>) -> Result<Launch, Error> {
    let (node, nodes, local_rank) = ranks(env, "RANK", "WORLD_SIZE", "LOCAL_RANK", true)?;
    let rendezvous = match (env.get("MASTER_ADDR"), env.port("MASTER_PORT")?) {
        (Some(host), Some(master)) => {
            // MASTER_PORT is taken by torch's own store on the master host:
            // the rendezvous listens next to it unless told where.
            let port = match env.port("NESSIE_RENDEZVOUS_PORT")? {
                Some(p) => p,
                None => master.checked_add(1).ok_or_else(|| {
                    config("MASTER_PORT=65535 leaves no port for the rendezvous; set NESSIE_RENDEZVOUS_PORT".to_owned())
                })?,
            };
            Some(check_address(&join_address(&host, port), "MASTER_ADDR")?)
        }
        (None, None) => None,
        (Some(_), None) => {
            return Err(config(
                "MASTER_ADDR is set but MASTER_PORT is not".to_owned(),
            ))
        }
        (None, Some(_)) => {
            return Err(config(
                "MASTER_PORT is set but MASTER_ADDR is not".to_owned(),
            ))
        }
    };
    Ok(Launch {
        launcher: Launcher::Torchrun,
        node,
        nodes,
        local_rank,
        job_id: env.get("TORCHELASTIC_RUN_ID"),
        hosts: Vec::new(),
        rendezvous,
    })
}

fn open_mpi<F: Fn(&str) -> Option<String>>(env: &Vars<'_, F>) -> Result<Launch, Error> {
    mpi(
        env,
        Launcher::OpenMpi,
        [
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ],
        true,
    )
}

fn pmi<F: Fn(&str) -> Option<String>>(env: &Vars<'_, F>) -> Result<Launch, Error> {
    let names = ["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"];
    mpi(env, Launcher::Pmi, names, false)
}

/// An MPI launcher's launch from its rank, size, local rank and local size
/// variables (`names`, in that order); MPI launchers know no job id or host
/// list.
fn mpi<F: Fn(&str) -> Option<String>>(
    env: &Vars<'_, F>,
    launcher: Launcher,
    [rank, size, local, local_size]: [&str; 4],
    local_required: bool,
) -> Result<Launch, Error> {
    let (node, nodes, local_rank) = ranks(env, rank, size, local, local_required)?;
    let local_size = env.number(local_size)?;
    Ok(Launch {
        launcher,
        node,
        nodes,
        local_rank,
        job_id: None,
        hosts: Vec::new(),
        rendezvous: one_host_rendezvous(env, nodes, local_size)?,
    })
}

/// `127.0.0.1:port` when every rank is on this host, else `None`.
fn one_host_rendezvous<F: Fn(&str) -> Option<String>>(
    env: &Vars<'_, F>,
    nodes: usize,
    local_size: Option<usize>,
) -> Result<Option<String>, Error> {
    if nodes != 1 && local_size != Some(nodes) {
        return Ok(None);
    }
    let port = env
        .port("NESSIE_RENDEZVOUS_PORT")?
        .unwrap_or(LOCAL_RENDEZVOUS_PORT);
    Ok(Some(join_address("127.0.0.1", port)))
}

fn slurm<F: Fn(&str) -> Option<String>>(env: &Vars<'_, F>) -> Result<Launch, Error> {
    let (node, nodes, local_rank) =
        ranks(env, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", true)?;
    let job_id = env.get("SLURM_JOB_ID");
    let job_number = match &job_id {
        Some(id) => Some(
            id.parse::<u64>()
                .map_err(|_| config(format!("SLURM_JOB_ID={id:?} is not a job number")))?,
        ),
        None => None,
    };
    let hosts = match env.get("SLURM_STEP_NODELIST") {
        Some(list) => expand_hostlist(&list).map_err(|e| match e {
            Error::Config(m) => config(format!("SLURM_STEP_NODELIST: {m}")),
            other => other,
        })?,
        None => Vec::new(),
    };
    let rendezvous = match hosts.first() {
        Some(first) => {
            let port = match env.port("NESSIE_RENDEZVOUS_PORT")? {
                Some(port) => port,
                None => slurm_default_port(job_number),
            };
            Some(join_address(first, port))
        }
        None => None,
    };
    Ok(Launch {
        launcher: Launcher::Slurm,
        node,
        nodes,
        local_rank,
        job_id,
        hosts,
        rendezvous,
    })
}

/// [`RENDEZVOUS_PORT_BASE`]` + job % `[`RENDEZVOUS_PORT_SPAN`].
fn slurm_default_port(job: Option<u64>) -> u16 {
    let offset = job.map_or(0, |job| job % u64::from(RENDEZVOUS_PORT_SPAN)) as u16;
    RENDEZVOUS_PORT_BASE + offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ports() {
        assert_eq!(slurm_default_port(None), 20_000);
        assert_eq!(slurm_default_port(Some(1_234_567)), 24_567);
        assert_eq!(
            slurm_default_port(Some(u64::MAX)),
            20_000 + (u64::MAX % 10_000) as u16
        );
    }

    #[test]
    fn addresses() {
        assert!(check_address("h:1", "X").is_ok());
        assert!(check_address("[::1]:7000", "X").is_ok());
        for bad in [
            "h", "h:", ":1", "h:0", "h:65536", "h:+1", "::1:7000", "[]:1", "a b:1", "h:x",
        ] {
            assert!(
                matches!(check_address(bad, "X"), Err(Error::Config(_))),
                "{bad:?}"
            );
        }
        assert_eq!(join_address("::1", 5), "[::1]:5");
        assert_eq!(join_address("h", 5), "h:5");
    }

    #[test]
    fn a_slurm_job_tells_a_replacement_every_host_to_ask_for_joins() {
        let launch = Launch {
            launcher: Launcher::Slurm,
            node: 1,
            nodes: 4,
            local_rank: 0,
            job_id: Some("7".into()),
            hosts: vec!["cn1".into(), "cn2".into(), "cn2".into(), "fe80::1".into()],
            rendezvous: Some("cn1:20007".into()),
        };
        let mut config = Config {
            nodes: 4,
            fabric: FabricConfig::Tcp {
                peers: Vec::new(),
                rendezvous: None,
                join: Vec::new(),
                secret: "a-secret-of-sixteen-bytes".into(),
                threads: 2,
            },
            ..Config::default()
        };
        launch.configure(&mut config).unwrap();
        let FabricConfig::Tcp {
            rendezvous, join, ..
        } = &config.fabric
        else {
            unreachable!()
        };
        assert_eq!(rendezvous.as_deref(), Some("cn1:20007"));
        assert_eq!(join, &["cn2:20007", "[fe80::1]:20007"]);
        // The same on verbs, whose replacement also rejoins through the
        // members' join services.
        let mut config = Config {
            nodes: 4,
            fabric: FabricConfig::Verbs {
                device: None,
                peers: Vec::new(),
                rendezvous: None,
                join: Vec::new(),
                secret: "a-secret-of-sixteen-bytes".into(),
                gid_index: None,
            },
            ..Config::default()
        };
        launch.configure(&mut config).unwrap();
        let FabricConfig::Verbs { join, .. } = &config.fabric else {
            unreachable!()
        };
        assert_eq!(join, &["cn2:20007", "[fe80::1]:20007"]);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_number("X", "0").ok(), Some(0));
        for bad in [
            "-1",
            "+1",
            " 1",
            "1 ",
            "0x1",
            "1.0",
            "99999999999999999999999",
        ] {
            let e = parse_number("X", bad).unwrap_err().to_string();
            assert!(e.contains("X="), "{bad:?}: {e}");
        }
    }
}
