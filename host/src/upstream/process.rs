//! Starting a stdio server's process: its command, its environment, its
//! confinement, and where its stderr goes.
//!
//! Threat model: the process runs outside the sandbox, as a child of
//! toolcage, so what it starts with is all toolcage can hold it to. Its
//! environment is **empty** but for the variables the operator names (a
//! secret's value is read at each start, and a secret that is not set is a
//! start-up error naming it, never an empty value). Its command is looked
//! up on toolcage's own `PATH`, since the server's has none unless named.
//! Confined, it runs under `bwrap` (a read-only system, only its mounts, no
//! network unless granted), and a `bwrap` missing refuses the start rather
//! than running the server unconfined. It is killed when its connection is
//! dropped. Its stderr is untrusted text: each line is cut to
//! [`STDERR_LINE_BYTES`] and a start's share of the log to
//! [`STDERR_BYTES`], and the rest is read and dropped, so that a chatty or
//! hostile server can neither flood the log nor block on a full pipe.

use std::path::PathBuf;
use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::error::LinkError;
use super::server::{EnvValue, UpstreamServer};
use crate::sandbox::secrets::Secrets;

/// The most of one stderr line, and of a connection's stderr, that reaches
/// toolcage's log: a chatty or hostile server cannot flood it.
const STDERR_LINE_BYTES: usize = 1024;
const STDERR_BYTES: usize = 64 << 10;

/// A started server's process, and the pipes the session speaks over.
pub(super) struct Spawned {
    pub child: Child,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
}

/// Starts `server`'s command, its stderr copied to the log.
pub(super) fn spawn(server: &UpstreamServer, secrets: &Secrets) -> Result<Spawned, LinkError> {
    let name = server.name();
    let mut child = command(server, secrets)?
        .spawn()
        .map_err(|source| LinkError::Spawn {
            server: name.to_string(),
            command: server.command().to_string(),
            source,
        })?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(LinkError::NoStreams {
            server: name.to_string(),
        });
    };
    tokio::spawn(log_stderr(name.to_string(), stderr));
    Ok(Spawned {
        child,
        stdin,
        stdout,
    })
}

/// The command that starts `server`: an empty environment but for the
/// variables it names, its streams piped, killed with its connection; under
/// `bwrap` when it is confined.
fn command(server: &UpstreamServer, secrets: &Secrets) -> Result<Command, LinkError> {
    let name = server.name();
    let program = which(server.command()).ok_or_else(|| LinkError::NotOnPath {
        server: name.to_string(),
        command: server.command().to_string(),
    })?;
    let mut command = match server.confinement() {
        None => {
            let mut command = Command::new(&program);
            if let Some(dir) = server.directory() {
                command.current_dir(dir);
            }
            command
        }
        Some(bubblewrap) => {
            let bwrap = match bubblewrap.named_program() {
                Some(path) => path.to_path_buf(),
                None => which("bwrap").ok_or_else(|| LinkError::NoBubblewrap {
                    server: name.to_string(),
                })?,
            };
            let mut command = Command::new(bwrap);
            command.args(bubblewrap.arguments());
            if let Some(dir) = server.directory() {
                command.arg("--chdir").arg(dir);
            }
            command.arg("--").arg(&program);
            command
        }
    };
    command
        .args(server.arguments())
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let current = secrets.current();
    for (var, value) in server.environment() {
        let value = match value {
            EnvValue::Text(text) => text.as_str(),
            EnvValue::Secret(secret) => {
                current
                    .get(secret)
                    .map(|s| s.value())
                    .ok_or_else(|| LinkError::EnvSecret {
                        server: name.to_string(),
                        variable: var.clone(),
                        secret: secret.clone(),
                    })?
            }
        };
        command.env(var, value);
    }
    Ok(command)
}

/// `program` as a path: itself when it holds a `/`, else the first match on
/// toolcage's own `PATH` (the server's environment has none unless named).
fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(program.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Copies a server's stderr to the log, each line cut, until the
/// connection's share is spent; the rest is read and dropped, so that the
/// server never blocks on a full pipe, and no line (however long) is held
/// whole.
async fn log_stderr(server: String, mut stderr: impl AsyncRead + Unpin) {
    let mut chunk = [0u8; 4096];
    let mut line = Vec::with_capacity(STDERR_LINE_BYTES);
    let mut logged = 0;
    let mut log = |line: &mut Vec<u8>| {
        if logged < STDERR_BYTES && !line.is_empty() {
            logged += line.len();
            let text = String::from_utf8_lossy(line);
            tracing::info!(server = %server, "{}", text.trim_end());
            if logged >= STDERR_BYTES {
                tracing::warn!(server = %server, "the MCP server's stderr passed {STDERR_BYTES} bytes; the rest is not logged");
            }
        }
        line.clear();
    };
    loop {
        let read = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => return log(&mut line),
            Ok(read) => read,
        };
        for &byte in &chunk[..read] {
            match byte {
                b'\n' => log(&mut line),
                _ if line.len() < STDERR_LINE_BYTES => line.push(byte),
                _ => {}
            }
        }
    }
}
