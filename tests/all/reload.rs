//! Live tool directories: reloads swap whole snapshots, a name keeps its
//! owner while the registry runs, bad versions never replace good ones, and
//! a watcher waits for files to be complete.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use toolcage::{ChangeKind, ErrorKind, LiveRegistry, ReloadReport, WatchOptions};
use toolcage_tests::{
    assert_error, assert_loaded, builder, guests, quick_limits, with_custom_section,
};

/// `guest`'s bytes with a custom section carrying `n`: another content (and
/// hash), the same behaviour.
fn version(guest: &str, n: u32) -> Vec<u8> {
    let bytes = std::fs::read(guest).unwrap();
    with_custom_section(bytes, "toolcage-test-version", &n.to_le_bytes())
}

/// Writes `bytes` to `dir/name` the safe way: elsewhere, then renamed in.
fn put(dir: &Path, name: &str, bytes: &[u8]) {
    let staging = dir.join(format!(".{name}.part"));
    std::fs::write(&staging, bytes).unwrap();
    std::fs::rename(staging, dir.join(name)).unwrap();
}

fn copy(dir: &Path, name: &str, guest: &str) {
    put(dir, name, &std::fs::read(guest).unwrap());
}

/// A live registry over `dir`, with the bundled tools first if `bundled`.
async fn live(dir: &Path, bundled: bool) -> LiveRegistry {
    live_with(dir, bundled, quick_limits()).await
}

async fn live_with(dir: &Path, bundled: bool, limits: toolcage::Limits) -> LiveRegistry {
    let mut base = builder().limits(limits).build().unwrap();
    if bundled {
        base.load_bundled().await.iter().for_each(assert_loaded);
    }
    let (live, reports) = LiveRegistry::load(base, [dir]).await.unwrap();
    reports.iter().for_each(assert_loaded);
    live
}

fn owner(live: &LiveRegistry, tool: &str) -> Option<String> {
    live.current().tool(tool).map(|info| info.component.clone())
}

fn changes(report: &ReloadReport, kind: ChangeKind) -> Vec<String> {
    let mut tools: Vec<String> = report
        .changes
        .iter()
        .filter(|c| c.kind == kind)
        .map(|c| c.tool.clone())
        .collect();
    tools.sort();
    tools
}

#[tokio::test]
async fn a_new_file_never_takes_a_bundled_name_live_or_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let live = live(dir.path(), true).await;
    assert_eq!(owner(&live, "read_file").as_deref(), Some("fs"));

    // Named to sort before everything, offering the bundled `read_file`.
    copy(dir.path(), "0_read_file.wasm", guests::FIXTURE_HIJACK);
    let report = live.reload().await;
    assert!(!report.changed(), "{report:?}");
    assert_eq!(report.loaded.len(), 1);
    assert_eq!(report.loaded[0].shadowed[0].tool, "read_file");
    assert_eq!(report.loaded[0].shadowed[0].owner, "fs");
    assert_eq!(owner(&live, "read_file").as_deref(), Some("fs"));

    let restarted = self::live(dir.path(), true).await;
    assert_eq!(owner(&restarted, "read_file").as_deref(), Some("fs"));
}

#[tokio::test]
async fn a_new_file_takes_only_free_names_while_a_restart_goes_by_load_order() {
    let dir = tempfile::tempdir().unwrap();
    copy(dir.path(), "b_echo.wasm", guests::FIXTURE_ECHO);
    let live = live(dir.path(), false).await;
    assert_eq!(owner(&live, "echo").as_deref(), Some("b_echo"));

    // Sorts first and offers `echo` (taken) and `twin_only` (free).
    copy(dir.path(), "a_twin.wasm", guests::FIXTURE_ECHO_TWIN);
    let report = live.reload().await;
    assert_eq!(changes(&report, ChangeKind::Added), ["twin_only"]);
    assert!(changes(&report, ChangeKind::Replaced).is_empty());
    assert_eq!(report.loaded[0].registered, ["twin_only"]);
    assert_eq!(report.loaded[0].shadowed[0].tool, "echo");
    assert_eq!(report.loaded[0].shadowed[0].owner, "b_echo");
    assert_eq!(owner(&live, "echo").as_deref(), Some("b_echo"));
    let result = live.current().call("echo", json!({ "text": "mine" })).await;
    assert_eq!(result.output, "mine", "the late impostor never runs");

    // After a restart, load order alone decides: the file sorting first.
    let restarted = self::live(dir.path(), false).await;
    assert_eq!(owner(&restarted, "echo").as_deref(), Some("a_twin"));
}

