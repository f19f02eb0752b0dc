//! SLA credits (issue 3 "SLA credit"; per-lease terms since issue 26; rules, bounds and worked
//! examples in docs/settlement.md "SLA credit").
//!
//! Layout: [`SlaTerms`] and [`CreditCap`] (the terms an offer promises, frozen on the lease at
//! fill and carried on [`crate::LeaseStart::sla`]), their bounds (named constants) and
//! [`SlaTerms::validate`] ([`SlaTermsError`] names the field), the credit arithmetic
//! ([`outage_ms`], [`sla_credit`], [`credit_cap`], [`price_difference_credit`]) and the
//! monthly availability tiers ([`availability_tier_pct`]). Pure: the ledger applies them in
//! `Ledger::failover` and at close (`close.rs`).
//!
//! Rules:
//! * Per lease: the buyer of a lease ended by `node_failure` is credited
//!   `multiple × charge(outage)`, the outage running from the failure (the lease's billing
//!   end = last heartbeat) until the replacement was ready, at most `outage_cap_s` (the cap
//!   when there was no replacement), billed per started second like a lease. A dearer
//!   replacement adds `(new − old price) × GPUs × min(remaining fixed term, 24 h)`. The sum
//!   is capped by the terms' [`CreditCap`]: the lease's collected charge (today's rule) or a
//!   percentage of its monthly fee (price × GPUs × 720 h). The supplier's payable funds it.
//!   Preemption with notice earns nothing. Seed 004: compensation as a multiple of the fee,
//!   not "extra time".
//! * Non-delivery (only when `non_delivery_credit`): a lease never ready earns the same
//!   credit with the outage measured from its provisioning deadline to the replacement's
//!   ready time (the cap without a replacement).
//! * A lease started without terms (`sla: None`) follows the ledger configuration's rule
//!   exactly as before issue 26 (`Config::sla_multiple`, `Config::sla_outage_cap_ms`, cap =
//!   charge so far, no non-delivery credit) and makes no monthly promise.
//! * Monthly: at close, per buyer × supplier, measured availability of the leases with terms
//!   below the strictest promise posts a tiered credit (10 / 25 / 50 % of the month's
//!   charges) minus the per-lease credits already granted for that month's outages.
//!
//! Delivery (issue 15, docs/settlement.md "Delivery"): the basis is billed time only. The
//! ledger starts a lease at its ready time, so "what the buyer paid for that lease" covers
//! ready → failure, never provisioning; the replacement counts as started when it is ready.

use crate::config::Config;
use crate::metering::{billed_seconds, cumulative_charge};
use crate::money::quantize;
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::{Deserialize, Serialize};

/// Lowest availability promise, basis points of the month (9000 = 90.00 %; issue 26).
pub const MIN_AVAILABILITY_BP: u16 = 9000;
/// Highest availability promise, basis points (9999 = 99.99 %; issue 26).
pub const MAX_AVAILABILITY_BP: u16 = 9999;
/// The promise of the default terms, basis points: 9900 = 99.00 %, "two nines", the
/// lowest tier the seeds name (明确承诺几个9). Leases without terms make no monthly promise.
pub const DEFAULT_AVAILABILITY_BP: u16 = 9900;
/// Lowest credit multiple of the outage charge (issue 26: 1–50).
pub const MIN_MULTIPLE: u16 = 1;
/// Highest credit multiple of the outage charge (issue 26: 1–50).
pub const MAX_MULTIPLE: u16 = 50;
/// Shortest outage cap, seconds (issue 26: 60 s – 24 h).
pub const MIN_OUTAGE_CAP_S: u32 = 60;
/// Longest outage cap, seconds (issue 26: 60 s – 24 h).
pub const MAX_OUTAGE_CAP_S: u32 = 86_400;
/// Lowest credit cap as a percentage of the monthly fee (issue 26: 10–100 %).
pub const MIN_MONTHLY_FEE_PCT: u8 = 10;
/// Highest credit cap as a percentage of the monthly fee (issue 26: 10–100 %).
pub const MAX_MONTHLY_FEE_PCT: u8 = 100;
/// Hours in the monthly fee a [`CreditCap::MonthlyFeePct`] is a percentage of: 720 h = 30
/// days (issue 26: "price × GPUs × 720 h").
pub const MONTHLY_FEE_HOURS: u32 = 720;
/// Longest time a dearer replacement's extra price is credited for, ms: 24 h (issue 26,
/// decided: "min(remaining fixed term, 24 h)").
pub const DEARER_REPLACEMENT_MAX_MS: i64 = 86_400_000;
/// Monthly tier 1: availability below the promise credits this percentage of the month's
/// charges.
pub const TIER_1_PCT: u8 = 10;
/// Monthly tier 2: availability more than [`TIER_2_BELOW_BP`] below the promise.
pub const TIER_2_PCT: u8 = 25;
/// How far below the promise tier 2 starts, basis points (100 = 1 percentage point).
pub const TIER_2_BELOW_BP: u16 = 100;
/// Monthly tier 3: availability more than [`TIER_3_BELOW_BP`] below the promise.
pub const TIER_3_PCT: u8 = 50;
/// How far below the promise tier 3 starts, basis points (500 = 5 percentage points).
pub const TIER_3_BELOW_BP: u16 = 500;

