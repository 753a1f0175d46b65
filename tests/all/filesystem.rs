//! The file-system surface as an attacker holding a read-write mount sees it:
//! raw `wasi:filesystem` calls (through the `fsprobe` fixture) with every
//! flag, path shape and pair of mounts, one regression test per wasmtime-wasi
//! file-system advisory, and each test checking the host from outside that
//! nothing beyond what the mounts lend was read, written, created or deleted.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tempfile::TempDir;
use toolcage::{Mount, Registry};
use toolcage_tests::{builder, guests, quick_limits, registry};

const SECRET: &str = "top secret";

/// `ro/` (lent read-only at /ro), `rw/` (read-write at /rw), `rw2/`
/// (read-write at /rw2), and `outside/`, lent nowhere. Both `ro/` and `rw/`
/// hold the symlinks of the trailing-slash advisory: `hidden -> ../outside`,
/// `indirect -> hidden/`, `root_link -> /.`, and `escape ->
/// ../outside/secret.txt`.
struct Tree {
    dir: TempDir,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for sub in ["ro/sub", "rw", "rw2", "outside/dir"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::write(root.join("ro/hello.txt"), "hello").unwrap();
        std::fs::write(root.join("ro/sub/deep.txt"), "deep").unwrap();
        std::fs::write(root.join("rw/note.txt"), "note").unwrap();
        std::fs::write(root.join("outside/secret.txt"), SECRET).unwrap();
        for mount in ["ro", "rw"] {
            let link = |target: &str, name: &str| {
                std::os::unix::fs::symlink(target, root.join(mount).join(name)).unwrap();
            };
            link("../outside", "hidden");
            link("hidden/", "indirect");
            link("/.", "root_link");
            link("../outside/secret.txt", "escape");
        }
        // Old times, so that any change to them shows.
        for file in ["ro/hello.txt", "rw/note.txt", "outside/secret.txt"] {
            std::fs::File::options()
                .write(true)
                .open(root.join(file))
                .unwrap()
                .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000))
                .unwrap();
        }
        Tree { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    async fn registry(&self) -> Registry {
        let builder = builder()
            .limits(quick_limits())
            .mount(Mount::read_only(self.path("ro"), "/ro"))
            .mount(Mount::read_write(self.path("rw"), "/rw"))
            .mount(Mount::read_write(self.path("rw2"), "/rw2"));
        registry(builder, &[guests::FIXTURE_FSPROBE]).await
    }

    /// Everything a tool must not change: the whole tree but the two
    /// read-write mounts.
    fn protected(&self) -> Snapshot {
        snapshot(self.dir.path(), &["rw", "rw2"])
    }

    /// A read-write mount's tree.
    fn mount(&self, name: &str) -> Snapshot {
        snapshot(&self.path(name), &[])
    }
}

/// One file-system entry as seen from the host, without following symlinks.
#[derive(Debug, PartialEq)]
struct Entry {
    kind: &'static str,
    len: u64,
    modified: SystemTime,
    inode: u64,
    links: u64,
    content: Option<Vec<u8>>,
    target: Option<PathBuf>,
}

type Snapshot = BTreeMap<PathBuf, Entry>;

/// Every entry under `root` (itself included), skipping the top-level names
/// in `skip`.
fn snapshot(root: &Path, skip: &[&str]) -> Snapshot {
    fn walk(root: &Path, rel: &Path, skip: &[&str], into: &mut Snapshot) {
        let path = root.join(rel);
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let kind = if meta.is_symlink() {
            "symlink"
        } else if meta.is_dir() {
            "dir"
        } else {
            "file"
        };
        into.insert(
            rel.to_path_buf(),
            Entry {
                kind,
                len: meta.len(),
                modified: meta.modified().unwrap(),
                inode: meta.ino(),
                links: meta.nlink(),
                content: (kind == "file").then(|| std::fs::read(&path).unwrap()),
                target: (kind == "symlink").then(|| std::fs::read_link(&path).unwrap()),
            },
        );
        if kind == "dir" {
            for entry in std::fs::read_dir(&path).unwrap() {
                let name = entry.unwrap().file_name();
                if rel.as_os_str().is_empty() && skip.iter().any(|s| name == **s) {
                    continue;
                }
                walk(root, &rel.join(name), skip, into);
            }
        }
    }
    let mut snapshot = Snapshot::new();
    walk(root, Path::new(""), skip, &mut snapshot);
    snapshot
}