#[tokio::test]
async fn a_good_update_replaces_the_component_in_one_swap() {
    let dir = tempfile::tempdir().unwrap();
    copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO_TWIN);
    let live = live(dir.path(), false).await;
    let before = live.current();
    assert_eq!(before.call("echo", json!({})).await.output, "hijacked");

    copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO);
    let report = live.reload().await;
    assert_eq!(changes(&report, ChangeKind::Replaced), ["echo"]);
    assert_eq!(changes(&report, ChangeKind::Removed), ["twin_only"]);
    assert_eq!(
        changes(&report, ChangeKind::Added),
        ["bad_details", "counter", "fail"]
    );
    let after = live.current();
    let result = after.call("echo", json!({ "text": "new" })).await;
    assert_eq!(result.output, "new");
    assert!(after.tool("twin_only").is_none());
    // The old snapshot is untouched: whoever holds it still sees the old set.
    assert!(before.tool("twin_only").is_some());
    assert_eq!(before.call("echo", json!({})).await.output, "hijacked");
}

#[tokio::test]
async fn a_bad_update_keeps_the_old_version_and_is_not_retried_until_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO);
    let live = live(dir.path(), false).await;
    let good = live.current().tool("echo").unwrap().component_hash.clone();

    let mut truncated = std::fs::read(guests::FIXTURE_ECHO).unwrap();
    truncated.truncate(truncated.len() / 2);
    for bad in [
        truncated,
        std::fs::read(guests::FIXTURE_DESCRIBE_LOOP).unwrap(),
    ] {
        put(dir.path(), "tool.wasm", &bad);
        let report = live.reload().await;
        assert!(!report.changed(), "{report:?}");
        assert_eq!(report.loaded.len(), 1);
        assert!(report.loaded[0].error.is_some());
        assert_eq!(live.current().tool("echo").unwrap().component_hash, good);
        let result = live
            .current()
            .call("echo", json!({ "text": "still" }))
            .await;
        assert_eq!(result.output, "still");

        // The same bad content is not compiled again.
        let again = live.reload().await;
        assert!(again.loaded.is_empty() && !again.changed(), "{again:?}");
    }
    // The describe() loop was stopped by the component's own limits.
    copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO_TWIN);
    let report = live.reload().await;
    assert!(report.loaded[0].is_ok());
    assert_eq!(changes(&report, ChangeKind::Replaced), ["echo"]);
}

#[tokio::test]
async fn touching_a_file_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO);
    let live = live(dir.path(), false).await;
    let file = std::fs::File::options()
        .write(true)
        .open(dir.path().join("tool.wasm"))
        .unwrap();
    file.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    let report = live.reload().await;
    assert!(!report.changed(), "{report:?}");
    assert!(report.loaded.is_empty(), "same content: not recompiled");
}

