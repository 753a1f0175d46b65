//! Pulled components served from the lock and the store, offline: every
//! digest, the artifact's layout and the trust policy checked again at load;
//! a lock that changes under a live registry reloads like a changed file,
//! first wins unchanged. (Pulling, pushing and signing against a real
//! registry are in tests/clients/test_oci.py.)

use serde_json::json;
use toolcage::oci::{
    Digest, LockEntry, Lockfile, Pulled, Reference, SigningKey, Store, TrustKey, TrustPolicy,
    simple_signing_payload,
};
use toolcage::{LiveRegistry, LoadError, Source, ToolsSource};
use toolcage_tests::{assert_loaded, builder, guests};

const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRGIFZjEKFjz2PgTx
0cQn1yKbfOwZcrnm8oul8qOhTwWhRANCAATxh72I3wi6dexua3l2x7j/tybuUx0W
pvI5wx+L0gDr7bRDNxTH+y/UIQqjqs6GeQ1t8MG0vy8dOi8BY60i90OM
-----END PRIVATE KEY-----";

/// A store and a lock in a directory of their own.
struct Pulls {
    dir: tempfile::TempDir,
    store: Store,
    lock: Lockfile,
}

impl Pulls {
    fn new() -> Pulls {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("store")).unwrap();
        Pulls {
            dir,
            store,
            lock: Lockfile::new(),
        }
    }

    fn lock_path(&self) -> std::path::PathBuf {
        self.dir.path().join("toolcage.lock")
    }

    fn put(&self, bytes: &[u8]) -> Digest {
        let digest = Digest::of(bytes);
        self.store.write(&digest, bytes).unwrap();
        digest
    }

    /// Stores `component` as a CNCF Wasm artifact and locks `reference` to
    /// it; the manifest's digest.
    fn publish(&mut self, reference: &str, component: &[u8]) -> Digest {
        let layer = self.put(component);
        let config = self.put(br#"{"architecture":"wasm","os":"wasip2"}"#);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": config.to_string(), "size": 37},
            "layers": [{"mediaType": "application/wasm", "digest": layer.to_string(), "size": component.len()}],
        });
        let digest = self.put(manifest.to_string().as_bytes());
        self.lock(reference, &digest, &layer, component.len() as u64, None);
        digest
    }

    fn lock(
        &mut self,
        reference: &str,
        digest: &Digest,
        component: &Digest,
        size: u64,
        signature: Option<Digest>,
    ) {
        self.lock.set(LockEntry {
            reference: reference.into(),
            digest: digest.clone(),
            component: component.clone(),
            size,
            signature,
            signed_by: None,
            pulled: "2026-11-24T00:00:00Z".into(),
        });
        self.lock.write(&self.lock_path()).unwrap();
    }

    /// Stores cosign's signature image for `digest`, made with `key`.
    fn sign(&self, reference: &str, digest: &Digest, signed: &Digest, key: &SigningKey) -> Digest {
        let reference: Reference = reference.parse().unwrap();
        let payload = simple_signing_payload(&reference, signed);
        let payload_digest = self.put(&payload);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": Digest::of(b"{}").to_string(), "size": 2},
            "layers": [{
                "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                "digest": payload_digest.to_string(),
                "size": payload.len(),
                "annotations": {"dev.cosignproject.cosign/signature": key.sign(&payload)},
            }],
        });
        let _ = digest;
        self.put(manifest.to_string().as_bytes())
    }

    fn pulled(&self, trust: TrustPolicy) -> Pulled {
        Pulled::new(self.lock_path(), self.store.clone(), trust)
    }
}

async fn load(pulled: Pulled, reference: &str) -> toolcage::FileReport {
    let mut registry = builder().pulled(pulled).build().unwrap();
    registry.load_reference(&reference.parse().unwrap()).await
}

fn distribution_error(report: &toolcage::FileReport) -> String {
    match &report.error {
        Some(LoadError::Distribution(error)) => error.to_string(),
        other => panic!("expected a distribution error, got {other:?}"),
    }
}

