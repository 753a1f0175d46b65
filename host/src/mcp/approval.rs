//! Asking the user to approve a call whose permission rule is `ask`,
//! through the client: MCP calls this elicitation.
//!
//! Threat model: the model must not approve its own calls. The question goes
//! to the client, which shows it to the user; the answer is bound to the
//! exact tool and arguments asked about (a retry with other arguments is
//! asked again), and anything but an explicit yes is a refusal.

use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationSchema, InputRequest, InputRequests,
    InputRequiredResult, ProtocolVersion,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::Value;

use crate::call::{Recorded, Replay};
use crate::catalog::elicit::{Elicitation, ElicitationRequest};
use crate::catalog::interpreter::RUN_CODE;
use crate::catalog::permissions::{Approval, ApprovalRequest, Approver};
use crate::sandbox::outcome::CancelToken;
use crate::state::StoreError;
use crate::state::seal::{Binding, Refused, Sealer};

/// Why a client without elicitation cannot approve a call.
pub const NO_ELICITATION: &str =
    "this MCP client cannot ask its user (it does not support elicitation)";

/// The key of the approval question in an input-required result.
const QUESTION: &str = "toolcage_approval";
/// The prefix of the keys of upstream servers' questions in one.
const UPSTREAM_QUESTION: &str = "toolcage_upstream";
/// The one field the user answers.
const ANSWER: &str = "approve";

/// Who approves a call's `ask`s (none: nobody can), and its 2026-07-28
/// round of questions, if any.
pub type Asking = (Option<Box<dyn Approver>>, Option<Arc<Round>>);

/// How to ask about `request`'s call (`call_id`, its rule `ask` when
/// `asks`) and about the nested calls its tool makes: an approver for the
/// call path (`None` when the client cannot be asked, which the path turns
/// into a refusal saying so), with, on 2026-07-28, the [`Round`] of
/// questions and answers; or, on 2026-07-28 before the user answered about
/// the call itself, the input-required result that asks.
///
/// Before 2026-07-28 each call is asked about while it waits, with an
/// `elicitation/create` request. From 2026-07-28 the server may not send
/// requests: a question ends the call with an input-required result, and
/// the client retries the call with the answer. A nested call asked about
/// so stops its root call (see [`Round`]).
pub async fn approver(
    request: &rmcp::model::CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    (call_id, arguments): (&str, Option<&Value>),
    asks: bool,
    stop: &CancelToken,
    sealer: &Arc<Sealer>,
) -> Result<Asking, Box<CallToolResponse>> {
    let can_elicit = context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.elicitation.is_some());
    if !can_elicit {
        return Ok((None, None));
    }
    let modern = context
        .protocol_version()
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28);
    if !modern {
        let peer = context.peer.clone();
        let asker = move |asked: ApprovalRequest| {
            let peer = peer.clone();
            async move { ask(&peer, &asked).await }
        };
        return Ok((Some(Box::new(asker)), None));
    }
    let seal = Seal {
        sealer: sealer.clone(),
        caller: caller(context, sealer),
    };
    let round = Round::open(request, arguments, stop.clone(), seal).await;
    let round =
        Arc::new(round.map_err(|refused| Box::new(refused_state(&request.name, &refused).into()))?);
    if let (true, Some(arguments)) = (asks, arguments)
        && !round.answers.contains_key(QUESTION)
    {
        round.ask(QUESTION.to_string(), question(&request.name, arguments));
        return Err(Box::new(round.input_required().await));
    }
    let (asking, call_id) = (round.clone(), call_id.to_string());
    let approver = move |asked: ApprovalRequest| {
        let approval = asking.approval(&call_id, &asked);
        async move { approval }
    };
    Ok((Some(Box::new(approver)), Some(round)))
}

/// Who made `context`'s request, as a sealed state and a script's session
/// are bound to it: the
/// hash of its bearer token over HTTP with tokens, anyone over HTTP
/// without, and this server process over stdio.
pub(super) fn caller(context: &RequestContext<RoleServer>, sealer: &Sealer) -> String {
    match context.extensions.get::<http::request::Parts>() {
        Some(parts) => http_caller(parts),
        None => format!("stdio:{}", sealer.process()),
    }
}

