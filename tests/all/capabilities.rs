//! What a guest can reach: only the operator's mounts, and nothing else of
//! the host (no environment, arguments, stdin or network).

use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;
use toolcage::{CallOptions, CancelToken, ErrorKind, Mount, Registry};
use toolcage_tests::{assert_error, builder, guests, quick_limits, registry};

/// `mounted/` (read-only at /workspace), `scratch/` (read-write at /scratch)
/// and `secret.txt` beside them, outside every mount.
struct Tree {
    dir: TempDir,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("mounted/sub")).unwrap();
        std::fs::create_dir_all(root.join("scratch")).unwrap();
        std::fs::write(root.join("mounted/hello.txt"), "hello from the host").unwrap();
        std::fs::write(root.join("mounted/sub/deep.txt"), "deep").unwrap();
        std::fs::write(root.join("secret.txt"), "top secret").unwrap();
        std::os::unix::fs::symlink(root.join("secret.txt"), root.join("mounted/escape")).unwrap();
        std::os::unix::fs::symlink("../secret.txt", root.join("mounted/escape_relative")).unwrap();
        std::os::unix::fs::symlink("hello.txt", root.join("mounted/inside_link")).unwrap();
        Tree { dir }
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }

    async fn registry(&self) -> Registry {
        let builder = builder()
            .limits(quick_limits())
            .mount(Mount::read_only(self.path("mounted"), "/workspace"))
            .mount(Mount::read_write(self.path("scratch"), "/scratch"));
        registry(builder, &[guests::FIXTURE_MISBEHAVE]).await
    }
}

async fn misbehave(registry: &Registry, args: serde_json::Value) -> toolcage::CallResult {
    registry.call("misbehave", args).await
}

#[tokio::test]
async fn reads_inside_a_mount() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let result = misbehave(
        &registry,
        json!({ "mode": "read", "path": "/workspace/hello.txt" }),
    )
    .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(result.output, "hello from the host");
    let result = misbehave(
        &registry,
        json!({ "mode": "read", "path": "/workspace/inside_link" }),
    )
    .await;
    assert_eq!(
        result.output, "hello from the host",
        "a symlink inside the mount works"
    );
    let result = misbehave(&registry, json!({ "mode": "list", "path": "/workspace" })).await;
    assert!(
        result.output.contains("hello.txt") && result.output.contains("sub"),
        "{}",
        result.output
    );
}

#[tokio::test]
async fn open_files_are_bounded_per_call() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let args = |amount: u64| json!({ "mode": "hold_open", "path": "/workspace/hello.txt", "amount": amount });
    let result = misbehave(&registry, args(100)).await;
    assert_eq!(result.output, "holding 100 files");
    let result = misbehave(&registry, args(5000)).await;
    assert_error(&result, ErrorKind::Trap);
    assert!(
        result.output.contains("more than 1024 open files"),
        "{}",
        result.output
    );
    let result = misbehave(&registry, args(100)).await;
    assert_eq!(
        result.output, "holding 100 files",
        "the next call starts afresh"
    );
}

/// A FIFO in the mounted tree: opening it for reading blocks until a writer
/// comes, which the test never sends while the call runs.
fn fifo(tree: &Tree, name: &str) -> std::path::PathBuf {
    let fifo = tree.path(&format!("mounted/{name}"));
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    fifo
}

/// Lets a reader blocked on `fifo` go (opening it for writing wakes it),
/// without blocking if no reader is left.
fn release(fifo: &std::path::Path) {
    use std::os::unix::fs::OpenOptionsExt;
    const O_NONBLOCK: i32 = 0o4000;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(O_NONBLOCK)
        .open(fifo)
        .ok();
}

