//! `nvsh run` and the launcher library, with `sh` scripts as the PEs (no GPU needed): the
//! environment contract, output forwarding, failure propagation, signal forwarding, GPU
//! selection and the errors before launch.

mod common;

use common::nvsh_path;
use nvsh::launcher::{self, LaunchError, LaunchSpec, OnFailure, RankStatus, Stop};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// `nvsh run ARGS` with piped output.
fn nvsh_run(args: &[&str]) -> Command {
    let mut cmd = Command::new(nvsh_path());
    cmd.arg("run")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

struct Finished {
    code: Option<i32>,
    /// The signal that ended the launcher, if one did.
    signal: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Finished {
    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    /// The stdout lines of one rank, prefix removed, in order.
    fn rank_stdout(&self, rank: usize) -> Vec<String> {
        let prefix = format!("[{rank}] ");
        self.stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
            .collect()
    }
}

/// Reads a pipe to its end on a thread, so that the child never blocks on a full pipe.
fn collect(pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        BufReader::new(pipe).read_to_string(&mut text).unwrap();
        text
    })
}

/// Runs the command to its end, failing the test (and killing the launcher) if it takes longer
/// than `limit`, so that a hanging launcher fails instead of stalling the suite. Time is no
/// evidence here (CI machines are shared and slow): limits are far above what a working launcher
/// needs and only catch hangs; ranks that must be stopped sleep far longer than the limit, and
/// exit statuses and messages show what happened. Lower bounds (a grace period or wait that was
/// honoured) stay: load only lengthens a run.
fn finish(mut cmd: Command, limit: Duration) -> Finished {
    let start = Instant::now();
    let mut child = cmd.spawn().expect("start nvsh");
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    let status = wait_with_limit(&mut child, limit);
    let elapsed = start.elapsed();
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    assert!(
        !stderr.contains("panicked"),
        "nvsh must not panic; stderr:\n{stderr}"
    );
    Finished {
        code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
        elapsed,
    }
}

fn wait_with_limit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("nvsh did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn run_ok(args: &[&str]) -> Finished {
    let done = finish(nvsh_run(args), Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "stderr:\n{}", done.stderr);
    done
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "nvsh-launcher-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn pid(&self, name: &str) -> i32 {
        let text = std::fs::read_to_string(self.0.join(name))
            .unwrap_or_else(|e| panic!("pid file {name}: {e}"));
        text.trim().parse().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Shell code that writes this shell's pid to DIR/NAME atomically (write, then rename).
fn write_pid(dir: &str, name: &str) -> String {
    format!("echo $$ > {dir}/{name}.tmp && mv {dir}/{name}.tmp {dir}/{name}")
}

/// Shell code that waits (up to about 10 s) until the files exist.
fn wait_for_files(dir: &str, names: &[&str]) -> String {
    let tests: Vec<String> = names.iter().map(|n| format!("[ -f {dir}/{n} ]")).collect();
    format!(
        "i=0; until {} || [ $i -ge 200 ]; do sleep 0.05; i=$((i+1)); done",
        tests.join(" && ")
    )
}

/// The process's state letter from /proc (R, S, Z, ...), or None when it does not exist.
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the parenthesised command name.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// True when no process with this pid exists (a zombie still exists: nobody waited for it).
fn is_gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    !alive && !Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn each_rank_gets_the_contract_environment_and_one_shared_unique_id() {
    let script = "echo rank=$NVSH_RANK local=$NVSH_LOCAL_RANK size=$NVSH_WORLD_SIZE \
                  lsize=$NVSH_LOCAL_WORLD_SIZE idlen=${#NVSH_UNIQUE_ID}; echo id=$NVSH_UNIQUE_ID";
    let done = run_ok(&["-n", "3", "--", "sh", "-c", script]);
    let mut ids = Vec::new();
    for rank in 0..3 {
        let lines = done.rank_stdout(rank);
        assert_eq!(lines.len(), 2, "rank {rank}: {lines:?}");
        assert_eq!(
            lines[0],
            format!("rank={rank} local={rank} size=3 lsize=3 idlen=256")
        );
        ids.push(lines[1].strip_prefix("id=").unwrap().to_string());
    }
    assert_eq!(
        done.stdout.lines().count(),
        6,
        "nothing else on stdout:\n{}",
        done.stdout
    );
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one ID for the job: {ids:?}"
    );
    let bytes = nvshmem::tools::bootstrap::decode_hex(&ids[0]).expect("hex");
    assert_eq!(bytes.len(), nvshmem::tools::bootstrap::UNIQUE_ID_BYTES);
    assert!(bytes.iter().any(|&b| b != 0), "a real ID is not all zeros");

    let again = run_ok(&["-n", "1", "--", "sh", "-c", "echo $NVSH_UNIQUE_ID"]);
    assert_ne!(
        again.rank_stdout(0),
        vec![ids[0].clone()],
        "every job gets a fresh ID"
    );
}

