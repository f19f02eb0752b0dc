//! Money: the one rounding rule, internal precision, and rounding allocation.
//!
//! All amounts are CNY in [`rust_decimal::Decimal`] (never floats).
//!
//! * Internal precision: amounts derived from metering (charges, fees, SLA
//!   credits) are kept to [`INTERNAL_DP`] = 12 decimal places (10⁻¹² CNY),
//!   i.e. far below a fen, so that sums and differences are exact decimal
//!   arithmetic and lease slices add up exactly to lease totals.
//! * Statement rounding: printed amounts are rounded to the fen (0.01 CNY) by
//!   one named rule, [`FEN_ROUNDING`] = round half away from zero
//!   (Chinese accounting 四舍五入): 0.525 → 0.53, 0.535 → 0.54, −0.525 → −0.53.
//! * Allocation: [`Allocator`] prints a sequence of lines so that printed
//!   lines add up exactly to printed totals (issue 3, "Reports").

use rust_decimal::{Decimal, RoundingStrategy};

/// The one rounding rule for printed money: round half away from zero
/// (四舍五入). Source: issue 3 interface decision.
pub const FEN_ROUNDING: RoundingStrategy = RoundingStrategy::MidpointAwayFromZero;

/// Decimal places of a printed CNY amount (fen).
pub const FEN_DP: u32 = 2;

/// Decimal places kept internally for metered amounts (10⁻¹² CNY).
pub const INTERNAL_DP: u32 = 12;

/// Decimal places for printed GPU-hours and utilisation ratios.
pub const HOURS_DP: u32 = 4;

/// Largest amount accepted on any single input (10¹⁵ CNY); keeps all
/// arithmetic far from `Decimal` overflow.
pub const MAX_INPUT_AMOUNT: Decimal = Decimal::from_parts(0xA4C6_8000, 0x0003_8D7E, 0, false, 0);

/// Rounds `x` (CNY) to `dp` decimal places with [`FEN_ROUNDING`] and sets the
/// scale to exactly `dp` (so `1.1` prints as `1.10`). Negative zero is
/// normalised to zero. This is the only place the rounding rule is applied.
pub fn round_dp(x: Decimal, dp: u32) -> Decimal {
    let mut r = x.round_dp_with_strategy(dp, FEN_ROUNDING);
    if r.is_zero() {
        r = Decimal::ZERO;
    }
    r.rescale(dp);
    r
}

/// Rounds a CNY amount to the fen (0.01 CNY) with [`FEN_ROUNDING`]:
/// `round_fen(0.525) == 0.53`, `round_fen(-0.525) == -0.53`.
pub fn round_fen(x: Decimal) -> Decimal {
    round_dp(x, FEN_DP)
}

/// Quantises an internally computed amount to [`INTERNAL_DP`] places (same
/// rule). Used for cumulative metered amounts only, never for statements.
pub(crate) fn quantize(x: Decimal) -> Decimal {
    x.round_dp_with_strategy(INTERNAL_DP, FEN_ROUNDING)
}

/// Allocates rounding over a sequence of exact amounts so that the printed
/// amounts add up exactly to the printed total.
///
/// Walks a running exact total `r` (starting at `start`): each amount `x`
/// prints as `round(r + x) - round(r)`. Printed amounts therefore telescope
/// to `round(start + Σx) - round(start)`, and each printed amount differs
/// from the exact one by less than one unit of the last printed place.
/// Starting at an opening balance makes opening + lines = closing in print.
#[derive(Debug, Clone)]
pub struct Allocator {
    exact: Decimal,
    dp: u32,
}

impl Allocator {
    /// An allocator printing to `dp` places, starting from the exact running
    /// total `start` (e.g. an opening balance, or zero).
    pub fn new(start: Decimal, dp: u32) -> Self {
        Allocator { exact: start, dp }
    }