/// Who made a request over HTTP with head `parts`: its bearer token's
/// hash, or anyone without tokens.
pub(super) fn http_caller(parts: &http::request::Parts) -> String {
    match parts.extensions.get::<super::tasks::Owner>() {
        Some(owner) => format!("token:{}", blake3::Hash::from(owner.0).to_hex()),
        None => "http".to_string(),
    }
}

/// The answer to a retry whose request state was refused: a tool error
/// the model can act on. Nothing ran.
fn refused_state(tool: &str, refused: &Refused) -> CallToolResult {
    let text = format!(
        "The request state this retry of `{tool}` brought back was refused: {refused}. Nothing ran. Call `{tool}` again without it: a new run, from its start."
    );
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// The answer to a run that paused but whose state could not be kept.
fn unkept_state(tool: &str, error: &StoreError) -> CallToolResponse {
    let text = format!(
        "`{tool}` stopped to ask a question, but the state it needs to go on could not be kept ({error}). What it did before the question stands; call it again to run it anew."
    );
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

/// Where a round's state is sealed, and for whom.
struct Seal {
    sealer: Arc<Sealer>,
    caller: String,
}

/// One round of a 2026-07-28 call's questions: the answers its client sent
/// (with this retry, and carried from earlier ones in the request state),
/// and the questions it still has to answer. A nested call that needs an
/// answer it lacks is refused and stops its root call, whose response then
/// asks every question the run came to; the client retries the call with
/// the answers, and the tool runs again from the start, in a fresh
/// sandbox as every call does.
pub struct Round {
    /// The call's tool.
    tool: String,
    /// What the answers are about: the call's tool and arguments.
    call: String,
    answers: BTreeMap<String, Value>,
    asked: Mutex<InputRequests>,
    /// How many times this run asked about each nested call (tool and
    /// arguments): an answer approves one occurrence, not every call alike.
    seen: Mutex<BTreeMap<String, u32>>,
    stop: CancelToken,
    /// The nested calls that ran in this attempt of the run and the ones
    /// before it, by their place in the run (see [`Replay`]), carried in
    /// the request state.
    done: Mutex<BTreeMap<String, Recorded>>,
    /// The wall time the earlier attempts took.
    spent: Duration,
    /// When this attempt started.
    started: Instant,
    seal: Seal,
}

/// The request state a 2026-07-28 call's input-required result carries,
/// sealed for its call and caller ([`Sealer`]): the answers given so far,
/// the questions it asks now (only answers to those are taken from the
/// retry), the calls that ran and the time the run took.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    answers: BTreeMap<String, Value>,
    #[serde(default)]
    asked: Vec<String>,
    #[serde(default)]
    done: BTreeMap<String, Recorded>,
    /// The wall time the run took so far, in milliseconds.
    #[serde(default)]
    spent_ms: u64,
}

impl Round {
    /// The round of `request`'s call (with `arguments`): a first attempt,
    /// or, when the request brings a state back, a retry carrying on from
    /// it, unless the state is refused.
    async fn open(
        request: &rmcp::model::CallToolRequestParams,
        arguments: Option<&Value>,
        stop: CancelToken,
        seal: Seal,
    ) -> Result<Round, Refused> {
        let call = binding(&request.name, arguments.unwrap_or(&Value::Null));
        let state = match request.request_state.as_deref() {
            None => State::default(),
            Some(sealed) => {
                let binding = Binding {
                    call: &call,
                    caller: &seal.caller,
                };
                let opened = seal.sealer.open(binding, sealed).await?;
                serde_json::from_str::<State>(&opened).map_err(|_| Refused::Altered)?
            }
        };
        // Only answers to the questions asked are taken.
        let mut answers = state.answers;
        let given = request.input_responses.iter().flatten();
        let asked = given.filter(|(key, _)| state.asked.contains(key));
        answers.extend(asked.map(|(key, value)| (key.clone(), value.clone())));
        Ok(Round {
            tool: request.name.to_string(),
            call,
            answers,
            asked: Mutex::default(),
            seen: Mutex::default(),
            stop,
            done: Mutex::new(state.done),
            spent: Duration::from_millis(state.spent_ms),
            started: Instant::now(),
            seal,
        })
    }

    /// The approval of `asked` (the call `call_id` itself, or a nested
    /// call): the client's answer, or a refusal that asks for one.
    fn approval(&self, call_id: &str, asked: &ApprovalRequest) -> Approval {
        let key = match asked.call_id == call_id {
            true => QUESTION.to_string(),
            false => self.occurrence(QUESTION, binding(&asked.tool, &asked.arguments)),
        };
        if let Some(answer) = self.answers.get(&key) {
            return serde_json::from_value::<ElicitResult>(answer.clone())
                .map(|result| judge(&result))
                .unwrap_or_else(|e| Approval::Refuse {
                    reason: Some(format!("The client's answer could not be read ({e}).")),
                });
        }
        self.ask(key, question_about(asked));
        self.stop.cancel();
        Approval::Refuse {
            reason: Some("The user is being asked; the call is retried with the answer.".into()),
        }
    }

    /// The key of a question about `binding` (a nested call's tool and
    /// arguments, or an upstream server's question): which occurrence of
    /// it in this run it is (a run that asks twice is answered twice).
    fn occurrence(&self, prefix: &str, binding: String) -> String {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let count = seen.entry(format!("{prefix}.{binding}")).or_insert(0);
        *count += 1;
        format!("{prefix}.{binding}.{count}")
    }

    /// The client's answer to an upstream server's `question` (asked during
    /// the call, or one of its nested calls): the answer this retry brought,
    /// or, when there is none yet, the question added to the round and the
    /// run stopped, so that the client is asked and retries with it. The
    /// answer is bound to the tool, the call's arguments, the question's
    /// text and schema, and its occurrence in the run: a server that asks
    /// something else, or in a call with other arguments, is asked about
    /// again.
    pub fn upstream_answer(&self, question: &ElicitationRequest) -> Elicitation {
        let about = serde_json::json!([question.arguments, question.message, question.schema]);
        let key = self.occurrence(UPSTREAM_QUESTION, binding(&question.tool, &about));
        if let Some(answer) = self.answers.get(&key) {
            return serde_json::from_value::<ElicitResult>(answer.clone())
                .map_or(Elicitation::Decline, elicitation);
        }
        let Some(params) = upstream_question(question) else {
            return Elicitation::Decline;
        };
        self.ask(key, params);
        self.stop.cancel();
        Elicitation::Cancel
    }

    fn ask(&self, key: String, question: ElicitRequestParams) {
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        asked.insert(key, InputRequest::Elicitation(ElicitRequest::new(question)));
    }

    /// The answer asking what the run came to, if it came to a question:
    /// an input-required result carrying the run's sealed state, or an
    /// error when the state could not be kept.
    pub async fn pending(&self) -> Option<Result<InputRequiredResult, CallToolResponse>> {
        let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if asked.is_empty() {
            return None;
        }
        Some(self.input_required_with(asked).await)
    }

    async fn input_required(&self) -> CallToolResponse {
        let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match self.input_required_with(asked).await {
            Ok(input_required) => input_required.into(),
            Err(unkept) => unkept,
        }
    }

    async fn input_required_with(
        &self,
        asked: InputRequests,
    ) -> Result<InputRequiredResult, CallToolResponse> {
        let state = State {
            answers: self.answers.clone(),
            asked: asked.keys().cloned().collect(),
            done: self.done.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            spent_ms: self.spent().as_millis() as u64,
        };
        let state = serde_json::to_string(&state).expect("a state serializes");
        let binding = Binding {
            call: &self.call,
            caller: &self.seal.caller,
        };
        match self.seal.sealer.seal(binding, &state).await {
            Ok(sealed) => Ok(InputRequiredResult::new(Some(asked), Some(sealed))),
            Err(error) => Err(unkept_state(&self.tool, &error)),
        }
    }
}

impl Replay for Round {
    fn recorded(&self, position: &str) -> Option<Recorded> {
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        done.get(position).cloned()
    }

    fn spent(&self) -> Duration {
        self.spent + self.started.elapsed()
    }

    /// Keeps `recorded` whole, so that a replayed call answers what it
    /// answered: the tree's `nested_kib` bounds what its calls answer, and
    /// the state store what a paused run keeps.
    fn record(&self, position: String, recorded: Recorded) {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        done.insert(position, recorded);
    }
}

/// The client that answers the questions an upstream MCP server asks its
/// user during a call with an `elicitation/create` request: the session's,
/// when its client supports elicitation on a revision before 2026-07-28.
/// From 2026-07-28 the server may not send requests: the question goes in
/// the call's [`Round`] ([`Round::upstream_answer`]).
pub(super) fn upstream_asker(context: &RequestContext<RoleServer>) -> Option<Peer<RoleServer>> {
    let can_elicit = context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.elicitation.is_some());
    let legacy = context
        .protocol_version()
        .is_some_and(|version| version < ProtocolVersion::V_2026_07_28);
    (can_elicit && legacy).then(|| context.peer.clone())
}

