//! Child processes and signals: every process the harness starts (node
//! processes, CPU hogs, job tasks, peer servers) is a [`ChildGuard`], tied
//! to the harness and killed with its whole process group when the guard
//! drops; Ctrl-C and SIGTERM only set a flag ([`interrupted`]) that every
//! wait loop checks, so a run is torn down by those drops.

use crate::error::{HarnessError, Result};
use nix::sys::signal::{self, SigSet, Signal};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Makes SIGINT and SIGTERM set a flag that every wait loop of the harness
/// checks, so a run is torn down cleanly. The signals are blocked in every
/// thread and taken by one thread that waits for them (no handler runs in
/// signal context); after the first, that thread stops blocking them, so a
/// second one terminates at once and the children die with the harness
/// through their parent-death signal. Call it before starting any thread:
/// threads inherit the mask (children do not: the standard library clears
/// it before `exec`).
pub fn install_signal_handlers() {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    if set.thread_block().is_err() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if set.wait().is_ok() {
                INTERRUPTED.store(true, Ordering::SeqCst);
            }
            let _ = set.thread_unblock();
            // Park: this thread now takes the next signal the default way.
            loop {
                std::thread::park();
            }
        });
}

/// Whether the user asked the harness to stop.
#[must_use]
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Makes this process die when its parent does, and exits at once if the
/// parent is already gone (node processes and hogs started by hand).
pub fn die_with_parent() {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if nix::unistd::getppid() == Pid::from_raw(1) {
        std::process::exit(3);
    }
}

/// The last `max` bytes of a file, for error messages.
#[must_use]
pub fn tail(path: &Path, max: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(max);
    let s = String::from_utf8_lossy(&text[start..]).trim().to_owned();
    if s.is_empty() {
        "(no output on stderr)".to_owned()
    } else {
        s
    }
}

/// CPU seconds (user + system) process `pid` (a peer server) has used so
/// far, if it can be read.
#[must_use]
pub fn process_cpu_secs(pid: u32) -> Option<f64> {
    let pid = i32::try_from(pid).ok()?;
    power_ipmi::process_cpu_times(pid).ok().map(|t| t.cpu_s())
}

/// The program `name` on `PATH`, if any (an executable regular file).
#[must_use]
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| executable(p))
    })
}

/// A child process of the harness, in its own process group and killed
/// with the harness; dropping the guard kills the whole group and reaps
/// the child (after asking it to stop first, for a guard made
/// [`ChildGuard::with_grace`]).
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    grace: Option<Duration>,
}

impl ChildGuard {
    /// A command that runs `program` tied to the harness: in its own
    /// process group (so terminal signals reach only the harness, which
    /// tears the run down itself) and killed when the harness dies. The
    /// death signal is set by util-linux's `setpriv` right before it execs
    /// `program`, so it holds for programs that are not ours (peer servers)
    /// too. Add arguments and stdio, then [`ChildGuard::spawn`] it.
    pub fn command(program: &Path) -> Command {
        Self::command_dying_by(program, "KILL")
    }

