//! toolcage's standard calculator: one tool, `calc`, that evaluates
//! arithmetic expressions exactly as a careful person would, without ever
//! handing the text to an interpreter.
//!
//! The evaluator lives in [`eval`] and has no dependency on the host, so its
//! tests run natively.

pub mod eval;

use toolcage_guest::{Descriptor, Outcome, Tool, Value, json, parse_args};

/// The `calc` tool.
pub struct Calc;

#[derive(serde::Deserialize)]
struct Args {
    expression: String,
}

impl Tool for Calc {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            "calc",
            "Evaluates an arithmetic expression and returns the number. Use it instead of \
             doing arithmetic in your head.\n\
             Supports + - * / % (remainder, sign of the dividend), ^ (power, \
             right-associative; -2^2 = -4), parentheses, the constants pi and e, and the \
             functions sqrt, abs, min, max (one or more arguments), round (halves away \
             from zero), floor, ceil, ln, log10, exp, sin, cos, tan (radians). No \
             variables and no implicit multiplication: write 2*pi, not 2pi.\n\
             Numbers are 64-bit floats; the result is shown with up to 15 significant \
             digits. Division by zero, overflow and undefined results such as sqrt(-1) \
             are errors. Expressions are limited to 10000 characters and 256 levels of \
             nesting.",
        )
        .title("Calculator")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "The expression, e.g. \"(1 + 2) * sqrt(16) / 3\".",
                    "minLength": 1,
                    "maxLength": eval::MAX_LENGTH
                }
            },
            "required": ["expression"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {
                "expression": { "type": "string" },
                "result": {
                    "type": "number",
                    "description": "The result at full 64-bit precision."
                }
            },
            "required": ["expression", "result"],
            "additionalProperties": false
        }))
        .read_only()
        .idempotent()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let Args { expression } = parse_args(args)?;
        let result = eval::evaluate(&expression).map_err(Outcome::text)?;
        Ok(Outcome::text(eval::format_number(result))
            .with_details(json!({ "expression": expression, "result": result })))
    }
}

toolcage_guest::export_tools!(Calc);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_returns_text_and_details() {
        let outcome = Calc::call(json!({ "expression": "1 / 4 + 2 ^ 3" })).expect("evaluates");
        assert_eq!(outcome.output, "8.25");
        assert_eq!(
            outcome.details,
            Some(json!({ "expression": "1 / 4 + 2 ^ 3", "result": 8.25 }))
        );
    }

    #[test]
    fn call_reports_errors_as_text() {
        let outcome = Calc::call(json!({ "expression": "1 / 0" })).expect_err("fails");
        assert!(outcome.output.starts_with("Division by zero"));
        assert_eq!(outcome.details, None);
    }
}