/// Puts an upstream server's `question` to the user, saying which tool's
/// server asks; a schema the client's SDK cannot take is declined.
pub(super) async fn ask_upstream(
    peer: &Peer<RoleServer>,
    question: ElicitationRequest,
) -> Elicitation {
    let Some(params) = upstream_question(&question) else {
        return Elicitation::Decline;
    };
    match peer.create_elicitation(params).await {
        Ok(result) => elicitation(result),
        Err(_) => Elicitation::Decline,
    }
}

/// An upstream server's question as toolcage's client sees it, naming the
/// tool whose server asks; `None` for a schema the client's SDK cannot
/// take.
fn upstream_question(question: &ElicitationRequest) -> Option<ElicitRequestParams> {
    let requested_schema = serde_json::from_value::<ElicitationSchema>(question.schema.clone());
    Some(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!("The tool `{}` asks: {}", question.tool, question.message),
        requested_schema: requested_schema.ok()?,
    })
}

/// The client's answer, for the upstream server: an accepted form with its
/// content, a cancel, or else a decline.
fn elicitation(result: ElicitResult) -> Elicitation {
    match (result.action, result.content) {
        (ElicitationAction::Accept, Some(content)) => Elicitation::Accept(content),
        (ElicitationAction::Cancel, _) => Elicitation::Cancel,
        _ => Elicitation::Decline,
    }
}

