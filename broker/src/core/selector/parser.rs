//! A recursive-descent parser from tokens to the selector's syntax tree, with the static
//! checks ActiveMQ makes while parsing (a string literal cannot be compared with `<`, a number
//! is not a condition, NULL only appears in `IS [NOT] NULL`).
//!
//! Grammar, loosest binding first (JMS 1.1, SQL-92 precedence):
//!
//! ```text
//! or         := and (OR and)*
//! and        := not (AND not)*
//! not        := NOT not | predicate
//! predicate  := sum [ (= | <> | < | <= | > | >=) sum
//!                   | [NOT] BETWEEN sum AND sum
//!                   | [NOT] IN ( string {, string} )
//!                   | [NOT] LIKE string [ESCAPE string]
//!                   | IS [NOT] NULL ]
//! sum        := product ((+ | -) product)*
//! product    := unary ((* | /) unary)*
//! unary      := (+ | -) unary | primary
//! primary    := literal | identifier | ( or )
//! ```
//!
//! AND and OR chains are kept flat (one node with every operand), so a long list of
//! alternatives is not a deep tree; every other nesting counts against [`MAX_DEPTH`], which
//! keeps both parsing and evaluation far from the end of the stack.

use std::sync::Arc;

use super::lexer::{Spanned, Token};
use super::SelectorError;

/// The deepest nesting a selector may have (parentheses, NOT, unary signs, operators).
pub(super) const MAX_DEPTH: usize = 64;

/// A value an expression evaluates to (NULL is `None` around it).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Bool(bool),
    Exact(i64),
    Approximate(f64),
    String(Arc<str>),
    /// JMSDeliveryMode: equal to `'PERSISTENT'` / `'NON_PERSISTENT'` as JMS says, and to 2 / 1
    /// as ActiveMQ evaluates it (the JMS `DeliveryMode` constants).
    DeliveryMode {
        persistent: bool,
    },
}

/// A header field a selector can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Header {
    Priority,
    Type,
    CorrelationId,
    MessageId,
    Timestamp,
    DeliveryMode,
    Expiration,
    Destination,
    ReplyTo,
    GroupId,
    GroupSeq,
}

