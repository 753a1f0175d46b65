//! Asking the user to approve a call whose permission rule is `ask`,
//! through the client: MCP calls this elicitation.
//!
//! Threat model: the model must not approve its own calls. The question goes
//! to the client, which shows it to the user; the answer is bound to the
//! exact tool and arguments asked about (a retry with other arguments is
//! asked again), and anything but an explicit yes is a refusal.

use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    InputRequest, InputRequests, InputRequiredResult, ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::Value;

use crate::agent::{Approval, ApprovalRequest, Approver};

/// Why a client without elicitation cannot approve a call.
pub const NO_ELICITATION: &str =
    "this MCP client cannot ask its user (it does not support elicitation)";

/// The key of the approval question in an input-required result.
const QUESTION: &str = "toolcage_approval";
/// The one field the user answers.
const ANSWER: &str = "approve";

/// How to ask about `request`'s call (`call_id`, its rule `ask` when
/// `asks`) and about the nested calls its tool makes: an approver for the
/// call path (`None` when the client cannot be asked, which the path turns
/// into a refusal saying so), or, on 2026-07-28 before the user answered,
/// the input-required result that asks about the call itself.
///
/// On 2026-07-28 the answer about the call comes with the retried request,
/// and covers that call only: a nested call whose rule is `ask` is asked
/// about while it waits, with an `elicitation/create` request, as on
/// earlier revisions.
pub fn approver(
    request: &rmcp::model::CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    call_id: &str,
    arguments: Option<&Value>,
    asks: bool,
) -> Result<Option<Box<dyn Approver>>, Box<InputRequiredResult>> {
    let can_elicit = context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.elicitation.is_some());
    if !can_elicit {
        return Ok(None);
    }
    let peer = context.peer.clone();
    let asker = move |asked: ApprovalRequest| {
        let peer = peer.clone();
        async move { ask(&peer, &asked).await }
    };
    let modern = context
        .protocol_version()
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28);
    let (true, true, Some(arguments)) = (modern, asks, arguments) else {
        return Ok(Some(Box::new(asker)));
    };
    let binding = binding(&request.name, arguments);
    let answer = request
        .input_responses
        .as_ref()
        .and_then(|responses| responses.get(QUESTION))
        .filter(|_| request.request_state.as_deref() == Some(binding.as_str()));
    let Some(answer) = answer else {
        let mut questions = InputRequests::new();
        questions.insert(
            QUESTION.to_string(),
            InputRequest::Elicitation(ElicitRequest::new(question(&request.name, arguments))),
        );
        return Err(Box::new(InputRequiredResult::new(
            Some(questions),
            Some(binding),
        )));
    };
    let approval = serde_json::from_value::<ElicitResult>(answer.clone())
        .map(|result| judge(&result))
        .unwrap_or_else(|e| Approval::Refuse {
            reason: Some(format!("The client's answer could not be read ({e}).")),
        });
    let call_id = call_id.to_string();
    Ok(Some(Box::new(move |asked: ApprovalRequest| {
        let answered = (asked.call_id == call_id).then(|| approval.clone());
        let asker = asker.clone();
        async move {
            match answered {
                Some(approval) => approval,
                None => asker(asked).await,
            }
        }
    })))
}

/// Asks with an `elicitation/create` request (revisions before 2026-07-28).
async fn ask(peer: &Peer<RoleServer>, request: &ApprovalRequest) -> Approval {
    match peer
        .create_elicitation(question(&request.tool, &request.arguments))
        .await
    {
        Ok(result) => judge(&result),
        Err(e) => Approval::Refuse {
            reason: Some(format!("The user could not be asked ({e}).")),
        },
    }
}

/// The question: may this tool run with these arguments?
fn question(tool: &str, arguments: &Value) -> ElicitRequestParams {
    let mut shown = serde_json::to_string_pretty(arguments).unwrap_or_default();
    if shown.len() > 4096 {
        let mut end = 4096;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown.truncate(end);
        shown.push_str("\n…");
    }
    let schema = ElicitationSchema::builder()
        .required_bool(ANSWER)
        .build()
        .expect("a one-boolean schema is valid");
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!("Allow the tool `{tool}` to run with these arguments?\n{shown}"),
        requested_schema: schema,
    }
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
