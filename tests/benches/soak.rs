//! Soak: a long run of calls through the library (`Registry::call`, in this
//! process) and through MCP over Streamable HTTP (`toolcage serve --http
//! --stateless`, release build, in a child process), recording the resident
//! memory (VmRSS) of the process doing the work every 10,000 calls. After a
//! warm-up (the first tenth of the calls) the RSS must stay within 10% of
//! its value at the end of the warm-up. Every call echoes a text of its own,
//! and every result is checked.
//!
//! Not run by CI. Run with
//! `cargo bench -p toolcage-tests --bench soak [-- --library N --http N --every N]`
//! (defaults: 1,000,000 library calls, 100,000 HTTP calls, a sample every
//! 10,000; `SOAK_LIBRARY`, `SOAK_HTTP` and `SOAK_EVERY` do the same). It
//! prints the samples and the ratios, and draws them in `target/soak.svg`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use toolcage::Registry;
use toolcage_tests::bench::{read_response, release_binary};
use toolcage_tests::guests;

/// Concurrent callers: as many as this machine's CI has cores, doubled.
const LIBRARY_CALLERS: usize = 4;
const HTTP_CLIENTS: usize = 4;
/// The target: RSS after warm-up within this factor of its value then.
const TARGET: f64 = 1.10;

struct Settings {
    library: usize,
    http: usize,
    every: usize,
}

impl Settings {
    fn parse() -> Settings {
        let env = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: not a number")))
                .unwrap_or(default)
        };
        let mut settings = Settings {
            library: env("SOAK_LIBRARY", 1_000_000),
            http: env("SOAK_HTTP", 100_000),
            every: env("SOAK_EVERY", 10_000),
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || -> usize {
                args.next()
                    .and_then(|v| v.replace('_', "").parse().ok())
                    .unwrap_or_else(|| panic!("{arg} needs a number"))
            };
            match arg.as_str() {
                "--library" => settings.library = value(),
                "--http" => settings.http = value(),
                "--every" => settings.every = value(),
                // What `cargo bench` passes to every bench.
                "--bench" => {}
                other => panic!("unknown argument {other}: expected --library, --http, --every"),
            }
        }
        assert!(settings.every > 0, "--every must be positive");
        settings
    }
}

/// RSS samples: (calls so far, KiB).
struct Series {
    name: &'static str,
    samples: Vec<(usize, u64)>,
    calls_per_second: f64,
}

impl Series {
    /// The sample at the end of the warm-up (the first tenth of the calls,
    /// and at least one sample in).
    fn baseline(&self) -> (usize, u64) {
        let total = self.samples.last().map_or(0, |s| s.0);
        *self
            .samples
            .iter()
            .find(|(calls, _)| *calls >= total / 10)
            .unwrap_or(&self.samples[0])
    }

    fn after_warm_up(&self) -> impl Iterator<Item = &(usize, u64)> {
        let from = self.baseline().0;
        self.samples.iter().filter(move |(calls, _)| *calls >= from)
    }

    fn max_ratio(&self) -> f64 {
        let base = self.baseline().1 as f64;
        self.after_warm_up()
            .map(|(_, kib)| *kib as f64 / base)
            .fold(0.0, f64::max)
    }

    fn last_ratio(&self) -> f64 {
        self.samples.last().unwrap().1 as f64 / self.baseline().1 as f64
    }

    fn report(&self) {
        println!("\n{}: {:.0} calls/s", self.name, self.calls_per_second);
        println!("{:>12} {:>10}", "calls", "RSS MiB");
        for (calls, kib) in &self.samples {
            println!("{calls:>12} {:>10.1}", *kib as f64 / 1024.0);
        }
        let (warm, base) = self.baseline();
        println!(
            "after warm-up ({warm} calls, {:.1} MiB): last/warm-up {:.3}, max/warm-up {:.3} (target <= {TARGET:.2}): {}",
            base as f64 / 1024.0,
            self.last_ratio(),
            self.max_ratio(),
            if self.max_ratio() <= TARGET {
                "within"
            } else {
                "OVER"
            }
        );
    }
}

