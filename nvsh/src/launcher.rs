//! `nvsh run`: starts N local processes with the launcher environment (see [`nvshmem::bootstrap`]).
//!
//! A job of PEs only makes progress while every PE is alive: NVSHMEM's collectives wait for all
//! of them. So the launcher treats the N processes as one unit. The first failure stops the
//! others, and its status becomes the launcher's, so scripts and schedulers see why the job
//! ended. Signals sent to the launcher reach every process, so an interrupted job leaves no PE
//! holding a GPU.
//!
//! Each process runs in its own process group. Stop signals go to the whole group, so helper
//! processes that a PE started (a shell's children, say) stop with it, and a Ctrl-C at the
//! terminal reaches the PEs once, through the launcher, instead of twice. Because a background
//! process group cannot read the terminal, the processes get an empty stdin.
//!
//! Output is forwarded line by line with the rank in front (`[R] line`). Each line is written
//! whole under the stream's lock, so lines of different ranks never mix.

use nvshmem::bootstrap;
use nvshmem::core::error::Error;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long the processes get to exit after SIGTERM (or a forwarded signal) before SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Environment variable that selects the GPUs (set when [`LaunchSpec::gpus`] is given).
pub const ENV_CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// Upper bound on the wait for a process's last output line before its failure is reported:
/// the report reads best after the process's own last words, but must not wait on a pipe that a
/// background process keeps open.
const REPORT_DELAY: Duration = Duration::from_millis(200);

/// How long to wait for output after every process has exited. Output can only still be open
/// when a process left a background child holding its pipe; the job is over, so do not wait on
/// it for long.
const OUTPUT_DRAIN: Duration = Duration::from_secs(1);

/// Upper bound on sleeping between checks; SIGCHLD and closed pipes wake the loop earlier.
const POLL: Duration = Duration::from_millis(50);

/// A line longer than this is forwarded in pieces, so a process that never writes a newline
/// cannot make the launcher buffer without bound.
const MAX_LINE: usize = 1 << 20;

/// What to launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Number of processes (PEs), at least 1.
    pub n: usize,
    /// GPU indices for `CUDA_VISIBLE_DEVICES`, the same list for every process (the runtime
    /// picks GPU `local_rank % len`). `None` leaves the variable as the launcher has it.
    pub gpus: Option<Vec<u32>>,
    /// Program: a name looked up on `PATH`, or a path.
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Time between the stop signal and SIGKILL.
    pub grace: Duration,
    /// Variables set for every process on top of the launcher's environment (the launcher
    /// contract's variables win over these).
    pub extra_env: Vec<(OsString, OsString)>,
    /// Forward SIGINT and SIGTERM received by this process to the processes. Off for callers
    /// that handle signals themselves (see [`launch`] for what turning it on costs).
    pub forward_signals: bool,
    /// What the others get when one process fails.
    pub on_failure: OnFailure,
}

/// What the launcher does with the other processes when one fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    /// Stop them at once (SIGTERM, SIGKILL after the grace period): the default.
    Stop,
    /// Let them end on their own (the runtime's waits time out and name the failed PE); kill
    /// those still running after this long. For seeing what the survivors report.
    Wait(Duration),
}

impl LaunchSpec {
    /// `n` processes of `program` with no arguments, the default grace period, signal
    /// forwarding on and the GPUs left as they are.
    pub fn new(n: usize, program: impl Into<OsString>) -> LaunchSpec {
        LaunchSpec {
            n,
            gpus: None,
            program: program.into(),
            args: Vec::new(),
            grace: DEFAULT_GRACE,
            extra_env: Vec::new(),
            forward_signals: true,
            on_failure: OnFailure::Stop,
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> LaunchSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
}

/// How one process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankStatus {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it.
    Signaled { signal: i32, core_dumped: bool },
}

impl RankStatus {
    fn from_exit_status(status: ExitStatus) -> RankStatus {
        match (status.code(), status.signal()) {
            (Some(code), _) => RankStatus::Exited(code),
            (None, Some(signal)) => RankStatus::Signaled {
                signal,
                core_dumped: status.core_dumped(),
            },
            // Neither happens for a waited-for child on Unix; report it as a failure.
            (None, None) => RankStatus::Exited(1),
        }
    }

    pub fn success(&self) -> bool {
        *self == RankStatus::Exited(0)
    }

