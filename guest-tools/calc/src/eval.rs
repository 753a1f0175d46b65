//! A small, safe arithmetic evaluator.
//!
//! The expression is tokenized, parsed by recursive descent into a postfix
//! program, and the program runs on a value stack. Nothing is ever handed to
//! an interpreter, and evaluation only starts once the whole expression has
//! parsed, so a syntax error always wins over an arithmetic one.
//!
//! Grammar, loosest binding first:
//!
//! ```text
//! expr    = term  (("+" | "-") term)*
//! term    = unary (("*" | "/" | "%") unary)*
//! unary   = ("-" | "+") unary | power
//! power   = primary ("^" unary)?          right-associative; -2^2 = -4
//! primary = number | constant | function "(" expr ("," expr)* ")" | "(" expr ")"
//! ```
//!
//! Positions in error messages are 1-based character positions. Every result,
//! intermediate ones included, must be a finite `f64`: overflow, division by
//! zero and domain errors (`sqrt(-1)`, `ln(0)`) are errors, never inf or NaN.

use std::f64::consts;

/// The longest expression accepted, in characters.
pub const MAX_LENGTH: usize = 10_000;

/// How deeply parentheses, signs, powers and calls may nest. The parser is
/// recursive, so this keeps it well inside the guest's stack.
pub const MAX_DEPTH: usize = 256;

const CONSTANTS: &[(&str, f64)] = &[("pi", consts::PI), ("e", consts::E)];

const FUNCTIONS: &[(&str, Function)] = &[
    ("sqrt", Function::Sqrt),
    ("abs", Function::Abs),
    ("min", Function::Min),
    ("max", Function::Max),
    ("round", Function::Round),
    ("floor", Function::Floor),
    ("ceil", Function::Ceil),
    ("ln", Function::Ln),
    ("log10", Function::Log10),
    ("exp", Function::Exp),
    ("sin", Function::Sin),
    ("cos", Function::Cos),
    ("tan", Function::Tan),
];

/// Evaluates `expression` and returns its value, or a message saying what is
/// wrong and how to fix it.
pub fn evaluate(expression: &str) -> Result<f64, String> {
    let length = expression.chars().count();
    if length > MAX_LENGTH {
        return Err(format!(
            "The expression is {length} characters long; the limit is {MAX_LENGTH}. \
             Split the calculation into smaller steps."
        ));
    }
    let tokens = tokenize(expression)?;
    if tokens.len() == 1 {
        return Err("The expression is empty: pass one such as `2 * (3 + 4)`.".into());
    }
    let program = Parser::new(tokens).parse()?;
    run(&program)
}

/// Formats a result compactly: integers without a fractional part, other
/// numbers rounded to 15 significant digits, and very large or very small
/// magnitudes in scientific notation (`1.5e300`).
pub fn format_number(value: f64) -> String {
    if value == 0.0 {
        return "0".into(); // also turns -0 into 0
    }
    // Rounding through 15 significant digits hides binary noise: 0.1 + 0.2
    // prints as 0.3. The round trip cannot fail for a finite value.
    let rounded: f64 = format!("{value:.14e}").parse().unwrap_or(value);
    let magnitude = rounded.abs();
    if (1e-7..1e21).contains(&magnitude) {
        rounded.to_string()
    } else {
        format!("{rounded:e}")
    }
}

// ---------------------------------------------------------------------------
// Tokens

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Number(f64),
    Name(String),
    /// One of `+ - * / % ^`.
    Operator(char),
    Open,
    Close,
    Comma,
    End,
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    /// 1-based character position of the token's first character.
    position: usize,
    /// The token as written, for error messages.
    text: String,
}