fn main() {
    let settings = Settings::parse();
    let bin = release_binary();
    let library = library(&settings);
    library.report();
    let http = http(&bin, &settings);
    http.report();
    let svg = target_dir().join("soak.svg");
    std::fs::write(&svg, plot(&[&library, &http])).expect("write the plot");
    println!("\nplot: {}", svg.display());
    let over: Vec<&str> = [&library, &http]
        .iter()
        .filter(|s| s.max_ratio() > TARGET)
        .map(|s| s.name)
        .collect();
    if !over.is_empty() {
        eprintln!("RSS grew past {TARGET:.2}x after warm-up: {over:?}");
        std::process::exit(1);
    }
}

/// VmRSS of process `pid` (`self` for this one), in KiB.
fn rss_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

fn text(i: usize) -> String {
    format!("soak call {i}")
}

/// `settings.library` calls of `echo` through `Registry::call`, by
/// [`LIBRARY_CALLERS`] concurrent callers, sampling this process's RSS.
fn library(settings: &Settings) -> Series {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    tokio.block_on(async {
        let mut registry = Registry::builder().build().unwrap();
        assert!(registry.load_file(guests::FIXTURE_ECHO).await.is_ok());
        let registry = Arc::new(registry);
        let mut samples = Vec::new();
        let started = Instant::now();
        let mut done = 0;
        while done < settings.library {
            let batch = settings.every.min(settings.library - done);
            let callers: Vec<_> = (0..LIBRARY_CALLERS)
                .map(|caller| {
                    let registry = registry.clone();
                    tokio::spawn(async move {
                        for i in (done + caller..done + batch).step_by(LIBRARY_CALLERS) {
                            let result = registry
                                .call("echo", serde_json::json!({ "text": text(i) }))
                                .await;
                            assert!(!result.is_error, "call {i}: {}", result.output);
                            assert_eq!(result.output, text(i));
                        }
                    })
                })
                .collect();
            for caller in callers {
                caller.await.unwrap();
            }
            done += batch;
            samples.push((done, rss_kib("self")));
        }
        Series {
            name: "library Registry::call",
            samples,
            calls_per_second: done as f64 / started.elapsed().as_secs_f64(),
        }
    })
}

/// `settings.http` calls of `echo` through `toolcage serve --http
/// --stateless` from [`HTTP_CLIENTS`] keep-alive clients, sampling the
/// server's RSS.
fn http(bin: &Path, settings: &Settings) -> Series {
    let tools = tempfile::tempdir().expect("a temporary directory");
    std::fs::copy(guests::FIXTURE_ECHO, tools.path().join("echo.wasm")).unwrap();
    let mut child = Command::new(bin)
        .args(["--no-bundled", "--tools"])
        .arg(tools.path())
        .args(["serve", "--http", "127.0.0.1:0", "--stateless"])
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolcage serve --http starts");
    let pid = child.id().to_string();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the server exited"
        );
        if let Some(rest) = line.trim().strip_prefix("toolcage: serving MCP at http://") {
            break rest.trim_end_matches("/mcp").to_string();
        }
    };
    let mut connections: Vec<_> = (0..HTTP_CLIENTS).map(|_| Connection::open(&addr)).collect();
    let mut samples = Vec::new();
    let started = Instant::now();
    let mut done = 0;
    while done < settings.http {
        let batch = settings.every.min(settings.http - done);
        std::thread::scope(|scope| {
            for (client, connection) in connections.iter_mut().enumerate() {
                scope.spawn(move || {
                    for i in (done + client..done + batch).step_by(HTTP_CLIENTS) {
                        connection.call(i);
                    }
                });
            }
        });
        done += batch;
        samples.push((done, rss_kib(&pid)));
    }
    let calls_per_second = done as f64 / started.elapsed().as_secs_f64();
    drop(connections);
    // SIGTERM: a clean stop.
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    let status = child.wait().unwrap();
    assert!(status.success(), "the server stopped with {status}");
    Series {
        name: "MCP HTTP server (toolcage serve --http --stateless)",
        samples,
        calls_per_second,
    }
}

