//! Deserializers for numbers, with messages written for the operator ("expected a whole number")
//! rather than for the programmer ("expected usize").
//!
//! Only the type is checked here; ranges (greater than zero, at most a day) are the business of
//! [`validate`](crate::validate), which also runs on configurations that never saw a file.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{self, Deserializer, Unexpected, Visitor};

/// A non-negative integer that fits `T` (`usize`, `u32`...).
pub(crate) fn whole<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    deserializer.deserialize_u64(Whole(PhantomData))
}

struct Whole<T>(PhantomData<T>);

impl<T: TryFrom<u64>> Visitor<'_> for Whole<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<T, E> {
        T::try_from(value)
            .map_err(|_| E::invalid_value(Unexpected::Unsigned(value), &"a smaller whole number"))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<T, E> {
        match u64::try_from(value) {
            Ok(value) => self.visit_u64(value),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(value), &self)),
        }
    }
}

/// A number, integer or not: `2` and `2.0` are both 2.0.
pub(crate) fn real<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    deserializer.deserialize_f64(Real)
}

struct Real;

impl Visitor<'_> for Real {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<f64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<f64, E> {
        // Configuration-sized integers are exact in an f64.
        Ok(value as f64)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<f64, E> {
        Ok(value as f64)
    }
}

/// A [`Duration`] written as whole milliseconds (the `_ms` keys).
pub(crate) mod millis {
    use super::*;
    use serde::Serializer;

    pub(crate) fn serialize<S: Serializer>(
        duration: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        // TOML integers are i64; validation keeps durations far below that.
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        serializer.serialize_i64(millis)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        deserializer.deserialize_u64(Millis)
    }

    struct Millis;

    impl Visitor<'_> for Millis {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a whole number of milliseconds")
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<Duration, E> {
            Ok(Duration::from_millis(value))
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<Duration, E> {
            match u64::try_from(value) {
                Ok(value) => self.visit_u64(value),
                Err(_) => Err(E::invalid_value(Unexpected::Signed(value), &self)),
            }
        }
    }
}

/// An optional [`whole`] number (a key that may be left out).
pub(crate) fn optional_whole<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    whole(deserializer).map(Some)
}

/// An optional [`millis`] duration.
pub(crate) mod optional_millis {
    use super::*;
    use serde::Serializer;

    pub(crate) fn serialize<S: Serializer>(
        duration: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match duration {
            Some(duration) => super::millis::serialize(duration, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        super::millis::deserialize(deserializer).map(Some)
    }
}

/// A size in bytes: a whole number, or a text with a unit as ActiveMQ writes them
/// (`"128 mb"`, `"64kb"`, `"1 GiB"`; k, m, g and t are powers of 1024, as in ActiveMQ).
pub(crate) fn bytes<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    let bytes = deserializer.deserialize_any(Bytes)?;
    T::try_from(bytes).map_err(|_| {
        de::Error::invalid_value(Unexpected::Unsigned(bytes), &"a size this machine can address")
    })
}

/// An optional [`bytes`] size.
pub(crate) fn optional_bytes<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    bytes(deserializer).map(Some)
}

struct Bytes;

impl Visitor<'_> for Bytes {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number of bytes, or a size such as \"128 mb\"")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        u64::try_from(value).map_err(|_| E::invalid_value(Unexpected::Signed(value), &self))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<u64, E> {
        parse_size(text).ok_or_else(|| E::invalid_value(Unexpected::Str(text), &self))
    }
}

/// `"128 mb"` to 134 217 728; `None` for anything that is not a size.
pub(crate) fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_read_as_activemq_writes_them() {
        assert_eq!(parse_size("128 mb"), Some(128 << 20));
        assert_eq!(parse_size("64kb"), Some(64 << 10));
        assert_eq!(parse_size("1 GiB"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size("mb"), None);
        assert_eq!(parse_size("99999999999 tb"), None);
    }
}
