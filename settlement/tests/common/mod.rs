//! Shared helpers for the settlement integration tests.
#![allow(dead_code)]

use rust_decimal::Decimal;
use settlement::{AccountId, Applied, EndReason, Input, LeaseId, LeaseStart, Ledger};
use std::str::FromStr;

pub fn d(s: &str) -> Decimal {
    Decimal::from_str(s).expect("test literal")
}

/// ms since epoch of an RFC 3339 time, e.g. "2026-11-30T00:00:00+08:00".
pub fn ms(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("test time")
        .timestamp_millis()
}

pub const BUYER: AccountId = AccountId(1);
pub const SUPPLIER: AccountId = AccountId(100);

pub fn lease(id: u64, sku: &str, price: &str, gpus: u32, start_ms: i64) -> Input {
    Input::LeaseStarted(LeaseStart {
        lease: LeaseId(id),
        buyer: BUYER,
        supplier: SUPPLIER,
        sku: sku.to_string(),
        region: "cn-east-2".to_string(),
        gpus,
        price_per_gpu_hour: d(price),
        start_ms,
        sla: None,
    })
}

pub fn end(id: u64, end_ms: i64, reason: EndReason) -> Input {
    Input::LeaseEnded {
        lease: LeaseId(id),
        end_ms,
        reason,
    }
}

pub fn deposit(key: &str, buyer: AccountId, amount: &str) -> Input {
    Input::Deposit {
        key: key.to_string(),
        buyer,
        amount: d(amount),
    }
}

/// Applies and checks the ledger invariants (Σ = 0, buyers >= 0) after the step.
pub fn step(l: &mut Ledger, at_ms: i64, input: Input) -> Applied {
    let r = l.apply(at_ms, &input).expect("input should apply");
    l.check_invariants()
        .expect("invariants hold after every step");
    assert!(l.sum_of_balances().is_zero());
    r
}
