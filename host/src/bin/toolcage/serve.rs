//! `toolcage serve`: flags → an [`McpServer`] on stdio or HTTP, stopped
//! gracefully by SIGTERM or SIGINT (and, on stdio, by the end of stdin):
//! calls in flight finish and their results go out first. With `--watch`
//! the tools directories are watched; SIGHUP re-reads the config file (its
//! permissions and secrets apply at once) and reloads the directories.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use tokio::signal::unix::{Signal, SignalKind, signal};
use toolcage::mcp::http::HttpOptions;
use toolcage::mcp::{Listener, McpServer, Shutdown};
use toolcage::telemetry::Telemetry;
use toolcage::{Config, LiveRegistry, ReloadReport, StateBackend, WatchOptions};

use crate::say;

/// The environment variable holding the bearer token, when no file does.
const TOKEN_VARIABLE: &str = "TOOLCAGE_TOKEN";

pub struct Serve {
    /// SIGHUP, from [`hangups`].
    pub hangups: Option<Signal>,
    pub http: Option<String>,
    pub token_file: Option<PathBuf>,
    pub stateless: bool,
    pub max_body_bytes: Option<usize>,
    pub allow_hosts: Vec<String>,
    /// `--header-timeout-ms` and the other limits of HTTP clients.
    pub http_limits: crate::args::HttpLimits,
    pub watch: Option<WatchOptions>,
    /// The file SIGHUP re-reads, if the config came from one.
    pub config_file: Option<PathBuf>,
    /// `--keep-alive-ms`: `None` for the default, `Some(0)` for never.
    pub keep_alive_ms: Option<u64>,
    /// How calls become tasks; `None`: never (`--no-tasks`).
    pub tasks: Option<toolcage::mcp::TaskOptions>,
    /// `--code-mode-only`: `tools/list` shows code mode's tools only.
    pub code_mode_only: bool,
    /// Spans and metrics, when the OTEL_* variables or `--metrics` ask.
    pub telemetry: Option<Telemetry>,
    /// `--metrics`: `/metrics` beside `/mcp`.
    pub metrics: bool,
    /// `--metrics-addr`: `/metrics` on a listener of its own.
    pub metrics_addr: Option<String>,
}

impl Serve {
    pub async fn run(mut self, registry: LiveRegistry, config: Config) -> anyhow::Result<()> {
        let mut server = McpServer::new(registry.clone()).permissions(config.permissions.clone());
        if let Some(ms) = self.keep_alive_ms {
            server = server.keep_alive(Some(std::time::Duration::from_millis(ms)));
        }
        server = server.code_mode_only(self.code_mode_only);
        // Read once: a reload keeps the key and the store, so that the
        // runs paused before it go on after it, and the sessions with them.
        let (store, local) = config.state.store(&config.secrets).await?;
        let shared = local.is_none() && config.state.backend != StateBackend::Memory;
        if let Some(why) = local {
            say(&why);
        }
        let store = match &self.telemetry {
            Some(telemetry) => telemetry.metered_store(store, config.state.backend.name()),
            None => store,
        };
        let tasks = self.tasks.take();
        server = server.tasks(match shared {
            true => tasks.map(|tasks| tasks.shared(store.clone())),
            false => tasks,
        });
        server = server.state(config.state.options(store)?);
        server = server.script_sessions(config.sessions);
        if let Some(telemetry) = &self.telemetry {
            server = server.telemetry(telemetry.clone());
        }
        let _watcher = match self.watch {
            Some(options) => Some(registry.watch(options)?),
            None => None,
        };
        tokio::spawn(announce_changes(registry.clone()));
        if let Some(hangups) = self.hangups.take() {
            let file = self.config_file.clone();
            tokio::spawn(reload_on_hangup(
                hangups,
                server.clone(),
                registry,
                config,
                file,
            ));
        }
        let shutdown = Shutdown::new();
        // Taken over now, before anything says the server is up.
        let stops = (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        );
        tokio::spawn(stop_on_signals(stops, shutdown.clone()));
        if let (Some(addr), Some(telemetry)) = (&self.metrics_addr, &self.telemetry) {
            spawn_metrics_listener(addr, telemetry.clone(), shutdown.clone()).await?;
        }
        let Some(addr) = &self.http else {
            if self.token_file.is_some()
                || self.stateless
                || self.max_body_bytes.is_some()
                || !self.allow_hosts.is_empty()
            {
                bail!(
                    "--token-file, --stateless, --max-body-kib and --allow-host apply to --http only"
                );
            }
            if self.http_limits.any() {
                bail!(
                    "the HTTP limits (--header-timeout-ms, --idle-timeout-ms, --body-timeout-ms, --max-header-kib, --max-connections, --max-unauthenticated-connections, --max-sessions-per-token, --session-idle-ms) apply to --http only"
                );
            }
            return server
                .serve_stdio_until(shutdown)
                .await
                .map_err(|e| anyhow::anyhow!("serving on stdio: {e}"));
        };
        let addr = parse_addr(addr, "--http")?;
        let mut options = HttpOptions::default().stateless(self.stateless);
        if let Some(bytes) = self.max_body_bytes {
            options = options.max_body_bytes(bytes);
        }
        for host in &self.allow_hosts {
            options = options.allow_host(host);
        }
        options = with_limits(options, &self.http_limits)?;
        if let (true, Some(telemetry)) = (self.metrics, &self.telemetry) {
            options = options.metrics(telemetry.clone());
        }
        let tokens = self.tokens()?;
        if tokens.is_empty() && !addr.ip().is_loopback() {
            say(&format!(
                "warning: serving {addr} without a token: anyone who can reach it can call the tools (set --token-file or {TOKEN_VARIABLE})"
            ));
        }
        for token in tokens {
            options = options.token(token);
        }
        let listener = Listener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let bound = listener.local_addr()?;
        say(&format!("serving MCP at http://{bound}/mcp"));
        server.serve_http(listener, &options, shutdown).await?;
        Ok(())
    }

