//! Ledger behaviour: metering, accrual, idempotency, insufficient funds,
//! SLA credits, refunds, fees. Expected amounts are hand-computed in comments.

use crate::common::*;
use rust_decimal::Decimal;
use settlement::{
    Account, AccountId, Config, EndReason, Input, LeaseId, LeaseToEnd, Ledger, SettlementError,
    TransferKind,
};

const T0: i64 = 1_764_432_000_000; // 2025-11-29T16:00:00Z = 2025-11-30 00:00 Asia/Shanghai

fn ledger() -> Ledger {
    Ledger::new(Config::default()).expect("default config is valid")
}

#[test]
fn deposits_are_idempotent_and_conflicts_refused() {
    let mut l = ledger();
    let first = step(&mut l, T0, deposit("pay-1", BUYER, "100.00"));
    assert!(!first.replayed);
    assert_eq!(first.transfers.len(), 1);
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("100"));
    assert_eq!(l.balance(Account::ExternalCash), d("-100"));

    // Same key, same content, even later: one effect, first result.
    let again = step(&mut l, T0 + 5_000, deposit("pay-1", BUYER, "100.00"));
    assert!(again.replayed);
    assert_eq!(again.transfers, first.transfers);
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("100"));

    // Same key, different content: refused, nothing changes.
    let err = l
        .apply(T0 + 6_000, &deposit("pay-1", BUYER, "200.00"))
        .unwrap_err();
    assert_eq!(
        err,
        SettlementError::IdempotencyConflict {
            key: "pay-1".into()
        }
    );
    assert!(err.to_string().contains("pay-1"));
    let err = l
        .apply(T0 + 6_000, &deposit("pay-1", AccountId(2), "100.00"))
        .unwrap_err();
    assert!(matches!(err, SettlementError::IdempotencyConflict { .. }));
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("100"));
    assert_eq!(l.journal().len(), 1);
}

#[test]
fn bad_amounts_and_time_order_are_refused() {
    let mut l = ledger();
    step(&mut l, T0, deposit("a", BUYER, "1"));
    assert!(matches!(
        l.apply(T0, &deposit("b", BUYER, "0")),
        Err(SettlementError::NonPositiveAmount { .. })
    ));
    assert!(matches!(
        l.apply(T0, &deposit("c", BUYER, "-5")),
        Err(SettlementError::NonPositiveAmount { .. })
    ));
    assert!(matches!(
        l.apply(T0, &deposit("e", BUYER, "0.0000000000001")),
        Err(SettlementError::AmountOutOfRange { .. })
    ));
    assert_eq!(
        l.apply(T0 - 1, &deposit("f", BUYER, "1")),
        Err(SettlementError::ClockWentBackwards {
            at_ms: T0 - 1,
            clock_ms: T0
        })
    );
    assert!(matches!(
        l.apply(-1, &Input::Accrue { now_ms: -1 }),
        Err(SettlementError::TimeOutOfRange { .. })
    ));
    assert_eq!(
        l.apply(T0, &Input::Accrue { now_ms: T0 + 1 }),
        Err(SettlementError::AccrueInFuture {
            now_ms: T0 + 1,
            at_ms: T0
        })
    );
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("1"));
}

#[test]
fn lease_fact_errors() {
    let mut l = ledger();
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 1, T0));
    assert_eq!(
        l.apply(T0, &lease(1, "H100-80G", "22.50", 1, T0)),
        Err(SettlementError::DuplicateLease(LeaseId(1)))
    );
    assert!(matches!(
        l.apply(T0, &lease(2, "H100-80G", "22.50", 0, T0)),
        Err(SettlementError::InvalidLease { .. })
    ));
    assert_eq!(
        l.apply(T0, &end(9, T0, EndReason::Released)),
        Err(SettlementError::UnknownLease(LeaseId(9)))
    );
    assert_eq!(
        l.apply(T0, &end(1, T0 - 1, EndReason::Released)),
        Err(SettlementError::EndBeforeStart {
            lease: LeaseId(1),
            start_ms: T0,
            end_ms: T0 - 1
        })
    );
    step(&mut l, T0, end(1, T0, EndReason::Released));
    assert_eq!(
        l.apply(T0, &end(1, T0, EndReason::Released)),
        Err(SettlementError::LeaseAlreadyEnded(LeaseId(1)))
    );
    assert_eq!(
        l.apply(
            T0,
            &Input::Failover {
                lease: LeaseId(1),
                replacement_start_ms: None,
                replacement_price: None,
            }
        ),
        Err(SettlementError::NotNodeFailure(LeaseId(1)))
    );
}

