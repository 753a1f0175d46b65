//! MCP's cost per call: `toolcage serve` (release build) over stdio with 1
//! and with 8 requests in flight, and over Streamable HTTP (stateless,
//! keep-alive) with 1 and with 8 concurrent clients, beside the library's own
//! `Registry::call` with 1 and 2 callers, in the same run, on the trivial
//! `constant` tool. The clients are minimal JSON-RPC writers, so the figures
//! are the server's. Each row is repeated against a floor (see [`floor`]),
//! the least server that can answer the same clients: what this machine's
//! pipes, sockets and wake-ups cost before any protocol work.
//!
//! Over stdio, where client and server run decides the p50 more than either
//! does: a reply that wakes a client sleeping on the other core pays for that
//! core's wake-up, which on a virtual machine costs more than the call, while
//! a client on the server's own core is only switched to. The scheduler picks
//! either from run to run, so the stdio row at 1 in flight is also measured
//! with client and server pinned to one core and to two (see [`Placement`]).
//!
//! Run with `cargo bench -p toolcage-tests --bench mcp`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolcage::Registry;
use toolcage_tests::bench::{read_response, release_binary};
use toolcage_tests::guests;

const CALLS: usize = 4_000;
/// More over HTTP, where 4,000 calls take well under a second.
const HTTP_CALLS: usize = 16_000;
const WARM_UP: usize = 300;

/// Set to `stdio` or `http`, this bench runs as the floor's server instead.
const FLOOR: &str = "TOOLCAGE_BENCH_FLOOR";

fn main() {
    if let Ok(transport) = std::env::var(FLOOR) {
        floor::serve(&transport);
        return;
    }
    let bin = release_binary();
    let tools = tempfile::tempdir().expect("a temporary directory");
    std::fs::copy(
        guests::FIXTURE_LEFTOVERS,
        tools.path().join("leftovers.wasm"),
    )
    .unwrap();
    let args = [
        "--no-bundled",
        "--tools",
        tools.path().to_str().unwrap(),
        "serve",
    ];

    println!(
        "{:<44} {:>9} {:>9} {:>11}",
        "path", "p50 µs", "p99 µs", "calls/s"
    );
    let (library_one, _) = library(1);
    let (library_two, two_per_second) = library(2);
    report(
        "library Registry::call, 1 caller",
        &library_one.0,
        library_one.1,
    );
    report(
        "library Registry::call, 2 callers",
        &library_two.0,
        two_per_second,
    );

    let toolcage = || {
        let mut command = Command::new(&bin);
        command.args(args);
        command
    };
    let toolcage_http = || {
        let mut command = toolcage();
        command.args(["--http", "127.0.0.1:0", "--stateless"]);
        command
    };
    let floor = |transport: &str| {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command.env(FLOOR, transport);
        command
    };

    let (one, one_per_second, eight, eight_per_second) = stdio_rows(toolcage());
    report("MCP stdio, 1 in flight", &one, one_per_second);
    report("MCP stdio, 8 in flight", &eight, eight_per_second);
    let (floor_one, floor_one_per_second, floor_eight, floor_eight_per_second) =
        stdio_rows(floor("stdio"));
    report("floor stdio, 1 in flight", &floor_one, floor_one_per_second);
    report(
        "floor stdio, 8 in flight",
        &floor_eight,
        floor_eight_per_second,
    );
    let mut pinned = Vec::new();
    for placement in [Placement::OneCore, Placement::TwoCores] {
        let Some(cores) = placement.cores() else {
            println!(
                "(stdio {}: not measured, fewer than two cores)",
                placement.label()
            );
            continue;
        };
        let label = placement.label();
        let (toolcage_one, per_second) = stdio_pinned(toolcage(), cores);
        report(
            &format!("MCP stdio, 1 in flight, {label}"),
            &toolcage_one,
            per_second,
        );
        let (floor_one, per_second) = stdio_pinned(floor("stdio"), cores);
        report(
            &format!("floor stdio, 1 in flight, {label}"),
            &floor_one,
            per_second,
        );
        pinned.push((label, toolcage_one, floor_one));
    }

    let (http_one, one_client_per_second) = http_clients(toolcage_http(), 1);
    report(
        "MCP HTTP, 1 keep-alive client",
        &http_one,
        one_client_per_second,
    );
    let (http, per_second) = http_clients(toolcage_http(), 8);
    report("MCP HTTP, 8 keep-alive clients", &http, per_second);
    let (floor_http_one, floor_http_one_per_second) = http_clients(floor("http"), 1);
    report(
        "floor HTTP, 1 keep-alive client",
        &floor_http_one,
        floor_http_one_per_second,
    );
    let (floor_http, floor_http_per_second) = http_clients(floor("http"), 8);
    report(
        "floor HTTP, 8 keep-alive clients",
        &floor_http,
        floor_http_per_second,
    );

    let above = |latencies: &[Duration], baseline: &[Duration]| {
        median(latencies).as_secs_f64() * 1e6 - median(baseline).as_secs_f64() * 1e6
    };
    println!("\ntargets, as ratios to the library in this run (the floor's own in brackets):");
    println!(
        "  stdio p50 above the library's, 1 in flight: {:.1} µs [{:.1}] (target <= 25)",
        above(&one, &library_one.0),
        above(&floor_one, &library_one.0),
    );
    for (label, toolcage_one, floor_one) in &pinned {
        println!(
            "    {label}: {:.1} µs [{:.1}]",
            above(toolcage_one, &library_one.0),
            above(floor_one, &library_one.0),
        );
    }
    println!(
        "  stdio p99 / the library's p99, 1 in flight: {:.2} [{:.2}] (target <= 3)",
        p99(&one).as_secs_f64() / p99(&library_one.0).as_secs_f64(),
        p99(&floor_one).as_secs_f64() / p99(&library_one.0).as_secs_f64(),
    );
    println!(
        "  stdio calls/s with 8 in flight / library with 2 callers: {:.2} [{:.2}] (target >= 0.7)",
        eight_per_second / two_per_second,
        floor_eight_per_second / two_per_second,
    );
    println!(
        "  HTTP calls/s with 8 clients / library with 2 callers: {:.2} [{:.2}] (target >= 0.4)",
        per_second / two_per_second,
        floor_http_per_second / two_per_second,
    );
    println!("toolcage against the floor:");
    println!(
        "  stdio p50 above the floor's, 1 in flight: {:.1} µs; calls/s with 8 in flight: {:.2}x the floor's",
        above(&one, &floor_one),
        eight_per_second / floor_eight_per_second,
    );
    for (label, toolcage_one, floor_one) in &pinned {
        println!("    {label}: {:.1} µs", above(toolcage_one, floor_one));
    }
    println!(
        "  HTTP p50 above the floor's, 1 client: {:.1} µs; calls/s with 8 clients: {:.2}x the floor's",
        above(&http_one, &floor_http_one),
        per_second / floor_http_per_second,
    );
}

