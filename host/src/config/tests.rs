//! Parsing `toolcage.toml`: what each table grants, and the key every
//! refusal names.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Config, SecretSource, TrustKeyConfig};
use crate::catalog::interpreter::CodeMode;
use crate::catalog::permissions::Permission;
use crate::catalog::registry::ToolsSource;
use crate::sandbox::limits::LimitOverrides;
use crate::sandbox::mount::Mount;
use crate::upstream::{Bubblewrap, EnvValue, UpstreamServer};

fn parse(text: &str) -> Result<Config, String> {
    Config::parse(text, Path::new("/etc/toolcage")).map_err(|e| e.to_string())
}

#[test]
fn the_network_table_grants_per_component_and_for_all() {
    let config = parse(
        r#"
            [limits]
            net_requests = 7
            net_in_kib = 2
            net_first_byte_ms = 1500

            [network]
            allow = ["https://api.example.com", { url = "https://*.example.com/v1", methods = ["get"] }]
            allow_private = ["10.0.0.0/8"]
            ca_file = "ca.pem"

            [components.fetch.network]
            allow = ["http://127.0.0.1:8080"]
            "#,
    )
    .unwrap();
    let shown: Vec<String> = config
        .network
        .allow
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        shown,
        ["https://api.example.com", "https://*.example.com/v1 (GET)"]
    );
    assert_eq!(
        config.network.allow_private,
        ["10.0.0.0/8".parse().unwrap()]
    );
    assert_eq!(
        config.network.ca_file.as_deref(),
        Some(Path::new("/etc/toolcage/ca.pem"))
    );
    let fetch = &config.components["fetch"].network;
    assert_eq!(fetch.allow[0].to_string(), "http://127.0.0.1:8080");
    assert_eq!(config.limits.net_requests, Some(7));
    assert_eq!(config.limits.net_bytes_in, Some(2048));
    assert_eq!(
        config.limits.net_first_byte_timeout,
        Some(Duration::from_millis(1500))
    );
}

#[test]
fn calls_grants_and_nested_budgets_parse() {
    let config = parse(
        "[limits]\nnested_calls = 7\nnested_depth = 2\nnested_kib = 8\n\
             [components.research]\ncalls = [\"fetch\", \"read_*\"]",
    )
    .unwrap();
    assert_eq!(config.components["research"].calls, ["fetch", "read_*"]);
    let limits = config
        .limits
        .apply(crate::sandbox::limits::Limits::default());
    assert_eq!(
        (
            limits.nested_calls,
            limits.nested_depth,
            limits.nested_bytes
        ),
        (7, 2, 8 << 10)
    );
    let error = parse("[components.x]\ncalls = [\"a b\"]").unwrap_err();
    assert!(
        error.contains("components.x.calls") && error.contains("`a b` is not a tool name pattern"),
        "{error}"
    );
}

