//! Addresses: IP literals in any form are refused before anything is sent,
//! a name is checked on what it resolves to, and special destinations are
//! refused by policy.

use super::*;

#[tokio::test]
async fn ip_literals_in_any_other_form_and_userinfo_are_refused_before_anything_is_sent() {
    let server = Server::http("127.0.0.1").await;
    let port = server.port();
    let names = Names::default();
    let registry = netprobe(
        builder()
            .limits(quick_limits())
            .resolver(names.resolver())
            .allow_net(grant(&format!("http://127.0.0.1:{port}")))
            .allow_net(grant("http://*:*")),
    )
    .await;
    const URI: &str = "ErrorCode::HttpRequestUriInvalid";
    const ADDRESS: &str = "ErrorCode::DestinationIpProhibited";
    let authorities = [
        (format!("127.1:{port}"), URI),
        (format!("0x7f.0.0.1:{port}"), URI),
        (format!("0177.0.0.1:{port}"), URI),
        (format!("2130706433:{port}"), URI),
        (format!("127.000.000.001:{port}"), URI),
        (format!("[::ffff:127.0.0.1]:{port}"), ADDRESS),
        (format!("[::ffff:7f00:1]:{port}"), ADDRESS),
        (format!("[::ffff:0:7f00:1]:{port}"), ADDRESS),
        (format!("[::127.0.0.1]:{port}"), ADDRESS),
        (format!("[64:ff9b::7f00:1]:{port}"), ADDRESS),
        (format!("[2002:7f00:1::]:{port}"), ADDRESS),
        (format!("[::1]:{port}"), ADDRESS),
        (format!("0.0.0.0:{port}"), ADDRESS),
        (format!("localhost:{port}"), ADDRESS),
        (format!("a.localhost:{port}"), ADDRESS),
        (format!("granted.test@127.0.0.1:{port}"), URI),
        (format!("127.0.0.1:{port}@granted.test"), URI),
    ];
    let requests: Vec<Value> = authorities
        .iter()
        .map(|(a, _)| json!({ "scheme": "http", "authority": a, "path": "/hello" }))
        .collect();
    let (result, _) = probe(&registry, json!(requests)).await;
    for ((authority, code), report) in authorities.iter().zip(reports(&result)) {
        assert_eq!(error_of(&report), *code, "{authority}");
    }
    assert_eq!(server.accepted(), 0, "a request reached the server");
    assert_eq!(names.lookups(), 0);
    assert!(
        result.logs.stderr.contains("non-standard form"),
        "{}",
        result.logs.stderr
    );
    assert!(
        result
            .logs
            .stderr
            .contains("::ffff:127.0.0.1 is a special IPv4 address in IPv4-mapped form; only a grant naming ::ffff:127.0.0.1 exactly"),
        "{}",
        result.logs.stderr
    );
}

#[tokio::test]
async fn a_name_is_checked_on_what_it_resolves_to_once_per_request() {
    let public = Server::http("127.0.0.1").await;
    let internal = Server::http("127.0.0.2").await;
    let port = public.port();
    // 127.0.0.1 stands for a public address (let through by allow_private),
    // 127.0.0.2 for an internal one.
    let names = Names::default()
        .with("rebind.test", &[&["127.0.0.1"], &["127.0.0.2"]])
        .with("mixed.test", &[&["127.0.0.1", "127.0.0.2"]])
        .with("internal.test", &[&["127.0.0.2"]]);
    let registry = netprobe(
        builder()
            .limits(quick_limits())
            .resolver(names.resolver())
            .allow_private(cidr("127.0.0.1/32"))
            .allow_net(grant("http://*.test:*"))
            // Naming the internal address in another grant does not let a
            // name resolve into it.
            .allow_net(grant(&format!("http://127.0.0.2:{}", internal.port()))),
    )
    .await;
    let get = |host: &str, port: u16| json!({ "scheme": "http", "authority": format!("{host}:{port}"), "path": "/hello" });
    let (result, _) = probe(
        &registry,
        json!([
            get("rebind.test", port),
            get("rebind.test", internal.port()),
            get("mixed.test", port),
            get("internal.test", internal.port()),
        ]),
    )
    .await;
    let reports = reports(&result);
    assert_eq!(
        reports[0]["body"],
        format!("hello from {}", public.authority())
    );
    for report in &reports[1..] {
        assert!(
            error_of(report).contains("DestinationIpProhibited"),
            "{report}"
        );
    }
    assert_eq!(names.lookups(), 4, "one lookup per request");
    assert_eq!(internal.accepted(), 0, "the internal server was reached");
    assert_eq!(public.seen().len(), 1);
    assert!(
        result
            .logs
            .stderr
            .contains("mixed.test resolves to 127.0.0.2, which is loopback (127.0.0.0/8)"),
        "{}",
        result.logs.stderr
    );
}

