//! Finance reports over a period [from, to) in an IANA time zone.
//!
//! * [`Period`]: the period, built from local dates/times in any IANA zone
//!   (default [`DEFAULT_TIME_ZONE`]); DST days are 23 or 25 hours long.
//! * [`LeaseSlice`]: the exact (unrounded) part of a lease inside a period:
//!   the seconds that *start* in [from, to). Slices over consecutive periods
//!   add up exactly to the lease total.
//! * Lease lines carry the lease's ready time (the ledger's start: billing
//!   runs from ready, issue 15) and its end reason once it ended by the
//!   period end; leases never delivered are listed at 0.00 (buyer:
//!   `not_delivered`, supplier: `failed_delivery`, counted).
//! * Reports ([`buyer`], [`supplier`], [`platform`], [`trial_balance`]) are
//!   computed on the *service-time* view: a charge counts at the instant
//!   its second starts, every other transfer at its posting time. Printed
//!   amounts are rounded with [`crate::money::round_fen`] and allocated with
//!   [`crate::money::allocate`] (largest remainder, issue 17) so that printed lines add
//!   up to printed totals and an amount alone prints the same on every report; a
//!   `rounding` line makes opening + movements = closing in print.
//! * [`gl`] (issue 17): the general-ledger export, every movement of a period as balanced
//!   journal entries in a fixed chart of accounts, one row per leg; [`reconciliation`]: every
//!   movement through external cash (deposits, payouts, refunds, SLA cash-outs) with the
//!   cash held at both ends and a zero check.
//! * [`invoice`] (issue 17): per buyer per closed period an invoice, per supplier a
//!   self-billing statement, with VAT; lines by SKU that add up exactly.
//! * Formats: JSON ([`to_json`]), CSV ([`csv`]) and XLSX ([`xlsx`]), all
//!   returned as bytes; invoices also as PDF ([`pdf`], with a CJK font passed in).

pub mod buyer;
pub mod csv;
pub mod gl;
pub mod invoice;
pub mod pdf;
pub mod platform;
pub mod reconciliation;
pub mod supplier;
pub mod table;
pub mod trial_balance;
pub mod xlsx;

use crate::error::SettlementError;
use crate::ids::{Account, AccountId, LeaseId};
use crate::input::EndReason;
use crate::ledger::{LeaseState, Ledger, MAX_TIME_MS, MIN_TIME_MS, TransferKind};
use crate::money::round_fen;
use chrono::{
    DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeDelta, TimeZone,
    Timelike,
};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde::Serialize;
use std::collections::BTreeMap;

/// Default report time zone (issue 3).
pub const DEFAULT_TIME_ZONE: &str = "Asia/Shanghai";

/// A report period [`from_ms`, `to_ms`) (ms since epoch, UTC) and the IANA
/// zone its local times are printed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    /// Start (inclusive), ms since epoch.
    pub from_ms: i64,
    /// End (exclusive), ms since epoch.
    pub to_ms: i64,
    /// Zone for local times.
    pub tz: Tz,
}

/// Parses an IANA zone name such as `"Asia/Shanghai"` or `"Europe/Berlin"`.
///
/// # Errors
/// [`SettlementError::UnknownTimeZone`].
pub fn parse_tz(name: &str) -> Result<Tz, SettlementError> {
    // The error echoes at most 64 characters of the name (found in issue 25's review: a 10 KB
    // `tz` came back whole in the error body).
    name.parse::<Tz>().map_err(|_| {
        let mut shown: String = name.chars().take(64).collect();
        if name.chars().nth(64).is_some() {
            shown.push('…');
        }
        SettlementError::UnknownTimeZone(shown)
    })
}

/// The UTC instant (ms since epoch) of local time `local` in `tz`. An
/// ambiguous local time (clocks going back) takes the earlier instant; a
/// local time that does not exist (clocks going forward) takes the first
/// existing minute after it.
///
/// # Errors
/// [`SettlementError::InvalidLocalTime`] if no instant within a day after
/// `local` exists.
pub fn local_to_utc_ms(local: NaiveDateTime, tz: Tz) -> Result<i64, SettlementError> {
    let mut t = local;
    for _ in 0..=(24 * 60) {
        match tz.from_local_datetime(&t) {
            LocalResult::Single(dt) => return Ok(dt.timestamp_millis()),
            LocalResult::Ambiguous(a, _) => return Ok(a.timestamp_millis()),
            LocalResult::None => {
                t = t.checked_add_signed(TimeDelta::minutes(1)).ok_or_else(|| {
                    SettlementError::InvalidLocalTime(format!("{local} is out of range"))
                })?
            }
        }
    }
    Err(SettlementError::InvalidLocalTime(format!(
        "{local} does not exist in {}",
        tz.name()
    )))
}

