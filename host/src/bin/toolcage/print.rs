//! What the CLI prints: text for people on stdout, JSON with `--json`, and
//! diagnostics on stderr.

use std::io::{IsTerminal, Write};

use serde_json::{Value, json};
use toolcage::{CallResult, FileReport, Registry, ToolInfo};

/// `text` with control characters (other than newline and tab) escaped, so
/// that a tool cannot drive the operator's terminal.
pub fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Skipped files and shadowed names, on stderr.
pub fn diagnostics(reports: &[FileReport]) {
    for report in reports {
        if let Some(error) = &report.error {
            eprintln!(
                "toolcage: skipped {}: {}",
                report.source,
                sanitize(&error.to_string())
            );
        }
        for shadowed in &report.shadowed {
            eprintln!(
                "toolcage: {}: tool `{}` is already provided by `{}`; ignored (first wins)",
                report.source, shadowed.tool, shadowed.owner
            );
        }
    }
}

/// The registered tool names, comma-separated.
pub fn names(registry: &Registry) -> String {
    registry
        .tools()
        .map(|t| t.descriptor.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn hints(info: &ToolInfo) -> String {
    let names = info.descriptor.hints.names();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(",")
    }
}

/// `value` as pretty JSON on stdout.
pub fn pretty_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

pub fn list(registry: &Registry, json: bool) -> anyhow::Result<()> {
    let tools: Vec<&ToolInfo> = registry.tools().collect();
    if json {
        return pretty_json(&tools);
    }
    let rows: Vec<[String; 4]> = tools
        .iter()
        .map(|t| {
            let summary = t
                .descriptor
                .description
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            [
                t.descriptor.name.clone(),
                t.component.clone(),
                hints(t),
                summary,
            ]
        })
        .collect();
    let header = ["NAME", "COMPONENT", "HINTS", "DESCRIPTION"].map(String::from);
    let width = |i: usize| {
        rows.iter()
            .chain([&header])
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths = [width(0), width(1), width(2)];
    let mut out = std::io::stdout().lock();
    for row in [&header].into_iter().chain(&rows) {
        writeln!(
            out,
            "{:w0$}  {:w1$}  {:w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        )?;
    }
    Ok(())
}

pub fn inspect(info: &ToolInfo, json: bool) -> anyhow::Result<()> {
    if json {
        return pretty_json(info);
    }
    let d = &info.descriptor;
    let mut out = std::io::stdout().lock();
    writeln!(out, "name:        {}", d.name)?;
    if let Some(title) = &d.title {
        writeln!(out, "title:       {title}")?;
    }
    writeln!(out, "component:   {} ({})", info.component, info.source)?;
    writeln!(out, "hints:       {}", hints(info))?;
    writeln!(out, "description:")?;
    for line in d.description.lines() {
        writeln!(out, "  {line}")?;
    }
    writeln!(
        out,
        "input schema:\n{}",
        serde_json::to_string_pretty(&d.input_schema)?
    )?;
    if let Some(schema) = &d.output_schema {
        writeln!(
            out,
            "output schema:\n{}",
            serde_json::to_string_pretty(schema)?
        )?;
    }
    Ok(())
}

pub fn call_result(result: &CallResult, json: bool) -> anyhow::Result<()> {
    if json {
        return pretty_json(result);
    }
    let mut out = std::io::stdout().lock();
    if out.is_terminal() {
        write!(out, "{}", sanitize(&result.output))?;
    } else {
        write!(out, "{}", result.output)?;
    }
    if !result.output.ends_with('\n') {
        writeln!(out)?;
    }
    if let Some(kind) = result.error_kind {
        eprintln!("toolcage: `{}` failed: {kind}", result.tool);
    }
    Ok(())
}

pub fn check(reports: &[(FileReport, Vec<ToolInfo>)], json: bool) -> anyhow::Result<()> {
    if json {
        let objects: Vec<Value> = reports
            .iter()
            .map(|(report, tools)| {
                json!({
                    "file": report.source,
                    "component": report.component,
                    "ok": report.is_ok(),
                    "tools": tools,
                    "error": report.error.as_ref().map(ToString::to_string),
                })
            })
            .collect();
        return pretty_json(&objects);
    }
    let mut out = std::io::stdout().lock();
    for (report, tools) in reports {
        match &report.error {
            None => {
                let names: Vec<&str> = tools.iter().map(|t| t.descriptor.name.as_str()).collect();
                writeln!(
                    out,
                    "ok    {}: {} tool(s): {}",
                    report.source,
                    names.len(),
                    names.join(", ")
                )?;
            }
            Some(error) => writeln!(out, "FAIL  {}: {error}", report.source)?,
        }
    }
    Ok(())
}
