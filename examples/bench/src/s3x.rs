//! S3x: S3 across OS processes. The bench re-executes its own binary twice with the hidden
//! `--s3x-child` argument; each child connects one column of its own, runs `S3X_TASKS` tasks
//! on one key with S3's 200 µs hold, and reports its per-task acquisitions on stdout. Both
//! children connect and warm up first, then start on the same "go" line from the parent, so
//! they contend for the same stretch of time.
//!
//! Occupancy is counted across both processes: the parent creates a small file, each child
//! maps it shared (`mmap`, `MAP_SHARED`) and counts its tasks in and out of the critical
//! section on the same [`Occupancy`] there, and the parent reads the most ever seen inside
//! at once back from the file.
//!
//! The protocol on the child's stdin/stdout, one line each:
//! child → `ready`, parent → `go`, child → the JSON of [`ChildReport`]. An error is the child's
//! exit status and its stderr.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::columns::Kind;
use crate::contended::{self, Occupancy};
use crate::scenarios::{Metrics, S3X_PROCESSES, S3X_TASKS, S3_HOLD};

/// The hidden first argument that turns the binary into an S3x child.
pub const CHILD_FLAG: &str = "--s3x-child";

/// Cycles on a key of the child's own before `ready`: connections opened, scripts loaded.
const WARMUP_CYCLES: usize = 20;

/// What one child process saw.
#[derive(serde::Serialize, serde::Deserialize)]
struct ChildReport {
    per_task: Vec<u64>,
    elapsed_s: f64,
}

/// The child: `--s3x-child <column> <redis url> <key> <duration ms> <occupancy file>`.
pub fn child(args: &[String]) -> ExitCode {
    match run_child(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run_child(args: &[String]) -> Result<(), String> {
    let [kind, url, key, duration_ms, occupancy] = args else {
        return Err(format!(
            "usage: bench {CHILD_FLAG} <column> <redis url> <key> <duration ms> <occupancy file>"
        ));
    };
    let shared = map_shared(occupancy)?;
    let kind = Kind::from_name(kind).ok_or_else(|| format!("unknown column `{kind}`"))?;
    let duration = Duration::from_millis(
        duration_ms
            .parse()
            .map_err(|e| format!("duration `{duration_ms}`: {e}"))?,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let report = runtime.block_on(async {
        let column = kind.connect(std::slice::from_ref(url)).await?;
        let warmup = format!("{key}:warmup:{}", std::process::id());
        for _ in 0..WARMUP_CYCLES {
            column
                .acquire(&warmup, Duration::from_secs(10))
                .await?
                .release()
                .await?;
        }
        println!("ready");
        // The parent's "go"; end of input means it gave up.
        let mut go = String::new();
        let read = tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut go))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("stdin: {e}"))?;
        if read == 0 {
            return Err("the parent closed stdin before `go`".to_owned());
        }
        let run = contended::contended(
            &column,
            key,
            S3X_TASKS,
            S3_HOLD,
            Instant::now() + duration,
            Some(shared),
        )
        .await?;
        Ok::<_, String>(ChildReport {
            per_task: run.per_task,
            elapsed_s: run.elapsed.as_secs_f64(),
        })
    })?;
    let line = serde_json::to_string(&report).map_err(|e| e.to_string())?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("stdout: {e}"))
}

/// The [`Occupancy`] in `path`, mapped shared for the rest of the process's life.
pub fn map_shared(path: &str) -> Result<&'static Occupancy, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("{path}: {e}"))?;
    let len = std::mem::size_of::<Occupancy>();
    if file.metadata().map_err(|e| e.to_string())?.len() < len as u64 {
        return Err(format!("{path}: shorter than {len} bytes"));
    }
    // SAFETY: a fresh shared mapping of a file at least `len` bytes long; it is never
    // unmapped, so the reference lives as long as the process. The mapping is page-aligned,
    // and `Occupancy` is two `AtomicUsize`s (`repr(C)`), valid for any bytes; the other
    // process touches them only through atomics too.
    unsafe {
        let ptr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        );
        if ptr == libc::MAP_FAILED {
            return Err(format!("mmap {path}: {}", std::io::Error::last_os_error()));
        }
        Ok(&*(ptr as *const Occupancy))
    }
}

