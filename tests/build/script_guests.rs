// Builds the Python and JavaScript guests from source: the example tools of
// `guest-tools/python/examples` and `guest-tools/js/examples`, and the
// `python/fixtures/py_probe`, `py_compose`, `js/fixtures/js_probe` and
// `js_compose` test fixtures, with pinned toolchains installed the
// way each ecosystem does (componentize-py into a virtual environment,
// componentize-js with npm into a local `node_modules`), both under
// `target/guest-tools`. A missing interpreter fails the build with the
// command that installs it: no test is skipped in silence.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Python,
    Js,
}

/// One script guest: its constant name, language, source directory (holding
/// `app.py` or `app.js`) and the component to write.
pub struct ScriptGuest {
    pub constant: &'static str,
    pub lang: Lang,
    pub source: PathBuf,
    pub wasm: PathBuf,
}

/// The script guests, with their outputs under `out`: examples in
/// `out/examples` (a tools directory of their own), fixtures in
/// `out/script-fixtures`.
pub fn script_guests(guest_root: &Path, out: &Path) -> Vec<ScriptGuest> {
    let guest = |constant, lang, source: &str, dir: &str, stem: &str| ScriptGuest {
        constant,
        lang,
        source: guest_root.join(source),
        wasm: out.join(dir).join(format!("{stem}.wasm")),
    };
    vec![
        guest(
            "CSV_SUMMARY",
            Lang::Python,
            "python/examples/csv_summary",
            "examples",
            "csv_summary",
        ),
        guest(
            "MARKDOWN_OUTLINE",
            Lang::Js,
            "js/examples/markdown_outline",
            "examples",
            "markdown_outline",
        ),
        guest(
            "FIXTURE_PY_PROBE",
            Lang::Python,
            "python/fixtures/py_probe",
            "script-fixtures",
            "py_probe",
        ),
        guest(
            "FIXTURE_JS_PROBE",
            Lang::Js,
            "js/fixtures/js_probe",
            "script-fixtures",
            "js_probe",
        ),
        guest(
            "FIXTURE_PY_COMPOSE",
            Lang::Python,
            "python/fixtures/py_compose",
            "script-fixtures",
            "py_compose",
        ),
        guest(
            "FIXTURE_JS_COMPOSE",
            Lang::Js,
            "js/fixtures/js_compose",
            "script-fixtures",
            "js_compose",
        ),
    ]
}

/// Builds every guest of `guests` that is older than its inputs, the two
/// languages in parallel.
pub fn build(guest_root: &Path, wit: &Path, out: &Path, guests: &[ScriptGuest]) {
    for path in [
        guest_root.join("python/toolcage.py"),
        guest_root.join("python/requirements.txt"),
        guest_root.join("js/toolcage.js"),
        guest_root.join("js/package.json"),
        guest_root.join("js/package-lock.json"),
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    for guest in guests {
        let app = match guest.lang {
            Lang::Python => "app.py",
            Lang::Js => "app.js",
        };
        // The file, not its directory, where `__pycache__` may appear.
        println!(
            "cargo:rerun-if-changed={}",
            guest.source.join(app).display()
        );
    }
    std::thread::scope(|scope| {
        for lang in [Lang::Python, Lang::Js] {
            let mine: Vec<&ScriptGuest> = guests.iter().filter(|g| g.lang == lang).collect();
            scope.spawn(move || {
                let toolchain = match lang {
                    Lang::Python => python_toolchain(guest_root, out),
                    Lang::Js => js_toolchain(guest_root, out),
                };
                std::thread::scope(|inner| {
                    for guest in mine {
                        let toolchain = &toolchain;
                        inner.spawn(move || build_one(guest_root, wit, out, toolchain, guest));
                    }
                });
            });
        }
    });
}

fn build_one(guest_root: &Path, wit: &Path, out: &Path, toolchain: &Path, guest: &ScriptGuest) {
    let (sdk, app) = match guest.lang {
        Lang::Python => (guest_root.join("python/toolcage.py"), "app.py"),
        Lang::Js => (guest_root.join("js/toolcage.js"), "app.js"),
    };
    let inputs = [
        guest.source.join(app),
        sdk.clone(),
        wit.join("toolcage.wit"),
        toolchain.to_path_buf(),
    ];
    if is_fresh(&guest.wasm, &inputs) {
        return;
    }
    std::fs::create_dir_all(guest.wasm.parent().unwrap()).unwrap();
    let mut cmd;
    match guest.lang {
        Lang::Python => {
            cmd = Command::new(toolchain.parent().unwrap().join("bin/componentize-py"));
            cmd.env("PYTHONDONTWRITEBYTECODE", "1")
                .arg("-d")
                .arg(wit)
                // toolset-http: the SDK's `http` imports `wasi:http`.
                .args(["-w", "toolset-http", "componentize", "app", "-p"])
                .arg(&guest.source)
                .arg("-p")
                .arg(guest_root.join("python"))
                .arg("-o")
                .arg(&guest.wasm);
        }
        Lang::Js => {
            // componentize-js resolves imports inside the module's directory
            // only: stage the app beside the SDK, as a project has it.
            let stage = out.join("js-stage").join(guest.wasm.file_stem().unwrap());
            std::fs::create_dir_all(&stage).unwrap();
            std::fs::copy(guest.source.join(app), stage.join(app)).unwrap();
            std::fs::copy(&sdk, stage.join("toolcage.js")).unwrap();
            let cli = toolchain
                .parent()
                .unwrap()
                .join("node_modules/@bytecodealliance/componentize-js/src/cli.js");
            cmd = Command::new("node");
            cmd.arg(cli)
                .arg(app)
                .arg("--wit")
                .arg(wit)
                .args([
                    "--world-name",
                    "toolset",
                    // `http` stays in: such a component imports wasi:http,
                    // which toolcage links (its requests go through the grants).
                    "--disable",
                    "fetch-event",
                ])
                .arg("-o")
                .arg(&guest.wasm)
                .current_dir(&stage);
        }
    }
    let status = cmd.status();
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "building {} failed ({status:?}): {cmd:?}",
        guest.source.display()
    );
}

