//! The bench's child processes (S10's holder and waiters, S11's lock-taker): the binary run
//! again with a hidden first argument, spoken to one line at a time on stdin and stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};

/// A child process of this binary, spoken to line by line; killed and reaped when dropped.
pub struct Child {
    process: std::process::Child,
    lines: Option<BufReader<std::process::ChildStdout>>,
}

impl Child {
    pub fn spawn(args: &[&str]) -> Result<Child, String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut process = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", args[0]))?;
        let lines = process.stdout.take().map(BufReader::new);
        Ok(Child { process, lines })
    }

    pub fn say(&mut self, line: &str) -> Result<(), String> {
        let stdin = self.process.stdin.as_mut().ok_or("child stdin")?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("child stdin: {e}"))
    }

    /// The next line, read on a blocking thread.
    pub async fn line(&mut self) -> Result<String, String> {
        let mut reader = self.lines.take().ok_or("child stdout")?;
        let (line, reader) = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            let read = reader.read_line(&mut line);
            (read.map(|n| (n, line)), reader)
        })
        .await
        .map_err(|e| e.to_string())?;
        self.lines = Some(reader);
        match line {
            Ok((0, _)) => Err("the child exited".to_owned()),
            Ok((_, line)) => Ok(line.trim().to_owned()),
            Err(e) => Err(format!("child stdout: {e}")),
        }
    }

    pub async fn expect(&mut self, word: &str) -> Result<(), String> {
        match self.line().await? {
            line if line == word => Ok(()),
            line => Err(format!("child said `{line}`, not `{word}`")),
        }
    }
}

impl Child {
    /// Closes the child's stdin and waits for it to end by itself; its exit status.
    pub fn wait(&mut self) -> Result<(), String> {
        drop(self.process.stdin.take());
        let status = tokio::task::block_in_place(|| self.process.wait())
            .map_err(|e| format!("waiting for the child: {e}"))?;
        match status.success() {
            true => Ok(()),
            false => Err(format!("child {status}")),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Done already unless something failed first.
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The child's side: `body` on a multi-threaded runtime of its own; an error is printed on
/// stderr and is the exit status.
pub fn in_runtime<F, Fut>(body: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let run = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
        .and_then(|runtime| runtime.block_on(body()));
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// A line from the parent; end of input means it gave up.
pub async fn read_stdin_line() -> Result<(), String> {
    let read = tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("stdin: {e}"))?;
    if read == 0 {
        return Err("the parent closed stdin".to_owned());
    }
    Ok(())
}

/// One line to the parent.
pub fn say(line: &str) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("stdout: {e}"))
}
