//! Typed finance adjustments (issue 17; rules and examples in docs/settlement.md
//! "Adjustments and refunds").
//!
//! Layout: [`AdjustmentKind`] (which accounts, by kind), [`Adjustment`] (the input, with its
//! reason and reference, and the memo statements print), named text limits, and `Ledger`'s
//! posting of one adjustment and the SLA cash-out accessors.
//!
//! Rules:
//! * One double-entry transfer of kind `adjustment` per input, posted at its `at_ms` (always
//!   the open period); amount > 0 and at most [`crate::money::MAX_INPUT_AMOUNT`].
//! * Goodwill credits and write-offs are borne by `platform_fee` (the platform's own account);
//!   `sla_credits` is never touched; a buyer never goes below zero.
//! * An SLA cash-out is at most the SLA credits the buyer received minus those already cashed
//!   out (tracked per buyer); a write-off at most the supplier's debt.
//! * The memo is `<kind>: <reason> [<reference>]`; a reference `period:<id>` must name a
//!   closed period and becomes the transfer's `restates`.

use crate::close::PeriodId;
use crate::error::SettlementError;
use crate::ids::{Account, AccountId};
use crate::ledger::{Applied, Ledger, TransferKind, check_amount};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// Longest adjustment reason, in characters.
pub const MAX_REASON_CHARS: usize = 500;
/// Longest adjustment reference, in characters.
pub const MAX_REFERENCE_CHARS: usize = 200;

/// What an adjustment does, and the accounts it moves money between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AdjustmentKind {
    /// A goodwill credit to a buyer's balance: `platform_fee → buyer`.
    GoodwillCredit {
        /// The buyer credited.
        buyer: AccountId,
    },
    /// A correction between any two accounts (not `sla_credits`): `debit → credit`.
    Correction {
        /// Account debited (a buyer at most its balance).
        debit: Account,
        /// Account credited.
        credit: Account,
    },
    /// A refund of a buyer's balance to its bank: `buyer → external_cash`, at most the balance.
    Refund {
        /// The buyer refunded.
        buyer: AccountId,
    },
    /// The buyer's SLA credits paid out as cash: `buyer → external_cash`, at most the balance
    /// and the SLA credits received and not yet cashed out.
    SlaCashOut {
        /// The buyer paid.
        buyer: AccountId,
    },
    /// A supplier's debt (negative payable) written off by the platform:
    /// `platform_fee → supplier`, at most the debt.
    WriteOff {
        /// The supplier whose debt is written off.
        supplier: AccountId,
    },
}

impl AdjustmentKind {
    /// Stable snake_case name, as printed in memos.
    pub fn as_str(&self) -> &'static str {
        match self {
            AdjustmentKind::GoodwillCredit { .. } => "goodwill_credit",
            AdjustmentKind::Correction { .. } => "correction",
            AdjustmentKind::Refund { .. } => "refund",
            AdjustmentKind::SlaCashOut { .. } => "sla_cash_out",
            AdjustmentKind::WriteOff { .. } => "write_off",
        }
    }

    /// The (debit, credit) accounts of its transfer.
    pub fn accounts(&self) -> (Account, Account) {
        match *self {
            AdjustmentKind::GoodwillCredit { buyer } => {
                (Account::PlatformFee, Account::Buyer(buyer))
            }
            AdjustmentKind::Correction { debit, credit } => (debit, credit),
            AdjustmentKind::Refund { buyer } | AdjustmentKind::SlaCashOut { buyer } => {
                (Account::Buyer(buyer), Account::ExternalCash)
            }
            AdjustmentKind::WriteOff { supplier } => {
                (Account::PlatformFee, Account::Supplier(supplier))
            }
        }
    }
}

/// A typed finance adjustment ([`crate::Input::Adjust`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adjustment {
    /// Idempotency key (shared key space with deposits, payouts and closes).
    pub key: String,
    /// What it does.
    pub kind: AdjustmentKind,
    /// Amount, CNY, > 0, at most 10¹⁵, at most 12 decimal places.
    pub amount: Decimal,
    /// Why, 1..=[`MAX_REASON_CHARS`] characters, not blank.
    pub reason: String,
    /// What it refers to (a ticket, a lease, or `period:<id>` for a closed period it
    /// corrects), at most [`MAX_REFERENCE_CHARS`] characters.
    pub reference: Option<String>,
}

impl Adjustment {
    /// The memo its transfer carries (statements print `<key>: <memo>`):
    /// `<kind>: <reason> [<reference>]`.
    pub fn memo(&self) -> String {
        match &self.reference {
            Some(r) => format!("{}: {} [{r}]", self.kind.as_str(), self.reason),
            None => format!("{}: {}", self.kind.as_str(), self.reason),
        }
    }
}