/// The parent's side of one S3x run of `kind` on `url`: both children started, both ready,
/// both told to go at once, both reports combined. Blocking: run it on a blocking thread.
pub fn run(kind: Kind, url: &str, key: &str, duration: Duration) -> Result<Metrics, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let occupancy = std::env::temp_dir().join(format!(
        "distlock-bench-{}-{}",
        std::process::id(),
        key.replace(':', "-")
    ));
    std::fs::write(&occupancy, [0u8; std::mem::size_of::<Occupancy>()])
        .map_err(|e| format!("{}: {e}", occupancy.display()))?;
    let result = run_children(&exe, kind, url, key, duration, &occupancy);
    let _ = std::fs::remove_file(&occupancy);
    result
}

fn run_children(
    exe: &std::path::Path,
    kind: Kind,
    url: &str,
    key: &str,
    duration: Duration,
    occupancy: &std::path::Path,
) -> Result<Metrics, String> {
    let mut children = Vec::with_capacity(S3X_PROCESSES);
    for _ in 0..S3X_PROCESSES {
        let child = Command::new(exe)
            .arg(CHILD_FLAG)
            .arg(kind.name())
            .arg(url)
            .arg(key)
            .arg(duration.as_millis().to_string())
            .arg(occupancy)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", exe.display()))?;
        children.push(child);
    }
    // From here on every child is waited for, whatever fails, so none outlives the run.
    let outcome = drive(&mut children);
    let mut failures = Vec::new();
    for mut child in children {
        // Dropping stdin tells a child still waiting for "go" to give up.
        drop(child.stdin.take());
        match child.wait_with_output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => failures.push(format!(
                "child {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => failures.push(format!("child: {e}")),
        }
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    // The children are gone: the file holds the last word of both.
    let counters = std::fs::read(occupancy).map_err(|e| format!("{}: {e}", occupancy.display()))?;
    let word = std::mem::size_of::<usize>();
    let max_inside = counters
        .get(word..2 * word)
        .and_then(|b| b.try_into().ok())
        .map(usize::from_ne_bytes)
        .ok_or("occupancy file too short")?;
    combine(&outcome?, max_inside)
}

fn drive(children: &mut [std::process::Child]) -> Result<Vec<ChildReport>, String> {
    let mut lines = Vec::with_capacity(children.len());
    for child in children.iter_mut() {
        let stdout = child.stdout.take().ok_or("child stdout")?;
        let mut reader = BufReader::new(stdout);
        let mut ready = String::new();
        reader
            .read_line(&mut ready)
            .map_err(|e| format!("child stdout: {e}"))?;
        if ready.trim() != "ready" {
            return Err(format!("child not ready: `{}`", ready.trim()));
        }
        lines.push(reader);
    }
    // Both are connected and warm: go, back to back.
    for child in children.iter_mut() {
        let stdin = child.stdin.as_mut().ok_or("child stdin")?;
        stdin
            .write_all(b"go\n")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("child stdin: {e}"))?;
    }
    let mut reports = Vec::with_capacity(children.len());
    for mut reader in lines {
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .map_err(|e| format!("child stdout: {e}"))?;
        reports.push(
            serde_json::from_str::<ChildReport>(&line)
                .map_err(|e| format!("child report `{}`: {e}", line.trim()))?,
        );
    }
    Ok(reports)
}

fn combine(reports: &[ChildReport], max_inside: usize) -> Result<Metrics, String> {
    let per_process: Vec<u64> = reports.iter().map(|r| r.per_task.iter().sum()).collect();
    let per_task: Vec<u64> = reports.iter().flat_map(|r| r.per_task.clone()).collect();
    let total: u64 = per_process.iter().sum();
    if total == 0 {
        return Err("no acquisitions".to_owned());
    }
    let elapsed = reports.iter().map(|r| r.elapsed_s).fold(0.0, f64::max);
    let ratio = |v: &[u64]| {
        let (min, max) = (v.iter().min().copied(), v.iter().max().copied());
        min.unwrap_or(0) as f64 / max.unwrap_or(0).max(1) as f64
    };
    Ok(Metrics::from([
        ("acq_per_s", total as f64 / elapsed),
        ("process_fairness", ratio(&per_process)),
        ("fairness", ratio(&per_task)),
        ("max_occupancy", max_inside as f64),
    ]))
}
