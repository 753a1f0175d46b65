//! The permission stage without a guest: a policy's defaults, and what
//! `allow`, `ask` and `deny` make of a call, with approvers made here. The
//! tools are upstream tools on a link made here, so an approved call runs.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::super::{Arguments, CallOptions, Request, not_started};
use super::*;
use crate::catalog::component::Hints;
use crate::catalog::elicit::Elicitor;
use crate::catalog::table::{Entry, ToolTable, upstream_entry};
use crate::catalog::upstream::{Answering, Closing, Upstream, UpstreamAnswer};
use crate::sandbox::limits::Limits;
use crate::sandbox::outcome::EventSink;
use crate::sandbox::secrets::Secrets;

/// An upstream server that answers every call with "ran", counting them.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Upstream for Counting {
    fn call(
        &self,
        _: &str,
        _: Map<String, Value>,
        _: Duration,
        _: Option<EventSink>,
        _: Option<Elicitor>,
    ) -> Answering<'_> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            UpstreamAnswer::Answered {
                output: "ran".into(),
                details: None,
                is_error: false,
            }
        })
    }

    fn close(&self, _: Duration) -> Closing<'_> {
        Box::pin(async {})
    }
}

fn entry(name: &str, link: &Arc<Counting>) -> Arc<Entry> {
    let (hints, limits) = (Hints::default(), Limits::default());
    let link = link.clone();
    Arc::new(upstream_entry(
        name,
        hints,
        None,
        link,
        limits,
        Secrets::new(),
    ))
}

/// The tools `read`, `write` and `edit`, and the link that serves them.
fn table() -> (Arc<ToolTable>, Arc<Counting>) {
    let link = Arc::new(Counting::default());
    let entries = ["read", "write", "edit"]
        .map(|name| entry(name, &link))
        .to_vec();
    (Arc::new(ToolTable::from_entries(entries)), link)
}

/// `read` allowed, `write` asked about, `edit` denied.
fn rules() -> Permissions {
    Permissions::allow_all()
        .rule("write", Permission::Ask)
        .unwrap()
        .rule("edit", Permission::Deny)
        .unwrap()
}

