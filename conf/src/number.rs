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
