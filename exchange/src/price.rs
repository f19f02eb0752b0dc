//! Prices in CNY per GPU-hour as exact integer ticks.
//!
//! The market's tick is 0.0001 CNY per GPU-hour ([`TICK`]); a [`Price`] holds a whole number of
//! ticks, so comparisons in the book are integer comparisons and no float ever touches money.
//! Conversion to and from `rust_decimal::Decimal` is exact.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// Decimal places of the price tick: 0.0001 CNY per GPU-hour.
pub const PRICE_SCALE: u32 = 4;

/// The price tick, CNY per GPU-hour.
pub const TICK: Decimal = Decimal::from_parts(1, 0, 0, false, PRICE_SCALE);

/// Highest accepted price: 100,000 CNY per GPU-hour (about 3,000× the dearest SKU in the
/// reference price list, H200-141G at 35.00), in ticks.
pub const MAX_PRICE_TICKS: i64 = 100_000 * 10_000;

/// A positive price in CNY per GPU-hour, a whole number of 0.0001 ticks, at most
/// [`MAX_PRICE_TICKS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Price(i64);

/// Why a value is not a valid [`Price`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    /// Zero or negative.
    #[error("price must be greater than zero")]
    NotPositive,
    /// Not a whole multiple of the 0.0001 tick.
    #[error("price must be a multiple of 0.0001 CNY per GPU-hour")]
    OffTick,
    /// Above [`MAX_PRICE_TICKS`].
    #[error("price must be at most 100000 CNY per GPU-hour")]
    TooHigh,
}

impl Price {
    /// A price from a whole number of ticks (0.0001 CNY per GPU-hour each).
    ///
    /// # Errors
    /// [`PriceError::NotPositive`] for `ticks <= 0`, [`PriceError::TooHigh`] above the maximum.
    pub fn from_ticks(ticks: i64) -> Result<Price, PriceError> {
        if ticks <= 0 {
            Err(PriceError::NotPositive)
        } else if ticks > MAX_PRICE_TICKS {
            Err(PriceError::TooHigh)
        } else {
            Ok(Price(ticks))
        }
    }

    /// An exact price from a decimal CNY per GPU-hour.
    ///
    /// # Errors
    /// [`PriceError`] when not positive, not on the tick, or too high.
    pub fn from_decimal(value: Decimal) -> Result<Price, PriceError> {
        if value <= Decimal::ZERO {
            return Err(PriceError::NotPositive);
        }
        let ticks = value
            .checked_mul(Decimal::from(10_000))
            .ok_or(PriceError::TooHigh)?;
        if ticks.fract() != Decimal::ZERO {
            return Err(PriceError::OffTick);
        }
        let ticks: i64 = ticks.trunc().try_into().map_err(|_| PriceError::TooHigh)?;
        Price::from_ticks(ticks)
    }

    /// The number of 0.0001 ticks.
    pub fn ticks(self) -> i64 {
        self.0
    }

    /// The price as a decimal CNY per GPU-hour (scale 4).
    pub fn to_decimal(self) -> Decimal {
        Decimal::new(self.0, PRICE_SCALE)
    }
}

impl std::fmt::Display for Price {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_decimal())
    }
}

impl<'de> Deserialize<'de> for Price {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ticks = i64::deserialize(d)?;
        Price::from_ticks(ticks).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn dec(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn decimal_round_trip_is_exact() {
        let p = Price::from_decimal(dec("22.5")).unwrap();
        assert_eq!(p.ticks(), 225_000);
        assert_eq!(p.to_decimal(), dec("22.5000"));
        assert_eq!(p.to_string(), "22.5000");
    }

    #[test]
    fn rejects_off_tick_zero_negative_and_too_high() {
        assert_eq!(
            Price::from_decimal(dec("1.00001")),
            Err(PriceError::OffTick)
        );
        assert_eq!(Price::from_decimal(dec("0")), Err(PriceError::NotPositive));
        assert_eq!(Price::from_decimal(dec("-1")), Err(PriceError::NotPositive));
        assert_eq!(
            Price::from_decimal(dec("100000.0001")),
            Err(PriceError::TooHigh)
        );
        assert!(Price::from_decimal(dec("100000")).is_ok());
        assert_eq!(Price::from_decimal(dec("0.0001")).unwrap().ticks(), 1);
    }

    #[test]
    fn deserializing_invalid_ticks_fails() {
        let bytes = postcard::to_allocvec(&0i64).unwrap();
        assert!(postcard::from_bytes::<Price>(&bytes).is_err());
        let bytes = postcard::to_allocvec(&5i64).unwrap();
        assert_eq!(postcard::from_bytes::<Price>(&bytes).unwrap().ticks(), 5);
    }
}