    /// The shell's convention: the exit code, or 128 + the signal number.
    pub fn exit_code(&self) -> u8 {
        match *self {
            RankStatus::Exited(code) => code as u8,
            RankStatus::Signaled { signal, .. } => (128 + signal) as u8,
        }
    }
}

impl fmt::Display for RankStatus {
    /// Reads after "rank R": "exited with code 3", "was killed by signal 9 (SIGKILL)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RankStatus::Exited(code) => write!(f, "exited with code {code}"),
            RankStatus::Signaled {
                signal,
                core_dumped,
            } => {
                write!(f, "was killed by {}", signal_description(signal))?;
                if core_dumped {
                    write!(f, " (core dumped)")?;
                }
                Ok(())
            }
        }
    }
}

/// Why the launcher stopped the job before every process finished on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// This rank failed first.
    Failed { rank: usize, status: RankStatus },
    /// The launcher received this signal (SIGINT or SIGTERM) and forwarded it.
    Interrupted { signal: i32 },
}

/// How a launch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchOutcome {
    /// 0 when every process succeeded; else the first failure's code (128 + signal for a
    /// signal death), or 128 + the signal that interrupted the launcher.
    pub exit_code: u8,
    /// What ended the job early; `None` when every process exited 0 on its own.
    pub stop: Option<Stop>,
    /// Every process's status, by rank.
    pub statuses: Vec<RankStatus>,
}

impl LaunchOutcome {
    /// The rank whose failure stopped the job.
    pub fn failed_rank(&self) -> Option<usize> {
        match self.stop {
            Some(Stop::Failed { rank, .. }) => Some(rank),
            _ => None,
        }
    }
}

/// Why a launch could not start, or lost track of its processes.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the number of processes must be at least 1 (got -n 0)")]
    NoProcesses,

    #[error(
        "--gpus {list:?} is not valid: {reason}; expected comma-separated GPU indices such as \
         0,1"
    )]
    InvalidGpus { list: String, reason: String },

    #[error(
        "program `{program}` not found in any directory on PATH; check its name and PATH, or \
         give its path (e.g. ./{program})"
    )]
    ProgramNotFound { program: String },

    #[error("program `{program}` not found: no such file; check the path")]
    NoSuchFile { program: String },

    #[error(
        "`{program}` is not an executable file; check that it is a program and has execute \
         permission (chmod +x)"
    )]
    NotExecutable { program: String },

    #[error("could not make the NVSHMEM unique ID for the job: {0}")]
    UniqueId(#[from] Error),

    #[error(
        "could not install the handlers that forward SIGINT and SIGTERM to the processes: \
         {0}"
    )]
    Signals(#[source] io::Error),

    #[error(
        "could not start rank {rank} (`{program}`): {source}; the ranks already started were \
         stopped"
    )]
    Spawn {
        rank: usize,
        program: String,
        #[source]
        source: io::Error,
    },

    #[error("could not wait for rank {rank}: {source}; all processes were killed")]
    Wait {
        rank: usize,
        #[source]
        source: io::Error,
    },
}

/// Parses a `--gpus` list: comma-separated, non-negative, distinct integers, at least one.
pub fn parse_gpus(list: &str) -> Result<Vec<u32>, LaunchError> {
    let invalid = |reason: String| LaunchError::InvalidGpus {
        list: list.to_string(),
        reason,
    };
    if list.trim().is_empty() {
        return Err(invalid("the list is empty".into()));
    }
    let mut gpus = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(invalid("it has an empty entry".into()));
        }
        // u32's parser takes "+1"; CUDA does not.
        let index = item
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| item.parse::<u32>().ok())
            .flatten()
            .ok_or_else(|| invalid(format!("`{item}` is not a GPU index")))?;
        if gpus.contains(&index) {
            // CUDA ignores the list from a repeated index onwards.
            return Err(invalid(format!("GPU {index} is listed twice")));
        }
        gpus.push(index);
    }
    Ok(gpus)
}

