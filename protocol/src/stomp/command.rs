//! The STOMP frame commands.

use std::fmt;

/// A STOMP frame command: the first line of every frame.
///
/// Client frames: CONNECT, STOMP, SEND, SUBSCRIBE, UNSUBSCRIBE, ACK, NACK, BEGIN, COMMIT,
/// ABORT, DISCONNECT. Server frames: CONNECTED, MESSAGE, RECEIPT, ERROR. The codec decodes
/// and encodes all of them in both directions; which side may send which is the adapter's
/// business.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// Opens a session (every version).
    Connect,
    /// Opens a session (1.1+; CONNECT under a name HTTP servers do not use).
    Stomp,
    /// The server accepted the session.
    Connected,
    /// Sends a message to a destination.
    Send,
    /// Registers a consumer on a destination.
    Subscribe,
    /// Removes a consumer.
    Unsubscribe,
    /// Acknowledges a message.
    Ack,
    /// Rejects a message (1.1+).
    Nack,
    /// Starts a transaction.
    Begin,
    /// Commits a transaction.
    Commit,
    /// Rolls a transaction back.
    Abort,
    /// Closes the session gracefully.
    Disconnect,
    /// The server processed a frame that asked for a receipt.
    Receipt,
    /// A message delivered to a subscription.
    Message,
    /// The server reports an error (and usually closes the connection).
    Error,
}

impl Command {
    /// Every command, in the order of the enum.
    pub const ALL: [Command; 15] = [
        Command::Connect,
        Command::Stomp,
        Command::Connected,
        Command::Send,
        Command::Subscribe,
        Command::Unsubscribe,
        Command::Ack,
        Command::Nack,
        Command::Begin,
        Command::Commit,
        Command::Abort,
        Command::Disconnect,
        Command::Receipt,
        Command::Message,
        Command::Error,
    ];

    /// The command as written on the wire, e.g. `"SEND"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Connect => "CONNECT",
            Command::Stomp => "STOMP",
            Command::Connected => "CONNECTED",
            Command::Send => "SEND",
            Command::Subscribe => "SUBSCRIBE",
            Command::Unsubscribe => "UNSUBSCRIBE",
            Command::Ack => "ACK",
            Command::Nack => "NACK",
            Command::Begin => "BEGIN",
            Command::Commit => "COMMIT",
            Command::Abort => "ABORT",
            Command::Disconnect => "DISCONNECT",
            Command::Receipt => "RECEIPT",
            Command::Message => "MESSAGE",
            Command::Error => "ERROR",
        }
    }

    /// The command spelled exactly by `bytes` (case-sensitive, no surrounding whitespace).
    pub fn parse(bytes: &[u8]) -> Option<Command> {
        Command::ALL.into_iter().find(|command| command.as_str().as_bytes() == bytes)
    }

    /// Whether `bytes` could still grow into a command line: a prefix of some command's
    /// name, optionally followed by the `\r` of a CRLF line end.
    pub(crate) fn is_prefix_of_any(bytes: &[u8]) -> bool {
        let name = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let could_end_here = name.len() < bytes.len();
        Command::ALL.into_iter().any(|command| {
            let full = command.as_str().as_bytes();
            if could_end_here {
                full == name
            } else {
                full.starts_with(name)
            }
        })
    }

    /// Whether header escaping applies to this command. CONNECT, STOMP and CONNECTED are
    /// exempt in every version, so that a 1.0 peer can read them before a version is agreed.
    pub fn escapes_headers(self) -> bool {
        !matches!(self, Command::Connect | Command::Stomp | Command::Connected)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_parses_from_its_own_name() {
        for command in Command::ALL {
            assert_eq!(Command::parse(command.as_str().as_bytes()), Some(command));
        }
    }

    #[test]
    fn parse_is_exact_and_case_sensitive() {
        assert_eq!(Command::parse(b"send"), None);
        assert_eq!(Command::parse(b"SEND "), None);
        assert_eq!(Command::parse(b"SENDX"), None);
        assert_eq!(Command::parse(b""), None);
    }

    #[test]
    fn prefixes_of_commands_are_recognised() {
        assert!(Command::is_prefix_of_any(b"C"));
        assert!(Command::is_prefix_of_any(b"CONN"));
        assert!(Command::is_prefix_of_any(b"UNSUBSCRIBE"));
        assert!(Command::is_prefix_of_any(b"SEND\r"));
        assert!(!Command::is_prefix_of_any(b"SEN\r"));
        assert!(!Command::is_prefix_of_any(b"G"));
        assert!(!Command::is_prefix_of_any(b"CONNECTX"));
    }

    #[test]
    fn only_connect_stomp_and_connected_skip_escaping() {
        let exempt: Vec<Command> =
            Command::ALL.into_iter().filter(|c| !c.escapes_headers()).collect();
        assert_eq!(exempt, [Command::Connect, Command::Stomp, Command::Connected]);
    }
}
