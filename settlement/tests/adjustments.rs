//! Typed adjustments and refunds (issue 17, docs/settlement.md "Adjustments and refunds"):
//! each kind's balances after, the refused cases with their exact errors, idempotency, the
//! memo statements print and a reference to a closed period. Amounts are computed by hand
//! from the docs' SLA examples (8 × H100 at 180 CNY/h; fee 8 %; credit 10×).

use crate::common::*;
use settlement::adjust::{MAX_REASON_CHARS, MAX_REFERENCE_CHARS};
use settlement::ledger::TransferKind;
use settlement::money::MAX_INPUT_AMOUNT;
use settlement::{
    Account, AccountId, Adjustment, AdjustmentKind, Config, EndReason, Input, LeaseId, LeaseStart,
    Ledger, Period, PeriodId, SettlementError,
};

const B1: AccountId = AccountId(1);
const B2: AccountId = AccountId(2);
const S100: AccountId = AccountId(100);
const S101: AccountId = AccountId(101);

fn adj(
    key: &str,
    kind: AdjustmentKind,
    amount: &str,
    reason: &str,
    reference: Option<&str>,
) -> Input {
    Input::Adjust(Adjustment {
        key: key.to_string(),
        kind,
        amount: d(amount),
        reason: reason.to_string(),
        reference: reference.map(str::to_string),
    })
}

fn h100(id: u64, buyer: AccountId, supplier: AccountId, start_ms: i64) -> Input {
    Input::LeaseStarted(LeaseStart {
        lease: LeaseId(id),
        buyer,
        supplier,
        sku: "H100-80G".into(),
        region: "cn-east-2".into(),
        gpus: 8,
        price_per_gpu_hour: d("22.50"),
        start_ms,
        sla: None,
    })
}

/// Buyer 1: deposit 1000, a 1-hour lease (180.00) failed, replacement 90 s later: credit
/// 45.00, balance 865.00; supplier 100: 165.60 − 45.00 = 120.60.
/// Buyer 2: deposit 100, a 10-minute lease (30.00) failed, no failover: credit capped at
/// 30.00, balance 100.00; supplier 101: 27.60 − 30.00 = −2.40.
fn sla_examples() -> (Ledger, i64) {
    let t0 = ms("2026-11-10T10:00:00+08:00");
    let mut l = Ledger::new(Config::default()).expect("valid");
    step(&mut l, t0, deposit("pay-1", B1, "1000"));
    step(&mut l, t0, deposit("pay-2", B2, "100"));
    step(&mut l, t0, h100(1, B1, S100, t0));
    step(&mut l, t0, h100(2, B2, S101, t0));
    step(
        &mut l,
        t0 + 600_000,
        end(2, t0 + 600_000, EndReason::NodeFailure),
    );
    step(
        &mut l,
        t0 + 600_000,
        Input::Failover {
            lease: LeaseId(2),
            replacement_start_ms: None,
            replacement_price: None,
        },
    );
    let t1 = t0 + 3_600_000;
    step(&mut l, t1, end(1, t1, EndReason::NodeFailure));
    step(
        &mut l,
        t1 + 90_000,
        Input::Failover {
            lease: LeaseId(1),
            replacement_start_ms: Some(t1 + 90_000),
            replacement_price: None,
        },
    );
    assert_eq!(l.balance(Account::Buyer(B1)), d("865"));
    assert_eq!(l.balance(Account::Buyer(B2)), d("100"));
    assert_eq!(l.balance(Account::Supplier(S100)), d("120.6"));
    assert_eq!(l.balance(Account::Supplier(S101)), d("-2.4"));
    assert_eq!(l.balance(Account::PlatformFee), d("16.8"));
    (l, t1 + 120_000)
}