/// Runs the job: starts `spec.n` processes with the launcher environment, forwards their
/// output with rank prefixes, waits for all of them and says how the job ended.
///
/// The first process that fails (non-zero exit or a signal) stops the job: the others get
/// SIGTERM and, after `spec.grace`, SIGKILL; one line on stderr names the rank and its status.
/// Every process is waited for before this returns, whatever happens.
///
/// With `spec.forward_signals`, SIGINT and SIGTERM received by this process are forwarded to
/// the processes (a second one kills them at once), and this process keeps handling them after
/// `launch` returns: signal-hook cannot restore their default action. Meant for launcher
/// processes, which exit soon after.
pub fn launch(spec: &LaunchSpec) -> Result<LaunchOutcome, LaunchError> {
    if spec.n == 0 {
        return Err(LaunchError::NoProcesses);
    }
    let gpu_list = match &spec.gpus {
        Some(gpus) if gpus.is_empty() => {
            return Err(LaunchError::InvalidGpus {
                list: String::new(),
                reason: "the list is empty".into(),
            })
        }
        Some(gpus) => Some(
            gpus.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
        None => None,
    };
    let path_var = spec
        .extra_env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("PATH"));
    let executable = resolve_program(&spec.program, path_var.as_deref())?;
    let unique_id = bootstrap::encode_hex(&bootstrap::unique_id_bytes(
        &nvshmem::core::result::get_unique_id()?,
    ));

    let (tx, rx) = mpsc::channel();
    let signals = SignalThread::start(spec.forward_signals, tx.clone())?;

    let mut ranks: Vec<Rank> = Vec::with_capacity(spec.n);
    for rank in 0..spec.n {
        let mut cmd = Command::new(&executable);
        cmd.arg0(&spec.program)
            .args(&spec.args)
            .envs(spec.extra_env.iter().map(|(k, v)| (k, v)))
            .env(bootstrap::ENV_RANK, rank.to_string())
            .env(bootstrap::ENV_LOCAL_RANK, rank.to_string())
            .env(bootstrap::ENV_WORLD_SIZE, spec.n.to_string())
            .env(bootstrap::ENV_LOCAL_WORLD_SIZE, spec.n.to_string())
            .env(bootstrap::ENV_UNIQUE_ID, &unique_id)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(list) = &gpu_list {
            cmd.env(ENV_CUDA_VISIBLE_DEVICES, list);
        }
        die_with_parent(&mut cmd);
        match Rank::spawn(rank, &mut cmd, &tx) {
            Ok(r) => ranks.push(r),
            Err(source) => {
                kill_and_reap(&mut ranks);
                signals.stop();
                return Err(LaunchError::Spawn {
                    rank,
                    program: spec.program.to_string_lossy().into_owned(),
                    source,
                });
            }
        }
    }
    drop(tx);

    let result = supervise(&mut ranks, &rx, spec.grace, spec.on_failure);
    if result.is_err() {
        kill_and_reap(&mut ranks);
    }
    drain_output(&mut ranks, &rx);
    signals.stop();
    let stop = result?;
    let statuses: Vec<RankStatus> = ranks
        .iter()
        .map(|r| r.status.expect("every rank was waited for"))
        .collect();
    let exit_code = match stop {
        None => 0,
        Some(Stop::Failed { status, .. }) => status.exit_code(),
        Some(Stop::Interrupted { signal }) => (128 + signal) as u8,
    };
    Ok(LaunchOutcome {
        exit_code,
        stop,
        statuses,
    })
}

/// Finds the file `program` names, as execvp would, so that a wrong name is reported before
/// anything starts rather than as N spawn failures.
fn resolve_program(program: &OsStr, path_var: Option<&OsStr>) -> Result<PathBuf, LaunchError> {
    let name = || program.to_string_lossy().into_owned();
    let is_executable = |p: &Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.is_empty() {
        return Err(LaunchError::NoSuchFile { program: name() });
    }
    if program.as_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        return if is_executable(&path) {
            Ok(path)
        } else if path.exists() {
            Err(LaunchError::NotExecutable { program: name() })
        } else {
            Err(LaunchError::NoSuchFile { program: name() })
        };
    }
    // execvp's search path when PATH is unset.
    let path_var = path_var.unwrap_or(OsStr::new("/bin:/usr/bin"));
    let mut found_not_executable = false;
    for dir in std::env::split_paths(path_var) {
        // An empty entry means the current directory.
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
        found_not_executable |= candidate.is_file();
    }
    if found_not_executable {
        Err(LaunchError::NotExecutable { program: name() })
    } else {
        Err(LaunchError::ProgramNotFound { program: name() })
    }
}

/// Asks Linux to SIGKILL the process if the launcher dies without stopping it (SIGKILL, OOM
/// killer), so that no orphaned PE keeps a GPU. Linux watches the spawning thread, not the
/// process; [`launch`] holds that thread until every process has exited.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