/// Formats `ms` (ms since epoch) as local ISO-8601 with offset in `tz`,
/// e.g. `2026-11-30T08:00:00.000+08:00`.
pub fn format_local(ms: i64, tz: Tz) -> String {
    match DateTime::from_timestamp_millis(ms) {
        Some(dt) => {
            // Hand-written "%Y-%m-%dT%H:%M:%S%.3f%:z": chrono's strftime
            // parses its format string on every call, which dominated CSV
            // rendering of large statements.
            let local = dt.with_timezone(&tz);
            let offset = local.offset().fix().local_minus_utc();
            let (sign, offset) = if offset < 0 {
                ('-', -offset)
            } else {
                ('+', offset)
            };
            let t = local.naive_local();
            format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}{}{:02}:{:02}",
                t.year(),
                t.month(),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.nanosecond() / 1_000_000 % 1000,
                sign,
                offset / 3600,
                offset % 3600 / 60
            )
        }
        None => ms.to_string(),
    }
}

/// Local wall-clock time of `ms` (ms since epoch) in `tz`.
pub(crate) fn local_naive(ms: i64, tz: Tz) -> Option<NaiveDateTime> {
    DateTime::from_timestamp_millis(ms).map(|dt| dt.with_timezone(&tz).naive_local())
}

impl Period {
    /// A period from UTC instants (ms since epoch) printed in zone `tz_name`.
    ///
    /// # Errors
    /// [`SettlementError::InvalidPeriod`] unless `from_ms < to_ms` within
    /// 1970..10000; [`SettlementError::UnknownTimeZone`].
    pub fn new(from_ms: i64, to_ms: i64, tz_name: &str) -> Result<Period, SettlementError> {
        let tz = parse_tz(tz_name)?;
        if from_ms >= to_ms || from_ms < MIN_TIME_MS || to_ms > MAX_TIME_MS + 1 {
            return Err(SettlementError::InvalidPeriod { from_ms, to_ms });
        }
        Ok(Period { from_ms, to_ms, tz })
    }

    /// A period between two local times in zone `tz_name`.
    ///
    /// # Errors
    /// As [`Period::new`] and [`local_to_utc_ms`].
    pub fn between_local(
        from: NaiveDateTime,
        to: NaiveDateTime,
        tz_name: &str,
    ) -> Result<Period, SettlementError> {
        let tz = parse_tz(tz_name)?;
        Period::new(
            local_to_utc_ms(from, tz)?,
            local_to_utc_ms(to, tz)?,
            tz_name,
        )
    }

    /// The local calendar day `date` in `tz_name` (midnight to midnight;
    /// 23 or 25 hours on DST change days).
    ///
    /// # Errors
    /// As [`Period::between_local`].
    pub fn day(date: NaiveDate, tz_name: &str) -> Result<Period, SettlementError> {
        let next = date
            .succ_opt()
            .ok_or_else(|| SettlementError::InvalidLocalTime(format!("no day after {date}")))?;
        Period::between_local(
            date.and_time(chrono::NaiveTime::MIN),
            next.and_time(chrono::NaiveTime::MIN),
            tz_name,
        )
    }

    /// The local calendar month `year`-`month` (1..=12) in `tz_name`.
    ///
    /// # Errors
    /// [`SettlementError::InvalidLocalTime`] for a bad month; as
    /// [`Period::between_local`].
    pub fn month(year: i32, month: u32, tz_name: &str) -> Result<Period, SettlementError> {
        let first = NaiveDate::from_ymd_opt(year, month, 1).ok_or_else(|| {
            SettlementError::InvalidLocalTime(format!("{year}-{month} is not a month"))
        })?;
        let next = if first.month() == 12 {
            NaiveDate::from_ymd_opt(year + 1, 1, 1)
        } else {
            NaiveDate::from_ymd_opt(year, month + 1, 1)
        }
        .ok_or_else(|| {
            SettlementError::InvalidLocalTime(format!("no month after {year}-{month}"))
        })?;
        Period::between_local(
            first.and_time(chrono::NaiveTime::MIN),
            next.and_time(chrono::NaiveTime::MIN),
            tz_name,
        )
    }

