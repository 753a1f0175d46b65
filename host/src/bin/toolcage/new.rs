//! `toolcage new NAME --lang rust|python|js`: writes a tool project that
//! builds as it is (the WIT contract, the language's SDK, one example tool,
//! a build command and a test of the tool's logic), and prints the commands
//! that build it and call it. The SDKs and the WIT are the ones this binary
//! was built with, so what the project builds is what this toolcage loads.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// A tool project's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with the toolcage-guest SDK (vendored into the project).
    Rust,
    /// Python, with componentize-py.
    Python,
    /// JavaScript, with componentize-js.
    Js,
}

const WIT: &str = include_str!("../../../../wit/toolcage.wit");
/// The WASI WIT that the worlds import `wasi:config` and `wasi:http` from.
const WIT_DEPS: [(&str, &str); 9] = [
    (
        "wit/deps/README.md",
        include_str!("../../../../wit/deps/README.md"),
    ),
    (
        "wit/deps/cli.wit",
        include_str!("../../../../wit/deps/cli.wit"),
    ),
    (
        "wit/deps/clocks.wit",
        include_str!("../../../../wit/deps/clocks.wit"),
    ),
    (
        "wit/deps/config.wit",
        include_str!("../../../../wit/deps/config.wit"),
    ),
    (
        "wit/deps/filesystem.wit",
        include_str!("../../../../wit/deps/filesystem.wit"),
    ),
    (
        "wit/deps/http.wit",
        include_str!("../../../../wit/deps/http.wit"),
    ),
    (
        "wit/deps/io.wit",
        include_str!("../../../../wit/deps/io.wit"),
    ),
    (
        "wit/deps/random.wit",
        include_str!("../../../../wit/deps/random.wit"),
    ),
    (
        "wit/deps/sockets.wit",
        include_str!("../../../../wit/deps/sockets.wit"),
    ),
];
const RUST_SDK: &str = include_str!("../../../../guest-tools/sdk/src/lib.rs");
const RUST_SDK_CONFIG: &str = include_str!("../../../../guest-tools/sdk/src/config.rs");
const RUST_SDK_HTTP: &str = include_str!("../../../../guest-tools/sdk/src/http.rs");
const RUST_SDK_TOOLS: &str = include_str!("../../../../guest-tools/sdk/src/tools.rs");
const RUST_SDK_SESSION: &str = include_str!("../../../../guest-tools/sdk/src/session.rs");
const PYTHON_SDK: &str = include_str!("../../../../guest-tools/python/toolcage.py");
const JS_SDK: &str = include_str!("../../../../guest-tools/js/toolcage.js");
const PYTHON_REQUIREMENTS: &str = include_str!("../../../../guest-tools/python/requirements.txt");

/// Writes the project `name` (a tool name: letters, digits, `_` and `-`,
/// starting with a letter) in `parent`, and says how to build and call it.
pub fn run(name: &str, lang: Lang, parent: &Path) -> anyhow::Result<()> {
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        bail!(
            "`{name}` cannot name a tool: use up to 64 letters, digits, `_` and `-`, starting with a letter"
        );
    }
    let root = parent.join(name);
    if root.exists() {
        bail!("{} already exists", root.display());
    }
    let Project {
        files,
        build,
        tools_dir,
    } = project(name, lang);
    // The component file's name (Cargo writes `-` as `_`).
    let file = name.replace('-', "_");
    for (path, content) in &files {
        write(&root.join(path), content)?;
    }
    if root.join("build.sh").exists() {
        make_executable(&root.join("build.sh"))?;
    }
    let language = match lang {
        Lang::Rust => "Rust",
        Lang::Python => "Python",
        Lang::Js => "JavaScript",
    };
    println!("created {name}/, a {language} tool project");
    println!("build it: {build}");
    println!("call it:  toolcage --tools {tools_dir} call {name} '{{\"text\": \"a b a\"}}'");
    println!(
        "settings: it reads default_top (the `top` of a call that gives none) from [components.{file}.config] in toolcage.toml"
    );
    Ok(())
}

/// What `toolcage new` writes, and how to build the result.
struct Project {
    /// Each file's path in the project, and its text.
    files: Vec<(&'static str, String)>,
    /// The command that builds the component.
    build: String,
    /// Where the built component lands (a `--tools` directory).
    tools_dir: String,
}

/// The project of tool `name` in `lang`: the templates filled in.
fn project(name: &str, lang: Lang) -> Project {
    // The component file's name (Cargo writes `-` as `_`), and the Python
    // function's.
    let file = name.replace('-', "_");
    let fill = |template: &str| {
        template
            .replace("{name}", name)
            .replace("{crate}", name)
            .replace("{file}", &file)
            .replace("{function}", &file)
    };
    let mut files: Vec<(&'static str, String)> = vec![
        ("wit/toolcage.wit", WIT.to_string()),
        (
            ".gitignore",
            include_str!("templates/gitignore").to_string(),
        ),
    ];
    files.extend(
        WIT_DEPS
            .iter()
            .map(|(path, text)| (*path, text.to_string())),
    );
    let (build, tools_dir) = match lang {
        Lang::Rust => {
            files.extend([
                (
                    "Cargo.toml",
                    fill(include_str!("templates/rust_Cargo.toml")),
                ),
                ("src/lib.rs", fill(include_str!("templates/rust_lib.rs"))),
                (
                    "toolcage-guest/Cargo.toml",
                    include_str!("templates/rust_sdk_Cargo.toml").to_string(),
                ),
                (
                    "toolcage-guest/src/lib.rs",
                    // The vendored SDK finds the WIT one level up.
                    RUST_SDK.replace("path: \"../../wit\"", "path: \"../wit\""),
                ),
                ("toolcage-guest/src/config.rs", RUST_SDK_CONFIG.to_string()),
                ("toolcage-guest/src/http.rs", RUST_SDK_HTTP.to_string()),
                ("toolcage-guest/src/tools.rs", RUST_SDK_TOOLS.to_string()),
                (
                    "toolcage-guest/src/session.rs",
                    RUST_SDK_SESSION.to_string(),
                ),
            ]);
            (
                format!("(cd {name} && cargo build --release --target wasm32-wasip2)"),
                format!("{name}/target/wasm32-wasip2/release"),
            )
        }
        Lang::Python => {
            files.extend([
                ("app.py", fill(include_str!("templates/python_app.py"))),
                (
                    "test_app.py",
                    fill(include_str!("templates/python_test_app.py")),
                ),
                ("toolcage.py", PYTHON_SDK.to_string()),
                ("requirements.txt", PYTHON_REQUIREMENTS.to_string()),
                ("build.sh", fill(include_str!("templates/python_build.sh"))),
            ]);
            (format!("{name}/build.sh"), format!("{name}/build"))
        }
        Lang::Js => {
            files.extend([
                ("app.js", fill(include_str!("templates/js_app.js"))),
                (
                    "count.js",
                    include_str!("templates/js_count.js").to_string(),
                ),
                (
                    "test.mjs",
                    include_str!("templates/js_test.mjs").to_string(),
                ),
                ("toolcage.js", JS_SDK.to_string()),
                (
                    "package.json",
                    fill(include_str!("templates/js_package.json")),
                ),
                ("build.sh", fill(include_str!("templates/js_build.sh"))),
            ]);
            (format!("{name}/build.sh"), format!("{name}/build"))
        }
    };
    Project {
        files,
        build,
        tools_dir,
    }
}

fn write(path: &PathBuf, content: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))
}

fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}
