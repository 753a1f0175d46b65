//! The operator's settings as text: `toolcage.toml` through
//! [`Config::parse`], and the command line's `--mount HOST:GUEST[:ro|rw]`
//! through [`Mount::parse`].
//!
//! Checks: nothing panics; an accepted file names only absolute guest paths
//! and resolves every path against its directory, the same under another
//! directory; its limits and permissions can be applied and asked; and a
//! refused file's error is a message, not empty.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use toolcage::{Config, LimitOverrides, Limits, Mount};

const BASE: &str = "/etc/toolcage";
const OTHER_BASE: &str = "/srv/other";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check_mount(text);
    let config = match Config::parse(text, Path::new(BASE)) {
        Ok(config) => config,
        Err(error) => {
            assert!(
                !error.to_string().trim().is_empty(),
                "an empty error for {text:?}"
            );
            assert!(
                Config::parse(text, Path::new(OTHER_BASE)).is_err(),
                "accepted or refused by where it is: {text:?}"
            );
            return;
        }
    };
    assert_eq!(
        Config::parse(text, Path::new(BASE)).as_ref(),
        Ok(&config),
        "parsing is not deterministic"
    );
    let elsewhere = Config::parse(text, Path::new(OTHER_BASE))
        .expect("a file accepted in one directory is accepted in another");
    assert_eq!(elsewhere.tools.len(), config.tools.len());
    assert_eq!(elsewhere.limits, config.limits);
    assert_eq!(elsewhere.permissions, config.permissions);
    for tools in &config.tools {
        if let toolcage::ToolsSource::Dir(dir) = tools {
            assert!(dir.is_absolute(), "{tools:?} was not resolved");
        }
    }
    assert!(config.lock.is_absolute(), "the lock was not resolved");
    for key in &config.trust.keys {
        assert!(key.key.is_absolute(), "{key:?} was not resolved");
    }
    let mounts = config
        .mounts
        .iter()
        .chain(config.components.values().flat_map(|c| &c.mounts));
    for mount in mounts {
        assert!(mount.guest().starts_with('/'), "{mount:?}");
        assert!(mount.host().is_absolute(), "{mount:?} was not resolved");
    }
    // What `toolcage` does with it: layer the limits, make the builder, ask
    // the permissions.
    let limits = config.limits.then(&LimitOverrides::default());
    let applied = limits.apply(Limits::default());
    assert!(applied.fuel != Some(0) && !applied.timeout.is_zero());
    assert!(applied.memory_bytes > 0 && applied.stack_bytes > 0);
    for component in config.components.values() {
        let applied = config
            .limits
            .then(&component.limits)
            .apply(Limits::default());
        assert!(applied.fuel != Some(0) && !applied.timeout.is_zero());
    }
    let _builder = config.registry_builder(&LimitOverrides::default());
    for tool in ["read_file", "write_file", "edit_file", "", "*", "a*b"]
        .into_iter()
        .chain(config.components.keys().map(String::as_str))
    {
        let _ = config.permissions.permission_for(tool);
    }
});

fn check_mount(spec: &str) {
    if let Ok(mount) = Mount::parse(spec) {
        assert!(mount.guest().starts_with('/'), "{spec:?}: {mount:?}");
        assert!(
            !mount.host().as_os_str().is_empty(),
            "{spec:?}: an empty host path"
        );
    }
}
