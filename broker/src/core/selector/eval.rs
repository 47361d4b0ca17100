//! Evaluates a selector's syntax tree on a message with SQL's three-valued logic: a value is
//! `None` when it is NULL (a missing property or header), a condition is `None` when it is
//! unknown, and a message matches only when the whole selector is known to be true.
//!
//! Types follow JMS 1.1: exact numerics (byte, short, int, long) and approximate numerics
//! (float, double) compare with each other (exact with exact as integers, otherwise as
//! doubles); strings and booleans support only `=` and `<>`; comparing values of unlike types
//! is false, not an error. Division always gives a double, as in ActiveMQ.
//!
//! With string conversion (ActiveMQ's `convert_string_expressions:` mode, which its STOMP
//! adapter turns on for every STOMP subscription because STOMP properties are text), a string
//! compared with a number or a boolean, or used in arithmetic, is first parsed as one; a
//! string that does not parse makes the comparison unknown.

use std::cmp::Ordering;
use std::sync::Arc;

use store::{Message, PropertyValue};

use super::parser::{Arithmetic, Comparison, Expr, Header, LikePart, Value};

pub(super) struct Context<'a> {
    pub message: &'a Message,
    pub convert_strings: bool,
}

impl Context<'_> {
    /// Whether a condition is true, false or unknown (`None`).
    pub(super) fn truth(&self, expr: &Expr) -> Option<bool> {
        match expr {
            Expr::And(operands) => {
                let mut unknown = false;
                for operand in operands {
                    match self.truth(operand) {
                        Some(false) => return Some(false),
                        None => unknown = true,
                        Some(true) => {}
                    }
                }
                (!unknown).then_some(true)
            }
            Expr::Or(operands) => {
                let mut unknown = false;
                for operand in operands {
                    match self.truth(operand) {
                        Some(true) => return Some(true),
                        None => unknown = true,
                        Some(false) => {}
                    }
                }
                (!unknown).then_some(false)
            }
            Expr::Not(operand) => self.truth(operand).map(|b| !b),
            Expr::Compare(comparison, left, right) => {
                let left = self.value(left)?;
                let right = self.value(right)?;
                self.compare(*comparison, &left, &right)
            }
            Expr::Between { value, low, high, negated } => {
                let value = self.value(value)?;
                let low = self.value(low);
                let high = self.value(high);
                let at_least_low =
                    low.and_then(|low| self.compare(Comparison::GreaterEqual, &value, &low));
                let at_most_high =
                    high.and_then(|high| self.compare(Comparison::LessEqual, &value, &high));
                // NOT BETWEEN is the negation of BETWEEN, which three-valued NOT preserves.
                and(at_least_low, at_most_high).map(|inside| inside != *negated)
            }
            Expr::In { value, list, negated } => {
                let value = self.value(value)?;
                let found = text_of(&value).is_some_and(|text| list.iter().any(|s| **s == *text));
                Some(found != *negated)
            }
            Expr::Like { value, pattern, negated } => {
                let value = self.value(value)?;
                let text = text_of(&value)?;
                Some(like(pattern, &text) != *negated)
            }
            Expr::IsNull { value, negated } => Some(self.value(value).is_none() != *negated),
            Expr::Literal(_)
            | Expr::Header(_)
            | Expr::Property(_)
            | Expr::Negate(_)
            | Expr::Arithmetic(..) => match self.value(expr)? {
                Value::Bool(b) => Some(b),
                Value::String(text) if self.convert_strings => Some(parse_bool(&text)),
                _ => None,
            },
        }
    }

    /// The value of an expression, `None` for NULL.
    fn value(&self, expr: &Expr) -> Option<Value> {
        match expr {
            Expr::Literal(value) => Some(value.clone()),
            Expr::Header(header) => self.header(*header),
            Expr::Property(name) => property(self.message.properties.get(name)?),
            Expr::Negate(operand) => match self.number(self.value(operand)?)? {
                Value::Exact(v) => Some(Value::Exact(v.wrapping_neg())),
                Value::Approximate(v) => Some(Value::Approximate(-v)),
                _ => None,
            },
            Expr::Arithmetic(operator, left, right) => {
                let left = self.number(self.value(left)?)?;
                let right = self.number(self.value(right)?)?;
                arithmetic(*operator, &left, &right)
            }
            _ => self.truth(expr).map(Value::Bool),
        }
    }

    fn header(&self, header: Header) -> Option<Value> {
        let message = self.message;
        let headers = &message.headers;
        let text = |value: &Option<Arc<str>>| value.clone().map(Value::String);
        match header {
            Header::Priority => Some(Value::Exact(i64::from(headers.priority))),
            Header::Type => text(&headers.message_type),
            Header::CorrelationId => text(&headers.correlation_id),
            Header::MessageId => Some(Value::String(message.message_id.clone())),
            Header::Timestamp => Some(Value::Exact(headers.timestamp)),
            Header::DeliveryMode => {
                Some(Value::DeliveryMode { persistent: message.is_persistent() })
            }
            Header::Expiration => Some(Value::Exact(headers.expiration)),
            Header::Destination => Some(Value::String(message.destination.to_string().into())),
            Header::ReplyTo => {
                headers.reply_to.as_ref().map(|d| Value::String(d.to_string().into()))
            }
            Header::GroupId => text(&headers.group_id),
            Header::GroupSeq => Some(Value::Exact(i64::from(headers.group_seq))),
        }
    }

    /// `value` as a number for arithmetic: numbers as they are, strings parsed when strings
    /// convert; anything else is unknown.
    fn number(&self, value: Value) -> Option<Value> {
        match value {
            Value::Exact(_) | Value::Approximate(_) => Some(value),
            Value::String(text) if self.convert_strings => parse_number(&text),
            _ => None,
        }
    }

    fn compare(&self, comparison: Comparison, left: &Value, right: &Value) -> Option<bool> {
        use Value::{Approximate, Bool, DeliveryMode, Exact, String};
        let ordering = match (left, right) {
            (Exact(l), Exact(r)) => l.cmp(r),
            (Exact(_) | Approximate(_), Exact(_) | Approximate(_)) => {
                // NaN compares with nothing.
                match as_double(left)?.partial_cmp(&as_double(right)?) {
                    Some(ordering) => ordering,
                    None => return Some(false),
                }
            }
            (DeliveryMode { .. }, Exact(_) | Approximate(_)) => {
                return self.compare(comparison, &delivery_mode_number(left), right)
            }
            (Exact(_) | Approximate(_), DeliveryMode { .. }) => {
                return self.compare(comparison, left, &delivery_mode_number(right))
            }
            (DeliveryMode { .. } | String(_), DeliveryMode { .. } | String(_)) => {
                let (Some(l), Some(r)) = (text_of(left), text_of(right)) else {
                    return Some(false);
                };
                return equality(comparison, *l == *r);
            }
            (Bool(l), Bool(r)) => return equality(comparison, l == r),
            (String(text), Exact(_) | Approximate(_)) if self.convert_strings => {
                return self.compare(comparison, &parse_number(text)?, right);
            }
            (Exact(_) | Approximate(_), String(text)) if self.convert_strings => {
                return self.compare(comparison, left, &parse_number(text)?);
            }
            (String(text), Bool(r)) if self.convert_strings => {
                return equality(comparison, parse_bool(text) == *r)
            }
            (Bool(l), String(text)) if self.convert_strings => {
                return equality(comparison, *l == parse_bool(text))
            }
            // Unlike types: the comparison is false (JMS 1.1, 3.8.1.2).
            _ => return Some(false),
        };
        Some(match comparison {
            Comparison::Equal => ordering == Ordering::Equal,
            Comparison::NotEqual => ordering != Ordering::Equal,
            Comparison::Less => ordering == Ordering::Less,
            Comparison::LessEqual => ordering != Ordering::Greater,
            Comparison::Greater => ordering == Ordering::Greater,
            Comparison::GreaterEqual => ordering != Ordering::Less,
        })
    }
}