/// Whether `output` exists and is newer than every input.
fn is_fresh(output: &Path, inputs: &[PathBuf]) -> bool {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let Some(built) = modified(output) else {
        return false;
    };
    inputs
        .iter()
        .all(|input| modified(input).is_some_and(|time: SystemTime| time <= built))
}

fn run(cmd: &mut Command, how: &str) {
    let status = cmd.status();
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "installing a guest toolchain failed ({status:?}); run: {how}"
    );
}

fn have(program: &str, install: &str) {
    let found = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(
        found,
        "`{program}` is needed to build the Python and JavaScript guest tools; install it: {install}"
    );
}

/// `out/python-venv` with the pinned componentize-py: returns the venv's
/// stamp file (its requirements, written once installed).
fn python_toolchain(guest_root: &Path, out: &Path) -> PathBuf {
    let requirements = guest_root.join("python/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).expect("python/requirements.txt");
    let venv = out.join("python-venv");
    let stamp = venv.join("requirements.txt");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return stamp;
    }
    have("python3", "apt-get install python3 python3-venv");
    let how = format!(
        "python3 -m venv {venv} && {venv}/bin/pip install -r {req}",
        venv = venv.display(),
        req = requirements.display()
    );
    run(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        &how,
    );
    run(
        Command::new(venv.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements),
        &how,
    );
    std::fs::write(&stamp, wanted).unwrap();
    stamp
}

/// `out/js-toolchain/node_modules` with the pinned componentize-js, from
/// `js/package-lock.json`: returns the stamp file (the lock, written once
/// installed).
fn js_toolchain(guest_root: &Path, out: &Path) -> PathBuf {
    let lock = guest_root.join("js/package-lock.json");
    let wanted = std::fs::read_to_string(&lock).expect("js/package-lock.json");
    let dir = out.join("js-toolchain");
    let stamp = dir.join("installed.lock");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return stamp;
    }
    have("node", "apt-get install nodejs npm");
    have("npm", "apt-get install nodejs npm");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(guest_root.join("js/package.json"), dir.join("package.json")).unwrap();
    std::fs::copy(&lock, dir.join("package-lock.json")).unwrap();
    let how = format!("cd {} && npm ci --no-audit --no-fund", dir.display());
    run(
        Command::new("npm")
            // `npm install` follows the copied lock; `npm ci` (npm 11)
            // refuses locks without every platform's optional packages.
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir),
        &how,
    );
    std::fs::write(&stamp, wanted).unwrap();
    stamp
}
