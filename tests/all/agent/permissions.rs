//! Permission rules: the most specific wins, bad rules name their key, a
//! runner denies by default, and allow, deny and ask decide what runs.

use super::*;

#[test]
fn the_most_specific_rule_wins() {
    let rules = Permissions::from_rules(
        "allow",
        [
            ("default", "ask"),
            ("*", "allow"),
            ("write_*", "ask"),
            ("write_file*", "deny"),
            ("write_file_safe", "allow"),
            ("*_file", "allow"),
            ("edit_file", "deny"),
            ("*tmp", "allow"),
            ("rm_*", "deny"),
        ],
    )
    .unwrap();
    assert_eq!(
        rules.default_permission(),
        Permission::Ask,
        "the `default` key sets the default"
    );
    assert_eq!(
        rules.permission_for("read_file"),
        Permission::Allow,
        "`*_file`"
    );
    assert_eq!(
        rules.permission_for("write_log"),
        Permission::Ask,
        "`write_*` beats `*`"
    );
    assert_eq!(
        rules.permission_for("write_files"),
        Permission::Deny,
        "`write_file*` beats `write_*`"
    );
    assert_eq!(
        rules.permission_for("write_file_safe"),
        Permission::Allow,
        "exact beats every wildcard"
    );
    assert_eq!(
        rules.permission_for("edit_file"),
        Permission::Deny,
        "exact beats `*_file`"
    );
    assert_eq!(
        rules.permission_for("rm_tmp"),
        Permission::Deny,
        "a tie between `rm_*` and `*tmp`: deny wins"
    );
    assert_eq!(
        rules.permission_for("anything"),
        Permission::Allow,
        "`*` beats the default"
    );

    let no_star = Permissions::from_rules("deny", [("echo", "allow")]).unwrap();
    assert_eq!(no_star.permission_for("echo"), Permission::Allow);
    assert_eq!(
        no_star.permission_for("echo2"),
        Permission::Deny,
        "no rule: the default"
    );
    assert_eq!(no_star.default_permission(), Permission::Deny);

    let replaced = Permissions::allow_all()
        .rule("x", Permission::Deny)
        .unwrap()
        .rule("x", Permission::Ask)
        .unwrap();
    assert_eq!(
        replaced.permission_for("x"),
        Permission::Ask,
        "a later rule for the same pattern replaces it"
    );
}

#[test]
fn bad_rules_are_errors_naming_the_key() {
    let error = Permissions::from_rules("allow", [("edit_file", "nope")]).unwrap_err();
    assert_eq!(
        error,
        PermissionsError::Value {
            key: "edit_file".into(),
            value: "nope".into()
        }
    );
    assert!(
        error.to_string().contains("`edit_file`") && error.to_string().contains("\"nope\""),
        "{error}"
    );
    let error = Permissions::from_rules("sometimes", Vec::<(String, String)>::new()).unwrap_err();
    assert!(
        matches!(&error, PermissionsError::Value { key, .. } if key == "default"),
        "{error:?}"
    );
    let error = Permissions::from_rules("allow", [("default", "Allow")]).unwrap_err();
    assert!(
        matches!(&error, PermissionsError::Value { key, .. } if key == "default"),
        "{error:?}"
    );
    for pattern in ["", "write file", "fs/*", "écrire", "a?b"] {
        let error = Permissions::from_rules("allow", [(pattern, "deny")]).unwrap_err();
        assert_eq!(
            error,
            PermissionsError::Pattern {
                pattern: pattern.into()
            }
        );
    }
    assert_eq!("ask".parse::<Permission>(), Ok(Permission::Ask));
    assert!("ASK".parse::<Permission>().is_err());
}

#[tokio::test]
async fn a_runner_denies_everything_by_default() {
    let runner = Runner::new(echo_registry().await);
    let results = runner
        .run(vec![call("1", "echo", json!({ "text": "x" }))])
        .await;
    assert_eq!(results[0].error_kind, Some(ErrorKind::PermissionDenied));
    assert!(results[0].is_error);
    assert_eq!(results[0].fuel_used, 0, "the tool never ran");
}