    /// The tokens: `--token-file`'s lines (trimmed; blank lines and `#`
    /// comments skipped), else `$TOOLCAGE_TOKEN` (trimmed); none if
    /// neither is set.
    fn tokens(&self) -> anyhow::Result<Vec<String>> {
        let (text, source) = match &self.token_file {
            Some(file) => (
                std::fs::read_to_string(file)
                    .with_context(|| format!("reading the token file {}", file.display()))?,
                format!("the token file {}", file.display()),
            ),
            None => match std::env::var(TOKEN_VARIABLE) {
                Ok(token) if token.contains('\n') => {
                    bail!("${TOKEN_VARIABLE} holds one token; put several in --token-file")
                }
                Ok(token) => (token, format!("${TOKEN_VARIABLE}")),
                Err(_) => return Ok(Vec::new()),
            },
        };
        let tokens: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(String::from)
            .collect();
        if tokens.is_empty() {
            bail!("the bearer token is empty: {source} holds none");
        }
        Ok(tokens)
    }
}

/// Starts serving `telemetry`'s metrics on `addr` (`--metrics-addr`) until
/// `shutdown`, saying where.
async fn spawn_metrics_listener(
    addr: &str,
    telemetry: Telemetry,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let addr = parse_addr(addr, "--metrics-addr")?;
    let listener = Listener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    say(&format!(
        "serving metrics at http://{}/metrics",
        listener.local_addr()?
    ));
    tokio::spawn(async move {
        if let Err(e) = toolcage::mcp::http::serve_metrics(listener, telemetry, shutdown).await {
            say(&format!("the metrics listener stopped: {e}"));
        }
    });
    Ok(())
}

/// `options` with the limits the flags set: each flag sets the option of
/// the same name, and the options' own check refuses a zero.
fn with_limits(
    mut options: HttpOptions,
    limits: &crate::args::HttpLimits,
) -> anyhow::Result<HttpOptions> {
    use std::time::Duration;
    let ms = Duration::from_millis;
    if let Some(n) = limits.header_timeout_ms {
        options = options.header_read_timeout(ms(n));
    }
    if let Some(n) = limits.idle_timeout_ms {
        options = options.idle_timeout(ms(n));
    }
    if let Some(n) = limits.body_timeout_ms {
        options = options.body_read_timeout(ms(n));
    }
    if let Some(kib) = limits.max_header_kib {
        let bytes = kib
            .checked_mul(1024)
            .and_then(|b| usize::try_from(b).ok())
            .with_context(|| format!("--max-header-kib: {kib} is too large"))?;
        options = options.max_header_bytes(bytes);
    }
    if let Some(n) = limits.max_connections {
        options = options.max_connections(n);
    }
    if let Some(n) = limits.max_unauthenticated_connections {
        options = options.max_unproven_connections(n);
    }
    if let Some(n) = limits.max_sessions_per_token {
        options = options.max_sessions_per_token(n);
    }
    if let Some(ms) = limits.session_idle_ms {
        options = options.session_idle(Duration::from_millis(ms));
    }
    options
        .check()
        .context("the HTTP limits (--header-timeout-ms and the like)")?;
    Ok(options)
}

/// `127.0.0.1:8080`, `[::1]:8080`, or a bare port (on 127.0.0.1).
fn parse_addr(addr: &str, flag: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(port) = addr.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    addr.parse()
        .with_context(|| format!("{flag} `{addr}`: expected HOST:PORT, such as 127.0.0.1:8080"))
}

