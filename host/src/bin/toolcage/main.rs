//! The `toolcage` command: flags → configuration → library calls → printing.
//! Everything it does goes through the public `toolcage` API.

mod args;
mod batch;
mod distribution;
mod new;
mod print;
mod serve;

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::Value;
use toolcage::agent::{Permissions, Runner, ToolCall};
use toolcage::telemetry::{EnvSettings, Telemetry};
use toolcage::{
    CONFIG_FILE_NAME, Cidr, Config, FileReport, Grant, LimitOverrides, LiveRegistry, Mount,
    Registry, Runtime, ToolsSource, WatchOptions,
};

use toolcage::upstream::{EnvValue, UpstreamServer};

use args::{Cli, Command, GlobalArgs};

/// Usage, configuration and load errors.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(message) = init_logging(cli.global.log_level.as_deref()) {
        eprintln!("toolcage: --log-level: {message}");
        return ExitCode::from(EXIT_USAGE);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("toolcage: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("toolcage: {}", print::sanitize(&format!("{error:#}")));
            ExitCode::from(EXIT_USAGE)
        }
    };
    // A guest stopped by its timeout may leave a file operation hanging on a
    // blocking thread (a FIFO, a stalled mount): do not wait for it.
    runtime.shutdown_background();
    code
}

/// Logs to stderr at `level`, never with the events that may carry a
/// guest's bytes unredacted ([`toolcage::UNREDACTED_LOG_TARGETS`]).
fn init_logging(level: Option<&str>) -> Result<(), String> {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, filter};
    let levels = match level {
        Some(level) => log_filter(level)?,
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("error")),
    };
    let redacted_only = filter::filter_fn(|meta| {
        !toolcage::may_carry_unredacted_bytes(meta.target(), meta.level())
    });
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(levels)
                .with_filter(redacted_only),
        )
        .init();
    Ok(())
}