#[test]
fn output_is_prefixed_with_the_rank_on_both_streams() {
    let script = r#"printf 'out1\nout2\n'; printf 'err1\nerr2\n' >&2;
                    printf 'err-tail' >&2; printf 'out-tail'"#;
    let done = run_ok(&["-n", "2", "--", "sh", "-c", script]);
    for rank in 0..2 {
        assert_eq!(done.rank_stdout(rank), ["out1", "out2", "out-tail"]);
    }
    assert!(
        done.stdout.ends_with('\n'),
        "a last line without newline is completed"
    );
    let mut stdout = Finished::lines(&done.stdout);
    stdout.sort();
    assert_eq!(
        stdout,
        [
            "[0] out-tail",
            "[0] out1",
            "[0] out2",
            "[1] out-tail",
            "[1] out1",
            "[1] out2"
        ]
    );
    let mut stderr = Finished::lines(&done.stderr);
    stderr.sort();
    assert_eq!(
        stderr,
        [
            "[0] err-tail",
            "[0] err1",
            "[0] err2",
            "[1] err-tail",
            "[1] err1",
            "[1] err2"
        ],
        "stderr lines go to stderr, and nothing else is printed on success"
    );
}

#[test]
fn lines_of_different_ranks_never_mix() {
    // Long lines written one at a time by four ranks at once: a launcher that wrote lines in
    // pieces would interleave them.
    let payload = "x".repeat(300);
    let script = format!(
        "i=0; while [ $i -lt 300 ]; do echo \"$NVSH_RANK:$i:{payload}\"; \
         echo \"$NVSH_RANK:$i:{payload}\" >&2; i=$((i+1)); done"
    );
    let done = run_ok(&["-n", "4", "--", "sh", "-c", &script]);
    for (name, text) in [("stdout", &done.stdout), ("stderr", &done.stderr)] {
        let mut next = [0usize; 4];
        for line in text.lines() {
            let (prefix, rest) = line.split_once(' ').expect("prefixed line");
            let rank: usize = prefix
                .strip_prefix('[')
                .and_then(|p| p.strip_suffix(']'))
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("{name}: bad prefix in {line:?}"));
            assert_eq!(
                rest,
                format!("{rank}:{}:{payload}", next[rank]),
                "{name}: line of rank {rank} mixed or out of order"
            );
            next[rank] += 1;
        }
        assert_eq!(next, [300; 4], "{name}: every line arrived");
    }
}

#[test]
fn first_failure_stops_the_others_and_sets_the_exit_code() {
    let dir = TempDir::new("fail");
    let d = dir.path();
    // Rank 1 fails once the others are up. Rank 0 is the sleeping process itself; rank 2 is a
    // shell with a child, which must stop too.
    let script = format!(
        "case $NVSH_RANK in \
           0) {p0}; exec sleep 300;; \
           1) {wait}; echo failing; exit 3;; \
           2) sleep 300 & echo $! > {d}/bg.tmp && mv {d}/bg.tmp {d}/bg; {p2}; wait;; \
         esac",
        p0 = write_pid(d, "0"),
        p2 = write_pid(d, "2"),
        wait = wait_for_files(d, &["0", "2", "bg"]),
    );
    let done = finish(
        nvsh_run(&["-n", "3", "--", "sh", "-c", &script]),
        Duration::from_secs(120),
    );
    assert_eq!(done.code, Some(3), "stderr:\n{}", done.stderr);
    assert_eq!(done.rank_stdout(1), ["failing"]);
    assert!(
        done.stderr
            .contains("nvsh run: rank 1 exited with code 3; stopping the other 2 process(es)"),
        "stderr:\n{}",
        done.stderr
    );
    for rank in ["0", "2"] {
        let pid = dir.pid(rank);
        assert!(
            is_gone(pid),
            "rank {rank} (pid {pid}) still exists: {:?}",
            proc_state(pid)
        );
    }
    // The background sleep is not the launcher's child: once stopped, init reaps it, or it
    // stays a zombie where init does not reap.
    let bg = dir.pid("bg");
    let deadline = Instant::now() + Duration::from_secs(3);
    while !matches!(proc_state(bg), None | Some('Z')) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        matches!(proc_state(bg), None | Some('Z')),
        "rank 2's child is still running"
    );
}