/// Asserts two snapshots are equal, naming what differs.
#[track_caller]
fn assert_unchanged(before: &Snapshot, after: &Snapshot) {
    let mut changes = Vec::new();
    for (path, entry) in before {
        match after.get(path) {
            None => changes.push(format!("removed {}", path.display())),
            Some(now) if now != entry => {
                changes.push(format!("changed {}: {entry:?} -> {now:?}", path.display()))
            }
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        changes.push(format!("created {}", path.display()));
    }
    assert!(changes.is_empty(), "{}", changes.join("\n"));
}

/// Runs `ops` in one call and returns one result per operation.
async fn probe(registry: &Registry, ops: Value) -> Vec<Value> {
    let count = ops.as_array().map_or(0, Vec::len);
    let result = registry.call("fsprobe", json!({ "ops": ops })).await;
    assert!(!result.is_error, "the probe failed: {}", result.output);
    let results = result.details.expect("details")["results"]
        .as_array()
        .expect("results")
        .clone();
    assert_eq!(results.len(), count);
    results
}

/// The error an operation reported; panics if it succeeded.
#[track_caller]
fn error(ops: &Value, results: &[Value], i: usize) -> String {
    match results[i].get("error").and_then(Value::as_str) {
        Some(error) => error.to_string(),
        None => panic!("operation {i} ({}) succeeded: {}", ops[i], results[i]["ok"]),
    }
}

/// Asserts every operation failed, none of them with a leak of the secret.
#[track_caller]
fn assert_all_refused(ops: &Value, results: &[Value]) {
    for (i, result) in results.iter().enumerate() {
        error(ops, results, i);
        assert!(
            !result.to_string().contains(SECRET),
            "operation {i} ({}) leaked: {result}",
            ops[i]
        );
    }
}

/// Asserts every operation failed with `code`.
#[track_caller]
fn assert_all_fail_with(ops: &Value, results: &[Value], code: &str) {
    for i in 0..results.len() {
        assert_eq!(error(ops, results, i), code, "operation {i}: {}", ops[i]);
    }
}

#[track_caller]
fn ok(ops: &Value, results: &[Value], i: usize) -> Value {
    match results[i].get("ok") {
        Some(value) => value.clone(),
        None => panic!("operation {i} ({}) failed: {}", ops[i], results[i]),
    }
}

fn mtime(path: &Path) -> SystemTime {
    std::fs::symlink_metadata(path).unwrap().modified().unwrap()
}

/// GHSA-2r75-cxrj-cmph: wasmtime-wasi's `open-at` did not count
/// `open-flags.truncate` as a write, so a tool could open a file of a
/// read-only preopen with only `truncate` and `read` and empty it.
#[tokio::test]
async fn ghsa_2r75_cxrj_cmph_a_truncating_open_on_a_read_only_mount_is_refused() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let ops = json!([
        { "op": "open", "dir": "/ro", "path": "hello.txt", "flags": ["truncate", "read"] },
        { "op": "open", "dir": "/ro", "path": "hello.txt", "flags": ["truncate"] },
        { "op": "open", "dir": "/ro", "path": "hello.txt", "flags": ["truncate", "read", "follow"] },
        { "op": "open", "dir": "/ro", "path": "sub/deep.txt", "flags": ["truncate", "read"] },
    ]);
    let results = probe(&registry, ops.clone()).await;
    assert_all_fail_with(&ops, &results, "not-permitted");
    assert_unchanged(&before, &tree.protected());

    // The same open truncates a file of a read-write mount: the call itself
    // is not what fails.
    let control = json!([
        { "op": "open", "dir": "/rw", "path": "note.txt", "flags": ["truncate", "read"] },
    ]);
    let results = probe(&registry, control.clone()).await;
    ok(&control, &results, 0);
    assert_eq!(std::fs::read(tree.path("rw/note.txt")).unwrap(), b"");
    assert_unchanged(&before, &tree.protected());
}

/// GHSA-4ch3-9j33-3pmj: `link-at` and `rename-at` checked only one side's
/// permissions, so a tool could hard-link (or move) a file of a read-only
/// preopen into a read-write one, and write to it there.
#[tokio::test]
async fn ghsa_4ch3_9j33_3pmj_links_and_renames_out_of_a_read_only_mount_are_refused() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let rw_before = tree.mount("rw");
    let ops = json!([
        { "op": "link", "dir": "/ro", "path": "hello.txt", "to_dir": "/rw", "to_path": "alias.txt" },
        { "op": "link", "dir": "/ro", "path": "sub/deep.txt", "to_dir": "/rw", "to_path": "alias.txt" },
        { "op": "rename", "dir": "/ro", "path": "hello.txt", "to_dir": "/rw", "to_path": "alias.txt" },
        { "op": "rename", "dir": "/ro", "path": "sub", "to_dir": "/rw", "to_path": "sub" },
        { "op": "link", "dir": "/ro", "path": "hello.txt", "to_dir": "/ro", "to_path": "alias.txt" },
        { "op": "link", "dir": "/rw", "path": "note.txt", "to_dir": "/ro", "to_path": "alias.txt" },
        { "op": "open", "dir": "/rw", "path": "alias.txt", "flags": ["write"], "content": "pwned" },
    ]);
    let results = probe(&registry, ops.clone()).await;
    for i in 0..6 {
        assert_eq!(error(&ops, &results, i), "not-permitted", "{}", ops[i]);
    }
    assert_eq!(error(&ops, &results, 6), "no-entry");
    assert_unchanged(&before, &tree.protected());
    assert_unchanged(&rw_before, &tree.mount("rw"));
    assert_eq!(
        std::fs::metadata(tree.path("ro/hello.txt"))
            .unwrap()
            .nlink(),
        1
    );
}