#[test]
fn one_second_lease_and_fee_split() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "10"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 1, T0));
    let r = step(&mut l, T0 + 1000, end(1, T0 + 1000, EndReason::Released));
    // 22.50 / 3600 = 0.00625 charged; fee 8 % = 0.0005; supplier 0.00575.
    assert_eq!(r.transfers.len(), 2);
    assert_eq!(r.transfers[0].amount, d("0.00625"));
    assert_eq!(
        r.transfers[0].kind,
        TransferKind::Charge { lease: LeaseId(1) }
    );
    assert_eq!(r.transfers[1].amount, d("0.0005"));
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("9.99375"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("0.00575"));
    assert_eq!(l.balance(Account::PlatformFee), d("0.0005"));
    let t = l.lease_totals(LeaseId(1)).expect("known lease");
    assert_eq!(t.billed_seconds, 1);
}

#[test]
fn sub_second_lease_is_billed_one_second() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "10"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 1, T0));
    step(&mut l, T0 + 400, end(1, T0 + 400, EndReason::Released));
    let t = l.lease_totals(LeaseId(1)).expect("known lease");
    assert_eq!((t.billed_seconds, t.amount), (1, d("0.00625")));
}

#[test]
fn zero_length_lease_costs_nothing_without_a_minimum() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "10"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 1, T0));
    let r = step(&mut l, T0, end(1, T0, EndReason::Released));
    assert!(r.transfers.is_empty());
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("10"));
}

#[test]
fn accrual_posts_each_tick_and_the_rest_at_end() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "100"));
    // 8 x 22.50 = 180 CNY/h = 0.05 CNY/s
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0));
    let r = step(
        &mut l,
        T0 + 60_000,
        Input::Accrue {
            now_ms: T0 + 60_000,
        },
    );
    assert_eq!(r.transfers[0].amount, d("3.00")); // 60 s
    // A tick at the same instant posts nothing more.
    assert!(
        step(
            &mut l,
            T0 + 60_000,
            Input::Accrue {
                now_ms: T0 + 60_000
            }
        )
        .transfers
        .is_empty()
    );
    let r = step(
        &mut l,
        T0 + 120_000,
        Input::Accrue {
            now_ms: T0 + 120_000,
        },
    );
    assert_eq!(r.transfers[0].amount, d("3.00")); // 60 s more
    // Ends at 150.5 s -> 151 started seconds -> 31 more seconds = 1.55
    let r = step(
        &mut l,
        T0 + 150_500,
        end(1, T0 + 150_500, EndReason::Expired),
    );
    assert_eq!(r.transfers[0].amount, d("1.55"));
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("92.45"));
    // fee: 8 % of 7.55 = 0.604
    assert_eq!(l.balance(Account::PlatformFee), d("0.604"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("6.946"));
}

#[test]
fn runway_available_balance_and_insufficient_funds_mid_lease() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "5.00"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0)); // 0.05 CNY/s
    assert_eq!(l.runway_seconds(BUYER, T0), Some(100));
    assert_eq!(l.available_balance(BUYER, T0 + 30_000), d("3.50"));
    step(
        &mut l,
        T0 + 60_000,
        Input::Accrue {
            now_ms: T0 + 60_000,
        },
    );
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("2.00"));
    assert_eq!(l.runway_seconds(BUYER, T0 + 60_000), Some(40));
    assert!(l.leases_to_end(T0 + 60_000).is_empty());
    // At 100 s the unposted 40 s (2.00) use up everything.
    assert_eq!(l.available_balance(BUYER, T0 + 100_000), d("0"));
    assert_eq!(
        l.leases_to_end(T0 + 100_000),
        vec![LeaseToEnd {
            lease: LeaseId(1),
            buyer: BUYER
        }]
    );
    // The gateway is late: at 120 s 3.00 is due, only 2.00 is there.
    let r = step(
        &mut l,
        T0 + 120_000,
        Input::Accrue {
            now_ms: T0 + 120_000,
        },
    );
    assert_eq!(r.transfers[0].amount, d("2.00"));
    assert_eq!(r.shortfalls.len(), 1);
    assert_eq!(r.shortfalls[0].amount, d("1.00"));
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("0"));
    assert_eq!(l.runway_seconds(BUYER, T0 + 120_000), Some(0));
    assert_eq!(
        l.leases_to_end(T0 + 120_000),
        vec![LeaseToEnd {
            lease: LeaseId(1),
            buyer: BUYER
        }]
    );
    // The engine ends it at 121 s: one more second (0.05) due, nothing collected.
    let r = step(
        &mut l,
        T0 + 121_000,
        end(1, T0 + 121_000, EndReason::InsufficientFunds),
    );
    assert!(r.transfers.is_empty());
    assert_eq!(r.shortfalls[0].amount, d("0.05"));
    let t = l.lease_totals(LeaseId(1)).expect("known lease");
    assert_eq!(
        (t.amount, t.collected, t.unpaid),
        (d("6.05"), d("5.00"), d("1.05"))
    );
    // fee only on what was collected: 8 % of 5.00
    assert_eq!(t.fee, d("0.40"));
    assert_eq!(l.balance(Account::PlatformFee), d("0.40"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("4.60"));
    assert!(l.leases_to_end(T0 + 121_000).is_empty());
    assert_eq!(l.runway_seconds(BUYER, T0 + 121_000), None);
}

