//! `toolcage pull`, `push` and `sign`: the only commands that talk to
//! registries; and `generate-key-pair`, which writes the key `sign` takes.
//! Everything they do goes through `toolcage::oci`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Mutex;

use anyhow::{Context, bail};
use toolcage::oci::{
    ANNOTATION_TOOLS, ANNOTATION_WIT, Client, ClientOptions, Credentials, LockEntry, Lockfile,
    Reference, SigningKey, WIT_VERSION,
};

use crate::args::GlobalArgs;
use crate::{Settings, print, say};

/// A component at least this large gets progress lines on stderr.
const PROGRESS_FROM_BYTES: u64 = 4 << 20;

/// A client for the config's `[oci]` settings and the command line's
/// credentials, which go to the one registry `references` name.
fn client(
    settings: &Settings,
    global: &GlobalArgs,
    references: &[&Reference],
) -> anyhow::Result<Client> {
    let mut options = ClientOptions::default();
    for registry in &settings.config.oci.insecure_registries {
        options = options.insecure_registry(registry.clone());
    }
    if let Some(username) = &global.registry_user {
        let mut registries: Vec<&str> = references.iter().map(|r| r.registry()).collect();
        registries.sort_unstable();
        registries.dedup();
        let [registry] = registries[..] else {
            bail!(
                "--registry-user: the references name several registries ({}); the password goes to one only: give each its credentials in Docker's config.json",
                registries.join(", ")
            );
        };
        let mut password = String::new();
        std::io::stdin()
            .read_to_string(&mut password)
            .context("--registry-password-stdin: cannot read stdin")?;
        let password = password.trim_end_matches(['\r', '\n']).to_string();
        if password.is_empty() {
            bail!("--registry-password-stdin: stdin is empty");
        }
        options = options.credentials(
            registry,
            Credentials::Basic {
                username: username.clone(),
                password,
            },
        );
    }
    // A line at each quarter of a large download.
    let quarters = Mutex::new(BTreeMap::<String, u64>::new());
    options = options.progress(move |progress| {
        if progress.total < PROGRESS_FROM_BYTES {
            return;
        }
        let quarter = progress.done * 4 / progress.total;
        let mut shown = quarters.lock().unwrap_or_else(|e| e.into_inner());
        let last = shown.entry(progress.reference.to_string()).or_insert(0);
        if quarter > *last {
            *last = quarter;
            say(&format!(
                "pulling {}: {:.1} of {:.1} MiB",
                progress.reference,
                progress.done as f64 / (1 << 20) as f64,
                progress.total as f64 / (1 << 20) as f64
            ));
        }
    });
    Ok(Client::new(options))
}

fn parse(text: &str) -> anyhow::Result<Reference> {
    Ok(text.parse::<Reference>()?)
}