#[tokio::test]
async fn a_removal_hands_the_name_to_the_next_component_in_load_order() {
    let dir = tempfile::tempdir().unwrap();
    copy(dir.path(), "a_echo.wasm", guests::FIXTURE_ECHO);
    copy(dir.path(), "b_twin.wasm", guests::FIXTURE_ECHO_TWIN);
    let live = live(dir.path(), false).await;
    assert_eq!(owner(&live, "echo").as_deref(), Some("a_echo"));

    std::fs::remove_file(dir.path().join("a_echo.wasm")).unwrap();
    let report = live.reload().await;
    assert_eq!(report.removed, ["a_echo"]);
    assert_eq!(changes(&report, ChangeKind::Replaced), ["echo"]);
    assert_eq!(
        changes(&report, ChangeKind::Removed),
        ["bad_details", "counter", "fail"]
    );
    assert_eq!(owner(&live, "echo").as_deref(), Some("b_twin"));
    let result = live.current().call("counter", json!({})).await;
    assert_error(&result, ErrorKind::NotFound);
}

#[tokio::test]
async fn a_component_file_replaced_by_a_directory_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO);
    let live = live(dir.path(), false).await;
    std::fs::remove_file(dir.path().join("tool.wasm")).unwrap();
    std::fs::create_dir(dir.path().join("tool.wasm")).unwrap();
    let report = live.reload().await;
    assert_eq!(report.removed, ["tool"]);
    assert!(live.current().tool("echo").is_none());
}

#[tokio::test]
async fn hidden_and_temporary_files_are_never_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let live = live(dir.path(), false).await;
    for name in [
        ".echo.wasm",
        "echo.wasm.part",
        "echo.wasm~",
        "echo.tmp",
        "echo.wasm.tmp",
    ] {
        copy(dir.path(), name, guests::FIXTURE_ECHO);
    }
    let report = live.reload().await;
    assert!(!report.changed() && report.loaded.is_empty(), "{report:?}");
    assert_eq!(live.current().tools().len(), 0);
}