/// Three-valued AND of two conditions.
fn and(left: Option<bool>, right: Option<bool>) -> Option<bool> {
    match (left, right) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

/// `=` and `<>` on values that have no order; other comparisons are false.
fn equality(comparison: Comparison, equal: bool) -> Option<bool> {
    Some(match comparison {
        Comparison::Equal => equal,
        Comparison::NotEqual => !equal,
        _ => false,
    })
}

fn property(value: &PropertyValue) -> Option<Value> {
    Some(match value {
        PropertyValue::Bool(v) => Value::Bool(*v),
        PropertyValue::Byte(v) => Value::Exact(i64::from(*v)),
        PropertyValue::Short(v) => Value::Exact(i64::from(*v)),
        PropertyValue::Int(v) => Value::Exact(i64::from(*v)),
        PropertyValue::Long(v) => Value::Exact(*v),
        PropertyValue::Float(v) => Value::Approximate(f64::from(*v)),
        PropertyValue::Double(v) => Value::Approximate(*v),
        PropertyValue::String(v) => Value::String(v.clone()),
        PropertyValue::Char(v) => Value::String(v.to_string().into()),
        // JMS has no byte-array properties; a selector cannot compare one.
        PropertyValue::Bytes(_) | PropertyValue::Null => return None,
    })
}

/// The text of a string value; JMSDeliveryMode reads as `PERSISTENT` or `NON_PERSISTENT`.
fn text_of(value: &Value) -> Option<Arc<str>> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::DeliveryMode { persistent: true } => Some("PERSISTENT".into()),
        Value::DeliveryMode { persistent: false } => Some("NON_PERSISTENT".into()),
        _ => None,
    }
}