/// What an SLA credit is capped at (issue 26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CreditCap {
    /// What the buyer paid for the lease so far (its collected charge, net of a late end's
    /// correction): the rule before issue 26. A lease failing after 10 minutes earns at most
    /// 10 minutes' fee (the "赔时长" the seeds warn about).
    ChargeSoFar,
    /// This percentage (10..=100) of the lease's monthly fee, price per GPU-hour × GPUs ×
    /// [`MONTHLY_FEE_HOURS`]: 上限≥月服务费的50% is `MonthlyFeePct(50)`.
    MonthlyFeePct(u8),
}

impl CreditCap {
    /// Stable snake_case text for statements: `charge_so_far` or `monthly_fee_pct:<p>`.
    pub fn label(self) -> String {
        match self {
            CreditCap::ChargeSoFar => "charge_so_far".to_string(),
            CreditCap::MonthlyFeePct(p) => format!("monthly_fee_pct:{p}"),
        }
    }
}

/// The SLA terms of an offer (issue 26), frozen on each lease at fill like its price and
/// carried on [`crate::LeaseStart::sla`]. Check with [`SlaTerms::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlaTerms {
    /// Promised monthly availability, basis points of the month's committed time
    /// ([`MIN_AVAILABILITY_BP`]..=[`MAX_AVAILABILITY_BP`]; 9990 = 99.90 %). Measured at close
    /// per buyer × supplier × month (docs/settlement.md "Monthly availability credit").
    pub availability_bp: u16,
    /// Credit multiple of the outage charge ([`MIN_MULTIPLE`]..=[`MAX_MULTIPLE`]).
    pub multiple: u16,
    /// Longest outage credited per failure, seconds ([`MIN_OUTAGE_CAP_S`]..=
    /// [`MAX_OUTAGE_CAP_S`]); also the outage assumed when failover found no capacity.
    pub outage_cap_s: u32,
    /// What one credit is capped at.
    pub cap: CreditCap,
    /// Whether a lease never delivered earns a credit: `multiple × charge(min(outage cap,
    /// provisioning deadline → replacement ready))`, the cap without a replacement. Needs a
    /// [`CreditCap::MonthlyFeePct`] cap (under `ChargeSoFar` the cap of an undelivered lease
    /// is 0).
    pub non_delivery_credit: bool,
}

/// SLA terms out of bounds (issue 26: the gateway answers 422 naming [`Self::field`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlaTermsError {
    /// A numeric term outside its bounds.
    #[error("sla.{field} must be in [{min}, {max}], got {value}")]
    OutOfBounds {
        /// The field, as in [`SlaTerms`] (`availability_bp`, `multiple`, `outage_cap_s`,
        /// `cap`).
        field: &'static str,
        /// The refused value.
        value: u32,
        /// Lowest accepted value.
        min: u32,
        /// Highest accepted value.
        max: u32,
    },
    /// `non_delivery_credit` with a `charge_so_far` cap, which is always 0 for a lease never
    /// delivered: the promise could never pay.
    #[error(
        "sla.non_delivery_credit needs a monthly_fee_pct cap (a charge_so_far cap is 0 for a lease never delivered)"
    )]
    NonDeliveryNeedsFeeCap,
}

impl SlaTermsError {
    /// The offending field's name (for a 422 body).
    pub fn field(&self) -> &'static str {
        match self {
            SlaTermsError::OutOfBounds { field, .. } => field,
            SlaTermsError::NonDeliveryNeedsFeeCap => "non_delivery_credit",
        }
    }
}

