//! A client's JSON-RPC message, read as rmcp reads it, with a `tools/call`
//! parsed as rmcp's own `tools/call` request type rather than through its
//! untagged union of every client message.
//!
//! Both transports read a message here first: stdio ([`super::stdio`]) and
//! the direct HTTP path ([`super::http`]). A call is the message an agent
//! sends most, and rmcp's union reaches it only after failing through the
//! thirteen methods ahead of it, each failure building an error to throw
//! away.
//!
//! Threat model: a client writes every byte of the message. What is read
//! here as a call must be exactly the call rmcp would read, and nothing rmcp
//! would refuse: the test below holds the two to the same answers, message
//! by message, and whatever the quick parse cannot decide is left to rmcp.

use rmcp::model::{
    CallToolRequest, ClientJsonRpcMessage, ClientRequest, JsonRpcRequest, RequestId,
};

/// A `tools/call` request, parsed as rmcp parses it (so that what rmcp
/// refuses, a response's fields beside a request's say, is refused here
/// too), or `None` for anything else.
///
/// rmcp reads a client's request as an untagged union of every method's
/// type, failing through the thirteen methods ahead of `tools/call` before
/// it reaches it: about 1.9 µs a call on the bench machine, against 0.6 µs
/// here. So the keys that decide a message's kind are read first, as rmcp's
/// shape check reads them. Another method is no call (rmcp's `tools/call`
/// type takes that method only), and is left to rmcp without a parse here;
/// a request for `tools/call` is parsed as rmcp's own `tools/call` request
/// type alone. Only what neither step decides (a stray `result`, a null id,
/// duplicate keys, bad parameters) goes through rmcp's full parse.
pub(super) fn call_request(bytes: &[u8]) -> Option<(RequestId, CallToolRequest)> {
    match quick_parse(bytes) {
        Quick::Call(request) => Some((request.id, request.request)),
        Quick::NoCall => None,
        Quick::Undecided => match serde_json::from_slice::<ClientJsonRpcMessage>(bytes) {
            Ok(ClientJsonRpcMessage::Request(JsonRpcRequest {
                id,
                request: ClientRequest::CallToolRequest(call),
                ..
            })) => Some((id, call)),
            _ => None,
        },
    }
}

/// What [`quick_parse`] makes of a message.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once and unpacked at once; a box would cost an allocation per call"
)]
pub(super) enum Quick {
    Call(JsonRpcRequest<CallToolRequest>),
    /// Another method, or no method: rmcp can read no call from it.
    NoCall,
    /// For rmcp's full parse to decide.
    Undecided,
}

pub(super) fn quick_parse(bytes: &[u8]) -> Quick {
    use serde::de::IgnoredAny;

    /// The keys rmcp's shape check looks at, and the method.
    #[derive(serde::Deserialize)]
    struct Shape<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
        id: Option<IgnoredAny>,
        result: Option<IgnoredAny>,
        error: Option<IgnoredAny>,
    }

    let Ok(shape) = serde_json::from_slice::<Shape>(bytes) else {
        return Quick::Undecided;
    };
    if shape.method.as_deref() != Some("tools/call") {
        return Quick::NoCall;
    }
    if shape.id.is_none() || shape.result.is_some() || shape.error.is_some() {
        return Quick::Undecided;
    }
    match serde_json::from_slice(bytes) {
        Ok(request) => Quick::Call(request),
        Err(_) => Quick::Undecided,
    }
}

/// The answer to a request that is not JSON text by JSON-RPC's strict
/// reading (not UTF-8, or a lone surrogate such as `"\ud800"` in a string)
/// but whose id can still be read: a parse error naming what is wrong, so
/// that the client's call ends now rather than at its own timeout. `None`
/// for JSON text, and for bytes without a readable request id (answering
/// those could start an error storm with a peer that echoes what it cannot
/// read).
pub(super) fn unreadable_request(bytes: &[u8]) -> Option<rmcp::model::ServerJsonRpcMessage> {
    let suspect = std::str::from_utf8(bytes).is_err() || may_hold_a_surrogate(bytes);
    if !suspect {
        return None;
    }
    let error = serde_json::from_slice::<serde_json::Value>(bytes).err()?;
    if error.classify() != serde_json::error::Category::Syntax {
        return None;
    }
    let id = readable_id(bytes)?;
    let why = format!(
        "the request is not valid JSON text ({error}): write it as UTF-8, every string valid Unicode (no lone surrogate such as \\ud800)"
    );
    Some(rmcp::model::ServerJsonRpcMessage::error(
        rmcp::ErrorData::parse_error(why, None),
        Some(id),
    ))
}

