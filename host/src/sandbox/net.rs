//! Egress: what a tool may reach on the network.
//!
//! Threat model: a tool is hostile and may try to reach anything its host
//! can: the cloud metadata address, an internal API, a database on
//! loopback, or a server of its own to send what it read to. Every
//! component is linked with `wasi:http` (so a tool built with `fetch()` in
//! it loads), but wasmtime-wasi-http's own sender is compiled out: no
//! request leaves except through [`Egress`], toolcage's hooks. No
//! destination is granted to any tool yet, so every request is refused with
//! `HTTP-request-denied` before anything is resolved or connected. The
//! call's logs say what was refused and why (at most
//! [`MAX_REFUSALS_NOTED`] lines a call, so a tool cannot flood them). TCP,
//! UDP and name lookup stay refused by the WASI context (`access-denied`).

use std::sync::Arc;

use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::store::truncate;

/// The most refusals a call's logs note; later ones are counted in one last
/// line.
pub(crate) const MAX_REFUSALS_NOTED: usize = 100;

/// The longest destination a refusal names, in bytes.
const MAX_DESTINATION_NOTED: usize = 512;

/// Where a call's refusals are noted: its logs (stderr, the events its
/// caller receives). The tracing log is written here.
pub(crate) type Notes = Arc<dyn Fn(String) + Send + Sync>;

/// A call's network hooks: every request refused, and noted.
pub(crate) struct Egress {
    notes: Notes,
    refused: usize,
}

impl Egress {
    pub(crate) fn new(notes: Notes) -> Self {
        Egress { notes, refused: 0 }
    }

    /// Notes that `destination` was refused, and why.
    fn refuse(&mut self, destination: &str, why: &str) {
        self.refused += 1;
        let destination = truncate(destination.to_string(), MAX_DESTINATION_NOTED);
        tracing::warn!(target: "toolcage::net", "{} refused: {why}", destination.escape_debug());
        if self.refused <= MAX_REFUSALS_NOTED {
            (self.notes)(format!("toolcage: {destination} refused: {why}"));
        } else if self.refused == MAX_REFUSALS_NOTED + 1 {
            (self.notes)(format!(
                "toolcage: more than {MAX_REFUSALS_NOTED} network refusals in this call; the rest are not noted"
            ));
        }
    }
}

/// A future of wasmtime-wasi-http's: a request's or a response's end.
type Done = Box<dyn Future<Output = Result<(), Error>> + Send>;

/// What [`WasiHttpHooks::send_request`] returns: the response, and the
/// future of its connection.
type Sent = Box<dyn Future<Output = Result<(http::Response<WasiBody>, Done), Error>> + Send>;

impl WasiHttpHooks for Egress {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _response_done: Done,
    ) -> Sent {
        let destination = format!("{} {}", request.method(), request.uri());
        self.refuse(
            &destination,
            "the operator granted this tool no network access",
        );
        Box::new(async { Err(Error::HttpRequestDenied) })
    }
}