#[test]
fn mcp_servers_parse_and_bad_ones_are_refused() {
    let text = "[secrets.gh]\nenv = \"GH\"\n[mcp_servers.github]\ncommand = \"gh-mcp\"\nargs = [\"stdio\"]\nenv = { TOKEN = \"{{ secrets.gh }}\", MODE = \"ro\" }\ntools = [\"get_*\"]\nexclude_tools = [\"get_secret\"]\ntimeout_ms = 500\n";
    let config = parse(text).unwrap();
    let expected = UpstreamServer::stdio("github", "gh-mcp")
        .unwrap()
        .args(["stdio"])
        .exclude_tools(["get_secret"])
        .unwrap()
        .tools(["get_*"])
        .unwrap()
        .env("MODE", EnvValue::Text("ro".into()))
        .unwrap()
        .env("TOKEN", EnvValue::Secret("gh".into()))
        .unwrap()
        .timeout(Duration::from_millis(500));
    assert_eq!(config.mcp_servers, vec![expected]);
    let boxed = "[mcp_servers.b]\ncommand = \"c\"\nsandbox = \"bubblewrap\"\nnetwork = true\n[[mcp_servers.b.mounts]]\nhost = \"data\"\nguest = \"/data\"\nmode = \"rw\"\n";
    let bubblewrap = Bubblewrap::new()
        .network(true)
        .mount(Mount::read_write("/etc/toolcage/data", "/data"));
    let expected = UpstreamServer::stdio("b", "c")
        .unwrap()
        .bubblewrap(bubblewrap);
    assert_eq!(parse(boxed).unwrap().mcp_servers, vec![expected]);
    let remote = "[secrets.gh]\nenv = \"GH\"\n[mcp_servers.r]\nurl = \"https://mcp.example/mcp\"\nheaders = { Authorization = \"Bearer {{ secrets.gh }}\" }\nprefix = \"gh_\"\n";
    let expected = UpstreamServer::http("r", "https://mcp.example/mcp")
        .unwrap()
        .header("Authorization", "Bearer {{ secrets.gh }}")
        .unwrap()
        .prefix("gh_")
        .unwrap();
    assert_eq!(parse(remote).unwrap().mcp_servers, vec![expected]);
    let x = "[mcp_servers.x]\n";
    for (text, key, says) in [
        (&format!("{x}url = \"ftp://h/mcp\""), "x.url", "not an http"),
        (
            &format!("{x}url = \"https://h/\"\nargs = [\"a\"]"),
            "x.args",
            "stdio server",
        ),
        (
            &format!("{x}url = \"http://a.example/\"\nheaders = {{ A = \"{{{{ secrets.s }}}}\" }}"),
            "x.headers.A",
            "plain http",
        ),
        (&format!("{x}args = []"), "x.command", "give command"),
        (
            &format!("{x}command = \"c\"\nenv = {{ T = \"{{{{ secrets.nope }}}}\" }}"),
            "x.env.T",
            "`nope`",
        ),
        (
            &format!("{x}command = \"c\"\ntools = [\"a b\"]"),
            "x.tools",
            "not a tool name pattern",
        ),
        (
            &format!("{x}command = \"c\"\ntimeout_ms = 0"),
            "x.timeout_ms",
            "greater than 0",
        ),
        (
            &format!("{x}command = \"c\"\nsandbox = \"docker\""),
            "x.sandbox",
            "not a sandbox",
        ),
        (
            &format!("{x}command = \"c\"\nnetwork = true"),
            "x.sandbox",
            "bubblewrap",
        ),
        (
            &"[mcp_servers.\"a b\"]\ncommand = \"c\"".to_string(),
            "a b.command",
            "not valid",
        ),
    ] {
        let error = parse(text).unwrap_err();
        let key = format!("mcp_servers.{key}");
        assert!(
            error.contains(&key) && error.contains(says),
            "{text}: {error}"
        );
    }
}

#[test]
fn state_parses_resolves_its_key_file_and_refuses_bad_values() {
    assert_eq!(parse("").unwrap().state, super::StateConfig::default());
    let text = "[state]\nkey_file = \"state.key\"\nexpiry_ms = 1500\ninline_kib = 0\nstore_mib = 2";
    let state = parse(text).unwrap().state;
    assert_eq!(
        state.key_file.as_deref(),
        Some(Path::new("/etc/toolcage/state.key"))
    );
    assert_eq!(state.expiry, std::time::Duration::from_millis(1500));
    assert_eq!((state.inline_bytes, state.store_bytes), (0, 2 << 20));
    // The key file is read when the options are made, and must hold a key.
    let (store, _) = futures::executor::block_on(state.store(&Default::default())).unwrap();
    let error = state.options(store).err().unwrap().to_string();
    assert!(
        error.contains("/etc/toolcage/state.key could not be read"),
        "{error}"
    );
    for (text, key) in [
        ("expiry_ms = 0", "state.expiry_ms"),
        ("store_mib = 0", "state.store_mib"),
    ] {
        let error = parse(&format!("[state]\n{text}")).unwrap_err();
        assert!(
            error.contains(key) && error.contains("greater than 0"),
            "{error}"
        );
    }
    let error = parse("[state]\nkey = \"abc\"").unwrap_err();
    assert!(error.contains("key"), "{error}");
}

#[test]
fn code_mode_parses_and_refuses_bad_values() {
    assert_eq!(parse("").unwrap().code_mode, CodeMode::default());
    let config = parse("[code_mode]\ntools = [\"read_*\", \"calc\"]\nprint_kib = 8").unwrap();
    assert_eq!(
        config.code_mode,
        CodeMode::default().tools(["read_*", "calc"]).print_kib(8)
    );
    let off = parse("[code_mode]\nenabled = false").unwrap();
    assert!(!off.code_mode.is_enabled());
    let error = parse("[code_mode]\ntools = [\"a b\"]").unwrap_err();
    assert!(
        error.contains("code_mode.tools") && error.contains("`a b` is not a tool name pattern"),
        "{error}"
    );
    let error = parse("[code_mode]\nprint_kib = 0").unwrap_err();
    assert!(error.contains("code_mode.print_kib"), "{error}");
    let error = parse("[code_mode]\nlanguage = \"js\"").unwrap_err();
    assert!(error.contains("language"), "{error}");
}