/// Asks with an `elicitation/create` request (revisions before 2026-07-28).
async fn ask(peer: &Peer<RoleServer>, request: &ApprovalRequest) -> Approval {
    match peer.create_elicitation(question_about(request)).await {
        Ok(result) => judge(&result),
        Err(e) => Approval::Refuse {
            reason: Some(format!("The user could not be asked ({e}).")),
        },
    }
}

/// The question about `request`, naming the tool that made it when a tool
/// did.
fn question_about(request: &ApprovalRequest) -> ElicitRequestParams {
    let text = question_text(&request.tool, request.caller.as_deref(), &request.arguments);
    form(text)
}

/// The question: may this tool run with these arguments?
fn question(tool: &str, arguments: &Value) -> ElicitRequestParams {
    form(question_text(tool, None, arguments))
}

fn form(message: String) -> ElicitRequestParams {
    let schema = ElicitationSchema::builder()
        .required_bool(ANSWER)
        .build()
        .expect("a one-boolean schema is valid");
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    }
}

/// The most characters of one argument's value a question shows.
const SHOWN_VALUE_CHARS: usize = 300;
/// The most characters of an argument's name a question shows.
const SHOWN_NAME_CHARS: usize = 64;
/// The most arguments a question lists one by one.
const SHOWN_ARGUMENTS: usize = 32;
/// The longest script a question shows whole; a longer one is shown by its
/// head and its tail, this long together.
const SHOWN_SCRIPT_BYTES: usize = 16 << 10;
/// The arguments that say what a call touches, listed first.
const IDENTIFYING: [&str; 6] = ["path", "url", "uri", "file", "destination", "target"];