/// `--log-level`: a level, or comma-separated filter directives each ending
/// in a level (`toolcage=debug,wasmtime=warn`). A bare word that is not a
/// level is refused: tracing would take it for a target and log nothing.
fn log_filter(spec: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];
    let is_level = |word: &str| LEVELS.contains(&word.trim().to_ascii_lowercase().as_str());
    let refuse = || {
        format!(
            "`{spec}` is neither a level ({}) nor filter directives such as `toolcage=debug,wasmtime=warn`",
            LEVELS.join(", ")
        )
    };
    let valid = !spec.trim().is_empty()
        && spec
            .split(',')
            .all(|directive| match directive.rsplit_once('=') {
                Some((target, level)) => !target.trim().is_empty() && is_level(level),
                None => is_level(directive),
            });
    if !valid {
        return Err(refuse());
    }
    tracing_subscriber::EnvFilter::try_new(spec).map_err(|e| format!("{}: {e}", refuse()))
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = &cli.global;
    if let Command::New { name, lang } = &cli.command {
        new::run(name, *lang, std::path::Path::new("."))?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::GenerateKeyPair {
        output_key_prefix,
        key_password_stdin,
    } = &cli.command
    {
        return distribution::generate_key_pair(output_key_prefix, *key_password_stdin);
    }
    let settings = Settings::new(global)?;
    match &cli.command {
        Command::New { .. } | Command::GenerateKeyPair { .. } => {
            unreachable!("handled above")
        }
        Command::Check { files } => check(&settings, files, global.json).await,
        Command::Pull {
            references,
            locked,
            update,
        } => distribution::pull(&settings, global, references, *locked, *update).await,
        Command::Push {
            file,
            reference,
            annotations,
        } => distribution::push(&settings, global, file, reference, annotations).await,
        Command::Sign {
            reference,
            key,
            key_password_stdin,
        } => distribution::sign(&settings, global, reference, key, *key_password_stdin).await,
        Command::List => {
            let registry = settings.registry().await?;
            print::list(&registry, global.json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect { tool } => inspect(&settings, tool, global.json).await,
        Command::Definitions { format } => {
            let registry = settings.registry().await?;
            print::pretty_json(&toolcage::agent::definitions(
                &registry,
                &settings.config.permissions,
                *format,
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        command @ Command::Serve { .. } => serve(&settings, global, command).await,
        Command::RunCalls { file, format } => {
            run_calls(&settings, global, file.as_deref(), format).await
        }
        Command::Call {
            tool,
            args,
            pairs,
            check_permissions,
        } => {
            let arguments = call_arguments(args.as_deref(), pairs)?;
            call(&settings, global, tool, arguments, *check_permissions).await
        }
    }
}

/// `toolcage inspect TOOL`.
async fn inspect(settings: &Settings, tool: &str, json: bool) -> anyhow::Result<ExitCode> {
    let registry = settings.registry().await?;
    let Some(info) = registry.tool(tool) else {
        bail!(
            "no tool named `{tool}`; available: {}",
            print::names(&registry)
        );
    };
    print::inspect(info, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `toolcage serve`: the flags checked and gathered into a [`serve::Serve`],
/// the telemetry and the runtime started, then the server run until it stops.
async fn serve(
    settings: &Settings,
    global: &GlobalArgs,
    command: &Command,
) -> anyhow::Result<ExitCode> {
    let Command::Serve {
        http,
        token_file,
        stateless,
        max_body_kib,
        allow_hosts,
        http_limits,
        max_concurrent_calls,
        watch,
        poll_ms,
        keep_alive_ms,
        task_after_ms,
        task_ttl_s,
        task_route,
        task_heartbeat_ms,
        no_tasks,
        code_mode_only,
        metrics,
        metrics_addr,
    } = command
    else {
        unreachable!("called for `serve` only")
    };
    if *metrics && http.is_none() && metrics_addr.is_none() {
        bail!("--metrics serves /metrics beside /mcp: use it with --http, or give --metrics-addr");
    }
    if *code_mode_only && !settings.code_mode_on() {
        bail!(
            "--code-mode-only lists run_code only, but code mode is off (by --no-code-mode, --no-bundled, or [code_mode] enabled = false or bundled = false in the config)"
        );
    }
    let telemetry = start_telemetry(*metrics || metrics_addr.is_some())?;
    let mut runtime = Runtime::builder();
    if let Some(calls) = max_concurrent_calls {
        if *calls == 0 {
            bail!("--max-concurrent-calls must be greater than 0");
        }
        runtime = runtime.max_concurrent_calls(*calls);
    }
    let watch = match (watch, positive(*poll_ms, "--poll-ms")?) {
        (_, Some(ms)) => Some(WatchOptions::default().poll(Duration::from_millis(ms))),
        (true, None) => Some(WatchOptions::default()),
        (false, None) => None,
    };
    // SIGHUP is taken over before loading, which can take a while:
    // by default it would end the process.
    let hangups = Some(serve::hangups()?);
    let runtime = runtime_with(runtime)?;
    let registry = settings.live_registry_on(&runtime).await?;
    if let Some(telemetry) = &telemetry {
        telemetry.observe_runtime(&runtime);
        telemetry.observe_reloads(&registry);
    }
    let serve = serve::Serve {
        hangups,
        http: http.clone(),
        token_file: token_file.clone(),
        stateless: *stateless,
        max_body_bytes: bytes(max_body_kib.map(|k| k.max(1)), 10, "--max-body-kib")?,
        allow_hosts: allow_hosts.clone(),
        http_limits: (**http_limits).clone(),
        watch,
        config_file: config_path(global),
        keep_alive_ms: *keep_alive_ms,
        tasks: match no_tasks {
            true => None,
            false => Some(task_options(
                *task_after_ms,
                *task_ttl_s,
                task_route,
                *task_heartbeat_ms,
            )?),
        },
        code_mode_only: *code_mode_only,
        telemetry: telemetry.clone(),
        metrics: *metrics,
        metrics_addr: metrics_addr.clone(),
    };
    let served = serve.run(registry.clone(), settings.config.clone()).await;
    // Every upstream server ends with the server, within a bound.
    registry.current().close_mcp_servers(UPSTREAM_CLOSE).await;
    stop_telemetry(telemetry);
    served?;
    Ok(ExitCode::SUCCESS)
}

/// `toolcage run-calls`: exit 1 unless every call succeeded.
async fn run_calls(
    settings: &Settings,
    global: &GlobalArgs,
    file: Option<&std::path::Path>,
    format: &str,
) -> anyhow::Result<ExitCode> {
    let telemetry = start_telemetry(false)?;
    let registry = settings.registry().await?;
    let permissions = settings.config.permissions.clone();
    let ran = batch::run_calls(
        registry,
        permissions,
        telemetry.clone(),
        file,
        format,
        global.json,
    )
    .await;
    stop_telemetry(telemetry);
    let all_ok = ran?;
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `toolcage call TOOL`: the operator's own call, exit 1 if it failed.
async fn call(
    settings: &Settings,
    global: &GlobalArgs,
    tool: &str,
    arguments: String,
    check_permissions: bool,
) -> anyhow::Result<ExitCode> {
    let telemetry = start_telemetry(false)?;
    let registry = settings.registry().await?;
    // The operator's own call, unless asked to check the rules.
    let permissions = match check_permissions {
        true => settings.config.permissions.clone(),
        false => Permissions::allow_all(),
    };
    let mut runner = Runner::new(Arc::new(registry))
        .permissions(permissions)
        .unapprovable("`toolcage call` has no one to ask");
    if let Some(telemetry) = &telemetry {
        runner = runner.telemetry(telemetry.clone());
    }
    let call = ToolCall::new("call-1", tool, arguments);
    let result = runner.run([call]).await.remove(0);
    stop_telemetry(telemetry);
    print::call_result(&result, global.json)?;
    Ok(if result.is_error {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The configuration file with the command line layered over it.
struct Settings {
    config: Config,
    limits: LimitOverrides,
    mounts: Vec<Mount>,
    allow_net: Vec<Grant>,
    allow_private: Vec<Cidr>,
    calls: Vec<String>,
    ca_file: Option<PathBuf>,
    tools: Vec<ToolsSource>,
    /// The config's upstream MCP servers, then `--mcp-server`'s.
    mcp_servers: Vec<UpstreamServer>,
    bundled: bool,
    /// `--no-code-mode`, over the config's `[code_mode]`.
    no_code_mode: bool,
}

/// The configuration file: `--config`, else `toolcage.toml` if there is one.
fn config_path(global: &GlobalArgs) -> Option<PathBuf> {
    match &global.config {
        Some(path) => Some(path.clone()),
        None if std::path::Path::new(CONFIG_FILE_NAME).is_file() => Some(CONFIG_FILE_NAME.into()),
        None => None,
    }
}

/// A positive number, or nothing; 0 is refused.
fn positive(value: Option<u64>, flag: &str) -> anyhow::Result<Option<u64>> {
    match value {
        Some(0) => bail!("{flag} must be greater than 0"),
        other => Ok(other),
    }
}

impl Settings {
    fn new(global: &GlobalArgs) -> anyhow::Result<Self> {
        let config = match config_path(global) {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        let mounts = global
            .mounts
            .iter()
            .map(|spec| Mount::parse(spec))
            .collect::<Result<_, _>>()?;
        let fuel = match global.fuel.as_deref() {
            None => None,
            Some("unlimited") => Some(None),
            Some(n) => match n.parse::<u64>() {
                Ok(units) if units > 0 => Some(Some(units)),
                _ => bail!("--fuel: `{n}` is neither a positive number nor `unlimited`"),
            },
        };
        let limits = LimitOverrides {
            fuel,
            timeout: positive(global.timeout_ms, "--timeout-ms")?.map(Duration::from_millis),
            memory_bytes: bytes(
                positive(global.memory_mib, "--memory-mib")?,
                20,
                "--memory-mib",
            )?,
            output_bytes: bytes(
                positive(global.output_kib, "--output-kib")?,
                10,
                "--output-kib",
            )?,
            net_requests: positive(global.net_requests.map(u64::from), "--net-requests")?
                .map(|n| n as u32),
            net_bytes_out: bytes(
                positive(global.net_out_kib, "--net-out-kib")?,
                10,
                "--net-out-kib",
            )?
            .map(|b| b as u64),
            net_bytes_in: bytes(
                positive(global.net_in_kib, "--net-in-kib")?,
                10,
                "--net-in-kib",
            )?
            .map(|b| b as u64),
            net_connections: positive(global.net_connections.map(u64::from), "--net-connections")?
                .map(|n| n as u32),
            net_first_byte_timeout: positive(global.net_first_byte_ms, "--net-first-byte-ms")?
                .map(Duration::from_millis),
            net_between_bytes_timeout: positive(
                global.net_between_bytes_ms,
                "--net-between-bytes-ms",
            )?
            .map(Duration::from_millis),
            nested_calls: global.nested_calls,
            nested_depth: global.nested_depth,
            nested_bytes: bytes(global.nested_kib, 10, "--nested-kib")?.map(|b| b as u64),
            ..LimitOverrides::default()
        };
        let allow_net = global
            .allow_net
            .iter()
            .map(|pattern| Grant::parse(pattern))
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("--allow-net: {e}"))?;
        let allow_private = global
            .allow_private
            .iter()
            .map(|text| text.parse::<Cidr>())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("--allow-private: {e}"))?;
        let bundled = config.bundled && !global.no_bundled;
        let mut tools = config.tools.clone();
        for text in &global.tools {
            tools.push(ToolsSource::parse(text).map_err(|e| anyhow::anyhow!("--tools: {e}"))?);
        }
        let mut mcp_servers = config.mcp_servers.clone();
        for text in &global.mcp_servers {
            mcp_servers.push(mcp_server_flag(text)?);
        }
        Ok(Settings {
            config,
            mcp_servers,
            limits,
            mounts,
            allow_net,
            allow_private,
            calls: global.calls.clone(),
            ca_file: global.ca_file.clone(),
            tools,
            bundled,
            no_code_mode: global.no_code_mode,
        })
    }

    /// Whether `run_code` will be registered.
    fn code_mode_on(&self) -> bool {
        self.bundled && !self.no_code_mode && self.config.code_mode.is_enabled()
    }

    fn builder(&self) -> Result<toolcage::RegistryBuilder, toolcage::Error> {
        let mut builder = self.config.registry_builder(&self.limits)?;
        if self.no_code_mode {
            builder = builder.code_mode(toolcage::code_mode::CodeMode::off());
        }
        for mount in &self.mounts {
            builder = builder.mount(mount.clone());
        }
        for grant in &self.allow_net {
            builder = builder.allow_net(grant.clone());
        }
        for range in &self.allow_private {
            builder = builder.allow_private(*range);
        }
        for pattern in &self.calls {
            builder = builder.calls(pattern.clone());
        }
        if let Some(ca_file) = &self.ca_file {
            builder = builder.ca_file(ca_file.clone());
        }
        if self.tools.iter().any(|t| t.reference().is_some()) {
            builder = builder.pulled(self.pulled()?);
        }
        Ok(builder)
    }

    /// What `oci://` references load from: the lock next to the config, the
    /// store (`[oci] store`, else `$XDG_CACHE_HOME/toolcage/oci`), the
    /// trust policy.
    fn pulled(&self) -> Result<toolcage::oci::Pulled, toolcage::Error> {
        let default_store = cache_home().map(|dir| dir.join("toolcage").join("oci"));
        self.config.pulled(default_store.as_deref())
    }

    /// Fails unless every reference is in the lock and the store: the
    /// commands that load never reach for a registry.
    fn require_pulled(&self) -> anyhow::Result<()> {
        let references: Vec<_> = self
            .tools
            .iter()
            .filter_map(ToolsSource::reference)
            .collect();
        if references.is_empty() {
            return Ok(());
        }
        let pulled = self.pulled()?;
        for reference in references {
            pulled.locate(reference)?;
        }
        Ok(())
    }

    /// The registry: bundled tools first, then every tools directory in
    /// order, with load diagnostics on stderr.
    async fn registry(&self) -> anyhow::Result<Registry> {
        self.registry_on(&runtime()?).await
    }

    /// [`Settings::registry`], on `runtime`.
    async fn registry_on(&self, runtime: &Runtime) -> anyhow::Result<Registry> {
        self.require_pulled()?;
        let mut registry = self.builder()?.runtime(runtime).build()?;
        noting_slow_loads(async {
            if self.bundled {
                print::diagnostics(&load_bundled(&mut registry).await);
            }
            for source in &self.tools {
                let reports = registry.load_tools(source).await?;
                print::diagnostics(&reports);
            }
            print::diagnostics(&registry.load_mcp_servers(&self.mcp_servers).await);
            anyhow::Ok(())
        })
        .await?;
        self.note_unknown_components(&registry);
        Ok(registry)
    }

    /// The registry of [`Settings::registry`], on `runtime`, with its tools
    /// directories live: they can be reloaded or watched.
    async fn live_registry_on(&self, runtime: &Runtime) -> anyhow::Result<LiveRegistry> {
        self.require_pulled()?;
        let mut base = self.builder()?.runtime(runtime).build()?;
        let live = noting_slow_loads(async {
            if self.bundled {
                print::diagnostics(&load_bundled(&mut base).await);
            }
            let (live, reports) = LiveRegistry::load(base, self.tools.clone()).await?;
            print::diagnostics(&reports);
            print::diagnostics(&live.load_mcp_servers(&self.mcp_servers).await);
            anyhow::Ok(live)
        })
        .await?;
        self.note_unknown_components(&live.current());
        Ok(live)
    }

    /// Says which components the config has settings for but none loaded.
    fn note_unknown_components(&self, registry: &Registry) {
        for (name, component) in &self.config.components {
            if !registry.tools().any(|tool| &tool.component == name) {
                let what = if !component.network.allow.is_empty() {
                    "network grants"
                } else if !component.calls.is_empty() {
                    "a calls grant"
                } else {
                    "settings"
                };
                eprintln!(
                    "toolcage: the config has {what} for component `{name}`, but no loaded component has that name"
                );
            }
        }
    }
}

/// An upstream server from `--mcp-server NAME=COMMAND [ARG...]` (its
/// environment holds toolcage's `PATH` only, so that `npx` and scripts
/// with `#!/usr/bin/env` find their interpreter) or `NAME=URL` (a remote
/// server, through the network grants).
fn mcp_server_flag(text: &str) -> anyhow::Result<UpstreamServer> {
    let (name, command) = text
        .split_once('=')
        .ok_or_else(|| anyhow::anyhow!("--mcp-server: `{text}` is not NAME=COMMAND [ARG...]"))?;
    if command.starts_with("https://") || command.starts_with("http://") {
        return UpstreamServer::http(name, command)
            .map_err(|e| anyhow::anyhow!("--mcp-server: {e}"));
    }
    let mut words = command.split_whitespace();
    let program = words.next().unwrap_or_default();
    let mut server = UpstreamServer::stdio(name, program)
        .map_err(|e| anyhow::anyhow!("--mcp-server: {e}"))?
        .args(words);
    if let Some(path) = std::env::var_os("PATH") {
        let path = EnvValue::Text(path.to_string_lossy().into_owned());
        server = server
            .env("PATH", path)
            .map_err(|e| anyhow::anyhow!("--mcp-server: {e}"))?;
    }
    Ok(server)
}

/// How long an upstream MCP server has to exit once its input ends, when
/// `serve` stops, before it is killed.
const UPSTREAM_CLOSE: Duration = Duration::from_secs(5);

/// How long telemetry may take, at exit, to send what is pending: a hanging
/// collector must not keep toolcage from exiting promptly.
const TELEMETRY_DEADLINE: Duration = Duration::from_secs(2);

/// OpenTelemetry as the standard OTEL_* variables ask (nothing when they
/// ask for nothing), and metrics for `/metrics` when `prometheus`.
fn start_telemetry(prometheus: bool) -> anyhow::Result<Option<Telemetry>> {
    Telemetry::from_env(EnvSettings::new().prometheus(prometheus)).context("OpenTelemetry")
}

/// Sends what telemetry has pending, saying in one line what it dropped.
fn stop_telemetry(telemetry: Option<Telemetry>) {
    if let Some(telemetry) = telemetry
        && let Err(error) = telemetry.shutdown(TELEMETRY_DEADLINE)
    {
        eprintln!("telemetry: {}", print::sanitize(&error.to_string()));
    }
}

/// Runs `load`, saying on stderr when it takes more than a second (the first
/// run compiles every component), so that nobody takes it for a hang.
async fn noting_slow_loads<T>(load: impl std::future::Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let mut load = std::pin::pin!(load);
    match tokio::time::timeout(Duration::from_secs(1), &mut load).await {
        Ok(value) => value,
        Err(_) => {
            eprintln!(
                "toolcage: compiling tool components (with the compile cache on, only the first run takes this long)…"
            );
            let value = load.await;
            eprintln!(
                "toolcage: tools ready in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            value
        }
    }
}

#[cfg(feature = "bundled-tools")]
async fn load_bundled(registry: &mut Registry) -> Vec<FileReport> {
    registry.load_bundled().await
}

#[cfg(not(feature = "bundled-tools"))]
async fn load_bundled(_: &mut Registry) -> Vec<FileReport> {
    Vec::new()
}

/// The runtime, caching compiled components in `$XDG_CACHE_HOME/toolcage`
/// (or `~/.cache/toolcage`) so that a command does not recompile unchanged
/// tools; without a cache directory (relative paths in `XDG_CACHE_HOME` and
/// `HOME` are ignored, as the XDG specification says), with one it may not
/// use, or with `TOOLCAGE_NO_CACHE` set, it compiles every time.
fn runtime() -> anyhow::Result<Runtime> {
    runtime_with(Runtime::builder())
}

/// [`runtime`], from `builder`.
fn runtime_with(builder: toolcage::RuntimeBuilder) -> anyhow::Result<Runtime> {
    let dir = cache_home().filter(|_| std::env::var_os("TOOLCAGE_NO_CACHE").is_none());
    if let Some(dir) = dir {
        match builder.clone().disk_cache(dir.join("toolcage")).build() {
            Ok(runtime) => return Ok(runtime),
            Err(e @ toolcage::RuntimeError::DiskCache { .. }) => say(&format!(
                "{:#}; compiling without it",
                anyhow::Error::from(e)
            )),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(builder.build()?)
}

/// `$XDG_CACHE_HOME`, else `~/.cache`; relative paths are ignored, as the
/// XDG specification says.
fn cache_home() -> Option<PathBuf> {
    let absolute = |var| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    absolute("XDG_CACHE_HOME").or_else(|| absolute("HOME").map(|home| home.join(".cache")))
}

/// Writes `toolcage: <message>` to stderr, if it can: a server whose stderr
/// was closed must still serve and stop (`eprintln!` would panic the task).
fn say(message: &str) {
    use std::io::Write;
    writeln!(std::io::stderr(), "toolcage: {message}").ok();
}

/// Loads each file (or pulled reference) into a registry of its own, so
/// each is judged alone.
async fn check(settings: &Settings, files: &[String], json: bool) -> anyhow::Result<ExitCode> {
    let runtime = runtime()?;
    let mut reports = Vec::with_capacity(files.len());
    for file in files {
        let mut builder = settings.builder()?.runtime(&runtime);
        let report = match ToolsSource::parse(file)? {
            ToolsSource::Oci(reference) => {
                builder = builder.pulled(settings.pulled()?);
                let mut registry = builder.build()?;
                let report = noting_slow_loads(registry.load_reference(&reference)).await;
                (report, registry)
            }
            ToolsSource::Dir(path) => {
                let mut registry = builder.build()?;
                let report = noting_slow_loads(registry.load_file(path)).await;
                (report, registry)
            }
        };
        let (report, registry) = report;
        let tools = registry.tools().cloned().collect::<Vec<_>>();
        reports.push((report, tools));
    }
    print::check(&reports, json)?;
    let failed = reports.iter().any(|(report, _)| !report.is_ok());
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `value` units of `1 << shift` bytes, or an error naming `flag` when that
/// does not fit in memory.
fn bytes(value: Option<u64>, shift: u32, flag: &str) -> anyhow::Result<Option<usize>> {
    value
        .map(|v| {
            v.checked_mul(1 << shift)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| anyhow::anyhow!("{flag}: {v} is too large"))
        })
        .transpose()
}

/// Reads `reader` to its end as text, refusing more than `max` bytes
/// without holding more than that.
pub(crate) fn read_capped(reader: impl Read, max: usize, what: &str) -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    reader
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {what}"))?;
    if bytes.len() > max {
        bail!(
            "{what} are larger than the {} MiB toolcage takes",
            max >> 20
        );
    }
    String::from_utf8(bytes).with_context(|| format!("{what} are not UTF-8 text"))
}

/// The arguments of `call`: ARGS, stdin, or `--arg` pairs; `{}` when none.
fn call_arguments(args: Option<&str>, pairs: &[String]) -> anyhow::Result<String> {
    if !pairs.is_empty() {
        let mut object = serde_json::Map::new();
        for pair in pairs {
            let Some((key, value)) = pair.split_once('=') else {
                bail!("--arg `{pair}`: expected KEY=VALUE");
            };
            let value =
                serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
            object.insert(key.to_string(), value);
        }
        return Ok(Value::Object(object).to_string());
    }
    match args {
        None => Ok("{}".to_string()),
        Some("-") => read_capped(
            std::io::stdin(),
            toolcage::MAX_ARGUMENT_BYTES,
            "the arguments on stdin",
        ),
        Some(text) => Ok(text.to_string()),
    }
}

/// `--task-after-ms`, `--task-ttl-s`, `--task-route` and
/// `--task-heartbeat-ms` as task options.
fn task_options(
    after_ms: Option<u64>,
    ttl_s: Option<u64>,
    route: &Option<String>,
    heartbeat_ms: Option<u64>,
) -> anyhow::Result<toolcage::mcp::TaskOptions> {
    let mut options = toolcage::mcp::TaskOptions::default();
    if let Some(ms) = after_ms {
        options = options.after(Duration::from_millis(ms));
    }
    if let Some(seconds) = positive(ttl_s, "--task-ttl-s")? {
        options = options.ttl(Duration::from_secs(seconds));
    }
    if let Some(route) = route {
        options = options.route(route)?;
    }
    if let Some(ms) = positive(heartbeat_ms, "--task-heartbeat-ms")? {
        options = options.heartbeat(Duration::from_millis(ms));
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_and_directives() {
        for good in [
            "debug",
            "WARN",
            "toolcage=debug",
            "toolcage=debug,wasmtime=warn",
            "off",
        ] {
            assert!(log_filter(good).is_ok(), "{good}");
        }
        for bad in [
            "verbose",
            "",
            "toolcage",
            "toolcage=loud",
            "debug,",
            "=debug",
        ] {
            let error = log_filter(bad).unwrap_err();
            assert!(error.contains("neither a level"), "{bad}: {error}");
        }
    }

    #[test]
    fn arguments_from_pairs() {
        let pairs = [
            "pattern=fn main".to_string(),
            "max_results=3".into(),
            "flag=true".into(),
            "list=[1]".into(),
        ];
        let args: Value = serde_json::from_str(&call_arguments(None, &pairs).unwrap()).unwrap();
        assert_eq!(
            args,
            serde_json::json!({ "pattern": "fn main", "max_results": 3, "flag": true, "list": [1] })
        );
        assert!(call_arguments(None, &["novalue".into()]).is_err());
        assert_eq!(call_arguments(None, &[]).unwrap(), "{}");
        assert_eq!(
            call_arguments(Some(r#"{"a":1}"#), &[]).unwrap(),
            r#"{"a":1}"#
        );
    }
}