/// File operations run directly on the call's thread, and still a read that
/// never returns ends the call at its timeout, or at once when cancelled;
/// the stuck worker is counted until the read returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_file_operation_is_stopped_by_the_timeout_or_a_cancellation() {
    let tree = Tree::new();
    let (timed, cancelled) = (fifo(&tree, "timed"), fifo(&tree, "cancelled"));
    let runtime = toolcage::Runtime::new().unwrap();
    let limits = toolcage::Limits {
        timeout: Duration::from_millis(300),
        ..quick_limits()
    };
    let builder = Registry::builder()
        .runtime(&runtime)
        .limits(limits)
        .mount(Mount::read_only(tree.path("mounted"), "/workspace"));
    let registry = registry(builder, &[guests::FIXTURE_MISBEHAVE]).await;

    let started = Instant::now();
    let result = misbehave(
        &registry,
        json!({ "mode": "read", "path": "/workspace/timed" }),
    )
    .await;
    assert_error(&result, ErrorKind::Timeout);
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "answered after {:?}",
        started.elapsed()
    );
    assert_eq!(runtime.stuck_calls(), 1);

    let token = CancelToken::new();
    let call = registry.call_with(
        "misbehave",
        json!({ "mode": "read", "path": "/workspace/cancelled" }),
        CallOptions::new().cancel_token(token.clone()),
    );
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        token.cancel();
        Instant::now()
    };
    let (result, cancelled_at) = tokio::join!(call, cancel);
    assert_error(&result, ErrorKind::Cancelled);
    assert!(
        cancelled_at.elapsed() < Duration::from_millis(100),
        "answered {:?} after the cancellation",
        cancelled_at.elapsed()
    );
    assert_eq!(runtime.stuck_calls(), 2);

    // The registry still serves, and fast file I/O still works.
    let result = misbehave(
        &registry,
        json!({ "mode": "read", "path": "/workspace/hello.txt" }),
    )
    .await;
    assert_eq!(result.output, "hello from the host");

    release(&timed);
    release(&cancelled);
    let released = Instant::now();
    while runtime.stuck_calls() > 0 {
        assert!(
            released.elapsed() < Duration::from_secs(5),
            "{} calls still stuck after their reads returned",
            runtime.stuck_calls()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn reads_outside_every_mount_are_denied() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let secret = tree.path("secret.txt").display().to_string();
    for path in [
        "/etc/passwd",
        secret.as_str(),
        "/workspace/../secret.txt",
        "/workspace/sub/../../secret.txt",
        "/workspace/escape",
        "/workspace/escape_relative",
        "secret.txt",
        "../secret.txt",
    ] {
        let result = misbehave(&registry, json!({ "mode": "read", "path": path })).await;
        assert_eq!(
            result.error_kind,
            Some(ErrorKind::ToolError),
            "{path}: {}",
            result.output
        );
        assert!(
            !result.output.contains("top secret"),
            "{path} leaked: {}",
            result.output
        );
    }
    let result = misbehave(&registry, json!({ "mode": "list", "path": "/" })).await;
    assert!(!result.output.contains("secret"), "{}", result.output);
}

#[tokio::test]
async fn writes_to_a_read_only_mount_are_denied() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    for path in [
        "/workspace/hello.txt",
        "/workspace/new.txt",
        "/workspace/sub/deep.txt",
    ] {
        let result = misbehave(
            &registry,
            json!({ "mode": "write", "path": path, "content": "pwned" }),
        )
        .await;
        assert_eq!(
            result.error_kind,
            Some(ErrorKind::ToolError),
            "{path}: {}",
            result.output
        );
    }
    assert_eq!(
        std::fs::read_to_string(tree.path("mounted/hello.txt")).unwrap(),
        "hello from the host"
    );
    assert!(!tree.path("mounted/new.txt").exists());
}

#[tokio::test]
async fn writes_to_a_read_write_mount_succeed() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let result = misbehave(
        &registry,
        json!({ "mode": "write", "path": "/scratch/out.txt", "content": "made" }),
    )
    .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(
        std::fs::read_to_string(tree.path("scratch/out.txt")).unwrap(),
        "made"
    );
    let result = misbehave(
        &registry,
        json!({ "mode": "write", "path": "/scratch/../secret.txt", "content": "x" }),
    )
    .await;
    assert!(result.is_error, "{}", result.output);
    assert_eq!(
        std::fs::read_to_string(tree.path("secret.txt")).unwrap(),
        "top secret"
    );
}

#[tokio::test]
async fn no_filesystem_without_mounts() {
    let registry = registry(
        builder().limits(quick_limits()),
        &[guests::FIXTURE_MISBEHAVE],
    )
    .await;
    let result = misbehave(
        &registry,
        json!({ "mode": "read", "path": "/etc/hostname" }),
    )
    .await;
    assert_error(&result, ErrorKind::ToolError);
}

#[tokio::test]
async fn per_component_mounts_reach_only_that_component() {
    let tree = Tree::new();
    let builder = builder().limits(quick_limits()).component_mount(
        "fixture_misbehave",
        Mount::read_only(tree.path("mounted"), "/private"),
    );
    let registry = registry(builder, &[guests::FIXTURE_MISBEHAVE]).await;
    let result = misbehave(
        &registry,
        json!({ "mode": "read", "path": "/private/hello.txt" }),
    )
    .await;
    assert_eq!(result.output, "hello from the host");
}

#[tokio::test]
async fn the_environment_arguments_and_stdin_are_empty() {
    let registry = registry(
        builder().limits(quick_limits()),
        &[guests::FIXTURE_MISBEHAVE],
    )
    .await;
    let result = misbehave(&registry, json!({ "mode": "env" })).await;
    assert!(!result.is_error, "{}", result.output);
    let details = result.details.unwrap();
    assert_eq!(details["vars"], json!([]), "{details}");
    assert_eq!(details["args"], json!([]), "{details}");
    let result = misbehave(&registry, json!({ "mode": "stdin" })).await;
    assert_eq!(result.output, r#"Ok(0): """#);
}

#[tokio::test]
async fn network_connect_is_denied() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let registry = registry(
        builder().limits(quick_limits()),
        &[guests::FIXTURE_MISBEHAVE],
    )
    .await;
    let result = misbehave(&registry, json!({ "mode": "connect", "path": addr })).await;
    assert_error(&result, ErrorKind::ToolError);
    assert!(result.output.starts_with("connect "), "{}", result.output);
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "nothing reached the listener");
    let result = misbehave(&registry, json!({ "mode": "resolve", "path": "localhost" })).await;
    assert_error(&result, ErrorKind::ToolError);
}

