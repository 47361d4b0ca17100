//! Topic names and topic filters (spec 4.7 and, for shared subscriptions, 4.8.2): checks
//! of their syntax, the matching of a filter against a name, and the `$share/{group}/`
//! prefix. Pure functions over `&str`, so the broker's routing and the codec share them.
//!
//! A topic name is `/`-separated levels (empty levels are levels: `/finance` has two);
//! a filter may use `+` for exactly one level and `#`, last, for any number of levels
//! including none (`sport/#` matches `sport`). Names that start with `$` (the broker's
//! own, `$SYS/...`) are not matched by a filter whose first level is a wildcard.

/// What is wrong with a topic name or filter.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TopicError {
    /// The empty string: names and filters are at least one character (spec 4.7.3).
    #[error("it is empty; topic names and filters are at least one character long")]
    Empty,
    /// More than 65,535 bytes: longer than a string on the wire can be.
    #[error("it is {0} bytes long, more than an MQTT string holds (65535)")]
    TooLong(usize),
    /// U+0000, which no MQTT string may hold.
    #[error("it contains the null character U+0000")]
    NullCharacter,
    /// `+` or `#` in a topic name, where wildcards are not allowed (spec 4.7.1).
    #[error("it contains a wildcard character (+ or #); only topic filters may")]
    WildcardInName,
    /// `#` not alone in the last level of a filter (spec 4.7.1.2).
    #[error("the multi-level wildcard # must be the last character and alone in its level")]
    MisplacedMultiLevelWildcard,
    /// `+` sharing a level of a filter with other characters (spec 4.7.1.3).
    #[error("the single-level wildcard + must be alone in its level")]
    MisplacedSingleLevelWildcard,
    /// A `$share/` filter whose group name is empty or holds `/`, `+` or `#` (4.8.2).
    #[error("a shared subscription's group name must be non-empty and free of /, + and #")]
    InvalidShareName,
    /// A `$share/{group}` with no filter after the group (4.8.2).
    #[error("a shared subscription needs a topic filter after $share/{{group}}/")]
    MissingSharedFilter,
}

/// The longest name or filter: a string's two-byte length.
const MAX_LEN: usize = u16::MAX as usize;

fn check_string(text: &str) -> Result<(), TopicError> {
    if text.is_empty() {
        return Err(TopicError::Empty);
    }
    if text.len() > MAX_LEN {
        return Err(TopicError::TooLong(text.len()));
    }
    if text.as_bytes().contains(&0) {
        return Err(TopicError::NullCharacter);
    }
    Ok(())
}

/// Checks a topic name, as in a PUBLISH or a will: non-empty, no wildcards.
pub fn validate_topic_name(topic: &str) -> Result<(), TopicError> {
    check_string(topic)?;
    if topic.bytes().any(|b| b == b'+' || b == b'#') {
        return Err(TopicError::WildcardInName);
    }
    Ok(())
}

/// Checks a topic filter's syntax: non-empty; `#` only as the whole last level; `+` only
/// as a whole level. A `$share/{group}/{filter}` passes if it is a valid filter as a whole;
/// [`parse_shared_subscription`] checks the shared form itself.
pub fn validate_topic_filter(filter: &str) -> Result<(), TopicError> {
    check_string(filter)?;
    let mut levels = filter.split('/').peekable();
    while let Some(level) = levels.next() {
        let last = levels.peek().is_none();
        if level.contains('#') && (level != "#" || !last) {
            return Err(TopicError::MisplacedMultiLevelWildcard);
        }
        if level.contains('+') && level != "+" {
            return Err(TopicError::MisplacedSingleLevelWildcard);
        }
    }
    Ok(())
}

/// Whether `filter` matches `topic` (spec 4.7). Both are taken as valid (see
/// [`validate_topic_filter`] and [`validate_topic_name`]); for a shared subscription,
/// pass the filter after its `$share/{group}/`.
pub fn matches(filter: &str, topic: &str) -> bool {
    // Spec 4.7.2: a wildcard first level does not reach the server's `$` names.
    if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    let mut names = topic.split('/');
    for level in filter.split('/') {
        if level == "#" {
            // The parent level too: `sport/#` matches `sport`.
            return true;
        }
        match names.next() {
            Some(name) if level == "+" || level == name => {}
            _ => return false,
        }
    }
    names.next().is_none()
}

/// A shared subscription's filter taken apart (MQTT 5.0, spec 4.8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedSubscription<'a> {
    /// The share name: subscribers with the same one share the messages.
    pub group: &'a str,
    /// The topic filter messages are matched against.
    pub filter: &'a str,
}

/// The prefix of a shared subscription's filter.
pub const SHARE_PREFIX: &str = "$share/";

/// `Ok(None)` for an ordinary filter, `Ok(Some(..))` for a valid `$share/{group}/{filter}`
/// and an error for a `$share/` filter that is not one: empty group or one with `/`, `+`
/// or `#`, no filter, or an invalid filter after the group.
pub fn parse_shared_subscription(
    filter: &str,
) -> Result<Option<SharedSubscription<'_>>, TopicError> {
    let Some(rest) = filter.strip_prefix(SHARE_PREFIX) else { return Ok(None) };
    let Some((group, filter)) = rest.split_once('/') else {
        return Err(if rest.is_empty() || rest.contains(['+', '#']) {
            TopicError::InvalidShareName
        } else {
            TopicError::MissingSharedFilter
        });
    };
    if group.is_empty() || group.contains(['+', '#']) {
        return Err(TopicError::InvalidShareName);
    }
    if filter.is_empty() {
        return Err(TopicError::MissingSharedFilter);
    }
    validate_topic_filter(filter)?;
    Ok(Some(SharedSubscription { group, filter }))
}
