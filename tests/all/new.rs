//! `toolcage new`: each language's project builds with the command it was
//! printed with, `toolcage check` accepts the component unchanged, and
//! calling it through toolcage answers as the example says, reading the
//! setting the printed next steps name. The projects
//! reuse what the build already installed (the Rust guests' dependencies,
//! the componentize-py venv, componentize-js) through the paths a project
//! uses for them, so only the tool itself is built here.

use std::path::{Path, PathBuf};
use std::process::Command;

use toolcage_tests::{guests, toolcage};

/// Where the build put the guests and the script toolchains.
fn guest_target() -> &'static Path {
    Path::new(guests::EXAMPLES_DIR)
        .parent()
        .expect("target/guest-tools")
}

/// `toolcage new name --lang lang` in `parent`; returns the project.
fn new_project(parent: &Path, name: &str, lang: &str) -> PathBuf {
    let output = toolcage()
        .args(["new", name, "--lang", lang])
        .current_dir(parent)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("build it: ") && stdout.contains("call it:  toolcage --tools"));
    let component = name.replace('-', "_");
    assert!(
        stdout.contains(&format!("[components.{component}.config]")),
        "{stdout}"
    );
    // Refused the second time: nothing is overwritten.
    let again = toolcage()
        .args(["new", name, "--lang", lang])
        .current_dir(parent)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    parent.join(name)
}

fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `toolcage check` accepts `wasm`, and a call through `--tools dir` gives
/// the example's answer: the three most frequent words, or as many as the
/// component's `default_top` setting says.
fn check_and_call(cache: &Path, wasm: &Path, name: &str) {
    let output = toolcage()
        .env("XDG_CACHE_HOME", cache)
        .arg("check")
        .arg(wasm)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains(&format!("1 tool(s): {name}")), "{stdout}");
    let call = |config: &Path| {
        let output = toolcage()
            .env("XDG_CACHE_HOME", cache)
            .arg("--config")
            .arg(config)
            .args(["--no-bundled", "--tools"])
            .arg(wasm.parent().unwrap())
            .args(["call", name, r#"{"text": "a b A"}"#])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let config = cache.join("toolcage.toml");
    std::fs::write(&config, "").unwrap();
    assert_eq!(
        call(&config),
        serde_json::json!({ "words": 3, "top": [["a", 2], ["b", 1]] })
    );
    let component = wasm.file_stem().unwrap().to_string_lossy();
    std::fs::write(
        &config,
        format!("[components.{component}.config]\ndefault_top = \"1\"\n"),
    )
    .unwrap();
    assert_eq!(
        call(&config),
        serde_json::json!({ "words": 3, "top": [["a", 2]] })
    );
}

#[test]
fn a_new_rust_project_builds_checks_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let project = new_project(dir.path(), "word-count", "rust");
    // The guests' dependency versions, and their target directory: the
    // dependencies are already built there.
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-tools/Cargo.lock");
    std::fs::copy(lock, project.join("Cargo.lock")).unwrap();
    run(Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--release", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", guest_target())
        .current_dir(&project));
    let wasm = dir.path().join("tools/word_count.wasm");
    std::fs::create_dir_all(wasm.parent().unwrap()).unwrap();
    std::fs::copy(
        guest_target().join("wasm32-wasip2/release/word_count.wasm"),
        &wasm,
    )
    .unwrap();
    check_and_call(dir.path(), &wasm, "word-count");
}

#[test]
fn a_new_python_project_tests_builds_checks_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let project = new_project(dir.path(), "wc_py", "python");
    run(Command::new("python3")
        .arg("test_app.py")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(&project));
    std::os::unix::fs::symlink(guest_target().join("python-venv"), project.join(".venv")).unwrap();
    run(&mut Command::new(project.join("build.sh")));
    check_and_call(dir.path(), &project.join("build/wc_py.wasm"), "wc_py");
}

#[test]
fn a_new_javascript_project_tests_builds_checks_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let project = new_project(dir.path(), "wc-js", "js");
    run(Command::new("node").arg("test.mjs").current_dir(&project));
    std::os::unix::fs::symlink(
        guest_target().join("js-toolchain/node_modules"),
        project.join("node_modules"),
    )
    .unwrap();
    run(&mut Command::new(project.join("build.sh")));
    check_and_call(dir.path(), &project.join("build/wc_js.wasm"), "wc-js");
}

#[test]
fn a_name_that_cannot_name_a_tool_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["9lives", "two words", "dot.name", ""] {
        let output = toolcage()
            .args(["new", name, "--lang", "python"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(!output.status.success(), "{name}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("cannot name a tool"));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
