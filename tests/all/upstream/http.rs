//! A remote server over Streamable HTTP: reached only as the egress policy
//! grants, its secret header never shown (in answers, listings, the CLI's
//! output or its log), its list changes followed as a stdio server's are.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use toolcage::ErrorKind;
use toolcage::upstream::UpstreamServer;
use toolcage::{Cidr, Grant, LiveRegistry, Secret, Secrets};
use toolcage_tests::{assert_error, assert_loaded, builder, clients_python, toolcage};

/// `upstream_server.py` over Streamable HTTP on 127.0.0.1: its port, and
/// the process (killed when dropped).
struct Remote {
    port: u16,
    process: std::process::Child,
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.process.kill().ok();
        self.process.wait().ok();
    }
}

fn remote() -> Remote {
    remote_answering("sse")
}

/// `remote()`, its answers as SSE streams (`sse`) or JSON bodies (`json`).
fn remote_answering(mode: &str) -> Remote {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/upstream_server.py");
    let process = std::process::Command::new(clients_python())
        .arg(script)
        .args(["http", &port.to_string(), mode])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the server starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the server listens within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Remote { port, process }
}

#[tokio::test]
async fn a_remote_server_is_reached_only_as_granted_and_its_secret_never_shows() {
    const TOKEN: &str = "tok-remote-0123456789";
    let remote = remote();
    let port = remote.port;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let grant = |pattern: String| Grant::parse(&pattern).unwrap();

    // Not granted: refused before anything is sent.
    let mut registry = builder().build().unwrap();
    let report = registry
        .load_mcp_server(&UpstreamServer::http("r", &url).unwrap())
        .await;
    let error = report.error.expect("refused").to_string();
    assert!(error.contains("is not granted"), "{error}");

    // Granted by its address: its tools serve, the bearer token goes with
    // every request and never comes back.
    let secrets = Secrets::new();
    secrets.set(Secret::new("token", TOKEN).unwrap());
    let mut registry = builder()
        .secrets(secrets)
        .allow_net(grant(format!("http://127.0.0.1:{port}")))
        .build()
        .unwrap();
    let server = UpstreamServer::http("r", &url)
        .unwrap()
        .header("Authorization", "Bearer {{ secrets.token }}")
        .unwrap();
    assert_loaded(&registry.load_mcp_server(&server).await);
    let result = registry
        .call("mcp__r__echo", json!({ "text": "over http" }))
        .await;
    assert_eq!(result.output, "over http", "{result:?}");
    let result = registry.call("mcp__r__authorization", json!({})).await;
    assert!(result.output.starts_with("Bearer "), "{result:?}");
    assert!(!result.output.contains(TOKEN), "{result:?}");
    assert!(!format!("{:?}", result.details).contains(TOKEN));
    assert!(result.net.redactions > 0, "{result:?}");
    let listed = serde_json::to_string(&registry.tools().collect::<Vec<_>>()).unwrap();
    assert!(!listed.contains(TOKEN));

    // A granted name that resolves into a private range is refused unless
    // `allow_private` lets names resolve there.
    let named = format!("http://mcp.test:{port}/mcp");
    let to_loopback = |name: &str| -> std::io::Result<Vec<std::net::IpAddr>> {
        match name {
            "mcp.test" => Ok(vec!["127.0.0.1".parse().unwrap()]),
            _ => Err(std::io::ErrorKind::NotFound.into()),
        }
    };
    let mut registry = builder()
        .resolver(to_loopback)
        .allow_net(grant(format!("http://mcp.test:{port}")))
        .build()
        .unwrap();
    let server = UpstreamServer::http("n", &named).unwrap();
    let error = registry
        .load_mcp_server(&server)
        .await
        .error
        .expect("refused");
    assert!(
        error.to_string().contains("resolves to 127.0.0.1"),
        "{error}"
    );
    let mut registry = builder()
        .resolver(to_loopback)
        .allow_net(grant(format!("http://mcp.test:{port}")))
        .allow_private("127.0.0.0/8".parse::<Cidr>().unwrap())
        .build()
        .unwrap();
    assert_loaded(&registry.load_mcp_server(&server).await);
    let result = registry
        .call("mcp__n__echo", json!({ "text": "by name" }))
        .await;
    assert_eq!(result.output, "by name", "{result:?}");
}