/// The operations tried through a path that ends in a slash or passes a
/// symlink pointing outside (`hidden/`, `indirect/`, `root_link/`,
/// `escape/`), starting from `dir`.
fn trailing_slash_ops(dir: &str) -> Vec<Value> {
    let mut ops = Vec::new();
    for path in [
        "hidden/",
        "indirect/",
        "root_link/",
        "hidden/.",
        "indirect/.",
        "hidden/secret.txt",
        "indirect/secret.txt",
        "indirect/secret.txt/",
        "escape/",
        "hidden/dir/",
    ] {
        for flags in [
            json!(["read"]),
            json!(["read", "follow"]),
            json!(["directory", "read", "follow"]),
        ] {
            ops.push(json!({ "op": "open", "dir": dir, "path": path, "flags": flags }));
        }
        ops.push(json!({ "op": "list", "dir": dir, "path": path, "flags": ["follow"] }));
        ops.push(json!({ "op": "stat", "dir": dir, "path": path }));
        ops.push(json!({ "op": "stat", "dir": dir, "path": path, "flags": ["follow"] }));
        ops.push(json!({ "op": "readlink", "dir": dir, "path": path }));
        ops.push(json!({ "op": "std_read", "path": format!("{dir}/{path}") }));
        ops.push(json!({ "op": "std_stat", "path": format!("{dir}/{path}") }));
    }
    ops
}

/// What a tool holding the read-write mount can try besides reading:
/// create, write, time, link, rename and remove through the same paths.
fn trailing_slash_writes() -> Vec<Value> {
    let mut ops = Vec::new();
    for path in ["hidden/", "indirect/", "root_link/", "escape/"] {
        let inside = format!("{path}new.txt");
        for flags in [
            json!(["create", "write"]),
            json!(["create", "write", "follow"]),
            json!(["truncate", "write", "follow"]),
        ] {
            ops.push(json!({ "op": "open", "dir": "/rw", "path": inside, "flags": flags, "content": "x" }));
            ops.push(json!({ "op": "open", "dir": "/rw", "path": format!("{path}secret.txt"), "flags": flags, "content": "x" }));
        }
        ops.push(json!({ "op": "mkdir", "dir": "/rw", "path": format!("{path}made") }));
        ops.push(json!({ "op": "mkdir", "dir": "/rw", "path": format!("{path}made/") }));
        ops.push(
            json!({ "op": "set_times", "dir": "/rw", "path": path, "mtime": { "seconds": 1 } }),
        );
        ops.push(json!({ "op": "set_times", "dir": "/rw", "path": path, "mtime": { "seconds": 1 }, "flags": ["follow"] }));
        ops.push(json!({ "op": "set_times", "dir": "/rw", "path": format!("{path}secret.txt"), "mtime": { "seconds": 1 } }));
        ops.push(json!({ "op": "set_times_fd", "dir": "/rw", "path": format!("{path}secret.txt"), "mtime": { "seconds": 1 }, "flags": ["follow", "write"] }));
        ops.push(json!({ "op": "set_size", "dir": "/rw", "path": format!("{path}secret.txt"), "flags": ["follow", "write"] }));
        ops.push(json!({ "op": "unlink", "dir": "/rw", "path": format!("{path}secret.txt") }));
        ops.push(json!({ "op": "unlink", "dir": "/rw", "path": path }));
        ops.push(json!({ "op": "rmdir", "dir": "/rw", "path": path }));
        ops.push(json!({ "op": "rmdir", "dir": "/rw", "path": format!("{path}dir") }));
        ops.push(json!({ "op": "rename", "dir": "/rw", "path": path, "to_dir": "/rw", "to_path": "moved" }));
        ops.push(json!({ "op": "rename", "dir": "/rw", "path": path, "to_dir": "/rw2", "to_path": "moved/" }));
        ops.push(json!({ "op": "rename", "dir": "/rw", "path": format!("{path}secret.txt"), "to_dir": "/rw", "to_path": "moved" }));
        ops.push(json!({ "op": "rename", "dir": "/rw", "path": "note.txt", "to_dir": "/rw", "to_path": format!("{path}note.txt") }));
        ops.push(json!({ "op": "rename", "dir": "/rw", "path": "note.txt", "to_dir": "/rw", "to_path": path }));
        ops.push(json!({ "op": "link", "dir": "/rw", "path": format!("{path}secret.txt"), "to_dir": "/rw", "to_path": "stolen" }));
        ops.push(json!({ "op": "link", "dir": "/rw", "path": path, "to_dir": "/rw", "to_path": "stolen" }));
        ops.push(json!({ "op": "link", "dir": "/rw", "path": "note.txt", "to_dir": "/rw", "to_path": format!("{path}note.txt") }));
        ops.push(json!({ "op": "symlink", "dir": "/rw", "path": format!("{path}planted"), "target": "x" }));
        ops.push(json!({ "op": "std_write", "path": format!("/rw/{inside}"), "content": "x" }));
        ops.push(
            json!({ "op": "std_write", "path": format!("/rw/{path}secret.txt"), "content": "x" }),
        );
        ops.push(json!({ "op": "std_create_dir_all", "path": format!("/rw/{path}a/b") }));
    }
    ops
}