#[test]
fn a_redis_backend_parses_and_refuses_what_it_cannot_use() {
    use super::{RedisConfig, StateBackend};
    let text = "[secrets.REDIS]\nenv = \"REDIS_PASSWORD\"\n[state]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6380/1\"\npassword_secret = \"REDIS\"\nprefix = \"prod:\"\ntimeout_ms = 250\nrequired = false";
    assert_eq!(
        parse(text).unwrap().state.backend,
        StateBackend::Redis(RedisConfig {
            url: "redis://127.0.0.1:6380/1".into(),
            password_secret: Some("REDIS".into()),
            prefix: "prod:".into(),
            timeout: std::time::Duration::from_millis(250),
            required: false,
        })
    );
    let plain = parse("[state]\nbackend = \"redis\"\nurl = \"rediss://r:6379\"").unwrap();
    let StateBackend::Redis(redis) = plain.state.backend else {
        panic!("redis")
    };
    assert_eq!((redis.prefix.as_str(), redis.required), ("toolcage:", true));
    for (text, key, says) in [
        ("backend = \"etcd\"", "state.backend", "not a backend"),
        ("backend = \"redis\"", "state.url", "is needed"),
        (
            "backend = \"redis\"\nurl = \"http://r\"",
            "state.url",
            "redis://",
        ),
        ("url = \"redis://r\"", "state.url", "backend = \"redis\""),
        (
            "backend = \"redis\"\nurl = \"redis://r\"\npassword_secret = \"NO\"",
            "state.password_secret",
            "[secrets.NO]",
        ),
        (
            "backend = \"redis\"\nurl = \"redis://r\"\ntimeout_ms = 0",
            "state.timeout_ms",
            "greater than 0",
        ),
    ] {
        let error = parse(&format!("[state]\n{text}")).unwrap_err();
        assert!(
            error.contains(key) && error.contains(says),
            "{text}: {error}"
        );
    }
}

#[test]
fn session_bounds_parse_and_refuse_zero() {
    use crate::state::SessionLimits;
    assert_eq!(parse("").unwrap().sessions, Some(SessionLimits::default()));
    let text = "[code_mode]\nsession_kib = 8\nsessions_per_caller = 2\nsession_idle_ms = 500";
    let limits = parse(text).unwrap().sessions.unwrap();
    assert_eq!(
        limits,
        SessionLimits {
            bytes: 8 << 10,
            per_caller: 2,
            idle: std::time::Duration::from_millis(500),
        }
    );
    let off = parse("[code_mode]\nenabled = false\nsession_kib = 8").unwrap();
    assert_eq!(off.sessions, None);
    for key in ["session_kib", "sessions_per_caller", "session_idle_ms"] {
        let error = parse(&format!("[code_mode]\n{key} = 0")).unwrap_err();
        assert!(error.contains(&format!("code_mode.{key}")), "{error}");
    }
}

#[test]
fn secrets_injections_and_settings_parse() {
    let config = parse(
        r#"
            [secrets.GITHUB_TOKEN]
            env = "GH_TOKEN"
            [secrets.SLACK]
            file = "secrets/slack"

            [components.gh.network]
            allow = ["https://api.github.com"]
            [[components.gh.network.inject]]
            url = "https://api.github.com/repos"
            header = "Authorization"
            value = "Bearer {{ secrets.GITHUB_TOKEN }}"
            methods = ["get"]

            [components.gh.config]
            owner = "octocat"
            "#,
    )
    .unwrap();
    assert_eq!(
        config.secrets["GITHUB_TOKEN"],
        SecretSource::Env("GH_TOKEN".into())
    );
    assert_eq!(
        config.secrets["SLACK"],
        SecretSource::File("/etc/toolcage/secrets/slack".into())
    );
    let gh = &config.components["gh"];
    assert_eq!(
        gh.network.inject[0].url(),
        "https://api.github.com/repos (GET)"
    );
    assert_eq!(gh.settings["owner"], "octocat");
    // Reading them names the secret and where it was looked for.
    let error = config.read_secrets().unwrap_err().to_string();
    assert!(
        error.starts_with("secret `GITHUB_TOKEN`: the environment variable GH_TOKEN")
            || error.starts_with("secret `SLACK`: reading /etc/toolcage/secrets/slack"),
        "{error}"
    );
}

