//! The JSONPath subset used by CRD `additionalPrinterColumns` (and
//! `kubectl get -o jsonpath` style expressions), with client-go's semantics
//! as the API server applies them to printer columns (missing keys are not
//! errors, they just yield nothing):
//!
//! * `.a.b`, `.a\.b` (escaped dot inside a key), `['a.b']`
//! * `[0]`, `[-1]`, `[1:3]`, `[::2]`, `[*]`, `.*`, `..a` (recursive)
//! * filters `[?(@.type=='Ready')]`, `[?(@.x!="y")]`, `<`, `>`, `<=`, `>=`,
//!   and existence `[?(@.x)]`; literals: quoted strings, integers, floats,
//!   `true`/`false`, or another `@` path.
//!
//! The expression may be wrapped in `{…}` or not.
//!
//! Hand-written because the JSONPath crate in the dependency tree (`jsonpath-rust`, through kube)
//! implements RFC 9535, which is another dialect: paths start at `$`, a dot inside a key cannot be
//! escaped with `\.`, and there is no `{…}` wrapping. Printer columns and kubectl's `-o jsonpath`
//! are written in client-go's dialect, so CRDs' columns would not parse or would select otherwise.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

/// A parse or evaluation error (bad syntax, indexing a non-array, index out
/// of range, comparing values of different kinds, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPathError(pub String);

impl fmt::Display for JsonPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JsonPathError {}

fn err<T>(msg: impl Into<String>) -> Result<T, JsonPathError> {
    Err(JsonPathError(msg.into()))
}

