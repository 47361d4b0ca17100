//! JMS message selectors: the SQL-92 conditional subset of JMS 1.1 that a consumer gives to
//! receive only the messages it wants.
//!
//! A selector is parsed once, when its consumer subscribes ([`Selector::parse`]), into a
//! syntax tree that [`Selector::matches`] evaluates on each [`Message`]. Supported: `=`, `<>`,
//! `<`, `<=`, `>`, `>=`; `+ - * /` and unary signs; AND, OR, NOT with three-valued logic
//! (a missing property is NULL, a comparison with NULL is unknown, and only a selector that
//! is true matches); `[NOT] BETWEEN`, `[NOT] IN ('a', ...)`, `[NOT] LIKE 'p%t_rn' [ESCAPE
//! '\']`, `IS [NOT] NULL`; string, exact (decimal, hex, octal, `L`) and approximate numeric
//! literals, TRUE and FALSE. Identifiers name properties, or the headers JMSPriority,
//! JMSType, JMSCorrelationID, JMSMessageID, JMSTimestamp, JMSDeliveryMode, JMSExpiration,
//! JMSDestination, JMSReplyTo, JMSXGroupID and JMSXGroupSeq. Keywords are case-insensitive,
//! identifiers case-sensitive.
//!
//! Layout: `lexer` turns text into tokens, `parser` tokens into the tree (with ActiveMQ's
//! static type checks and a nesting limit, so a hostile selector cannot exhaust the stack),
//! `eval` evaluates the tree.
//!
//! ```
//! use broker::core::selector::Selector;
//!
//! let selector = Selector::parse("color IN ('red', 'blue') AND weight BETWEEN 1 AND 2.5")?;
//! assert_eq!(selector.text(), "color IN ('red', 'blue') AND weight BETWEEN 1 AND 2.5");
//! assert!(Selector::parse("color = ").is_err());
//! # Ok::<(), broker::core::selector::SelectorError>(())
//! ```

mod eval;
mod lexer;
mod parser;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;

use store::Message;

use parser::{Expr, Parser, Value};

/// ActiveMQ's prefix that turns on string conversion (see [`Selector::converting_strings`]).
pub const CONVERT_STRINGS_PREFIX: &str = "convert_string_expressions:";

/// Why a selector was refused, and where: `column` counts characters from 1 in the selector
/// as the client wrote it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectorError {
    #[error("invalid selector at column {column}: expected {expected}, found {found}")]
    Syntax { column: usize, expected: String, found: String },
    #[error("invalid selector at column {column}: {reason}")]
    Lexical { column: usize, reason: String },
    #[error("invalid selector at column {column}: {reason}")]
    Type { column: usize, reason: String },
    #[error(
        "invalid selector at column {column}: nested more than {limit} levels deep; simplify it"
    )]
    TooDeep { column: usize, limit: usize },
}

/// A parsed selector. Cheap to evaluate; share it as an `Arc<Selector>`.
#[derive(Clone)]
pub struct Selector {
    /// The text as given (with its prefix, if any): durable subscriptions store and compare it.
    text: Arc<str>,
    expr: Expr,
    convert_strings: bool,
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Selector").field(&self.text).finish()
    }
}

impl Selector {
    /// Parses a selector. An empty (or blank) selector matches every message. A selector that
    /// starts with `convert_string_expressions:` converts strings (as in ActiveMQ).
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let (body, convert_strings) = match text.strip_prefix(CONVERT_STRINGS_PREFIX) {
            Some(body) => (body, true),
            None => (text, false),
        };
        let expr = if body.trim().is_empty() {
            Expr::Literal(Value::Bool(true))
        } else {
            Parser::new(lexer::tokenize(body)?).selector()?
        };
        Ok(Selector { text: text.into(), expr, convert_strings })
    }

    /// Parses an optional selector: `None` when there is none or it is blank (which JMS
    /// treats as no selector).
    pub fn parse_optional(text: Option<&str>) -> Result<Option<Selector>, SelectorError> {
        match text {
            Some(text) if !text.trim().is_empty() => Selector::parse(text).map(Some),
            _ => Ok(None),
        }
    }

    /// This selector, converting strings the way ActiveMQ's STOMP adapter asks for: STOMP
    /// properties are all strings, so a string compared with a number (or a boolean), or
    /// used in arithmetic, is parsed as one first (`count > 5` matches a `count:7` header).
    /// Plain JMS semantics make such a comparison false. The text gains ActiveMQ's prefix, so
    /// that a stored durable subscription keeps the mode.
    pub fn converting_strings(self) -> Selector {
        if self.convert_strings {
            return self;
        }
        Selector {
            text: format!("{CONVERT_STRINGS_PREFIX}{}", self.text).into(),
            convert_strings: true,
            ..self
        }
    }

    /// The selector as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True when the selector is known to be true for `message`; false when it is false or
    /// unknown.
    pub fn matches(&self, message: &Message) -> bool {
        let context = eval::Context { message, convert_strings: self.convert_strings };
        context.truth(&self.expr) == Some(true)
    }
}
