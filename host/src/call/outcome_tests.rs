//! The outcome stage without a guest: sizes, the limit's message,
//! redaction, what a returned outcome becomes, and an upstream tool's call
//! through a link made here.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, json};

use super::*;
use crate::catalog::component::Hints;
use crate::catalog::elicit::Elicitation;
use crate::catalog::table::upstream_entry;
use crate::catalog::upstream::{Answering, Closing, Upstream};
use crate::sandbox::limits::Limits;
use crate::sandbox::outcome::{CancelToken, EventSink};
use crate::sandbox::secrets::{Secret, Secrets};

/// What a link answers a call with: the call's arguments and asker in.
type Respond = dyn Fn(Map<String, Value>, Option<Elicitor>) -> Answering<'static> + Send + Sync;

/// An upstream server made of a function.
struct Link(Box<Respond>);

impl Upstream for Link {
    fn call(
        &self,
        _: &str,
        arguments: Map<String, Value>,
        _: Duration,
        _: Option<EventSink>,
        elicitor: Option<Elicitor>,
    ) -> Answering<'_> {
        (self.0)(arguments, elicitor)
    }

    fn close(&self, _: Duration) -> Closing<'_> {
        Box::pin(async {})
    }
}

/// A link that answers with `respond`.
fn link(
    respond: impl Fn(Map<String, Value>, Option<Elicitor>) -> Answering<'static> + Send + Sync + 'static,
) -> Link {
    Link(Box::new(respond))
}

/// A link that answers every call with `answer`.
fn answering(answer: UpstreamAnswer) -> Link {
    link(move |_, _| {
        let answer = answer.clone();
        Box::pin(async move { answer })
    })
}

fn answered(output: &str, details: Option<Value>, is_error: bool) -> UpstreamAnswer {
    UpstreamAnswer::Answered {
        output: output.into(),
        details,
        is_error,
    }
}

/// The entry of the upstream tool `t`, promising `output_schema`, served
/// by `link` under `limits`, with `secrets`.
fn entry(output_schema: Option<Value>, limits: Limits, secrets: Secrets, link: Link) -> Entry {
    let link = Arc::new(link);
    upstream_entry("t", Hints::default(), output_schema, link, limits, secrets)
}

/// An entry whose details must be an object with a number `n`.
fn strict() -> Entry {
    let schema = json!({
        "type": "object",
        "properties": { "n": { "type": "number" } },
        "required": ["n"],
    });
    entry(
        Some(schema),
        Limits::default(),
        Secrets::new(),
        answering(answered("", None, false)),
    )
}

/// A result as the stages start one: a tool error with no output yet.
fn blank() -> CallResult {
    CallResult::error("t", "id-1".into(), ErrorKind::ToolError, String::new())
}

async fn call(entry: &Entry, options: &CallOptions) -> CallResult {
    run(entry, &json!({ "q": 1 }), "id-1".into(), options, None).await
}

#[test]
fn json_len_is_the_length_of_the_json_text() {
    let values = [
        Value::Null,
        json!(true),
        json!(0),
        json!(-12345),
        json!(1.5e300),
        json!(0.1),
        json!(u64::MAX),
        json!(""),
        json!("plain"),
        json!("quote \" backslash \\ slash / newline \n tab \t cr \r"),
        json!("controls \u{0} \u{1} \u{1f} \u{7f}"),
        json!("unicode é ß 漢字 🎉 \u{2028} \u{feff}"),
        json!([]),
        json!({}),
        json!([1, "two", null, [3.5, { "four": false }]]),
        json!({ "ключ": "значение", "a\"b": { "c\\d": ["e\nf"] } }),
        Value::Array(
            (0..1000)
                .map(|n| json!({ "n": n, "s": "x".repeat(n % 7) }))
                .collect(),
        ),
    ];
    for value in values {
        let text = serde_json::to_string(&value).unwrap();
        assert_eq!(json_len(&value), text.len(), "{text}");
    }
}

#[test]
fn too_much_output_names_both_sizes() {
    let message = too_much_output(2048, 1024);
    assert!(
        message.starts_with("The tool returned 2 KiB of output, more than its limit of 1 KiB."),
        "{message}"
    );
    let message = too_much_output(1536, 1000);
    assert!(message.contains("returned 1.5 KiB"), "{message}");
    assert!(message.contains("limit of 1000 B"), "{message}");
}

