//! Splits selector text into tokens, each with the column it starts at.
//!
//! Follows ActiveMQ's selector grammar (itself JMS 1.1's): keywords are case-insensitive,
//! identifiers are case-sensitive and may hold `.` after their first character, string
//! literals are in single quotes with `''` for a quote, exact numerics are decimal, hex
//! (`0x1F`) or octal (`017`) with an optional `L` suffix, approximate numerics have a point
//! or an exponent (`1.5`, `.5`, `7.`, `1e3`, `-57.9E2`) with an optional `F`/`D` suffix.

use std::sync::Arc;

use super::SelectorError;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
    Identifier(Arc<str>),
    String(Arc<str>),
    Exact(i64),
    Approximate(f64),
    And,
    Or,
    Not,
    Between,
    In,
    Like,
    Escape,
    Is,
    Null,
    True,
    False,
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    Plus,
    Minus,
    Star,
    Slash,
    Open,
    Close,
    Comma,
    End,
}

impl Token {
    /// How an error message names what it found.
    pub(super) fn describe(&self) -> String {
        match self {
            Token::Identifier(name) => format!("identifier `{name}`"),
            Token::String(text) => format!("string '{}'", text.replace('\'', "''")),
            Token::Exact(value) => format!("number {value}"),
            Token::Approximate(value) => format!("number {value}"),
            Token::End => "the end of the selector".to_owned(),
            other => format!("`{}`", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            Token::And => "AND",
            Token::Or => "OR",
            Token::Not => "NOT",
            Token::Between => "BETWEEN",
            Token::In => "IN",
            Token::Like => "LIKE",
            Token::Escape => "ESCAPE",
            Token::Is => "IS",
            Token::Null => "NULL",
            Token::True => "TRUE",
            Token::False => "FALSE",
            Token::Equal => "=",
            Token::NotEqual => "<>",
            Token::Less => "<",
            Token::LessEqual => "<=",
            Token::Greater => ">",
            Token::GreaterEqual => ">=",
            Token::Plus => "+",
            Token::Minus => "-",
            Token::Star => "*",
            Token::Slash => "/",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
            Token::Identifier(_)
            | Token::String(_)
            | Token::Exact(_)
            | Token::Approximate(_)
            | Token::End => "",
        }
    }
}

/// A token and the 1-based column (in characters) where it starts.
#[derive(Debug, Clone)]
pub(super) struct Spanned {
    pub token: Token,
    pub column: usize,
}

/// Tokenizes the whole selector; the last token is always [`Token::End`].
pub(super) fn tokenize(text: &str) -> Result<Vec<Spanned>, SelectorError> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        let column = at + 1;
        if c.is_whitespace() {
            at += 1;
            continue;
        }
        let (token, next) = if c == '\'' {
            string(&chars, at)?
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(at + 1).is_some_and(char::is_ascii_digit))
        {
            number(&chars, at)?
        } else if is_identifier_start(c) {
            let mut end = at + 1;
            while end < chars.len() && is_identifier_part(chars[end]) {
                end += 1;
            }
            let word: String = chars[at..end].iter().collect();
            (keyword(&word).unwrap_or_else(|| Token::Identifier(word.into())), end)
        } else {
            let two = chars.get(at + 1).copied();
            match (c, two) {
                ('<', Some('>')) => (Token::NotEqual, at + 2),
                ('<', Some('=')) => (Token::LessEqual, at + 2),
                ('>', Some('=')) => (Token::GreaterEqual, at + 2),
                ('<', _) => (Token::Less, at + 1),
                ('>', _) => (Token::Greater, at + 1),
                ('=', _) => (Token::Equal, at + 1),
                ('+', _) => (Token::Plus, at + 1),
                ('-', _) => (Token::Minus, at + 1),
                ('*', _) => (Token::Star, at + 1),
                ('/', _) => (Token::Slash, at + 1),
                ('(', _) => (Token::Open, at + 1),
                (')', _) => (Token::Close, at + 1),
                (',', _) => (Token::Comma, at + 1),
                _ => {
                    return Err(SelectorError::Lexical {
                        column,
                        reason: format!("unexpected character `{c}`"),
                    })
                }
            }
        };
        tokens.push(Spanned { token, column });
        at = next;
    }
    tokens.push(Spanned { token: Token::End, column: chars.len() + 1 });
    Ok(tokens)
}

