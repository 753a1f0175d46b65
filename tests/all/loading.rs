//! Loading components: first wins, bad files are skipped with a diagnostic,
//! and describe() runs within the limits.

use std::time::{Duration, Instant};

use serde_json::json;
use toolcage::{ErrorKind, LimitOverrides, LoadError, Source};
use toolcage_tests::{assert_loaded, builder, guests, quick_limits};

fn copy_into(dir: &std::path::Path, file_name: &str, guest: &str) {
    std::fs::copy(guest, dir.join(file_name)).unwrap();
}

#[tokio::test]
async fn first_wins_and_the_report_names_the_shadowed_tool() {
    let mut registry = builder().build().unwrap();
    let first = registry.load_file(guests::FIXTURE_ECHO).await;
    assert_loaded(&first);
    assert_eq!(first.registered, ["echo", "counter", "fail", "bad_details"]);
    let second = registry.load_file(guests::FIXTURE_ECHO_TWIN).await;
    assert_loaded(&second);
    assert_eq!(second.registered, ["twin_only"]);
    assert_eq!(second.shadowed.len(), 1);
    assert_eq!(second.shadowed[0].tool, "echo");
    assert_eq!(second.shadowed[0].owner, "fixture_echo");

    let result = registry.call("echo", json!({ "text": "original" })).await;
    assert_eq!(result.output, "original", "the impostor never runs");
    assert_eq!(registry.tool("echo").unwrap().component, "fixture_echo");
    assert_eq!(
        registry.tool("twin_only").unwrap().component,
        "fixture_echo_twin"
    );

    // Loading the impostor again, under any name, changes nothing.
    let bytes = std::fs::read(guests::FIXTURE_ECHO_TWIN).unwrap();
    let again = registry.load_bytes("impostor", bytes).await;
    assert_eq!(again.registered, Vec::<String>::new());
    assert_eq!(again.shadowed.len(), 2);
    assert_eq!(again.source, Source::Bytes);
    assert_eq!(registry.tools().len(), 5);
}