/// `toolcage pull`: resolves, checks and stores each reference, then
/// writes the lock, or changes nothing if any failed.
pub async fn pull(
    settings: &Settings,
    global: &GlobalArgs,
    texts: &[String],
    locked: bool,
    update: bool,
) -> anyhow::Result<ExitCode> {
    let all = texts.is_empty();
    let references = references_to_pull(settings, texts)?;
    let pulled = settings.pulled()?;
    let lock_path = pulled.lock_path().to_path_buf();
    let old = Lockfile::read(&lock_path)?;
    let mut new = old.clone();
    if all {
        // What the config no longer names leaves the lock.
        let named: Vec<String> = references.iter().map(ToString::to_string).collect();
        new.entries.retain(|e| named.contains(&e.reference));
    }
    let client = client(settings, global, &references.iter().collect::<Vec<_>>())?;
    let trust = pulled.trust();
    let mut failed = false;
    for reference in &references {
        let previous = old.get(&reference.to_string());
        let keep = previous
            .filter(|_| trust.requires_digest() && !update)
            .map(|e| &e.digest);
        let pulled_entry = client
            .pull(reference, keep, trust, pulled.store())
            .await
            // What was stored is checked once more as loading will check it.
            .and_then(|entry| pulled.verify(reference, &entry).map(|v| (entry, v)));
        match pulled_entry {
            Ok((mut entry, verified)) => {
                if let Some(previous) = previous
                    && previous.digest == entry.digest
                    && previous.signature == entry.signature
                {
                    entry.pulled = previous.pulled.clone();
                }
                let signature = match &verified.signed_by {
                    Some(key) => format!("signature verified with {key}"),
                    None => "unsigned".to_string(),
                };
                println!(
                    "{reference} {} ({:.1} MiB, {signature})",
                    entry.digest,
                    entry.size as f64 / (1 << 20) as f64
                );
                new.set(entry);
            }
            Err(error) => {
                failed = true;
                say(&print::sanitize(&error.to_string()));
            }
        }
    }
    if failed {
        say(&format!(
            "nothing pulled was recorded: {} is unchanged",
            lock_path.display()
        ));
        return Ok(ExitCode::FAILURE);
    }
    if new.same_resolution(&old) {
        return Ok(ExitCode::SUCCESS);
    }
    if locked {
        let changed = lock_changes(&old, &new);
        say(&format!(
            "--locked: {} would change ({}); run `toolcage pull` without --locked and commit the lock",
            lock_path.display(),
            changed.join(", ")
        ));
        return Ok(ExitCode::FAILURE);
    }
    new.write(&lock_path)?;
    Ok(ExitCode::SUCCESS)
}

/// The references `toolcage pull` pulls: those named, or else those the
/// config and `--tools` list.
fn references_to_pull(settings: &Settings, texts: &[String]) -> anyhow::Result<Vec<Reference>> {
    let references: Vec<Reference> = if texts.is_empty() {
        settings
            .tools
            .iter()
            .filter_map(|t| t.reference().cloned())
            .collect()
    } else {
        texts.iter().map(|t| parse(t)).collect::<Result<_, _>>()?
    };
    if references.is_empty() {
        bail!(
            "nothing to pull: name references (oci://REGISTRY/REPO:TAG), or list them in the config's `tools` or --tools"
        );
    }
    Ok(references)
}

/// What differs between the `old` lock and the `new` one, for `--locked`:
/// `REFERENCE → DIGEST` for each entry added or changed, `REFERENCE
/// removed` for each gone.
fn lock_changes(old: &Lockfile, new: &Lockfile) -> Vec<String> {
    let same = |a: &LockEntry, b: &LockEntry| {
        (&a.digest, &a.component, &a.signature) == (&b.digest, &b.component, &b.signature)
    };
    new.entries
        .iter()
        .filter(|e| !old.get(&e.reference).is_some_and(|o| same(o, e)))
        .map(|e| format!("{} → {}", e.reference, e.digest))
        .chain(
            old.entries
                .iter()
                .filter(|e| new.get(&e.reference).is_none())
                .map(|e| format!("{} removed", e.reference)),
        )
        .collect()
}

/// `toolcage push`: checks the component loads, then publishes it.
pub async fn push(
    settings: &Settings,
    global: &GlobalArgs,
    file: &Path,
    text: &str,
    extra: &[String],
) -> anyhow::Result<ExitCode> {
    let reference = parse(text)?;
    if reference.digest().is_some() || reference.tag().is_none() {
        bail!("push to a tag (oci://REGISTRY/REPO:TAG); the digest is the content's");
    }
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    // What it offers, as `toolcage check` would find it.
    let mut registry = toolcage::Registry::builder()
        .runtime(&crate::runtime()?)
        .build()?;
    let report = registry
        .load_bytes(reference.component_name(), bytes.clone())
        .await;
    if let Some(error) = report.error {
        bail!(
            "{} does not load, so it is not pushed: {error}",
            file.display()
        );
    }
    let tools: Vec<&str> = registry
        .tools()
        .map(|t| t.descriptor.name.as_str())
        .collect();
    let mut annotations = BTreeMap::from([
        (ANNOTATION_TOOLS.to_string(), tools.join(",")),
        (ANNOTATION_WIT.to_string(), WIT_VERSION.to_string()),
        (
            "org.opencontainers.image.title".to_string(),
            reference.component_name().to_string(),
        ),
    ]);
    if let Some(tag) = reference.tag() {
        annotations.insert("org.opencontainers.image.version".into(), tag.into());
    }
    for pair in extra {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--annotation: `{pair}` is not KEY=VALUE");
        };
        annotations.insert(key.to_string(), value.to_string());
    }
    let client = client(settings, global, &[&reference])?;
    let digest = client.push(&bytes, &reference, annotations).await?;
    say(&format!(
        "pushed {} ({} tools: {})",
        reference,
        tools.len(),
        tools.join(", ")
    ));
    println!("{}", reference.at_digest(digest));
    Ok(ExitCode::SUCCESS)
}