/// One keep-alive HTTP/1.1 connection, speaking JSON-RPC calls.
struct Connection {
    addr: String,
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Connection {
    fn open(addr: &str) -> Connection {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Connection {
            addr: addr.to_string(),
            stream,
            reader,
        }
    }

    /// Calls `echo` as JSON-RPC request `id` and checks the reply is its own.
    fn call(&mut self, id: usize) {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{}"}}}}}}"#,
            text(id)
        );
        write!(
            self.stream,
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .unwrap();
        let reply: serde_json::Value =
            serde_json::from_str(&read_response(&mut self.reader)).expect("a JSON reply");
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(
            reply["result"]["content"][0]["text"],
            text(id),
            "call {id}: {reply}"
        );
    }
}

/// The series as SVG: one panel each, RSS (MiB) against calls, with the
/// warm-up value and the 10% band drawn in.
fn plot(series: &[&Series]) -> String {
    const WIDTH: f64 = 760.0;
    const PANEL: f64 = 260.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 40.0;
    const TOP: f64 = 56.0;
    const BOTTOM: f64 = 45.0;
    let height = series.len() as f64 * (PANEL + TOP + BOTTOM);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
"#
    );
    for (n, s) in series.iter().enumerate() {
        let y0 = n as f64 * (PANEL + TOP + BOTTOM) + TOP;
        let plot_width = WIDTH - LEFT - RIGHT;
        let max_calls = s.samples.last().unwrap().0 as f64;
        let base = s.baseline().1 as f64 / 1024.0;
        let highest = s
            .samples
            .iter()
            .map(|(_, kib)| *kib as f64 / 1024.0)
            .fold(base * TARGET, f64::max);
        // From zero, so that the band's width is seen at its true scale.
        let top = (highest * 1.1 / 10.0).ceil() * 10.0;
        let x = |calls: f64| LEFT + calls / max_calls * plot_width;
        let y = |mib: f64| y0 + PANEL - mib / top * PANEL;
        svg += &format!(
            "<text x=\"{LEFT}\" y=\"{:.1}\" font-size=\"14\" font-weight=\"bold\">{}</text>\n<text x=\"{LEFT}\" y=\"{:.1}\">RSS every {} calls, {:.0} calls/s; after warm-up {:.1} MiB, last/warm-up {:.3}, max/warm-up {:.3}</text>\n",
            y0 - 30.0,
            s.name,
            y0 - 12.0,
            thousands(s.samples[0].0),
            s.calls_per_second,
            base,
            s.last_ratio(),
            s.max_ratio()
        );
        // Axes, with five ticks each.
        svg += &format!(
            "<path d=\"M{LEFT},{y0} V{:.1} H{:.1}\" fill=\"none\" stroke=\"black\"/>\n",
            y0 + PANEL,
            LEFT + plot_width
        );
        for tick in 0..=5 {
            let mib = top * tick as f64 / 5.0;
            let calls = max_calls * tick as f64 / 5.0;
            svg += &format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{mib:.0}</text>\n<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n",
                LEFT - 6.0,
                y(mib) + 4.0,
                LEFT + plot_width,
                y(mib),
                y(mib)
            );
            svg += &format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
                x(calls),
                y0 + PANEL + 16.0,
                thousands(calls as usize)
            );
        }
        svg += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">calls</text>\n<text x=\"16\" y=\"{:.1}\" transform=\"rotate(-90 16 {:.1})\" text-anchor=\"middle\">RSS (MiB)</text>\n",
            LEFT + plot_width / 2.0,
            y0 + PANEL + 34.0,
            y0 + PANEL / 2.0,
            y0 + PANEL / 2.0
        );
        // The warm-up value and the target above it.
        for (mib, colour, label) in [
            (base, "#888", "after warm-up"),
            (base * TARGET, "#c33", "+10%"),
        ] {
            svg += &format!(
                "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-dasharray=\"6 4\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{colour}\">{label}</text>\n",
                LEFT + plot_width,
                y(mib),
                y(mib),
                LEFT + plot_width - 4.0,
                y(mib) - 4.0
            );
        }
        let points: Vec<String> = s
            .samples
            .iter()
            .map(|(calls, kib)| format!("{:.1},{:.1}", x(*calls as f64), y(*kib as f64 / 1024.0)))
            .collect();
        svg += &format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"2\"/>\n",
            points.join(" ")
        );
    }
    svg += "</svg>\n";
    svg
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `target/`, where the plot goes: this bench runs from target/<profile>/deps.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .nth(3)
        .expect("target/<profile>/deps/<bench>")
        .to_path_buf()
}