    /// The same as [`ChildGuard::command`], with `signal` (a name such as
    /// `TERM`) sent to the child when the harness dies: a launcher (`srun`,
    /// `mpirun`) must be told to stop, so that it ends its job on every
    /// host, rather than killed.
    pub fn command_dying_by(program: &Path, signal: &str) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", signal, "--"])
            .arg(program)
            .process_group(0);
        cmd
    }

    /// Starts a command made by [`ChildGuard::command`]; `what` names it in
    /// the error ("starting a node process").
    ///
    /// # Errors
    /// [`HarnessError::Io`] if the program does not exist or cannot be
    /// started.
    pub fn spawn(cmd: &mut Command, what: &'static str) -> Result<Self> {
        // The program, not `setpriv`: a missing one must fail here, not as
        // a child that exits at once.
        let program = PathBuf::from(cmd.get_args().nth(3).unwrap_or(cmd.get_program()));
        std::fs::metadata(&program).map_err(HarnessError::io(what, &program))?;
        let child = cmd.spawn().map_err(HarnessError::io(what, &program))?;
        Ok(ChildGuard { child, grace: None })
    }

    /// Makes dropping the guard ask the child to stop first: SIGTERM to
    /// the child alone (a launcher then ends its tasks on every host and
    /// gives its allocation back), and the group's SIGKILL only if it is
    /// still running `grace` later.
    #[must_use]
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// The process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's stdin, if piped and not yet closed.
    pub fn stdin(&mut self) -> Option<&mut ChildStdin> {
        self.child.stdin.as_mut()
    }

    /// Closes the child's stdin (the harness's children exit on EOF).
    pub fn close_stdin(&mut self) {
        drop(self.child.stdin.take());
    }

    /// The exit status if the child has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits up to `limit` for the child to exit; its status if it did.
    pub fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(s) = self.try_wait() {
                return Some(s);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let pid = i32::try_from(self.child.id()).ok().map(Pid::from_raw);
        if let (Some(grace), Some(pid)) = (self.grace, pid) {
            if self.try_wait().is_none() {
                let _ = signal::kill(pid, Signal::SIGTERM);
                let _ = self.wait_for(grace);
            }
        }
        // The child leads its own group (`process_group(0)`), so its pid
        // names the group: this also reaches whatever it started.
        if let Some(pid) = pid {
            let _ = signal::killpg(pid, Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Processes of this binary that talk to the harness in lines on stdout
/// and take commands on stdin (node processes, job tasks).
#[derive(Debug)]
pub struct Talking {
    /// The processes, in order.
    pub children: Vec<ChildGuard>,
    /// Every process's stdout lines, tagged with its index.
    pub lines: Receiver<Line>,
    /// Each process's stderr file.
    pub logs: Vec<PathBuf>,
}

impl Talking {
    /// Starts `count` processes of `exe`, process `i` with `args(i)` and
    /// its stderr in the file `log(i)`; `what` names them in errors ("a
    /// node process"). If one cannot be started, those already started
    /// are killed.
    ///
    /// # Errors
    /// [`HarnessError::Io`] if a log cannot be created or a process not
    /// started.
    pub fn spawn(
        exe: &Path,
        count: usize,
        what: &'static str,
        args: impl Fn(usize) -> Vec<OsString>,
        log: impl Fn(usize) -> PathBuf,
    ) -> Result<Self> {
        Self::spawn_with(exe, count, what, args, log, &[])
    }

    /// The same as [`Talking::spawn`], with the variables `env` added to
    /// every process's environment.
    ///
    /// # Errors
    /// As [`Talking::spawn`].
    pub fn spawn_with(
        exe: &Path,
        count: usize,
        what: &'static str,
        args: impl Fn(usize) -> Vec<OsString>,
        log: impl Fn(usize) -> PathBuf,
        env: &[(OsString, OsString)],
    ) -> Result<Self> {
        let (tx, lines) = mpsc::channel();
        let mut talking = Talking {
            children: Vec::with_capacity(count),
            lines,
            logs: Vec::with_capacity(count),
        };
        for index in 0..count {
            let mut cmd = ChildGuard::command(exe);
            cmd.args(args(index)).envs(env.iter().map(|(k, v)| (k, v)));
            talking.add(cmd, what, log(index), &tx)?;
        }
        Ok(talking)
    }

    /// Starts one launcher (`srun`, `mpirun`) as `program args…` with the
    /// variables `env` added, its stderr in the file `log`: its stdout
    /// carries the lines of every process it starts (each line says whose
    /// it is) and its stdin reaches them all. It is told to stop (SIGTERM,
    /// also when the harness dies) and given `grace` to end its tasks
    /// before it is killed.
    ///
    /// # Errors
    /// As [`Talking::spawn`].
    pub fn spawn_launcher(
        program: &Path,
        args: &[OsString],
        log: PathBuf,
        env: &[(OsString, OsString)],
        grace: Duration,
    ) -> Result<Self> {
        let (tx, lines) = mpsc::channel();
        let mut talking = Talking {
            children: Vec::with_capacity(1),
            lines,
            logs: Vec::with_capacity(1),
        };
        let mut cmd = ChildGuard::command_dying_by(program, "TERM");
        cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
        talking.add(cmd, "starting the launcher", log, &tx)?;
        talking.children = talking
            .children
            .into_iter()
            .map(|c| c.with_grace(grace))
            .collect();
        Ok(talking)
    }

    /// Starts `cmd` with piped stdin and stdout and its stderr in `log`,
    /// forwarding its stdout lines to `tx` tagged with its index.
    fn add(
        &mut self,
        mut cmd: Command,
        what: &'static str,
        log: PathBuf,
        tx: &Sender<Line>,
    ) -> Result<()> {
        let index = self.children.len();
        let log_file = std::fs::File::create(&log).map_err(HarnessError::io("creating", &log))?;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file);
        let mut child = ChildGuard::spawn(&mut cmd, what)?;
        if let Some(out) = child.child.stdout.take() {
            let tx = tx.clone();
            std::thread::spawn(move || forward(out, index, &tx));
        }
        self.children.push(child);
        self.logs.push(log);
        Ok(())
    }
}

/// Node (or task) `node` failed: `what` happened; the error quotes the
/// tail of its stderr file `log`.
#[must_use]
pub fn failed(node: usize, what: &str, log: &Path) -> HarnessError {
    HarnessError::NodeFailed {
        node,
        why: format!("{what}; stderr ({}): {}", log.display(), tail(log, 1200)),
    }
}

/// Sends each non-empty line of `out` to `lines` as [`Line::Text`] tagged
/// `index`, then [`Line::Closed`].
fn forward(out: ChildStdout, index: usize, lines: &Sender<Line>) {
    for line in BufReader::new(out).lines().map_while(std::io::Result::ok) {
        if !line.trim().is_empty() && lines.send(Line::Text(index, line)).is_err() {
            return;
        }
    }
    let _ = lines.send(Line::Closed(index));
}

/// What the stdout thread of a [`Talking`] process sends.
#[derive(Debug)]
pub enum Line {
    /// A line the child printed, with its index.
    Text(usize, String),
    /// The child's stdout closed (it exited).
    Closed(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_a_guard_kills_the_whole_group() {
        // A shell whose own child would outlive a plain kill of the shell.
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut cmd = ChildGuard::command(Path::new("/bin/sh"));
        cmd.arg("-c")
            .arg(format!("sleep 60 & echo $! > {}; wait", pidfile.display()));
        let guard = ChildGuard::spawn(&mut cmd, "starting sh").unwrap();
        let grandchild = loop {
            if let Ok(s) = std::fs::read_to_string(&pidfile) {
                if let Ok(p) = s.trim().parse::<i32>() {
                    break p;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        drop(guard);
        let gone = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            // A zombie (reaped by init later) counts as gone.
            std::fs::read_to_string(format!("/proc/{grandchild}/stat")).map_or(true, |s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        });
        assert!(gone, "the group's other process was killed");
    }

    #[test]
    fn a_missing_program_is_a_typed_error() {
        let mut cmd = ChildGuard::command(Path::new("/nonexistent/program"));
        let e = ChildGuard::spawn(&mut cmd, "starting it").unwrap_err();
        assert!(matches!(e, HarnessError::Io { .. }), "{e}");
    }
}