#[test]
fn the_cli_reaches_a_remote_server_and_its_token_shows_in_no_output_or_log() {
    const TOKEN: &str = "tok-cli-0123456789abcdef";
    let remote = remote();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolcage.toml");
    std::fs::write(
        &config,
        format!(
            "[network]\nallow = [\"http://127.0.0.1:{port}\"]\n[secrets.token]\nenv = \"REMOTE_TOKEN\"\n[mcp_servers.r]\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer {{{{ secrets.token }}}}\" }}\n",
            port = remote.port
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let output = toolcage()
            .arg("--config")
            .arg(&config)
            .args(["--no-bundled", "--log-level", "trace"])
            .args(args)
            .env("REMOTE_TOKEN", TOKEN)
            .output()
            .expect("toolcage runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
            "{stdout}\n{stderr}"
        );
        (output.status.success(), stdout)
    };
    let (ok, listed) = run(&["list"]);
    assert!(ok && listed.contains("mcp__r__authorization"), "{listed}");
    let (ok, shown) = run(&["inspect", "mcp__r__echo"]);
    assert!(ok && shown.contains("mcp:r"), "{shown}");
    let (ok, answer) = run(&["call", "mcp__r__authorization", "{}"]);
    assert!(ok && answer.contains("Bearer "), "{answer}");
    // The same server from the command line alone.
    let url = format!("r=http://127.0.0.1:{}/mcp", remote.port);
    let grant = format!("http://127.0.0.1:{}", remote.port);
    let output = toolcage()
        .args(["--no-bundled", "--allow-net", &grant, "--mcp-server", &url])
        .args(["call", "mcp__r__echo", r#"{"text": "flag"}"#])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "flag",
        "{output:?}"
    );
}

#[tokio::test]
async fn a_remote_servers_list_changed_swaps_its_tools_in_too() {
    let remote = remote();
    let port = remote.port;
    let base = builder()
        .allow_net(Grant::parse(&format!("http://127.0.0.1:{port}")).unwrap())
        .build()
        .unwrap();
    let live = LiveRegistry::from(base);
    let server = UpstreamServer::http("r", &format!("http://127.0.0.1:{port}/mcp")).unwrap();
    assert!(live.load_mcp_server(&server).await.error.is_none());
    let mut changes = live.subscribe();
    let result = live
        .current()
        .call("mcp__r__change_tools", json!({ "add": true }))
        .await;
    assert_eq!(result.output, "changed", "{result:?}");
    tokio::time::timeout(Duration::from_secs(10), changes.recv())
        .await
        .expect("a change within 10 s")
        .unwrap();
    let result = live.current().call("mcp__r__added", json!({})).await;
    assert_eq!(result.output, "added", "{result:?}");
}

/// A remote server answering more than toolcage reads of one message, as
/// an SSE event or a JSON body: the call ends as `output_limit` naming the
/// limit, and the same session answers the next call at once.
#[tokio::test]
async fn a_remote_answer_too_long_to_read_is_an_output_limit_and_the_server_stays_up() {
    for mode in ["sse", "json"] {
        let remote = remote_answering(mode);
        let port = remote.port;
        let mut registry = builder()
            .allow_net(Grant::parse(&format!("http://127.0.0.1:{port}")).unwrap())
            .build()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}/mcp");
        let server = UpstreamServer::http("r", &url)
            .unwrap()
            .output_bytes(256 << 10);
        assert_loaded(&registry.load_mcp_server(&server).await);
        let pid = registry.call("mcp__r__pid", json!({})).await;
        assert!(!pid.is_error, "{mode}: {pid:?}");

        // Within the limit; over it but readable; too long to read.
        let result = registry.call("mcp__r__echo", json!({ "text": "hi" })).await;
        assert_eq!(result.output, "hi", "{mode}: {result:?}");
        let result = registry
            .call("mcp__r__huge", json!({ "mebibytes": 1 }))
            .await;
        assert_error(&result, ErrorKind::OutputLimit);
        assert!(
            result.output.contains("limit of 256 KiB"),
            "{}",
            result.output
        );
        let started = Instant::now();
        let result = registry
            .call("mcp__r__huge", json!({ "mebibytes": 20 }))
            .await;
        assert_error(&result, ErrorKind::OutputLimit);
        assert!(
            result.output.contains("dropped unread") && result.output.contains("256 KiB"),
            "{mode}: {}",
            result.output
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{mode}: at once"
        );
        let again = registry.call("mcp__r__pid", json!({})).await;
        assert_eq!(again.output, pid.output, "{mode}: {again:?}");
    }
}