#[tokio::test]
async fn calls_in_flight_during_a_swap_finish_on_their_version() {
    let dir = tempfile::tempdir().unwrap();
    copy(dir.path(), "tool.wasm", guests::FIXTURE_MISBEHAVE);
    // Room for the calls waiting for a slot (32) on a busy machine.
    let limits = toolcage::Limits {
        timeout: Duration::from_secs(20),
        ..quick_limits()
    };
    let live = live_with(dir.path(), false, limits).await;
    let runner = toolcage::agent::Runner::new(live.clone())
        .permissions(toolcage::agent::Permissions::allow_all());

    let calls: Vec<_> = (0..50)
        .map(|i| {
            let runner = runner.clone();
            tokio::spawn(async move {
                let call = toolcage::agent::ToolCall::new(
                    i.to_string(),
                    "misbehave",
                    json!({ "mode": "sleep", "amount": 600 }),
                );
                runner.run([call]).await.remove(0)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The new version has no `misbehave`, and offers `echo`.
    copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO);
    let report = live.reload().await;
    assert_eq!(changes(&report, ChangeKind::Removed), ["misbehave"]);

    let new = live.current();
    assert_error(
        &new.call("misbehave", json!({ "mode": "sleep", "amount": 1 }))
            .await,
        ErrorKind::NotFound,
    );
    assert_eq!(new.call("echo", json!({ "text": "v2" })).await.output, "v2");
    for call in calls {
        let result = call.await.unwrap();
        assert!(!result.is_error, "{}", result.output);
        assert_eq!(result.output, "woke up");
    }
}

#[tokio::test]
async fn replaced_components_are_freed() {
    let dir = tempfile::tempdir().unwrap();
    copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO);
    let runtime = toolcage::Runtime::new().unwrap();
    let base = toolcage::Registry::builder()
        .runtime(&runtime)
        .build()
        .unwrap();
    let (live, _) = LiveRegistry::load(base, [dir.path()]).await.unwrap();
    assert_eq!(runtime.compiled_components(), 1);
    for n in 0..20 {
        put(dir.path(), "tool.wasm", &version(guests::FIXTURE_ECHO, n));
        let report = live.reload().await;
        assert_eq!(
            changes(&report, ChangeKind::Replaced).len(),
            4,
            "{report:?}"
        );
        assert_eq!(runtime.compiled_components(), 1, "only the version in use");
    }
    // A snapshot still serving holds its version, and only that.
    let held = live.current();
    put(dir.path(), "tool.wasm", &version(guests::FIXTURE_ECHO, 99));
    live.reload().await;
    assert_eq!(runtime.compiled_components(), 2);
    drop(held);
    assert_eq!(runtime.compiled_components(), 1);
}

/// How long a watched change may take to be served here. The server aims at
/// 2 s (a 200 ms debounce, then a compile); tests run beside each other on
/// a 2-core machine, where one compile can take seconds.
const SERVED_WITHIN: Duration = Duration::from_secs(15);

/// Waits up to `within` for `done`, polling.
async fn eventually(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

#[tokio::test]
async fn a_watched_directory_serves_additions_changes_and_removals() {
    for options in [
        WatchOptions::default(),
        WatchOptions::default().poll(Duration::from_millis(100)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let live = live(dir.path(), false).await;
        let _watcher = live.watch(options).unwrap();
        let within = SERVED_WITHIN;

        copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO_TWIN);
        let added = eventually(within, || owner(&live, "twin_only").is_some()).await;
        assert!(added, "{options:?}: added");
        copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO);
        let changed = eventually(within, || owner(&live, "counter").is_some()).await;
        assert!(changed, "{options:?}: changed");
        assert!(live.current().tool("twin_only").is_none());
        std::fs::remove_file(dir.path().join("tool.wasm")).unwrap();
        let removed = eventually(within, || live.current().tools().len() == 0).await;
        assert!(removed, "{options:?}: removed");
    }
}

#[tokio::test]
async fn a_file_written_slowly_is_never_loaded_before_it_is_complete() {
    let dir = tempfile::tempdir().unwrap();
    let live = live(dir.path(), false).await;
    let mut changes = live.subscribe();
    let _watcher = live.watch(WatchOptions::default()).unwrap();

    let bytes = std::fs::read(guests::FIXTURE_ECHO).unwrap();
    let path = dir.path().join("slow.wasm");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = bytes.len().div_ceil(20);
    for piece in bytes.chunks(chunk) {
        use std::io::Write;
        file.write_all(piece).unwrap();
        file.flush().unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(live.current().tool("echo").is_none(), "loaded half-way");
    }
    drop(file);
    let report = tokio::time::timeout(SERVED_WITHIN, changes.recv())
        .await
        .expect("served in time")
        .unwrap();
    assert!(report.loaded.iter().all(|r| r.is_ok()), "{report:?}");
    assert!(changes.try_recv().is_err(), "one reload made the change");
    assert_eq!(
        live.current()
            .call("echo", json!({ "text": "x" }))
            .await
            .output,
        "x"
    );
}

#[tokio::test]
async fn a_burst_of_changes_is_coalesced_and_ends_on_the_final_version() {
    let dir = tempfile::tempdir().unwrap();
    copy(dir.path(), "tool.wasm", guests::FIXTURE_ECHO);
    let live = live(dir.path(), false).await;
    let mut changes = live.subscribe();
    let _watcher = live.watch(WatchOptions::default()).unwrap();

    let mut last = Vec::new();
    for n in 0..100 {
        last = version(guests::FIXTURE_ECHO, n);
        put(dir.path(), "tool.wasm", &last);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let final_hash = blake3::hash(&last).to_hex().to_string();
    let arrived = eventually(SERVED_WITHIN, || {
        live.current()
            .tool("echo")
            .is_some_and(|info| info.component_hash == final_hash)
    })
    .await;
    assert!(arrived, "the final version is served");
    let mut reloads = 0;
    while changes.try_recv().is_ok() {
        reloads += 1;
    }
    assert!(
        (1..=5).contains(&reloads),
        "{reloads} reloads for one burst"
    );
}
