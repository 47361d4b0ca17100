//! Cron entries as ActiveMQ's `AMQ_SCHEDULED_CRON` takes them: five fields, `minute hour
//! day-of-month month day-of-week`, each `*`, a number, a range `a-b`, a step `*/n`, `a-b/n`
//! or `a/n` (from `a` to the field's end), or a comma-separated list of those.
//!
//! Ranges are ActiveMQ's: minute 0-59, hour 0-23, day of month 1-31, month 1-12, day of week
//! 0-6 with Sunday 0. When both day fields are restricted (neither is `*`), a day matches if
//! either does, as in Vixie cron and ActiveMQ. Times are evaluated in UTC (ActiveMQ uses the
//! broker's local time zone); a step counts from the start of its range (`1-10/3` is 1, 4, 7,
//! 10, as in cron; ActiveMQ takes the values of the range divisible by the step).

use std::fmt;

/// A parsed cron entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    text: String,
    /// Bit `n` set: minute `n` matches.
    minutes: u64,
    hours: u32,
    days_of_month: u32,
    months: u16,
    days_of_week: u8,
    /// Whether the day-of-month and day-of-week fields were `*` (unrestricted).
    any_day_of_month: bool,
    any_day_of_week: bool,
}

/// Why a cron entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron entry `{entry}`: {reason}")]
pub struct CronError {
    pub entry: String,
    pub reason: String,
}

const MINUTE_MS: i64 = 60_000;
const DAY_MINUTES: i64 = 24 * 60;
/// How far ahead [`Cron::next_after`] looks: a leap day on a given weekday recurs within 28
/// years, so anything that matches at all matches within this.
const SEARCH_DAYS: i64 = 366 * 29;

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
}

const FIELDS: [Field; 5] = [
    Field { name: "minute", min: 0, max: 59 },
    Field { name: "hour", min: 0, max: 23 },
    Field { name: "day of month", min: 1, max: 31 },
    Field { name: "month", min: 1, max: 12 },
    Field { name: "day of week", min: 0, max: 6 },
];

impl Cron {
    /// Parses a five-field cron entry.
    pub fn parse(text: &str) -> Result<Cron, CronError> {
        let error = |reason: String| CronError { entry: text.to_owned(), reason };
        let tokens: Vec<&str> = text.split_whitespace().collect();
        if tokens.len() != FIELDS.len() {
            return Err(error(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                tokens.len()
            )));
        }
        let mut bits = [0u64; 5];
        for (i, (token, field)) in tokens.iter().zip(FIELDS.iter()).enumerate() {
            bits[i] = parse_field(token, field)
                .map_err(|reason| error(format!("{} field `{token}`: {reason}", field.name)))?;
        }
        let cron = Cron {
            text: tokens.join(" "),
            minutes: bits[0],
            hours: bits[1] as u32,
            days_of_month: bits[2] as u32,
            months: bits[3] as u16,
            days_of_week: bits[4] as u8,
            any_day_of_month: tokens[2] == "*",
            any_day_of_week: tokens[4] == "*",
        };
        Ok(cron)
    }

    /// The entry as written (fields separated by one space).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The first matching minute strictly after `after_millis` (milliseconds since the Unix
    /// epoch, UTC), in milliseconds; `None` if the entry never matches (`0 0 31 2 *`).
    pub fn next_after(&self, after_millis: i64) -> Option<i64> {
        let first_minute = after_millis.div_euclid(MINUTE_MS) + 1;
        let first_day = first_minute.div_euclid(DAY_MINUTES);
        let mut from = first_minute.rem_euclid(DAY_MINUTES);
        for day in first_day..first_day + SEARCH_DAYS {
            if self.day_matches(day) {
                if let Some(minute_of_day) = self.first_time_from(from) {
                    return Some((day * DAY_MINUTES + minute_of_day) * MINUTE_MS);
                }
            }
            from = 0;
        }
        None
    }

    fn day_matches(&self, days_since_epoch: i64) -> bool {
        let (_, month, day) = civil_from_days(days_since_epoch);
        if self.months & (1 << month) == 0 {
            return false;
        }
        // 1970-01-01 was a Thursday; Sunday is 0.
        let weekday = (days_since_epoch + 4).rem_euclid(7) as u32;
        let by_month = self.days_of_month & (1 << day) != 0;
        let by_week = self.days_of_week & (1 << weekday) != 0;
        match (self.any_day_of_month, self.any_day_of_week) {
            (false, false) => by_month || by_week,
            _ => by_month && by_week,
        }
    }

    /// The first matching minute of a day at or after `from` (minutes since midnight).
    fn first_time_from(&self, from: i64) -> Option<i64> {
        let (start_hour, start_minute) = (from / 60, from % 60);
        (start_hour..24).filter(|h| self.hours & (1 << h) != 0).find_map(|hour| {
            let first = if hour == start_hour { start_minute } else { 0 };
            (first..60).find(|m| self.minutes & (1 << m) != 0).map(|minute| hour * 60 + minute)
        })
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One field's values as a bit set.
fn parse_field(token: &str, field: &Field) -> Result<u64, String> {
    let mut bits = 0u64;
    for item in token.split(',') {
        if item.is_empty() {
            return Err("empty list item".to_owned());
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step = number(step, "step")?;
                if step == 0 {
                    return Err("a step must be at least 1".to_owned());
                }
                (range, Some(step))
            }
            None => (item, None),
        };
        let (first, last) = if range == "*" {
            (field.min, field.max)
        } else if let Some((a, b)) = range.split_once('-') {
            (number(a, "range start")?, number(b, "range end")?)
        } else {
            let value = number(range, "value")?;
            // `a/n` runs from `a` to the end of the field.
            (value, if step.is_some() { field.max } else { value })
        };
        for value in [first, last] {
            if value < field.min || value > field.max {
                return Err(format!("{value} is out of range {}-{}", field.min, field.max));
            }
        }
        if first > last {
            return Err(format!("range {first}-{last} runs backwards"));
        }
        let step = step.unwrap_or(1) as usize;
        for value in (first..=last).step_by(step) {
            bits |= 1 << value;
        }
    }
    Ok(bits)
}