/// What wakes the supervising loop.
enum Event {
    Signal(i32),
    /// One of a rank's two output streams reached end of file.
    OutputClosed(usize),
}

struct Rank {
    child: Child,
    /// Also the process group's ID (each rank leads its own group).
    pid: i32,
    status: Option<RankStatus>,
    open_streams: u8,
    readers: Vec<JoinHandle<()>>,
}

impl Rank {
    fn spawn(rank: usize, cmd: &mut Command, events: &Sender<Event>) -> io::Result<Rank> {
        let mut child = cmd.spawn()?;
        let pid = child.id() as i32;
        let mut readers = Vec::with_capacity(2);
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        for (stream, pipe) in [
            (Stream::Stdout, Box::new(stdout) as Box<dyn Read + Send>),
            (Stream::Stderr, Box::new(stderr)),
        ] {
            let events = events.clone();
            let spawned = thread::Builder::new()
                .name(format!("nvsh-rank{rank}-{stream:?}"))
                .spawn(move || {
                    forward_lines(rank, pipe, stream);
                    let _ = events.send(Event::OutputClosed(rank));
                });
            match spawned {
                Ok(handle) => readers.push(handle),
                Err(e) => {
                    signal_group(pid, libc::SIGKILL);
                    let _ = child.wait();
                    return Err(e);
                }
            }
        }
        Ok(Rank {
            child,
            pid,
            status: None,
            open_streams: 2,
            readers,
        })
    }

    fn running(&self) -> bool {
        self.status.is_none()
    }
}

/// Signals a rank's process group, or the rank alone if it left the group.
fn signal_group(pid: i32, signal: i32) {
    // SAFETY: plain syscalls. The rank is not yet waited for, so its pid (and the group's ID)
    // cannot belong to another process.
    unsafe {
        if libc::kill(-pid, signal) != 0 {
            libc::kill(pid, signal);
        }
    }
}

fn signal_running(ranks: &[Rank], signal: i32) -> Vec<usize> {
    let mut signalled = Vec::new();
    for (rank, r) in ranks.iter().enumerate() {
        if r.running() {
            signal_group(r.pid, signal);
            signalled.push(rank);
        }
    }
    signalled
}

/// Collects the status of every rank that exited since the last call.
fn reap(ranks: &mut [Rank]) -> Result<Vec<usize>, LaunchError> {
    let mut exited = Vec::new();
    for (rank, r) in ranks.iter_mut().enumerate() {
        if !r.running() {
            continue;
        }
        match r.child.try_wait() {
            Ok(Some(status)) => {
                r.status = Some(RankStatus::from_exit_status(status));
                exited.push(rank);
            }
            Ok(None) => {}
            Err(source) => return Err(LaunchError::Wait { rank, source }),
        }
    }
    Ok(exited)
}

/// Last resort when the launcher cannot go on: SIGKILL everything still running and wait.
fn kill_and_reap(ranks: &mut [Rank]) {
    for r in ranks.iter_mut().filter(|r| r.running()) {
        signal_group(r.pid, libc::SIGKILL);
        if let Ok(status) = r.child.wait() {
            r.status = Some(RankStatus::from_exit_status(status));
        }
    }
}