/// JMSDeliveryMode as ActiveMQ evaluates it: `DeliveryMode.PERSISTENT` (2) or
/// `NON_PERSISTENT` (1).
fn delivery_mode_number(value: &Value) -> Value {
    Value::Exact(if matches!(value, Value::DeliveryMode { persistent: true }) { 2 } else { 1 })
}

fn as_double(value: &Value) -> Option<f64> {
    match value {
        Value::Exact(v) => Some(*v as f64),
        Value::Approximate(v) => Some(*v),
        _ => None,
    }
}

/// A string as a number when strings convert: exact if it parses as a long, else
/// approximate. (ActiveMQ parses it as the other operand's type, so there `'7.5' < 10` fails
/// to convert and is unknown; here it is true.)
fn parse_number(text: &str) -> Option<Value> {
    let text = text.trim();
    text.parse().map(Value::Exact).ok().or_else(|| text.parse().ok().map(Value::Approximate))
}

/// Java's `Boolean.valueOf(String)`.
fn parse_bool(text: &str) -> bool {
    text.eq_ignore_ascii_case("true")
}

fn arithmetic(operator: Arithmetic, left: &Value, right: &Value) -> Option<Value> {
    if let (Value::Exact(l), Value::Exact(r), false) = (left, right, operator == Arithmetic::Divide)
    {
        return Some(Value::Exact(match operator {
            Arithmetic::Add => l.wrapping_add(*r),
            Arithmetic::Subtract => l.wrapping_sub(*r),
            Arithmetic::Multiply => l.wrapping_mul(*r),
            Arithmetic::Divide => return None,
        }));
    }
    let (l, r) = (as_double(left)?, as_double(right)?);
    Some(Value::Approximate(match operator {
        Arithmetic::Add => l + r,
        Arithmetic::Subtract => l - r,
        Arithmetic::Multiply => l * r,
        Arithmetic::Divide => l / r,
    }))
}

/// SQL LIKE: `One` matches one character, `Any` any run. Greedy with backtracking to the
/// last `Any` only, so the cost is at most the pattern length times the text length.
pub(super) fn like(pattern: &[LikePart], text: &str) -> bool {
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(LikePart::Any) => {
                backtrack = Some((p, t));
                p += 1;
                continue;
            }
            Some(LikePart::One) => {
                p += 1;
                t += 1;
                continue;
            }
            Some(LikePart::Char(c)) if *c == text[t] => {
                p += 1;
                t += 1;
                continue;
            }
            _ => {}
        }
        match backtrack {
            Some((any, from)) => {
                p = any + 1;
                t = from + 1;
                backtrack = Some((any, from + 1));
            }
            None => return false,
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|part| *part == LikePart::Any)
}
