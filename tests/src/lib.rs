//! Helpers shared by toolcage's integration tests: the guests built from
//! source by `build.rs`, one runtime per test binary (so each component is
//! compiled once), and registries built from them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::LazyLock;
use std::time::Duration;

use toolcage::{CallResult, ErrorKind, FileReport, Limits, Registry, RegistryBuilder, Runtime};

pub mod net;

/// The Rust examples of the book's embedding pages, compiled as doctests so
/// that they cannot drift from the library.
#[doc = include_str!("../../docs/src/embed/index.md")]
pub mod book_embed {}

/// The code mode example of the book (its prompt built by an embedder),
/// compiled as a doctest.
#[doc = include_str!("../../docs/src/code-mode.md")]
pub mod book_code_mode {}

/// The agent-loop example of the book, compiled as a doctest.
#[doc = include_str!("../../docs/src/embed/agent.md")]
pub mod book_agent {}

/// The MCP and telemetry examples of the book, compiled as doctests.
#[doc = include_str!("../../docs/src/embed/mcp.md")]
pub mod book_mcp {}

/// Paths of the built components, one constant per guest package.
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));
}

static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| Runtime::new().expect("the runtime starts"));

/// The runtime every test registry shares.
pub fn runtime() -> &'static Runtime {
    &RUNTIME
}

/// A registry builder on the shared runtime.
pub fn builder() -> RegistryBuilder {
    Registry::builder().runtime(&RUNTIME)
}

/// Limits that make breach tests quick: 2 s, 2 billion fuel, 64 MiB.
pub fn quick_limits() -> Limits {
    Limits {
        fuel: Some(2_000_000_000),
        timeout: Duration::from_secs(2),
        memory_bytes: 64 << 20,
        ..Limits::default()
    }
}

/// A registry with `components` loaded, each of which must load cleanly.
pub async fn registry(builder: RegistryBuilder, components: &[&str]) -> Registry {
    let mut registry = builder.build().expect("the registry builds");
    for path in components {
        let report = registry.load_file(path).await;
        assert_loaded(&report);
    }
    registry
}

/// `bytes` with a custom section appended: still the same component, with a
/// different hash.
pub fn with_custom_section(mut bytes: Vec<u8>, name: &str, payload: &[u8]) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut content = Vec::new();
    leb128(name.len(), &mut content);
    content.extend_from_slice(name.as_bytes());
    content.extend_from_slice(payload);
    bytes.push(0);
    leb128(content.len(), &mut bytes);
    bytes.extend_from_slice(&content);
    bytes
}

/// Asserts that a call failed with `kind`, showing its output otherwise.
pub fn assert_error(result: &CallResult, kind: ErrorKind) {
    assert_eq!(result.error_kind, Some(kind), "{}", result.output);
    assert!(result.is_error);
}

/// Asserts that a call failed with `kind`, its output saying `message` and
/// that the call hit the memory limit of [`quick_limits`].
pub fn assert_error_at_memory_limit(result: &CallResult, kind: ErrorKind, message: &str) {
    assert_error(result, kind);
    assert!(
        result.output.contains(message) && result.output.contains("hit its memory limit of 64 MiB"),
        "{}",
        result.output
    );
}

/// Asserts that a component loaded with no error.
pub fn assert_loaded(report: &FileReport) {
    assert!(
        report.is_ok(),
        "{} failed to load: {:?}",
        report.source,
        report.error
    );
}

static TOOLCAGE_BIN: LazyLock<PathBuf> = LazyLock::new(|| {
    // The binary lives in another package, so cargo does not build it for
    // this one's tests: build it once, beside this test executable.
    let exe = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", "toolcage", "--bin", "toolcage"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the toolcage binary failed");
    let bin = profile_dir.join("toolcage");
    // The tests start many `toolcage` processes at once: compile the
    // bundled components into the shared compile cache first, once,
    // rather than in every one of them (code mode's interpreter alone
    // takes a while).
    let warm = Command::new(&bin)
        .arg("list")
        .env_remove("TOOLCAGE_NO_CACHE")
        .output()
        .expect("toolcage runs");
    assert!(
        warm.status.success(),
        "toolcage list failed: {}",
        String::from_utf8_lossy(&warm.stderr)
    );
    bin
});

/// A `toolcage` command, the binary built once per test run.
pub fn toolcage() -> Command {
    let mut command = Command::new(&*TOOLCAGE_BIN);
    command.env_remove("RUST_LOG");
    command
}

