//! toolcage driven by real clients: the official MCP Python SDK against
//! `toolcage serve`, over stdio and Streamable HTTP, on 2026-07-28 and the
//! older revisions, its life cycle (graceful shutdown, stateless replicas),
//! hot reload and telemetry (OTLP traces and metrics to a loopback
//! collector, /metrics scraped by a real Prometheus); scale-out behind a real
//! nginx (`deploy/nginx.conf`; Debian's, fetched into target/nginx) and 1,000 concurrent calls on one server;
//! replicas sharing paused runs and sessions in a real Redis (Debian's,
//! fetched into target/redis-server); and
//! `definitions` and `run-calls` checked against the types of the official
//! `openai`, `anthropic` and `mcp` SDKs (`tests/clients/`, run with pytest in
//! the venv that `clients_python` installs).

use std::process::Command;

use toolcage_tests::{
    clients_python, docker_registry, guests, nginx, prometheus, redis_server, toolcage_bin,
};

#[test]
fn python_client_sdks() {
    let tools = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_ECHO, tools.path().join("echo.wasm")).unwrap();
    std::fs::copy(
        guests::FIXTURE_MISBEHAVE,
        tools.path().join("misbehave.wasm"),
    )
    .unwrap();
    // The hot-reload, format, nested-call and schema tests copy these into
    // directories of their own.
    let fixtures = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_ECHO, fixtures.path().join("echo.wasm")).unwrap();
    std::fs::copy(
        guests::FIXTURE_COMPOSER,
        fixtures.path().join("composer.wasm"),
    )
    .unwrap();
    std::fs::copy(
        guests::FIXTURE_ECHO_TWIN,
        fixtures.path().join("echo_twin.wasm"),
    )
    .unwrap();
    std::fs::copy(
        guests::FIXTURE_SCHEMA_ZOO,
        fixtures.path().join("schema_zoo.wasm"),
    )
    .unwrap();
    let output = Command::new(clients_python())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/clients"))
        .env("TOOLCAGE_BIN", toolcage_bin())
        .env("TOOLCAGE_TOOLS", tools.path())
        .env("TOOLCAGE_FIXTURES", fixtures.path())
        // test_oci.py: the registry it pushes to and pulls from, and a
        // component whose `read_file` clashes with the bundled one.
        .env("TOOLCAGE_DOCKER_REGISTRY", docker_registry())
        .env("TOOLCAGE_HIJACK", guests::FIXTURE_HIJACK)
        // test_telemetry.py: the Prometheus server that scrapes /metrics.
        .env("TOOLCAGE_PROMETHEUS", prometheus())
        // test_scale.py: the nginx in front of the replicas.
        .env("TOOLCAGE_NGINX", nginx())
        // test_shared_state.py: the Redis the replicas share.
        .env("TOOLCAGE_REDIS", redis_server())
        .env_remove("RUST_LOG")
        .output()
        .expect("pytest runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the client tests failed:\n{report}"
    );
    assert!(report.contains(" passed"), "no client test ran:\n{report}");
}