impl SlaTerms {
    /// The terms that reproduce the rule of `config` (the rule before issue 26): promise
    /// [`DEFAULT_AVAILABILITY_BP`], the configured multiple and outage cap, cap
    /// [`CreditCap::ChargeSoFar`], no non-delivery credit. A configured multiple or cap
    /// outside the terms' bounds (the configuration allows 0–1000× and 0–30 days) is
    /// rounded and clamped into them; a lease started with `sla: None` uses the
    /// configuration's exact values instead.
    pub fn default_from(config: &Config) -> SlaTerms {
        let multiple = config
            .sla_multiple
            .round()
            .clamp(Decimal::from(MIN_MULTIPLE), Decimal::from(MAX_MULTIPLE));
        let multiple = multiple.to_u16().unwrap_or(MIN_MULTIPLE);
        let cap_s = (config.sla_outage_cap_ms / 1000)
            .clamp(i64::from(MIN_OUTAGE_CAP_S), i64::from(MAX_OUTAGE_CAP_S));
        SlaTerms {
            availability_bp: DEFAULT_AVAILABILITY_BP,
            multiple,
            outage_cap_s: u32::try_from(cap_s).unwrap_or(MAX_OUTAGE_CAP_S),
            cap: CreditCap::ChargeSoFar,
            non_delivery_credit: false,
        }
    }

    /// Checks every bound; the first field out of bounds is named.
    ///
    /// # Errors
    /// [`SlaTermsError::OutOfBounds`] naming `availability_bp`, `multiple`, `outage_cap_s` or
    /// `cap`; [`SlaTermsError::NonDeliveryNeedsFeeCap`] for `non_delivery_credit` with a
    /// `charge_so_far` cap.
    pub fn validate(&self) -> Result<(), SlaTermsError> {
        let check = |field, value: u32, min: u32, max: u32| {
            if (min..=max).contains(&value) {
                Ok(())
            } else {
                Err(SlaTermsError::OutOfBounds {
                    field,
                    value,
                    min,
                    max,
                })
            }
        };
        check(
            "availability_bp",
            u32::from(self.availability_bp),
            u32::from(MIN_AVAILABILITY_BP),
            u32::from(MAX_AVAILABILITY_BP),
        )?;
        check(
            "multiple",
            u32::from(self.multiple),
            u32::from(MIN_MULTIPLE),
            u32::from(MAX_MULTIPLE),
        )?;
        check(
            "outage_cap_s",
            self.outage_cap_s,
            MIN_OUTAGE_CAP_S,
            MAX_OUTAGE_CAP_S,
        )?;
        if let CreditCap::MonthlyFeePct(p) = self.cap {
            check(
                "cap",
                u32::from(p),
                u32::from(MIN_MONTHLY_FEE_PCT),
                u32::from(MAX_MONTHLY_FEE_PCT),
            )?;
        } else if self.non_delivery_credit {
            return Err(SlaTermsError::NonDeliveryNeedsFeeCap);
        }
        Ok(())
    }

    /// A one-line summary for statements, e.g. `promise 99.90% multiple 10x outage_cap
    /// 3600s cap monthly_fee_pct:50 non_delivery_credit yes`.
    pub fn summary(&self) -> String {
        format!(
            "promise {}% multiple {}x outage_cap {}s cap {} non_delivery_credit {}",
            Decimal::new(i64::from(self.availability_bp), 2),
            self.multiple,
            self.outage_cap_s,
            self.cap.label(),
            if self.non_delivery_credit {
                "yes"
            } else {
                "no"
            }
        )
    }
}

impl Default for SlaTerms {
    /// [`SlaTerms::default_from`] the default [`Config`]: 99.00 %, 10×, 1 h, charge so far,
    /// no non-delivery credit.
    fn default() -> Self {
        SlaTerms::default_from(&Config::default())
    }
}

/// The rule a lease's credit follows: its terms, or (no terms) the configuration's exact
/// values. Internal to the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) multiple: Decimal,
    pub(crate) outage_cap_ms: i64,
    pub(crate) cap: CreditCap,
    pub(crate) non_delivery_credit: bool,
}