#[test]
fn a_rank_killed_by_a_signal_gives_128_plus_the_signal() {
    let script = "if [ $NVSH_RANK = 0 ]; then kill -9 $$; fi; exec sleep 300";
    let done = finish(
        nvsh_run(&["-n", "2", "--", "sh", "-c", script]),
        Duration::from_secs(120),
    );
    assert_eq!(done.code, Some(137), "stderr:\n{}", done.stderr);
    assert!(
        done.stderr.contains(
            "nvsh run: rank 0 was killed by signal 9 (SIGKILL); stopping the other 1 process(es)"
        ),
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn ranks_that_ignore_sigterm_are_killed_after_the_grace_period() {
    let dir = TempDir::new("grace");
    let d = dir.path();
    let script = format!(
        "if [ $NVSH_RANK = 0 ]; then trap '' TERM; {p0}; while :; do sleep 0.1; done; \
         else {wait}; exit 4; fi",
        p0 = write_pid(d, "0"),
        wait = wait_for_files(d, &["0"]),
    );
    let done = finish(
        nvsh_run(&["-n", "2", "--grace-secs", "0.5", "--", "sh", "-c", &script]),
        Duration::from_secs(120),
    );
    assert_eq!(
        done.code,
        Some(4),
        "the first failure decides: {}",
        done.stderr
    );
    // The grace period was honoured (rank 0 loops forever: finish()'s limit catches a launcher
    // that never kills it).
    assert!(
        done.elapsed >= Duration::from_millis(500),
        "took {:?}",
        done.elapsed
    );
    assert!(
        done.stderr
            .contains("rank(s) 0 still running 0.5 s after the stop signal; killed (SIGKILL)"),
        "stderr:\n{}",
        done.stderr
    );
    assert!(is_gone(dir.pid("0")));
}

/// Starts two ranks that report `ready` and then wait for `signal`, sends it to the launcher
/// (a second time when `twice`), and returns what the launcher did.
fn signal_the_launcher(signal: i32, trap: &str, twice: bool) -> Finished {
    let handler = if twice {
        // Ignore the first signal, so that only the second one (SIGKILL) ends the rank.
        "trap 'echo got-it' ".to_string() + trap
    } else {
        format!("trap 'echo got-it; exit 0' {trap}")
    };
    let script = format!("{handler}; echo ready; while :; do sleep 0.1; done");
    let start = Instant::now();
    let mut child = nvsh_run(&["-n", "2", "--grace-secs", "300", "--", "sh", "-c", &script])
        .spawn()
        .expect("start nvsh");
    let err = collect(child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(lines.contains(&"[0] ready".to_string()) && lines.contains(&"[1] ready".to_string())) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ranks did not start: {lines:?}");
            }
        }
    }
    let pid = child.id() as i32;
    // SAFETY: the launcher is our child and not yet waited for.
    unsafe { libc::kill(pid, signal) };
    if twice {
        // Let the first signal arrive and be forwarded before the second.
        while lines.iter().filter(|l| l.ends_with("got-it")).count() < 2 {
            match rx.recv_timeout(Duration::from_secs(120)) {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        // SAFETY: as above.
        unsafe { libc::kill(pid, signal) };
    }
    // Far below the 300 s grace period: a second signal that waited for it fails here.
    let status = wait_with_limit(&mut child, Duration::from_secs(120));
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    Finished {
        code: status.code(),
        signal: status.signal(),
        stdout: lines.join("\n"),
        stderr: err.join().unwrap(),
        elapsed: start.elapsed(),
    }
}

fn assert_forwarded(signal: i32, trap: &str, name: &str) {
    let done = signal_the_launcher(signal, trap, false);
    for rank in 0..2 {
        assert_eq!(
            done.rank_stdout(rank),
            ["ready", "got-it"],
            "rank {rank} got {name}; stdout:\n{}",
            done.stdout
        );
    }
    // Killed by the same signal, as the shell expects of an interrupted command: a loop over
    // `nvsh run` stops at Ctrl-C instead of going on with the next job.
    assert_eq!(
        (done.code, done.signal),
        (None, Some(signal)),
        "stderr:\n{}",
        done.stderr
    );
    assert!(
        done.stderr
            .contains(&format!("received {name}; forwarded it to 2 process(es)")),
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn sigterm_to_the_launcher_reaches_every_rank() {
    assert_forwarded(libc::SIGTERM, "TERM", "SIGTERM");
}

#[test]
fn sigint_to_the_launcher_reaches_every_rank() {
    assert_forwarded(libc::SIGINT, "INT", "SIGINT");
}

#[test]
fn sighup_to_the_launcher_reaches_every_rank() {
    assert_forwarded(libc::SIGHUP, "HUP", "SIGHUP");
}

#[test]
fn sigquit_to_the_launcher_reaches_every_rank() {
    // SIGQUIT is forwarded like the others, but the launcher exits 128 + 3 instead of dumping
    // its own core.
    let done = signal_the_launcher(libc::SIGQUIT, "QUIT", false);
    for rank in 0..2 {
        assert_eq!(
            done.rank_stdout(rank),
            ["ready", "got-it"],
            "{}",
            done.stdout
        );
    }
    assert_eq!(
        done.code,
        Some(128 + libc::SIGQUIT),
        "stderr:\n{}",
        done.stderr
    );
    assert!(
        done.stderr
            .contains("received SIGQUIT; forwarded it to 2 process(es)"),
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn a_second_signal_kills_without_waiting_for_the_grace_period() {
    // The ranks survive the first SIGTERM; the grace period is 300 s, and the launcher must
    // end within signal_the_launcher's limit, far below it.
    let done = signal_the_launcher(libc::SIGTERM, "TERM", true);
    assert_eq!(done.signal, Some(libc::SIGTERM), "{}", done.stderr);
    assert!(
        done.stderr
            .contains("received SIGTERM while stopping; killed rank(s) 0, 1 (SIGKILL)"),
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn gpus_sets_cuda_visible_devices_for_every_rank() {
    let mut cmd = nvsh_run(&[
        "-n",
        "3",
        "--gpus",
        "0,1",
        "--",
        "sh",
        "-c",
        "echo cvd=$CUDA_VISIBLE_DEVICES",
    ]);
    cmd.env_remove("CUDA_VISIBLE_DEVICES");
    let done = finish(cmd, Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    for rank in 0..3 {
        assert_eq!(done.rank_stdout(rank), ["cvd=0,1"]);
    }
    assert!(
        done.stderr.contains("3 processes on 2 GPU(s)"),
        "a note when PEs share GPUs; stderr:\n{}",
        done.stderr
    );

    let mut one_each = nvsh_run(&[
        "-n",
        "2",
        "--gpus",
        "3, 1",
        "--",
        "sh",
        "-c",
        "echo $CUDA_VISIBLE_DEVICES",
    ]);
    one_each.env_remove("CUDA_VISIBLE_DEVICES");
    let one_each = finish(one_each, Duration::from_secs(20));
    assert_eq!(one_each.code, Some(0), "{}", one_each.stderr);
    assert_eq!(one_each.rank_stdout(1), ["3,1"]);
    assert_eq!(one_each.stderr, "", "no note when every PE has a GPU");
}

#[test]
fn launcher_environment_reaches_every_rank() {
    let mut cmd = nvsh_run(&[
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "echo $NVSH_TEST_PASSTHROUGH $NVSHMEM_DISABLE_NVLS ${CUDA_VISIBLE_DEVICES-unset}",
    ]);
    cmd.env("NVSH_TEST_PASSTHROUGH", "hello")
        .env("NVSHMEM_DISABLE_NVLS", "1")
        .env("CUDA_VISIBLE_DEVICES", "5");
    let done = finish(cmd, Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    for rank in 0..2 {
        assert_eq!(
            done.rank_stdout(rank),
            ["hello 1 5"],
            "without --gpus CUDA_VISIBLE_DEVICES passes through too"
        );
    }
}

/// Runs `nvsh run ARGS -- sh -c 'touch DIR/started'` and checks that it failed before starting
/// anything, with a one-line message containing every string in `expect`.
fn assert_rejected(args: &[&str], expect: &[&str]) {
    assert_rejected_with_env(args, &[], expect)
}

/// [`assert_rejected`] with these variables set for the launcher.
fn assert_rejected_with_env(args: &[&str], env: &[(&str, &str)], expect: &[&str]) {
    let dir = TempDir::new("reject");
    let touch = format!("touch {}/started", dir.path());
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--", "sh", "-c", &touch]);
    let mut cmd = nvsh_run(&all);
    cmd.envs(env.iter().copied());
    let done = finish(cmd, Duration::from_secs(20));
    assert_eq!(done.code, Some(2), "{args:?}: stderr:\n{}", done.stderr);
    assert!(
        !dir.0.join("started").exists(),
        "{args:?}: nothing may start"
    );
    assert_eq!(done.stdout, "");
    for s in expect {
        assert!(
            done.stderr.contains(s),
            "{args:?}: expected {s:?} in stderr:\n{}",
            done.stderr
        );
    }
}

#[test]
fn bad_gpu_lists_are_rejected_before_launch() {
    assert_rejected(
        &["-n", "2", "--gpus", "a,b"],
        &["nvsh run: error: --gpus \"a,b\" is not valid", "`a`"],
    );
    assert_rejected(&["-n", "2", "--gpus", "0,,1"], &["empty entry"]);
    assert_rejected(&["-n", "2", "--gpus=-1"], &["`-1` is not a GPU index"]);
    assert_rejected(&["-n", "2", "--gpus", "0,0"], &["GPU 0 is listed twice"]);
    assert_rejected(&["-n", "2", "--gpus", ""], &["the list is empty"]);
}

#[test]
fn zero_processes_is_an_error() {
    assert_rejected(&["-n", "0"], &["at least 1"]);
}

#[test]
fn a_missing_program_is_named_with_a_hint() {
    let done = finish(
        nvsh_run(&["-n", "2", "--", "nvsh-no-such-program", "arg"]),
        Duration::from_secs(20),
    );
    assert_eq!(done.code, Some(2));
    assert_eq!(
        done.stderr.trim_end(),
        "nvsh run: error: program `nvsh-no-such-program` not found in any directory on PATH; \
         check its name and PATH, or give its path (e.g. ./nvsh-no-such-program)"
    );

    let by_path = finish(
        nvsh_run(&["-n", "1", "--", "./no/such/program"]),
        Duration::from_secs(20),
    );
    assert_eq!(by_path.code, Some(2));
    assert!(
        by_path.stderr.contains("`./no/such/program` not found"),
        "{}",
        by_path.stderr
    );
}

#[test]
fn library_reports_the_first_failure_and_waits_for_every_rank() {
    let dir = TempDir::new("lib");
    let d = dir.path();
    let script = format!(
        "if [ $NVSH_RANK = 1 ]; then {wait}; exit 3; fi; \
         echo $$ > {d}/$NVSH_RANK.tmp && mv {d}/$NVSH_RANK.tmp {d}/$NVSH_RANK; exec sleep 300",
        wait = wait_for_files(d, &["0", "2"]),
    );
    let spec = LaunchSpec {
        grace: Duration::from_secs(2),
        forward_signals: false,
        ..LaunchSpec::new(3, "sh").args(["-c", &script])
    };
    // No time bound: the statuses below show ranks 0 and 2 stopped by SIGTERM, not ended.
    let outcome = launcher::launch(&spec).expect("launch");
    assert_eq!(outcome.exit_code, 3);
    assert_eq!(outcome.failed_rank(), Some(1));
    assert_eq!(
        outcome.stop,
        Some(Stop::Failed {
            rank: 1,
            status: RankStatus::Exited(3)
        })
    );
    let terminated = RankStatus::Signaled {
        signal: libc::SIGTERM,
        core_dumped: false,
    };
    assert_eq!(
        outcome.statuses,
        [terminated, RankStatus::Exited(3), terminated]
    );
    // These are this process's children: a zombie here means launch() did not wait for it.
    for rank in ["0", "2"] {
        let pid = dir.pid(rank);
        assert_eq!(
            proc_state(pid),
            None,
            "rank {rank} (pid {pid}) was not reaped"
        );
    }
}

#[test]
fn library_success_and_spec_errors() {
    let ok = launcher::launch(&LaunchSpec {
        forward_signals: false,
        ..LaunchSpec::new(2, "true")
    })
    .expect("launch");
    assert_eq!(ok.exit_code, 0);
    assert_eq!(ok.stop, None);
    assert_eq!(ok.statuses, [RankStatus::Exited(0); 2]);

    let err = launcher::launch(&LaunchSpec::new(0, "true")).unwrap_err();
    assert!(matches!(err, LaunchError::NoProcesses), "{err:?}");
    let err = launcher::launch(&LaunchSpec {
        gpus: Some(vec![]),
        ..LaunchSpec::new(1, "true")
    })
    .unwrap_err();
    assert!(matches!(err, LaunchError::InvalidGpus { .. }), "{err:?}");
    let missing = "nvsh-no-such-program";
    let err = launcher::launch(&LaunchSpec::new(1, missing)).unwrap_err();
    assert!(
        matches!(&err, LaunchError::ProgramNotFound { program } if program == missing),
        "{err:?}"
    );
}

#[test]
fn on_failure_wait_lets_the_others_end_on_their_own_then_kills_stragglers() {
    // Rank 1 fails at once; rank 0 ends by itself 1 s later (as a PE whose waits time out
    // would), rank 2 never ends and is killed when the wait runs out.
    let dir = TempDir::new("wait");
    let d = dir.path();
    let script = format!(
        "echo $$ > {d}/$NVSH_RANK.tmp && mv {d}/$NVSH_RANK.tmp {d}/$NVSH_RANK; \
         if [ $NVSH_RANK = 1 ]; then exit 3; fi; \
         if [ $NVSH_RANK = 0 ]; then sleep 1; echo survivor-ended; exit 4; fi; exec sleep 300"
    );
    let spec = LaunchSpec {
        grace: Duration::from_secs(1),
        forward_signals: false,
        on_failure: OnFailure::Wait(Duration::from_secs(3)),
        ..LaunchSpec::new(3, "sh").args(["-c", &script])
    };
    let start = Instant::now();
    let outcome = launcher::launch(&spec).expect("launch");
    let took = start.elapsed();
    // The wait was honoured; that it ran out (rather than rank 2 ending) shows in rank 2's
    // SIGKILL status below, not in time.
    assert!(took >= Duration::from_secs(3), "{took:?}");
    assert_eq!(outcome.exit_code, 3);
    assert_eq!(outcome.failed_rank(), Some(1));
    let killed = RankStatus::Signaled {
        signal: libc::SIGKILL,
        core_dumped: false,
    };
    assert_eq!(
        outcome.statuses,
        [RankStatus::Exited(4), RankStatus::Exited(3), killed]
    );
    for rank in ["0", "1", "2"] {
        let pid = dir.pid(rank);
        assert_eq!(
            proc_state(pid),
            None,
            "rank {rank} (pid {pid}) was not reaped"
        );
    }
}

#[test]
fn the_launcher_sets_its_own_bootstrap_over_a_leftover_one() {
    // A leftover NVSH_BOOTSTRAP=single would make each rank a separate 1-PE job on GPU 0.
    let mut cmd = nvsh_run(&["-n", "2", "--", "sh", "-c", "echo $NVSH_BOOTSTRAP"]);
    cmd.env("NVSH_BOOTSTRAP", "single");
    let done = finish(cmd, Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    for rank in 0..2 {
        assert_eq!(done.rank_stdout(rank), ["launcher"]);
    }
}

#[test]
fn gpus_index_into_an_inherited_cuda_visible_devices() {
    // Slurm or a colleague gave this job GPUs 4 and 5: --gpus 0 means the first of those.
    let mut cmd = nvsh_run(&[
        "-n",
        "2",
        "--gpus",
        "1,0",
        "--",
        "sh",
        "-c",
        "echo $CUDA_VISIBLE_DEVICES",
    ]);
    cmd.env("CUDA_VISIBLE_DEVICES", "4,GPU-5e0c");
    let done = finish(cmd, Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    assert_eq!(done.rank_stdout(0), ["GPU-5e0c,4"]);
    assert_eq!(done.rank_stdout(1), ["GPU-5e0c,4"]);

    assert_rejected_with_env(
        &["-n", "1", "--gpus", "0,2"],
        &[("CUDA_VISIBLE_DEVICES", "4,5")],
        &[
            "--gpus 0,2",
            "GPU 2",
            "CUDA_VISIBLE_DEVICES=4,5",
            "2 GPU(s)",
        ],
    );
    assert_rejected_with_env(
        &["-n", "1", "--gpus", "0"],
        &[("CUDA_VISIBLE_DEVICES", "")],
        &["CUDA_VISIBLE_DEVICES=", "no GPU"],
    );
}

#[test]
fn nvsh_run_inside_a_multi_process_srun_or_mpirun_step_is_refused() {
    // `srun -N2 nvsh run -n 4` would make two unrelated 4-PE jobs.
    assert_rejected_with_env(
        &["-n", "4"],
        &[("SLURM_STEP_NUM_TASKS", "2"), ("SLURM_PROCID", "1")],
        &["srun", "2 processes", "SLURM_STEP_NUM_TASKS=2", "srun -n 1"],
    );
    assert_rejected_with_env(
        &["-n", "2"],
        &[("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "0")],
        &["mpirun (Open MPI)"],
    );
    // One task (`srun -n 1 nvsh run -n 2`), or only an sbatch script's variables: fine.
    for env in [
        [("SLURM_STEP_NUM_TASKS", "1"), ("SLURM_PROCID", "0")],
        [("SLURM_NTASKS", "8"), ("SLURM_PROCID", "0")],
    ] {
        let mut cmd = nvsh_run(&["-n", "2", "--", "true"]);
        cmd.envs(env);
        let done = finish(cmd, Duration::from_secs(20));
        assert_eq!(done.code, Some(0), "{env:?}: {}", done.stderr);
    }
}

/// Waits (up to about 5 s) until the process is gone or a zombie.
fn ends_soon(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if matches!(proc_state(pid), None | Some('Z')) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigkill_to_the_launcher_leaves_no_wrapped_pe_running() {
    // Each PE runs under a wrapper that does not exec (as compute-sanitizer, nsys or a script
    // do): the PE is the launcher's grandchild, which PR_SET_PDEATHSIG does not cover.
    let dir = TempDir::new("sigkill");
    let d = dir.path();
    let pe = format!("{}; exec sleep 30", write_pid(d, "pe$NVSH_RANK"));
    let wrapper = format!("sh -c '{pe}'; echo wrapper-done");
    let mut child = nvsh_run(&["-n", "2", "--", "sh", "-c", &wrapper])
        .spawn()
        .expect("start nvsh");
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(dir.0.join("pe0").exists() && dir.0.join("pe1").exists()) {
        assert!(Instant::now() < deadline, "the PEs did not start");
        thread::sleep(Duration::from_millis(20));
    }
    let pes = [dir.pid("pe0"), dir.pid("pe1")];
    child.kill().unwrap();
    child.wait().unwrap();
    let survivors: Vec<i32> = pes.into_iter().filter(|&p| !ends_soon(p)).collect();
    for &pid in &survivors {
        // SAFETY: clean up after a failed check; the pid was a PE of this test.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        survivors.is_empty(),
        "PEs {survivors:?} outlived the SIGKILLed launcher"
    );
    let (_, _) = (out.join().unwrap(), err.join().unwrap());
}

#[test]
fn helpers_of_a_rank_that_failed_are_stopped_with_it() {
    // The rank crashes, leaving a helper in its process group and a daemon that left the group
    // (setsid): neither may outlive the job.
    let dir = TempDir::new("helpers");
    let d = dir.path();
    let script = format!(
        "sleep 30 >/dev/null 2>&1 & echo $! > {d}/helper; \
         setsid sh -c '{daemon}; exec sleep 30' >/dev/null 2>&1 </dev/null & \
         {wait}; kill -9 $$",
        daemon = write_pid(d, "daemon"),
        wait = wait_for_files(d, &["helper", "daemon"]),
    );
    let done = finish(
        nvsh_run(&["-n", "1", "--", "sh", "-c", &script]),
        Duration::from_secs(20),
    );
    assert_eq!(done.code, Some(137), "{}", done.stderr);
    let (helper, daemon) = (dir.pid("helper"), dir.pid("daemon"));
    let helper_ended = ends_soon(helper);
    let daemon_ended = ends_soon(daemon);
    for pid in [helper, daemon] {
        // SAFETY: clean up after a failed check; the pids were started by this test's rank.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        helper_ended,
        "the failed rank's helper (pid {helper}) is still running"
    );
    assert!(
        daemon_ended,
        "the failed rank's daemon (pid {daemon}) is still running"
    );
}

#[test]
fn output_is_not_lost_when_the_launchers_stdout_is_slow() {
    // Each rank writes less than a pipe holds and exits at once; the launcher's stdout is a
    // pipe that nobody reads for 3 s (`| less`, a stalled tee), so forwarding blocks on writing
    // well past any drain deadline.
    let line = "y".repeat(99);
    let script = format!("i=0; while [ $i -lt 400 ]; do echo {line}; i=$((i+1)); done");
    let mut cmd = nvsh_run(&["-n", "4", "--", "sh", "-c", &script]);
    let mut child = cmd.spawn().expect("start nvsh");
    let err = collect(child.stderr.take().unwrap());
    let stdout = child.stdout.take().unwrap();
    thread::sleep(Duration::from_secs(3));
    let out = collect(stdout);
    let status = wait_with_limit(&mut child, Duration::from_secs(20));
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    assert_eq!(status.code(), Some(0), "{stderr}");
    for rank in 0..4 {
        let prefix = format!("[{rank}] ");
        let n = stdout.lines().filter(|l| l.starts_with(&prefix)).count();
        assert_eq!(n, 400, "rank {rank}: lines lost; stderr:\n{stderr}");
    }
}

/// The soak example, built with the `mpi` feature (`nvsh` is not): `NVSH_SOAK_BIN`, else beside
/// this test executable (scripts/build_gpu_bins.sh's layout), else cargo's examples folder.
fn soak_example_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("NVSH_SOAK_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current exe");
    let beside = exe.with_file_name("soak");
    if beside.exists() {
        return beside;
    }
    // target/<profile>/deps/<test> -> target/<profile>/examples/soak
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples").join("soak"))
        .unwrap_or(beside)
}

/// `mpirun -n 2` of the soak example (2 s) with `rank1_env` (shell code) run first on rank 1,
/// run to its end (limit 120 s: a hang fails the test instead of stalling the suite).
fn mpirun_soak_with_rank1(rank1_env: &str) -> Finished {
    let soak = soak_example_path();
    let script = format!(
        "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then {rank1_env}; fi; exec {} 2",
        soak.display()
    );
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "-n", "2", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    finish(cmd, Duration::from_secs(120))
}

#[test]
#[ignore = "GPU machine: needs a GPU, Open MPI's mpirun on PATH and the soak example (built with the mpi feature)"]
fn gpu_mpi_a_rank_failing_after_the_id_exchange_aborts_the_job_instead_of_hanging() {
    // Rank 1 fails right after the ready agreement (fault injection) while rank 0 waits in
    // NVSHMEM's bootstrap, which has no timeout: rank 1 must MPI_Abort, not MPI_Finalize.
    let done = mpirun_soak_with_rank1("export NVSH_FAULT_AFTER_READY=1");
    assert_ne!(done.code, Some(0), "{}", done.stderr);
    assert!(
        done.stderr.contains("aborting the MPI job (MPI_Abort)")
            && done.stderr.contains("NVSH_FAULT_AFTER_READY")
            && done.stderr.contains("MPI_ABORT was invoked on rank 1"),
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
#[ignore = "GPU machine: needs a GPU, Open MPI's mpirun on PATH and the soak example (built with the mpi feature)"]
fn gpu_mpi_a_rank_whose_nvshmem_init_fails_ends_the_job() {
    // A heap no GPU holds (allocated whole at init without VMM): NVSHMEM's init fails on rank 1
    // and NVSHMEM exits the process itself; the job must end, not hang.
    let done =
        mpirun_soak_with_rank1("export NVSHMEM_DISABLE_CUDA_VMM=1 NVSHMEM_SYMMETRIC_SIZE=100T");
    assert_ne!(done.code, Some(0), "{}", done.stderr);
    assert!(
        done.stderr.contains("nvshmem initialization failed"),
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
#[ignore = "GPU machine: needs 2 GPUs (the PEs initialise NVSHMEM under compute-sanitizer)"]
fn gpu_sigkill_to_the_launcher_leaves_no_pe_under_compute_sanitizer() {
    let dir = TempDir::new("gpu-sigkill");
    let d = dir.path();
    // The PE (nvsh soak) runs under compute-sanitizer, which does not exec it.
    let script = format!(
        "echo $$ > {d}/w$NVSH_RANK; exec compute-sanitizer --tool memcheck {} soak --seconds 600",
        nvsh_path().display()
    );
    let mut child = nvsh_run(&["-n", "2", "--", "sh", "-c", &script])
        .spawn()
        .expect("start nvsh");
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    // Let the PEs get to their GPUs.
    thread::sleep(Duration::from_secs(20));
    let wrappers = [dir.pid("w0"), dir.pid("w1")];
    let pes: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let pgid = stat
                .rsplit_once(')')
                .map(|(_, r)| r)
                .unwrap_or("")
                .split(' ')
                .nth(3);
            wrappers.iter().any(|w| pgid == Some(&w.to_string()))
        })
        .collect();
    assert!(pes.len() > 2, "the sanitized PEs did not start: {pes:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    let survivors: Vec<i32> = pes.into_iter().filter(|&p| !ends_soon(p)).collect();
    for &pid in &survivors {
        // SAFETY: clean up after a failed check; the pid was in a PE's group.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        survivors.is_empty(),
        "{survivors:?} outlived the SIGKILLed launcher"
    );
    let (_, _) = (out.join().unwrap(), err.join().unwrap());
}
