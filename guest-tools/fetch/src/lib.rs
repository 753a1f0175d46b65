//! toolcage's standard web fetch: one tool, `fetch`, that GETs a URL and
//! returns text a model can read. HTML becomes Markdown-like text, other
//! text comes as it is, and binary content is refused. Long pages come in
//! pieces: each answer says the offset to ask for next.
//!
//! It is a component like any other: it reaches only what the operator
//! granted, every redirect it follows is checked again by the host, and
//! without a grant it says so. The text handling lives in [`text`], which
//! has no dependency on the host, so its tests run natively.

pub mod text;

use toolcage_guest::http::{self, HttpError};
use toolcage_guest::{Descriptor, Outcome, Tool, Value, json, parse_args};

/// The `fetch` tool.
pub struct Fetch;

/// The most characters one answer returns by default.
const DEFAULT_MAX_CHARS: usize = 20_000;

/// The most characters one answer may return.
const MAX_CHARS: usize = 100_000;

/// The most bytes of a response read (the host's own limit may be lower).
const MAX_BODY_BYTES: usize = 5 << 20;

/// The most redirects followed, each one checked by the host again.
const MAX_REDIRECTS: usize = 5;

#[derive(serde::Deserialize)]
struct Args {
    url: String,
    #[serde(default)]
    offset: usize,
    max_chars: Option<usize>,
}

impl Tool for Fetch {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            "fetch",
            "Fetches a web page or other text resource by URL (GET) and returns its content \
             as text: HTML is converted to Markdown-like text, plain text, JSON, XML and \
             similar come as they are, and binary files (images, PDFs, archives) are \
             refused. Long content comes in pieces: when an answer is cut, it ends with \
             the offset to pass to get the next piece. Only destinations the operator has \
             granted can be reached; a refusal says so. Redirects are followed (at most \
             5), each checked against the grants again.",
        )
        .title("Fetch a URL")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "url": {
                    "type": "string",
                    "description": "The http:// or https:// URL to fetch.",
                    "pattern": "^[hH][tT][tT][pP][sS]?://",
                    "maxLength": 8192
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "The character offset to start from, from the previous answer's next_offset. Default: 0."
                },
                "max_chars": {
                    "type": "integer",
                    "minimum": 100,
                    "maximum": MAX_CHARS,
                    "description": "The most characters to return. Default: 20000."
                }
            },
            "required": ["url"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {
                "url": { "type": "string", "description": "The URL finally fetched, after redirects." },
                "status": { "type": "integer" },
                "content_type": { "type": ["string", "null"] },
                "offset": { "type": "integer" },
                "returned_chars": { "type": "integer" },
                "total_chars": { "type": "integer" },
                "next_offset": { "type": ["integer", "null"], "description": "Where the next piece starts; null when this is the end." },
                "body_truncated": { "type": "boolean", "description": "Whether the response was longer than the bytes read." }
            },
            "required": ["url", "status", "content_type", "offset", "returned_chars", "total_chars", "next_offset", "body_truncated"],
            "additionalProperties": false
        }))
        .read_only()
        .open_world()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: Args = parse_args(args)?;
        let max_chars = args.max_chars.unwrap_or(DEFAULT_MAX_CHARS).min(MAX_CHARS);
        let mut url = args.url.clone();
        let mut redirects = 0;
        let response = loop {
            let response = http::Request::new("GET", &url)
                .header(
                    "accept",
                    "text/html, text/*;q=0.9, application/json;q=0.9, */*;q=0.1",
                )
                .header("user-agent", "toolcage-fetch/0.1")
                .send()
                .map_err(|e| failed(&url, &e))?;
            match response.header("location") {
                Some(location) if (300..400).contains(&response.status) => {
                    if redirects == MAX_REDIRECTS {
                        return Err(Outcome::text(format!(
                            "{url} redirected more than {MAX_REDIRECTS} times; the last Location was {location}."
                        )));
                    }
                    url = text::resolve(&url, location);
                    redirects += 1;
                }
                _ => break response,
            }
        };
        let status = response.status;
        let content_type = response.header("content-type").map(str::to_string);
        let (body, body_truncated) = response
            .bytes(MAX_BODY_BYTES)
            .map_err(|e| failed(&url, &e))?;
        let kind = text::kind(content_type.as_deref(), &body);
        let content = match kind {
            text::Kind::Binary => {
                return Err(Outcome::text(format!(
                    "{url} returned binary content ({}), which fetch does not return. Ask for an HTML or text version of it.",
                    content_type.as_deref().unwrap_or("no content type")
                )));
            }
            text::Kind::Html => text::html_to_text(&body),
            text::Kind::Text => String::from_utf8_lossy(&body).into_owned(),
        };
        let piece = text::piece(&content, args.offset, max_chars);
        let mut output = String::new();
        if !(200..300).contains(&status) {
            output.push_str(&format!("HTTP {status} from {url}\n\n"));
        }
        output.push_str(piece.text);
        if let Some(next) = piece.next_offset {
            output.push_str(&format!(
                "\n\n[Cut at character {next} of {}. Call fetch again with offset={next} to read on.]",
                piece.total
            ));
        } else if body_truncated {
            output.push_str(&format!(
                "\n\n[The response was longer than {} MiB; only its start was read.]",
                MAX_BODY_BYTES >> 20
            ));
        }
        let details = json!({
            "url": url,
            "status": status,
            "content_type": content_type,
            "offset": args.offset,
            "returned_chars": piece.text.chars().count(),
            "total_chars": piece.total,
            "next_offset": piece.next_offset,
            "body_truncated": body_truncated,
        });
        if status >= 400 {
            return Err(Outcome::text(output).with_details(details));
        }
        Ok(Outcome::text(output).with_details(details))
    }
}

/// A failure the model can act on.
fn failed(url: &str, error: &HttpError) -> Outcome {
    let hint = match error {
        HttpError::Denied | HttpError::AddressProhibited => {
            " This destination is not granted to the fetch tool; ask the user to grant it, or use another source."
        }
        _ => "",
    };
    Outcome::text(format!("Fetching {url} failed: {error}.{hint}"))
}

toolcage_guest::export_tools!(Fetch);