    /// Adds the exact amount `x` and returns its printed (allocated) amount.
    pub fn take(&mut self, x: Decimal) -> Decimal {
        let before = round_dp(self.exact, self.dp);
        self.exact += x;
        let d = round_dp(self.exact, self.dp) - before;
        round_dp(d, self.dp)
    }

    /// Adds a debit: the exact amount `-x`, returned as the printed (allocated) amount of `x`
    /// — for lines that print a positive charge out of a running total that falls. Never
    /// `-0.00`: a zero prints `0.00` (docs/settlement.md forbids a negative zero).
    pub fn take_debit(&mut self, x: Decimal) -> Decimal {
        let mut d = -self.take(-x);
        if d.is_zero() {
            d.set_sign_positive(true);
        }
        d
    }

    /// The printed running total so far (`round(start + Σx)`).
    pub fn printed_total(&self) -> Decimal {
        round_dp(self.exact, self.dp)
    }

    /// The exact running total so far.
    pub fn exact_total(&self) -> Decimal {
        self.exact
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).expect("test literal")
    }

    #[test]
    fn a_debit_that_rounds_to_nothing_prints_zero_not_negative_zero() {
        // 1 s of one GPU at 12 CNY/h: 0.00333… CNY, out of a balance of 100.
        let mut a = Allocator::new(d("100"), 2);
        let x = d("12") / d("3600");
        let printed = a.take_debit(x);
        assert_eq!(printed.to_string(), "0.00");
        assert!(printed.is_sign_positive());
        // The old way printed "-0.00".
        let mut b = Allocator::new(d("100"), 2);
        assert_eq!((-b.take(-x)).to_string(), "-0.00");
    }

    #[test]
    fn round_fen_rounds_midpoints_away_from_zero() {
        assert_eq!(round_fen(d("0.525")), d("0.53"));
        assert_eq!(round_fen(d("0.535")), d("0.54"));
        assert_eq!(round_fen(d("-0.525")), d("-0.53"));
        assert_eq!(round_fen(d("-0.535")), d("-0.54"));
        // Banker's rounding would give 1.00 and 2.66 here.
        assert_eq!(round_fen(d("1.005")), d("1.01"));
        assert_eq!(round_fen(d("2.665")), d("2.67"));
        assert_eq!(round_fen(d("0.524999")), d("0.52"));
        assert_eq!(round_fen(d("-0.524999")), d("-0.52"));
    }

    #[test]
    fn round_fen_prints_two_places_and_no_negative_zero() {
        assert_eq!(round_fen(d("1.1")).to_string(), "1.10");
        assert_eq!(round_fen(d("-0.004")).to_string(), "0.00");
        assert_eq!(round_fen(Decimal::ZERO).to_string(), "0.00");
    }

    #[test]
    fn allocator_makes_thirds_add_up() {
        let third = d("0.333333333333");
        let mut a = Allocator::new(Decimal::ZERO, FEN_DP);
        let lines: Vec<Decimal> = (0..3).map(|_| a.take(third)).collect();
        assert_eq!(lines, vec![d("0.33"), d("0.34"), d("0.33")]);
        assert_eq!(a.printed_total(), d("1.00"));
    }

    #[test]
    fn allocator_from_an_opening_balance() {
        // opening 10.004, then -0.005 twice: exact 9.994 -> prints 9.99.
        let mut a = Allocator::new(d("10.004"), FEN_DP);
        let x = a.take(d("-0.005"));
        let y = a.take(d("-0.005"));
        assert_eq!(round_fen(d("10.004")) + x + y, a.printed_total());
        assert_eq!(a.printed_total(), d("9.99"));
        // 10.004 -> 9.999 prints 10.00 (x = 0.00); 9.999 -> 9.994 prints 9.99 (y = -0.01).
        assert_eq!((x, y), (d("0.00"), d("-0.01")));
    }

    #[test]
    fn max_input_amount_is_ten_to_the_fifteen() {
        assert_eq!(MAX_INPUT_AMOUNT, Decimal::from(1_000_000_000_000_000i64));
    }
}