/// SIGHUP, taken over from its default action (ending the process).
pub fn hangups() -> anyhow::Result<Signal> {
    signal(SignalKind::hangup()).context("cannot handle SIGHUP")
}

/// Says on stderr how the tools changed, after each reload that changed them.
async fn announce_changes(registry: LiveRegistry) {
    use tokio::sync::broadcast::error::RecvError;
    let mut changes = registry.subscribe();
    loop {
        match changes.recv().await {
            Ok(report) => say(&format!("tools reloaded: {}", summary(&report))),
            Err(RecvError::Lagged(missed)) => {
                say(&format!("tools reloaded ({missed} reloads not shown)"))
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// `+new, ~changed, -removed`.
fn summary(report: &ReloadReport) -> String {
    let changes: Vec<String> = report
        .changes
        .iter()
        .map(|change| {
            let sign = match change.kind {
                toolcage::ChangeKind::Added => '+',
                toolcage::ChangeKind::Replaced => '~',
                toolcage::ChangeKind::Removed => '-',
            };
            format!("{sign}{} ({})", change.tool, change.component)
        })
        .collect();
    match changes.is_empty() {
        true => "no change".into(),
        false => changes.join(", "),
    }
}

/// On SIGHUP: re-reads the config file, then reloads the tools directories.
/// A config that does not parse is refused and the previous one keeps
/// serving. The new permissions and secret values apply at once; changed
/// directories, limits, mounts, grants or injections take a restart (the grants of running tools never change
/// under them).
async fn reload_on_hangup(
    mut hangups: Signal,
    server: McpServer,
    registry: LiveRegistry,
    mut config: Config,
    file: Option<PathBuf>,
) {
    while hangups.recv().await.is_some() {
        if let Some(file) = &file {
            match Config::from_file(file) {
                Err(error) => say(&format!(
                    "SIGHUP: config refused, the previous one keeps serving: {error}"
                )),
                Ok(new) => {
                    reread_secrets(&registry, &config, &new);
                    let same_grants = Config {
                        permissions: config.permissions.clone(),
                        secrets: config.secrets.clone(),
                        ..new.clone()
                    } == config;
                    if !same_grants {
                        say(
                            "SIGHUP: the config's tools (directories and references), bundled tools, limits, mounts, grants, [oci] or [trust] changed: they take effect at the next restart",
                        );
                    }
                    server.set_permissions(new.permissions.clone());
                    config.permissions = new.permissions;
                }
            }
        }
        let report = registry.reload().await;
        if !report.changed() {
            say("SIGHUP: tools reloaded: no change");
        }
        for loaded in report.loaded.iter().filter(|r| !r.is_ok()) {
            if let Some(error) = &loaded.error {
                say(&format!("SIGHUP: {} rejected: {error}", loaded.source));
            }
        }
    }
}

/// Replaces the secrets with the values `new` names, read now (a rotated
/// token), unless one cannot be read or one the running injections use is
/// gone: then the previous secrets stay.
fn reread_secrets(registry: &LiveRegistry, running: &Config, new: &Config) {
    if running.secrets.is_empty() && new.secrets.is_empty() {
        return;
    }
    let secrets = match new.read_secrets() {
        Ok(secrets) => secrets,
        Err(error) => {
            return say(&format!(
                "SIGHUP: secrets refused, the previous ones stay: {error}"
            ));
        }
    };
    for (component, settings) in &running.components {
        for injection in &settings.network.inject {
            if let Some(gone) = injection
                .secrets()
                .find(|name| !secrets.iter().any(|s| s.name() == *name))
            {
                return say(&format!(
                    "SIGHUP: secrets refused, the previous ones stay: `{gone}` is used by an injection of component `{component}` (changed injections take effect at the next restart)"
                ));
            }
        }
    }
    let names: Vec<&str> = secrets.iter().map(|s| s.name()).collect();
    say(&format!("SIGHUP: secrets re-read: {}", names.join(", ")));
    registry.current().secrets().replace(secrets);
}

/// Triggers `shutdown` on SIGTERM or SIGINT.
async fn stop_on_signals((mut term, mut int): (Signal, Signal), shutdown: Shutdown) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    shutdown.trigger();
    say("stopping: finishing the calls in flight");
}

#[cfg(test)]
mod tests {
    use super::parse_addr;

    #[test]
    fn addresses() {
        assert_eq!(
            parse_addr("8080", "--http").unwrap().to_string(),
            "127.0.0.1:8080"
        );
        assert_eq!(
            parse_addr("0.0.0.0:9", "--http").unwrap().to_string(),
            "0.0.0.0:9"
        );
        assert!(parse_addr("localhost", "--http").is_err());
    }
}
