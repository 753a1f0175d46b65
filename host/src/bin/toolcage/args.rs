//! Command-line flags, as parsed; `main` turns them into a configuration.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use toolcage::agent::Format;

/// The line a command's `--help` ends with: the book's pages on it (files
/// under docs/src, which `mdbook serve docs` shows; a test checks each
/// exists, with its anchor).
macro_rules! book {
    ($first:literal $(, $page:literal)*) => {
        concat!("The book: docs/src/", $first $(, ", docs/src/", $page)*)
    };
}

/// Run AI agent tools as sandboxed WebAssembly components.
///
/// Exit status: 0 on success; 1 when a call's outcome is an error or a
/// checked file fails; 2 for usage, configuration and load errors.
#[derive(Debug, Parser)]
#[command(
    name = "toolcage",
    version,
    max_term_width = 100,
    after_help = book!("reference/cli.md", "getting-started/first-call.md")
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// A directory of *.wasm tool components, or a pulled component
    /// (oci://REGISTRY/REPO:TAG or @sha256:DIGEST, loaded through
    /// toolcage.lock); repeatable, loaded in the order given, after the
    /// config file's.
    #[arg(long = "tools", value_name = "DIR|oci://REF", global = true)]
    pub tools: Vec<String>,
    /// Take an upstream MCP server's tools, named mcp__NAME__TOOL, after
    /// every other tool: NAME=COMMAND [ARG...] (split at spaces) starts one
    /// over stdio, its environment holding only PATH; NAME=URL reaches one
    /// over Streamable HTTP, as --allow-net grants; repeatable. For more,
    /// use [mcp_servers.NAME] in the config.
    #[arg(long = "mcp-server", value_name = "NAME=COMMAND", global = true)]
    pub mcp_servers: Vec<String>,
    /// The config file. Default: ./toolcage.toml when it exists.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// Lend a host directory to every tool, read-only unless `:rw`;
    /// repeatable.
    #[arg(long = "mount", value_name = "HOST:GUEST[:ro|rw]", global = true)]
    pub mounts: Vec<String>,
    /// Let every tool reach what PATTERN matches: scheme://host[:port][/path],
    /// such as `https://api.github.com` or `https://*.example.com:8443/v1`;
    /// repeatable. Default: no network at all.
    #[arg(long = "allow-net", value_name = "PATTERN", global = true)]
    pub allow_net: Vec<String>,
    /// Let granted names resolve into this private range (CIDR, such as
    /// 10.0.0.0/8); repeatable. Default: none.
    #[arg(long = "allow-private", value_name = "CIDR", global = true)]
    pub allow_private: Vec<String>,
    /// Let every tool call the tools whose names PATTERN matches (`*` for
    /// any run of characters), each call checked like a direct one and run
    /// with the callee's own grants; repeatable. Default: none.
    #[arg(long = "calls", value_name = "PATTERN", global = true)]
    pub calls: Vec<String>,
    /// Trust the CA certificates in FILE (PEM) for tools' HTTPS requests,
    /// besides the web PKI roots.
    #[arg(long = "ca-file", value_name = "FILE", global = true)]
    pub ca_file: Option<PathBuf>,
    /// HTTP requests a call may send. Default: 50.
    #[arg(long, value_name = "N", global = true)]
    pub net_requests: Option<u32>,
    /// Request bytes a call may send, in KiB. Default: 16384.
    #[arg(long, value_name = "N", global = true)]
    pub net_out_kib: Option<u64>,
    /// Response bytes a call may receive, in KiB. Default: 65536.
    #[arg(long, value_name = "N", global = true)]
    pub net_in_kib: Option<u64>,
    /// Connections a call may hold open at once. Default: 4.
    #[arg(long, value_name = "N", global = true)]
    pub net_connections: Option<u32>,
    /// Time to connect, then to the response head, in milliseconds.
    /// Default: 10000.
    #[arg(long, value_name = "N", global = true)]
    pub net_first_byte_ms: Option<u64>,
    /// Longest stall of a response body, in milliseconds. Default: 10000.
    #[arg(long, value_name = "N", global = true)]
    pub net_between_bytes_ms: Option<u64>,
    /// Nested calls (tools calling tools) one call tree may make. Default:
    /// 100.
    #[arg(long, value_name = "N", global = true)]
    pub nested_calls: Option<u32>,
    /// How deep a call tree may nest. Default: 4.
    #[arg(long, value_name = "N", global = true)]
    pub nested_depth: Option<u32>,
    /// Arguments and results one call tree's nested calls may pass, in KiB.
    /// Default: 16384.
    #[arg(long, value_name = "N", global = true)]
    pub nested_kib: Option<u64>,
    /// Wall-clock limit per call, in milliseconds. Default: 30000.
    #[arg(long, value_name = "N", global = true)]
    pub timeout_ms: Option<u64>,
    /// Fuel (instruction budget) per call, or `unlimited`. Default:
    /// 10000000000.
    #[arg(long, value_name = "N", global = true)]
    pub fuel: Option<String>,
    /// Memory limit per call, in MiB. Default: 256.
    #[arg(long, value_name = "N", global = true)]
    pub memory_mib: Option<u64>,
    /// Output limit (output + details) per call, in KiB. Default: 1024.
    #[arg(long, value_name = "N", global = true)]
    pub output_kib: Option<u64>,
    /// The user name for registries (pull, push, sign), instead of Docker's
    /// config.json; the password is read from stdin
    /// (--registry-password-stdin).
    #[arg(
        long,
        value_name = "USER",
        global = true,
        requires = "registry_password_stdin"
    )]
    pub registry_user: Option<String>,
    /// Read the registry password (or token) from stdin.
    #[arg(long, global = true, requires = "registry_user")]
    pub registry_password_stdin: bool,
    /// Do not register the bundled standard toolset.
    #[arg(long, global = true)]
    pub no_bundled: bool,
    /// Turn code mode off: no run_code (nor search_tools, describe_tool).
    #[arg(long, global = true)]
    pub no_code_mode: bool,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Log level for stderr (error, warn, info, debug, trace, off), or
    /// directives each ending in one, such as `toolcage=debug,wasmtime=warn`.
    /// Default: error, or RUST_LOG when set.
    #[arg(long, value_name = "LEVEL", global = true)]
    pub log_level: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the registered tools.
    #[command(after_help = book!("reference/cli.md#list", "tools/testing.md"))]
    List,
    /// Show a tool's whole descriptor.
    #[command(after_help = book!("reference/cli.md#inspect", "tools/testing.md"))]
    Inspect {
        /// The tool's name.
        tool: String,
    },
    /// Call a tool and print its output.
    #[command(after_help = book!("reference/cli.md#call", "tools/testing.md"))]
    Call {
        /// The tool's name.
        tool: String,
        /// The arguments: a JSON object, or `-` to read it from stdin.
        /// Default: {}.
        args: Option<String>,
        /// Build the arguments from KEY=VALUE pairs instead (VALUE is parsed
        /// as JSON when it parses, else taken as a string); repeatable.
        #[arg(long = "arg", value_name = "KEY=VALUE", conflicts_with = "args")]
        pairs: Vec<String>,
        /// Check the call against the config's [permissions], as a model's
        /// call is (`ask` is refused: there is no one to ask). Default: the
        /// operator's own call, which every tool answers.
        #[arg(long)]
        check_permissions: bool,
    },
    /// Load components, run describe() and check their descriptors.
    #[command(after_help = book!("reference/cli.md#check", "tools/testing.md"))]
    Check {
        /// Component files, or pulled references (oci://…).
        #[arg(required = true, value_name = "FILE|oci://REF")]
        files: Vec<String>,
    },
    /// Fetch oci:// references into the content store, checking every
    /// digest and the signatures [trust] asks for, and record them in
    /// toolcage.lock (next to the config). The only command that reads
    /// registries: the others load from the lock.
    #[command(after_help = book!("reference/cli.md#pull", "operate/distribution.md"))]
    Pull {
        /// References; default: every oci:// in the config's `tools` and
        /// --tools.
        references: Vec<String>,
        /// Fail if the lock would change (for CI).
        #[arg(long)]
        locked: bool,
        /// Resolve tags again, even where the lock has them.
        #[arg(long, conflicts_with = "locked")]
        update: bool,
    },
    /// Publish a component as REF, in the CNCF Wasm OCI layout, annotated
    /// with its tool names and toolcage's WIT version. Prints the reference
    /// with its digest.
    #[command(after_help = book!("reference/cli.md#push", "tools/publishing.md"))]
    Push {
        /// The component file.
        file: PathBuf,
        /// oci://REGISTRY/REPO:TAG.
        reference: String,
        /// An extra manifest annotation, such as
        /// org.opencontainers.image.source=URL; repeatable.
        #[arg(long = "annotation", value_name = "KEY=VALUE")]
        annotations: Vec<String>,
    },
    /// Sign the manifest REF names in its registry with an ECDSA P-256 key,
    /// as `cosign sign --key` does, and push the signature beside it.
    #[command(after_help = book!("reference/cli.md#sign", "tools/publishing.md"))]
    Sign {
        /// oci://REGISTRY/REPO:TAG or @sha256:DIGEST.
        reference: String,
        /// The private key: cosign's encrypted cosign.key (its password from
        /// $COSIGN_PASSWORD, else --key-password-stdin, else a prompt on the
        /// terminal), or an unencrypted PEM, PKCS#8 or SEC1.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// Read the key's password from stdin (when COSIGN_PASSWORD is
        /// not set); not with --registry-password-stdin.
        #[arg(long)]
        key_password_stdin: bool,
    },
    /// Write a new ECDSA P-256 key pair as `cosign generate-key-pair` does:
    /// NAME.key, encrypted as cosign encrypts it (scrypt N=32768 r=8 p=1,
    /// NaCl secretbox), and NAME.pub. The password comes from
    /// $COSIGN_PASSWORD, else --key-password-stdin, else a prompt on the
    /// terminal (asked twice). Never overwrites a file.
    #[command(after_help = book!("reference/cli.md#generate-key-pair", "tools/publishing.md"))]
    GenerateKeyPair {
        /// The files' name without .key and .pub. Default: cosign.
        #[arg(long, value_name = "NAME", default_value = "cosign")]
        output_key_prefix: PathBuf,
        /// Read the password from stdin (when COSIGN_PASSWORD is not set).
        #[arg(long)]
        key_password_stdin: bool,
    },
    /// Print every tool's definition in a model provider's format.
    #[command(after_help = book!("reference/cli.md#definitions", "embed/agent.md"))]
    Definitions {
        /// openai, openai-responses, anthropic or mcp.
        #[arg(long, value_name = "FORMAT")]
        format: Format,
    },
    /// Serve the tools over the Model Context Protocol: on stdio (the
    /// default; stdout carries MCP messages only), or Streamable HTTP at
    /// /mcp with --http. Calls follow the config's `[permissions]`.
    #[command(after_help = book!("reference/cli.md#serve", "clients/index.md", "operate/mcp-server.md"))]
    Serve {
        /// Serve Streamable HTTP on ADDR (`127.0.0.1:8080`, or a bare port
        /// for 127.0.0.1) instead of stdio.
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// Require a bearer token from this file on HTTP requests: one per
        /// line (surrounding whitespace trimmed, blank lines and lines
        /// starting with # skipped), any of them accepted; each token's
        /// tasks are its own. Default: $TOOLCAGE_TOKEN when set; the file
        /// wins when both are.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Keep no session between HTTP requests, so that any replica can
        /// serve any request.
        #[arg(long)]
        stateless: bool,
        /// The largest HTTP request body, in KiB. Default: 4096.
        #[arg(long, value_name = "N")]
        max_body_kib: Option<u64>,
        /// Also answer HTTP requests whose Host header is NAME (any port) or
        /// NAME:PORT, such as a Kubernetes Service's name; repeatable.
        /// Default: loopback names and the address served on only (a
        /// defence against DNS rebinding).
        #[arg(long = "allow-host", value_name = "NAME")]
        allow_hosts: Vec<String>,
        #[command(flatten)]
        http_limits: Box<HttpLimits>,
        /// How many calls run at once; more wait for a free slot. Default: 32.
        #[arg(long, value_name = "N")]
        max_concurrent_calls: Option<usize>,
        /// Watch the tools directories and serve what changes in them (new,
        /// changed and removed components), without a restart.
        #[arg(long)]
        watch: bool,
        /// Send a progress notification for a call whose tool has been
        /// quiet for N milliseconds, and again every N, when the request
        /// has a progress token (clients that reset their timeout on
        /// progress then wait for long calls); 0: never. Default: 10000.
        #[arg(long, value_name = "N")]
        keep_alive_ms: Option<u64>,
        /// Answer a call still running after N milliseconds with a task
        /// (the MCP tasks extension, for clients that declare it), whose
        /// result the client polls for; 0: every such client's call.
        /// Default: 5000.
        #[arg(long, value_name = "N")]
        task_after_ms: Option<u64>,
        /// Keep a task (running or finished) for N seconds from its start.
        /// Default: 900.
        #[arg(long, value_name = "N")]
        task_ttl_s: Option<u64>,
        /// Begin task ids with NAME. (letters, digits, - or _), for a load
        /// balancer to route tasks/* to this replica (deploy/nginx.conf).
        #[arg(long, value_name = "NAME")]
        task_route: Option<String>,
        /// With [state] backend = "redis", tasks are kept in Redis, and a
        /// replica rewrites its running tasks' records every N
        /// milliseconds (and takes the cancellations and answers other
        /// replicas received); one silent for 5 beats is taken for dead,
        /// its running tasks failed. Default: 1000.
        #[arg(long, value_name = "N")]
        task_heartbeat_ms: Option<u64>,
        /// Never answer with a task: offer no tasks extension. It cannot be
        /// given with --task-after-ms, --task-ttl-s, --task-route or
        /// --task-heartbeat-ms: those
        /// set how tasks are made and kept, and with --no-tasks none are,
        /// so giving both is refused rather than one silently ignored.
        #[arg(long, conflicts_with_all = ["task_after_ms", "task_ttl_s", "task_route", "task_heartbeat_ms"])]
        no_tasks: bool,
        /// List only code mode's tools (run_code, search_tools,
        /// describe_tool): the model reaches the others through scripts,
        /// and a large catalog costs one definition. The others stay
        /// callable under the same rules.
        #[arg(long)]
        code_mode_only: bool,
        /// Watch by polling every N milliseconds, for file systems that send
        /// no change events (implies --watch).
        #[arg(long, value_name = "N")]
        poll_ms: Option<u64>,
        /// Serve metrics in Prometheus' text format at GET /metrics, beside
        /// /mcp and behind the same token (with --http).
        #[arg(long)]
        metrics: bool,
        /// Serve /metrics on a listener of its own at ADDR
        /// (`127.0.0.1:9464`, or a bare port for 127.0.0.1), without a
        /// token: bind it where only the scraper reaches. Implies
        /// --metrics; works on stdio too.
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<String>,
    },
    /// Write a new tool project NAME/ in the current directory: the WIT
    /// contract, the language's SDK, an example tool, a build command and a
    /// test. Prints the commands that build it and call it.
    #[command(after_help = book!("reference/cli.md#new", "tools/index.md"))]
    New {
        /// The tool's name, and the project's directory.
        name: String,
        /// rust, python or js.
        #[arg(long, value_enum)]
        lang: crate::new::Lang,
    },
    /// Run the tool calls of a model response as one batch (read-only
    /// batches in parallel, others in order, with the config's
    /// `[permissions]`) and print the tool results in the same format.
    #[command(after_help = book!("reference/cli.md#run-calls", "embed/agent.md"))]
    RunCalls {
        /// The model response: a JSON file, or `-` for stdin. Default: stdin.
        file: Option<PathBuf>,
        /// auto, openai, openai-responses, anthropic or mcp.
        #[arg(long, value_name = "FORMAT", default_value = "auto")]
        format: String,
    },
}