#[test]
fn payouts_limited_to_payable_and_idempotent() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "100"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0));
    step(
        &mut l,
        T0 + 600_000,
        end(1, T0 + 600_000, EndReason::Released),
    ); // 30.00, payable 27.60
    let payout = |amount: &str| Input::Payout {
        key: "bank-1".into(),
        supplier: SUPPLIER,
        amount: d(amount),
    };
    assert!(matches!(
        l.apply(T0 + 600_000, &payout("27.61")),
        Err(SettlementError::InsufficientFunds { .. })
    ));
    step(&mut l, T0 + 600_000, payout("27.60"));
    assert!(step(&mut l, T0 + 700_000, payout("27.60")).replayed);
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("0"));
    assert_eq!(l.balance(Account::ExternalCash), d("-72.40"));
}

#[test]
fn adjustments_cannot_overdraw_a_buyer() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "10"));
    let adj = |amount: &str| Input::Adjustment {
        key: "ticket-7".into(),
        debit: Account::Buyer(BUYER),
        credit: Account::PlatformFee,
        amount: d(amount),
        memo: "storage".into(),
    };
    assert!(matches!(
        l.apply(T0, &adj("10.01")),
        Err(SettlementError::InsufficientFunds { .. })
    ));
    step(&mut l, T0, adj("4"));
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("6"));
    assert!(matches!(
        l.apply(
            T0,
            &Input::Adjustment {
                key: "x".into(),
                debit: Account::SlaCredits,
                credit: Account::PlatformFee,
                amount: d("1"),
                memo: String::new()
            }
        ),
        Err(SettlementError::InvalidAccount { .. })
    ));
}

#[test]
fn node_failure_refunds_seconds_accrued_after_the_last_heartbeat() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "100"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0));
    step(
        &mut l,
        T0 + 120_000,
        Input::Accrue {
            now_ms: T0 + 120_000,
        },
    ); // 6.00
    // Last heartbeat was at 100 s: 20 s = 1.00 back, fee 0.08 back.
    let r = step(
        &mut l,
        T0 + 130_000,
        end(1, T0 + 100_000, EndReason::NodeFailure),
    );
    assert_eq!(r.transfers.len(), 2);
    assert_eq!(
        r.transfers[0].kind,
        TransferKind::Refund { lease: LeaseId(1) }
    );
    assert_eq!(r.transfers[0].amount, d("1.00"));
    assert_eq!(r.transfers[1].amount, d("0.08"));
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("95.00"));
    assert_eq!(l.balance(Account::PlatformFee), d("0.40"));
}

#[test]
fn sla_credit_with_failover_is_ten_times_the_outage_charge() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "1000"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0));
    step(
        &mut l,
        T0 + 3_600_000,
        end(1, T0 + 3_600_000, EndReason::NodeFailure),
    ); // 180.00
    // Replacement started 90 s after the failure: 90 s x 0.05 = 4.50, x10 = 45.00.
    let r = step(
        &mut l,
        T0 + 3_700_000,
        Input::Failover {
            lease: LeaseId(1),
            replacement_start_ms: Some(T0 + 3_690_000),
            replacement_price: None,
        },
    );
    assert_eq!(r.transfers.len(), 2);
    assert_eq!(r.transfers[0].debit, Account::Supplier(SUPPLIER));
    assert_eq!(r.transfers[0].credit, Account::SlaCredits);
    assert_eq!(r.transfers[1].credit, Account::Buyer(BUYER));
    assert!(r.transfers.iter().all(|t| t.amount == d("45.00")));
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("865.00")); // 1000 - 180 + 45
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("120.60")); // 165.60 - 45
    assert_eq!(l.balance(Account::SlaCredits), d("0"));
    assert_eq!(
        l.apply(
            T0 + 3_700_000,
            &Input::Failover {
                lease: LeaseId(1),
                replacement_start_ms: None,
                replacement_price: None,
            }
        ),
        Err(SettlementError::DuplicateFailover(LeaseId(1)))
    );
}