/// `w/` (lent read-write at /w), its subdirectory `w/sub/` (lent read-only
/// at /sub) holding `inner.txt`, and `outside/secret.txt` beside them.
fn nested_mounts() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("w/sub")).unwrap();
    std::fs::create_dir_all(root.join("outside")).unwrap();
    std::fs::write(root.join("w/sub/inner.txt"), "inner").unwrap();
    std::fs::write(root.join("outside/secret.txt"), "top secret").unwrap();
    dir
}

fn nested_builder(root: &std::path::Path) -> toolcage::RegistryBuilder {
    builder()
        .limits(quick_limits())
        .mount(Mount::read_write(root.join("w"), "/w"))
        .mount(Mount::read_only(root.join("w/sub"), "/sub"))
}

/// What a tool holding the read-write mount can do: move the inner mount's
/// directory away and plant a symlink in its place. The calls after it
/// still see the directory the operator lent, and nothing outside.
#[tokio::test]
async fn a_mount_redirected_after_the_start_still_lends_what_was_named() {
    let dir = nested_mounts();
    let root = dir.path();
    let registry = registry(nested_builder(root), &[guests::FIXTURE_MISBEHAVE]).await;
    let read = json!({ "mode": "read", "path": "/sub/inner.txt" });
    assert_eq!(misbehave(&registry, read.clone()).await.output, "inner");

    std::fs::rename(root.join("w/sub"), root.join("w/moved")).unwrap();
    std::os::unix::fs::symlink("../outside", root.join("w/sub")).unwrap();

    assert_eq!(misbehave(&registry, read).await.output, "inner");
    let result = misbehave(
        &registry,
        json!({ "mode": "read", "path": "/sub/secret.txt" }),
    )
    .await;
    assert_error(&result, ErrorKind::ToolError);
    let result = misbehave(&registry, json!({ "mode": "list", "path": "/sub" })).await;
    assert_eq!(result.output, "inner.txt");
}

/// The same redirection planted before the process started is refused when
/// the registry is built.
#[tokio::test]
async fn a_mount_through_a_symlink_inside_a_read_write_mount_is_refused() {
    let dir = nested_mounts();
    let root = dir.path();
    std::fs::rename(root.join("w/sub"), root.join("w/moved")).unwrap();
    std::os::unix::fs::symlink("../outside", root.join("w/sub")).unwrap();
    let Err(error) = nested_builder(root).build() else {
        panic!("a mount through a planted symlink was accepted");
    };
    let error = error.to_string();
    assert!(
        error.contains("symlink") && error.contains("read-write mount"),
        "{error}"
    );
    // Lent read-only, the outer directory cannot have been changed by a
    // tool: the operator's symlink there is followed.
    let registry = builder()
        .mount(Mount::read_only(root.join("w"), "/w"))
        .mount(Mount::read_only(root.join("w/sub"), "/sub"))
        .build();
    assert!(registry.is_ok(), "{:?}", registry.err());
}

/// An operator's own symlinked mount path, outside every read-write mount,
/// is resolved once and works.
#[tokio::test]
async fn an_operators_symlinked_mount_path_works() {
    let dir = nested_mounts();
    let root = dir.path();
    std::os::unix::fs::symlink(root.join("w/sub"), root.join("link")).unwrap();
    let builder = builder()
        .limits(quick_limits())
        .mount(Mount::read_write(root.join("outside"), "/out"))
        .mount(Mount::read_only(root.join("link"), "/sub"));
    let registry = registry(builder, &[guests::FIXTURE_MISBEHAVE]).await;
    let read = json!({ "mode": "read", "path": "/sub/inner.txt" });
    assert_eq!(misbehave(&registry, read.clone()).await.output, "inner");
    // Repointing the symlink later changes nothing.
    std::fs::remove_file(root.join("link")).unwrap();
    std::os::unix::fs::symlink(root.join("outside"), root.join("link")).unwrap();
    assert_eq!(misbehave(&registry, read).await.output, "inner");
}

/// A mount whose host directory is removed while the registry serves: calls
/// that fail because of it say which mount is gone.
#[tokio::test]
async fn a_removed_mount_is_named_in_the_failure() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    std::fs::remove_dir_all(tree.path("scratch")).unwrap();
    let result = misbehave(
        &registry,
        json!({ "mode": "write", "path": "/scratch/new.txt", "content": "x" }),
    )
    .await;
    assert_error(&result, ErrorKind::ToolError);
    assert!(
        result.output.contains("The mount at /scratch is gone"),
        "{}",
        result.output
    );
    // The other mount still serves.
    let read = json!({ "mode": "read", "path": "/workspace/hello.txt" });
    let result = misbehave(&registry, read).await;
    assert_eq!(result.output, "hello from the host");
}