fn is_identifier_start(c: char) -> bool {
    c.is_alphabetic() || c == '_' || c == '$'
}

fn is_identifier_part(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$' || c == '.'
}

fn keyword(word: &str) -> Option<Token> {
    const KEYWORDS: &[(&str, Token)] = &[
        ("AND", Token::And),
        ("OR", Token::Or),
        ("NOT", Token::Not),
        ("BETWEEN", Token::Between),
        ("IN", Token::In),
        ("LIKE", Token::Like),
        ("ESCAPE", Token::Escape),
        ("IS", Token::Is),
        ("NULL", Token::Null),
        ("TRUE", Token::True),
        ("FALSE", Token::False),
    ];
    KEYWORDS.iter().find(|(name, _)| word.eq_ignore_ascii_case(name)).map(|(_, t)| t.clone())
}

/// A string literal starting at the quote at `at`; `''` stands for one quote.
fn string(chars: &[char], at: usize) -> Result<(Token, usize), SelectorError> {
    let mut text = String::new();
    let mut i = at + 1;
    loop {
        match chars.get(i) {
            None => {
                return Err(SelectorError::Lexical {
                    column: at + 1,
                    reason: "unterminated string literal (a quote inside a string is written \
                             '')"
                    .to_owned(),
                })
            }
            Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                text.push('\'');
                i += 2;
            }
            Some('\'') => return Ok((Token::String(text.into()), i + 1)),
            Some(c) => {
                text.push(*c);
                i += 1;
            }
        }
    }
}

/// A numeric literal starting at `at`.
fn number(chars: &[char], at: usize) -> Result<(Token, usize), SelectorError> {
    let column = at + 1;
    let out_of_range = |text: &str| SelectorError::Lexical {
        column,
        reason: format!("number `{text}` is out of range"),
    };
    let mut end = at;
    let digits = |end: &mut usize| {
        while *end < chars.len() && chars[*end].is_ascii_digit() {
            *end += 1;
        }
    };
    // Hexadecimal.
    if chars[at] == '0' && matches!(chars.get(at + 1), Some('x' | 'X')) {
        end = at + 2;
        while end < chars.len() && chars[end].is_ascii_hexdigit() {
            end += 1;
        }
        let hex: String = chars[at + 2..end].iter().collect();
        if hex.is_empty() {
            return Err(SelectorError::Lexical {
                column,
                reason: "hexadecimal literal without digits".to_owned(),
            });
        }
        let value = i64::from_str_radix(&hex, 16).map_err(|_| out_of_range(&hex))?;
        if matches!(chars.get(end), Some('l' | 'L')) {
            end += 1;
        }
        return Ok((Token::Exact(value), end));
    }
    digits(&mut end);
    let mut approximate = false;
    if chars.get(end) == Some(&'.') {
        approximate = true;
        end += 1;
        digits(&mut end);
    }
    if matches!(chars.get(end), Some('e' | 'E')) {
        let mut exponent = end + 1;
        if matches!(chars.get(exponent), Some('+' | '-')) {
            exponent += 1;
        }
        if chars.get(exponent).is_some_and(char::is_ascii_digit) {
            approximate = true;
            end = exponent;
            digits(&mut end);
        }
    }
    let text: String = chars[at..end].iter().collect();
    if approximate {
        let value: f64 = text.parse().map_err(|_| out_of_range(&text))?;
        if matches!(chars.get(end), Some('f' | 'F' | 'd' | 'D')) {
            end += 1;
        }
        return Ok((Token::Approximate(value), end));
    }
    let value = if text.len() > 1 && text.starts_with('0') {
        if let Some(bad) = text.chars().find(|c| !('0'..='7').contains(c)) {
            return Err(SelectorError::Lexical {
                column,
                reason: format!("digit `{bad}` in octal literal `{text}`"),
            });
        }
        i64::from_str_radix(&text[1..], 8).map_err(|_| out_of_range(&text))?
    } else {
        text.parse::<i64>().map_err(|_| out_of_range(&text))?
    };
    match chars.get(end) {
        Some('l' | 'L') => end += 1,
        Some('f' | 'F' | 'd' | 'D') => {
            return Ok((Token::Approximate(value as f64), end + 1));
        }
        _ => {}
    }
    Ok((Token::Exact(value), end))
}
