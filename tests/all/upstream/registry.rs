//! A server's tools among the others: first wins across components and
//! servers and survives reloads, its list changes swap its tools in (a
//! flood of them costs little), and it offers at most its cap of tools.

use std::time::{Duration, Instant};

use serde_json::json;
use toolcage::LiveRegistry;
use toolcage_tests::{assert_loaded, builder, guests};

use super::{hostile, live_with};

#[tokio::test]
async fn first_wins_across_components_and_servers_and_survives_reloads() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_ECHO, dir.path().join("echo.wasm")).unwrap();
    let base = builder().build().unwrap();
    let (live, reports) = LiveRegistry::load(base, [dir.path()]).await.unwrap();
    assert_loaded(&reports[0]);

    // An empty prefix names the server's `echo` exactly like the
    // component's tool: the component keeps it.
    let server = hostile("h").prefix("").unwrap();
    let report = live.load_mcp_server(&server).await;
    assert!(report.error.is_none(), "{report:?}");
    assert_eq!(report.shadowed.len(), 1, "{report:?}");
    assert_eq!(report.shadowed[0].tool, "echo");
    assert_eq!(report.shadowed[0].owner, "echo");
    assert!(
        report.registered.contains(&"crash".to_string()),
        "{report:?}"
    );

    let registry = live.current();
    assert_eq!(registry.tool("echo").unwrap().component, "echo");
    assert_eq!(registry.tool("environment").unwrap().component, "mcp:h");

    // A component arriving later with a name the server owns does not take
    // it, and a reload keeps every owner.
    std::fs::copy(guests::FIXTURE_ECHO, dir.path().join("zz_echo.wasm")).unwrap();
    live.reload().await;
    let registry = live.current();
    assert_eq!(registry.tool("echo").unwrap().component, "echo");
    assert_eq!(registry.tool("crash").unwrap().component, "mcp:h");
    let result = registry.call("echo", json!({ "text": "hi" })).await;
    assert_eq!(result.output, "hi", "{result:?}");
}

#[tokio::test]
async fn a_servers_list_changed_swaps_its_tools_in_and_a_flood_costs_little() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_ECHO, dir.path().join("echo.wasm")).unwrap();
    let (live, _) = LiveRegistry::load(builder().build().unwrap(), [dir.path()])
        .await
        .unwrap();
    // `echo` is the component's: the server's stays shadowed through every
    // change of its list.
    let server = hostile("h").prefix("").unwrap();
    assert!(live.load_mcp_server(&server).await.error.is_none());
    let mut changes = live.subscribe();
    let registry = live.current();
    assert!(registry.tool("added").is_none());

    let result = registry.call("change_tools", json!({ "add": true })).await;
    assert_eq!(result.output, "changed", "{result:?}");
    let change = tokio::time::timeout(Duration::from_secs(10), changes.recv())
        .await
        .expect("a change within 10 s")
        .unwrap();
    assert!(
        change.changes.iter().any(|c| c.tool == "added"),
        "{change:?}"
    );
    let registry = live.current();
    assert_eq!(registry.tool("added").unwrap().component, "mcp:h");
    assert_eq!(registry.tool("echo").unwrap().component, "echo");
    let result = registry.call("added", json!({})).await;
    assert_eq!(result.output, "added", "{result:?}");

    // A flood of notifications that change nothing: the server still
    // answers, and nothing in the registry changed.
    let started = Instant::now();
    let result = registry.call("flood", json!({ "count": 2000 })).await;
    assert_eq!(result.output, "flooded", "{result:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let result = live.current().call("pid", json!({})).await;
    assert!(!result.is_error, "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(changes.try_recv().is_err(), "no change from a flood");

    let result = registry.call("change_tools", json!({ "add": false })).await;
    assert_eq!(result.output, "changed", "{result:?}");
    tokio::time::timeout(Duration::from_secs(10), changes.recv())
        .await
        .expect("a change within 10 s")
        .unwrap();
    assert!(live.current().tool("added").is_none());
    assert_eq!(live.current().tool("echo").unwrap().component, "echo");
}

#[tokio::test]
async fn a_server_offers_at_most_its_cap_of_tools() {
    use toolcage::upstream::MAX_TOOLS_PER_SERVER;
    // 300 more tools than its own: refused whole, saying how to narrow it.
    let flooding = hostile("many").args(["many", "300"]);
    let mut registry = builder().build().unwrap();
    let report = registry.load_mcp_server(&flooding).await;
    let error = report.error.as_ref().expect("refused").to_string();
    assert!(
        error.contains(&format!("at most {MAX_TOOLS_PER_SERVER}"))
            && error.contains("`tools` or `exclude_tools`"),
        "{error}"
    );
    assert!(registry.tool("mcp__many__echo").is_none());

    // Narrowed by its patterns under the cap: it loads and serves.
    let narrowed = hostile("many")
        .args(["many", "300"])
        .exclude_tools(["many_2*"])
        .unwrap();
    let offered = registry.load_mcp_server(&narrowed).await;
    assert_loaded(&offered);
    assert!(offered.registered.len() <= MAX_TOOLS_PER_SERVER);
    let result = registry
        .call("mcp__many__echo", json!({ "text": "x" }))
        .await;
    assert_eq!(result.output, "x", "{result:?}");
}

#[tokio::test]
async fn a_list_grown_past_the_cap_keeps_the_tools_it_had() {
    let (live, _dir) = live_with(&hostile("h")).await;
    let mut changes = live.subscribe();
    let before = live.current().tools().len();

    // Within the cap: the new tools come in.
    let result = live
        .current()
        .call("mcp__h__grow", json!({ "count": 5 }))
        .await;
    assert_eq!(result.output, "grown", "{result:?}");
    tokio::time::timeout(Duration::from_secs(10), changes.recv())
        .await
        .expect("a change within 10 s")
        .unwrap();
    assert_eq!(live.current().tools().len(), before + 5);

    // Past it: no change, and the server's tools still answer.
    let result = live
        .current()
        .call("mcp__h__grow", json!({ "count": 400 }))
        .await;
    assert_eq!(result.output, "grown", "{result:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(changes.try_recv().is_err(), "no change past the cap");
    let registry = live.current();
    assert_eq!(registry.tools().len(), before + 5);
    assert!(registry.tool("mcp__h__many_004").is_some());
    let result = registry.call("mcp__h__echo", json!({ "text": "y" })).await;
    assert_eq!(result.output, "y", "{result:?}");
}