/// GHSA-vqjp-4c8c-hfgg: a path, or a symlink's target, ending in a slash
/// could make cap-std's sandboxed path resolution follow a symlink out of
/// the preopen (Linux ≥ 5.6 `openat2` blocked the plain open; the other
/// operations resolve paths themselves). Here every operation through
/// `hidden/` (`-> ../outside`), `indirect/` (`-> hidden/`), `root_link/`
/// (`-> /.`) and `escape/`, from both mounts, fails, and nothing outside or
/// in the read-write mount changes.
#[tokio::test]
async fn ghsa_vqjp_4c8c_hfgg_trailing_slashes_do_not_lead_out_of_a_mount() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let rw_before = tree.mount("rw");
    let rw2_before = tree.mount("rw2");
    let mut ops = trailing_slash_ops("/ro");
    ops.extend(trailing_slash_ops("/rw"));
    ops.extend(trailing_slash_writes());
    let ops = Value::Array(ops);
    let results = probe(&registry, ops.clone()).await;
    // What succeeds is a stat that does not follow symlinks: it reports the
    // symlink itself (its type, and its target's length as its size),
    // trailing slash or `/.` notwithstanding, and nothing of what it points
    // to.
    for (i, result) in results.iter().enumerate() {
        let Some(stat) = result.get("ok") else {
            continue;
        };
        let op = &ops[i];
        assert!(
            op["op"] == "stat" && op.get("flags").is_none(),
            "operation {i} ({op}) succeeded: {result}"
        );
        let path = op["path"].as_str().unwrap();
        let link = tree
            .path(op["dir"].as_str().unwrap().trim_start_matches('/'))
            .join(path.split('/').next().unwrap());
        let target = std::fs::read_link(&link).unwrap();
        assert_eq!(stat["type"], "symlink", "{op}: {result}");
        assert_eq!(stat["size"], target.as_os_str().len(), "{op}: {result}");
    }
    assert!(!Value::Array(results.clone()).to_string().contains(SECRET));
    assert_unchanged(&before, &tree.protected());
    assert_unchanged(&rw_before, &tree.mount("rw"));
    assert_unchanged(&rw2_before, &tree.mount("rw2"));

    // Without the slash, the symlinks themselves are what the tool sees.
    let control = json!([
        { "op": "stat", "dir": "/rw", "path": "hidden" },
        { "op": "readlink", "dir": "/rw", "path": "indirect" },
    ]);
    let results = probe(&registry, control.clone()).await;
    assert_eq!(ok(&control, &results, 0)["type"], "symlink");
    assert_eq!(ok(&control, &results, 1), "hidden/");
}

/// GHSA-m9f7-9w4p-gv38. Its text was not reachable when this test was
/// written, so this covers the two file-system fixes between wasmtime-wasi
/// 48.0.0 and the 48.0.8 toolcage uses: `rename-at` with a trailing slash
/// on either path (which `renameat` follows through a symlink on macOS and
/// FreeBSD), and `set-times` with nanoseconds past a second on the largest
/// seconds (which panicked the host in `Duration::new`). Renames fail
/// without touching what the symlinks point to; times out of range are a
/// clean error, and the host keeps serving.
#[tokio::test]
async fn ghsa_m9f7_9w4p_gv38_trailing_slash_renames_and_out_of_range_times_are_clean_errors() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let rw_before = tree.mount("rw");
    let huge = json!({ "seconds": u64::MAX, "nanoseconds": u32::MAX });
    let far = json!({ "seconds": u64::MAX, "nanoseconds": 0 });
    let ops = json!([
        { "op": "rename", "dir": "/rw", "path": "hidden/", "to_dir": "/rw", "to_path": "moved" },
        { "op": "rename", "dir": "/rw", "path": "hidden", "to_dir": "/rw", "to_path": "moved/" },
        { "op": "rename", "dir": "/rw", "path": "indirect/", "to_dir": "/rw", "to_path": "moved/" },
        { "op": "rename", "dir": "/rw", "path": "escape/", "to_dir": "/rw", "to_path": "moved" },
        { "op": "rename", "dir": "/rw", "path": "note.txt/", "to_dir": "/rw", "to_path": "moved" },
        { "op": "rename", "dir": "/rw", "path": "note.txt", "to_dir": "/rw", "to_path": "moved/" },
        { "op": "rename", "dir": "/rw", "path": "hidden/", "to_dir": "/rw", "to_path": "indirect/" },
        { "op": "set_times", "dir": "/rw", "path": "note.txt", "mtime": huge },
        { "op": "set_times", "dir": "/rw", "path": "note.txt", "atime": huge },
        { "op": "set_times", "dir": "/rw", "path": "note.txt", "mtime": far },
        { "op": "set_times_fd", "dir": "/rw", "path": "note.txt", "flags": ["write"], "mtime": huge },
        { "op": "set_times_mount", "dir": "/rw", "mtime": huge },
        { "op": "set_times", "dir": "/rw", "path": "hidden/", "mtime": huge, "flags": ["follow"] },
    ]);
    let results = probe(&registry, ops.clone()).await;
    assert_all_refused(&ops, &results);
    assert_unchanged(&before, &tree.protected());
    assert_unchanged(&rw_before, &tree.mount("rw"));

    // The host still serves, and a time in range is set.
    let control = json!([
        { "op": "set_times", "dir": "/rw", "path": "note.txt", "mtime": { "seconds": 1_000_000_000, "nanoseconds": 999_999_999 } },
    ]);
    let results = probe(&registry, control.clone()).await;
    ok(&control, &results, 0);
    assert_eq!(
        mtime(&tree.path("rw/note.txt")),
        SystemTime::UNIX_EPOCH + Duration::new(1_000_000_000, 999_999_999)
    );
}