impl Ledger {
    /// SLA credits granted to `buyer` so far, CNY (O(the buyer's retained transfers)).
    pub fn sla_credits_received(&self, buyer: AccountId) -> Decimal {
        let account = Account::Buyer(buyer);
        self.books
            .journal_by_account
            .get(&account)
            .into_iter()
            .flatten()
            .filter_map(|i| self.books.journal.get(*i))
            .filter(|t| t.credit == account && matches!(t.kind, TransferKind::SlaCredit { .. }))
            .map(|t| t.amount)
            .sum()
    }

    /// SLA credits of `buyer` paid out as cash so far, CNY.
    pub fn sla_cashed_out(&self, buyer: AccountId) -> Decimal {
        self.sla_cash_outs
            .get(&buyer)
            .copied()
            .unwrap_or(Decimal::ZERO)
    }

    /// The period a reference `period:<id>` names (it must be closed); `None` for any other
    /// reference.
    fn referenced_period(&self, reference: &str) -> Result<Option<PeriodId>, SettlementError> {
        let Some(id) = reference.strip_prefix("period:") else {
            return Ok(None);
        };
        // Canonical decimal only (`period:1`, never `period:01` or `period:+1`), so one period
        // has one reference.
        let canonical = !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_digit())
            && (id == "0" || !id.starts_with('0'));
        let id = canonical
            .then(|| id.parse::<u32>().ok())
            .flatten()
            .map(PeriodId);
        match id.and_then(|id| self.closed_period(id)) {
            Some(p) => Ok(Some(p.id)),
            None => Err(SettlementError::InvalidAdjustment(
                "reference period:<id> must name a closed period",
            )),
        }
    }

    /// Checks text, amount and the kind's limit; returns the period it restates.
    fn check_adjustment(&self, a: &Adjustment) -> Result<Option<PeriodId>, SettlementError> {
        check_amount(a.amount)?;
        if a.reason.trim().is_empty() || a.reason.chars().count() > MAX_REASON_CHARS {
            return Err(SettlementError::InvalidAdjustment(
                "reason must be 1 to 500 characters and not blank",
            ));
        }
        let restates = match &a.reference {
            Some(r) if r.trim().is_empty() || r.chars().count() > MAX_REFERENCE_CHARS => {
                return Err(SettlementError::InvalidAdjustment(
                    "reference must be 1 to 200 characters and not blank",
                ));
            }
            Some(r) => self.referenced_period(r)?,
            None => None,
        };
        let (debit, credit) = a.kind.accounts();
        for acc in [debit, credit] {
            if acc == Account::SlaCredits {
                return Err(SettlementError::InvalidAccount {
                    account: acc,
                    reason: "the SLA credit clearing account is posted only by failover facts",
                });
            }
        }
        if debit == credit {
            return Err(SettlementError::InvalidAccount {
                account: debit,
                reason: "an adjustment needs two different accounts",
            });
        }
        self.check_kind_limit(a)?;
        Ok(restates)
    }

    fn check_kind_limit(&self, a: &Adjustment) -> Result<(), SettlementError> {
        let requested = a.amount;
        match a.kind {
            AdjustmentKind::SlaCashOut { buyer } => {
                let available = self.sla_credits_received(buyer) - self.sla_cashed_out(buyer);
                if requested > available {
                    return Err(SettlementError::SlaCashOutExceeded {
                        buyer,
                        available,
                        requested,
                    });
                }
            }
            AdjustmentKind::WriteOff { supplier } => {
                let debt = (-self.balance(Account::Supplier(supplier))).max(Decimal::ZERO);
                if requested > debt {
                    return Err(SettlementError::WriteOffExceedsDebt {
                        supplier,
                        debt,
                        requested,
                    });
                }
            }
            _ => {}
        }
        let (debit, _) = a.kind.accounts();
        if let Account::Buyer(_) = debit {
            let balance = self.balance(debit);
            if balance < requested {
                return Err(SettlementError::InsufficientFunds {
                    account: debit,
                    balance,
                    requested,
                });
            }
        }
        Ok(())
    }

    /// Posts one typed adjustment at `at_ms`; on error nothing changes.
    pub(crate) fn adjust(
        &mut self,
        at_ms: i64,
        a: &Adjustment,
        out: &mut Applied,
    ) -> Result<(), SettlementError> {
        let restates = self.check_adjustment(a)?;
        let (debit, credit) = a.kind.accounts();
        let kind = TransferKind::Adjustment {
            key: a.key.clone(),
            memo: a.memo(),
        };
        self.books.post_ref(
            &mut out.transfers,
            at_ms,
            debit,
            credit,
            a.amount,
            kind,
            restates,
        );
        if let AdjustmentKind::SlaCashOut { buyer } = a.kind {
            *self.sla_cash_outs.entry(buyer).or_insert(Decimal::ZERO) += a.amount;
        }
        Ok(())
    }
}