#[tokio::test]
async fn serves_what_the_lock_names_and_refuses_what_changed() {
    let mut pulls = Pulls::new();
    let echo = std::fs::read(guests::FIXTURE_ECHO).unwrap();
    let reference = "oci://registry.test/tools/echo:1";
    let digest = pulls.publish(reference, &echo);

    let report = load(pulls.pulled(TrustPolicy::new()), reference).await;
    assert_loaded(&report);
    assert_eq!(report.component, "echo");
    assert_eq!(
        report.source,
        Source::Oci {
            reference: reference.into(),
            digest: digest.to_string()
        }
    );

    // Pinned to the digest the lock has: loads. Pinned to another: refused.
    let pinned = format!("oci://registry.test/tools/echo:1@{digest}");
    pulls.lock(
        &pinned,
        &digest,
        &Digest::of(&echo),
        echo.len() as u64,
        None,
    );
    assert_loaded(&load(pulls.pulled(TrustPolicy::new()), &pinned).await);
    let other = Digest::of(b"another manifest");
    let wrong_pin = format!("oci://registry.test/tools/echo@{other}");
    pulls.lock(
        &wrong_pin,
        &digest,
        &Digest::of(&echo),
        echo.len() as u64,
        None,
    );
    let error = distribution_error(&load(pulls.pulled(TrustPolicy::new()), &wrong_pin).await);
    assert!(error.contains("not the pinned digest"), "{error}");

    // Not in the lock; in the lock but not in the store.
    let error = distribution_error(
        &load(
            pulls.pulled(TrustPolicy::new()),
            "oci://registry.test/tools/nope:1",
        )
        .await,
    );
    assert!(error.contains("run `toolcage pull`"), "{error}");
    let missing = Digest::of(b"never stored");
    pulls.lock(
        "oci://registry.test/tools/gone:1",
        &missing,
        &missing,
        1,
        None,
    );
    let error = distribution_error(
        &load(
            pulls.pulled(TrustPolicy::new()),
            "oci://registry.test/tools/gone:1",
        )
        .await,
    );
    assert!(
        error.contains("manifest") && error.contains("not in the store"),
        "{error}"
    );

    // The component changed on disk: refused, not run.
    let path = pulls.store.path(&Digest::of(&echo));
    let mut tampered = echo.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    std::fs::write(&path, &tampered).unwrap();
    let error = distribution_error(&load(pulls.pulled(TrustPolicy::new()), reference).await);
    assert!(error.contains("changed on disk"), "{error}");
}

#[tokio::test]
async fn refuses_an_artifact_that_is_not_one_component() {
    let mut pulls = Pulls::new();
    let echo = std::fs::read(guests::FIXTURE_ECHO).unwrap();
    let layer = pulls.put(&echo);
    let manifest = json!({
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": layer.to_string(), "size": echo.len()},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer.to_string(), "size": echo.len()},
        ],
    });
    let digest = pulls.put(manifest.to_string().as_bytes());
    let reference = "oci://registry.test/images/alpine:3";
    pulls.lock(reference, &digest, &layer, echo.len() as u64, None);
    let error = distribution_error(&load(pulls.pulled(TrustPolicy::new()), reference).await);
    assert!(
        error.contains("application/vnd.oci.image.config.v1+json")
            && error.contains("application/vnd.oci.image.layer.v1.tar+gzip"),
        "{error}"
    );
}

#[tokio::test]
async fn a_trust_key_wants_its_signature_on_that_digest() {
    let mut pulls = Pulls::new();
    let key = SigningKey::from_pem(KEY).unwrap();
    let echo = std::fs::read(guests::FIXTURE_ECHO).unwrap();
    let reference = "oci://registry.test/team/echo:1";
    let digest = pulls.publish(reference, &echo);
    let (component, size) = (Digest::of(&echo), echo.len() as u64);
    let trust = || {
        TrustPolicy::new().key(TrustKey::new(
            "oci://registry.test/team/",
            key.public(),
            "team.pub",
        ))
    };

    // No signature recorded: refused; optional: loaded.
    let error = distribution_error(&load(pulls.pulled(trust()), reference).await);
    assert!(error.contains("no signature"), "{error}");
    let optional = TrustPolicy::new().key(
        TrustKey::new("oci://registry.test/team/", key.public(), "team.pub")
            .require_signature(false),
    );
    assert_loaded(&load(pulls.pulled(optional), reference).await);
    // Another prefix's key does not cover it.
    let elsewhere = TrustPolicy::new().key(TrustKey::new(
        "oci://registry.test/teammate/",
        key.public(),
        "mate.pub",
    ));
    assert_loaded(&load(pulls.pulled(elsewhere), reference).await);

    // Signed for this digest: loaded.
    let signature = pulls.sign(reference, &digest, &digest, &key);
    pulls.lock(reference, &digest, &component, size, Some(signature));
    assert_loaded(&load(pulls.pulled(trust()), reference).await);

    // Signed, but for another digest.
    let other = Digest::of(b"another manifest");
    let signature = pulls.sign(reference, &digest, &other, &key);
    pulls.lock(reference, &digest, &component, size, Some(signature));
    let error = distribution_error(&load(pulls.pulled(trust()), reference).await);
    assert!(error.contains("another digest"), "{error}");

    // Signed by another key.
    let stranger = SigningKey::from_pem(
        "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEICyLYTaQ3Xnhjgno5o1cfI5Wks/7MjS5L3K51vaosa3PoAoGCCqGSM49
AwEHoUQDQgAErF9++K7GaCssiiCH7/L/9zhlqXY7jnjd1uz82ZHo1WwigeCgaxhQ
6t50tokzih7s83TTCsk1t4gnpz5SV31n7Q==
-----END EC PRIVATE KEY-----",
    )
    .unwrap();
    let signature = pulls.sign(reference, &digest, &digest, &stranger);
    pulls.lock(reference, &digest, &component, size, Some(signature));
    let error = distribution_error(&load(pulls.pulled(trust()), reference).await);
    assert!(error.contains("does not verify"), "{error}");
}

