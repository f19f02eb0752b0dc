//! General-ledger export (issue 17, docs/settlement.md "General-ledger export"): every
//! movement of a period `[from, to)` as journal entries that accounting software imports,
//! one row per leg (a debit or a credit on one GL account), in a fixed chart of accounts.
//!
//! Layout: the chart ([`GlAccount`], [`CASH`], [`BUYER_BALANCES`], [`SUPPLIER_PAYABLES`],
//! [`SLA_CLEARING`], [`FEE_REVENUE`], [`OUTPUT_VAT`], [`GOODWILL_EXPENSE`], [`ROUNDING`],
//! [`gl_account`]), the export ([`GlExport`], [`GlEntry`],
//! [`GlLeg`], [`GlAccountTotal`]), `Ledger::gl_export`, and the table ([`GL_COLUMNS`]).
//!
//! Entries, on the service-time view of the other reports (so the export's exact turnover
//! per account is the trial balance's):
//! * each retained journal transfer posted in the period (deposit, payout, adjustment, SLA
//!   funding and credit) is one entry of two legs, numbered by its transfer id;
//! * each lease slice with money collected in the period is one entry of up to four legs:
//!   the charge collected (buyer balance → supplier payable) and the platform fee on it
//!   (supplier payable → fee revenue). The ledger does not retain accrual transfers (charge,
//!   fee, refund), and a refund only shrinks the slice of the seconds it refunds, so the
//!   slice is the entry. It is dated at the end of the slice's service in the period (the
//!   period's last millisecond for a lease that runs on).
//!
//! Rules:
//! * Entries are ordered by posting time, then transfers before lease slices, then by id;
//!   `entry` numbers them 1, 2, 3, … in that order.
//! * Each ledger account's legs on each side are allocated over the whole export with
//!   [`crate::money::allocate_fen`] (largest remainder, in entry order): an account's printed
//!   debits and credits are `round(Σ exact)`, the trial balance's row for it, and each leg is
//!   within a fen of its exact amount. (Rounded alone, two slices of 0.195556 printed 0.20
//!   each, and the buyer's GL turnover was 0.01 over the trial balance and its statement.)
//! * Each entry balances in print: where its allocated debits and credits differ (by a fen
//!   or so, a slice whose charge rounded up on the buyer's side and down on the supplier's),
//!   a `rounding` leg on [`ROUNDING`] makes up the difference. Over the export, the rounding
//!   account's debits less its credits equal the trial balance's `rounding` row's debits
//!   less its credits (the fen by which its rounded rows miss its rounded totals).
//! * Output VAT (issue 25): the platform fee is VAT-inclusive (docs/settlement.md
//!   "Invoices"), so each slice's fee credit is split into [`OUTPUT_VAT`] (2221 应交增值税-
//!   销项税额) and net revenue on [`FEE_REVENUE`]. The VAT legs (`fee × r / (1 + r)`) are
//!   allocated over the export like any account's legs, and each net leg is the printed fee
//!   less its printed VAT, so 6001 + 2221 print exactly the trial balance's `platform_fee`
//!   credits. The rate is [`DEFAULT_VAT_RATE`] unless the caller passes another
//!   ([`Ledger::gl_export_with_vat`]).
//! * Goodwill (issue 25): an adjustment debiting `platform_fee` (a goodwill credit, a
//!   write-off, a correction out of fee revenue) debits [`GOODWILL_EXPENSE`] (6601 销售费用),
//!   not fee revenue, which went negative in a month of goodwill.
//! * A closed period's export regenerates byte for byte: transfers never post into closed
//!   time and closed lease slices never change (docs/settlement.md "After close").

use super::invoice::{DEFAULT_VAT_RATE, MAX_VAT_RATE};
use super::table::{Cell, Table};
use super::{LeaseSlice, Period, PeriodInfo, format_local, local_naive};
use crate::close::PeriodId;
use crate::error::SettlementError;
use crate::ids::{Account, AccountId, LeaseId, TransferId};
use crate::ledger::{Ledger, Transfer, TransferKind};
use crate::money::{allocate_fen, round_fen};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde::Serialize;
use std::collections::BTreeMap;