/// The MCP clients' own command-line tools, from the npm registry, pinned:
/// Claude Code's `claude` and the MCP Inspector; and the MCP project's
/// reference server, `mcp-server-everything`, which the upstream tests
/// start over stdio. Installed on first use into
/// `target/client-clis` (`npm install`: Claude Code's install script copies
/// its native binary from a package of the same install), and again when
/// the pins change; returns its `node_modules/.bin`. The book's tests run
/// them offline against `toolcage serve`.
pub fn client_clis() -> PathBuf {
    const PACKAGES: [&str; 3] = [
        "@anthropic-ai/claude-code@2.1.197",
        "@modelcontextprotocol/inspector@0.15.0",
        "@modelcontextprotocol/server-everything@2026.8.31",
    ];
    static BIN: LazyLock<PathBuf> = LazyLock::new(|| {
        let dir = TOOLCAGE_BIN
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>")
            .join("client-clis");
        let stamp = dir.join("installed.txt");
        let wanted = PACKAGES.join("\n");
        if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
            std::fs::create_dir_all(&dir).expect("target/client-clis");
            let status = Command::new("npm")
                .args([
                    "install",
                    "--ignore-scripts",
                    "--no-audit",
                    "--no-fund",
                    "--silent",
                ])
                .arg("--prefix")
                .arg(&dir)
                .args(PACKAGES)
                .status();
            assert!(
                status.as_ref().is_ok_and(|s| s.success()),
                "installing the clients' CLIs failed ({status:?}); run: npm install --prefix {} {}",
                dir.display(),
                PACKAGES.join(" ")
            );
            // Scripts were not run; Claude Code's own postinstall only puts
            // its platform's binary (an optional dependency, installed
            // above) in place of the `claude` placeholder, offline.
            let claude = dir.join("node_modules/@anthropic-ai/claude-code");
            let status = Command::new("node")
                .arg("install.cjs")
                .current_dir(&claude)
                .status();
            assert!(
                status.as_ref().is_ok_and(|s| s.success()),
                "placing Claude Code's binary failed ({status:?}); run: (cd {} && node install.cjs)",
                claude.display()
            );
            std::fs::write(&stamp, wanted).expect("write the stamp");
        }
        dir.join("node_modules/.bin")
    });
    BIN.clone()
}

/// The Python interpreter of `target/clients-venv`, where the real client
/// SDKs of `tests/clients/requirements.txt` are installed: created and
/// installed on first use (as the build installs the wasm target), and
/// reinstalled when the requirements change.
pub fn clients_python() -> PathBuf {
    static PYTHON: LazyLock<PathBuf> = LazyLock::new(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let requirements = manifest.join("clients/requirements.txt");
        let wanted =
            std::fs::read_to_string(&requirements).expect("tests/clients/requirements.txt");
        let venv = TOOLCAGE_BIN
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>")
            .join("clients-venv");
        let python = venv.join("bin/python");
        let stamp = venv.join("requirements.txt");
        if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
            return python;
        }
        let how = format!(
            "python3 -m venv {venv} && {venv}/bin/pip install -r {requirements}",
            venv = venv.display(),
            requirements = requirements.display()
        );
        let run = |command: &mut Command| {
            let status = command.status();
            assert!(
                status.as_ref().is_ok_and(|s| s.success()),
                "installing the client SDKs failed ({status:?}); run: {how}"
            );
        };
        // Made from the interpreter itself, not the link on PATH that led
        // to it (a link farm such as CI's `.ci/readme-path`, a distro's
        // alternatives): the venv then points at a file that a sandbox
        // lending the interpreter's own tree can run (tests/all/upstream's
        // bubblewrap test).
        let interpreter = Command::new("python3")
            .args([
                "-c",
                "import os, sys; print(os.path.realpath(sys.executable))",
            ])
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
            .unwrap_or_else(|| panic!("python3 does not run; run: {how}"));
        run(Command::new(interpreter).arg("-m").arg("venv").arg(&venv));
        run(Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements));
        std::fs::write(&stamp, wanted).expect("write the venv's stamp");
        python
    });
    PYTHON.clone()
}