impl Rule {
    /// The rule of a lease with `terms` (None: `config`'s rule before issue 26).
    pub(crate) fn of(terms: Option<&SlaTerms>, config: &Config) -> Rule {
        match terms {
            Some(t) => Rule {
                multiple: Decimal::from(t.multiple),
                outage_cap_ms: i64::from(t.outage_cap_s) * 1000,
                cap: t.cap,
                non_delivery_credit: t.non_delivery_credit,
            },
            None => Rule {
                multiple: config.sla_multiple,
                outage_cap_ms: config.sla_outage_cap_ms,
                cap: CreditCap::ChargeSoFar,
                non_delivery_credit: false,
            },
        }
    }
}

/// The CNY amount a credit under `cap` may not exceed, for a lease of `hourly` CNY per hour
/// (price × GPUs) that collected `collected` CNY: `collected` (never below 0) for
/// [`CreditCap::ChargeSoFar`]; `p % × hourly × 720` for [`CreditCap::MonthlyFeePct`]`(p)`.
///
/// Example: 8 × H100 at 22.50 (180 CNY/h), `MonthlyFeePct(50)`: 0.5 × 180 × 720 = 64 800.
pub fn credit_cap(cap: CreditCap, hourly: Decimal, collected: Decimal) -> Decimal {
    match cap {
        CreditCap::ChargeSoFar => collected.max(Decimal::ZERO),
        CreditCap::MonthlyFeePct(p) => quantize(
            hourly * Decimal::from(MONTHLY_FEE_HOURS) * Decimal::from(p) / Decimal::ONE_HUNDRED,
        ),
    }
}

/// The extra a dearer replacement costs the buyer, CNY: `(new − old price per GPU-hour) ×
/// gpus × ceil(min(remaining, 24 h) / 1 s) / 3600`, 0 when the replacement is not dearer.
/// `remaining_ms` is the failed lease's fixed term left when the replacement was ready
/// (booked end − replacement ready, at least 0); `None` for a lease with no fixed end, which
/// counts as the full [`DEARER_REPLACEMENT_MAX_MS`].
///
/// Example: 8 GPUs, 22.50 → 24.00, 2 h of term left: 1.50 × 8 × 2 = 24.00.
pub fn price_difference_credit(
    old_price: Decimal,
    new_price: Decimal,
    gpus: u32,
    remaining_ms: Option<i64>,
) -> Decimal {
    if new_price <= old_price {
        return Decimal::ZERO;
    }
    let ms = remaining_ms.map_or(DEARER_REPLACEMENT_MAX_MS, |r| {
        r.clamp(0, DEARER_REPLACEMENT_MAX_MS)
    });
    cumulative_charge(
        (new_price - old_price) * Decimal::from(gpus),
        billed_seconds(ms),
    )
}

/// The monthly tier for `outage_ms` of `committed_ms` (both ms) under a promise of
/// `promise_bp`: the percentage of the month's charges credited, 0 when availability
/// `1 − outage / committed` is at or above the promise (or nothing was committed). Tiers:
/// below the promise [`TIER_1_PCT`]; more than [`TIER_2_BELOW_BP`] below it
/// [`TIER_2_PCT`]; more than [`TIER_3_BELOW_BP`] below it [`TIER_3_PCT`]. Exact (integer
/// comparison, no rounding of the availability).
///
/// Example: promise 9990, 10 h down in 720 h committed: 98.61 % < 98.90 % → 25.
pub fn availability_tier_pct(promise_bp: u16, outage_ms: i64, committed_ms: i64) -> u8 {
    if committed_ms <= 0 {
        return 0;
    }
    let up = i128::from((committed_ms - outage_ms.clamp(0, committed_ms)).max(0));
    let committed = i128::from(committed_ms);
    // availability < t bp  ⇔  up × 10 000 < t × committed
    let below = |t: i32| up * 10_000 < i128::from(t) * committed;
    let p = i32::from(promise_bp);
    if below(p - i32::from(TIER_3_BELOW_BP)) {
        TIER_3_PCT
    } else if below(p - i32::from(TIER_2_BELOW_BP)) {
        TIER_2_PCT
    } else if below(p) {
        TIER_1_PCT
    } else {
        0
    }
}

/// Outage in ms from the failure at `failure_ms` until `replacement_start_ms`
/// (both ms since epoch), clamped to [0, `cap_ms`]; `cap_ms` when there was
/// no replacement (`None`).
pub fn outage_ms(failure_ms: i64, replacement_start_ms: Option<i64>, cap_ms: i64) -> i64 {
    match replacement_start_ms {
        Some(s) => s.saturating_sub(failure_ms).clamp(0, cap_ms.max(0)),
        None => cap_ms.max(0),
    }
}