#[tokio::test]
async fn a_pulled_component_cannot_take_a_bundled_name() {
    let mut pulls = Pulls::new();
    let hijack = std::fs::read(guests::FIXTURE_HIJACK).unwrap();
    let reference = "oci://registry.test/tools/hijack:1";
    pulls.publish(reference, &hijack);
    let mut registry = builder()
        .pulled(pulls.pulled(TrustPolicy::new()))
        .build()
        .unwrap();
    registry.load_bundled().await.iter().for_each(assert_loaded);
    let report = registry.load_reference(&reference.parse().unwrap()).await;
    assert!(
        report
            .shadowed
            .iter()
            .any(|s| s.tool == "read_file" && s.owner == "fs"),
        "{report:?}"
    );
    assert_eq!(registry.tool("read_file").unwrap().component, "fs");
}

#[tokio::test]
async fn a_new_lock_reloads_like_a_changed_file() {
    let mut pulls = Pulls::new();
    let echo = std::fs::read(guests::FIXTURE_ECHO).unwrap();
    let twin = std::fs::read(guests::FIXTURE_ECHO_TWIN).unwrap();
    let reference = "oci://registry.test/tools/echo:1";
    pulls.publish(reference, &echo);
    // A directory before the reference offers `echo` too, and keeps it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::FIXTURE_ECHO_TWIN, dir.path().join("first.wasm")).unwrap();

    let base = builder()
        .pulled(pulls.pulled(TrustPolicy::new()))
        .build()
        .unwrap();
    let sources = [
        ToolsSource::from(dir.path()),
        ToolsSource::parse(reference).unwrap(),
    ];
    let (live, reports) = LiveRegistry::load(base, sources).await.unwrap();
    reports.iter().for_each(assert_loaded);
    assert_eq!(live.current().tool("echo").unwrap().component, "first");
    assert_eq!(live.current().tool("counter").unwrap().component, "echo");

    // An unchanged lock rewritten: no change.
    pulls.lock.write(&pulls.lock_path()).unwrap();
    let report = live.reload().await;
    assert!(!report.changed() && report.loaded.is_empty(), "{report:?}");

    // The tag now names the twin: its tools replace the old version's, and
    // `echo` stays with the directory's component.
    pulls.publish(reference, &twin);
    let report = live.reload().await;
    assert_eq!(report.loaded.len(), 1, "{report:?}");
    let loaded = &report.loaded[0];
    assert!(loaded.is_ok(), "{loaded:?}");
    assert!(
        loaded
            .shadowed
            .iter()
            .any(|s| s.tool == "echo" && s.owner == "first")
    );
    let current = live.current();
    assert!(current.tool("counter").is_none());
    assert_eq!(current.tool("twin_only").unwrap().component, "first");
    assert_eq!(current.tool("echo").unwrap().component, "first");

    // A lock that loses the entry: reported, and the version serving stays.
    std::fs::write(pulls.lock_path(), Lockfile::new().to_text()).unwrap();
    let report = live.reload().await;
    assert!(
        report
            .loaded
            .iter()
            .any(|r| matches!(&r.error, Some(LoadError::Distribution(_)))),
        "{report:?}"
    );
    assert!(!report.changed(), "{report:?}");
}
