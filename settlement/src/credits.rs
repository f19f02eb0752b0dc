//! SLA credits in the ledger (issue 26; rules and worked examples in docs/settlement.md "SLA
//! credit"): the failover credit by each lease's own terms, the non-delivery credit, and the
//! monthly availability credit posted at close; plus what statements print about each credit.
//!
//! Layout: [`FailoverCredit`] (how one per-lease credit was computed, kept on the lease),
//! `UndeliveredCredit` (a lease never delivered whose terms grant a non-delivery credit),
//! [`AvailabilityCredit`] (one monthly credit, kept by its transfer ids), [`CreditTerms`] and
//! [`SlaCreditInfo`] (the statement view), and `Ledger::failover` /
//! `Ledger::availability_credits_at_close`.
//!
//! Rules:
//! * Every credit is two retained transfers, `supplier → sla_credits` (`SlaFunding`) and
//!   `sla_credits → buyer` (`SlaCredit`), posted at the input's time; one for a failure in
//!   closed time `restates` that period (issue 17), so it becomes a credit note at the next
//!   close like every SLA credit.
//! * A lease without terms (`sla: None`) follows the configuration's rule exactly as before
//!   issue 26 (the tests of issue 3 pass unchanged) and is left out of the monthly measure.
//! * The monthly credit is booked against the lease whose terms set the pair's promise (the
//!   highest; lowest lease id among equals), never counted in that lease's
//!   `LeaseTotals::sla_credit`, and recorded in `Ledger::availability_credits`.

use crate::close::PeriodId;
use crate::config::Config;
use crate::error::SettlementError;
use crate::ids::{Account, AccountId, LeaseId, TransferId};
use crate::input::{EndReason, ReplacementPrice, UndeliveredSla};
use crate::ledger::{Applied, Ledger, Transfer, TransferKind, check_time};
use crate::metering::{billed_seconds, cumulative_charge};
use crate::money::quantize;
use crate::reports::Period;
use crate::sla::{self, CreditCap, Rule, SlaTerms};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How one per-lease SLA credit was computed (issue 26), all amounts CNY at full precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverCredit {
    /// Start of the outage, ms since epoch: the failure (the lease's billing end) or, for a
    /// lease never delivered, its provisioning deadline.
    pub outage_from_ms: i64,
    /// The replacement's ready time, ms since epoch; `None` when failover found no capacity.
    pub replacement_start_ms: Option<i64>,
    /// The outage credited, ms: min(replacement ready − outage start, outage cap), the cap
    /// without a replacement.
    pub outage_ms: i64,
    /// `multiple × charge(outage)`.
    pub outage_credit: Decimal,
    /// A dearer replacement's extra: `(new − old price) × GPUs × min(remaining term, 24 h)`.
    pub price_difference: Decimal,
    /// The cap in CNY: the charge so far, or the percentage of the monthly fee.
    pub cap: Decimal,
    /// The credit granted: `min(outage_credit + price_difference, cap)`.
    pub credit: Decimal,
}

/// A lease never delivered whose terms grant a non-delivery credit (issue 26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UndeliveredCredit {
    pub(crate) buyer: AccountId,
    pub(crate) supplier: AccountId,
    pub(crate) gpus: u32,
    pub(crate) sla: UndeliveredSla,
    /// Set once its `Failover` applied.
    pub(crate) failover: Option<FailoverCredit>,
}

/// One monthly availability credit posted at close (issue 26, docs/settlement.md "Monthly
/// availability credit"), amounts CNY at full precision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AvailabilityCredit {
    /// The closed period measured.
    pub period: PeriodId,
    /// The buyer.
    pub buyer: AccountId,
    /// The supplier (funds it).
    pub supplier: AccountId,
    /// The lease whose terms set the promise; the transfers name it.
    pub lease: LeaseId,
    /// The promise, basis points: the highest among the pair's leases with terms in the
    /// period.
    pub promise_bp: u16,
    /// Outage in the period, ms (each failure's outage to the replacement's ready time,
    /// not capped; the outage cap without a replacement; clipped to the period).
    pub outage_ms: i64,
    /// Committed time in the period, ms: billed seconds × 1000 + outage.
    pub committed_ms: i64,
    /// The tier: percentage of `charges` credited.
    pub tier_pct: u8,
    /// The pair's collected charges in the period (leases with terms).
    pub charges: Decimal,
    /// Σ of the leases' caps in the period (charge in the period, or percentage of the
    /// monthly fee).
    pub cap: Decimal,
    /// Per-lease SLA credits already granted for failures in the period (subtracted).
    pub lease_credits: Decimal,
    /// The credit posted: `min(tier % × charges, cap) − lease_credits`, > 0.
    pub credit: Decimal,
}