impl Header {
    fn named(name: &str) -> Option<Header> {
        Some(match name {
            "JMSPriority" => Header::Priority,
            "JMSType" => Header::Type,
            "JMSCorrelationID" => Header::CorrelationId,
            "JMSMessageID" => Header::MessageId,
            "JMSTimestamp" => Header::Timestamp,
            "JMSDeliveryMode" => Header::DeliveryMode,
            "JMSExpiration" => Header::Expiration,
            "JMSDestination" => Header::Destination,
            "JMSReplyTo" => Header::ReplyTo,
            "JMSXGroupID" => Header::GroupId,
            "JMSXGroupSeq" => Header::GroupSeq,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Comparison {
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arithmetic {
    Add,
    Subtract,
    Multiply,
    Divide,
}

/// One element of a compiled LIKE pattern.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum LikePart {
    /// `_`: exactly one character.
    One,
    /// `%`: any run of characters, empty included.
    Any,
    Char(char),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expr {
    Literal(Value),
    Header(Header),
    Property(Arc<str>),
    Negate(Box<Expr>),
    Arithmetic(Arithmetic, Box<Expr>, Box<Expr>),
    Compare(Comparison, Box<Expr>, Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    Between { value: Box<Expr>, low: Box<Expr>, high: Box<Expr>, negated: bool },
    In { value: Box<Expr>, list: Vec<Arc<str>>, negated: bool },
    Like { value: Box<Expr>, pattern: Vec<LikePart>, negated: bool },
    IsNull { value: Box<Expr>, negated: bool },
}

/// What the parser knows of an expression's type before any message is seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Boolean,
    Numeric,
    String,
    /// An identifier: its type depends on the message.
    Any,
}

impl Expr {
    fn kind(&self) -> Kind {
        match self {
            Expr::Literal(Value::Bool(_)) => Kind::Boolean,
            Expr::Literal(Value::Exact(_) | Value::Approximate(_)) => Kind::Numeric,
            Expr::Literal(Value::String(_)) => Kind::String,
            Expr::Literal(Value::DeliveryMode { .. }) | Expr::Header(_) | Expr::Property(_) => {
                Kind::Any
            }
            Expr::Negate(_) | Expr::Arithmetic(..) => Kind::Numeric,
            Expr::Compare(..)
            | Expr::And(_)
            | Expr::Or(_)
            | Expr::Not(_)
            | Expr::Between { .. }
            | Expr::In { .. }
            | Expr::Like { .. }
            | Expr::IsNull { .. } => Kind::Boolean,
        }
    }
}

/// An expression with the height of its tree.
struct Node {
    expr: Expr,
    depth: usize,
}

pub(super) struct Parser {
    tokens: Vec<Spanned>,
    at: usize,
}

impl Parser {
    pub(super) fn new(tokens: Vec<Spanned>) -> Parser {
        Parser { tokens, at: 0 }
    }

    /// Parses a whole selector: a condition followed by nothing.
    pub(super) fn selector(mut self) -> Result<Expr, SelectorError> {
        let column = self.column();
        let node = self.or(0)?;
        if self.peek() != &Token::End {
            return Err(self.unexpected("an operator (AND, OR, =, ...) or the end of the selector"));
        }
        self.condition(&node.expr, column)?;
        Ok(node.expr)
    }

    fn peek(&self) -> &Token {
        // The lexer always ends the list with `End`, and `advance` never passes it.
        self.tokens.get(self.at).map_or(&Token::End, |t| &t.token)
    }

    fn peek_second(&self) -> &Token {
        self.tokens.get(self.at + 1).map_or(&Token::End, |t| &t.token)
    }

    fn column(&self) -> usize {
        self.tokens.get(self.at).or(self.tokens.last()).map_or(1, |t| t.column)
    }

    fn advance(&mut self) -> Token {
        let token = self.peek().clone();
        if token != Token::End {
            self.at += 1;
        }
        token
    }

    fn eat(&mut self, token: &Token) -> bool {
        if self.peek() == token {
            self.advance();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &Token, expected: &str) -> Result<(), SelectorError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    fn unexpected(&self, expected: &str) -> SelectorError {
        SelectorError::Syntax {
            column: self.column(),
            expected: expected.to_owned(),
            found: self.peek().describe(),
        }
    }

    fn nested(&self, depth: usize, column: usize) -> Result<usize, SelectorError> {
        if depth > MAX_DEPTH {
            Err(SelectorError::TooDeep { column, limit: MAX_DEPTH })
        } else {
            Ok(depth)
        }
    }

    /// Checks that `expr` can be a condition: a boolean expression or an identifier (a boolean
    /// property), not a number or a string.
    fn condition(&self, expr: &Expr, column: usize) -> Result<(), SelectorError> {
        match expr.kind() {
            Kind::Boolean | Kind::Any => Ok(()),
            Kind::Numeric | Kind::String => Err(SelectorError::Type {
                column,
                reason: "this expression is not a condition (it is a number or a string, not \
                         TRUE or FALSE)"
                    .to_owned(),
            }),
        }
    }

    fn or(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let column = self.column();
        let first = self.and(depth)?;
        if self.peek() != &Token::Or {
            return Ok(first);
        }
        self.condition(&first.expr, column)?;
        let mut height = first.depth;
        let mut operands = vec![first.expr];
        while self.eat(&Token::Or) {
            let column = self.column();
            let next = self.and(depth)?;
            self.condition(&next.expr, column)?;
            height = height.max(next.depth);
            operands.push(next.expr);
        }
        Ok(Node { expr: Expr::Or(operands), depth: self.nested(height + 1, column)? })
    }

    fn and(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let column = self.column();
        let first = self.not(depth)?;
        if self.peek() != &Token::And {
            return Ok(first);
        }
        self.condition(&first.expr, column)?;
        let mut height = first.depth;
        let mut operands = vec![first.expr];
        while self.eat(&Token::And) {
            let column = self.column();
            let next = self.not(depth)?;
            self.condition(&next.expr, column)?;
            height = height.max(next.depth);
            operands.push(next.expr);
        }
        Ok(Node { expr: Expr::And(operands), depth: self.nested(height + 1, column)? })
    }

    fn not(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let column = self.column();
        if self.eat(&Token::Not) {
            self.nested(depth + 1, column)?;
            let operand_column = self.column();
            let operand = self.not(depth + 1)?;
            self.condition(&operand.expr, operand_column)?;
            return Ok(Node {
                expr: Expr::Not(Box::new(operand.expr)),
                depth: self.nested(operand.depth + 1, column)?,
            });
        }
        self.predicate(depth)
    }

    fn predicate(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let column = self.column();
        let left = self.sum(depth)?;
        let comparison = match self.peek() {
            Token::Equal => Some(Comparison::Equal),
            Token::NotEqual => Some(Comparison::NotEqual),
            Token::Less => Some(Comparison::Less),
            Token::LessEqual => Some(Comparison::LessEqual),
            Token::Greater => Some(Comparison::Greater),
            Token::GreaterEqual => Some(Comparison::GreaterEqual),
            _ => None,
        };
        if let Some(comparison) = comparison {
            let operator = self.peek().describe();
            self.advance();
            let right_column = self.column();
            let right = self.sum(depth)?;
            let ordering = !matches!(comparison, Comparison::Equal | Comparison::NotEqual);
            for (side, side_column) in [(&left.expr, column), (&right.expr, right_column)] {
                let refused = match side.kind() {
                    Kind::String | Kind::Boolean => ordering,
                    _ => false,
                };
                if refused {
                    return Err(SelectorError::Type {
                        column: side_column,
                        reason: format!(
                            "only numbers can be compared with {operator}; this is a string or \
                             a condition"
                        ),
                    });
                }
            }
            let depth = self.nested(left.depth.max(right.depth) + 1, column)?;
            return Ok(Node {
                expr: Expr::Compare(comparison, Box::new(left.expr), Box::new(right.expr)),
                depth,
            });
        }
        let negated = match (self.peek(), self.peek_second()) {
            (Token::Not, Token::Between | Token::In | Token::Like) => {
                self.advance();
                true
            }
            _ => false,
        };
        match self.peek() {
            Token::Between => {
                self.advance();
                self.numeric(&left.expr, column, "BETWEEN")?;
                let low_column = self.column();
                let low = self.sum(depth)?;
                self.numeric(&low.expr, low_column, "BETWEEN")?;
                self.expect(&Token::And, "AND between the bounds of BETWEEN")?;
                let high_column = self.column();
                let high = self.sum(depth)?;
                self.numeric(&high.expr, high_column, "BETWEEN")?;
                let depth = self.nested(left.depth.max(low.depth).max(high.depth) + 1, column)?;
                Ok(Node {
                    expr: Expr::Between {
                        value: Box::new(left.expr),
                        low: Box::new(low.expr),
                        high: Box::new(high.expr),
                        negated,
                    },
                    depth,
                })
            }
            Token::In => {
                self.advance();
                self.expect(&Token::Open, "`(` after IN")?;
                let mut list = Vec::new();
                loop {
                    let Token::String(text) = self.peek().clone() else {
                        return Err(self.unexpected("a string literal in the IN list"));
                    };
                    self.advance();
                    list.push(text);
                    if self.eat(&Token::Close) {
                        break;
                    }
                    self.expect(&Token::Comma, "`,` or `)` in the IN list")?;
                }
                Ok(Node {
                    expr: Expr::In { value: Box::new(left.expr), list, negated },
                    depth: self.nested(left.depth + 1, column)?,
                })
            }
            Token::Like => {
                self.advance();
                let pattern_column = self.column();
                let Token::String(pattern) = self.peek().clone() else {
                    return Err(self.unexpected("a string literal pattern after LIKE"));
                };
                self.advance();
                let escape = if self.eat(&Token::Escape) {
                    let escape_column = self.column();
                    let Token::String(escape) = self.peek().clone() else {
                        return Err(self.unexpected("a one-character string after ESCAPE"));
                    };
                    self.advance();
                    let mut chars = escape.chars();
                    match (chars.next(), chars.next()) {
                        (Some(c), None) => Some(c),
                        _ => {
                            let reason = format!(
                                "the ESCAPE string must be exactly one character, not '{escape}'"
                            );
                            return Err(SelectorError::Type { column: escape_column, reason });
                        }
                    }
                } else {
                    None
                };
                let pattern = compile_like(&pattern, escape, pattern_column)?;
                Ok(Node {
                    expr: Expr::Like { value: Box::new(left.expr), pattern, negated },
                    depth: self.nested(left.depth + 1, column)?,
                })
            }
            Token::Is => {
                self.advance();
                let negated = self.eat(&Token::Not);
                self.expect(&Token::Null, "NULL after IS or IS NOT")?;
                Ok(Node {
                    expr: Expr::IsNull { value: Box::new(left.expr), negated },
                    depth: self.nested(left.depth + 1, column)?,
                })
            }
            _ => Ok(left),
        }
    }

    /// Checks that `expr` may be a number: a string literal or a condition may not.
    fn numeric(&self, expr: &Expr, column: usize, operator: &str) -> Result<(), SelectorError> {
        match expr.kind() {
            Kind::Numeric | Kind::Any => Ok(()),
            Kind::String | Kind::Boolean => Err(SelectorError::Type {
                column,
                reason: format!("{operator} needs numbers; this is a string or a condition"),
            }),
        }
    }

    fn sum(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let column = self.column();
        let mut left = self.product(depth)?;
        loop {
            let operator = match self.peek() {
                Token::Plus => Arithmetic::Add,
                Token::Minus => Arithmetic::Subtract,
                _ => return Ok(left),
            };
            let symbol = self.peek().describe();
            self.advance();
            self.numeric(&left.expr, column, &symbol)?;
            let right_column = self.column();
            let right = self.product(depth)?;
            self.numeric(&right.expr, right_column, &symbol)?;
            let depth = self.nested(left.depth.max(right.depth) + 1, column)?;
            left = Node {
                expr: Expr::Arithmetic(operator, Box::new(left.expr), Box::new(right.expr)),
                depth,
            };
        }
    }

    fn product(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let column = self.column();
        let mut left = self.unary(depth)?;
        loop {
            let operator = match self.peek() {
                Token::Star => Arithmetic::Multiply,
                Token::Slash => Arithmetic::Divide,
                _ => return Ok(left),
            };
            let symbol = self.peek().describe();
            self.advance();
            self.numeric(&left.expr, column, &symbol)?;
            let right_column = self.column();
            let right = self.unary(depth)?;
            self.numeric(&right.expr, right_column, &symbol)?;
            let depth = self.nested(left.depth.max(right.depth) + 1, column)?;
            left = Node {
                expr: Expr::Arithmetic(operator, Box::new(left.expr), Box::new(right.expr)),
                depth,
            };
        }
    }

    fn unary(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let column = self.column();
        let negate = match self.peek() {
            Token::Minus => true,
            Token::Plus => false,
            _ => return self.primary(depth),
        };
        let symbol = self.peek().describe();
        self.advance();
        self.nested(depth + 1, column)?;
        let operand_column = self.column();
        let operand = self.unary(depth + 1)?;
        self.numeric(&operand.expr, operand_column, &format!("unary {symbol}"))?;
        if !negate {
            return Ok(operand);
        }
        // Fold a negated literal, so that `-9223372036854775808`-style bounds and plain
        // negative constants cost nothing at evaluation.
        let expr = match operand.expr {
            Expr::Literal(Value::Exact(v)) => Expr::Literal(Value::Exact(v.wrapping_neg())),
            Expr::Literal(Value::Approximate(v)) => Expr::Literal(Value::Approximate(-v)),
            other => Expr::Negate(Box::new(other)),
        };
        Ok(Node { expr, depth: self.nested(operand.depth + 1, column)? })
    }

    fn primary(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let column = self.column();
        let leaf = |expr| Ok(Node { expr, depth: 1 });
        match self.peek().clone() {
            Token::Open => {
                self.advance();
                self.nested(depth + 1, column)?;
                let inner = self.or(depth + 1)?;
                self.expect(&Token::Close, "`)`")?;
                Ok(Node { expr: inner.expr, depth: self.nested(inner.depth + 1, column)? })
            }
            Token::Identifier(name) => {
                self.advance();
                leaf(match Header::named(&name) {
                    Some(header) => Expr::Header(header),
                    None => Expr::Property(name),
                })
            }
            Token::String(text) => {
                self.advance();
                leaf(Expr::Literal(Value::String(text)))
            }
            Token::Exact(value) => {
                self.advance();
                leaf(Expr::Literal(Value::Exact(value)))
            }
            Token::Approximate(value) => {
                self.advance();
                leaf(Expr::Literal(Value::Approximate(value)))
            }
            Token::True => {
                self.advance();
                leaf(Expr::Literal(Value::Bool(true)))
            }
            Token::False => {
                self.advance();
                leaf(Expr::Literal(Value::Bool(false)))
            }
            Token::Null => Err(SelectorError::Type {
                column,
                reason: "NULL can only be tested with IS NULL or IS NOT NULL".to_owned(),
            }),
            _ => Err(self.unexpected("an identifier, a literal or `(`")),
        }
    }
}

/// Compiles a LIKE pattern: `_` is one character, `%` any run, and `escape` makes the
/// character after it literal.
fn compile_like(
    pattern: &str,
    escape: Option<char>,
    column: usize,
) -> Result<Vec<LikePart>, SelectorError> {
    let mut parts = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(escaped) => parts.push(LikePart::Char(escaped)),
                None => {
                    return Err(SelectorError::Type {
                        column,
                        reason: format!(
                            "the LIKE pattern '{pattern}' ends with its escape character"
                        ),
                    })
                }
            }
            continue;
        }
        match c {
            '_' => parts.push(LikePart::One),
            // Consecutive `%` mean the same as one.
            '%' if parts.last() == Some(&LikePart::Any) => {}
            '%' => parts.push(LikePart::Any),
            other => parts.push(LikePart::Char(other)),
        }
    }
    Ok(parts)
}