#[derive(Debug, Clone, PartialEq)]
enum Literal {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Lit(Literal),
    Path(Vec<Step>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Wildcard,
    Recursive,
    /// `[start:end:step]`; `end_derived` marks a plain index `[n]`.
    Slice {
        start: Option<i64>,
        end: Option<i64>,
        step: Option<i64>,
        end_derived: bool,
    },
    Filter {
        left: Vec<Step>,
        test: Option<(Op, Operand)>,
    },
}

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

fn is_terminator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}')
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn steps(&mut self) -> Result<Vec<Step>, JsonPathError> {
        let mut steps = Vec::new();
        while let Some(c) = self.peek() {
            if self.rest().starts_with("[?(") {
                self.pos += 3;
                steps.push(self.filter()?);
            } else if self.rest().starts_with("..") {
                self.pos += 1; // the second '.' starts the next field
                steps.push(Step::Recursive);
            } else {
                match c {
                    ' ' | '$' | '@' => {
                        self.bump();
                    }
                    '.' => {
                        self.bump();
                        steps.push(self.field());
                    }
                    '[' => {
                        self.bump();
                        steps.push(self.bracket()?);
                    }
                    _ => return err(format!("unrecognized character in action: {c:?}")),
                }
            }
        }
        Ok(steps)
    }

    fn field(&mut self) -> Step {
        let mut name = String::new();
        while let Some(c) = self.peek() {
            if c == '\\' {
                self.bump();
                if let Some(n) = self.bump() {
                    name.push(n);
                }
            } else if is_terminator(c) {
                break;
            } else {
                name.push(c);
                self.bump();
            }
        }
        if name == "*" { Step::Wildcard } else { Step::Field(name) }
    }

    fn bracket(&mut self) -> Result<Step, JsonPathError> {
        let Some(end) = self.rest().find(']') else {
            return err("unterminated array");
        };
        let text = &self.rest()[..end];
        self.pos += end + 1;
        let text = if text == "*" { ":" } else { text };
        if text.len() >= 2 && text.starts_with('\'') && text.ends_with('\'') {
            return Ok(Step::Field(text[1..text.len() - 1].to_owned()));
        }
        if text.contains(',') {
            return err("union expressions are not supported");
        }
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() > 3 {
            return err(format!("invalid array index {text}"));
        }
        let num = |s: &str| -> Result<Option<i64>, JsonPathError> {
            let s = s.trim();
            if s.is_empty() {
                Ok(None)
            } else {
                s.parse().map(Some).map_err(|_| JsonPathError(format!("array index {s} is not a number")))
            }
        };
        let start = num(parts[0])?;
        if parts.len() == 1 {
            let Some(i) = start else { return err(format!("invalid array index {text}")) };
            return Ok(Step::Slice { start: Some(i), end: Some(i + 1), step: None, end_derived: true });
        }
        Ok(Step::Slice {
            start,
            end: num(parts[1])?,
            step: if parts.len() == 3 { num(parts[2])? } else { None },
            end_derived: false,
        })
    }

    fn filter(&mut self) -> Result<Step, JsonPathError> {
        // Find the closing ")]" outside quotes.
        let bytes = self.rest().as_bytes();
        let mut quote: Option<u8> = None;
        let mut i = 0;
        let close = loop {
            if i >= bytes.len() {
                return err("unterminated filter");
            }
            let b = bytes[i];
            match quote {
                Some(q) if b == q && (i == 0 || bytes[i - 1] != b'\\') => quote = None,
                Some(_) => {}
                None if b == b'\'' || b == b'"' => quote = Some(b),
                None if b == b')' => break i,
                None => {}
            }
            i += 1;
        };
        let text = &self.rest()[..close];
        self.pos += close + 1;
        if self.bump() != Some(']') {
            return err("unclosed array expect ]");
        }
        // Split at the first operator outside quotes.
        let mut split = None;
        let tb = text.as_bytes();
        let mut quote: Option<u8> = None;
        for (j, &b) in tb.iter().enumerate() {
            match quote {
                Some(q) if b == q => quote = None,
                Some(_) => {}
                None if b == b'\'' || b == b'"' => quote = Some(b),
                None if matches!(b, b'!' | b'<' | b'>' | b'=') => {
                    let mut k = j;
                    while k < tb.len() && matches!(tb[k], b'!' | b'<' | b'>' | b'=') {
                        k += 1;
                    }
                    split = Some((j, k));
                    break;
                }
                None => {}
            }
        }
        let Some((a, b)) = split else {
            let left = Parser { s: text.trim(), pos: 0 }.steps()?;
            return Ok(Step::Filter { left, test: None });
        };
        let op = match &text[a..b] {
            "==" => Op::Eq,
            "!=" => Op::Ne,
            "<" => Op::Lt,
            ">" => Op::Gt,
            "<=" => Op::Le,
            ">=" => Op::Ge,
            other => return err(format!("unrecognized filter operator {other}")),
        };
        let left = Parser { s: text[..a].trim(), pos: 0 }.steps()?;
        let right = operand(text[b..].trim())?;
        Ok(Step::Filter { left, test: Some((op, right)) })
    }
}

fn unquote(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn operand(s: &str) -> Result<Operand, JsonPathError> {
    let q = s.chars().next();
    if (q == Some('\'') || q == Some('"')) && s.len() >= 2 && s.ends_with(q.unwrap()) {
        return Ok(Operand::Lit(Literal::Str(unquote(&s[1..s.len() - 1]))));
    }
    if s == "true" || s == "false" {
        return Ok(Operand::Lit(Literal::Bool(s == "true")));
    }
    if s.starts_with(|c: char| c == '-' || c == '+' || c.is_ascii_digit()) {
        if let Ok(i) = s.parse::<i64>() {
            return Ok(Operand::Lit(Literal::Int(i)));
        }
        if let Ok(f) = s.parse::<f64>() {
            return Ok(Operand::Lit(Literal::Float(f)));
        }
        return err(format!("cannot parse number {s}"));
    }
    Ok(Operand::Path(Parser { s, pos: 0 }.steps()?))
}

impl JsonPath {
    /// Parses `expr` (`.status.conditions[?(@.type=='Ready')].status`, with
    /// or without surrounding `{}`).
    pub fn parse(expr: &str) -> Result<JsonPath, JsonPathError> {
        let mut s = expr.trim();
        if let Some(inner) = s.strip_prefix('{') {
            let Some(inner) = inner.strip_suffix('}') else { return err("unclosed action") };
            s = inner.trim();
        }
        let steps = Parser { s, pos: 0 }.steps()?;
        Ok(JsonPath { steps })
    }

    /// Every value the expression selects in `data`, in document order.
    pub fn find(&self, data: &Value) -> Result<Vec<Value>, JsonPathError> {
        Ok(eval(&self.steps, vec![data])?.into_iter().cloned().collect())
    }
}

/// Parses and evaluates in one go.
#[cfg(test)]
pub fn find(expr: &str, data: &Value) -> Result<Vec<Value>, JsonPathError> {
    JsonPath::parse(expr)?.find(data)
}

fn eval<'v>(steps: &[Step], mut cur: Vec<&'v Value>) -> Result<Vec<&'v Value>, JsonPathError> {
    for step in steps {
        cur = eval_step(step, cur)?;
    }
    Ok(cur)
}