/// One account of the GL chart: a code and a name, as accounting software keys them.
/// Codes follow the Chinese enterprise chart of accounts (《企业会计准则——应用指南》附录
/// 会计科目): 1xxx assets, 2xxx liabilities, 6xxx profit and loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct GlAccount {
    /// Account code, four digits (e.g. `"1002"`).
    pub code: &'static str,
    /// Account name, English.
    pub name: &'static str,
}

/// 1002 银行存款, bank deposits: the ledger's `external_cash`, money in the platform's bank
/// and payment-provider accounts. Debited by deposits, credited by payouts, refunds to the
/// bank and SLA cash-outs; its debit balance is the cash held (the ledger's balance negated).
pub const CASH: GlAccount = GlAccount {
    code: "1002",
    name: "Bank deposits (external cash)",
};

/// 2203 预收账款, advances from customers: the buyers' prepaid balances (`buyer:<id>`), one
/// sub-account per buyer id. Credited by deposits and SLA credits, debited by charges.
pub const BUYER_BALANCES: GlAccount = GlAccount {
    code: "2203",
    name: "Buyer prepaid balances",
};

/// 2202 应付账款, accounts payable: what the platform owes suppliers (`supplier:<id>`), one
/// sub-account per supplier id. Credited by charges collected, debited by fees, SLA funding
/// and payouts.
pub const SUPPLIER_PAYABLES: GlAccount = GlAccount {
    code: "2202",
    name: "Supplier payables",
};

/// 2241 其他应付款, other payables: the SLA credit clearing account (`sla_credits`). The
/// supplier funds it and the buyer receives the credit in the same input, so it nets to zero.
pub const SLA_CLEARING: GlAccount = GlAccount {
    code: "2241",
    name: "SLA credit clearing",
};

/// 6001 主营业务收入, revenue: the platform fee (`platform_fee`), net of output VAT
/// ([`OUTPUT_VAT`]). Goodwill credits and write-offs are not borne by it but by
/// [`GOODWILL_EXPENSE`] (issue 25).
pub const FEE_REVENUE: GlAccount = GlAccount {
    code: "6001",
    name: "Platform fee revenue",
};

/// 2221 应交增值税-销项税额, output VAT on the platform fee (issue 25): the VAT part
/// `fee × r / (1 + r)` of each fee credit. It is part of the ledger's `platform_fee`.
pub const OUTPUT_VAT: GlAccount = GlAccount {
    code: "2221",
    name: "Output VAT payable",
};

/// 6601 销售费用, goodwill credits and write-offs the platform grants (issue 25): the debit
/// of an adjustment out of `platform_fee`. Part of the ledger's `platform_fee`.
pub const GOODWILL_EXPENSE: GlAccount = GlAccount {
    code: "6601",
    name: "Goodwill credits and write-offs",
};

/// 6603 财务费用 (尾差), rounding differences: the fen by which an entry's allocated debits
/// and credits differ (module docs). No ledger account maps to it.
pub const ROUNDING: GlAccount = GlAccount {
    code: "6603",
    name: "Rounding differences",
};

/// The GL account of a ledger account, with its sub-account (the market account id of a
/// buyer or supplier; `None` for the platform's own accounts).
pub fn gl_account(account: Account) -> (GlAccount, Option<AccountId>) {
    match account {
        Account::ExternalCash => (CASH, None),
        Account::PlatformFee => (FEE_REVENUE, None),
        Account::SlaCredits => (SLA_CLEARING, None),
        Account::Buyer(id) => (BUYER_BALANCES, Some(id)),
        Account::Supplier(id) => (SUPPLIER_PAYABLES, Some(id)),
    }
}

/// One leg of an entry: a debit or a credit on one account. Amounts printed CNY (0.01);
/// the other side is 0.00.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GlLeg {
    /// GL account code ([`GlAccount::code`]).
    pub account_code: &'static str,
    /// GL account name.
    pub account_name: &'static str,
    /// Sub-account: the buyer or supplier id, if any.
    pub sub_account: Option<AccountId>,
    /// The ledger account (`buyer:7`, `external_cash`, …).
    pub ledger_account: String,
    /// Debit, CNY (0.00 on a credit leg).
    pub debit: Decimal,
    /// Credit, CNY (0.00 on a debit leg).
    pub credit: Decimal,
    /// What the leg is: the transfer kind (`deposit`, `payout`, `adjustment`, `sla_funding`,
    /// `sla_credit`), on a lease slice `charge` or `fee`, or `rounding` ([`ROUNDING`]).
    pub kind: &'static str,
}