fn refused(l: &mut Ledger, at_ms: i64, input: &Input) -> SettlementError {
    let before = rmp_serde::to_vec_named(&*l).expect("serialises");
    let e = l.apply(at_ms, input).expect_err("refused");
    let after = rmp_serde::to_vec_named(&*l).expect("serialises");
    assert_eq!(after, before, "a refused input changes nothing");
    e
}

#[test]
fn goodwill_credit_is_borne_by_the_platform_fee_and_shows_kind_reason_and_reference() {
    let (mut l, t) = sla_examples();
    let input = adj(
        "adj-1",
        AdjustmentKind::GoodwillCredit { buyer: B1 },
        "50",
        "outage apology",
        Some("T-1"),
    );
    let r = step(&mut l, t, input.clone());
    assert_eq!(r.transfers.len(), 1);
    let tr = &r.transfers[0];
    assert_eq!(
        (tr.debit, tr.credit, tr.amount, tr.restates),
        (Account::PlatformFee, Account::Buyer(B1), d("50"), None)
    );
    assert_eq!(
        tr.kind,
        TransferKind::Adjustment {
            key: "adj-1".into(),
            memo: "goodwill_credit: outage apology [T-1]".into()
        }
    );
    assert_eq!(l.balance(Account::Buyer(B1)), d("915"));
    assert_eq!(l.balance(Account::PlatformFee), d("-33.2"));
    // The same adjustment again is replayed; the same key with other content is refused.
    assert!(step(&mut l, t + 1, input).replayed);
    let other = adj(
        "adj-1",
        AdjustmentKind::GoodwillCredit { buyer: B1 },
        "50",
        "another reason",
        Some("T-1"),
    );
    assert_eq!(
        refused(&mut l, t + 1, &other),
        SettlementError::IdempotencyConflict {
            key: "adj-1".into()
        }
    );
    // The key space is shared with deposits.
    let clash = adj(
        "pay-1",
        AdjustmentKind::GoodwillCredit { buyer: B1 },
        "1",
        "x",
        None,
    );
    assert_eq!(
        refused(&mut l, t + 1, &clash),
        SettlementError::IdempotencyConflict {
            key: "pay-1".into()
        }
    );
    // The buyer statement prints `<key>: <memo>` on the adjustment line.
    let day = Period::day(
        chrono::NaiveDate::from_ymd_opt(2026, 11, 10).expect("date"),
        "Asia/Shanghai",
    )
    .expect("period");
    let s = l.buyer_statement(B1, &day).expect("accrued");
    assert_eq!(s.adjustments.len(), 1);
    assert_eq!(
        s.adjustments[0].reference,
        "adj-1: goodwill_credit: outage apology [T-1]"
    );
    assert_eq!(s.adjustments[0].amount, d("50.00"));
}