/// A tool cannot make a hard link to a file outside the mounts, whatever
/// path it names: `..`, a symlink (followed or not), a trailing slash.
/// Linking a symlink without following it links the symlink itself, which
/// leads nowhere the tool can go. A hard link the operator placed inside a
/// mount is another name of the outside file and is read through it: that
/// is the operator's choice (see the README), but it stays read-only.
#[tokio::test]
async fn a_hard_link_to_a_file_outside_the_mounts_cannot_be_made() {
    let tree = Tree::new();
    std::fs::hard_link(
        tree.path("outside/secret.txt"),
        tree.path("ro/operator_link.txt"),
    )
    .unwrap();
    let registry = tree.registry().await;
    let before = tree.protected();
    let ops = json!([
        { "op": "link", "dir": "/rw", "path": "../outside/secret.txt", "to_dir": "/rw", "to_path": "stolen1" },
        { "op": "link", "dir": "/rw", "path": "hidden/secret.txt", "to_dir": "/rw", "to_path": "stolen2" },
        { "op": "link", "dir": "/rw", "path": "escape", "to_dir": "/rw", "to_path": "stolen3", "flags": ["follow"] },
        { "op": "link", "dir": "/rw", "path": "escape/", "to_dir": "/rw", "to_path": "stolen4" },
        { "op": "link", "dir": "/rw", "path": "note.txt", "to_dir": "/rw", "to_path": "../outside/planted" },
        { "op": "link", "dir": "/ro", "path": "escape", "to_dir": "/rw", "to_path": "stolen5" },
        { "op": "link", "dir": "/ro", "path": "operator_link.txt", "to_dir": "/rw", "to_path": "stolen6" },
        // Links the symlink itself: allowed, and still leads nowhere.
        { "op": "link", "dir": "/rw", "path": "escape", "to_dir": "/rw", "to_path": "symlink_copy" },
        { "op": "open", "dir": "/rw", "path": "symlink_copy", "flags": ["read", "follow"] },
        { "op": "std_read", "path": "/rw/symlink_copy" },
        // The operator's own hard link.
        { "op": "std_read", "path": "/ro/operator_link.txt" },
        { "op": "open", "dir": "/ro", "path": "operator_link.txt", "flags": ["write"], "content": "pwned" },
    ]);
    let results = probe(&registry, ops.clone()).await;
    for i in 0..7 {
        let error = error(&ops, &results, i);
        let expected = match i {
            2 => "invalid",
            5 | 6 => "not-permitted",
            _ => error.as_str(),
        };
        assert_eq!(error, expected, "{}", ops[i]);
    }
    ok(&ops, &results, 7);
    error(&ops, &results, 8);
    error(&ops, &results, 9);
    assert_eq!(ok(&ops, &results, 10), SECRET);
    assert_eq!(error(&ops, &results, 11), "not-permitted");

    assert_unchanged(&before, &tree.protected());
    let secret = std::fs::metadata(tree.path("outside/secret.txt")).unwrap();
    assert_eq!(secret.nlink(), 2, "the secret and the operator's link only");
    // Nothing in the read-write mount is another name of the secret.
    for (path, entry) in tree.mount("rw") {
        assert_ne!(
            entry.inode,
            secret.ino(),
            "{} is the secret",
            path.display()
        );
    }
    assert_eq!(
        std::fs::read_link(tree.path("rw/symlink_copy")).unwrap(),
        Path::new("../outside/secret.txt")
    );
}

/// Renames across mounts: out of a read-only mount or into one, refused;
/// between two read-write mounts (on one host file system), done, as the
/// tool could have copied the file anyway; beyond either, refused.
#[tokio::test]
async fn renames_and_links_across_mounts_stay_within_what_is_lent() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let ops = json!([
        { "op": "rename", "dir": "/rw", "path": "note.txt", "to_dir": "/ro", "to_path": "moved.txt" },
        { "op": "rename", "dir": "/ro", "path": "hello.txt", "to_dir": "/rw", "to_path": "moved.txt" },
        { "op": "rename", "dir": "/ro", "path": "hello.txt", "to_dir": "/ro", "to_path": "moved.txt" },
        { "op": "rename", "dir": "/rw", "path": "note.txt", "to_dir": "/rw2", "to_path": "note.txt" },
        { "op": "rename", "dir": "/rw2", "path": "note.txt", "to_dir": "/rw2", "to_path": "../outside/note.txt" },
        { "op": "rename", "dir": "/rw2", "path": "note.txt", "to_dir": "/rw", "to_path": "../outside/note.txt" },
        { "op": "rename", "dir": "/rw2", "path": "note.txt", "to_dir": "/rw", "to_path": "hidden/note.txt" },
        { "op": "rename", "dir": "/rw2", "path": "../outside/secret.txt", "to_dir": "/rw", "to_path": "secret.txt" },
        { "op": "rename", "dir": "/rw", "path": ".", "to_dir": "/rw2", "to_path": "whole" },
        { "op": "rename", "dir": "/rw", "path": "", "to_dir": "/rw2", "to_path": "whole" },
        { "op": "mkdir", "dir": "/rw", "path": "d" },
        { "op": "rename", "dir": "/rw", "path": "d", "to_dir": "/rw2", "to_path": "d" },
        { "op": "link", "dir": "/rw2", "path": "note.txt", "to_dir": "/rw", "to_path": "back.txt" },
    ]);
    let results = probe(&registry, ops.clone()).await;
    for i in 0..3 {
        assert_eq!(error(&ops, &results, i), "not-permitted", "{}", ops[i]);
    }
    ok(&ops, &results, 3);
    for i in 4..10 {
        error(&ops, &results, i);
    }
    for i in 10..13 {
        ok(&ops, &results, i);
    }
    assert_unchanged(&before, &tree.protected());
    assert!(!tree.path("rw/note.txt").exists());
    assert_eq!(std::fs::read(tree.path("rw2/note.txt")).unwrap(), b"note");
    assert!(tree.path("rw2/d").is_dir() && !tree.path("rw/d").exists());
    let moved = std::fs::metadata(tree.path("rw2/note.txt")).unwrap();
    assert_eq!(moved.nlink(), 2);
    assert_eq!(
        std::fs::metadata(tree.path("rw/back.txt")).unwrap().ino(),
        moved.ino()
    );
    assert!(tree.path("rw").is_dir() && !tree.path("rw2/whole").exists());
}