/// What the user is asked about a call of `tool` (made by `caller`, if a
/// tool made it): the call first, then one line per argument, those that
/// say what it touches (a path, a URL) first, each value cut to a bound
/// with its full size, so that no argument can push another out of view;
/// a script for `run_code` whole up to a bound, else its head and tail.
///
/// Threat model: the arguments are the model's (or a script's), written to
/// be approved: a long value beside a path must not hide the path, and the
/// end of a long script must not be cut off unseen.
fn question_text(tool: &str, caller: Option<&str>, arguments: &Value) -> String {
    let asker = caller.map_or(String::new(), |c| format!(", as the tool `{c}` asks"));
    let mut text = format!("Allow the tool `{tool}` to run with these arguments{asker}?");
    let Some(object) = arguments.as_object() else {
        text.push('\n');
        text.push_str(&shown_value(arguments));
        return text;
    };
    let mut names: Vec<&String> = object.keys().collect();
    names.sort_by_key(|name| !IDENTIFYING.contains(&name.as_str()));
    for name in names.iter().take(SHOWN_ARGUMENTS) {
        let value = &object[name.as_str()];
        text.push('\n');
        match (tool == RUN_CODE, name.as_str(), value) {
            (true, "code", Value::String(script)) => text.push_str(&shown_script(script)),
            _ => text.push_str(&format!("{}: {}", shown_name(name), shown_value(value))),
        }
    }
    if names.len() > SHOWN_ARGUMENTS {
        let rest = names.len() - SHOWN_ARGUMENTS;
        text.push_str(&format!("\n… and {rest} more arguments, not shown"));
    }
    text
}

/// An argument's name as JSON, cut to [`SHOWN_NAME_CHARS`].
fn shown_name(name: &str) -> String {
    cut(
        &Value::String(name.to_string()).to_string(),
        SHOWN_NAME_CHARS,
    )
}

/// A value as compact JSON (so a newline or a control character shows as
/// its escape), cut to [`SHOWN_VALUE_CHARS`] with its full size.
fn shown_value(value: &Value) -> String {
    cut(&value.to_string(), SHOWN_VALUE_CHARS)
}

/// `text` whole when it has at most `chars` characters, else its start
/// and its size.
fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        None => text.to_string(),
        Some((end, _)) => format!(
            "{}… ({} bytes in all, the first {end} shown)",
            &text[..end],
            text.len()
        ),
    }
}