#[test]
fn redaction_takes_secrets_out_of_output_and_details_and_counts_them() {
    let secret = Secret::new("API_KEY", "sk-0123456789abcdef").unwrap();
    let redactor = Redactor::new([&secret]).expect("a redactor");
    let mut result = blank();
    result.output = "the key is sk-0123456789abcdef, twice: sk-0123456789abcdef".into();
    result.details = Some(json!({
        "token": "sk-0123456789abcdef",
        "list": ["safe", "Bearer sk-0123456789abcdef"],
    }));
    redact(Some(&redactor), &mut result);
    assert_eq!(
        result.output,
        "the key is [redacted secret API_KEY], twice: [redacted secret API_KEY]"
    );
    assert_eq!(
        result.details,
        Some(json!({
            "token": "[redacted secret API_KEY]",
            "list": ["safe", "Bearer [redacted secret API_KEY]"],
        }))
    );
    assert_eq!(result.net.redactions, 4);
    // Nothing to redact: unchanged, nothing counted.
    let mut clean = blank();
    clean.output = "nothing secret".into();
    clean.details = Some(json!({ "a": 1 }));
    let before = clean.clone();
    redact(Some(&redactor), &mut clean);
    assert_eq!(clean, before);
}

#[test]
fn without_a_redactor_nothing_is_redacted() {
    let mut result = blank();
    result.output = "sk-0123456789abcdef".into();
    let before = result.clone();
    redact(None, &mut result);
    assert_eq!(result, before);
}

#[test]
fn details_that_are_not_json_are_a_bug_in_the_tool() {
    let entry = strict();
    for is_error in [false, true] {
        let mut result = blank();
        accept(
            &entry,
            is_error,
            "out".into(),
            Some("{not json".into()),
            &mut result,
        );
        assert!(result.is_error);
        assert_eq!(result.error_kind, Some(ErrorKind::ToolError));
        assert!(
            result
                .output
                .starts_with("The tool returned details that are not valid JSON ("),
            "{}",
            result.output
        );
        assert!(result.output.ends_with("); this is a bug in the tool."));
        assert_eq!(result.details, None);
    }
}