    /// Printable description of the period.
    pub fn info(&self) -> PeriodInfo {
        PeriodInfo {
            from_ms: self.from_ms,
            to_ms: self.to_ms,
            time_zone: self.tz.name().to_string(),
            from_local: format_local(self.from_ms, self.tz),
            to_local: format_local(self.to_ms, self.tz),
            length_hours: (Decimal::from(self.to_ms - self.from_ms) / Decimal::from(3_600_000))
                .normalize(),
        }
    }
}

/// A period as printed on every report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeriodInfo {
    /// Start (inclusive), ms since epoch.
    pub from_ms: i64,
    /// End (exclusive), ms since epoch.
    pub to_ms: i64,
    /// IANA zone name.
    pub time_zone: String,
    /// Start as local ISO-8601 with offset.
    pub from_local: String,
    /// End as local ISO-8601 with offset.
    pub to_local: String,
    /// Length in hours (24 for a normal day; 23 or 25 on DST days).
    pub length_hours: Decimal,
}

impl PeriodInfo {
    /// The zone of the period (falls back to [`DEFAULT_TIME_ZONE`], which
    /// cannot happen for a `PeriodInfo` built by [`Period::info`]).
    pub fn tz(&self) -> Tz {
        parse_tz(&self.time_zone).unwrap_or(chrono_tz::Asia::Shanghai)
    }
}

/// The exact (unrounded) part of one lease inside a period: the lease's
/// seconds that start in [from, to). Amounts in CNY at 12 decimal places.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseSlice {
    /// The lease.
    pub lease: LeaseId,
    /// Its buyer.
    pub buyer: AccountId,
    /// Its supplier.
    pub supplier: AccountId,
    /// SKU id.
    pub sku: String,
    /// Region id.
    pub region: String,
    /// GPUs.
    pub gpus: u32,
    /// Unit price, CNY per GPU-hour.
    pub price_per_gpu_hour: Decimal,
    /// The lease's billing start: when it was ready (the ledger's start, issue 15), ms since
    /// epoch. Equals `start_ms` unless the lease was ready before the period.
    pub ready_ms: i64,
    /// Slice start: max(ready, period start), ms since epoch.
    pub start_ms: i64,
    /// Slice end: min(lease billing end (or accrued-to instant), period
    /// end), ms since epoch.
    pub end_ms: i64,
    /// Billed seconds in the slice.
    pub billed_seconds: u64,
    /// Amount due: price × GPUs × billed seconds / 3600, CNY.
    pub amount: Decimal,
    /// Collected from the buyer, CNY.
    pub collected: Decimal,
    /// Due but not collected (`amount - collected`), CNY.
    pub unpaid: Decimal,
    /// Platform fee on `collected`, CNY.
    pub fee: Decimal,
    /// Why the lease ended, if its billing end is at or before the period end; `None` while
    /// it runs past the period (so a report over a past period does not change when a lease
    /// in it ends later).
    pub end_reason: Option<EndReason>,
}

/// Numbers of a slice without the strings (internal, for speed).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SliceNums {
    pub(crate) billed_seconds: u64,
    pub(crate) amount: Decimal,
    pub(crate) collected: Decimal,
    pub(crate) fee: Decimal,
}

/// Collected and fee for a lease's seconds before `t`.
fn effects_before(st: &LeaseState, t: i64) -> (Decimal, Decimal) {
    let s = st.secs_before(t);
    if s == 0 {
        return (Decimal::ZERO, Decimal::ZERO);
    }
    let c = st.paid_before(s);
    (c, st.fee_on(c))
}

pub(crate) fn slice_nums(st: &LeaseState, from_ms: i64, to_ms: i64) -> Option<SliceNums> {
    let sx = st.secs_before(from_ms);
    let sy = st.secs_before(to_ms);
    if sy <= sx {
        return None;
    }
    let (ax, ay) = (st.due_before(sx), st.due_before(sy));
    let fully_paid = st.tail.is_empty() && st.paid_prefix == st.posted;
    let (px, py) = if fully_paid {
        (ax, ay)
    } else {
        (st.paid_before(sx), st.paid_before(sy))
    };
    Some(SliceNums {
        billed_seconds: sy - sx,
        amount: ay - ax,
        collected: py - px,
        fee: st.fee_on(py) - st.fee_on(px),
    })
}

