//! What a stdio server gets of the host: an empty environment but for what
//! is named, secrets redacted from its answers and questions, and under
//! bubblewrap none of the host's files or network.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::json;
use toolcage::upstream::{Bubblewrap, EnvValue, UpstreamServer};
use toolcage::{CallOptions, Elicitation, ElicitationRequest, Mount, Secret, Secrets};
use toolcage_tests::{assert_loaded, bubblewrap, builder, clients_python};

use super::hostile;

#[tokio::test]
async fn the_environment_is_empty_but_for_what_is_named_and_secrets_are_redacted() {
    const TOKEN: &str = "tok-0123456789-abcdef";
    let secrets = Secrets::new();
    secrets.set(Secret::new("token", TOKEN).unwrap());
    let server = hostile("h")
        .env("MARKER", EnvValue::Text("hello".into()))
        .unwrap()
        .env("TOKEN", EnvValue::Secret("token".into()))
        .unwrap();
    let mut registry = builder().secrets(secrets).build().unwrap();
    assert_loaded(&registry.load_mcp_server(&server).await);

    let result = registry.call("mcp__h__environment", json!({})).await;
    assert!(!result.is_error, "{result:?}");
    let names: Vec<&str> = result
        .output
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    // Python may add a variable or two of its own (LC_CTYPE), never
    // toolcage's.
    assert!(
        names.contains(&"MARKER") && names.contains(&"TOKEN"),
        "{names:?}"
    );
    for inherited in ["HOME", "PATH", "CARGO_MANIFEST_DIR", "RUST_TEST_THREADS"] {
        assert!(!names.contains(&inherited), "{inherited} leaked: {names:?}");
    }
    assert!(result.output.contains("MARKER=hello"), "{}", result.output);
    assert!(!result.output.contains(TOKEN), "{}", result.output);
    assert!(result.net.redactions > 0, "{result:?}");
    let details = result.details.expect("structured content").to_string();
    assert!(!details.contains(TOKEN), "{details}");

    // Nor through a question to the user.
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let options = CallOptions::new().on_elicitation(move |question: ElicitationRequest| {
        seen.lock().unwrap().push(question.message);
        async { Elicitation::Decline }
    });
    let result = registry
        .call_with("mcp__h__ask_with", json!({ "variable": "TOKEN" }), options)
        .await;
    assert_eq!(result.output, "decline", "{result:?}");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(
        !asked[0].contains(TOKEN) && asked[0].ends_with(": what is your name?"),
        "{asked:?}"
    );

    // A secret that is not set is a start-up error naming it.
    let unset = hostile("u")
        .env("X", EnvValue::Secret("nope".into()))
        .unwrap();
    let report = registry.load_mcp_server(&unset).await;
    let error = report.error.expect("refused").to_string();
    assert!(error.contains("the secret `nope`"), "{error}");
}

/// The hostile server confined by bubblewrap, with what it needs to run
/// (its script, the virtualenv and the Python it was made from) mounted
/// read-only, and nothing else of the host's.
fn confined(name: &str) -> UpstreamServer {
    let python = clients_python();
    let venv = python
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    let real = std::fs::canonicalize(&python).unwrap();
    let base = real.parent().and_then(Path::parent).unwrap().to_path_buf();
    let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients");
    let mut bubblewrap = Bubblewrap::new().program(bubblewrap());
    for dir in [venv, base, scripts] {
        let guest = dir.to_string_lossy().into_owned();
        bubblewrap = bubblewrap.mount(Mount::read_only(&dir, guest));
    }
    hostile(name).bubblewrap(bubblewrap)
}

#[tokio::test]
async fn bubblewrap_confines_a_server_and_unconfined_it_could_reach_out() {
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "the host's own file").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let path = secret.to_string_lossy().into_owned();

    let mut registry = builder().build().unwrap();
    let reports = registry
        .load_mcp_servers(&[hostile("open"), confined("boxed")])
        .await;
    for report in &reports {
        assert_loaded(report);
    }
    let read = |name: &str| format!("mcp__{name}__read_file");
    let connect = |name: &str| format!("mcp__{name}__connect");

    let open = registry.call(&read("open"), json!({ "path": path })).await;
    assert_eq!(open.output, "the host's own file", "{open:?}");
    let boxed = registry.call(&read("boxed"), json!({ "path": path })).await;
    assert!(boxed.output.starts_with("error: "), "{boxed:?}");

    let open = registry
        .call(&connect("open"), json!({ "port": port }))
        .await;
    assert_eq!(open.output, "connected", "{open:?}");
    let boxed = registry
        .call(&connect("boxed"), json!({ "port": port }))
        .await;
    assert!(boxed.output.starts_with("error: "), "{boxed:?}");

    let boxed = registry.call("mcp__boxed__environment", json!({})).await;
    assert!(!boxed.output.contains("HOME="), "{boxed:?}");
    assert!(!boxed.output.contains("CARGO"), "{boxed:?}");
    drop(listener);
}