/// SLA credit in CNY: `multiple × hourly × ceil(outage_ms / 1000) / 3600`,
/// capped at `lease_collected` (CNY the buyer paid for the lease).
/// `hourly` is price per GPU-hour × GPUs (CNY per hour).
///
/// Example: H100 at 22.50 CNY/GPU-hour × 8 GPUs, failover after 90 s,
/// multiple 10 → 10 × 180 × 90 / 3600 = 45.00 CNY (if the lease collected
/// at least that much).
pub fn sla_credit(
    hourly: Decimal,
    outage_ms: i64,
    multiple: Decimal,
    lease_collected: Decimal,
) -> Decimal {
    let base = cumulative_charge(hourly, billed_seconds(outage_ms));
    let credit = quantize(base * multiple);
    credit.min(lease_collected.max(Decimal::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).expect("test literal")
    }

    #[test]
    fn outage_runs_from_failure_to_replacement_capped() {
        assert_eq!(outage_ms(1_000, Some(91_000), 3_600_000), 90_000);
        assert_eq!(outage_ms(1_000, Some(10_000_000), 3_600_000), 3_600_000);
        assert_eq!(outage_ms(1_000, None, 3_600_000), 3_600_000);
        // A replacement that started before the failure report: no outage.
        assert_eq!(outage_ms(5_000, Some(1_000), 3_600_000), 0);
    }

    #[test]
    fn credit_is_a_multiple_of_the_outage_charge_capped_at_collected() {
        // 180 CNY/h, 90 s -> 4.50, x10 = 45.00
        assert_eq!(sla_credit(d("180"), 90_000, d("10"), d("1000")), d("45"));
        // 0.4 s outage is billed as one second: 180/3600 = 0.05, x10 = 0.50
        assert_eq!(sla_credit(d("180"), 400, d("10"), d("1000")), d("0.5"));
        // capped at what the lease collected
        assert_eq!(
            sla_credit(d("180"), 90_000, d("10"), d("12.34")),
            d("12.34")
        );
        assert_eq!(sla_credit(d("180"), 90_000, d("10"), d("-1")), d("0"));
    }

    #[test]
    fn tiers_compare_availability_exactly() {
        const H: i64 = 3_600_000;
        // Promise 99.90 %: 720 h committed allows 0.72 h (2592 s) down.
        assert_eq!(availability_tier_pct(9990, 2_592_000, 720 * H), 0);
        assert_eq!(availability_tier_pct(9990, 2_592_001, 720 * H), TIER_1_PCT);
        // 98.90 % exactly (7.92 h down) is tier 1; below it tier 2.
        assert_eq!(
            availability_tier_pct(9990, 7_920 * 1000, 720 * H),
            TIER_1_PCT
        );
        assert_eq!(availability_tier_pct(9990, 28_512_001, 720 * H), TIER_2_PCT);
        // 94.90 % exactly (36.72 h down) is tier 2; below it tier 3.
        assert_eq!(
            availability_tier_pct(9990, 36_720 * 1000, 720 * H),
            TIER_2_PCT
        );
        assert_eq!(
            availability_tier_pct(9990, 132_192_001, 720 * H),
            TIER_3_PCT
        );
        assert_eq!(availability_tier_pct(9990, 0, 0), 0);
    }

    #[test]
    fn caps_and_defaults() {
        assert_eq!(
            credit_cap(CreditCap::ChargeSoFar, d("180"), d("30")),
            d("30")
        );
        assert_eq!(
            credit_cap(CreditCap::ChargeSoFar, d("180"), d("-1")),
            d("0")
        );
        assert_eq!(
            credit_cap(CreditCap::MonthlyFeePct(50), d("180"), d("30")),
            d("64800")
        );
        // A configuration outside the terms' bounds is clamped into them.
        let config = Config {
            sla_multiple: d("1000"),
            sla_outage_cap_ms: 0,
            ..Config::default()
        };
        let t = SlaTerms::default_from(&config);
        assert_eq!(
            (t.multiple, t.outage_cap_s),
            (MAX_MULTIPLE, MIN_OUTAGE_CAP_S)
        );
        assert_eq!(t.validate(), Ok(()));
    }
}
