//! STOMP 1.0, 1.1 and 1.2 framing: bytes in, frames out.
//!
//! A frame on the wire is a command line, `name:value` header lines, a blank line, the body
//! and a NUL byte (`\0`); lines end in `\n` or `\r\n`. A lone end-of-line between frames is
//! a heart-beat. The [`Codec`] decodes incrementally: it keeps what it has parsed of the
//! current frame between calls, so a large body arriving in small pieces costs linear time,
//! and it enforces its [`Limits`] before a frame is complete, so a peer cannot make the
//! broker buffer more than the limits allow.
//!
//! What the codec does not do: it does not check which headers a command requires
//! (`destination` on SEND, say) nor the order of frames (CONNECT first); that is the
//! protocol adapter's job, which knows what to answer.

mod codec;
mod command;
mod decode;
mod encode;
mod error;
mod escape;
mod frame;
mod heart_beat;
mod version;

#[cfg(test)]
mod tests;

pub use codec::{Codec, Limits};
pub use command::Command;
pub use error::WireError;
pub use frame::{Decoded, Frame};
pub use heart_beat::{heart_beat_intervals, parse_heart_beat};
pub use version::{negotiate_version, Version};