#[test]
fn an_empty_file_grants_nothing() {
    let config = parse("").unwrap();
    let lock = PathBuf::from("/etc/toolcage/toolcage.lock");
    assert_eq!(
        config,
        Config {
            lock,
            ..Config::default()
        }
    );
    assert!(config.tools.is_empty() && config.mounts.is_empty());
    assert!(config.network.allow.is_empty(), "no network unless granted");
    assert!(config.bundled);
    assert_eq!(config.permissions.default_permission(), Permission::Allow);
}

#[test]
fn distribution_settings_name_the_key_at_fault() {
    for (text, key) in [
        (r#"tools = ["oci://ghcr.io/team/grep"]"#, "tools[0]"),
        (r#"tools = ["dir", "oci://ghcr.io/X/y:1"]"#, "tools[1]"),
        (
            "[oci]\ninsecure_registries = [\"a b\"]",
            "oci.insecure_registries[0]",
        ),
        ("[oci]\nmirror = \"x\"", "mirror"),
        (
            "[[trust.keys]]\nprefix = \"ghcr.io/\"\nkey = \"k.pub\"",
            "trust.keys[0].prefix",
        ),
        ("[[trust.keys]]\nprefix = \"oci://ghcr.io/\"", "key"),
    ] {
        let error = parse(text).unwrap_err();
        assert!(error.contains(key), "{text}: {error}");
    }
    let config = parse("[trust]\nrequire_digest = false\n[[trust.keys]]\nprefix = \"oci://r/\"\nkey = \"k.pub\"\nrequire_signature = false").unwrap();
    assert!(!config.trust.require_digest && !config.trust.keys[0].require_signature);
    let error = config.trust_policy().unwrap_err().to_string();
    assert!(error.contains("/etc/toolcage/k.pub"), "{error}");
}

#[test]
fn the_documented_example_parses() {
    let doc = include_str!("../config.rs");
    let example: String = doc
        .lines()
        .skip_while(|l| !l.starts_with("//! ```toml"))
        .skip(1)
        .take_while(|l| !l.starts_with("//! ```"))
        .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
        .collect();
    let config = parse(&example).unwrap();
    assert_eq!(
        config.tools,
        [
            ToolsSource::Dir(PathBuf::from("/etc/toolcage/tools")),
            ToolsSource::parse("oci://ghcr.io/team/grep:1.2").unwrap(),
        ]
    );
    assert_eq!(config.lock, PathBuf::from("/etc/toolcage/toolcage.lock"));
    assert_eq!(config.oci.insecure_registries, ["127.0.0.1:5000"]);
    assert_eq!(
        config.oci.store,
        Some(PathBuf::from("/etc/toolcage/oci-store"))
    );
    assert!(config.trust.require_digest);
    assert_eq!(
        config.trust.keys,
        [TrustKeyConfig {
            prefix: "oci://ghcr.io/team/".into(),
            key: PathBuf::from("/etc/toolcage/keys/team.pub"),
            require_signature: true,
        }]
    );
    assert_eq!(config.limits.fuel, Some(Some(10_000_000_000)));
    assert_eq!(config.limits.memory_bytes, Some(256 << 20));
    assert_eq!(
        config.mounts,
        [Mount::read_only("/etc/toolcage/.", "/workspace")]
    );
    let fs = &config.components["fs"];
    assert_eq!(fs.limits.timeout, Some(Duration::from_secs(60)));
    assert_eq!(
        fs.mounts,
        [Mount::read_write("/etc/toolcage/scratch", "/scratch")]
    );
    assert_eq!(
        config.permissions.permission_for("write_file"),
        Permission::Ask
    );
    assert_eq!(
        config.permissions.permission_for("edit_file"),
        Permission::Deny
    );
    assert_eq!(
        config.permissions.permission_for("read_file"),
        Permission::Allow
    );
}

#[test]
fn unknown_keys_are_named() {
    for (text, key) in [
        ("tool = []", "tool"),
        ("[limits]\ntimeout = 5", "timeout"),
        (
            "[[mounts]]\nhost = \".\"\nguest = \"/w\"\nmod = \"rw\"",
            "mod",
        ),
        ("[components.fs]\nlimit = {}", "limit"),
    ] {
        let error = parse(text).unwrap_err();
        assert!(error.contains(&format!("`{key}`")), "{text}: {error}");
    }
}

#[test]
fn bad_values_are_named() {
    for (text, needle) in [
        ("[limits]\ntimeout_ms = 0", "limits.timeout_ms"),
        ("[limits]\nfuel = \"lots\"", "limits.fuel"),
        ("[limits]\nfuel = 0", "limits.fuel"),
        ("[limits]\nmemory_mib = -1", "memory_mib"),
        (
            "[components.x.limits]\noutput_kib = 0",
            "components.x.limits.output_kib",
        ),
        ("[[mounts]]\nhost = \".\"\nguest = \"w\"", "mounts.guest"),
        (
            "[[mounts]]\nhost = \".\"\nguest = \"/w\"\nmode = \"rwx\"",
            "rwx",
        ),
        ("[permissions]\nedit_file = \"maybe\"", "`edit_file`"),
        ("[permissions]\n\"read file\" = \"deny\"", "`read file`"),
        ("bundled = \"yes\"", "bundled"),
        ("[limits]\nstack_kib = 99999999999", "limits.stack_kib"),
        ("[limits]\nnet_requests = 0", "limits.net_requests"),
        ("[limits]\nnet_in_kib = 0", "limits.net_in_kib"),
        ("[network]\nallow = [\"example.com\"]", "network.allow[0]"),
        (
            "[network]\nallow = [\"https://a.test\", \"https://u@b.test\"]",
            "network.allow[1]: network grant `https://u@b.test`",
        ),
        (
            "[network]\nallow = [{ url = \"tcp://db:5432\", methods = [\"GET\"] }]",
            "methods only make sense",
        ),
        (
            "[network]\nallow_private = [\"10.0.0.1/8\"]",
            "network.allow_private[0]",
        ),
        ("[network]\nallow = [{ uri = \"https://x.test\" }]", "uri"),
        (
            "[components.x.network]\nca_file = \"ca.pem\"",
            "components.x.network.ca_file",
        ),
        (
            "[secrets.T]\nenv = \"A\"\nfile = \"b\"",
            "secrets.T: set exactly one of env",
        ),
        ("[secrets.T]\nvalue = \"hunter22\"", "`value`"),
        (
            "[secrets.\"a-b\"]\nenv = \"A\"",
            "secrets.a-b: a secret's name",
        ),
        (
            "[[network.inject]]\nurl = \"https://a.test\"\nheader = \"x\"\nvalue = \"{{ secrets.T }}\"",
            "network.inject: an injection gives one component a secret",
        ),
        (
            "[[components.x.network.inject]]\nurl = \"https://a.test\"\nheader = \"x\"\nvalue = \"{{ secrets.T }}\"",
            "components.x.network.inject[0].value: the secret `T` is not declared",
        ),
        (
            "[secrets.T]\nenv = \"A\"\n[[components.x.network.inject]]\nurl = \"http://a.test\"\nheader = \"x\"\nvalue = \"{{ secrets.T }}\"",
            "components.x.network.inject[0]: secret injection for `http://a.test`: plain http",
        ),
        (
            "[components.x.config]\ntoken = \"{{ secrets.T }}\"",
            "components.x.config.token: a secret cannot be a setting",
        ),
        ("[components.x.config]\nretries = 3", "expected a string"),
    ] {
        let error = parse(text).unwrap_err();
        assert!(error.contains(needle), "{text}: {error}");
    }
}

#[test]
fn fuel_can_be_unlimited() {
    let config = parse("[limits]\nfuel = \"unlimited\"").unwrap();
    assert_eq!(config.limits.fuel, Some(None));
}

#[test]
fn flags_override_the_file() {
    let config = parse("[limits]\ntimeout_ms = 100\nmemory_mib = 1").unwrap();
    let flags = LimitOverrides {
        timeout: Some(Duration::from_millis(5)),
        ..Default::default()
    };
    let limits = config
        .limits
        .then(&flags)
        .apply(crate::sandbox::limits::Limits::default());
    assert_eq!(limits.timeout, Duration::from_millis(5));
    assert_eq!(limits.memory_bytes, 1 << 20);
}