fn tokenize(expression: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = expression.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let kind = match c {
            _ if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '0'..='9' | '.' => {
                i = scan_number(&chars, i);
                let text: String = chars[start..i].iter().collect();
                match text.parse::<f64>() {
                    Ok(value) if value.is_finite() => Kind::Number(value),
                    Ok(_) => {
                        return Err(format!(
                            "Number too large at position {}: {text} is beyond the largest \
                             representable value (about 1.8e308).",
                            start + 1
                        ));
                    }
                    Err(_) => {
                        return Err(syntax_error(
                            start + 1,
                            &format!("malformed number '{text}'"),
                            "a number such as 42, 0.5 or 1.5e3",
                        ));
                    }
                }
            }
            'a'..='z' | 'A'..='Z' | '_' => {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                Kind::Name(name.to_ascii_lowercase())
            }
            '*' if chars.get(i + 1) == Some(&'*') => {
                return Err(syntax_error(
                    start + 1,
                    "unexpected token '**'",
                    "'^' for powers, as in 2^10",
                ));
            }
            '+' | '-' | '*' | '/' | '%' | '^' => {
                i += 1;
                Kind::Operator(c)
            }
            '(' => {
                i += 1;
                Kind::Open
            }
            ')' => {
                i += 1;
                Kind::Close
            }
            ',' => {
                i += 1;
                Kind::Comma
            }
            _ => {
                return Err(syntax_error(
                    start + 1,
                    &format!("unexpected character '{c}'"),
                    "numbers, + - * / % ^, parentheses, commas, and the supported \
                     functions and constants",
                ));
            }
        };
        tokens.push(Token {
            kind,
            position: start + 1,
            text: chars[start..i].iter().collect(),
        });
    }
    tokens.push(Token {
        kind: Kind::End,
        position: chars.len() + 1,
        text: String::new(),
    });
    Ok(tokens)
}

/// Returns the end of the number starting at `i`: digits, an optional
/// fraction, and an optional exponent (`e`, an optional sign, digits). An `e`
/// not followed by digits is left alone, so `2e` is `2` then the constant `e`.
fn scan_number(chars: &[char], mut i: usize) -> usize {
    let digits = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    digits(&mut i);
    if chars.get(i) == Some(&'.') {
        i += 1;
        digits(&mut i);
    }
    if matches!(chars.get(i), Some('e' | 'E')) {
        let mut j = i + 1;
        if matches!(chars.get(j), Some('+' | '-')) {
            j += 1;
        }
        if chars.get(j).is_some_and(char::is_ascii_digit) {
            i = j;
            digits(&mut i);
        }
    }
    i
}

fn syntax_error(position: usize, problem: &str, expected: &str) -> String {
    format!("Syntax error at position {position}: {problem}; expected {expected}.")
}

// ---------------------------------------------------------------------------
// Parsing into a postfix program

#[derive(Debug, Clone, Copy, PartialEq)]
enum Function {
    Sqrt,
    Abs,
    Min,
    Max,
    Round,
    Floor,
    Ceil,
    Ln,
    Log10,
    Exp,
    Sin,
    Cos,
    Tan,
}

impl Function {
    fn name(self) -> &'static str {
        FUNCTIONS
            .iter()
            .find(|(_, function)| *function == self)
            .map_or("?", |(name, _)| name)
    }

    fn is_variadic(self) -> bool {
        matches!(self, Function::Min | Function::Max)
    }
}

/// One instruction of the postfix program. Positions are kept for messages.
#[derive(Debug, Clone, PartialEq)]
enum Op {
    Push(f64),
    Negate,
    Binary {
        operator: char,
        position: usize,
    },
    Call {
        function: Function,
        arguments: usize,
        position: usize,
    },
}

struct Parser {
    tokens: Vec<Token>,
    next: usize,
    depth: usize,
    program: Vec<Op>,
}

const EXPECTED_OPERAND: &str = "a number, a constant, a function call or '('";

impl Parser {
    fn new(tokens: Vec<Token>) -> Self {
        Parser {
            tokens,
            next: 0,
            depth: 0,
            program: Vec::new(),
        }
    }

    fn parse(mut self) -> Result<Vec<Op>, String> {
        self.expr()?;
        let token = self.peek();
        if token.kind != Kind::End {
            return Err(unexpected(
                token,
                "an operator (+ - * / % ^) or the end of the expression",
            ));
        }
        Ok(self.program)
    }

