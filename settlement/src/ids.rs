//! Identifiers: account, lease and transfer ids, and the ledger's account names.
//!
//! Ids are `u64` newtypes (interface decision for issue 3); buyers and
//! suppliers share one [`AccountId`] space, and a [`Account`] says which role
//! (buyer prepaid balance or supplier payable) a ledger account has.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A customer account id (buyer or supplier; one shared id space).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AccountId(pub u64);

/// A lease id, as assigned by the exchange engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseId(pub u64);

/// A transfer id, assigned by the [`crate::Ledger`] in posting order
/// (1, 2, 3, ...); unique within one ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TransferId(pub u64);

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl fmt::Display for TransferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A ledger account (issue 3, "Accounts").
///
/// Balances are `credits - debits` in CNY, so a buyer's prepaid balance and a
/// supplier's payable are positive, and [`Account::ExternalCash`] is the
/// negative mirror of all cash that came in minus cash paid out. The sum of
/// all balances is exactly zero after every transfer.
///
/// The derived order (external cash, platform fee, SLA credits, buyers by id,
/// suppliers by id) is the order of every report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum Account {
    /// Money outside the platform: deposits are debited here, payouts credited.
    ExternalCash,
    /// Platform fee revenue.
    PlatformFee,
    /// SLA credit clearing account: funded from the supplier payable and
    /// passed on to the buyer in the same input, so it nets to zero.
    SlaCredits,
    /// A buyer's prepaid balance (never below zero).
    Buyer(AccountId),
    /// A supplier's payable (what the platform owes the supplier; may go
    /// negative when SLA credits or refunds exceed what is left to pay out).
    Supplier(AccountId),
}

impl fmt::Display for Account {
    /// Stable text form used in CSV/XLSX: `external_cash`, `platform_fee`,
    /// `sla_credits`, `buyer:<id>`, `supplier:<id>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Account::ExternalCash => write!(f, "external_cash"),
            Account::PlatformFee => write!(f, "platform_fee"),
            Account::SlaCredits => write!(f, "sla_credits"),
            Account::Buyer(id) => write!(f, "buyer:{id}"),
            Account::Supplier(id) => write!(f, "supplier:{id}"),
        }
    }
}