fn descendants<'v>(v: &'v Value, out: &mut Vec<&'v Value>) {
    out.push(v);
    match v {
        Value::Object(m) => m.values().for_each(|c| descendants(c, out)),
        Value::Array(a) => a.iter().for_each(|c| descendants(c, out)),
        _ => {}
    }
}

fn eval_step<'v>(step: &Step, input: Vec<&'v Value>) -> Result<Vec<&'v Value>, JsonPathError> {
    let mut out = Vec::new();
    match step {
        Step::Field(name) => {
            for v in input {
                if let Value::Object(m) = v
                    && let Some(x) = m.get(name)
                {
                    out.push(x);
                }
            }
        }
        Step::Wildcard => {
            for v in input {
                match v {
                    Value::Object(m) => out.extend(m.values()),
                    Value::Array(a) => out.extend(a.iter()),
                    _ => {}
                }
            }
        }
        Step::Recursive => {
            for v in input {
                descendants(v, &mut out);
            }
        }
        Step::Slice { start, end, step, end_derived } => {
            for v in input {
                let a = match v {
                    Value::Null => continue,
                    Value::Array(a) => a,
                    other => return err(format!("{} is not array or slice", kind_name(other))),
                };
                let len = a.len() as i64;
                let mut s = start.unwrap_or(0);
                if s < 0 {
                    s += len;
                }
                let mut e = end.unwrap_or(len);
                if e < 0 || (e == 0 && *end_derived) {
                    e += len;
                }
                if s == e {
                    continue;
                }
                if s >= len || s < 0 {
                    return err(format!("array index out of bounds: index {s}, length {len}"));
                }
                if e > len || e < 0 {
                    return err(format!("array index out of bounds: index {}, length {len}", e - 1));
                }
                if s > e {
                    return err(format!("starting index {s} is greater than ending index {e}"));
                }
                let st = step.unwrap_or(1);
                if st <= 0 {
                    return err("step must be > 0");
                }
                out.extend(a[s as usize..e as usize].iter().step_by(st as usize));
            }
        }
        Step::Filter { left, test } => {
            for v in input {
                let a = match v {
                    Value::Array(a) => a,
                    other => {
                        return err(format!("{} is not array or slice and cannot be filtered", kind_name(other)));
                    }
                };
                for item in a {
                    let lefts = eval(left, vec![item]);
                    let Some((op, right)) = test else {
                        if lefts.is_ok_and(|l| !l.is_empty()) {
                            out.push(item);
                        }
                        continue;
                    };
                    let lefts = lefts?;
                    let l = match lefts.len() {
                        0 => continue,
                        1 => lefts[0],
                        _ => return err("can only compare one element at a time"),
                    };
                    let owned;
                    let r: &Value = match right {
                        Operand::Lit(lit) => {
                            owned = literal_value(lit);
                            &owned
                        }
                        Operand::Path(p) => {
                            let rights = eval(p, vec![item])?;
                            match rights.len() {
                                0 => continue,
                                1 => rights[0],
                                _ => return err("can only compare one element at a time"),
                            }
                        }
                    };
                    if compare(*op, l, r)? {
                        out.push(item);
                    }
                }
            }
        }
    }
    Ok(out)
}

