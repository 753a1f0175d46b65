//! `toolcage run-calls`: a model response in, tool results out, through the
//! library's batch runner, with the config's permissions. `ask` rules are
//! asked on the terminal when there is one, and refused when there is not.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use serde_json::{Value, json};
use toolcage::Registry;

use crate::read_capped;
use toolcage::agent::{Approval, ApprovalRequest, Format, Permissions, Runner};

/// The largest model response `run-calls` reads: room for a few calls with
/// arguments of [`toolcage::MAX_ARGUMENT_BYTES`] each.
const MAX_RESPONSE_BYTES: usize = 4 * toolcage::MAX_ARGUMENT_BYTES;

/// Runs the calls in the document at `file` (stdin for `-` or none) and
/// prints the results. Returns whether every call succeeded (so `true` for a
/// document with no calls, which prints an empty list).
pub async fn run_calls(
    registry: Registry,
    permissions: Permissions,
    telemetry: Option<toolcage::telemetry::Telemetry>,
    file: Option<&Path>,
    format: &str,
    json: bool,
) -> anyhow::Result<bool> {
    let text = match file {
        Some(path) if path != Path::new("-") => {
            let file =
                std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
            read_capped(file, MAX_RESPONSE_BYTES, "the model response's bytes")?
        }
        _ => read_capped(
            std::io::stdin(),
            MAX_RESPONSE_BYTES,
            "the model response's bytes on stdin",
        )?,
    };
    let document: Value = serde_json::from_str(&text).context("the model response is not JSON")?;
    let format = match format {
        "auto" => None,
        name => Some(name.parse::<Format>()?),
    };
    let mut runner = Runner::new(Arc::new(registry))
        .permissions(permissions)
        .approver(ask_on_terminal);
    if let Some(telemetry) = telemetry {
        runner = runner.telemetry(telemetry);
    }
    // No tool calls is the model's final answer: an empty list of results.
    let (format, calls) = toolcage::agent::parse_calls(&document, format)?;
    let reports = runner.run_reports(calls.clone()).await;
    let results: Vec<_> = reports.iter().map(|report| report.result.clone()).collect();
    let rendered = toolcage::agent::render_results(format, &calls, &results);
    let printed = if json {
        let calls: Vec<Value> = reports
            .iter()
            .map(|report| {
                let result = &report.result;
                json!({
                    "call_id": result.call_id,
                    "tool": result.tool,
                    "is_error": result.is_error,
                    "error_kind": result.error_kind,
                    "details": result.details,
                    "metrics": report.metrics,
                    "logs": result.logs,
                })
            })
            .collect();
        json!({ "format": format.as_str(), "results": rendered, "calls": calls })
    } else {
        rendered
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &printed)?;
    writeln!(out)?;
    Ok(results.iter().all(|result| !result.is_error))
}

/// Asks the person at the terminal; refuses when nobody can be asked.
async fn ask_on_terminal(request: ApprovalRequest) -> Approval {
    let question = format!(
        "toolcage: allow `{}` ({}) with arguments {}? [y/N] ",
        request.tool, request.info.component, request.arguments
    );
    tokio::task::spawn_blocking(move || ask(&question))
        .await
        .unwrap_or_else(|_| Approval::Refuse {
            reason: Some("the prompt failed.".into()),
        })
}

fn ask(question: &str) -> Approval {
    let refuse = |reason: &str| Approval::Refuse {
        reason: Some(reason.into()),
    };
    if !std::io::stderr().is_terminal() {
        return refuse("this rule asks a person, and no terminal is attached to ask on.");
    }
    let Ok(tty) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    else {
        return refuse("this rule asks a person, and no terminal is attached to ask on.");
    };
    let mut writer = &tty;
    if writer
        .write_all(question.as_bytes())
        .and_then(|()| writer.flush())
        .is_err()
    {
        return refuse("the terminal could not be written to.");
    }
    let mut answer = String::new();
    if std::io::BufReader::new(&tty)
        .read_line(&mut answer)
        .is_err()
    {
        return refuse("the terminal could not be read.");
    }
    match answer.trim() {
        "y" | "Y" | "yes" => Approval::Approve,
        _ => refuse("no."),
    }
}