/// A warm-up, then 1 and 8 requests in flight on one stdio connection.
fn stdio_rows(server: Command) -> (Vec<Duration>, f64, Vec<Duration>, f64) {
    let mut stdio = StdioClient::start(server);
    stdio.run(WARM_UP, 1);
    let (one, one_per_second) = stdio.run(CALLS, 1);
    let (eight, eight_per_second) = stdio.run(CALLS, 8);
    stdio.stop();
    (one, one_per_second, eight, eight_per_second)
}

/// Where a pinned stdio row runs its client and its server.
#[derive(Clone, Copy)]
enum Placement {
    /// Both on one core: each reply switches to the client on that core.
    OneCore,
    /// Each on its own core: each reply wakes the client's core.
    TwoCores,
}

impl Placement {
    fn label(self) -> &'static str {
        match self {
            Placement::OneCore => "pinned to one core",
            Placement::TwoCores => "pinned to two cores",
        }
    }

    /// The client's core and the server's, from those this bench may use.
    fn cores(self) -> Option<(usize, usize)> {
        let allowed = affinity();
        let mut cores = (0..libc::CPU_SETSIZE as usize).filter(|&core| {
            // SAFETY: `core` is below CPU_SETSIZE, within the set.
            #[allow(unsafe_code)]
            unsafe {
                libc::CPU_ISSET(core, &allowed)
            }
        });
        let (client, other) = (cores.next()?, cores.next()?);
        match self {
            Placement::OneCore => Some((client, client)),
            Placement::TwoCores => Some((client, other)),
        }
    }
}

/// The cores the calling thread may run on.
fn affinity() -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is an empty set; the call fills it.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_getaffinity(0, size, &mut set), 0);
        set
    }
}

/// Lets the calling thread (and the processes it starts) run only on `cores`.
fn set_affinity(cores: &libc::cpu_set_t) {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: a valid set of the size given.
    #[allow(unsafe_code)]
    let set = unsafe { libc::sched_setaffinity(0, size, cores) };
    assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
}

/// One core as a set.
fn only(core: usize) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is an empty set; `core` is below
    // CPU_SETSIZE (it came from one).
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        set
    }
}

