//! Trial balance (issue 3): every account's opening balance, debits,
//! credits and closing balance for a period, with the zero-sum checks.
//!
//! The accounts listed are the fixed ones (`external_cash`, `platform_fee`, `sla_credits`)
//! and those with a journal transfer or a lease effect before the period end, so an account
//! first seen after a close adds no row to the closed period (issue 17).
//!
//! Rows print `round_fen` of each exact value, so an account's opening and closing are
//! the statements' opening and closing (and the app's balance): they are not allocated.
//! The `rounding` row ([`rounding_difference`], issue 17) is the difference between the
//! printed column total (the rounded exact total) and the sum of printed rows, so every
//! printed column adds up. The checks are made on exact values.
//!
//! Issue 25: a row printed opening 0.00, credits 0.01, closing 0.00 (each cell the rounded
//! exact value) did not add up as printed. Each row therefore carries its own rounding
//! difference (尾差) in a `rounding` column, `closing − (opening + credits − debits)` on the
//! printed figures, so `opening + credits − debits + rounding = closing` holds for every
//! printed row (the `rounding` and `total` rows included, and the column adds up because
//! the identity is linear). Balances are credits − debits, as in the ledger.

use super::table::{Cell, RowBuilder, Table};
use super::{Period, PeriodInfo};
use crate::error::SettlementError;
use crate::ledger::Ledger;
use crate::money::{FEN_DP, round_fen, rounding_difference};
use rust_decimal::Decimal;
use serde::Serialize;

/// One trial-balance row. Amounts printed CNY; balances are credits − debits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrialRow {
    /// Account name (`buyer:7`, `platform_fee`, ...), `rounding` or `total`.
    pub account: String,
    /// Balance at the period start.
    pub opening: Decimal,
    /// Debits in the period.
    pub debits: Decimal,
    /// Credits in the period.
    pub credits: Decimal,
    /// Balance at the period end.
    pub closing: Decimal,
    /// The row's printed rounding difference (issue 25):
    /// `closing − (opening + credits − debits)` on the printed figures, so the row adds up
    /// as printed. Zero unless sub-fen amounts round apart; at most ±0.02.
    pub rounding: Decimal,
}

impl TrialRow {
    /// A row of printed (rounded) figures, its `rounding` the difference that makes
    /// `opening + credits − debits + rounding = closing` hold as printed.
    fn printed(
        account: String,
        opening: Decimal,
        debits: Decimal,
        credits: Decimal,
        closing: Decimal,
    ) -> Self {
        // Exact on fen figures; `rounding_difference` only fixes the scale and −0.00.
        let rounding = rounding_difference(closing, [opening, credits, -debits], FEN_DP);
        TrialRow {
            account,
            opening,
            debits,
            credits,
            closing,
            rounding,
        }
    }
}

/// One zero-sum check, on exact values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrialCheck {
    /// What is checked.
    pub name: String,
    /// The exact value that must be zero, CNY.
    pub value: Decimal,
    /// Whether it is zero.
    pub ok: bool,
}

/// The trial balance for one period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrialBalance {
    /// The period.
    pub period: PeriodInfo,
    /// One row per account known by the period end (the fixed accounts and those with
    /// a transfer or lease effect before it), in account order.
    pub rows: Vec<TrialRow>,
    /// Printed rounding difference per column.
    pub rounding: TrialRow,
    /// Printed column totals (opening and closing are 0.00 when balanced).
    pub totals: TrialRow,
    /// Zero-sum checks.
    pub checks: Vec<TrialCheck>,
}