fn request(name: &str, arguments: impl Into<Arguments>) -> Request {
    Request {
        id: "id-1".into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

/// The permission stage of a call of `name` with `arguments` under `policy`.
async fn permit(
    policy: &CallPolicy,
    table: &Arc<ToolTable>,
    name: &str,
    arguments: &str,
) -> Result<(), (ErrorKind, String)> {
    let call = Call::look_up(table, request(name, arguments), Some(policy.permissions()));
    policy.permit(&call, None).await
}

/// What an approver was asked.
type Asked = Arc<Mutex<Vec<ApprovalRequest>>>;

/// An approver that notes each request in `asked` and answers the `n`-th
/// (from 0) with `answer(n)`.
fn approver(
    asked: Asked,
    answer: impl Fn(usize) -> Approval + Send + Sync + 'static,
) -> impl Approver {
    move |request: ApprovalRequest| {
        let mut seen = asked.lock().unwrap();
        let approval = answer(seen.len());
        seen.push(request);
        async move { approval }
    }
}

fn asking(answer: impl Fn(usize) -> Approval + Send + Sync + 'static) -> (CallPolicy, Asked) {
    let asked = Asked::default();
    let policy = CallPolicy::new(rules()).approver(approver(asked.clone(), answer));
    (policy, asked)
}

fn asks(asked: &Asked) -> usize {
    asked.lock().unwrap().len()
}

fn refuse(reason: Option<&str>) -> Approval {
    Approval::Refuse {
        reason: reason.map(str::to_string),
    }
}

#[test]
fn a_policy_starts_with_its_rules_and_nothing_else() {
    let policy = CallPolicy::new(rules());
    assert_eq!(policy.permissions(), &rules());
    assert!(policy.approver.is_none());
    assert_eq!(policy.unapprovable, None);
    assert!(policy.cache.is_none());
    assert!(policy.tracer.is_none());
    let debug = format!("{policy:?}");
    assert!(debug.contains("approver: false"), "{debug}");
    assert!(debug.contains("telemetry: false"), "{debug}");
    let policy = policy.with_permissions(Permissions::deny_all());
    assert_eq!(policy.permissions(), &Permissions::deny_all());
    let policy = policy.unapprovable("why not");
    assert_eq!(policy.unapprovable.as_deref(), Some("why not"));
}

#[tokio::test]
async fn allowed_calls_pass_without_asking() {
    let (table, _) = table();
    let (policy, asked) = asking(|_| refuse(None));
    assert_eq!(permit(&policy, &table, "read", "{}").await, Ok(()));
    assert_eq!(asks(&asked), 0);
}

#[tokio::test]
async fn denied_calls_are_refused_without_asking() {
    let (table, _) = table();
    let (policy, asked) = asking(|_| Approval::Approve);
    let (kind, output) = permit(&policy, &table, "edit", "{}").await.unwrap_err();
    assert_eq!(kind, ErrorKind::PermissionDenied);
    assert!(
        output.starts_with(
            "The operator does not allow calls to `edit` (permission denied). Do not retry it"
        ),
        "{output}"
    );
    assert_eq!(asks(&asked), 0);
}

#[tokio::test]
async fn without_an_approver_ask_refuses() {
    let (table, _) = table();
    let policy = CallPolicy::new(rules());
    let (kind, output) = permit(&policy, &table, "write", "{}").await.unwrap_err();
    assert_eq!(kind, ErrorKind::PermissionDenied);
    assert!(
        output.starts_with(
            "Calls to `write` need the user's approval, and no one can approve them here (permission denied)."
        ),
        "{output}"
    );
    let policy = policy.unapprovable("this client cannot ask its user");
    let (_, output) = permit(&policy, &table, "write", "{}").await.unwrap_err();
    assert!(
        output.contains(
            "no one can approve them here: this client cannot ask its user (permission denied)."
        ),
        "{output}"
    );
}

#[tokio::test]
async fn an_approver_sees_the_call_and_approves_it() {
    let (table, _) = table();
    let (policy, asked) = asking(|_| Approval::Approve);
    let policy = policy.unapprovable("not said: there is an approver");
    assert_eq!(
        permit(&policy, &table, "write", r#"{"path": "a"}"#).await,
        Ok(())
    );
    let mut call = Call::look_up(&table, request("write", "{}"), Some(policy.permissions()));
    call.called_by("code");
    assert_eq!(policy.permit(&call, None).await, Ok(()));
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].call_id, "id-1");
    assert_eq!(asked[0].tool, "write");
    assert_eq!(asked[0].arguments, json!({ "path": "a" }));
    assert_eq!(asked[0].info.descriptor.name, "write");
    assert_eq!(asked[0].caller, None);
    assert_eq!(asked[1].caller.as_deref(), Some("code"));
}

#[tokio::test]
async fn a_refusal_by_the_approver_passes_on_its_reason() {
    let (table, _) = table();
    let (policy, _) = asking(|_| refuse(Some("not that file")));
    let (kind, output) = permit(&policy, &table, "write", "{}").await.unwrap_err();
    assert_eq!(kind, ErrorKind::PermissionDenied);
    assert!(
        output.starts_with(
            "The user refused this call to `write` (permission denied). They said: not that file Do not retry"
        ),
        "{output}"
    );
    let (policy, _) = asking(|_| refuse(None));
    let (_, output) = permit(&policy, &table, "write", "{}").await.unwrap_err();
    assert!(
        output
            .starts_with("The user refused this call to `write` (permission denied). Do not retry"),
        "{output}"
    );
    assert!(!output.contains("They said"), "{output}");
}

#[tokio::test]
async fn arguments_that_are_not_json_are_not_asked_about() {
    let (table, link) = table();
    let (policy, asked) = asking(|_| refuse(None));
    assert_eq!(permit(&policy, &table, "write", "{not json").await, Ok(()));
    assert_eq!(asks(&asked), 0);
    // They fail at validation, without running.
    let call = Call::look_up(
        &table,
        request("write", "{not json"),
        Some(policy.permissions()),
    );
    let report = call.run(CallOptions::new().policy(policy)).await;
    assert_eq!(report.result.error_kind, Some(ErrorKind::InvalidArguments));
    assert_eq!(link.0.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_approval_covers_one_call() {
    let (table, link) = table();
    let (policy, asked) = asking(|n| match n {
        0 => Approval::Approve,
        _ => refuse(None),
    });
    let policy = Arc::new(policy);
    let run = || {
        let call = Call::look_up(&table, request("write", "{}"), Some(policy.permissions()));
        call.run(CallOptions::new().policy(policy.clone()))
    };
    let first = run().await.result;
    assert!(!first.is_error, "{}", first.output);
    assert_eq!(first.output, "ran");
    assert_eq!(link.0.load(Ordering::SeqCst), 1);
    let second = run().await.result;
    assert_eq!(second.error_kind, Some(ErrorKind::PermissionDenied));
    assert_eq!(
        link.0.load(Ordering::SeqCst),
        1,
        "the refused call did not run"
    );
    assert_eq!(asks(&asked), 2, "the same call was asked about again");
}

#[tokio::test]
async fn a_denied_call_never_reaches_its_tool() {
    let (table, link) = table();
    let policy = CallPolicy::new(rules());
    let call = Call::look_up(&table, request("edit", "{}"), Some(policy.permissions()));
    let report = call.run(CallOptions::new().policy(policy)).await;
    assert_eq!(report.result.error_kind, Some(ErrorKind::PermissionDenied));
    assert_eq!(report.result.duration, Duration::ZERO);
    assert!(!report.metrics.cached);
    assert_eq!(link.0.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_cancelled_call_is_not_asked_about() {
    let (table, _) = table();
    let (policy, asked) = asking(|_| Approval::Approve);
    let token = CancelToken::new();
    token.cancel();
    let options = CallOptions::new().policy(policy).cancel_token(token);
    let rules = options.policy_ref().map(CallPolicy::permissions);
    let mut call = Call::look_up(&table, request("write", "{}"), rules);
    assert_eq!(
        call.permit(&options).await,
        Err((ErrorKind::Cancelled, not_started()))
    );
    assert_eq!(asks(&asked), 0);
}

#[tokio::test]
async fn a_call_cancelled_while_its_approver_thinks_is_cancelled() {
    let (table, _) = table();
    let asked = Asked::default();
    let seen = asked.clone();
    let policy = CallPolicy::new(rules()).approver(move |request: ApprovalRequest| {
        seen.lock().unwrap().push(request);
        std::future::pending::<Approval>()
    });
    let token = CancelToken::new();
    let cancel = token.clone();
    let cancelling = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        cancel.cancel();
    });
    let call = Call::look_up(&table, request("write", "{}"), Some(policy.permissions()));
    let permitted =
        tokio::time::timeout(Duration::from_secs(10), policy.permit(&call, Some(&token)))
            .await
            .expect("the stage ends once cancelled");
    cancelling.await.unwrap();
    assert_eq!(permitted, Err((ErrorKind::Cancelled, not_started())));
    assert_eq!(asks(&asked), 1);
}

#[tokio::test]
async fn a_frontend_refusal_comes_before_the_rules() {
    let (table, _) = table();
    let (policy, asked) = asking(|_| Approval::Approve);
    let options = CallOptions::new().policy(policy);
    let rules = options.policy_ref().map(CallPolicy::permissions);
    let mut call = Call::look_up(&table, request("write", "{}"), rules);
    call.refuse_first(ErrorKind::Unsupported, "not a function call".into());
    assert_eq!(
        call.permit(&options).await,
        Err((ErrorKind::Unsupported, "not a function call".into()))
    );
    assert_eq!(asks(&asked), 0);
    // Refused once: the refusal is taken.
    assert_eq!(call.permit(&options).await, Ok(()));
}

#[tokio::test]
async fn without_a_policy_every_tool_is_allowed() {
    let (table, link) = table();
    // The rules resolved at lookup deny, but no policy is in force.
    let mut call = Call::look_up(
        &table,
        request("edit", "{}"),
        Some(&Permissions::deny_all()),
    );
    assert_eq!(call.permission(), Permission::Deny);
    assert_eq!(call.permit(&CallOptions::new()).await, Ok(()));
    let call = Call::look_up(&table, request("edit", "{}"), None);
    assert_eq!(call.permission(), Permission::Allow);
    assert_eq!(call.run(CallOptions::new()).await.result.output, "ran");
    assert_eq!(link.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn unknown_tools_are_not_found_whatever_the_rules() {
    let (table, _) = table();
    let asked = Asked::default();
    let policy = CallPolicy::new(Permissions::new(Permission::Ask))
        .approver(approver(asked.clone(), |_| Approval::Approve));
    let call = Call::look_up(&table, request("nope", "{}"), Some(policy.permissions()));
    assert_eq!(call.permission(), Permission::Allow);
    let result = call.run(CallOptions::new().policy(policy)).await.result;
    assert_eq!(result.error_kind, Some(ErrorKind::NotFound));
    assert_eq!(
        result.output,
        "There is no tool named `nope`. Available tools: read, write, edit."
    );
    assert_eq!(asks(&asked), 0);
    let denying = CallPolicy::new(Permissions::deny_all());
    let call = Call::look_up(&table, request("nope", "{}"), Some(denying.permissions()));
    let result = call.run(CallOptions::new().policy(denying)).await.result;
    assert_eq!(result.error_kind, Some(ErrorKind::NotFound));
}