/// One journal entry: legs whose debits equal their credits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GlEntry {
    /// Entry number in the export, 1, 2, 3, … (posting order).
    pub entry: u64,
    /// The ledger transfer, for a journal transfer; `None` for a lease slice.
    pub transfer_id: Option<TransferId>,
    /// Posting time, ms since epoch.
    pub posted_ms: i64,
    /// Posting time, local ISO-8601 with offset in the period's zone.
    pub posted_local: String,
    /// Posting date, local `YYYY-MM-DD` in the period's zone.
    pub date: String,
    /// The lease (a lease slice, or an SLA transfer).
    pub lease: Option<LeaseId>,
    /// The closed period this entry restates (`Transfer::restates`), if any.
    pub restates: Option<PeriodId>,
    /// Memo: kind, key and memo of the transfer (adjustment reason and reference), or the
    /// lease, SKU, GPUs and seconds of a slice; `; restates period <id>` where set.
    pub memo: String,
    /// The legs, debits first.
    pub legs: Vec<GlLeg>,
}

/// Printed turnover of one GL account and sub-account over the export (sums of its legs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GlAccountTotal {
    /// GL account code.
    pub account_code: &'static str,
    /// GL account name.
    pub account_name: &'static str,
    /// Sub-account, if any.
    pub sub_account: Option<AccountId>,
    /// The ledger account (`buyer:7`, `external_cash`, …), as the trial balance names it.
    pub ledger_account: String,
    /// Σ debit legs, CNY.
    pub debits: Decimal,
    /// Σ credit legs, CNY.
    pub credits: Decimal,
}

/// The GL export of one period. Amounts printed CNY (0.01).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GlExport {
    /// The period.
    pub period: PeriodInfo,
    /// The entries, in posting order.
    pub entries: Vec<GlEntry>,
    /// Printed turnover per GL account and sub-account, in code then sub-account order.
    pub accounts: Vec<GlAccountTotal>,
    /// Σ debit legs of every entry, CNY.
    pub total_debits: Decimal,
    /// Σ credit legs of every entry, CNY: always equal to `total_debits`.
    pub total_credits: Decimal,
}

/// An entry before numbering and printing: exact legs `(account, debit?, amount, kind)`.
struct Draft {
    order: (i64, u8, u64),
    transfer_id: Option<TransferId>,
    posted_ms: i64,
    lease: Option<LeaseId>,
    restates: Option<PeriodId>,
    memo: String,
    legs: Vec<(Account, bool, Decimal, &'static str)>,
}

/// The kind name of a journal transfer's legs.
fn transfer_kind(kind: &TransferKind) -> &'static str {
    match kind {
        TransferKind::Deposit { .. } => "deposit",
        TransferKind::Payout { .. } => "payout",
        TransferKind::Adjustment { .. } => "adjustment",
        TransferKind::Charge { .. } => "charge",
        TransferKind::Fee { .. } => "fee",
        TransferKind::Refund { .. } => "refund",
        TransferKind::FeeRefund { .. } => "fee_refund",
        TransferKind::SlaFunding { .. } => "sla_funding",
        TransferKind::SlaCredit { .. } => "sla_credit",
    }
}

/// The memo of a journal transfer: `<kind> <key>`, `adjustment <key>: <memo>` or
/// `<kind> lease <id>`, then `; restates period <id>` where set.
fn transfer_memo(t: &Transfer) -> String {
    let name = transfer_kind(&t.kind);
    let mut memo = match &t.kind {
        TransferKind::Deposit { key } | TransferKind::Payout { key } => format!("{name} {key}"),
        TransferKind::Adjustment { key, memo } => format!("{name} {key}: {memo}"),
        TransferKind::Charge { lease }
        | TransferKind::Fee { lease }
        | TransferKind::Refund { lease }
        | TransferKind::FeeRefund { lease }
        | TransferKind::SlaFunding { lease }
        | TransferKind::SlaCredit { lease } => format!("{name} lease {lease}"),
    };
    if let Some(p) = t.restates {
        memo.push_str(&format!("; restates period {p}"));
    }
    memo
}