pub(crate) fn slice_bounds(st: &LeaseState, from_ms: i64, to_ms: i64) -> (i64, i64) {
    let lease_end = match st.end {
        Some((e, _)) => e,
        None => st.accrued_to_ms(),
    };
    (
        st.start_ms.max(from_ms),
        lease_end.min(to_ms).max(st.start_ms.max(from_ms)),
    )
}

/// The lease's end reason if its billing end is at or before `to_ms` (ms since epoch).
fn end_reason_by(st: &LeaseState, to_ms: i64) -> Option<EndReason> {
    st.end
        .filter(|(end_ms, _)| *end_ms <= to_ms)
        .map(|(_, reason)| reason)
}

/// Debit and credit turnover of one account, CNY.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Turnover {
    pub(crate) debits: Decimal,
    pub(crate) credits: Decimal,
}

impl Turnover {
    pub(crate) fn net(&self) -> Decimal {
        self.credits - self.debits
    }
}

impl Ledger {
    /// Fails if an active lease has not been accrued through `to_ms`.
    pub(crate) fn check_accrued<'a>(
        &self,
        leases: impl Iterator<Item = &'a LeaseId>,
        to_ms: i64,
    ) -> Result<(), SettlementError> {
        for id in leases {
            if let Some(st) = self.leases.get(id)
                && st.end.is_none()
                && crate::metering::seconds_started_before(st.start_ms, to_ms) > st.posted
            {
                return Err(SettlementError::NotAccrued {
                    lease: *id,
                    accrued_to_ms: st.accrued_to_ms(),
                    to_ms,
                });
            }
        }
        Ok(())
    }

    /// The exact slices of every lease with billed seconds in `period`
    /// (lease id order).
    ///
    /// # Errors
    /// [`SettlementError::NotAccrued`] if an active lease is not accrued
    /// through `period.to_ms`.
    pub fn lease_slices(&self, period: &Period) -> Result<Vec<LeaseSlice>, SettlementError> {
        self.check_accrued(self.active.iter(), period.to_ms)?;
        let mut out = Vec::new();
        for (id, st) in &self.leases {
            if let Some(s) = self.lease_slice(*id, st, period) {
                out.push(s);
            }
        }
        Ok(out)
    }

    pub(crate) fn lease_slice(
        &self,
        id: LeaseId,
        st: &LeaseState,
        period: &Period,
    ) -> Option<LeaseSlice> {
        let n = slice_nums(st, period.from_ms, period.to_ms)?;
        let (start_ms, end_ms) = slice_bounds(st, period.from_ms, period.to_ms);
        Some(LeaseSlice {
            lease: id,
            buyer: st.buyer,
            supplier: st.supplier,
            sku: self.name(st.sku).to_string(),
            region: self.name(st.region).to_string(),
            gpus: st.gpus,
            price_per_gpu_hour: st.price,
            ready_ms: st.start_ms,
            start_ms,
            end_ms,
            billed_seconds: n.billed_seconds,
            amount: n.amount,
            collected: n.collected,
            unpaid: n.amount - n.collected,
            fee: n.fee,
            end_reason: end_reason_by(st, period.to_ms),
        })
    }

    /// The failed deliveries among `leases` (keys of `delivery_failures`) whose failure time
    /// is in `period`, in lease id order, each printed at 0.00 CNY.
    pub(crate) fn failed_deliveries_in(
        &self,
        leases: Option<&Vec<LeaseId>>,
        period: &Period,
    ) -> Vec<buyer::DeliveryFailureLine> {
        let mut ids: Vec<LeaseId> = leases.map(|v| v.to_vec()).unwrap_or_default();
        ids.sort();
        ids.iter()
            .filter_map(|id| self.delivery_failures.get(id))
            .filter(|f| f.at_ms >= period.from_ms && f.at_ms < period.to_ms)
            .map(|f| buyer::DeliveryFailureLine {
                lease: f.lease,
                sku: f.sku.clone(),
                region: f.region.clone(),
                gpus: f.gpus,
                at_ms: f.at_ms,
                at_local: format_local(f.at_ms, period.tz),
                amount: round_fen(Decimal::ZERO),
            })
            .collect()
    }

    /// Turnover of `account` in [from, to) on the service-time view.
    pub(crate) fn account_turnover(&self, account: Account, from_ms: i64, to_ms: i64) -> Turnover {
        let mut t = Turnover::default();
        if let Some(idx) = self.books.journal_by_account.get(&account) {
            for i in idx {
                if let Some(tr) = self.books.journal.get(*i)
                    && tr.at_ms >= from_ms
                    && tr.at_ms < to_ms
                {
                    if tr.debit == account {
                        t.debits += tr.amount;
                    }
                    if tr.credit == account {
                        t.credits += tr.amount;
                    }
                }
            }
        }
        let leases: Box<dyn Iterator<Item = &LeaseState>> = match account {
            Account::Buyer(b) => Box::new(
                self.leases_by_buyer
                    .get(&b)
                    .into_iter()
                    .flatten()
                    .filter_map(|id| self.leases.get(id)),
            ),
            Account::Supplier(s) => Box::new(
                self.leases_by_supplier
                    .get(&s)
                    .into_iter()
                    .flatten()
                    .filter_map(|id| self.leases.get(id)),
            ),
            Account::PlatformFee => Box::new(self.leases.values()),
            Account::ExternalCash | Account::SlaCredits => Box::new(std::iter::empty()),
        };
        for st in leases {
            let (c0, f0) = effects_before(st, from_ms);
            let (c1, f1) = effects_before(st, to_ms);
            let (collected, fee) = (c1 - c0, f1 - f0);
            match account {
                Account::Buyer(_) => t.debits += collected,
                Account::Supplier(_) => {
                    t.credits += collected;
                    t.debits += fee;
                }
                Account::PlatformFee => t.credits += fee,
                _ => {}
            }
        }
        t
    }

    /// Opening balance at `from` and turnover in [from, to) of the accounts
    /// known by `to` on the service-time view, in one pass over the journal
    /// and the leases.
    ///
    /// The accounts are the three fixed ones (`external_cash`, `platform_fee`,
    /// `sla_credits`, always listed) and every account with a retained journal
    /// transfer or a lease effect (collected or fee) before `to`. An account
    /// first seen at or after `to` is not listed, so a closed period's trial
    /// balance does not gain a 0.00 row when a new account appears later
    /// (issue 17). Accounts known only from the live balances are not added:
    /// every balance comes from a transfer, and every transfer is either in the
    /// journal or a lease effect.
    pub(crate) fn all_turnover(
        &self,
        from_ms: i64,
        to_ms: i64,
    ) -> BTreeMap<Account, (Decimal, Turnover)> {
        let mut map: BTreeMap<Account, (Decimal, Turnover)> = BTreeMap::new();
        for a in [
            Account::ExternalCash,
            Account::PlatformFee,
            Account::SlaCredits,
        ] {
            map.insert(a, Default::default());
        }
        for tr in &self.books.journal {
            if tr.at_ms < from_ms {
                map.entry(tr.debit).or_default().0 -= tr.amount;
                map.entry(tr.credit).or_default().0 += tr.amount;
            } else if tr.at_ms < to_ms {
                map.entry(tr.debit).or_default().1.debits += tr.amount;
                map.entry(tr.credit).or_default().1.credits += tr.amount;
            }
        }
        let (mut fee_opening, mut fee_during) = (Decimal::ZERO, Decimal::ZERO);
        for st in self.leases.values() {
            let (c0, f0) = effects_before(st, from_ms);
            let (c1, f1) = effects_before(st, to_ms);
            if c1.is_zero() && f1.is_zero() {
                continue;
            }
            let (collected, fee) = (c1 - c0, f1 - f0);
            let b = map.entry(Account::Buyer(st.buyer)).or_default();
            b.0 -= c0;
            b.1.debits += collected;
            let s = map.entry(Account::Supplier(st.supplier)).or_default();
            s.0 += c0 - f0;
            s.1.credits += collected;
            s.1.debits += fee;
            fee_opening += f0;
            fee_during += fee;
        }
        let p = map.entry(Account::PlatformFee).or_default();
        p.0 += fee_opening;
        p.1.credits += fee_during;
        map
    }

    /// Journal transfers touching `account` posted in [from, to).
    pub(crate) fn journal_in(
        &self,
        account: Account,
        from_ms: i64,
        to_ms: i64,
    ) -> impl Iterator<Item = &crate::ledger::Transfer> + '_ {
        self.books
            .journal_by_account
            .get(&account)
            .into_iter()
            .flatten()
            .filter_map(|i| self.books.journal.get(*i))
            .filter(move |t| t.at_ms >= from_ms && t.at_ms < to_ms)
    }

    /// The journal transfers of `account` posted in `period` that `want` selects (posting
    /// order), with their printed amounts allocated by [`crate::money::allocate_fen`]
    /// (issue 17): `signed` prints + to the account and − from it; otherwise each prints
    /// its positive amount (payouts, SLA deductions), so nothing is negated after rounding.
    pub(crate) fn journal_section(
        &self,
        account: Account,
        period: &Period,
        want: impl Fn(&crate::ledger::Transfer) -> bool,
        signed: bool,
    ) -> (Vec<&crate::ledger::Transfer>, crate::money::Allocation) {
        let ts: Vec<_> = self
            .journal_in(account, period.from_ms, period.to_ms)
            .filter(|t| want(t))
            .collect();
        let exact: Vec<Decimal> = ts
            .iter()
            .map(|t| {
                if signed && t.debit == account {
                    -t.amount
                } else {
                    t.amount
                }
            })
            .collect();
        let printed = crate::money::allocate_fen(&exact);
        (ts, printed)
    }

    /// The net (credits − debits) of the journal transfers of `account` posted in
    /// `period`, every kind, CNY. With the service-time effects of its lease slices, the
    /// exact change of its balance over the period: statements take their exact closing
    /// from it, so a transfer kind missing from their sections shows as a large `rounding`
    /// line (the property tests bound it by 0.03) instead of a silently wrong closing.
    pub(crate) fn journal_net(&self, account: Account, period: &Period) -> Decimal {
        self.journal_in(account, period.from_ms, period.to_ms)
            .map(|t| {
                if t.credit == account {
                    t.amount
                } else {
                    -t.amount
                }
            })
            .sum()
    }

    /// The slices of `leases` in `period`, in lease id order.
    pub(crate) fn slices_of(&self, leases: &[LeaseId], period: &Period) -> Vec<LeaseSlice> {
        let mut ids = leases.to_vec();
        ids.sort();
        ids.iter()
            .filter_map(|id| {
                self.leases
                    .get(id)
                    .and_then(|st| self.lease_slice(*id, st, period))
            })
            .collect()
    }

    /// Lease behind an SLA transfer, if any.
    pub(crate) fn sla_lease(kind: &TransferKind) -> Option<LeaseId> {
        match kind {
            TransferKind::SlaCredit { lease } | TransferKind::SlaFunding { lease } => Some(*lease),
            _ => None,
        }
    }
}