/// Setting times in a read-only mount is refused, by path (following a
/// symlink or not), through a descriptor, and on the mount's own directory.
#[tokio::test]
async fn set_times_on_a_read_only_mount_is_refused() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let epoch = json!({ "seconds": 0 });
    let ops = json!([
        { "op": "set_times", "dir": "/ro", "path": "hello.txt", "mtime": epoch },
        { "op": "set_times", "dir": "/ro", "path": "hello.txt", "atime": "now", "mtime": "now", "flags": ["follow"] },
        { "op": "set_times", "dir": "/ro", "path": "sub", "mtime": epoch },
        { "op": "set_times", "dir": "/ro", "path": "escape", "mtime": epoch },
        { "op": "set_times", "dir": "/ro", "path": ".", "mtime": epoch },
        { "op": "set_times_fd", "dir": "/ro", "path": "hello.txt", "mtime": epoch },
        { "op": "set_times_fd", "dir": "/ro", "path": "sub", "mtime": epoch, "flags": ["directory", "read"] },
        { "op": "set_times_mount", "dir": "/ro", "mtime": epoch },
    ]);
    let results = probe(&registry, ops.clone()).await;
    assert_all_fail_with(&ops, &results, "not-permitted");
    assert_unchanged(&before, &tree.protected());

    let control = json!([
        { "op": "set_times", "dir": "/rw", "path": "note.txt", "mtime": { "seconds": 1_000_000_000 } },
    ]);
    let results = probe(&registry, control.clone()).await;
    ok(&control, &results, 0);
    assert_eq!(
        mtime(&tree.path("rw/note.txt")),
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000)
    );
}

/// Every other way to shorten or overwrite a file of a read-only mount:
/// opening for writing, creating over it, resizing or writing through a
/// read-only descriptor, and the C library's own calls.
#[tokio::test]
async fn truncation_and_writes_on_a_read_only_mount_are_refused() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let ops = json!([
        { "op": "open", "dir": "/ro", "path": "hello.txt", "flags": ["write"], "content": "x" },
        { "op": "open", "dir": "/ro", "path": "hello.txt", "flags": ["create", "write"] },
        { "op": "open", "dir": "/ro", "path": "hello.txt", "flags": ["create", "read"] },
        { "op": "open", "dir": "/ro", "path": "hello.txt", "flags": ["truncate", "write", "follow"] },
        { "op": "open", "dir": "/ro", "path": "new.txt", "flags": ["create", "exclusive", "read"] },
        { "op": "set_size", "dir": "/ro", "path": "hello.txt", "size": 0 },
        { "op": "set_size", "dir": "/ro", "path": "hello.txt", "size": 1_000_000 },
        { "op": "write_fd", "dir": "/ro", "path": "hello.txt", "content": "pwned" },
        { "op": "std_write", "path": "/ro/hello.txt", "content": "pwned" },
        { "op": "std_write", "path": "/ro/sub/deep.txt", "content": "" },
        { "op": "unlink", "dir": "/ro", "path": "hello.txt" },
        { "op": "rmdir", "dir": "/ro", "path": "sub" },
        { "op": "mkdir", "dir": "/ro", "path": "made" },
        { "op": "symlink", "dir": "/ro", "path": "planted", "target": "hello.txt" },
    ]);
    let results = probe(&registry, ops.clone()).await;
    assert_all_refused(&ops, &results);
    for i in (0..7).chain(10..14) {
        assert_eq!(error(&ops, &results, i), "not-permitted", "{}", ops[i]);
    }
    assert_unchanged(&before, &tree.protected());
}