impl Draft {
    fn of_transfer(t: &Transfer) -> Draft {
        let kind = transfer_kind(&t.kind);
        Draft {
            order: (t.at_ms, 0, t.id.0),
            transfer_id: Some(t.id),
            posted_ms: t.at_ms,
            lease: Ledger::sla_lease(&t.kind),
            restates: t.restates,
            memo: transfer_memo(t),
            legs: vec![
                (t.debit, true, t.amount, kind),
                (t.credit, false, t.amount, kind),
            ],
        }
    }

    /// The entry of slice `s`, dated at the end of its service in `period`; `None` when
    /// nothing was collected (an unpaid slice moves no money).
    fn of_slice(s: &LeaseSlice, period: &Period) -> Option<Draft> {
        if s.collected.is_zero() && s.fee.is_zero() {
            return None;
        }
        let posted_ms = s.end_ms.min(period.to_ms - 1).max(s.start_ms);
        let (buyer, supplier) = (Account::Buyer(s.buyer), Account::Supplier(s.supplier));
        let mut legs = Vec::with_capacity(4);
        for (account, debit, amount, kind) in [
            (buyer, true, s.collected, "charge"),
            (supplier, true, s.fee, "fee"),
            (supplier, false, s.collected, "charge"),
            (Account::PlatformFee, false, s.fee, "fee"),
        ] {
            if !amount.is_zero() {
                legs.push((account, debit, amount, kind));
            }
        }
        let mut memo = format!(
            "charge lease {}: {} {} GPUs {} s",
            s.lease, s.sku, s.gpus, s.billed_seconds
        );
        if !s.unpaid.is_zero() {
            memo.push_str(&format!("; unpaid {} not collected", round_fen(s.unpaid)));
        }
        Some(Draft {
            order: (posted_ms, 1, s.lease.0),
            transfer_id: None,
            posted_ms,
            lease: Some(s.lease),
            restates: None,
            memo,
            legs,
        })
    }

    /// The printed entry number `entry`, its legs printed as `printed` (the allocation,
    /// module docs), debits first, and a `rounding` leg where they do not balance.
    fn print(self, entry: u64, tz: Tz, printed: &[Decimal], vat: &[Option<Decimal>]) -> GlEntry {
        let zero = round_fen(Decimal::ZERO);
        let mut legs: Vec<GlLeg> = Vec::with_capacity(self.legs.len() + 2);
        let mut net = Decimal::ZERO;
        for debit_side in [true, false] {
            for (i, (account, debit, _, kind)) in self.legs.iter().enumerate() {
                if *debit != debit_side {
                    continue;
                }
                let (mut gl, sub) = gl_account(*account);
                if *account == Account::PlatformFee && *debit && *kind == "adjustment" {
                    gl = GOODWILL_EXPENSE;
                }
                let amount = printed.get(i).copied().unwrap_or(zero);
                net += if *debit { amount } else { -amount };
                // A fee credit splits into net revenue and output VAT (module docs).
                let mut parts = vec![(gl, amount, *kind)];
                if let Some(Some(v)) = vat.get(i) {
                    parts = vec![(gl, amount - v, *kind), (OUTPUT_VAT, *v, "vat")];
                }
                for (gl, amount, kind) in parts {
                    if amount.is_zero() && kind == "vat" {
                        continue;
                    }
                    // A net leg pushed below zero by its VAT's fen prints on the other side.
                    let side = *debit != amount.is_sign_negative();
                    let amount = amount.abs();
                    legs.push(GlLeg {
                        account_code: gl.code,
                        account_name: gl.name,
                        sub_account: sub,
                        ledger_account: account.to_string(),
                        debit: if side { amount } else { zero },
                        credit: if side { zero } else { amount },
                        kind,
                    });
                }
            }
        }
        if !net.is_zero() {
            // Debits over credits: the rounding account is credited the difference.
            let fix = round_fen(net.abs());
            legs.push(GlLeg {
                account_code: ROUNDING.code,
                account_name: ROUNDING.name,
                sub_account: None,
                ledger_account: "rounding".to_string(),
                debit: if net < Decimal::ZERO { fix } else { zero },
                credit: if net > Decimal::ZERO { fix } else { zero },
                kind: "rounding",
            });
        }
        GlEntry {
            entry,
            transfer_id: self.transfer_id,
            posted_ms: self.posted_ms,
            posted_local: format_local(self.posted_ms, tz),
            date: local_naive(self.posted_ms, tz)
                .map(|t| t.date().to_string())
                .unwrap_or_default(),
            lease: self.lease,
            restates: self.restates,
            memo: self.memo,
            legs,
        }
    }
}