#[test]
fn details_are_parsed_and_checked_against_the_output_schema() {
    let entry = strict();
    let mut result = blank();
    accept(
        &entry,
        false,
        "out".into(),
        Some(r#"{"n": 3}"#.into()),
        &mut result,
    );
    assert!(!result.is_error);
    assert_eq!(result.error_kind, None);
    assert_eq!(result.output, "out");
    assert_eq!(result.details, Some(json!({ "n": 3 })));

    let mut result = blank();
    accept(
        &entry,
        false,
        "out".into(),
        Some(r#"{"n": "three"}"#.into()),
        &mut result,
    );
    assert!(result.is_error);
    assert_eq!(result.error_kind, Some(ErrorKind::ToolError));
    assert!(
        result.output.starts_with(
            "The tool returned details that break its own output schema; this is a bug in the tool:\n"
        ),
        "{}",
        result.output
    );
    assert!(
        result.output.contains("/n"),
        "names the path: {}",
        result.output
    );
    assert_eq!(result.details, None);
}

#[test]
fn missing_details_break_an_output_schema_that_wants_some() {
    let mut result = blank();
    accept_value(&strict(), false, "out".into(), None, &mut result);
    assert_eq!(result.error_kind, Some(ErrorKind::ToolError));
    assert!(
        result.output.contains("break its own output schema"),
        "{}",
        result.output
    );
}

#[test]
fn a_failed_outcome_is_a_tool_error_whatever_its_details() {
    let mut result = blank();
    result.is_error = false;
    result.error_kind = None;
    let details = Some(json!({ "n": "not a number" }));
    accept_value(
        &strict(),
        true,
        "it failed".into(),
        details.clone(),
        &mut result,
    );
    assert!(result.is_error);
    assert_eq!(result.error_kind, Some(ErrorKind::ToolError));
    assert_eq!(result.output, "it failed");
    assert_eq!(result.details, details, "the schema binds successes only");
}

#[test]
fn without_an_output_schema_any_details_pass() {
    let entry = entry(
        None,
        Limits::default(),
        Secrets::new(),
        answering(answered("", None, false)),
    );
    let mut result = blank();
    accept(
        &entry,
        false,
        "out".into(),
        Some("[1, 2]".into()),
        &mut result,
    );
    assert!(!result.is_error);
    assert_eq!(result.error_kind, None);
    assert_eq!(result.details, Some(json!([1, 2])));
    let mut result = blank();
    accept(&entry, false, "out".into(), None, &mut result);
    assert!(!result.is_error);
    assert_eq!(result.details, None);
}

#[tokio::test]
async fn an_upstream_answer_becomes_the_result() {
    let link = answering(answered("done", Some(json!({ "n": 1 })), false));
    let schema = json!({ "type": "object", "required": ["n"] });
    let entry = entry(Some(schema), Limits::default(), Secrets::new(), link);
    let result = call(&entry, &CallOptions::new()).await;
    assert_eq!(result.tool, "t");
    assert_eq!(result.call_id, "id-1");
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(result.output, "done");
    assert_eq!(result.details, Some(json!({ "n": 1 })));
    let failed = answered("no such thing", None, true);
    let entry = self::entry(None, Limits::default(), Secrets::new(), answering(failed));
    let result = call(&entry, &CallOptions::new()).await;
    assert_eq!(result.error_kind, Some(ErrorKind::ToolError));
    assert_eq!(result.output, "no such thing");
}

#[tokio::test]
async fn an_upstream_answer_over_the_output_limit_is_refused() {
    // "ab" and `"xyz"` (5 bytes as JSON): 7 bytes.
    let answer = answered("ab", Some(json!("xyz")), false);
    let within = Limits {
        output_bytes: 7,
        ..Limits::default()
    };
    let entry = entry(None, within, Secrets::new(), answering(answer.clone()));
    let result = call(&entry, &CallOptions::new()).await;
    assert!(!result.is_error, "{}", result.output);
    let over = Limits {
        output_bytes: 6,
        ..Limits::default()
    };
    let entry = self::entry(None, over, Secrets::new(), answering(answer));
    let result = call(&entry, &CallOptions::new()).await;
    assert_eq!(result.error_kind, Some(ErrorKind::OutputLimit));
    assert_eq!(result.output, too_much_output(7, 6));
    assert_eq!(result.details, None);
}

#[tokio::test]
async fn an_upstream_failure_keeps_its_kind() {
    let failed = UpstreamAnswer::Failed {
        kind: ErrorKind::Unavailable,
        output: "the server is restarting".into(),
    };
    let entry = entry(None, Limits::default(), Secrets::new(), answering(failed));
    let result = call(&entry, &CallOptions::new()).await;
    assert!(result.is_error);
    assert_eq!(result.error_kind, Some(ErrorKind::Unavailable));
    assert_eq!(result.output, "the server is restarting");
}

#[tokio::test]
async fn an_upstream_answer_is_redacted() {
    let secrets = Secrets::new();
    secrets.set(Secret::new("TOKEN", "tok-abcdefgh12345").unwrap());
    let link = answering(answered(
        "echo: tok-abcdefgh12345",
        Some(json!({ "echo": "tok-abcdefgh12345" })),
        false,
    ));
    let entry = entry(None, Limits::default(), secrets, link);
    let result = call(&entry, &CallOptions::new()).await;
    assert_eq!(result.output, "echo: [redacted secret TOKEN]");
    assert_eq!(
        result.details,
        Some(json!({ "echo": "[redacted secret TOKEN]" }))
    );
    assert_eq!(result.net.redactions, 2);
}

#[tokio::test]
async fn a_cancelled_upstream_call_is_dropped() {
    let link = link(|_, _| Box::pin(std::future::pending()));
    let entry = entry(None, Limits::default(), Secrets::new(), link);
    let token = CancelToken::new();
    let options = CallOptions::new().cancel_token(token.clone());
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        token.cancel();
    });
    let result = tokio::time::timeout(Duration::from_secs(10), call(&entry, &options))
        .await
        .expect("the call ends once cancelled");
    cancel.await.unwrap();
    assert_eq!(result.error_kind, Some(ErrorKind::Cancelled));
    assert_eq!(
        result.output,
        "`t` was cancelled; the call was cancelled on its server too."
    );
}

#[tokio::test]
async fn an_upstream_question_names_the_tool_and_the_arguments_of_its_call() {
    let link = link(|_, elicitor| {
        Box::pin(async move {
            let Some(ask) = elicitor else {
                return answered("no asker", None, true);
            };
            let question = ElicitationRequest {
                tool: "the server's own name".into(),
                arguments: Value::Null,
                message: "Which one?".into(),
                schema: json!({ "type": "object" }),
            };
            match ask(question).await {
                Elicitation::Accept(answer) => answered("accepted", Some(answer), false),
                other => answered(&format!("{other:?}"), None, true),
            }
        })
    });
    let entry = entry(None, Limits::default(), Secrets::new(), link);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let options = CallOptions::new().on_elicitation(move |question| {
        seen.lock().unwrap().push(question);
        async { Elicitation::Accept(json!({ "pick": 2 })) }
    });
    let result = call(&entry, &options).await;
    assert_eq!(result.output, "accepted");
    assert_eq!(result.details, Some(json!({ "pick": 2 })));
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].tool, "t");
    assert_eq!(asked[0].arguments, json!({ "q": 1 }));
    assert_eq!(asked[0].message, "Which one?");
    // Without an asker, the link is given none.
    let result = call(&entry, &CallOptions::new()).await;
    assert_eq!(result.output, "no asker");
}