#[tokio::test]
async fn allow_deny_and_ask_decide_which_calls_run() {
    let permissions = Permissions::deny_all()
        .rule("echo", Permission::Allow)
        .unwrap()
        .rule("fail", Permission::Deny)
        .unwrap()
        .rule("count*", Permission::Ask)
        .unwrap();
    let asked: Arc<Mutex<Vec<ApprovalRequest>>> = Arc::default();
    let approver = {
        let asked = asked.clone();
        move |request: ApprovalRequest| {
            asked.lock().unwrap().push(request.clone());
            async move {
                match request.call_id.as_str() {
                    "yes" => Approval::Approve,
                    _ => Approval::Refuse {
                        reason: Some("not now".into()),
                    },
                }
            }
        }
    };
    let runner = Runner::new(echo_registry().await)
        .permissions(permissions.clone())
        .approver(approver);
    let calls = vec![
        call("allowed", "echo", json!({ "text": "ok" })),
        call("denied", "fail", json!({})),
        call("yes", "counter", json!({})),
        call("no", "counter", json!({ "why": 1 })),
        call("default", "bad_details", json!({})),
        call("unknown", "ech0", json!({})),
        ToolCall::new("not-json", "counter", "{oops"),
    ];
    let results = runner.run(calls).await;
    assert_eq!(results[0].output, "ok");

    assert_eq!(results[1].error_kind, Some(ErrorKind::PermissionDenied));
    assert!(
        results[1].output.contains("does not allow calls to `fail`"),
        "{}",
        results[1].output
    );
    assert!(
        results[1].output.contains("Do not retry"),
        "{}",
        results[1].output
    );
    assert_eq!(results[1].fuel_used, 0);

    assert_eq!(results[2].output, "1", "approved");
    assert_eq!(
        results[3].error_kind,
        Some(ErrorKind::PermissionDenied),
        "refused"
    );
    assert!(
        results[3].output.contains("The user refused"),
        "{}",
        results[3].output
    );
    assert!(
        results[3].output.contains("They said: not now"),
        "{}",
        results[3].output
    );

    assert_eq!(
        results[4].error_kind,
        Some(ErrorKind::PermissionDenied),
        "the default is deny"
    );
    assert_eq!(
        results[5].error_kind,
        Some(ErrorKind::NotFound),
        "an unknown tool is not found, not asked about"
    );
    assert_eq!(
        results[6].error_kind,
        Some(ErrorKind::InvalidArguments),
        "not JSON: not asked about"
    );

    let asked = asked.lock().unwrap().clone();
    let ids: Vec<&str> = asked.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(
        ids,
        ["yes", "no"],
        "asked in order, and only about `ask` calls"
    );
    assert_eq!(asked[1].tool, "counter");
    assert_eq!(asked[1].arguments, json!({ "why": 1 }));
    assert_eq!(asked[1].info.descriptor.name, "counter");
    assert_eq!(asked[1].info.component, "fixture_echo");

    // Without an approver, `ask` denies.
    let runner = Runner::new(echo_registry().await).permissions(permissions);
    let results = runner.run(vec![call("1", "counter", json!({}))]).await;
    assert_eq!(results[0].error_kind, Some(ErrorKind::PermissionDenied));
    assert!(
        results[0].output.contains("no one can approve"),
        "{}",
        results[0].output
    );
}

#[tokio::test]
async fn after_a_denial_the_rest_of_the_batch_can_be_skipped() {
    let permissions = Permissions::allow_all()
        .rule("fail", Permission::Deny)
        .unwrap();
    let calls = vec![
        call("1", "echo", json!({ "text": "before" })),
        call("2", "fail", json!({})),
        call("3", "echo", json!({ "text": "after" })),
        call("4", "counter", json!({})),
    ];
    let runner = Runner::new(echo_registry().await).permissions(permissions);

    let results = runner.run(calls.clone()).await;
    let kinds: Vec<Option<ErrorKind>> = results.iter().map(|r| r.error_kind).collect();
    assert_eq!(
        kinds,
        [None, Some(ErrorKind::PermissionDenied), None, None],
        "continue is the default"
    );

    let results = runner
        .clone()
        .on_denial(OnDenial::SkipRest)
        .run(calls)
        .await;
    let kinds: Vec<Option<ErrorKind>> = results.iter().map(|r| r.error_kind).collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(ErrorKind::PermissionDenied),
            Some(ErrorKind::Cancelled),
            Some(ErrorKind::Cancelled)
        ]
    );
    assert!(
        results[2].output.contains("call to `fail` (id 2)"),
        "{}",
        results[2].output
    );
    assert_eq!(results[3].fuel_used, 0);

    // The same in a concurrent (read-only) batch: later calls are skipped.
    let permissions = Permissions::allow_all()
        .rule("echo", Permission::Ask)
        .unwrap();
    let runner = Runner::new(echo_registry().await)
        .permissions(permissions)
        .on_denial(OnDenial::SkipRest)
        .approver(|request: ApprovalRequest| async move {
            if request.arguments["text"] == "refuse me" {
                Approval::Refuse { reason: None }
            } else {
                Approval::Approve
            }
        });
    let calls = vec![
        call("a", "echo", json!({ "text": "fine" })),
        call("b", "echo", json!({ "text": "refuse me" })),
        call("c", "echo", json!({ "text": "fine too" })),
    ];
    assert!(runner.runs_concurrently(&calls));
    let results = runner.run(calls).await;
    let kinds: Vec<Option<ErrorKind>> = results.iter().map(|r| r.error_kind).collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(ErrorKind::PermissionDenied),
            Some(ErrorKind::Cancelled)
        ]
    );
    assert_eq!(results[0].output, "fine");
}