/// Serialises a report as pretty JSON bytes (amounts as decimal strings).
///
/// # Errors
/// [`SettlementError::Export`] (not expected for report types).
pub fn to_json<T: Serialize>(report: &T) -> Result<Vec<u8>, SettlementError> {
    serde_json::to_vec_pretty(report).map_err(|e| SettlementError::Export(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_time_zone_echoes_at_most_64_characters() {
        let long = "A".repeat(10_000);
        let e = parse_tz(&long).unwrap_err().to_string();
        assert!(e.len() < 120, "{} bytes", e.len());
        assert!(e.contains(&format!("{}…", "A".repeat(64))), "{e}");
        assert!(parse_tz("Asia/Shanghai").is_ok());
    }

    #[test]
    fn format_local_matches_chrono_strftime() {
        let zones = [
            "Asia/Shanghai",
            "Europe/Berlin",
            "America/St_Johns",
            "Asia/Kolkata",
            "Pacific/Chatham",
            "UTC",
        ];
        for zone in zones {
            let tz = parse_tz(zone).expect("zone");
            let mut ms = 0i64;
            while ms < 4_102_444_800_000 {
                let expected = DateTime::from_timestamp_millis(ms)
                    .expect("in range")
                    .with_timezone(&tz)
                    .format("%Y-%m-%dT%H:%M:%S%.3f%:z")
                    .to_string();
                assert_eq!(format_local(ms, tz), expected, "{zone} {ms}");
                ms += 7_777_777_777; // ~90 days and odd milliseconds
            }
        }
        let sh = parse_tz("Asia/Shanghai").expect("zone");
        assert_eq!(
            format_local(1_764_432_000_123, sh),
            "2025-11-30T00:00:00.123+08:00"
        );
        let ny = parse_tz("America/New_York").expect("zone");
        assert_eq!(
            format_local(1_764_432_000_000, ny),
            "2025-11-29T11:00:00.000-05:00"
        );
    }
}