#[test]
fn sla_credit_without_failover_is_capped_at_the_lease_charges() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "1000"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0));
    step(
        &mut l,
        T0 + 600_000,
        end(1, T0 + 600_000, EndReason::NodeFailure),
    ); // 30.00
    // No failover: 1 h x 180 x 10 = 1800, capped at the 30.00 charged.
    step(
        &mut l,
        T0 + 700_000,
        Input::Failover {
            lease: LeaseId(1),
            replacement_start_ms: None,
            replacement_price: None,
        },
    );
    assert_eq!(
        l.lease_totals(LeaseId(1)).map(|t| t.sla_credit),
        Some(d("30"))
    );
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("1000"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("-2.40")); // 27.60 - 30.00
}

#[test]
fn sla_outage_is_capped_at_one_hour_even_with_a_late_failover() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "10000"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0));
    step(
        &mut l,
        T0 + 72_000_000,
        end(1, T0 + 72_000_000, EndReason::NodeFailure),
    ); // 20 h = 3600.00
    // Replacement 2 h later: outage capped at 1 h = 180.00, x10 = 1800.00 (< 3600).
    step(
        &mut l,
        T0 + 80_000_000,
        Input::Failover {
            lease: LeaseId(1),
            replacement_start_ms: Some(T0 + 72_000_000 + 7_200_000),
            replacement_price: None,
        },
    );
    assert_eq!(
        l.lease_totals(LeaseId(1)).map(|t| t.sla_credit),
        Some(d("1800"))
    );
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("8200")); // 10000 - 3600 + 1800
}

#[test]
fn preemption_with_notice_earns_no_credit() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "100"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0));
    // Billing ends at the preemption deadline.
    step(
        &mut l,
        T0 + 60_000,
        end(1, T0 + 600_000, EndReason::Preempted),
    );
    assert_eq!(l.lease_totals(LeaseId(1)).map(|t| t.amount), Some(d("30")));
    assert_eq!(
        l.apply(
            T0 + 700_000,
            &Input::Failover {
                lease: LeaseId(1),
                replacement_start_ms: Some(T0 + 700_000),
                replacement_price: None,
            }
        ),
        Err(SettlementError::NotNodeFailure(LeaseId(1)))
    );
    assert_eq!(l.balance(Account::SlaCredits), d("0"));
}

#[test]
fn minimum_billed_time_is_per_market_and_only_for_buyer_ends() {
    let mut config = Config::default();
    config
        .min_billed_seconds_by_sku
        .insert("RTX4090-24G".into(), 600);
    let mut l = Ledger::new(config).expect("valid config");
    step(&mut l, T0, deposit("p", BUYER, "100"));
    step(&mut l, T0, lease(1, "RTX4090-24G", "1.98", 1, T0));
    step(&mut l, T0, lease(2, "RTX4090-24G", "1.98", 1, T0));
    step(&mut l, T0, lease(3, "H100-80G", "22.50", 1, T0));
    step(
        &mut l,
        T0 + 30_000,
        end(1, T0 + 30_000, EndReason::Released),
    );
    step(
        &mut l,
        T0 + 30_000,
        end(2, T0 + 30_000, EndReason::Preempted),
    );
    step(
        &mut l,
        T0 + 30_000,
        end(3, T0 + 30_000, EndReason::Released),
    );
    let total = |id| {
        l.lease_totals(LeaseId(id))
            .map(|t| (t.billed_seconds, t.amount))
    };
    assert_eq!(total(1), Some((600, d("0.33")))); // 1.98 x 600 / 3600
    assert_eq!(total(2), Some((30, d("0.0165")))); // preempted: no minimum
    assert_eq!(total(3), Some((30, d("0.1875")))); // no minimum for H100
}