#[tokio::test]
async fn a_directory_loads_in_file_name_order_and_skips_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    copy_into(path, "b_echo.wasm", guests::FIXTURE_ECHO);
    copy_into(path, "a_twin.wasm", guests::FIXTURE_ECHO_TWIN);
    copy_into(path, "c_bad_name.wasm", guests::FIXTURE_BAD_NAME);
    copy_into(path, "d_bad_schema.wasm", guests::FIXTURE_BAD_SCHEMA);
    copy_into(path, "e_no_export.wasm", guests::FIXTURE_NO_EXPORT);
    copy_into(
        path,
        "f_unknown_import.wasm",
        guests::FIXTURE_UNKNOWN_IMPORT,
    );
    std::fs::write(path.join("g_text.wasm"), "this is not wasm").unwrap();
    std::fs::write(path.join("h_empty.wasm"), "").unwrap();
    // The smallest core module: magic and version 1.
    std::fs::write(path.join("i_core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let mut truncated = std::fs::read(guests::FIXTURE_ECHO).unwrap();
    truncated.truncate(truncated.len() / 2);
    std::fs::write(path.join("j_truncated.wasm"), truncated).unwrap();
    std::fs::write(path.join("notes.txt"), "ignored: not *.wasm").unwrap();
    std::fs::create_dir(path.join("k_dir.wasm")).unwrap();

    let mut registry = builder().limits(quick_limits()).build().unwrap();
    let reports = registry.load_dir(path).await.unwrap();
    let names: Vec<&str> = reports.iter().map(|r| r.component.as_str()).collect();
    assert_eq!(
        names,
        [
            "a_twin",
            "b_echo",
            "c_bad_name",
            "d_bad_schema",
            "e_no_export",
            "f_unknown_import",
            "g_text",
            "h_empty",
            "i_core",
            "j_truncated",
            "k_dir"
        ]
    );
    // The twin came first in file order, so it owns `echo` here.
    assert_eq!(reports[0].registered, ["echo", "twin_only"]);
    assert_eq!(reports[1].shadowed[0].owner, "a_twin");
    assert!(reports[1].registered.contains(&"counter".to_string()));

    let error = |i: usize| {
        reports[i]
            .error
            .clone()
            .unwrap_or_else(|| panic!("{} loaded", reports[i].component))
    };
    assert!(
        matches!(error(2), LoadError::InvalidDescriptor { ref tool, .. } if tool == "bad name!"),
        "{}",
        error(2)
    );
    assert!(
        error(2).to_string().contains("does not match"),
        "{}",
        error(2)
    );
    assert!(
        matches!(error(3), LoadError::InvalidDescriptor { ref tool, .. } if tool == "bad_schema"),
        "{}",
        error(3)
    );
    assert!(matches!(error(4), LoadError::Export(_)), "{}", error(4));
    assert!(matches!(error(5), LoadError::Import(_)), "{}", error(5));
    assert!(
        error(5)
            .to_string()
            .contains("fixture:unknown-import/secrets"),
        "{}",
        error(5)
    );
    assert_eq!(error(6), LoadError::NotWasm);
    assert_eq!(error(7), LoadError::NotWasm);
    assert_eq!(error(8), LoadError::CoreModule);
    assert!(matches!(error(9), LoadError::Compile(_)), "{}", error(9));
    assert_eq!(error(10), LoadError::Io("not a regular file".into()));
    assert!(
        registry.tool("good_schema").is_none(),
        "a component with one invalid tool is skipped whole"
    );
    assert_eq!(registry.tools().len(), 5);
}

#[tokio::test]
async fn a_missing_directory_is_an_operator_error() {
    let mut registry = builder().build().unwrap();
    let error = registry.load_dir("/no/such/dir").await.unwrap_err();
    assert!(error.to_string().contains("/no/such/dir"), "{error}");
}

#[tokio::test]
async fn a_describe_that_never_returns_is_stopped_by_fuel() {
    let fuel = LimitOverrides {
        fuel: Some(Some(20_000_000)),
        ..LimitOverrides::default()
    };
    let mut registry = builder()
        .limits(quick_limits())
        .component_limits("fixture_describe_loop", fuel)
        .build()
        .unwrap();
    let report = registry.load_file(guests::FIXTURE_DESCRIBE_LOOP).await;
    match report.error {
        Some(LoadError::Describe {
            kind: ErrorKind::OutOfFuel,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(registry.tools().len(), 0);
}

#[tokio::test]
async fn a_describe_that_never_returns_is_stopped_by_the_timeout() {
    let slow = LimitOverrides {
        fuel: Some(None),
        timeout: Some(Duration::from_millis(200)),
        ..LimitOverrides::default()
    };
    let mut registry = builder()
        .component_limits("fixture_describe_loop", slow)
        .build()
        .unwrap();
    let started = Instant::now();
    let report = registry.load_file(guests::FIXTURE_DESCRIBE_LOOP).await;
    match &report.error {
        Some(LoadError::Describe {
            kind: ErrorKind::Timeout,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // The registry goes on loading.
    assert_loaded(&registry.load_file(guests::FIXTURE_ECHO).await);
}

#[tokio::test]
async fn a_missing_file_is_reported() {
    let mut registry = builder().build().unwrap();
    let report = registry.load_file("/no/such/tool.wasm").await;
    assert!(
        matches!(report.error, Some(LoadError::Io(_))),
        "{:?}",
        report.error
    );
    assert_eq!(report.component, "tool");
}

#[tokio::test]
async fn tool_info_carries_the_descriptor() {
    let mut registry = builder().build().unwrap();
    assert_loaded(&registry.load_file(guests::FIXTURE_ECHO).await);
    let echo = registry.tool("echo").unwrap();
    assert_eq!(echo.descriptor.title.as_deref(), Some("Echo"));
    assert!(echo.descriptor.hints.read_only && echo.descriptor.hints.idempotent);
    assert!(!echo.descriptor.hints.destructive);
    assert_eq!(echo.descriptor.input_schema["required"], json!(["text"]));
    assert_eq!(echo.source, Source::File(guests::FIXTURE_ECHO.into()));
    let json = serde_json::to_value(echo).unwrap();
    for key in [
        "name",
        "title",
        "description",
        "input_schema",
        "output_schema",
        "hints",
        "component",
        "source",
    ] {
        assert!(json.get(key).is_some(), "{key} missing from {json}");
    }
}

/// A guest added without a test fails here: each is listed with what loading
/// it must do, and its topic's tests say the rest.
#[tokio::test]
async fn every_guest_is_covered() {
    for (name, path) in guests::ALL {
        let loads = match *name {
            "FIXTURE_ECHO" | "FIXTURE_ECHO_TWIN" | "FIXTURE_MISBEHAVE" | "FIXTURE_HIJACK" => true,
            "FIXTURE_LEFTOVERS" | "FIXTURE_LEFTOVERS_WAT" | "FIXTURE_FSPROBE" => true,
            "FIXTURE_NETPROBE" | "FIXTURE_COMPOSER" => true,
            "FIXTURE_SCHEMA_ZOO" | "FIXTURE_SETTINGS" => true,
            "TOOLCAGE_FS" | "TOOLCAGE_CALC" | "TOOLCAGE_FETCH" => true,
            "FIXTURE_BAD_NAME" | "FIXTURE_BAD_SCHEMA" | "FIXTURE_DESCRIBE_LOOP" => false,
            "FIXTURE_NO_EXPORT" | "FIXTURE_UNKNOWN_IMPORT" | "FIXTURE_MANY_TOOLS" => false,
            other => panic!("guest {other} is not covered: give it a test and list it here"),
        };
        let limits = toolcage::Limits {
            fuel: Some(50_000_000),
            ..quick_limits()
        };
        let mut registry = builder().limits(limits).build().unwrap();
        let report = registry.load_file(path).await;
        assert_eq!(report.is_ok(), loads, "{name}: {:?}", report.error);
    }
}

#[tokio::test]
async fn a_component_declaring_too_many_tools_is_skipped() {
    let mut registry = builder().build().unwrap();
    let report = registry.load_file(guests::FIXTURE_MANY_TOOLS).await;
    assert_eq!(report.error, Some(LoadError::TooManyTools(300)));
    assert_eq!(registry.tools().len(), 0);
}

#[tokio::test]
async fn files_that_are_not_regular_are_skipped_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(dir.path().join("a_fifo.wasm"))
        .status()
        .unwrap();
    assert!(status.success());
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("b_zero.wasm")).unwrap();
    copy_into(dir.path(), "c_echo.wasm", guests::FIXTURE_ECHO);
    let mut registry = builder().build().unwrap();
    let reports = registry.load_dir(dir.path()).await.unwrap();
    assert_eq!(
        reports[0].error,
        Some(LoadError::Io("not a regular file".into()))
    );
    assert_eq!(
        reports[1].error,
        Some(LoadError::Io("not a regular file".into()))
    );
    assert_loaded(&reports[2]);
}

/// The one compiled entry in a disk cache directory, and its inode.
fn cache_entry(dir: &std::path::Path) -> (std::path::PathBuf, u64) {
    use std::os::unix::fs::MetadataExt;
    let entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let inode = std::fs::metadata(&entries[0]).unwrap().ino();
    (entries[0].clone(), inode)
}

/// Loads `FIXTURE_ECHO` in a runtime of its own (as a new process would)
/// caching in `dir`, and calls it.
async fn load_through_cache(dir: &std::path::Path) {
    load_through(toolcage::Runtime::with_disk_cache(dir).expect("a runtime")).await;
}

async fn load_through(runtime: toolcage::Runtime) {
    let mut registry = toolcage::Registry::builder()
        .runtime(&runtime)
        .build()
        .unwrap();
    assert_loaded(&registry.load_file(guests::FIXTURE_ECHO).await);
    let result = registry.call("echo", json!({ "text": "cached" })).await;
    assert_eq!(result.output, "cached");
}

#[tokio::test]
async fn the_disk_cache_serves_a_new_runtime_and_replaces_a_bad_entry() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = |path: &std::path::Path| {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    load_through_cache(&cache).await;
    assert_eq!(mode(&cache), 0o700, "only its owner may change its code");
    let (entry, inode) = cache_entry(&cache);
    assert_eq!(mode(&entry), 0o600);

    // A new runtime maps the entry: it is not compiled or written again.
    load_through_cache(&cache).await;
    assert_eq!(cache_entry(&cache), (entry.clone(), inode));

    // An entry that does not load, or that is not a file only its owner can
    // write, is compiled again and replaced.
    let good = dir.path().join("good.cwasm");
    std::fs::copy(&entry, &good).unwrap();
    let replace = |make: &dyn Fn(&std::path::Path)| {
        std::fs::remove_file(&entry).unwrap();
        make(&entry);
    };
    let bad_entries: [&dyn Fn(&std::path::Path); 4] = [
        &|path| std::fs::write(path, b"garbage").unwrap(),
        &|path| std::fs::write(path, &std::fs::read(&good).unwrap()[..4096]).unwrap(),
        &|path| std::os::unix::fs::symlink(&good, path).unwrap(),
        &|path| {
            std::fs::copy(&good, path).unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).unwrap();
        },
    ];
    for make in bad_entries {
        replace(make);
        let bad_inode = std::fs::symlink_metadata(&entry).unwrap().ino();
        load_through_cache(&cache).await;
        let (again, new_inode) = cache_entry(&cache);
        assert_eq!(again, entry);
        assert_ne!(new_inode, bad_inode, "the bad entry was replaced");
        assert_eq!(mode(&entry), 0o600);
    }

    // A directory others could write to is made owner-only.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    load_through_cache(&cache).await;
    assert_eq!(mode(&cache), 0o700);

    // A component larger than the whole cache is not written.
    let small = dir.path().join("small");
    let runtime = toolcage::Runtime::builder()
        .disk_cache(&small)
        .disk_cache_max_bytes(1)
        .build()
        .unwrap();
    load_through(runtime).await;
    assert_eq!(std::fs::read_dir(&small).unwrap().count(), 0);
}

#[tokio::test]
async fn no_tool_may_be_lent_the_disk_cache_read_write() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("home/.cache/toolcage");
    let runtime = toolcage::Runtime::with_disk_cache(&cache).unwrap();
    let home = dir.path().join("home");
    for lent in [home.clone(), cache.clone()] {
        let error = toolcage::Registry::builder()
            .runtime(&runtime)
            .mount(toolcage::Mount::read_write(&lent, "/home"))
            .build()
            .err()
            .expect("refused");
        assert!(
            error.to_string().contains("holds the compile cache"),
            "{error}"
        );
    }
    // Read-only, or beside it, is fine.
    std::fs::create_dir(dir.path().join("work")).unwrap();
    toolcage::Registry::builder()
        .runtime(&runtime)
        .mount(toolcage::Mount::read_only(&home, "/home"))
        .mount(toolcage::Mount::read_write(
            dir.path().join("work"),
            "/work",
        ))
        .build()
        .expect("a read-only mount of it, and a read-write one beside it");
}
