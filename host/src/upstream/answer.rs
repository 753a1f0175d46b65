//! An upstream `tools/call` result as a call's output and details.
//!
//! Text blocks are the output, one after another. Structured content is the
//! details. A block that is not text (an image, audio, a resource or a link
//! to one) is named in the output by a line of its own, and kept whole in
//! the details' `content` list when the tool has no structured content, so
//! that nothing the server sent is lost to a program reading the details.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};

use crate::catalog::upstream::UpstreamAnswer;
use crate::sandbox::text::human_bytes;

/// What `result` says, as an answer.
pub(super) fn from_result(result: CallToolResult) -> UpstreamAnswer {
    let is_error = result.is_error.unwrap_or(false);
    let mut lines = Vec::new();
    let mut others = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(text) => lines.push(text.text.clone()),
            other => {
                lines.push(describe(other));
                others.push(serde_json::to_value(other).unwrap_or(Value::Null));
            }
        }
    }
    let details = match (result.structured_content, others.is_empty()) {
        (Some(structured), _) => Some(structured),
        (None, false) => Some(json!({ "content": others })),
        (None, true) => None,
    };
    let mut output = lines.join("\n");
    if output.is_empty()
        && let Some(details) = &details
    {
        output = details.to_string();
    }
    UpstreamAnswer::Answered {
        output,
        details,
        is_error,
    }
}

/// A line naming a block that is not text.
fn describe(block: &ContentBlock) -> String {
    let size = |base64: &str| human_bytes(base64.len() / 4 * 3);
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => {
            format!("[image: {}, {}]", image.mime_type, size(&image.data))
        }
        ContentBlock::Audio(audio) => {
            format!("[audio: {}, {}]", audio.mime_type, size(&audio.data))
        }
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => {
                format!("[resource {uri}]\n{text}")
            }
            ResourceContents::BlobResourceContents {
                uri,
                blob,
                mime_type,
                ..
            } => format!(
                "[resource {uri}: {}, {}]",
                mime_type.as_deref().unwrap_or("binary"),
                size(blob)
            ),
            _ => "[resource]".to_string(),
        },
        ContentBlock::ResourceLink(link) => {
            format!("[resource link: {} ({})]", link.uri, link.name)
        }
        _ => "[content]".to_string(),
    }
}
