//! HTTPS: verified against the operator's CA, and a CA file that cannot be
//! used is an error naming it.

use super::*;

#[tokio::test]
async fn https_is_verified_against_the_operators_ca() {
    let ca = TestCa::new();
    let server = Server::https("127.0.0.1", &ca).await;
    let authority = server.authority();
    let request = json!([{ "scheme": "https", "authority": authority, "path": "/hello" }]);
    let allow = grant(&format!("https://{authority}"));

    // Without the operator's CA the certificate is refused.
    let untrusting = netprobe(builder().limits(quick_limits()).allow_net(allow.clone())).await;
    let (result, _) = probe(&untrusting, request.clone()).await;
    assert!(error_of(&reports(&result)[0]).contains("TlsCertificateError"));
    assert!(
        result.logs.stderr.contains("failed: TLS: "),
        "{}",
        result.logs.stderr
    );
    assert!(server.seen().is_empty());

    let trusting = netprobe(
        builder()
            .limits(quick_limits())
            .allow_net(allow)
            .ca_file(&ca.ca_file),
    )
    .await;
    let (result, _) = probe(&trusting, request).await;
    assert_eq!(
        reports(&result)[0]["body"],
        format!("hello from {authority}")
    );
}

#[tokio::test]
async fn a_ca_file_that_is_not_pem_is_an_error_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.pem");
    std::fs::write(&path, "not a certificate").unwrap();
    let error = builder().ca_file(&path).build().err().unwrap().to_string();
    assert!(
        error.contains("ca.pem") && error.contains("no PEM certificate"),
        "{error}"
    );
    let missing = builder().ca_file(dir.path().join("missing.pem")).build();
    assert!(missing.err().unwrap().to_string().contains("missing.pem"));
}