/// The CNCF distribution registry (Debian's `docker-registry`, 2.8) the OCI
/// client tests push to and pull from: `$TOOLCAGE_DOCKER_REGISTRY` when set,
/// else `target/docker-registry/usr/bin/docker-registry`, fetched there on
/// first use with `apt-get download` and unpacked with `dpkg-deb -x` (never
/// installed: the package's service would listen on every interface). Test
/// processes racing to fetch it each unpack into a directory of their own
/// and rename it into place; the first rename wins.
pub fn docker_registry() -> PathBuf {
    static REGISTRY: LazyLock<PathBuf> = LazyLock::new(|| {
        debian_binary(&DebianBinary {
            package: "docker-registry",
            binary: "usr/bin/docker-registry",
            variable: "TOOLCAGE_DOCKER_REGISTRY",
            purpose: "the OCI tests",
            with: &[],
        })
    });
    REGISTRY.clone()
}

/// The Prometheus server (Debian's `prometheus`, 2.42) the telemetry client
/// tests let scrape `toolcage serve`'s /metrics on loopback:
/// `$TOOLCAGE_PROMETHEUS` when set, else
/// `target/prometheus/usr/bin/prometheus`, fetched and unpacked there on
/// first use as [`docker_registry`] is (never installed: the package's
/// service would listen on every interface).
pub fn prometheus() -> PathBuf {
    static PROMETHEUS: LazyLock<PathBuf> = LazyLock::new(|| {
        debian_binary(&DebianBinary {
            package: "prometheus",
            binary: "usr/bin/prometheus",
            variable: "TOOLCAGE_PROMETHEUS",
            purpose: "the telemetry tests",
            with: &[],
        })
    });
    PROMETHEUS.clone()
}

/// nginx (Debian's `nginx`), which the scale-out client tests run in front
/// of `toolcage serve` replicas with `deploy/nginx.conf`: `$TOOLCAGE_NGINX`
/// when set, else `target/nginx/usr/sbin/nginx`, fetched and unpacked there
/// on first use as [`docker_registry`] is, never installed (the package's
/// service would listen on port 80 of every interface), and never the
/// system's own nginx, so the fetch is what every run tests. It needs no
/// file of `nginx-common`: the tests run it with `-p`, `-c` and `-e` in a
/// directory of their own, with a config that includes nothing else.
pub fn nginx() -> PathBuf {
    static NGINX: LazyLock<PathBuf> = LazyLock::new(|| {
        debian_binary(&DebianBinary {
            package: "nginx",
            binary: "usr/sbin/nginx",
            variable: "TOOLCAGE_NGINX",
            purpose: "the scale-out tests",
            with: &[],
        })
    });
    NGINX.clone()
}

/// bubblewrap (Debian's `bubblewrap`), which the upstream tests confine a
/// server with: `$TOOLCAGE_BWRAP` when set, else
/// `target/bubblewrap/usr/bin/bwrap`, fetched and unpacked there on first
/// use as [`docker_registry`] is, never the system's own, so a machine
/// without it runs the tests as one with it does.
pub fn bubblewrap() -> PathBuf {
    static BWRAP: LazyLock<PathBuf> = LazyLock::new(|| {
        debian_binary(&DebianBinary {
            package: "bubblewrap",
            binary: "usr/bin/bwrap",
            variable: "TOOLCAGE_BWRAP",
            purpose: "the upstream confinement tests",
            with: &[],
        })
    });
    BWRAP.clone()
}

/// Debian's `redis-server` (7.0), which the shared-state tests keep state
/// in: `$TOOLCAGE_REDIS` when set, else
/// `target/redis-server/usr/bin/redis-server`, fetched and unpacked there
/// on first use with `redis-tools` (whose program it is) and its
/// libraries, never installed as a service nor the system's own.
pub fn redis_server() -> PathBuf {
    static REDIS: LazyLock<PathBuf> = LazyLock::new(|| {
        debian_binary(&DebianBinary {
            package: "redis-server",
            binary: "usr/bin/redis-server",
            variable: "TOOLCAGE_REDIS",
            purpose: "the shared-state tests",
            with: &["redis-tools", "libjemalloc2", "liblzf1"],
        })
    });
    REDIS.clone()
}

/// A Redis of one test's own on 127.0.0.1: a fresh port, nothing saved to
/// disk, a password; killed when dropped.
pub struct Redis {
    child: Option<std::process::Child>,
    /// Its port.
    pub port: u16,
    /// Its password.
    pub password: String,
}