/// Whether `bytes` hold a `\uD800`-`\uDFFF` escape (a surrogate, paired or
/// not): only then can UTF-8 text fail JSON's reading of its strings.
fn may_hold_a_surrogate(bytes: &[u8]) -> bool {
    memchr::memmem::find_iter(bytes, b"\\u").any(|at| {
        matches!(
            bytes.get(at + 2..at + 4),
            Some([b'd' | b'D', b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F'])
        )
    })
}

/// The `id` of a request whose strings need not be valid Unicode: serde
/// skips the values it is not asked for without decoding them.
fn readable_id(bytes: &[u8]) -> Option<rmcp::model::RequestId> {
    #[derive(serde::Deserialize)]
    struct Id {
        id: Option<rmcp::model::RequestId>,
        method: Option<serde::de::IgnoredAny>,
    }
    let read: Id = serde_json::from_slice(bytes).ok()?;
    read.method.and(read.id)
}

/// What is wrong with the `params` of a `tools/call` request that rmcp
/// could not read as a call (it then reads it as a request of an unknown
/// method, and would answer "method not found"): a message for a -32602
/// error that the model can correct from.
pub(super) fn call_params_problem(params: Option<&serde_json::Value>) -> String {
    use crate::agent::formats::kind;
    use serde_json::Value;
    let params = match params {
        None | Some(Value::Null) => {
            return "tools/call needs `params`: an object with the tool's `name` and its `arguments`".into();
        }
        Some(Value::Object(params)) => params,
        Some(other) => {
            return format!(
                "`params` of tools/call must be an object with the tool's `name` and its `arguments`, not {}",
                kind(other)
            );
        }
    };
    match params.get("name") {
        None => return "`params.name` of tools/call is missing: name the tool to call".into(),
        Some(Value::String(_)) => {}
        Some(other) => {
            return format!(
                "`params.name` of tools/call must be a string, the tool's name, not {}",
                kind(other)
            );
        }
    }
    match params.get("arguments") {
        Some(arguments) if !matches!(arguments, Value::Object(_) | Value::Null) => format!(
            "`params.arguments` of tools/call must be an object of the tool's arguments, not {}",
            kind(arguments)
        ),
        _ => match serde_json::from_value::<rmcp::model::CallToolRequestParams>(Value::Object(
            params.clone(),
        )) {
            Err(error) => format!("invalid `params` for tools/call: {error}"),
            Ok(_) => "invalid `params` for tools/call".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::RequestMetaObject;

    use super::*;

    #[test]
    fn call_params_problems_name_the_field() {
        let problem = |params: serde_json::Value| call_params_problem(Some(&params));
        let arguments = problem(serde_json::json!({"name": "t", "arguments": "x"}));
        assert!(arguments.contains("`params.arguments`") && arguments.ends_with("not a string"));
        let array = problem(serde_json::json!({"name": "t", "arguments": [1]}));
        assert!(array.ends_with("not an array"), "{array}");
        let number = problem(serde_json::json!({"name": "t", "arguments": 7}));
        assert!(number.ends_with("not a number"), "{number}");
        assert!(problem(serde_json::json!({"arguments": {}})).contains("`params.name`"));
        assert!(problem(serde_json::json!({"name": 7})).contains("must be a string"));
        assert!(problem(serde_json::json!("t")).contains("must be an object"));
        assert!(call_params_problem(None).contains("needs `params`"));
    }

    /// Every message, parsed by rmcp as a whole, and whatever `call_request`
    /// makes of it: the same call, or nothing where rmcp finds no call.
    #[test]
    fn calls_are_parsed_as_rmcp_parses_them() {
        let messages = [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{}}}"#,
            r#"{"id":"a","params":{"arguments":{"n":1.5e3,"s":"\u00e9\n","deep":[{"x":null},-0,18446744073709551615]},"name":"t"},"method":"tools/call","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":1,"k":[1]}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","requestState":"s","inputResponses":{}},"extra":true}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"},"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","method":"tools/list","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"id":8,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":7}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":[]}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":7.5,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"1.0","id":7,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":7,"params":{"name":"t"}}"#,
            r#"[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}]"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}} trailing"#,
            "",
        ];
        // What the quick parse decides itself: the plain calls, then the
        // messages of other methods (or none).
        let verdict = |message: &str| match quick_parse(message.as_bytes()) {
            Quick::Call(_) => "call",
            Quick::NoCall => "no call",
            Quick::Undecided => "undecided",
        };
        for message in &messages[..4] {
            assert_eq!(verdict(message), "call", "{message}");
        }
        for message in [messages[16], messages[17], messages[18], messages[19]] {
            assert_eq!(verdict(message), "no call", "{message}");
        }
        for message in messages {
            let rmcp = match serde_json::from_str::<ClientJsonRpcMessage>(message) {
                Ok(ClientJsonRpcMessage::Request(JsonRpcRequest {
                    id,
                    request: ClientRequest::CallToolRequest(call),
                    ..
                })) => Some((id, call)),
                _ => None,
            };
            let ours = call_request(message.as_bytes());
            let json = |call: &Option<(RequestId, CallToolRequest)>| {
                call.as_ref()
                    .map(|(id, call)| serde_json::to_string(&(id, call)).unwrap())
            };
            assert_eq!(json(&ours), json(&rmcp), "{message}");
            // rmcp keeps a request's `_meta` in its extensions.
            let meta = |call: &Option<(RequestId, CallToolRequest)>| {
                call.as_ref()
                    .map(|(_, call)| call.extensions.get::<RequestMetaObject>().cloned())
            };
            assert_eq!(meta(&ours), meta(&rmcp), "{message}");
        }
    }
}