/// A trailing slash on a file's path names a directory, so it fails
/// however the file is reached; a directory's path may end in one.
#[tokio::test]
async fn a_trailing_slash_on_a_file_path_is_refused() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let rw_before = tree.mount("rw");
    let ops = json!([
        { "op": "open", "dir": "/ro", "path": "hello.txt/", "flags": ["read"] },
        { "op": "open", "dir": "/ro", "path": "hello.txt//", "flags": ["read", "follow"] },
        { "op": "stat", "dir": "/ro", "path": "hello.txt/", "flags": ["follow"] },
        { "op": "std_read", "path": "/ro/hello.txt/" },
        { "op": "std_read", "path": "/ro/hello.txt/." },
        { "op": "open", "dir": "/rw", "path": "note.txt/", "flags": ["write"], "content": "x" },
        { "op": "open", "dir": "/rw", "path": "new.txt/", "flags": ["create", "write"], "content": "x" },
        { "op": "open", "dir": "/rw", "path": "note.txt/", "flags": ["truncate", "write"] },
        { "op": "std_write", "path": "/rw/new.txt/", "content": "x" },
        { "op": "std_write", "path": "/rw/note.txt/", "content": "x" },
        { "op": "set_times", "dir": "/rw", "path": "note.txt/", "mtime": { "seconds": 1 } },
        { "op": "unlink", "dir": "/rw", "path": "note.txt/" },
        { "op": "rmdir", "dir": "/rw", "path": "note.txt/" },
        { "op": "link", "dir": "/rw", "path": "note.txt/", "to_dir": "/rw", "to_path": "linked" },
        { "op": "link", "dir": "/rw", "path": "note.txt", "to_dir": "/rw", "to_path": "linked/" },
        { "op": "symlink", "dir": "/rw", "path": "planted/", "target": "note.txt" },
    ]);
    let results = probe(&registry, ops.clone()).await;
    assert_all_refused(&ops, &results);
    assert_unchanged(&before, &tree.protected());
    assert_unchanged(&rw_before, &tree.mount("rw"));

    let control = json!([
        { "op": "mkdir", "dir": "/rw", "path": "made/" },
        { "op": "open", "dir": "/rw", "path": "made/", "flags": ["directory", "read"] },
        { "op": "list", "dir": "/ro", "path": "sub/" },
    ]);
    let results = probe(&registry, control.clone()).await;
    ok(&control, &results, 0);
    assert_eq!(ok(&control, &results, 1)["type"], "directory");
    assert_eq!(ok(&control, &results, 2), json!(["deep.txt"]));
    assert!(tree.path("rw/made").is_dir());
}

/// Paths longer than `PATH_MAX` (4096) and names longer than `NAME_MAX`
/// (255) are a clean error, not a trap, and create nothing; long names
/// within the limits work.
#[tokio::test]
async fn very_long_paths_are_a_clean_error() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let rw_before = tree.mount("rw");
    let long_name = "x".repeat(300);
    let ops = json!([
        { "op": "open", "dir": "/rw", "path": "a/", "repeat": 3000, "tail": "f", "flags": ["create", "write"] },
        { "op": "mkdir", "dir": "/rw", "path": "a/", "repeat": 3000, "tail": "d" },
        { "op": "stat", "dir": "/ro", "path": "sub/../", "repeat": 2000, "tail": "hello.txt" },
        { "op": "open", "dir": "/ro", "path": "./", "repeat": 5000, "tail": "hello.txt", "flags": ["read"] },
        { "op": "open", "dir": "/rw", "path": "../", "repeat": 3000, "tail": "outside/secret.txt", "flags": ["read"] },
        { "op": "open", "dir": "/rw", "path": long_name, "flags": ["create", "write"] },
        { "op": "mkdir", "dir": "/rw", "path": long_name },
        { "op": "symlink", "dir": "/rw", "path": long_name, "target": "note.txt" },
        { "op": "symlink", "dir": "/rw", "path": "short", "target": "a/", "repeat": 0, "tail": "x".repeat(5000) },
        { "op": "rename", "dir": "/rw", "path": "note.txt", "to_dir": "/rw", "to_path": long_name },
        { "op": "std_write", "path": "/rw/", "repeat": 0, "tail": "a/".repeat(3000), "content": "x" },
        { "op": "std_create_dir_all", "path": "/rw/", "tail": "a/".repeat(3000) },
        { "op": "std_read", "path": "/ro/", "tail": "./".repeat(5000) + "hello.txt" },
        { "op": "std_write", "path": format!("/rw/{long_name}"), "content": "x" },
    ]);
    let results = probe(&registry, ops.clone()).await;
    assert_all_refused(&ops, &results);
    for i in [5, 6, 7, 9] {
        assert_eq!(error(&ops, &results, i), "name-too-long", "{}", ops[i]);
    }
    assert_unchanged(&before, &tree.protected());
    assert_unchanged(&rw_before, &tree.mount("rw"));

    let name = "y".repeat(255);
    let control = json!([
        { "op": "open", "dir": "/rw", "path": name, "flags": ["create", "write"], "content": "long" },
    ]);
    let results = probe(&registry, control.clone()).await;
    ok(&control, &results, 0);
    assert_eq!(std::fs::read(tree.path("rw").join(&name)).unwrap(), b"long");
}

/// A NUL byte anywhere in a path is a clean error: nothing is created under
/// the name before it, and no check is skipped past it.
#[tokio::test]
async fn nul_bytes_in_paths_are_a_clean_error() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let rw_before = tree.mount("rw");
    let ops = json!([
        { "op": "open", "dir": "/ro", "path": "hello.txt\u{0}", "flags": ["read"] },
        { "op": "open", "dir": "/ro", "path": "hello.txt\u{0}/../../outside/secret.txt", "flags": ["read"] },
        { "op": "open", "dir": "/ro", "path": "\u{0}", "flags": ["read"] },
        { "op": "stat", "dir": "/ro", "path": "sub\u{0}" },
        { "op": "open", "dir": "/rw", "path": "new\u{0}.txt", "flags": ["create", "write"], "content": "x" },
        { "op": "open", "dir": "/rw", "path": "note.txt\u{0}x", "flags": ["truncate", "write"] },
        { "op": "mkdir", "dir": "/rw", "path": "made\u{0}dir" },
        { "op": "symlink", "dir": "/rw", "path": "planted", "target": "note.txt\u{0}../../outside" },
        { "op": "symlink", "dir": "/rw", "path": "planted\u{0}x", "target": "note.txt" },
        { "op": "rename", "dir": "/rw", "path": "note.txt", "to_dir": "/rw", "to_path": "moved\u{0}" },
        { "op": "link", "dir": "/rw", "path": "note.txt\u{0}", "to_dir": "/rw", "to_path": "linked" },
        { "op": "set_times", "dir": "/rw", "path": "note.txt\u{0}", "mtime": { "seconds": 1 } },
        { "op": "unlink", "dir": "/rw", "path": "note.txt\u{0}" },
        { "op": "std_read", "path": "/ro/hello.txt\u{0}" },
        { "op": "std_write", "path": "/rw/new\u{0}.txt", "content": "x" },
    ]);
    let results = probe(&registry, ops.clone()).await;
    assert_all_refused(&ops, &results);
    assert_unchanged(&before, &tree.protected());
    assert_unchanged(&rw_before, &tree.mount("rw"));
}