#[test]
fn invalid_config_is_refused() {
    let config = Config {
        fee_rate: d("1.5"),
        ..Config::default()
    };
    assert!(matches!(
        Ledger::new(config),
        Err(SettlementError::InvalidConfig(_))
    ));
    let config = Config {
        sla_multiple: d("-1"),
        ..Config::default()
    };
    assert!(matches!(
        Ledger::new(config),
        Err(SettlementError::InvalidConfig(_))
    ));
}

#[test]
fn thirty_day_lease_accrued_hourly() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "200000"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0));
    for h in 1..=720 {
        let now = T0 + h * 3_600_000;
        let r = step(&mut l, now, Input::Accrue { now_ms: now });
        assert_eq!(r.transfers[0].amount, d("180"));
    }
    step(
        &mut l,
        T0 + 720 * 3_600_000,
        end(1, T0 + 720 * 3_600_000, EndReason::Expired),
    );
    let t = l.lease_totals(LeaseId(1)).expect("known lease");
    assert_eq!((t.billed_seconds, t.amount), (2_592_000, d("129600")));
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("70400"));
    assert_eq!(l.balance(Account::PlatformFee), d("10368")); // 8 % of 129600
}

#[test]
fn deposits_to_other_buyers_do_not_pay_for_this_one() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", AccountId(2), "100"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0));
    let r = step(
        &mut l,
        T0 + 10_000,
        Input::Accrue {
            now_ms: T0 + 10_000,
        },
    );
    assert!(r.transfers.is_empty());
    assert_eq!(r.shortfalls[0].amount, d("0.50"));
    assert_eq!(l.balance(Account::Buyer(AccountId(2))), d("100"));
    assert_eq!(l.balance(Account::Buyer(BUYER)), Decimal::ZERO);
}

#[test]
fn a_top_up_after_a_shortfall_clears_the_must_end_flag_but_not_the_unpaid_amount() {
    let mut l = ledger();
    step(&mut l, T0, deposit("p", BUYER, "1.00"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 8, T0)); // 0.05 CNY/s
    let r = step(
        &mut l,
        T0 + 60_000,
        Input::Accrue {
            now_ms: T0 + 60_000,
        },
    ); // 3.00 due
    assert_eq!(r.shortfalls[0].amount, d("2.00"));
    assert_eq!(l.leases_to_end(T0 + 60_000).len(), 1);
    step(&mut l, T0 + 61_000, deposit("q", BUYER, "10.00"));
    // The next minute (3.00) is collected in full.
    let r = step(
        &mut l,
        T0 + 120_000,
        Input::Accrue {
            now_ms: T0 + 120_000,
        },
    );
    assert!(r.shortfalls.is_empty());
    assert_eq!(r.transfers[0].amount, d("3.00"));
    assert!(l.leases_to_end(T0 + 120_000).is_empty());
    let t = l.lease_totals(LeaseId(1)).expect("known lease");
    assert_eq!(
        (t.amount, t.collected, t.unpaid),
        (d("6.00"), d("4.00"), d("2.00"))
    );
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("7.00"));
}

#[test]
fn accrual_due_is_sixty_seconds_of_lease_time_after_the_last_charge() {
    let mut l = ledger();
    assert_eq!(l.accrual_due_ms(), None);
    step(&mut l, T0, deposit("p", BUYER, "100"));
    step(&mut l, T0, lease(1, "H100-80G", "22.50", 1, T0));
    assert_eq!(l.accrual_due_ms(), Some(T0 + 60_000));
    // Charged through 44.5 s -> 45 started seconds -> accrued to 45 s.
    step(
        &mut l,
        T0 + 44_500,
        Input::Accrue {
            now_ms: T0 + 44_500,
        },
    );
    assert_eq!(l.accrual_due_ms(), Some(T0 + 105_000));
    step(
        &mut l,
        T0 + 50_000,
        lease(2, "H100-80G", "22.50", 1, T0 + 50_000),
    );
    assert_eq!(l.accrual_due_ms(), Some(T0 + 105_000));
    step(
        &mut l,
        T0 + 100_000,
        Input::Accrue {
            now_ms: T0 + 100_000,
        },
    );
    assert_eq!(l.accrual_due_ms(), Some(T0 + 160_000));
    step(
        &mut l,
        T0 + 100_000,
        end(1, T0 + 100_000, EndReason::Released),
    );
    step(
        &mut l,
        T0 + 100_000,
        end(2, T0 + 100_000, EndReason::Released),
    );
    assert_eq!(l.accrual_due_ms(), None);
}