    fn peek(&self) -> &Token {
        // `tokenize` always ends the list with `End`, and nothing moves past it.
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn advance(&mut self) -> Token {
        let token = self.peek().clone();
        if token.kind != Kind::End {
            self.next += 1;
        }
        token
    }

    /// Consumes the next token when it is one of `operators`.
    fn eat_operator(&mut self, operators: &[char]) -> Option<(char, usize)> {
        match self.peek().kind {
            Kind::Operator(c) if operators.contains(&c) => {
                let position = self.advance().position;
                Some((c, position))
            }
            _ => None,
        }
    }

    /// Runs `parse` one nesting level deeper, refusing to go past `MAX_DEPTH`.
    fn nested(
        &mut self,
        parse: impl FnOnce(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        if self.depth >= MAX_DEPTH {
            return Err(format!(
                "The expression is nested too deeply at position {}: more than {MAX_DEPTH} \
                 levels of parentheses, signs, powers or function calls. Simplify it or \
                 split it into steps.",
                self.peek().position
            ));
        }
        self.depth += 1;
        let result = parse(self);
        self.depth -= 1;
        result
    }

    fn expr(&mut self) -> Result<(), String> {
        self.term()?;
        while let Some((operator, position)) = self.eat_operator(&['+', '-']) {
            self.term()?;
            self.program.push(Op::Binary { operator, position });
        }
        Ok(())
    }

    fn term(&mut self) -> Result<(), String> {
        self.unary()?;
        while let Some((operator, position)) = self.eat_operator(&['*', '/', '%']) {
            self.unary()?;
            self.program.push(Op::Binary { operator, position });
        }
        Ok(())
    }

    fn unary(&mut self) -> Result<(), String> {
        match self.eat_operator(&['-', '+']) {
            Some(('-', _)) => self.nested(|p| {
                p.unary()?;
                p.program.push(Op::Negate);
                Ok(())
            }),
            Some(_) => self.nested(Self::unary),
            None => self.power(),
        }
    }

    fn power(&mut self) -> Result<(), String> {
        self.primary()?;
        if let Some((operator, position)) = self.eat_operator(&['^']) {
            // The exponent is a `unary`, which recurses back into `power`:
            // that makes `^` right-associative and allows `2^-1`.
            self.nested(Self::unary)?;
            self.program.push(Op::Binary { operator, position });
        }
        Ok(())
    }

    fn primary(&mut self) -> Result<(), String> {
        let token = self.advance();
        match token.kind {
            Kind::Number(value) => {
                self.program.push(Op::Push(value));
                Ok(())
            }
            Kind::Open => self.nested(|p| {
                p.expr()?;
                p.expect_close()
            }),
            Kind::Name(ref name) => self.name(name, token.position),
            _ => Err(unexpected(&token, EXPECTED_OPERAND)),
        }
    }

    fn name(&mut self, name: &str, position: usize) -> Result<(), String> {
        let called = self.peek().kind == Kind::Open;
        if let Some(&(_, value)) = CONSTANTS.iter().find(|(n, _)| *n == name) {
            if called {
                return Err(format!(
                    "'{name}' at position {position} is a constant, not a function: \
                     write it without parentheses, or multiply explicitly as {name}*(...)."
                ));
            }
            self.program.push(Op::Push(value));
            return Ok(());
        }
        let Some(&(_, function)) = FUNCTIONS.iter().find(|(n, _)| *n == name) else {
            let problem = if called {
                format!("Unknown function '{name}' at position {position}.")
            } else {
                format!(
                    "Unknown name '{name}' at position {position}: variables are not supported."
                )
            };
            return Err(format!(
                "{problem} Supported functions: {}. Supported constants: {}.",
                FUNCTIONS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
                CONSTANTS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
        };
        if !called {
            return Err(format!(
                "'{name}' at position {position} is a function: call it with parentheses, \
                 as in {name}(2)."
            ));
        }
        self.advance(); // the '('
        self.nested(|p| {
            let mut arguments = 1;
            p.expr()?;
            while p.peek().kind == Kind::Comma {
                p.advance();
                p.expr()?;
                arguments += 1;
            }
            if p.peek().kind != Kind::Close {
                return Err(unexpected(p.peek(), "',' or ')'"));
            }
            p.advance();
            if arguments != 1 && !function.is_variadic() {
                return Err(format!(
                    "{name}() at position {position} takes exactly 1 argument, but was given \
                     {arguments}."
                ));
            }
            p.program.push(Op::Call {
                function,
                arguments,
                position,
            });
            Ok(())
        })
    }

    fn expect_close(&mut self) -> Result<(), String> {
        if self.peek().kind == Kind::Close {
            self.advance();
            Ok(())
        } else {
            Err(unexpected(self.peek(), "')'"))
        }
    }
}

fn unexpected(token: &Token, expected: &str) -> String {
    if token.kind == Kind::End {
        syntax_error(token.position, "unexpected end of expression", expected)
    } else {
        syntax_error(
            token.position,
            &format!("unexpected token '{}'", token.text),
            expected,
        )
    }
}

// ---------------------------------------------------------------------------
// Running the program

fn run(program: &[Op]) -> Result<f64, String> {
    let mut stack: Vec<f64> = Vec::new();
    for op in program {
        let value = match *op {
            Op::Push(value) => value,
            Op::Negate => -pop(&mut stack)?,
            Op::Binary { operator, position } => {
                let right = pop(&mut stack)?;
                let left = pop(&mut stack)?;
                binary(operator, left, right, position)?
            }
            Op::Call {
                function,
                arguments,
                position,
            } => {
                let Some(first) = stack.len().checked_sub(arguments) else {
                    return Err(internal_error());
                };
                let values = stack.split_off(first);
                call(function, &values, position)?
            }
        };
        stack.push(value);
    }
    match stack.as_slice() {
        [value] => Ok(*value),
        _ => Err(internal_error()),
    }
}

fn pop(stack: &mut Vec<f64>) -> Result<f64, String> {
    stack.pop().ok_or_else(internal_error)
}

/// The parser only emits well-formed programs, so this is a bug, not bad input.
fn internal_error() -> String {
    "Internal error: the calculator produced an invalid program. Please report the \
     expression."
        .into()
}

fn binary(operator: char, left: f64, right: f64, position: usize) -> Result<f64, String> {
    let (l, r) = (format_number(left), format_number(right));
    if matches!(operator, '/' | '%') && right == 0.0 {
        return Err(format!(
            "Division by zero at position {position}: {l} {operator} {r} is undefined. \
             Check the divisor."
        ));
    }
    if operator == '^' && left == 0.0 && right < 0.0 {
        return Err(format!(
            "Division by zero at position {position}: 0 ^ {r} is undefined because 0 has no \
             reciprocal."
        ));
    }
    let value = match operator {
        '+' => left + right,
        '-' => left - right,
        '*' => left * right,
        '/' => left / right,
        '%' => left % right,
        '^' => left.powf(right),
        _ => return Err(internal_error()),
    };
    if value.is_nan() {
        return Err(format!(
            "Not a real number at position {position}: {l} {operator} {r} has no real value \
             (a negative base needs an integer exponent)."
        ));
    }
    finite(value, || {
        format!("{l} {operator} {r} at position {position}")
    })
}

fn call(function: Function, values: &[f64], position: usize) -> Result<f64, String> {
    let name = function.name();
    let x = values.first().copied().ok_or_else(internal_error)?;
    let shown = || {
        let arguments: Vec<String> = values.iter().map(|v| format_number(*v)).collect();
        format!("{name}({}) at position {position}", arguments.join(", "))
    };
    let domain = |requirement: &str| {
        Err(format!(
            "{} is undefined: {name} needs {requirement}.",
            shown()
        ))
    };
    let value = match function {
        Function::Sqrt if x < 0.0 => return domain("a non-negative argument"),
        Function::Ln | Function::Log10 if x <= 0.0 => return domain("a positive argument"),
        Function::Sqrt => x.sqrt(),
        Function::Abs => x.abs(),
        Function::Min => values.iter().copied().fold(x, f64::min),
        Function::Max => values.iter().copied().fold(x, f64::max),
        Function::Round => x.round(),
        Function::Floor => x.floor(),
        Function::Ceil => x.ceil(),
        Function::Ln => x.ln(),
        Function::Log10 => x.log10(),
        Function::Exp => x.exp(),
        Function::Sin => x.sin(),
        Function::Cos => x.cos(),
        Function::Tan => x.tan(),
    };
    finite(value, shown)
}

/// Refuses infinite and NaN results, naming the operation that produced one.
fn finite(value: f64, operation: impl FnOnce() -> String) -> Result<f64, String> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(format!(
            "Overflow: {} is too large to represent (beyond about ±1.8e308). Rescale the \
             calculation, for example by working in logarithms.",
            operation()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(expression: &str) -> f64 {
        match evaluate(expression) {
            Ok(value) => value,
            Err(error) => panic!("{expression}: {error}"),
        }
    }

    fn error(expression: &str) -> String {
        match evaluate(expression) {
            Ok(value) => panic!("{expression} evaluated to {value}, expected an error"),
            Err(error) => error,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn precedence() {
        assert_eq!(eval("1 + 2 * 3"), 7.0);
        assert_eq!(eval("(1 + 2) * 3"), 9.0);
        assert_eq!(eval("10 - 4 - 3"), 3.0);
        assert_eq!(eval("100 / 10 / 5"), 2.0);
        assert_eq!(eval("2 * 3 ^ 2"), 18.0);
        assert_eq!(eval("7 % 4 * 2"), 6.0);
        assert_eq!(eval("1 + 7 % 4"), 4.0);
        assert_eq!(eval("2 ^ 3 * 2"), 16.0);
    }

    #[test]
    fn power_is_right_associative() {
        assert_eq!(eval("2 ^ 3 ^ 2"), 512.0);
        assert_eq!(eval("(2 ^ 3) ^ 2"), 64.0);
        assert_eq!(eval("2 ^ -1"), 0.5);
        assert_eq!(eval("2 ^ -1 ^ 2"), 0.5); // 2^(-(1^2))
        assert_eq!(eval("4 ^ 0.5"), 2.0);
    }

    #[test]
    fn unary_minus() {
        assert_eq!(eval("-2 ^ 2"), -4.0);
        assert_eq!(eval("(-2) ^ 2"), 4.0);
        assert_eq!(eval("--3"), 3.0);
        assert_eq!(eval("-+-3"), 3.0);
        assert_eq!(eval("2 * -3"), -6.0);
        assert_eq!(eval("2 - -3"), 5.0);
        assert_eq!(eval("-(1 + 2)"), -3.0);
        assert_eq!(eval("+5"), 5.0);
    }

    #[test]
    fn numbers() {
        assert_eq!(eval("0.5 + .5"), 1.0);
        assert_eq!(eval("5."), 5.0);
        assert_eq!(eval("1.5e3"), 1500.0);
        assert_eq!(eval("2E-2"), 0.02);
        assert_eq!(eval("1e+2"), 100.0);
        assert_eq!(eval("  \t42\n"), 42.0);
    }

    #[test]
    fn remainder_follows_the_dividend() {
        assert_eq!(eval("7 % 3"), 1.0);
        assert_eq!(eval("-7 % 3"), -1.0);
        assert_eq!(eval("7.5 % 2"), 1.5);
    }

    #[test]
    fn functions_and_constants() {
        assert!(close(eval("pi"), consts::PI));
        assert!(close(eval("e"), consts::E));
        // No implicit multiplication: `2e` is the number 2 followed by `e`.
        assert!(error("2e").starts_with("Syntax error at position 2: unexpected token 'e'"));
        assert!(close(eval("2*e"), 2.0 * consts::E));
        assert_eq!(eval("sqrt(16)"), 4.0);
        assert_eq!(eval("abs(-3)"), 3.0);
        assert_eq!(eval("min(3)"), 3.0);
        assert_eq!(eval("min(3, 1, 2)"), 1.0);
        assert_eq!(eval("max(3, 1, 2)"), 3.0);
        assert_eq!(eval("round(2.5)"), 3.0);
        assert_eq!(eval("round(-2.5)"), -3.0);
        assert_eq!(eval("floor(-2.5)"), -3.0);
        assert_eq!(eval("ceil(2.1)"), 3.0);
        assert!(close(eval("ln(e)"), 1.0));
        assert_eq!(eval("log10(1000)"), 3.0);
        assert!(close(eval("exp(1)"), consts::E));
        assert!(close(eval("sin(pi / 2)"), 1.0));
        assert!(close(eval("cos(0)"), 1.0));
        assert!(close(eval("tan(pi / 4)"), 1.0));
        assert_eq!(eval("SQRT(4) + PI - pi"), 2.0);
        assert_eq!(eval("max(1, min(5, 2) ^ 2, -1)"), 4.0);
    }

    #[test]
    fn syntax_errors_name_position_and_token() {
        let e = error("(1 + 2))");
        assert!(
            e.starts_with("Syntax error at position 8: unexpected token ')'"),
            "{e}"
        );
        let e = error("1 + * 2");
        assert!(
            e.starts_with("Syntax error at position 5: unexpected token '*'"),
            "{e}"
        );
        let e = error("1 +");
        assert!(
            e.starts_with("Syntax error at position 4: unexpected end of expression"),
            "{e}"
        );
        let e = error("(1 + 2");
        assert!(
            e.contains("position 7") && e.contains("expected ')'"),
            "{e}"
        );
        let e = error("2 3");
        assert!(
            e.starts_with("Syntax error at position 3: unexpected token '3'"),
            "{e}"
        );
        let e = error("2 # 3");
        assert!(
            e.starts_with("Syntax error at position 3: unexpected character '#'"),
            "{e}"
        );
        let e = error("2 ** 3");
        assert!(e.contains("position 3") && e.contains("'^'"), "{e}");
        let e = error("1.2.3");
        assert!(e.contains("position 4"), "{e}");
        let e = error("max(1 2)");
        assert!(e.contains("position 7") && e.contains("',' or ')'"), "{e}");
        let e = error("max()");
        assert!(
            e.contains("position 5") && e.contains("unexpected token ')'"),
            "{e}"
        );
        let e = error("sqrt(1, 2)");
        assert!(e.contains("exactly 1 argument"), "{e}");
    }

    #[test]
    fn positions_count_characters_not_bytes() {
        let e = error("π + )");
        assert!(
            e.starts_with("Syntax error at position 1: unexpected character 'π'"),
            "{e}"
        );
        let e = error("(\u{e9}");
        assert!(e.contains("position 2"), "{e}");
    }

    #[test]
    fn names() {
        let e = error("log(10)");
        assert!(
            e.contains("Unknown function 'log'") && e.contains("log10"),
            "{e}"
        );
        let e = error("x + 1");
        assert!(
            e.contains("Unknown name 'x' at position 1") && e.contains("pi, e"),
            "{e}"
        );
        let e = error("sqrt + 1");
        assert!(e.contains("is a function"), "{e}");
        let e = error("pi(2)");
        assert!(e.contains("is a constant"), "{e}");
    }

    #[test]
    fn empty_and_too_long() {
        assert!(error("").contains("empty"));
        assert!(error("   ").contains("empty"));
        let long = "1+".repeat(MAX_LENGTH / 2) + "1";
        assert!(error(&long).contains("limit is 10000"));
        let fits = "1+".repeat(MAX_LENGTH / 2 - 1) + "1";
        assert_eq!(eval(&fits), (MAX_LENGTH / 2) as f64);
    }

    #[test]
    fn nesting_is_limited() {
        let deep = "(".repeat(MAX_DEPTH + 1) + "1" + &")".repeat(MAX_DEPTH + 1);
        assert!(error(&deep).contains("nested too deeply"));
        let ok = "(".repeat(MAX_DEPTH - 1) + "1" + &")".repeat(MAX_DEPTH - 1);
        assert_eq!(eval(&ok), 1.0);
        assert!(error(&"-".repeat(5000)).contains("nested too deeply"));
        assert!(error(&("2^".repeat(3000) + "2")).contains("nested too deeply"));
        assert!(
            error(&("abs(".repeat(300) + "1" + &")".repeat(300))).contains("nested too deeply")
        );
    }

    #[test]
    fn division_by_zero() {
        let e = error("1 / 0");
        assert!(e.starts_with("Division by zero at position 3"), "{e}");
        assert!(error("5 % (2 - 2)").starts_with("Division by zero at position 3"));
        assert!(error("0 ^ -1").starts_with("Division by zero"));
        assert!(
            error("1 / 0 +").starts_with("Syntax error"),
            "syntax errors come first"
        );
    }

    #[test]
    fn non_finite_results_are_errors() {
        assert!(error("10 ^ 400").starts_with("Overflow: 10 ^ 400"));
        assert!(error("1e308 * 10").starts_with("Overflow"));
        assert!(error("exp(1000)").contains("exp(1000)"));
        assert!(error("1e400").contains("Number too large at position 1"));
        let e = error("sqrt(-1)");
        assert!(e.contains("sqrt(-1) at position 1 is undefined"), "{e}");
        assert!(error("ln(0)").contains("positive argument"));
        assert!(error("log10(-5)").contains("positive argument"));
        assert!(error("(-8) ^ (1/3)").starts_with("Not a real number"));
        assert_eq!(eval("10 ^ -400"), 0.0); // underflow to zero is fine
    }

    #[test]
    fn formatting() {
        assert_eq!(format_number(7.0), "7");
        assert_eq!(format_number(-3.0), "-3");
        assert_eq!(format_number(-0.0), "0");
        assert_eq!(format_number(0.1 + 0.2), "0.3");
        assert_eq!(format_number(1.0 / 3.0), "0.333333333333333");
        assert_eq!(format_number(2.5), "2.5");
        assert_eq!(format_number(1e20), "100000000000000000000");
        assert_eq!(format_number(2f64.powi(100)), "1.26765060022823e30");
        assert_eq!(format_number(1.5e-10), "1.5e-10");
        assert_eq!(format_number(consts::PI), "3.14159265358979");
    }
}