/// `..` past a mount's root fails for every operation; a tool may create a
/// symlink whose relative target points outside (never an absolute one),
/// but cannot follow it.
#[tokio::test]
async fn dot_dot_and_planted_symlinks_do_not_lead_out_of_a_mount() {
    let tree = Tree::new();
    let registry = tree.registry().await;
    let before = tree.protected();
    let ops = json!([
        { "op": "open", "dir": "/rw", "path": "../outside/secret.txt", "flags": ["read"] },
        { "op": "open", "dir": "/rw", "path": "../outside/new.txt", "flags": ["create", "write"], "content": "x" },
        { "op": "open", "dir": "/ro", "path": "sub/../../outside/secret.txt", "flags": ["read", "follow"] },
        { "op": "mkdir", "dir": "/rw", "path": "../outside/made" },
        { "op": "unlink", "dir": "/rw", "path": "../outside/secret.txt" },
        { "op": "set_times", "dir": "/rw", "path": "../outside/secret.txt", "mtime": { "seconds": 1 } },
        { "op": "list", "dir": "/rw", "path": ".." },
        { "op": "std_read", "path": "/rw/../outside/secret.txt" },
        { "op": "symlink", "dir": "/rw", "path": "absolute", "target": "/etc/passwd" },
        { "op": "symlink", "dir": "/rw", "path": "planted", "target": "../outside/secret.txt" },
        { "op": "open", "dir": "/rw", "path": "planted", "flags": ["read", "follow"] },
        { "op": "open", "dir": "/rw", "path": "planted", "flags": ["write", "truncate", "follow"] },
        { "op": "std_read", "path": "/rw/planted" },
        { "op": "std_write", "path": "/rw/planted", "content": "pwned" },
        { "op": "readlink", "dir": "/rw", "path": "planted" },
    ]);
    let results = probe(&registry, ops.clone()).await;
    for i in (0..9).chain(10..14) {
        error(&ops, &results, i);
        assert!(!results[i].to_string().contains(SECRET), "{}", results[i]);
    }
    ok(&ops, &results, 9);
    assert_eq!(ok(&ops, &results, 14), "../outside/secret.txt");
    assert_unchanged(&before, &tree.protected());
    assert!(
        !tree.path("rw/absolute").exists() && tree.path("rw/absolute").symlink_metadata().is_err()
    );
    assert_eq!(
        std::fs::read_link(tree.path("rw/planted")).unwrap(),
        Path::new("../outside/secret.txt")
    );
}

/// A read-only mount nested inside a read-write one is read-only at its own
/// guest path, and changes only through the outer mount, which lends it
/// read-write: the operator's grant, as the README says.
#[tokio::test]
async fn a_read_only_mount_nested_in_a_read_write_one_changes_only_through_the_outer_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("w/sub")).unwrap();
    std::fs::create_dir_all(root.join("outside")).unwrap();
    std::fs::write(root.join("w/sub/inner.txt"), "inner").unwrap();
    std::fs::write(root.join("outside/secret.txt"), SECRET).unwrap();
    let builder = builder()
        .limits(quick_limits())
        .mount(Mount::read_write(root.join("w"), "/w"))
        .mount(Mount::read_only(root.join("w/sub"), "/sub"));
    let registry = registry(builder, &[guests::FIXTURE_FSPROBE]).await;
    let before = snapshot(root, &["w"]);
    let ops = json!([
        { "op": "open", "dir": "/sub", "path": "inner.txt", "flags": ["write"], "content": "x" },
        { "op": "link", "dir": "/sub", "path": "inner.txt", "to_dir": "/w", "to_path": "alias.txt" },
        { "op": "rename", "dir": "/sub", "path": "inner.txt", "to_dir": "/w", "to_path": "moved.txt" },
        { "op": "open", "dir": "/sub", "path": "../../outside/secret.txt", "flags": ["read"] },
        { "op": "open", "dir": "/w", "path": "sub/inner.txt", "flags": ["write", "truncate"], "content": "changed" },
    ]);
    let results = probe(&registry, ops.clone()).await;
    for i in 0..3 {
        assert_eq!(error(&ops, &results, i), "not-permitted", "{}", ops[i]);
    }
    error(&ops, &results, 3);
    ok(&ops, &results, 4);
    assert_eq!(
        std::fs::read(root.join("w/sub/inner.txt")).unwrap(),
        b"changed"
    );
    assert!(!root.join("w/alias.txt").exists() && !root.join("w/moved.txt").exists());
    assert_unchanged(&before, &snapshot(root, &["w"]));
}