/// Runs in a network namespace of its own with only loopback up, so that the
/// addresses it asks for (the metadata service, a private network, a public
/// one) cannot be reached even were the policy wrong: what it asserts is the
/// policy's error code, not a failed connect. The test re-runs itself under
/// `unshare --net` (util-linux, which Debian's every install has) and brings
/// loopback up itself, needing no `ip`.
#[tokio::test]
async fn non_loopback_destinations_are_refused_by_policy_in_an_isolated_namespace() {
    const INSIDE: &str = "TOOLCAGE_TEST_IN_NETNS";
    if std::env::var_os(INSIDE).is_none() {
        let exe = std::env::current_exe().unwrap();
        let status = std::process::Command::new("unshare")
            .arg("--net")
            .arg(exe)
            .args([
                "--exact",
                "network::addresses::non_loopback_destinations_are_refused_by_policy_in_an_isolated_namespace",
                "--test-threads=1",
            ])
            .env(INSIDE, "1")
            .output()
            .expect("unshare runs (tests run as root)");
        let stdout = String::from_utf8_lossy(&status.stdout);
        assert!(
            status.status.success(),
            "the test failed inside its namespace: {stdout}{}",
            String::from_utf8_lossy(&status.stderr)
        );
        // Renamed without this filter following, it would run nothing.
        assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
        return;
    }
    // Inside: loopback up (a new namespace has it down), then prove the
    // namespace has no route off the machine.
    loopback_up();
    assert!(
        std::net::TcpStream::connect_timeout(
            &"192.0.2.1:80".parse().unwrap(),
            Duration::from_millis(200)
        )
        .is_err()
    );
    let names = Names::default()
        .with("metadata.test", &[&["169.254.169.254"]])
        .with("private.test", &[&["10.0.0.5"]])
        .with("mapped.test", &[&["::ffff:10.0.0.5"]])
        .with("public.test", &[&["192.0.2.200", "8.8.8.8"]])
        .with("only-public.test", &[&["8.8.8.8"]]);
    let registry = netprobe(
        builder()
            .limits(quick_limits())
            .resolver(names.resolver())
            .allow_net(grant("*://*:*")),
    )
    .await;
    let get = |authority: &str| json!({ "scheme": "http", "authority": authority, "path": "/" });
    let (result, _) = probe(
        &registry,
        json!([
            get("169.254.169.254"),
            get("10.0.0.5"),
            get("[fd00::5]"),
            get("[::ffff:169.254.169.254]"),
            get("metadata.test"),
            get("private.test"),
            get("mapped.test"),
            get("public.test"),
        ]),
    )
    .await;
    for report in reports(&result) {
        assert!(
            error_of(&report).contains("DestinationIpProhibited"),
            "{report}"
        );
    }
    assert_eq!(result.net.denied, 8);
    // The four names were looked up: each lookup counts as a request.
    assert_eq!(result.net.requests, 4);
    // A public answer passes the policy; the namespace has no route for it.
    let (result, _) = probe(&registry, json!([get("only-public.test"), get("8.8.8.8")])).await;
    for report in reports(&result) {
        assert!(
            error_of(&report).contains("DestinationUnavailable"),
            "{report}"
        );
    }
    assert_eq!((result.net.requests, result.net.denied), (2, 0));
    // Sockets and lookups under the same rule.
    let result = sockprobe(
        &registry,
        json!([
            { "op": "tcp", "address": "169.254.169.254:80", "send": "x" },
            { "op": "udp", "address": "10.0.0.5:53", "send": "x" },
            { "op": "lookup", "name": "metadata.test" },
        ]),
    )
    .await;
    for report in reports(&result) {
        assert!(error_of(&report).contains("access-denied"), "{report}");
    }
}

/// Brings `lo` up in this process's network namespace, as `ip link set lo
/// up` does: its flags read and written back with `IFF_UP` through a
/// datagram socket's `SIOCGIFFLAGS` and `SIOCSIFFLAGS`.
#[allow(unsafe_code)]
fn loopback_up() {
    let failed = |what: &str| panic!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: the request is zeroed, then named `lo` (NUL-terminated within
    // IFNAMSIZ); the ioctls read and write only its flags; the socket is
    // closed once.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if socket < 0 {
            failed("a socket for the ioctls");
        }
        let mut request: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as libc::c_char;
        }
        if libc::ioctl(socket, libc::SIOCGIFFLAGS, &mut request) != 0 {
            failed("reading lo's flags");
        }
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(socket, libc::SIOCSIFFLAGS, &request) != 0 {
            failed("bringing lo up");
        }
        libc::close(socket);
    }
}