fn literal_value(l: &Literal) -> Value {
    match l {
        Literal::Str(s) => Value::String(s.clone()),
        Literal::Int(i) => Value::from(*i),
        Literal::Float(f) => Value::from(*f),
        Literal::Bool(b) => Value::Bool(*b),
    }
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Go text/template comparison rules: both sides must be of the same basic
/// kind (bool, integer, float, string); ordering is not defined for bools.
fn compare(op: Op, l: &Value, r: &Value) -> Result<bool, JsonPathError> {
    let bad = || err(format!("incompatible types for comparison: {} and {}", kind_name(l), kind_name(r)));
    let ord: Option<Ordering> = match (l, r) {
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => {
            return match op {
                Op::Eq => Ok(a == b),
                Op::Ne => Ok(a != b),
                _ => err("invalid type for comparison"),
            };
        }
        (Value::Number(a), Value::Number(b)) => {
            if a.is_f64() != b.is_f64() {
                return bad();
            }
            if a.is_f64() {
                a.as_f64().unwrap().partial_cmp(&b.as_f64().unwrap())
            } else if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
                Some(x.cmp(&y))
            } else {
                // u64 beyond i64 range
                Some(a.as_f64().unwrap_or(0.0).total_cmp(&b.as_f64().unwrap_or(0.0)))
            }
        }
        _ => return bad(),
    };
    let Some(o) = ord else { return Ok(op == Op::Ne) };
    Ok(match op {
        Op::Eq => o == Ordering::Equal,
        Op::Ne => o != Ordering::Equal,
        Op::Lt => o == Ordering::Less,
        Op::Gt => o == Ordering::Greater,
        Op::Le => o != Ordering::Greater,
        Op::Ge => o != Ordering::Less,
    })
}

/// Formats a float as Go's `fmt.Sprint(float64)` does (`%v`: shortest
/// representation, exponent form below 1e-4 and from 1e6 on — strconv's
/// `'g'` format with shortest precision).
pub fn go_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    // Shortest round-trip digits and decimal exponent.
    let sci = format!("{:e}", f.abs());
    let (mant, exp) = sci.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let mut m = digits[..1].to_string();
        if digits.len() > 1 {
            m.push('.');
            m.push_str(&digits[1..]);
        }
        let es = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{es}{:02}", exp.abs());
    }
    let n = digits.len() as i32;
    let s = if exp < 0 {
        format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
    } else if exp + 1 >= n {
        format!("{}{}", digits, "0".repeat((exp + 1 - n) as usize))
    } else {
        format!("{}.{}", &digits[..(exp + 1) as usize], &digits[(exp + 1) as usize..])
    };
    format!("{sign}{s}")
}