/// A warm-up, then 1 request in flight, with the server started on the
/// second of `cores` (it inherits this thread's affinity) and this thread,
/// the client, on the first; the affinity is restored after.
fn stdio_pinned(server: Command, (client, server_core): (usize, usize)) -> (Vec<Duration>, f64) {
    let allowed = affinity();
    set_affinity(&only(server_core));
    let mut stdio = StdioClient::start(server);
    set_affinity(&only(client));
    stdio.run(WARM_UP, 1);
    let row = stdio.run(CALLS, 1);
    stdio.stop();
    set_affinity(&allowed);
    row
}

fn report(label: &str, latencies: &[Duration], per_second: f64) {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    println!(
        "{label:<44} {:>9.1} {:>9.1} {:>11.0}",
        sorted[sorted.len() / 2].as_secs_f64() * 1e6,
        sorted[sorted.len() * 99 / 100].as_secs_f64() * 1e6,
        per_second
    );
}

fn p99(latencies: &[Duration]) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    sorted[sorted.len() * 99 / 100]
}

fn median(latencies: &[Duration]) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// `Registry::call` with `callers` concurrent callers.
fn library(callers: usize) -> ((Vec<Duration>, f64), f64) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    tokio.block_on(async {
        let mut registry = Registry::builder().build().unwrap();
        assert!(registry.load_file(guests::FIXTURE_LEFTOVERS).await.is_ok());
        let registry = Arc::new(registry);
        for _ in 0..WARM_UP {
            registry.call("constant", "{}").await;
        }
        let started = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let registry = registry.clone();
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    for _ in 0..CALLS / callers {
                        let began = Instant::now();
                        let result = registry.call("constant", "{}").await;
                        assert_eq!(result.output, "ok");
                        latencies.push(began.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.unwrap());
        }
        let per_second = latencies.len() as f64 / started.elapsed().as_secs_f64();
        ((latencies, per_second), per_second)
    })
}

fn call(id: usize) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"constant","arguments":{{}}}}}}"#
    )
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;

struct StdioClient {
    child: Child,
    input: std::process::ChildStdin,
    output: BufReader<std::process::ChildStdout>,
    next_id: usize,
}

impl StdioClient {
    fn start(mut server: Command) -> Self {
        let mut child = server
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("toolcage serve starts");
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        let mut client = StdioClient {
            child,
            input,
            output,
            next_id: 1,
        };
        client.send(INITIALIZE);
        client.receive();
        client.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        client
    }

    fn send(&mut self, line: &str) {
        self.input.write_all(line.as_bytes()).unwrap();
        self.input.write_all(b"\n").unwrap();
        self.input.flush().unwrap();
    }

    /// The id of the next response.
    fn receive(&mut self) -> usize {
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        let message: serde_json::Value = serde_json::from_str(&line).expect("a JSON-RPC message");
        assert!(message.get("error").is_none(), "{message}");
        message["id"].as_u64().expect("a response") as usize
    }

    /// `calls` calls, keeping `in_flight` outstanding.
    fn run(&mut self, calls: usize, in_flight: usize) -> (Vec<Duration>, f64) {
        let started = Instant::now();
        let mut sent: HashMap<usize, Instant> = HashMap::new();
        let mut latencies = Vec::with_capacity(calls);
        let (mut issued, mut done) = (0, 0);
        while done < calls {
            while issued < calls && sent.len() < in_flight {
                let id = self.next_id;
                self.next_id += 1;
                sent.insert(id, Instant::now());
                self.send(&call(id));
                issued += 1;
            }
            let id = self.receive();
            latencies.push(sent.remove(&id).expect("a known id").elapsed());
            done += 1;
        }
        let per_second = calls as f64 / started.elapsed().as_secs_f64();
        (latencies, per_second)
    }

    fn stop(mut self) {
        drop(self.input);
        self.child.wait().unwrap();
    }
}

/// `clients` threads, each with one keep-alive connection, calling in turn.
fn http_clients(mut server: Command, clients: usize) -> (Vec<Duration>, f64) {
    let mut child = server
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolcage serve --http starts");
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
    let run = |calls: usize| {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut connection = TcpStream::connect(&addr).unwrap();
            connection.set_nodelay(true).unwrap();
            let mut reader = BufReader::new(connection.try_clone().unwrap());
            let mut latencies = Vec::with_capacity(calls);
            for id in 0..calls {
                let body = call(id + 1);
                let began = Instant::now();
                // One write per request, as HTTP clients do (`write!` on the
                // socket would send each piece as a segment of its own).
                let request = format!(
                    "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                connection.write_all(request.as_bytes()).unwrap();
                let response = read_response(&mut reader);
                assert!(response.contains("\"ok\""), "{response}");
                latencies.push(began.elapsed());
            }
            latencies
        })
    };
    for handle in (0..clients)
        .map(|_| run(WARM_UP / clients))
        .collect::<Vec<_>>()
    {
        handle.join().unwrap();
    }
    let started = Instant::now();
    let handles: Vec<_> = (0..clients).map(|_| run(HTTP_CALLS / clients)).collect();
    let mut latencies = Vec::new();
    for handle in handles {
        latencies.extend(handle.join().unwrap());
    }
    let per_second = latencies.len() as f64 / started.elapsed().as_secs_f64();
    child.kill().ok();
    child.wait().ok();
    (latencies, per_second)
}

