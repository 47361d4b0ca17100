//! The `heart-beat` header: parsing and agreeing on intervals.

use super::WireError;

/// Parses a heart-beat header `"cx,cy"` (milliseconds) into `(cx, cy)`: the sender can send
/// a heart-beat every `cx` ms, and wants to receive one every `cy` ms; 0 means "not at all".
/// Whitespace around each number is tolerated.
pub fn parse_heart_beat(value: &str) -> Result<(u64, u64), WireError> {
    let invalid = || WireError::InvalidHeartBeat(value.to_owned());
    let (send, receive) = value.split_once(',').ok_or_else(invalid)?;
    let parse = |part: &str| {
        let part = part.trim();
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        part.parse::<u64>().map_err(|_| invalid())
    };
    Ok((parse(send)?, parse(receive)?))
}

/// Agrees heart-beat intervals as the STOMP 1.1 spec says, from one side's point of view.
///
/// `ours` is the heart-beat header we sent (or would send), `theirs` the one the peer sent.
/// Returns `(send_every_ms, expect_every_ms)`: how often we must send something, and how
/// often we should hear something from the peer; 0 means no heart-beats that way.
pub fn heart_beat_intervals(ours: (u64, u64), theirs: (u64, u64)) -> (u64, u64) {
    let agree = |can: u64, wants: u64| {
        if can == 0 || wants == 0 {
            0
        } else {
            can.max(wants)
        }
    };
    (agree(ours.0, theirs.1), agree(theirs.0, ours.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heart_beat_header_parses_into_two_millisecond_counts() {
        assert_eq!(parse_heart_beat("0,0"), Ok((0, 0)));
        assert_eq!(parse_heart_beat("10000,5000"), Ok((10_000, 5_000)));
        assert_eq!(parse_heart_beat(" 100 , 200 "), Ok((100, 200)));
    }

    #[test]
    fn malformed_heart_beat_headers_are_rejected() {
        for bad in ["", "100", "a,b", "1,2,3", "-1,0", "+1,0", ",", "1,", "99999999999999999999,0"]
        {
            assert_eq!(
                parse_heart_beat(bad),
                Err(WireError::InvalidHeartBeat(bad.to_owned())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn intervals_are_the_larger_of_can_and_want_unless_either_side_declines() {
        assert_eq!(heart_beat_intervals((1000, 2000), (3000, 500)), (1000, 3000));
        assert_eq!(heart_beat_intervals((0, 2000), (3000, 500)), (0, 3000));
        assert_eq!(heart_beat_intervals((1000, 0), (3000, 500)), (1000, 0));
        assert_eq!(heart_beat_intervals((1000, 1000), (0, 0)), (0, 0));
    }
}