impl TrialBalance {
    /// Whether every check passed.
    pub fn balanced(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

impl Ledger {
    /// The trial balance for `period` on the service-time view.
    ///
    /// # Errors
    /// [`SettlementError::NotAccrued`] if an active lease is not accrued
    /// through the period end.
    pub fn trial_balance(&self, period: &Period) -> Result<TrialBalance, SettlementError> {
        self.check_accrued(self.active.iter(), period.to_ms)?;
        let accounts = self.all_turnover(period.from_ms, period.to_ms);
        let mut rows = Vec::new();
        let (mut so, mut sd, mut sc, mut scl) =
            (Decimal::ZERO, Decimal::ZERO, Decimal::ZERO, Decimal::ZERO);
        let mut worst_identity = Decimal::ZERO;
        for (account, (opening, t)) in &accounts {
            let opening = *opening;
            let closing = opening + t.net();
            so += opening;
            sd += t.debits;
            sc += t.credits;
            scl += closing;
            let identity = (closing - (opening + t.credits - t.debits)).abs();
            worst_identity = worst_identity.max(identity);
            rows.push(TrialRow::printed(
                account.to_string(),
                round_fen(opening),
                round_fen(t.debits),
                round_fen(t.credits),
                round_fen(closing),
            ));
        }
        let totals = TrialRow::printed(
            "total".to_string(),
            round_fen(so),
            round_fen(sd),
            round_fen(sc),
            round_fen(scl),
        );
        let rounding_of = |total: Decimal, f: fn(&TrialRow) -> Decimal| {
            rounding_difference(total, rows.iter().map(f), FEN_DP)
        };
        let rounding = TrialRow::printed(
            "rounding".to_string(),
            rounding_of(totals.opening, |r| r.opening),
            rounding_of(totals.debits, |r| r.debits),
            rounding_of(totals.credits, |r| r.credits),
            rounding_of(totals.closing, |r| r.closing),
        );
        // Normalised: an exact sum's scale follows its inputs' (a later accrual can add
        // places), and a closed period's report must print the same bytes (issue 17).
        let check = |name: &str, value: Decimal| TrialCheck {
            name: name.to_string(),
            value: value.normalize(),
            ok: value.is_zero(),
        };
        let checks = vec![
            check("sum of opening balances is zero", so),
            check("sum of debits equals sum of credits", sd - sc),
            check("sum of closing balances is zero", scl),
            check(
                "closing = opening + credits - debits for every account",
                worst_identity,
            ),
        ];
        Ok(TrialBalance {
            period: period.info(),
            rows,
            rounding,
            totals,
            checks,
        })
    }
}

/// CSV/XLSX columns of the trial balance, in order.
pub const TRIAL_COLUMNS: [&str; 9] = [
    "row",
    "account",
    "opening_cny",
    "debits_cny",
    "credits_cny",
    "closing_cny",
    "rounding_cny",
    "check_value_cny",
    "check_ok",
];

impl TrialBalance {
    /// The trial balance as a table with [`TRIAL_COLUMNS`]: `period`, one
    /// `account` row per account, `rounding`, `total`, then one `check` row
    /// per check (name in `account`, exact value, `true`/`false`).
    pub fn table(&self) -> Table {
        let tz = self.period.tz();
        let h = &TRIAL_COLUMNS[..];
        let line = |kind: &str, r: &TrialRow| {
            RowBuilder::new(h)
                .set("row", Cell::Text(kind.to_string()))
                .set("account", Cell::Text(r.account.clone()))
                .set("opening_cny", Cell::Money(r.opening))
                .set("debits_cny", Cell::Money(r.debits))
                .set("credits_cny", Cell::Money(r.credits))
                .set("closing_cny", Cell::Money(r.closing))
                .set("rounding_cny", Cell::Money(r.rounding))
                .build()
        };
        let mut rows = vec![
            RowBuilder::new(h)
                .set("row", Cell::Text("period".to_string()))
                .set("account", Cell::Text(self.period.time_zone.clone()))
                .set(
                    "opening_cny",
                    Cell::Time {
                        ms: self.period.from_ms,
                        tz,
                    },
                )
                .set(
                    "closing_cny",
                    Cell::Time {
                        ms: self.period.to_ms,
                        tz,
                    },
                )
                .build(),
        ];
        rows.extend(self.rows.iter().map(|r| line("account", r)));
        rows.push(line("rounding", &self.rounding));
        rows.push(line("total", &self.totals));
        for c in &self.checks {
            rows.push(
                RowBuilder::new(h)
                    .set("row", Cell::Text("check".to_string()))
                    .set("account", Cell::Text(c.name.clone()))
                    .set("check_value_cny", Cell::Number(c.value))
                    .set("check_ok", Cell::Text(c.ok.to_string()))
                    .build(),
            );
        }
        Table {
            name: "trial-balance".to_string(),
            header: TRIAL_COLUMNS.to_vec(),
            rows,
        }
    }
}
