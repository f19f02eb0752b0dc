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
//! * Allocation (issue 17): [`allocate`] prints a set of lines by largest remainder, so
//!   that printed lines add up exactly to the printed total `round(Σ exact)` while each
//!   line is `round(x)` unless the total needs it moved by one fen; a line alone prints
//!   exactly `round(x)`. So a given exact amount prints the same figure on every report
//!   that shows it, and every report's lines add up to its totals. Where a report must
//!   also print balances that match other reports (statements' opening and closing, the
//!   trial balance), the printed difference is a `rounding` line
//!   ([`rounding_difference`]). There is no other rounding or allocation code in the crate.

use rust_decimal::prelude::ToPrimitive;
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

/// Printed lines and their printed total, from [`allocate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// One printed amount per exact amount, in the same order (CNY, or GPU-hours at
    /// [`HOURS_DP`]).
    pub lines: Vec<Decimal>,
    /// The printed total: `round(Σ exact)`, which is exactly `Σ lines`.
    pub total: Decimal,
}

/// Largest-remainder allocation: prints `exact` amounts to `dp` places so that the printed
/// lines add up exactly to the printed total `round(Σ exact)` (docs/settlement.md,
/// "Rounding allocation"). The one allocation rule of the crate: every report prints its
/// sections, columns and invoice lines through it.
///
/// 1. Each line rounds by the one rule: `naive = round_dp(x, dp)`.
/// 2. The printed total is `round_dp(Σ exact, dp)`.
/// 3. The difference `total − Σ naive` (a whole number `k` of units `10^-dp`) goes one unit
///    at a time to the lines that rounding moved furthest from their exact amount: for
///    `k > 0` the lines with the largest remainders `x − naive` get `+1` unit each, for
///    `k < 0` the lines with the smallest remainders get `−1` unit; ties go to the earlier
///    line. `|k|` never exceeds the number of lines rounded the wrong way, so each printed
///    line stays within one unit of its exact amount and no line moves twice.
///
/// Deterministic (a function of the amounts and their order). A single line, and lines
/// whose rounded amounts already add up to the rounded total, print exactly
/// `round_dp(x, dp)`, so the same exact amount prints the same figure on every report that
/// shows it alone. Never prints `-0.00`.
pub fn allocate(exact: &[Decimal], dp: u32) -> Allocation {
    let total = round_dp(exact.iter().copied().sum(), dp);
    let mut lines: Vec<Decimal> = exact.iter().map(|x| round_dp(*x, dp)).collect();
    let unit = Decimal::new(1, dp);
    let diff = total - lines.iter().copied().sum::<Decimal>();
    let k = (diff / unit).round();
    if !k.is_zero() {
        let up = k.is_sign_positive();
        // Candidates: lines rounded the wrong way for this direction, furthest first.
        let mut order: Vec<(Decimal, usize)> = exact
            .iter()
            .zip(&lines)
            .enumerate()
            .map(|(i, (x, n))| (if up { *x - *n } else { *n - *x }, i))
            .filter(|(r, _)| *r > Decimal::ZERO)
            .collect();
        order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let step = if up { unit } else { -unit };
        let count = k.abs().to_usize().unwrap_or(usize::MAX);
        for (_, i) in order.into_iter().take(count) {
            lines[i] = round_dp(lines[i] + step, dp);
        }
    }
    Allocation { lines, total }
}

/// [`allocate`] to the fen ([`FEN_DP`]): CNY lines that add up to `round_fen(Σ exact)`.
pub fn allocate_fen(exact: &[Decimal]) -> Allocation {
    allocate(exact, FEN_DP)
}