#[test]
fn sla_cash_out_refund_and_write_off_respect_their_limits() {
    let (mut l, t) = sla_examples();
    assert_eq!(l.sla_credits_received(B1), d("45"));
    assert_eq!(l.sla_cashed_out(B1), d("0"));
    let cash = |amount: &str, key: &str| {
        adj(
            key,
            AdjustmentKind::SlaCashOut { buyer: B1 },
            amount,
            "terms: cash",
            None,
        )
    };
    assert_eq!(
        refused(&mut l, t, &cash("45.01", "c-0")),
        SettlementError::SlaCashOutExceeded {
            buyer: B1,
            available: d("45"),
            requested: d("45.01")
        }
    );
    let r = step(&mut l, t, cash("45", "c-1"));
    assert_eq!(
        (r.transfers[0].debit, r.transfers[0].credit),
        (Account::Buyer(B1), Account::ExternalCash)
    );
    assert_eq!(l.balance(Account::Buyer(B1)), d("820"));
    assert_eq!(l.sla_cashed_out(B1), d("45"));
    assert_eq!(
        refused(&mut l, t, &cash("0.01", "c-2")),
        SettlementError::SlaCashOutExceeded {
            buyer: B1,
            available: d("0"),
            requested: d("0.01")
        }
    );
    // A buyer with credits but less balance: buyer 2 holds 100.00 and received 30.00.
    let r = step(
        &mut l,
        t,
        adj(
            "r-2",
            AdjustmentKind::Refund { buyer: B2 },
            "90",
            "closing account",
            None,
        ),
    );
    assert_eq!(r.transfers[0].amount, d("90"));
    assert_eq!(
        refused(
            &mut l,
            t,
            &adj(
                "c-3",
                AdjustmentKind::SlaCashOut { buyer: B2 },
                "30",
                "cash",
                None
            )
        ),
        SettlementError::InsufficientFunds {
            account: Account::Buyer(B2),
            balance: d("10"),
            requested: d("30")
        }
    );

    let refund = |amount: &str, key: &str| {
        adj(
            key,
            AdjustmentKind::Refund { buyer: B1 },
            amount,
            "to bank",
            Some("BANK-9"),
        )
    };
    assert_eq!(
        refused(&mut l, t, &refund("820.01", "r-0")),
        SettlementError::InsufficientFunds {
            account: Account::Buyer(B1),
            balance: d("820"),
            requested: d("820.01")
        }
    );
    step(&mut l, t, refund("820", "r-1"));
    assert_eq!(l.balance(Account::Buyer(B1)), d("0"));
    // external cash: −1100 deposited + 45 + 90 + 820 paid out
    assert_eq!(l.balance(Account::ExternalCash), d("-145"));

    let write_off = |supplier, amount: &str, key: &str| {
        adj(
            key,
            AdjustmentKind::WriteOff { supplier },
            amount,
            "uncollectable",
            None,
        )
    };
    assert_eq!(
        refused(&mut l, t, &write_off(S101, "2.41", "w-0")),
        SettlementError::WriteOffExceedsDebt {
            supplier: S101,
            debt: d("2.4"),
            requested: d("2.41")
        }
    );
    assert_eq!(
        refused(&mut l, t, &write_off(S100, "0.01", "w-1")),
        SettlementError::WriteOffExceedsDebt {
            supplier: S100,
            debt: d("0"),
            requested: d("0.01")
        }
    );
    let r = step(&mut l, t, write_off(S101, "2.40", "w-2"));
    assert_eq!(
        (r.transfers[0].debit, r.transfers[0].credit),
        (Account::PlatformFee, Account::Supplier(S101))
    );
    assert_eq!(l.balance(Account::Supplier(S101)), d("0"));
    assert_eq!(l.balance(Account::PlatformFee), d("14.4"));
}