/// `toolcage sign`: signs the digest REF names and pushes the signature.
pub async fn sign(
    settings: &Settings,
    global: &GlobalArgs,
    text: &str,
    key: &Path,
    password_stdin: bool,
) -> anyhow::Result<ExitCode> {
    if password_stdin && global.registry_password_stdin {
        bail!(
            "--key-password-stdin and --registry-password-stdin both read stdin: give the key's password in COSIGN_PASSWORD"
        );
    }
    let reference = parse(text)?;
    let key = SigningKey::open(key, &mut || {
        password(
            password_stdin,
            &format!("Password for {}: ", key.display()),
            false,
        )
    })?;
    let client = client(settings, global, &[&reference])?;
    let (digest, signature) = client.sign(&reference, &key).await?;
    say(&format!(
        "signed {digest} with the key {}",
        key.public().id()
    ));
    println!("{signature}");
    Ok(ExitCode::SUCCESS)
}

/// `toolcage generate-key-pair`: writes PREFIX.key (cosign's encrypted
/// format) and PREFIX.pub.
pub fn generate_key_pair(prefix: &Path, password_stdin: bool) -> anyhow::Result<ExitCode> {
    let password = password(password_stdin, "Enter password for private key: ", true)
        .context("no password for the new key")?;
    let (key, private, public) = SigningKey::generate_pair(prefix, password.as_bytes())?;
    say(&format!(
        "wrote {} (encrypted) and {} (the key {})",
        private.display(),
        public.display(),
        key.public().id()
    ));
    Ok(ExitCode::SUCCESS)
}

/// A key's password, as cosign takes it: `COSIGN_PASSWORD` when set (even
/// empty), else stdin with `--key-password-stdin` (its first line), else a
/// prompt on the terminal, without echo (asked twice when `confirm`). Never
/// a flag's value, which `ps` would show.
fn password(
    from_stdin: bool,
    prompt: &str,
    confirm: bool,
) -> std::io::Result<zeroize::Zeroizing<String>> {
    use std::io::IsTerminal as _;
    use zeroize::Zeroizing;
    if let Some(password) = std::env::var_os("COSIGN_PASSWORD") {
        return password.into_string().map(Zeroizing::new).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "COSIGN_PASSWORD is not UTF-8",
            )
        });
    }
    if from_stdin {
        let mut line = Zeroizing::new(String::new());
        std::io::stdin().read_line(&mut line)?;
        let end = line.trim_end_matches(['\r', '\n']).len();
        line.truncate(end);
        return Ok(line);
    }
    if !std::io::stdin().is_terminal() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "set COSIGN_PASSWORD, or pass --key-password-stdin (stdin is not a terminal to ask on)",
        ));
    }
    let first = Zeroizing::new(rpassword::prompt_password(prompt)?);
    if confirm {
        let again = Zeroizing::new(rpassword::prompt_password(
            "Enter password for private key again: ",
        )?);
        if *again != *first {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the passwords do not match",
            ));
        }
    }
    Ok(first)
}