/// What an HTTP client may hold (`serve --http`); each flag sets the
/// `HttpOptions` setting of the same name.
#[derive(Debug, Clone, Default, Args)]
pub struct HttpLimits {
    /// How long a request's head (request line and headers) may take to
    /// arrive, from its first byte, in milliseconds; also how long a new
    /// connection may stay open without sending anything. Default: 10000.
    #[arg(long, value_name = "N")]
    pub header_timeout_ms: Option<u64>,
    /// How long a connection may stay open with no request in progress,
    /// after its first request, in milliseconds. Default: 75000.
    #[arg(long, value_name = "N")]
    pub idle_timeout_ms: Option<u64>,
    /// How long a request body may take to arrive whole, from the server's
    /// first read of it (its 100 Continue), in milliseconds: 408 past it.
    /// Default: 30000.
    #[arg(long, value_name = "N")]
    pub body_timeout_ms: Option<u64>,
    /// The largest request head (request line and headers), in KiB: 431
    /// past it. Default: 64; at least 1.
    #[arg(long, value_name = "N")]
    pub max_header_kib: Option<u64>,
    /// The most HTTP connections open at once; more are closed as they
    /// come. Default: 1024.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// The most connections open at once that have not yet sent a request
    /// to /mcp with a valid token (any request, without tokens); more are
    /// closed as they come. Default: 256.
    #[arg(long, value_name = "N")]
    pub max_unauthenticated_connections: Option<usize>,
    /// The most sessions one token may hold open at once (all clients
    /// together, without tokens); a new one past it closes the token's
    /// session idle longest, and when every one is in use its initialize
    /// is answered 429. Default: 64.
    #[arg(long, value_name = "N")]
    pub max_sessions_per_token: Option<usize>,
    /// How long a session may go unused before it is closed. Default:
    /// 300000 (5 minutes).
    #[arg(long, value_name = "MS")]
    pub session_idle_ms: Option<u64>,
}

impl HttpLimits {
    /// Whether any flag was given.
    pub fn any(&self) -> bool {
        self.header_timeout_ms.is_some()
            || self.idle_timeout_ms.is_some()
            || self.body_timeout_ms.is_some()
            || self.max_header_kib.is_some()
            || self.max_connections.is_some()
            || self.max_unauthenticated_connections.is_some()
            || self.max_sessions_per_token.is_some()
            || self.session_idle_ms.is_some()
    }
}