/// The printed rounding difference (尾差) that makes printed parts add up to a printed
/// total: `round_dp(total − Σ parts, dp)`, CNY. Used where a report prints figures that
/// must match other reports (statement balances, trial-balance rows) and so cannot be
/// allocated: the difference gets its own `rounding` line.
pub fn rounding_difference(
    total: Decimal,
    printed_parts: impl IntoIterator<Item = Decimal>,
    dp: u32,
) -> Decimal {
    round_dp(total - printed_parts.into_iter().sum::<Decimal>(), dp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).expect("test literal")
    }

    fn ds(v: &[&str]) -> Vec<Decimal> {
        v.iter().map(|s| d(s)).collect()
    }

    #[test]
    fn a_line_alone_prints_its_rounded_amount() {
        for x in ["0.525", "-0.525", "0.004", "-0.004", "0.00333333", "1.005"] {
            let a = allocate_fen(&[d(x)]);
            assert_eq!(a.lines, vec![round_fen(d(x))], "{x}");
            assert_eq!(a.total, round_fen(d(x)));
        }
        // 1 s of one GPU at 12 CNY/h: 0.00333… prints 0.00, never -0.00.
        let a = allocate_fen(&[-(d("12") / d("3600"))]);
        assert_eq!(a.lines[0].to_string(), "0.00");
    }

    #[test]
    fn thirds_add_up_and_the_extra_fen_goes_to_the_first_tie() {
        let third = d("0.333333333333");
        let a = allocate_fen(&[third, third, third]);
        // naive 0.33 × 3 = 0.99, total round(0.999999999999) = 1.00: +1 fen, ties by position.
        assert_eq!(a.lines, ds(&["0.34", "0.33", "0.33"]));
        assert_eq!(a.total, d("1.00"));
    }

    #[test]
    fn rounded_up_lines_give_back_the_excess_largest_first() {
        // 0.00625 × 3: naive 0.01 each = 0.03, total round(0.01875) = 0.02: −1 fen.
        let x = d("0.00625");
        assert_eq!(
            allocate_fen(&[x, x, x]).lines,
            ds(&["0.00", "0.01", "0.01"])
        );
        let a = allocate_fen(&ds(&["0.016", "0.016", "0.008"]));
        // naive 0.02 + 0.02 + 0.01 = 0.05; total round(0.040) = 0.04: −1 fen from the line
        // rounded up furthest: the 0.016 lines went up 0.004 (the 0.008 line only 0.002), and
        // of those two the first gives it back.
        assert_eq!(a.lines, ds(&["0.01", "0.02", "0.01"]));
        assert_eq!(a.total, d("0.04"));
    }

    #[test]
    fn lines_that_already_add_up_are_left_alone() {
        let v = ds(&["0.525", "1.004", "2.5", "-0.3"]);
        let a = allocate_fen(&v);
        // naive 0.53 + 1.00 + 2.50 − 0.30 = 3.73 = round(3.729).
        assert_eq!(a.lines, ds(&["0.53", "1.00", "2.50", "-0.30"]));
        assert_eq!(a.total, d("3.73"));
    }

    #[test]
    fn signed_lines_and_four_places() {
        let a = allocate(&ds(&["0.00005", "0.00005", "-0.00004"]), HOURS_DP);
        // naive 0.0001 + 0.0001 + 0.0000 = 0.0002; total round(0.00006) = 0.0001.
        assert_eq!(a.lines.iter().copied().sum::<Decimal>(), a.total);
        assert_eq!(a.total, d("0.0001"));
        assert_eq!(a.lines, ds(&["0.0000", "0.0001", "0.0000"]));
        assert!(allocate_fen(&[]).lines.is_empty());
        assert_eq!(allocate_fen(&[]).total.to_string(), "0.00");
    }

    #[test]
    fn rounding_difference_closes_a_printed_identity() {
        // opening 100.00, deposit none, a 0.525 charge prints 0.53; closing 99.475 prints 99.48.
        let r = rounding_difference(d("99.48"), [d("100.00"), d("-0.53")], FEN_DP);
        assert_eq!(r, d("0.01"));
        assert_eq!(
            rounding_difference(d("1"), [d("1.00")], FEN_DP).to_string(),
            "0.00"
        );
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
    fn max_input_amount_is_ten_to_the_fifteen() {
        assert_eq!(MAX_INPUT_AMOUNT, Decimal::from(1_000_000_000_000_000i64));
    }
}