#[test]
fn corrections_and_refused_inputs() {
    let (mut l, t) = sla_examples();
    let correction = |debit, credit, amount: &str, key: &str| {
        adj(
            key,
            AdjustmentKind::Correction { debit, credit },
            amount,
            "fix",
            Some("lease:1"),
        )
    };
    let r = step(
        &mut l,
        t,
        correction(Account::Supplier(S100), Account::Buyer(B1), "1", "k-1"),
    );
    assert_eq!(r.transfers[0].amount, d("1"));
    assert_eq!(l.balance(Account::Buyer(B1)), d("866"));
    assert_eq!(l.balance(Account::Supplier(S100)), d("119.6"));
    assert_eq!(
        refused(
            &mut l,
            t,
            &correction(Account::Buyer(B2), Account::PlatformFee, "100.01", "k-2")
        ),
        SettlementError::InsufficientFunds {
            account: Account::Buyer(B2),
            balance: d("100"),
            requested: d("100.01")
        }
    );
    assert!(matches!(
        refused(
            &mut l,
            t,
            &correction(Account::SlaCredits, Account::Buyer(B1), "1", "k-3")
        ),
        SettlementError::InvalidAccount {
            account: Account::SlaCredits,
            ..
        }
    ));
    assert!(matches!(
        refused(
            &mut l,
            t,
            &correction(Account::Buyer(B1), Account::Buyer(B1), "1", "k-4")
        ),
        SettlementError::InvalidAccount { .. }
    ));
    let good = AdjustmentKind::GoodwillCredit { buyer: B1 };
    assert_eq!(
        refused(&mut l, t, &adj("k-5", good, "0", "x", None)),
        SettlementError::NonPositiveAmount { amount: d("0") }
    );
    let too_much = (MAX_INPUT_AMOUNT + d("1")).to_string();
    assert!(matches!(
        refused(&mut l, t, &adj("k-6", good, &too_much, "x", None)),
        SettlementError::AmountOutOfRange { .. }
    ));
    assert!(matches!(
        refused(&mut l, t, &adj("k-7", good, "1", "  ", None)),
        SettlementError::InvalidAdjustment(_)
    ));
    let long = "x".repeat(MAX_REASON_CHARS + 1);
    assert!(matches!(
        refused(&mut l, t, &adj("k-8", good, "1", &long, None)),
        SettlementError::InvalidAdjustment(_)
    ));
    let long = "x".repeat(MAX_REFERENCE_CHARS + 1);
    assert!(matches!(
        refused(&mut l, t, &adj("k-9", good, "1", "x", Some(&long))),
        SettlementError::InvalidAdjustment(_)
    ));
    // A reference to a period that is not closed.
    let e = refused(&mut l, t, &adj("k-10", good, "1", "x", Some("period:1")));
    assert_eq!(
        e,
        SettlementError::InvalidAdjustment("reference period:<id> must name a closed period")
    );
}

#[test]
fn an_adjustment_referencing_a_closed_period_restates_it_and_posts_in_the_open_period() {
    let (mut l, _) = sla_examples();
    let nov = Period::month(2026, 11, "Asia/Shanghai").expect("month");
    step(
        &mut l,
        nov.to_ms,
        Input::ClosePeriod {
            key: "close-2026-11".into(),
            from_ms: nov.from_ms,
            to_ms: nov.to_ms,
        },
    );
    let at = nov.to_ms + 3_600_000;
    let r = step(
        &mut l,
        at,
        adj(
            "adj-nov",
            AdjustmentKind::GoodwillCredit { buyer: B2 },
            "5",
            "November outage, ticket T-7",
            Some("period:1"),
        ),
    );
    assert_eq!(r.transfers[0].restates, Some(PeriodId(1)));
    assert_eq!(r.transfers[0].at_ms, at);
    // One period, one reference: other spellings of its id name no closed period.
    for (i, reference) in ["period:01", "period:+1", "period: 1", "period:1 "]
        .iter()
        .enumerate()
    {
        let key = format!("adj-odd-{i}");
        let odd = adj(
            &key,
            AdjustmentKind::GoodwillCredit { buyer: B2 },
            "5",
            "November outage, ticket T-7",
            Some(reference),
        );
        assert_eq!(
            refused(&mut l, at, &odd),
            SettlementError::InvalidAdjustment("reference period:<id> must name a closed period"),
            "{reference}"
        );
    }
}

#[test]
fn the_typed_adjustment_has_a_stable_serde_shape() {
    let input = adj(
        "adj-1",
        AdjustmentKind::Correction {
            debit: Account::PlatformFee,
            credit: Account::Supplier(S100),
        },
        "1.5",
        "fee refund",
        None,
    );
    let json = serde_json::to_value(&input).expect("serialises");
    assert_eq!(
        json,
        serde_json::json!({
            "type": "adjust",
            "key": "adj-1",
            "kind": {
                "kind": "correction",
                "debit": {"kind": "platform_fee"},
                "credit": {"kind": "supplier", "id": 100}
            },
            "amount": "1.5",
            "reason": "fee refund",
            "reference": null
        })
    );
    let back: Input = serde_json::from_value(json).expect("deserialises");
    assert_eq!(back, input);
}
