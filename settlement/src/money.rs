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

    /// The printed running total so far (`round(start + Σx)`).
    pub fn printed_total(&self) -> Decimal {
        round_dp(self.exact, self.dp)
    }

    /// The exact running total so far.
    pub fn exact_total(&self) -> Decimal {
        self.exact
    }
}