fn rank_list(ranks: &[usize]) -> String {
    ranks
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits until every rank has exited, reacting to failures and signals. Returns what stopped
/// the job early, if anything.
fn supervise(
    ranks: &mut [Rank],
    events: &Receiver<Event>,
    grace: Duration,
    on_failure: OnFailure,
) -> Result<Option<Stop>, LaunchError> {
    let mut stop: Option<Stop> = None;
    let mut kill_at: Option<Instant> = None;
    // What the SIGKILL report says the processes outlived.
    let mut kill_after = (grace, "the stop signal");
    // A failure report waits briefly for the failed rank's last output lines.
    let mut report: Option<(usize, Instant, String)> = None;
    loop {
        let now = Instant::now();
        let mut wake = now + POLL;
        if let Some(t) = kill_at {
            wake = wake.min(t);
        }
        if let Some((_, t, _)) = &report {
            wake = wake.min(*t);
        }
        let mut pending = Vec::new();
        match events.recv_timeout(wake.saturating_duration_since(now)) {
            Ok(event) => pending.push(event),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
        }
        pending.extend(events.try_iter());

        for event in pending {
            match event {
                Event::OutputClosed(rank) => ranks[rank].open_streams -= 1,
                Event::Signal(libc::SIGCHLD) => {}
                Event::Signal(signal) if stop.is_none() => {
                    let signalled = signal_running(ranks, signal);
                    eprintln!(
                        "nvsh run: received {}; forwarded it to {} process(es)",
                        signal_name(signal).unwrap_or("a signal"),
                        signalled.len()
                    );
                    stop = Some(Stop::Interrupted { signal });
                    kill_at = Some(Instant::now() + grace);
                }
                Event::Signal(signal) => {
                    // A second signal while stopping: the user does not want to wait.
                    let killed = signal_running(ranks, libc::SIGKILL);
                    if !killed.is_empty() {
                        eprintln!(
                            "nvsh run: received {} while stopping; killed rank(s) {} (SIGKILL)",
                            signal_name(signal).unwrap_or("a signal"),
                            rank_list(&killed)
                        );
                    }
                    kill_at = None;
                }
            }
        }

        for rank in reap(ranks)? {
            let status = ranks[rank].status.expect("just reaped");
            if status.success() || stop.is_some() {
                continue;
            }
            stop = Some(Stop::Failed { rank, status });
            let (others, wait) = match on_failure {
                OnFailure::Stop => (signal_running(ranks, libc::SIGTERM), grace),
                OnFailure::Wait(wait) => {
                    let running: Vec<usize> =
                        (0..ranks.len()).filter(|&r| ranks[r].running()).collect();
                    kill_after = (wait, "the failure");
                    (running, wait)
                }
            };
            let message = match (others.is_empty(), on_failure) {
                (true, _) => format!("nvsh run: rank {rank} {status}"),
                (false, OnFailure::Stop) => format!(
                    "nvsh run: rank {rank} {status}; stopping the other {} process(es)",
                    others.len()
                ),
                (false, OnFailure::Wait(_)) => format!(
                    "nvsh run: rank {rank} {status}; letting rank(s) {} end on their own (killed \
                     if still running after {:.1} s)",
                    rank_list(&others),
                    wait.as_secs_f64()
                ),
            };
            report = Some((rank, Instant::now() + REPORT_DELAY, message));
            kill_at = Some(Instant::now() + wait);
        }

        let now = Instant::now();
        if let Some((rank, deadline, message)) = &report {
            if ranks[*rank].open_streams == 0 || now >= *deadline {
                eprintln!("{message}");
                report = None;
            }
        }
        if kill_at.is_some_and(|t| now >= t) {
            let killed = signal_running(ranks, libc::SIGKILL);
            if !killed.is_empty() {
                eprintln!(
                    "nvsh run: rank(s) {} still running {:.1} s after {}; killed (SIGKILL)",
                    rank_list(&killed),
                    kill_after.0.as_secs_f64(),
                    kill_after.1
                );
            }
            kill_at = None;
        }
        if report.is_none() && ranks.iter().all(|r| !r.running()) {
            return Ok(stop);
        }
    }
}

/// Waits a little for the last output after every rank has exited, then lets go of readers
/// still blocked on a pipe that some background process keeps open.
fn drain_output(ranks: &mut [Rank], events: &Receiver<Event>) {
    let deadline = Instant::now() + OUTPUT_DRAIN;
    while ranks.iter().any(|r| r.open_streams > 0) {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(Event::OutputClosed(rank)) => ranks[rank].open_streams -= 1,
            Ok(Event::Signal(_)) => {}
            Err(_) => break,
        }
    }
    for (rank, r) in ranks.iter_mut().enumerate() {
        if r.open_streams == 0 {
            for reader in r.readers.drain(..) {
                let _ = reader.join();
            }
        } else {
            eprintln!(
                "nvsh run: rank {rank} exited but its output is still open (a background \
                 process it started?); not waiting for it"
            );
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// Copies `pipe` to the launcher's stream, one whole prefixed line per write.
fn forward_lines(rank: usize, pipe: Box<dyn Read + Send>, stream: Stream) {
    let prefix = format!("[{rank}] ");
    let mut reader = BufReader::with_capacity(64 * 1024, pipe);
    let mut line = Vec::new();
    // After a write error (stdout closed by `| head`, say) keep reading, so that the process
    // never blocks on a full pipe, but drop the output.
    let mut sink_ok = true;
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) => break,
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let (take, complete) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        line.extend_from_slice(&chunk[..take]);
        reader.consume(take);
        if complete || line.len() >= MAX_LINE {
            sink_ok = sink_ok && write_line(&prefix, &line, stream).is_ok();
            line.clear();
        }
    }
    if !line.is_empty() && sink_ok {
        let _ = write_line(&prefix, &line, stream);
    }
}

fn write_line(prefix: &str, line: &[u8], stream: Stream) -> io::Result<()> {
    let mut buf = Vec::with_capacity(prefix.len() + line.len() + 1);
    buf.extend_from_slice(prefix.as_bytes());
    buf.extend_from_slice(line);
    if !line.ends_with(b"\n") {
        buf.push(b'\n');
    }
    match stream {
        Stream::Stdout => {
            let mut out = io::stdout().lock();
            out.write_all(&buf)?;
            out.flush()
        }
        Stream::Stderr => {
            let mut err = io::stderr().lock();
            err.write_all(&buf)?;
            err.flush()
        }
    }
}

/// Delivers SIGINT and SIGTERM (when forwarding) and SIGCHLD to the supervising loop.
struct SignalThread {
    handle: signal_hook::iterator::Handle,
    thread: JoinHandle<()>,
}

impl SignalThread {
    fn start(forward: bool, events: Sender<Event>) -> Result<SignalThread, LaunchError> {
        use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM};
        let mut wanted = vec![SIGCHLD];
        if forward {
            wanted.extend([SIGINT, SIGTERM]);
        }
        let mut signals =
            signal_hook::iterator::Signals::new(&wanted).map_err(LaunchError::Signals)?;
        let handle = signals.handle();
        let thread = thread::Builder::new()
            .name("nvsh-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if events.send(Event::Signal(signal)).is_err() {
                        break;
                    }
                }
            })
            .map_err(LaunchError::Signals)?;
        Ok(SignalThread { handle, thread })
    }

    fn stop(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}