/// A script, whole up to [`SHOWN_SCRIPT_BYTES`], else its head and its tail
/// around what was cut, with its size.
fn shown_script(script: &str) -> String {
    let size = script.len();
    if size <= SHOWN_SCRIPT_BYTES {
        return format!("\"code\" ({size} bytes, all of it):\n```\n{script}\n```");
    }
    let half = SHOWN_SCRIPT_BYTES / 2;
    let head_end = floor_boundary(script, half);
    let tail_start = ceil_boundary(script, size - half);
    let cut = tail_start - head_end;
    format!(
        "\"code\" ({size} bytes; its first {head_end} and last {} shown, {cut} bytes between them cut):\n```\n{}\n[… {cut} bytes cut …]\n{}\n```",
        size - tail_start,
        &script[..head_end],
        &script[tail_start..]
    )
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// Only an accepted form whose `approve` is true approves.
fn judge(result: &ElicitResult) -> Approval {
    let approved = result.action == ElicitationAction::Accept
        && result
            .content
            .as_ref()
            .and_then(|content| content.get(ANSWER))
            .and_then(Value::as_bool)
            == Some(true);
    if approved {
        Approval::Approve
    } else {
        Approval::Refuse {
            reason: Some("The user declined this call.".into()),
        }
    }
}

/// Ties an answer to the call asked about: the tool and its arguments.
fn binding(tool: &str, arguments: &Value) -> String {
    let text = format!("{tool}\n{arguments}");
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(state: Option<String>) -> rmcp::model::CallToolRequestParams {
        let mut request: rmcp::model::CallToolRequestParams =
            serde_json::from_value(serde_json::json!({ "name": "run_code" })).unwrap();
        request.request_state = state;
        request
    }

    fn answer(output: usize) -> Recorded {
        Recorded {
            tool: "t".into(),
            binding: "b".into(),
            call_id: ".1".into(),
            is_error: false,
            error_kind: None,
            output: "x".repeat(output),
            details: Some("{}".into()),
            calls: 1,
            bytes: output as u64,
            listed: Vec::new(),
        }
    }

    fn upstream(message: &str) -> ElicitationRequest {
        ElicitationRequest {
            tool: "mcp__h__ask".into(),
            arguments: serde_json::json!({}),
            message: message.into(),
            schema: serde_json::json!({
                "type": "object",
                "properties": { "name": { "type": "string" } },
                "required": ["name"]
            }),
        }
    }

    #[test]
    fn a_question_shows_every_argument_and_the_path_first() {
        let content = format!("#!/bin/sh\n{}", "A".repeat(5000));
        let arguments = serde_json::json!({ "content": content, "path": "/rw/target.txt" });
        let text = question_text("write_file", Some("run_code"), &arguments);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "Allow the tool `write_file` to run with these arguments, as the tool `run_code` asks?"
        );
        assert_eq!(lines[1], r#""path": "/rw/target.txt""#);
        assert!(
            lines[2].starts_with(r##""content": "#!/bin/sh\nAAA"##),
            "{}",
            lines[2]
        );
        assert!(
            lines[2].ends_with("(5013 bytes in all, the first 300 shown)"),
            "{}",
            lines[2]
        );
        assert_eq!(lines.len(), 3, "{text}");
        assert!(text.len() < 1024, "{}", text.len());
    }

    #[test]
    fn a_question_shows_a_script_whole_up_to_its_bound_and_then_its_head_and_tail() {
        let lines: Vec<String> = (0..300).map(|i| format!("x{i} = {i} * 2")).collect();
        let mut script = lines.join("\n");
        script.push_str("\nawait write_file(path=\"/rw/last.txt\", content=\"!\")");
        assert!(script.len() > 4096 && script.len() < SHOWN_SCRIPT_BYTES);
        let text = question_text(RUN_CODE, None, &serde_json::json!({ "code": script }));
        assert!(text.contains(&script), "{text}");
        assert!(text.contains("bytes, all of it"), "{text}");
        let long = format!(
            "{}\nawait write_file(path=\"/rw/end.txt\")",
            "y = 1\n".repeat(10_000)
        );
        let text = question_text(RUN_CODE, None, &serde_json::json!({ "code": long }));
        assert!(
            text.contains("await write_file(path=\"/rw/end.txt\")"),
            "the tail is shown"
        );
        assert!(text.starts_with("Allow the tool `run_code`"), "{text}");
        assert!(
            text.contains(&format!("({} bytes; its first", long.len())),
            "{text}"
        );
        assert!(text.contains("bytes cut …]"), "{text}");
        assert!(text.len() < SHOWN_SCRIPT_BYTES + 1024, "{}", text.len());
    }

    #[test]
    fn a_question_lists_a_bounded_number_of_arguments() {
        let many: serde_json::Map<String, Value> = (0..100)
            .map(|i| (format!("k{i:03}"), Value::from(i)))
            .collect();
        let text = question_text("t", None, &Value::Object(many));
        assert_eq!(text.lines().count(), 1 + SHOWN_ARGUMENTS + 1, "{text}");
        assert!(
            text.ends_with("… and 68 more arguments, not shown"),
            "{text}"
        );
        let long_name = serde_json::json!({ "n".repeat(500): 1 });
        let text = question_text("t", None, &long_name);
        assert!(text.len() < 300, "{text}");
    }

    fn seal(sealer: &Arc<Sealer>, caller: &str) -> Seal {
        Seal {
            sealer: sealer.clone(),
            caller: caller.into(),
        }
    }

    async fn round(request: &rmcp::model::CallToolRequestParams, sealer: &Arc<Sealer>) -> Round {
        let stop = CancelToken::new();
        match Round::open(request, None, stop, seal(sealer, "me")).await {
            Ok(round) => round,
            Err(refused) => panic!("refused: {refused}"),
        }
    }

    async fn sealed(round: &Round) -> Option<String> {
        let Some(Ok(pending)) = round.pending().await else {
            panic!("no question was asked")
        };
        pending.request_state
    }

    #[tokio::test]
    async fn an_upstream_question_stops_the_run_and_its_answer_comes_with_the_retry() {
        let sealer = Arc::new(Sealer::default());
        let stop = CancelToken::new();
        let first = request(None);
        let opened = Round::open(&first, None, stop.clone(), seal(&sealer, "me")).await;
        let round = opened.unwrap();
        assert!(matches!(
            round.upstream_answer(&upstream("Name?")),
            Elicitation::Cancel
        ));
        assert!(stop.is_cancelled(), "the run stops to ask");
        let Some(Ok(pending)) = round.pending().await else {
            panic!("asks")
        };
        let requests = pending.input_requests.clone().unwrap();
        let (key, InputRequest::Elicitation(asked)) = requests.iter().next().unwrap() else {
            panic!("an elicitation: {requests:?}")
        };
        let ElicitRequestParams::FormElicitationParams { message, .. } = &asked.params else {
            panic!("a form: {asked:?}")
        };
        assert_eq!(message, "The tool `mcp__h__ask` asks: Name?");

        // The retry brings the answer: the same question gets it, once; a
        // second asking in the run, or another question, is asked anew.
        let mut retry = request(pending.request_state);
        let answer = serde_json::json!({ "action": "accept", "content": { "name": "Ada" } });
        retry.input_responses = Some([(key.clone(), answer)].into_iter().collect());
        let stop = CancelToken::new();
        let again = Round::open(&retry, None, stop.clone(), seal(&sealer, "me"));
        let round = again.await.unwrap();
        let Elicitation::Accept(content) = round.upstream_answer(&upstream("Name?")) else {
            panic!("answered")
        };
        assert_eq!(content["name"], "Ada");
        assert!(!stop.is_cancelled());
        assert!(matches!(
            round.upstream_answer(&upstream("Name?")),
            Elicitation::Cancel
        ));
        assert!(matches!(
            round.upstream_answer(&upstream("Other?")),
            Elicitation::Cancel
        ));
        let Some(Ok(pending)) = round.pending().await else {
            panic!("asks")
        };
        assert_eq!(pending.input_requests.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn answers_are_kept_whole_and_carried_to_the_retry() {
        let sealer = Arc::new(Sealer::default());
        let round = round(&request(None), &sealer).await;
        for position in ["a", "b", "c"] {
            round.record(position.into(), answer(100 << 10));
        }
        assert_eq!(round.recorded("c"), Some(answer(100 << 10)));
        assert_eq!(round.recorded("d"), None);
        // The retry, with the state the question carried, has them all.
        round.ask("q".into(), question("t", &Value::Null));
        let retry = self::round(&request(sealed(&round).await), &sealer).await;
        for position in ["a", "b", "c"] {
            assert_eq!(retry.recorded(position), Some(answer(100 << 10)));
        }
    }

    #[tokio::test]
    async fn a_state_for_other_arguments_another_caller_or_used_twice_is_refused() {
        let sealer = Arc::new(Sealer::default());
        let first = round(&request(None), &sealer).await;
        first.record("a".into(), answer(1));
        first.ask("q".into(), question("t", &Value::Null));
        let state = sealed(&first).await;
        let open = |arguments: Option<Value>, caller: &'static str| {
            let (request, sealer) = (request(state.clone()), sealer.clone());
            async move {
                let arguments = arguments.as_ref();
                let seal = seal(&sealer, caller);
                Round::open(&request, arguments, CancelToken::new(), seal).await
            }
        };
        let other = open(Some(serde_json::json!({})), "me").await;
        assert!(matches!(other, Err(Refused::OtherCall)));
        assert!(matches!(
            open(None, "them").await,
            Err(Refused::OtherCaller)
        ));
        let retry = open(None, "me").await.unwrap();
        assert_eq!(retry.recorded("a"), Some(answer(1)));
        assert!(matches!(open(None, "me").await, Err(Refused::Used)));
        // What the model reads.
        let answer = refused_state("run_code", &Refused::Used);
        let text = serde_json::to_value(answer).unwrap();
        let text = text["content"][0]["text"].as_str().unwrap().to_string();
        assert_eq!(
            text,
            "The request state this retry of `run_code` brought back was refused: it was used already: a state answers one retry. Nothing ran. Call `run_code` again without it: a new run, from its start."
        );
    }
}