impl Ledger {
    /// The general-ledger export of `period`: every journal transfer posted in it and every
    /// lease slice with money collected in it, as balanced entries in the GL chart.
    ///
    /// # Errors
    /// [`SettlementError::NotAccrued`] if an active lease is not accrued through the period
    /// end.
    pub fn gl_export(&self, period: &Period) -> Result<GlExport, SettlementError> {
        self.gl_export_with_vat(period, DEFAULT_VAT_RATE)
    }

    /// [`Ledger::gl_export`] with output VAT at `vat_rate` (a fraction in [0, 1)) on the
    /// platform fee.
    ///
    /// # Errors
    /// [`SettlementError::NotAccrued`] as [`Ledger::gl_export`];
    /// [`SettlementError::InvalidConfig`] if `vat_rate` is not in [0, 1).
    pub fn gl_export_with_vat(
        &self,
        period: &Period,
        vat_rate: Decimal,
    ) -> Result<GlExport, SettlementError> {
        if vat_rate.is_sign_negative() || vat_rate >= MAX_VAT_RATE {
            return Err(SettlementError::InvalidConfig(
                "vat_rate must be a fraction in [0, 1), e.g. 0.06 for 6 %",
            ));
        }
        let slices = self.lease_slices(period)?;
        let mut drafts: Vec<Draft> = self
            .books
            .journal
            .iter()
            .filter(|t| t.at_ms >= period.from_ms && t.at_ms < period.to_ms)
            .map(Draft::of_transfer)
            .collect();
        drafts.extend(slices.iter().filter_map(|s| Draft::of_slice(s, period)));
        drafts.sort_by_key(|d| d.order);
        // Each ledger account's legs on each side, allocated over the export (module docs).
        let mut places: BTreeMap<(Account, bool), Vec<(usize, usize)>> = BTreeMap::new();
        for (i, d) in drafts.iter().enumerate() {
            for (j, leg) in d.legs.iter().enumerate() {
                places.entry((leg.0, leg.1)).or_default().push((i, j));
            }
        }
        let mut printed: Vec<Vec<Decimal>> = drafts
            .iter()
            .map(|d| vec![Decimal::ZERO; d.legs.len()])
            .collect();
        for at in places.into_values() {
            let exact: Vec<Decimal> = at.iter().map(|&(i, j)| drafts[i].legs[j].2).collect();
            for ((i, j), p) in at.into_iter().zip(allocate_fen(&exact).lines) {
                printed[i][j] = p;
            }
        }
        // Output VAT of every fee credit, allocated over the export (module docs).
        let mut vat: Vec<Vec<Option<Decimal>>> =
            drafts.iter().map(|d| vec![None; d.legs.len()]).collect();
        let fee_legs: Vec<(usize, usize)> = drafts
            .iter()
            .enumerate()
            .flat_map(|(i, d)| {
                d.legs.iter().enumerate().filter_map(move |(j, l)| {
                    (l.0 == Account::PlatformFee && !l.1 && l.3 == "fee").then_some((i, j))
                })
            })
            .collect();
        let exact: Vec<Decimal> = fee_legs
            .iter()
            .map(|&(i, j)| drafts[i].legs[j].2 * vat_rate / (Decimal::ONE + vat_rate))
            .collect();
        for ((i, j), v) in fee_legs.into_iter().zip(allocate_fen(&exact).lines) {
            vat[i][j] = Some(v);
        }
        let entries: Vec<GlEntry> = (1u64..)
            .zip(drafts.into_iter().zip(printed).zip(vat))
            .map(|(n, ((d, p), v))| d.print(n, period.tz, &p, &v))
            .collect();
        let mut sums: BTreeMap<(&'static str, Option<AccountId>), GlAccountTotal> = BTreeMap::new();
        for leg in entries.iter().flat_map(|e| &e.legs) {
            let t = sums
                .entry((leg.account_code, leg.sub_account))
                .or_insert_with(|| GlAccountTotal {
                    account_code: leg.account_code,
                    account_name: leg.account_name,
                    sub_account: leg.sub_account,
                    ledger_account: leg.ledger_account.clone(),
                    debits: round_fen(Decimal::ZERO),
                    credits: round_fen(Decimal::ZERO),
                });
            t.debits += leg.debit;
            t.credits += leg.credit;
        }
        let accounts: Vec<GlAccountTotal> = sums.into_values().collect();
        let total_debits = accounts.iter().map(|a| a.debits).sum::<Decimal>();
        let total_credits = accounts.iter().map(|a| a.credits).sum::<Decimal>();
        Ok(GlExport {
            period: period.info(),
            entries,
            accounts,
            total_debits: round_fen(total_debits),
            total_credits: round_fen(total_credits),
        })
    }
}

/// CSV/XLSX columns of the GL export, in order: one row per leg, nothing else (no period or
/// total rows), so the file imports as it is.
pub const GL_COLUMNS: [&str; 15] = [
    "entry",
    "transfer_id",
    "posted_ms",
    "posted_at",
    "date",
    "account_code",
    "account_name",
    "sub_account",
    "ledger_account",
    "debit_cny",
    "credit_cny",
    "kind",
    "lease_id",
    "restates_period",
    "memo",
];

impl GlExport {
    /// The export as a table with [`GL_COLUMNS`]: one row per leg, entries in order, each
    /// entry's debit legs first. The period, per-account totals and totals are in the JSON.
    pub fn table(&self) -> Table {
        let tz = self.period.tz();
        let opt_int = |v: Option<u64>| v.map_or(Cell::Empty, Cell::Int);
        let mut rows = Vec::new();
        for e in &self.entries {
            for l in &e.legs {
                rows.push(vec![
                    Cell::Int(e.entry),
                    opt_int(e.transfer_id.map(|t| t.0)),
                    Cell::Int(u64::try_from(e.posted_ms).unwrap_or(0)),
                    Cell::Time {
                        ms: e.posted_ms,
                        tz,
                    },
                    Cell::Text(e.date.clone()),
                    Cell::Text(l.account_code.to_string()),
                    Cell::Text(l.account_name.to_string()),
                    opt_int(l.sub_account.map(|a| a.0)),
                    Cell::Text(l.ledger_account.clone()),
                    Cell::Money(l.debit),
                    Cell::Money(l.credit),
                    Cell::Text(l.kind.to_string()),
                    opt_int(e.lease.map(|x| x.0)),
                    opt_int(e.restates.map(|p| u64::from(p.0))),
                    Cell::Text(e.memo.clone()),
                ]);
            }
        }
        Table {
            name: "gl-export".to_string(),
            header: GL_COLUMNS.to_vec(),
            rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_maps_every_ledger_account() {
        assert_eq!(gl_account(Account::ExternalCash), (CASH, None));
        assert_eq!(gl_account(Account::PlatformFee), (FEE_REVENUE, None));
        assert_eq!(gl_account(Account::SlaCredits), (SLA_CLEARING, None));
        assert_eq!(
            gl_account(Account::Buyer(AccountId(7))),
            (BUYER_BALANCES, Some(AccountId(7)))
        );
        assert_eq!(
            gl_account(Account::Supplier(AccountId(9))),
            (SUPPLIER_PAYABLES, Some(AccountId(9)))
        );
        let codes = [
            CASH,
            SUPPLIER_PAYABLES,
            BUYER_BALANCES,
            OUTPUT_VAT,
            SLA_CLEARING,
            FEE_REVENUE,
            GOODWILL_EXPENSE,
            ROUNDING,
        ]
        .map(|a| a.code);
        assert_eq!(
            codes,
            [
                "1002", "2202", "2203", "2221", "2241", "6001", "6601", "6603"
            ]
        );
    }
}