/// "SIGKILL" for 9, and so on, for the signals that commonly end a process.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}

/// "signal 9 (SIGKILL)", or "signal 40" for one without a common name.
pub fn signal_description(signal: i32) -> String {
    match signal_name(signal) {
        Some(name) => format!("signal {signal} ({name})"),
        None => format!("signal {signal}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_lists_parse_and_reject_garbage() {
        assert_eq!(parse_gpus("0").unwrap(), vec![0]);
        assert_eq!(parse_gpus("0,1, 3").unwrap(), vec![0, 1, 3]);
        for bad in ["", " ", "a,b", "0,,1", "0,", "-1", "+1", "1.5", "0,0"] {
            assert!(
                matches!(parse_gpus(bad), Err(LaunchError::InvalidGpus { .. })),
                "{bad:?} must be rejected"
            );
        }
    }

    #[test]
    fn statuses_print_and_map_to_shell_codes() {
        assert_eq!(RankStatus::Exited(3).to_string(), "exited with code 3");
        assert_eq!(RankStatus::Exited(3).exit_code(), 3);
        let killed = RankStatus::Signaled {
            signal: libc::SIGKILL,
            core_dumped: false,
        };
        assert_eq!(killed.to_string(), "was killed by signal 9 (SIGKILL)");
        assert_eq!(killed.exit_code(), 137);
        assert!(!killed.success());
        assert!(RankStatus::Exited(0).success());
        assert_eq!(signal_description(40), "signal 40");
    }

    #[test]
    fn programs_resolve_like_execvp() {
        let path = OsStr::new("/nonexistent-dir:/bin:/usr/bin");
        assert!(resolve_program(OsStr::new("sh"), Some(path))
            .unwrap()
            .ends_with("sh"));
        assert!(matches!(
            resolve_program(OsStr::new("no-such-program-xyz"), Some(path)),
            Err(LaunchError::ProgramNotFound { .. })
        ));
        assert!(matches!(
            resolve_program(OsStr::new("./no-such-program-xyz"), Some(path)),
            Err(LaunchError::NoSuchFile { .. })
        ));
        let plain = std::env::temp_dir().join(format!("nvsh-not-exec-{}", std::process::id()));
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let not_exec = resolve_program(plain.as_os_str(), Some(path));
        std::fs::remove_file(&plain).unwrap();
        assert!(
            matches!(not_exec, Err(LaunchError::NotExecutable { .. })),
            "{not_exec:?}"
        );
        assert!(matches!(
            resolve_program(OsStr::new("/"), Some(path)),
            Err(LaunchError::NotExecutable { .. })
        ));
    }
}