/// The floor: the least a server can do to answer these requests on this
/// machine, run by the bench itself as a child process with the same clients
/// and the same library call. It takes no MCP SDK, checks nothing, and answers
/// every request with a fixed `initialize` result or the call's output: over
/// stdio a line loop on one thread that watches its input for 100 µs before it
/// sleeps (as `toolcage serve` does), over HTTP a plain hyper server on a
/// two-worker runtime. What toolcage costs above it is what its protocol
/// handling, checks and scheduling cost; what the floor costs above the
/// library is the pipe, the socket and the wake-ups of this machine.
mod floor {
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::AsFd;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use serde_json::{Value, json};
    use toolcage::Registry;
    use toolcage_tests::guests;

    pub fn serve(transport: &str) {
        match transport {
            "stdio" => stdio(),
            "http" => http(),
            other => panic!("no floor for {other}"),
        }
    }

    async fn registry() -> Registry {
        let mut registry = Registry::builder().build().unwrap();
        assert!(registry.load_file(guests::FIXTURE_LEFTOVERS).await.is_ok());
        registry
    }

    /// The answer to one JSON-RPC request, or `None` for a notification.
    async fn answer(registry: &Registry, request: &[u8]) -> Option<Vec<u8>> {
        let request: Value = serde_json::from_slice(request).unwrap();
        let id = request.get("id")?;
        let result = match request["method"].as_str() {
            Some("tools/call") => {
                let params = &request["params"];
                let name = params["name"].as_str().unwrap();
                let result = registry.call(name, params["arguments"].clone()).await;
                json!({
                    "content": [{ "type": "text", "text": result.output }],
                    "isError": result.is_error,
                })
            }
            _ => json!({
                "protocolVersion": "2025-06-18",
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "floor", "version": "1" },
            }),
        };
        Some(serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": id, "result": result })).unwrap())
    }

    fn stdio() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let registry = runtime.block_on(registry());
        let input = std::io::stdin().as_fd().try_clone_to_owned().unwrap();
        let mut input = BufReader::new(std::fs::File::from(input));
        let mut output = std::io::stdout().lock();
        let mut line = Vec::new();
        loop {
            if input.buffer().is_empty() {
                await_input(Duration::from_micros(100));
            }
            line.clear();
            if input.read_until(b'\n', &mut line).unwrap() == 0 {
                return;
            }
            if let Some(mut answer) = runtime.block_on(answer(&registry, &line)) {
                answer.push(b'\n');
                output.write_all(&answer).unwrap();
                output.flush().unwrap();
            }
        }
    }

    /// Returns once standard input has something to read, or after `limit`.
    fn await_input(limit: Duration) {
        let until = Instant::now() + limit;
        let mut input = libc::pollfd {
            fd: libc::STDIN_FILENO,
            events: libc::POLLIN,
            revents: 0,
        };
        while Instant::now() < until {
            // SAFETY: one valid `pollfd`, and a zero timeout.
            #[allow(unsafe_code)]
            if unsafe { libc::poll(&mut input, 1, 0) } != 0 {
                return;
            }
            std::hint::spin_loop();
        }
    }

    fn http() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let registry = Arc::new(registry().await);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            eprintln!(
                "toolcage: serving MCP at http://{}/mcp",
                listener.local_addr().unwrap()
            );
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                stream.set_nodelay(true).unwrap();
                let registry = registry.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: hyper::Request<hyper::body::Incoming>| {
                            let registry = registry.clone();
                            async move {
                                let body = request.into_body().collect().await?.to_bytes();
                                let answer = answer(&registry, &body).await.unwrap_or_default();
                                Ok::<_, hyper::Error>(
                                    hyper::Response::builder()
                                        .header("content-type", "application/json")
                                        .body(Full::new(Bytes::from(answer)))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let io = hyper_util::rt::TokioIo::new(stream);
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await
                        .ok();
                });
            }
        });
    }
}