/// The terms behind a credit, as statements print them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CreditTerms {
    /// Whether the lease carried terms (`false`: the configuration's rule, no promise).
    pub lease_terms: bool,
    /// Promised monthly availability, basis points; `None` without terms.
    pub availability_bp: Option<u16>,
    /// Credit multiple of the outage charge.
    pub multiple: Decimal,
    /// Outage cap, seconds.
    pub outage_cap_s: i64,
    /// Credit cap.
    pub cap: CreditCap,
    /// Whether non-delivery earns a credit.
    pub non_delivery_credit: bool,
}

impl CreditTerms {
    /// The terms of a lease with `terms` (None: `config`'s rule).
    pub(crate) fn of(terms: Option<&SlaTerms>, config: &Config) -> CreditTerms {
        let rule = Rule::of(terms, config);
        CreditTerms {
            lease_terms: terms.is_some(),
            availability_bp: terms.map(|t| t.availability_bp),
            multiple: rule.multiple,
            outage_cap_s: rule.outage_cap_ms / 1000,
            cap: rule.cap,
            non_delivery_credit: rule.non_delivery_credit,
        }
    }

    /// One line of text: `promise 99.90% multiple 10x outage_cap 3600s cap charge_so_far
    /// non_delivery_credit no` (`promise none` without terms).
    pub fn summary(&self) -> String {
        let promise = self.availability_bp.map_or("none".to_string(), |bp| {
            format!("{}%", Decimal::new(i64::from(bp), 2))
        });
        format!(
            "promise {promise} multiple {}x outage_cap {}s cap {} non_delivery_credit {}",
            self.multiple.normalize(),
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

/// What a statement prints about one SLA transfer (credit or funding).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlaCreditInfo {
    /// Why: `node_failure`, `non_delivery` or `availability` (the monthly credit).
    pub basis: &'static str,
    /// The terms it was computed by.
    pub terms: CreditTerms,
    /// The per-lease computation (`node_failure`, `non_delivery`).
    pub failover: Option<FailoverCredit>,
    /// The monthly computation (`availability`).
    pub availability: Option<AvailabilityCredit>,
}

impl SlaCreditInfo {
    /// One line of text for CSV: the basis, the computation and the terms, e.g.
    /// `node_failure outage 90s credit 45.00 price_difference 0.00 cap 180.00; promise none
    /// multiple 10x …`.
    pub fn summary(&self) -> String {
        let fen = |d: Decimal| crate::money::round_fen(d);
        let what = match (&self.failover, &self.availability) {
            (Some(f), _) => format!(
                "{} outage {}s outage_credit {} price_difference {} cap {}",
                self.basis,
                billed_seconds(f.outage_ms),
                fen(f.outage_credit),
                fen(f.price_difference),
                fen(f.cap)
            ),
            (None, Some(a)) => format!(
                "availability period:{} {}% < promise {}% tier {}% of charges {} cap {} less lease credits {}",
                a.period,
                availability_pct(a.outage_ms, a.committed_ms),
                Decimal::new(i64::from(a.promise_bp), 2),
                a.tier_pct,
                fen(a.charges),
                fen(a.cap),
                fen(a.lease_credits)
            ),
            (None, None) => self.basis.to_string(),
        };
        format!("{what}; {}", self.terms.summary())
    }
}

/// Availability in percent to 4 decimal places (printed only; tiers compare exactly).
fn availability_pct(outage_ms: i64, committed_ms: i64) -> Decimal {
    if committed_ms <= 0 {
        return Decimal::ONE_HUNDRED;
    }
    let up = Decimal::from(committed_ms - outage_ms);
    crate::money::round_dp(up * Decimal::ONE_HUNDRED / Decimal::from(committed_ms), 4)
}

/// Checks a lease price: [0, 10⁶] CNY per GPU-hour, at most 8 decimal places.
fn check_price(lease: LeaseId, price: Decimal) -> Result<(), SettlementError> {
    if price < Decimal::ZERO || price > Decimal::from(1_000_000) || price.scale() > 8 {
        return Err(SettlementError::InvalidLease {
            lease,
            reason: "price per GPU-hour must be in [0, 1000000] CNY with at most 8 decimals",
        });
    }
    Ok(())
}

/// Checks the SLA part of a `DeliveryFailed` fact: valid terms, price and deadline.
pub(crate) fn check_undelivered(
    lease: LeaseId,
    sla: &UndeliveredSla,
) -> Result<(), SettlementError> {
    sla.terms
        .validate()
        .map_err(|error| SettlementError::InvalidSlaTerms { lease, error })?;
    check_price(lease, sla.price_per_gpu_hour)?;
    check_time(sla.deadline_ms)
}

/// The credit of one failure under `rule`: lease at `price` × `gpus`, outage from
/// `outage_from_ms`, replacement ready at `replacement_start_ms` (maybe dearer), `collected`
/// paid so far.
fn compute(
    rule: &Rule,
    (price, gpus): (Decimal, u32),
    outage_from_ms: i64,
    replacement_start_ms: Option<i64>,
    replacement_price: Option<&ReplacementPrice>,
    collected: Decimal,
) -> FailoverCredit {
    let hourly = price * Decimal::from(gpus);
    let outage_ms = sla::outage_ms(outage_from_ms, replacement_start_ms, rule.outage_cap_ms);
    let outage_credit =
        quantize(cumulative_charge(hourly, billed_seconds(outage_ms)) * rule.multiple);
    let price_difference = match (replacement_price, replacement_start_ms) {
        (Some(r), Some(ready)) => sla::price_difference_credit(
            price,
            r.price_per_gpu_hour,
            gpus,
            r.booked_end_ms.map(|end| end.saturating_sub(ready)),
        ),
        _ => Decimal::ZERO,
    };
    let cap = sla::credit_cap(rule.cap, hourly, collected);
    FailoverCredit {
        outage_from_ms,
        replacement_start_ms,
        outage_ms,
        outage_credit,
        price_difference,
        cap,
        credit: (outage_credit + price_difference).min(cap),
    }
}

impl Ledger {
    /// `Input::Failover`: the SLA credit of a `node_failure` lease by its own terms, or the
    /// non-delivery credit of a lease never delivered whose terms grant one.
    pub(crate) fn failover(
        &mut self,
        at_ms: i64,
        id: LeaseId,
        replacement_start_ms: Option<i64>,
        replacement_price: Option<&ReplacementPrice>,
        out: &mut Applied,
    ) -> Result<(), SettlementError> {
        if let Some(s) = replacement_start_ms {
            check_time(s)?;
        }
        if let Some(r) = replacement_price {
            check_price(id, r.price_per_gpu_hour)?;
            if let Some(end) = r.booked_end_ms {
                check_time(end)?;
            }
        }
        if !self.leases.contains_key(&id)
            && let Some(u) = self.undelivered_sla.get(&id).copied()
        {
            if u.failover.is_some() {
                return Err(SettlementError::DuplicateFailover(id));
            }
            let rule = Rule::of(Some(&u.sla.terms), &self.config);
            let f = compute(
                &rule,
                (u.sla.price_per_gpu_hour, u.gpus),
                u.sla.deadline_ms,
                replacement_start_ms,
                replacement_price,
                Decimal::ZERO,
            );
            let restates = self.closes.restated_by(u.sla.deadline_ms);
            if let Some(rec) = self.undelivered_sla.get_mut(&id) {
                rec.failover = Some(f);
            }
            self.post_sla(at_ms, (id, u.supplier, u.buyer), f.credit, restates, out);
            return Ok(());
        }
        let st = self
            .leases
            .get(&id)
            .ok_or(SettlementError::UnknownLease(id))?;
        let Some((failure_ms, EndReason::NodeFailure)) = st.true_end() else {
            return Err(SettlementError::NotNodeFailure(id));
        };
        if st.failover_applied {
            return Err(SettlementError::DuplicateFailover(id));
        }
        // A credit for a failure in closed time posts now, referencing that period (issue 17).
        let restates = self.closes.restated_by(failure_ms);
        let rule = Rule::of(st.sla.as_ref(), &self.config);
        let f = compute(
            &rule,
            (st.price, st.gpus),
            failure_ms,
            replacement_start_ms,
            replacement_price,
            st.net_paid(),
        );
        let (supplier, buyer) = (st.supplier, st.buyer);
        let Some(st) = self.leases.get_mut(&id) else {
            return Err(SettlementError::UnknownLease(id));
        };
        st.failover_applied = true;
        st.sla_credit = f.credit;
        st.failover = Some(f);
        self.post_sla(at_ms, (id, supplier, buyer), f.credit, restates, out);
        Ok(())
    }

    /// Posts an SLA credit of `amount` for `lease`: `supplier → sla_credits`, then
    /// `sla_credits → buyer` (nothing when not > 0). Returns the two transfers' ids.
    fn post_sla(
        &mut self,
        at_ms: i64,
        (lease, supplier, buyer): (LeaseId, AccountId, AccountId),
        amount: Decimal,
        restates: Option<PeriodId>,
        out: &mut Applied,
    ) -> Vec<TransferId> {
        let before = out.transfers.len();
        self.books.post_ref(
            &mut out.transfers,
            at_ms,
            Account::Supplier(supplier),
            Account::SlaCredits,
            amount,
            TransferKind::SlaFunding { lease },
            restates,
        );
        self.books.post_ref(
            &mut out.transfers,
            at_ms,
            Account::SlaCredits,
            Account::Buyer(buyer),
            amount,
            TransferKind::SlaCredit { lease },
            restates,
        );
        out.transfers[before..].iter().map(|t| t.id).collect()
    }

    /// At the close of period `id` = [`from_ms`, `to_ms`) (applied at `at_ms`): the monthly
    /// availability credit of each buyer × supplier pair whose leases with terms fell short
    /// of the pair's promise in the period (docs/settlement.md "Monthly availability
    /// credit"), posted now with `restates: Some(id)`.
    pub(crate) fn availability_credits_at_close(
        &mut self,
        at_ms: i64,
        id: PeriodId,
        from_ms: i64,
        to_ms: i64,
        out: &mut Applied,
    ) {
        let Ok(period) = Period::new(from_ms, to_ms, "UTC") else {
            return;
        };
        #[derive(Default)]
        struct Pair {
            promise: Option<(u16, LeaseId)>,
            outage_ms: i64,
            committed_ms: i64,
            charges: Decimal,
            cap: Decimal,
            lease_credits: Decimal,
        }
        let mut pairs: BTreeMap<(AccountId, AccountId), Pair> = BTreeMap::new();
        for (lease, st) in &self.leases {
            let Some(terms) = st.sla else {
                continue;
            };
            let slice = self.lease_slice(*lease, st, &period);
            let (billed, collected) = slice
                .as_ref()
                .map_or((0, Decimal::ZERO), |s| (s.billed_seconds, s.collected));
            let mut outage_in = 0;
            let mut credit_in = Decimal::ZERO;
            if let Some(f) = &st.failover {
                // The measured outage is not capped by the outage cap when a replacement
                // came; without one it is the cap (f.outage_ms).
                let len = f
                    .replacement_start_ms
                    .map_or(f.outage_ms, |r| r.saturating_sub(f.outage_from_ms).max(0));
                let end = f.outage_from_ms.saturating_add(len);
                outage_in = (end.min(to_ms) - f.outage_from_ms.max(from_ms)).max(0);
                if (from_ms..to_ms).contains(&f.outage_from_ms) {
                    credit_in = f.credit;
                }
            }
            if billed == 0 && outage_in == 0 {
                continue;
            }
            let pair = pairs.entry((st.buyer, st.supplier)).or_default();
            let billed_ms = i64::try_from(billed)
                .unwrap_or(i64::MAX / 4)
                .saturating_mul(1000);
            pair.committed_ms = pair
                .committed_ms
                .saturating_add(billed_ms)
                .saturating_add(outage_in);
            pair.outage_ms = pair.outage_ms.saturating_add(outage_in);
            pair.charges += collected;
            pair.cap += sla::credit_cap(terms.cap, st.hourly, collected);
            pair.lease_credits += credit_in;
            if pair
                .promise
                .is_none_or(|(bp, _)| terms.availability_bp > bp)
            {
                pair.promise = Some((terms.availability_bp, *lease));
            }
        }
        for ((buyer, supplier), p) in pairs {
            let Some((promise_bp, lease)) = p.promise else {
                continue;
            };
            let tier_pct = sla::availability_tier_pct(promise_bp, p.outage_ms, p.committed_ms);
            if tier_pct == 0 {
                continue;
            }
            let gross =
                quantize(p.charges * Decimal::from(tier_pct) / Decimal::ONE_HUNDRED).min(p.cap);
            let credit = gross - p.lease_credits;
            if credit <= Decimal::ZERO {
                continue;
            }
            let record = AvailabilityCredit {
                period: id,
                buyer,
                supplier,
                lease,
                promise_bp,
                outage_ms: p.outage_ms,
                committed_ms: p.committed_ms,
                tier_pct,
                charges: p.charges,
                cap: p.cap,
                lease_credits: p.lease_credits,
                credit,
            };
            for t in self.post_sla(at_ms, (lease, supplier, buyer), credit, Some(id), out) {
                self.availability_credits.insert(t, record.clone());
            }
        }
    }

    /// The terms a lease's credits follow (issue 26): its own, or the configuration's rule
    /// (`lease_terms: false`) for a lease started without terms; for a lease never delivered,
    /// the terms of its non-delivery credit. `None` for an unknown lease.
    pub fn credit_terms(&self, lease: LeaseId) -> Option<CreditTerms> {
        if let Some(st) = self.leases.get(&lease) {
            return Some(CreditTerms::of(st.sla.as_ref(), &self.config));
        }
        let u = self.undelivered_sla.get(&lease)?;
        Some(CreditTerms::of(Some(&u.sla.terms), &self.config))
    }

    /// The SLA terms a lease started with (issue 26); `None` when it had none or is unknown.
    pub fn sla_terms(&self, lease: LeaseId) -> Option<SlaTerms> {
        self.leases.get(&lease).and_then(|st| st.sla)
    }

    /// How the per-lease credit of `lease` was computed (`node_failure` or non-delivery), once
    /// its `Failover` applied.
    pub fn failover_credit(&self, lease: LeaseId) -> Option<FailoverCredit> {
        match self.leases.get(&lease) {
            Some(st) => st.failover,
            None => self.undelivered_sla.get(&lease).and_then(|u| u.failover),
        }
    }

    /// The monthly availability credits posted at closes, in transfer order: each record
    /// under the ids of its funding and its credit transfer.
    pub fn availability_credits(&self) -> &BTreeMap<TransferId, AvailabilityCredit> {
        &self.availability_credits
    }

    /// What a statement prints about SLA transfer `t` (`SlaCredit` or `SlaFunding`): its
    /// basis, terms and computation; `None` for any other transfer.
    pub fn sla_credit_info(&self, t: &Transfer) -> Option<SlaCreditInfo> {
        let lease = Ledger::sla_lease(&t.kind)?;
        let terms = self.credit_terms(lease)?;
        if let Some(a) = self.availability_credits.get(&t.id) {
            return Some(SlaCreditInfo {
                basis: "availability",
                terms,
                failover: None,
                availability: Some(a.clone()),
            });
        }
        let basis = if self.leases.contains_key(&lease) {
            "node_failure"
        } else {
            "non_delivery"
        };
        Some(SlaCreditInfo {
            basis,
            terms,
            failover: self.failover_credit(lease),
            availability: None,
        })
    }
}