impl Redis {
    /// Starts one, and waits until it answers.
    pub fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let mut redis = Redis {
            child: None,
            port,
            password: "redis-test-password-4c1d".to_string(),
        };
        redis.run();
        redis
    }

    /// Its URL, without the password.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills it (SIGKILL): what it held is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// Starts it again on its port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.run();
    }

    fn run(&mut self) {
        let binary = redis_server();
        let libraries = binary
            .parent()
            .and_then(Path::parent)
            .map(|usr| usr.join("lib/x86_64-linux-gnu"));
        let mut command = Command::new(&binary);
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--requirepass", &self.password])
            .stdout(std::process::Stdio::null());
        if let Some(libraries) = libraries.filter(|dir| dir.is_dir()) {
            command.env("LD_LIBRARY_PATH", libraries);
        }
        self.child = Some(command.spawn().expect("redis-server starts"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !self.answers() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not answer within 10 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Whether it answers `AUTH` and `PING`.
    fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let asked = format!("AUTH {}\r\nPING\r\n", self.password);
        if stream.write_all(asked.as_bytes()).is_err() {
            return false;
        }
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .ok();
        let mut answer = [0u8; 64];
        let mut read = 0;
        while read < 12 {
            match stream.read(&mut answer[read..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
        answer[..read].starts_with(b"+OK\r\n+PONG")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A program the client tests run from a Debian package, unpacked into
/// `target/<package>`.
struct DebianBinary {
    /// The package's name, and the directory under target/ it is unpacked in.
    package: &'static str,
    /// The program's path inside the package.
    binary: &'static str,
    /// The environment variable that names the program instead.
    variable: &'static str,
    /// Who needs it, for the error messages.
    purpose: &'static str,
    /// The packages it needs beside its own (its shared libraries),
    /// unpacked into the same directory.
    with: &'static [&'static str],
}

/// The program `wanted` describes: `$variable` when set, else
/// `target/<package>/<binary>`, fetched on first use.
fn debian_binary(wanted: &DebianBinary) -> PathBuf {
    if let Some(path) = std::env::var_os(wanted.variable) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{}={} is not a file",
            wanted.variable,
            path.display()
        );
        return path;
    }
    let exe = std::env::current_exe().expect("the test binary has a path");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let root = target.join(wanted.package);
    let binary = root.join(wanted.binary);
    if !root.exists() {
        fetch_debian_package(wanted, target, &root);
    }
    assert!(
        binary.is_file(),
        "{} holds no {}: remove it to fetch it again",
        root.display(),
        wanted.binary
    );
    binary
}

/// Downloads Debian's `wanted.package` and unpacks it as `root`.
fn fetch_debian_package(wanted: &DebianBinary, target: &Path, root: &Path) {
    let DebianBinary {
        package,
        binary,
        variable,
        purpose,
        with,
    } = wanted;
    let how = format!(
        "apt-get download {package} && dpkg-deb -x {package}_*.deb DIR, \
         then set {variable}=DIR/{binary}"
    );
    std::fs::create_dir_all(target).expect("create target/");
    let scratch = tempfile::Builder::new()
        .prefix(&format!(".{package}-"))
        .tempdir_in(target)
        .expect("a scratch directory in target/");
    let download = || {
        Command::new("apt-get")
            .args(["download", "-qq", package])
            .args(with.iter())
            .current_dir(scratch.path())
            .status()
            .is_ok_and(|status| status.success())
    };
    if !download() {
        // A fresh machine may have no package lists yet.
        let root_user = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
        let mut update = if root_user {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        let updated = update
            .args(["update", "-qq"])
            .status()
            .is_ok_and(|status| status.success());
        assert!(
            updated && download(),
            "cannot fetch Debian's {package} package for {purpose} \
             (apt-get update: {}); fetch it by hand: {how}",
            if updated { "ok" } else { "failed" }
        );
    }
    let debs: Vec<PathBuf> = std::fs::read_dir(scratch.path())
        .expect("read the scratch directory")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "deb"))
        .collect();
    assert!(
        !debs.is_empty(),
        "apt-get download left no .deb; fetch it by hand: {how}"
    );
    let unpacked = scratch.path().join("root");
    for deb in &debs {
        let status = Command::new("dpkg-deb")
            .arg("-x")
            .arg(deb)
            .arg(&unpacked)
            .status();
        assert!(
            status.as_ref().is_ok_and(|s| s.success()),
            "dpkg-deb -x {} failed ({status:?}); fetch it by hand: {how}",
            deb.display()
        );
    }
    assert!(unpacked.join(binary).is_file(), "{debs:?} hold no {binary}");
    // Another test process may have won the race: its copy is as good.
    if let Err(error) = std::fs::rename(&unpacked, root) {
        assert!(
            root.join(binary).is_file(),
            "cannot move {package} into {}: {error}",
            root.display()
        );
    }
}

/// The path of the `toolcage` binary, built once per test run.
pub fn toolcage_bin() -> &'static Path {
    &TOOLCAGE_BIN
}

/// What the benchmarks share: per-call figures, and driving `toolcage serve`.
pub mod bench {
    use std::future::Future;
    use std::io::{BufRead, BufReader, Read};
    use std::net::TcpStream;
    use std::path::PathBuf;
    use std::process::Command;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Per-call figures of one path with one number of callers.
    #[derive(Debug, Clone, Copy)]
    pub struct Figures {
        /// The median call's time.
        pub p50: Duration,
        /// The 99th percentile call's time.
        pub p99: Duration,
        /// Calls per second over the measured calls.
        pub per_second: f64,
    }

    impl Figures {
        /// A path not measured.
        pub const ZERO: Figures = Figures {
            p50: Duration::ZERO,
            p99: Duration::ZERO,
            per_second: 0.0,
        };
    }

    /// The runtime the benches measure on: 2 worker threads, one per core
    /// of the machine they were written for.
    pub fn two_workers() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio")
    }

    /// Runs `warm_up` calls, then `calls` calls split over `callers`
    /// concurrent tasks, and measures each.
    pub fn measure<F, Fut>(
        tokio: &tokio::runtime::Runtime,
        (warm_up, calls): (usize, usize),
        callers: usize,
        call: F,
    ) -> Figures
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let call = Arc::new(call);
        tokio.block_on(async {
            for _ in 0..warm_up {
                call().await;
            }
            let started = Instant::now();
            let tasks: Vec<_> = (0..callers)
                .map(|_| {
                    let call = call.clone();
                    tokio::spawn(async move {
                        let mut latencies = Vec::with_capacity(calls / callers);
                        for _ in 0..calls / callers {
                            let began = Instant::now();
                            call().await;
                            latencies.push(began.elapsed());
                        }
                        latencies
                    })
                })
                .collect();
            let mut latencies = Vec::with_capacity(calls);
            for task in tasks {
                latencies.extend(task.await.expect("the caller finished"));
            }
            let elapsed = started.elapsed();
            latencies.sort();
            Figures {
                p50: latencies[latencies.len() / 2],
                p99: latencies[latencies.len() * 99 / 100],
                per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
            }
        })
    }

    /// One HTTP/1.1 response's body, `Content-Length` or chunked.
    pub fn read_response(reader: &mut BufReader<TcpStream>) -> String {
        let mut length = None;
        let mut chunked = false;
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "{status}");
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end().to_ascii_lowercase();
            if line.is_empty() {
                break;
            }
            if let Some(value) = line.strip_prefix("content-length:") {
                length = value.trim().parse::<usize>().ok();
            }
            chunked |= line == "transfer-encoding: chunked";
        }
        let mut body = Vec::new();
        if let Some(length) = length {
            body.resize(length, 0);
            reader.read_exact(&mut body).unwrap();
        } else if chunked {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size).unwrap();
                let size = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; size + 2];
                reader.read_exact(&mut chunk).unwrap();
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        }
        String::from_utf8(body).unwrap()
    }

    /// Builds the release `toolcage` binary once, beside this benchmark; or
    /// `$TOOLCAGE_BENCH_BIN`, to compare another build in the same run.
    pub fn release_binary() -> PathBuf {
        if let Some(bin) = std::env::var_os("TOOLCAGE_BENCH_BIN") {
            return bin.into();
        }
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(|p| p.parent()).unwrap().to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--release",
                "--quiet",
                "-p",
                "toolcage",
                "--bin",
                "toolcage",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "building the release toolcage failed");
        profile_dir.join("toolcage")
    }
}

/// `stderr` of a toolcage command without the notes a load prints when
/// compiling takes over a second: they say how fast this machine compiled
/// (a cold cache, a busy CI runner), not what the command did.
pub fn without_slow_load_notes(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|line| {
            !line.starts_with("toolcage: compiling tool components")
                && !line.starts_with("toolcage: tools ready in ")
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

/// Compares `text` with the golden file at `path` (relative to the tests
/// crate), or writes it there under `BLESS=1` (then review the diff).
pub fn assert_golden(path: &str, text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    if std::env::var_os("BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with BLESS=1 to create it", path.display()));
    assert!(
        expected == text,
        "{} differs from the output; run with BLESS=1 to update it if the change is intended.\n--- expected\n{expected}\n--- actual\n{text}",
        path.display()
    );
}