fn number(text: &str, what: &str) -> Result<u32, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} `{text}` is not a number"));
    }
    text.parse().map_err(|_| format!("{what} `{text}` is too large"))
}

/// (year, month 1-12, day 1-31) of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`). Also what `ferromq dstat` dates a broker's status with.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Milliseconds of a UTC date and time (test helper, the inverse of `civil_from_days`).
    fn at(year: i64, month: i64, day: i64, hour: i64, minute: i64) -> i64 {
        let y = if month <= 2 { year - 1 } else { year };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (month + 9) % 12;
        let doy = (153 * mp + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        (days * DAY_MINUTES + hour * 60 + minute) * MINUTE_MS
    }

    fn next(entry: &str, after: i64) -> Option<i64> {
        Cron::parse(entry).expect("valid entry").next_after(after)
    }

    #[test]
    fn civil_dates_round_trip() {
        for days in [-1, 0, 59, 365, 11_016, 19_782, 47_541] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(at(y, m.into(), d.into(), 0, 0), days * DAY_MINUTES * MINUTE_MS);
        }
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn every_minute_fires_at_the_next_minute_boundary() {
        let t = at(2024, 5, 17, 10, 30) + 12_345;
        assert_eq!(next("* * * * *", t), Some(at(2024, 5, 17, 10, 31)));
        // Exactly on a boundary: strictly after.
        assert_eq!(next("* * * * *", at(2024, 5, 17, 10, 31)), Some(at(2024, 5, 17, 10, 32)));
    }

    #[test]
    fn hourly_and_daily_entries_roll_over() {
        let t = at(2024, 12, 31, 23, 59) + 1;
        assert_eq!(next("0 * * * *", t), Some(at(2025, 1, 1, 0, 0)));
        assert_eq!(next("30 2 * * *", at(2024, 3, 10, 2, 30)), Some(at(2024, 3, 11, 2, 30)));
        assert_eq!(next("30 2 * * *", at(2024, 3, 10, 2, 29)), Some(at(2024, 3, 10, 2, 30)));
    }

    #[test]
    fn lists_ranges_and_steps() {
        let t = at(2024, 1, 1, 0, 0);
        assert_eq!(next("*/15 * * * *", t), Some(at(2024, 1, 1, 0, 15)));
        assert_eq!(next("10,20 * * * *", at(2024, 1, 1, 0, 10)), Some(at(2024, 1, 1, 0, 20)));
        assert_eq!(next("5 9-17/4 * * *", at(2024, 1, 1, 9, 5)), Some(at(2024, 1, 1, 13, 5)));
        assert_eq!(next("5 9-17/4 * * *", at(2024, 1, 1, 17, 5)), Some(at(2024, 1, 2, 9, 5)));
        assert_eq!(next("50/5 * * * *", at(2024, 1, 1, 0, 56)), Some(at(2024, 1, 1, 1, 50)));
    }

    #[test]
    fn months_and_leap_days() {
        assert_eq!(next("0 0 29 2 *", at(2023, 3, 1, 0, 0)), Some(at(2024, 2, 29, 0, 0)));
        assert_eq!(next("0 12 1 6,12 *", at(2024, 6, 1, 12, 0)), Some(at(2024, 12, 1, 12, 0)));
        assert_eq!(next("0 0 31 * *", at(2024, 4, 1, 0, 0)), Some(at(2024, 5, 31, 0, 0)));
    }

    #[test]
    fn day_of_week_alone_and_either_day_field() {
        // 2024-05-17 is a Friday; Sunday is 0.
        assert_eq!(next("0 8 * * 1", at(2024, 5, 17, 0, 0)), Some(at(2024, 5, 20, 8, 0)));
        assert_eq!(next("0 8 * * 0", at(2024, 5, 17, 0, 0)), Some(at(2024, 5, 19, 8, 0)));
        // Both restricted: the 25th or any Monday, whichever comes first.
        assert_eq!(next("0 0 25 * 1", at(2024, 5, 17, 0, 0)), Some(at(2024, 5, 20, 0, 0)));
        assert_eq!(next("0 0 18 * 1", at(2024, 5, 17, 0, 0)), Some(at(2024, 5, 18, 0, 0)));
        // Day of month with a `*` weekday: only the day of month counts.
        assert_eq!(next("0 0 25 * *", at(2024, 5, 17, 0, 0)), Some(at(2024, 5, 25, 0, 0)));
    }

    #[test]
    fn an_entry_that_never_matches_has_no_next_time() {
        assert_eq!(next("0 0 31 2 *", at(2024, 1, 1, 0, 0)), None);
        assert_eq!(next("0 0 30 2 *", at(2024, 1, 1, 0, 0)), None);
    }

    #[test]
    fn malformed_entries_are_refused_with_the_field_named() {
        let cases = [
            ("* * * *", "expected 5 fields"),
            ("* * * * * *", "expected 5 fields"),
            ("", "expected 5 fields"),
            ("60 * * * *", "minute field `60`: 60 is out of range 0-59"),
            ("* 24 * * *", "hour field `24`: 24 is out of range 0-23"),
            ("* * 0 * *", "day of month field `0`: 0 is out of range 1-31"),
            ("* * * 13 *", "month field `13`: 13 is out of range 1-12"),
            ("* * * * 7", "day of week field `7`: 7 is out of range 0-6"),
            ("*/0 * * * *", "a step must be at least 1"),
            ("a * * * *", "value `a` is not a number"),
            ("5-1 * * * *", "range 5-1 runs backwards"),
            ("1,,2 * * * *", "empty list item"),
            ("-1 * * * *", "range start `` is not a number"),
            ("1-2-3 * * * *", "range end `2-3` is not a number"),
            ("99999999999 * * * *", "is too large"),
        ];
        for (entry, expected) in cases {
            let error = Cron::parse(entry).expect_err(entry).to_string();
            assert!(error.contains(expected), "`{entry}`: {error}");
            assert!(error.starts_with(&format!("invalid cron entry `{entry}`")), "{error}");
        }
    }

    #[test]
    fn whitespace_between_fields_is_normalised() {
        let cron = Cron::parse("  0   12\t* * 1-5 ").expect("valid");
        assert_eq!(cron.text(), "0 12 * * 1-5");
    }
}
