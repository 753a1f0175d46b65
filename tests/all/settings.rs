//! Settings: the strings an operator writes for a component, read by its
//! tools through `wasi:config/store` with each SDK's `config` (the
//! `fixture-settings` Rust fixture, `py_settings` of `py_probe`,
//! `js_settings` of `js_probe`). A key that is set, one that is not, all of
//! them, none by default, and only the component's own; through the library
//! and through the config file.

use serde_json::{Value, json};
use toolcage::Registry;
use toolcage_tests::{builder, guests, quick_limits, registry, toolcage};

/// What `tool` reads for `key`: `{"value": …, "all": {…}}`.
async fn read(registry: &Registry, tool: &str, key: &str) -> Value {
    let result = registry.call(tool, json!({ "key": key })).await;
    assert!(!result.is_error, "{}", result.output);
    result.details.expect("the call has details")
}

/// `tool` of `fixture`, whose component is `component`, reads the settings
/// written for its component and no other's, and none when none were
/// written. The registries keep one memory limit, so they share the
/// compiled component.
async fn assert_settings_are_read(fixture: &str, component: &str, tool: &str) {
    let written = builder()
        .limits(quick_limits())
        .component_setting(component, "greeting", "Hej, världen!\nLine two")
        .component_setting(component, "region", "eu-north-1")
        .component_setting(component, "empty", "")
        .component_setting("another", "only_another", "not for this tool");
    let written = registry(written, &[fixture]).await;
    let all = json!({
        "empty": "",
        "greeting": "Hej, världen!\nLine two",
        "region": "eu-north-1"
    });
    assert_eq!(
        read(&written, tool, "greeting").await,
        json!({ "value": "Hej, världen!\nLine two", "all": all })
    );
    assert_eq!(read(&written, tool, "empty").await["value"], "");
    // Absent, and written for another component only.
    assert_eq!(
        read(&written, tool, "timezone").await,
        json!({ "value": null, "all": all })
    );
    assert_eq!(
        read(&written, tool, "only_another").await["value"],
        Value::Null
    );

    let default = registry(builder().limits(quick_limits()), &[fixture]).await;
    assert_eq!(
        read(&default, tool, "greeting").await,
        json!({ "value": null, "all": {} })
    );
}

#[tokio::test]
async fn rust_tools_read_their_settings() {
    assert_settings_are_read(guests::FIXTURE_SETTINGS, "fixture_settings", "settings").await;
}

#[tokio::test]
async fn python_tools_read_their_settings() {
    assert_settings_are_read(guests::FIXTURE_PY_PROBE, "py_probe", "py_settings").await;
}

#[tokio::test]
async fn javascript_tools_read_their_settings() {
    assert_settings_are_read(guests::FIXTURE_JS_PROBE, "js_probe", "js_settings").await;
}

#[test]
fn the_config_file_writes_a_components_settings() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tools")).unwrap();
    std::fs::copy(
        guests::FIXTURE_SETTINGS,
        dir.path().join("tools/settings.wasm"),
    )
    .unwrap();
    let config = dir.path().join("toolcage.toml");
    std::fs::write(
        &config,
        r#"tools = ["tools"]
bundled = false

[components.settings.config]
greeting = "Hej"
"base.url" = "https://example.com/api"

[components.elsewhere.config]
greeting = "not for this tool"
"#,
    )
    .unwrap();
    let call = |key: &str| {
        let output = toolcage()
            .current_dir(dir.path())
            .args(["--json", "call", "settings"])
            .arg(json!({ "key": key }).to_string())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let result: Value = serde_json::from_slice(&output.stdout).unwrap();
        result["details"].clone()
    };
    let all = json!({ "base.url": "https://example.com/api", "greeting": "Hej" });
    assert_eq!(call("greeting"), json!({ "value": "Hej", "all": all }));
    assert_eq!(call("missing"), json!({ "value": null, "all": all }));

    // A secret is no setting: the tool would read it.
    std::fs::write(
        &config,
        "tools = [\"tools\"]\n[components.settings.config]\ntoken = \"{{ secrets.TOKEN }}\"\n",
    )
    .unwrap();
    let output = toolcage()
        .current_dir(dir.path())
        .args(["call", "settings", r#"{"key": "token"}"#])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("components.settings.config.token"),
        "{stderr}"
    );
}