/// Go's `json.Marshal` output for a value (compact, HTML-escaped).
fn go_json(v: &Value) -> String {
    // Go writes maps with their keys sorted; this crate's maps keep insertion order.
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let s = serde_json::to_string(&sorted(v)).unwrap_or_default();
    s.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// How client-go's JSONPath printer renders one result: strings raw,
/// objects/arrays as compact JSON, numbers and booleans as Go prints them,
/// and a JSON `null` as `<no value>`.
pub fn print_value(v: &Value) -> String {
    match v {
        Value::Null => "<no value>".into(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(u)) => u.to_string(),
            _ => go_float(n.as_f64().unwrap_or(0.0)),
        },
        Value::Array(_) | Value::Object(_) => go_json(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "metadata": {
                "name": "x",
                "labels": {"hive.openshift.io/cluster-platform": "agent-baremetal"}
            },
            "spec": {"approved": true, "hostname": null, "n": 3, "f": 1.5},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "ImageCreated"},
                    {"type": "Error", "status": "False", "reason": "NoError"},
                    {"type": "Provisioned", "status": "False"}
                ],
                "items": [{"b": 1}, {"b": 2}, {"c": 3}]
            }
        })
    }

    fn f(expr: &str) -> Vec<Value> {
        find(expr, &doc()).unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    #[test]
    fn fields() {
        assert_eq!(f(".metadata.name"), vec![json!("x")]);
        assert_eq!(f("{.metadata.name}"), vec![json!("x")]);
        assert_eq!(f(".spec.approved"), vec![json!(true)]);
        assert_eq!(f(".spec.missing.deeper"), Vec::<Value>::new());
        assert_eq!(f(".spec.hostname"), vec![Value::Null]);
        assert_eq!(f(".spec.hostname.x"), Vec::<Value>::new());
        assert_eq!(f(".metadata.labels.hive\\.openshift\\.io/cluster-platform"), vec![json!("agent-baremetal")]);
        assert_eq!(f(".metadata.labels['hive.openshift.io/cluster-platform']"), vec![json!("agent-baremetal")]);
    }

    #[test]
    fn arrays() {
        assert_eq!(f(".status.conditions[0].type"), vec![json!("Ready")]);
        assert_eq!(f(".status.conditions[-1].type"), vec![json!("Provisioned")]);
        assert_eq!(f(".status.conditions[*].type"), vec![json!("Ready"), json!("Error"), json!("Provisioned")]);
        assert_eq!(f(".status.conditions[0:2].type"), vec![json!("Ready"), json!("Error")]);
        assert_eq!(f(".status.conditions[::2].type"), vec![json!("Ready"), json!("Provisioned")]);
        assert_eq!(f(".status.items[*].b"), vec![json!(1), json!(2)]);
        assert_eq!(f(".metadata.*").len(), 2);
        assert_eq!(f("..b"), vec![json!(1), json!(2)]);
        assert!(find(".status.conditions[7]", &doc()).is_err());
        assert!(find(".metadata[0]", &doc()).is_err());
        assert_eq!(f(".spec.hostname[0]"), Vec::<Value>::new());
    }

    #[test]
    fn filters() {
        assert_eq!(f(".status.conditions[?(@.type=='Ready')].status"), vec![json!("True")]);
        assert_eq!(f(".status.conditions[?(@.type==\"Error\")].reason"), vec![json!("NoError")]);
        assert_eq!(f(".status.conditions[?(@.type == 'Ready')].reason"), vec![json!("ImageCreated")]);
        assert_eq!(f(".status.conditions[?(@.type!='Ready')].type"), vec![json!("Error"), json!("Provisioned")]);
        assert_eq!(f(".status.conditions[?(@.type=='Provisioned')].reason"), Vec::<Value>::new());
        assert_eq!(f(".status.conditions[?(@.type=='Nope')].status"), Vec::<Value>::new());
        assert_eq!(f(".status.conditions[?(@.reason)].type"), vec![json!("Ready"), json!("Error")]);
        assert_eq!(f(".status.items[?(@.b>1)].b"), vec![json!(2)]);
        assert_eq!(f(".status.items[?(@.b==1)].b"), vec![json!(1)]);
        // Comparing a string with a number is an error in client-go.
        assert!(find(".status.conditions[?(@.type==1)]", &doc()).is_err());
        assert!(find(".spec[?(@.a=='b')]", &doc()).is_err());
        // Filtering a missing array yields nothing (null input).
        assert!(find(".status.nothing[?(@.a=='b')]", &doc()).unwrap().is_empty());
    }

    #[test]
    fn parse_errors() {
        assert!(JsonPath::parse(".a[").is_err());
        assert!(JsonPath::parse(".a[?(@.b=='c'").is_err());
        assert!(JsonPath::parse(".a[x]").is_err());
        assert!(JsonPath::parse("{.a").is_err());
    }

    #[test]
    fn printing() {
        assert_eq!(print_value(&json!("s")), "s");
        assert_eq!(print_value(&json!(true)), "true");
        assert_eq!(print_value(&json!(3)), "3");
        assert_eq!(print_value(&Value::Null), "<no value>");
        assert_eq!(print_value(&json!({"b": 1, "a": "<"})), r#"{"a":"\u003c","b":1}"#);
        assert_eq!(print_value(&json!([1, null])), "[1,null]");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(100000.0), "100000");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(123456789.0), "1.23456789e+08");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456.5), "123456.5");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(-2.25), "-2.25");
    }
}
