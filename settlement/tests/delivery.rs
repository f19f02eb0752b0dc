//! Lease delivery (issue 15, docs/settlement.md "Delivery"): billing runs from ready to end,
//! a lease never delivered is charged zero and listed on the statements, SLA credits are
//! computed on billed (ready) time, and statements show ready time, billed seconds and end
//! reason in JSON, CSV and XLSX. Expected values are derived by hand in the comments, never
//! copied from the ledger.

use crate::common::*;
use settlement::reports::{csv::to_csv, to_json, xlsx::to_xlsx};
use settlement::{
    Account, AccountId, Config, DeliveryFailure, EndReason, Input, LeaseId, Ledger, Period,
    SettlementError,
};

const SH: &str = "Asia/Shanghai";
/// The fill: 2026-12-01 00:00:00 Shanghai. Provisioning starts here; nothing is billed yet.
const FILL: &str = "2026-12-01T00:00:00+08:00";

fn ledger() -> Ledger {
    Ledger::new(Config::default()).expect("default config is valid")
}

fn day() -> Period {
    Period::new(
        ms("2026-12-01T00:00:00+08:00"),
        ms("2026-12-02T00:00:00+08:00"),
        SH,
    )
    .expect("valid period")
}

fn failed(lease: u64, supplier: AccountId, gpus: u32, at_ms: i64) -> Input {
    Input::DeliveryFailed {
        lease: LeaseId(lease),
        buyer: BUYER,
        supplier,
        sku: "H100-80G".to_string(),
        region: "cn-east-2".to_string(),
        gpus,
        at_ms,
        sla: None,
    }
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("utf-8")
}

/// The supplier CSV row of a failed delivery: 18 columns, the lease, SKU, region and GPUs,
/// `start` = failure time, 0 billed seconds, amount 0.00, end reason `not_delivered`.
fn failed_delivery_row(lease: u64, gpus: u32, at_local: &str) -> String {
    format!(
        "\nfailed_delivery,,{lease},,H100-80G,cn-east-2,{gpus},{at_local},,0,,,,,0.00,,not_delivered,\n"
    )
}

/// A lease ready at 00:00:30 (it provisioned from the fill at 00:00:00) and released at
/// 00:10:00, 12 CNY/GPU-hour × 2 GPUs: billed from ready, 570 s × 24 / 3600 = 3.80 exactly;
/// the 30 s of provisioning are never billed.
#[test]
fn billing_runs_from_ready_to_end_never_provisioning() {
    let mut l = ledger();
    step(&mut l, ms(FILL), deposit("pay-1", BUYER, "100"));
    // Nothing is started during provisioning: an accrual then charges nothing.
    let a = step(
        &mut l,
        ms("2026-12-01T00:00:20+08:00"),
        Input::Accrue {
            now_ms: ms("2026-12-01T00:00:20+08:00"),
        },
    );
    assert!(a.transfers.is_empty());
    let ready = ms("2026-12-01T00:00:30+08:00");
    step(&mut l, ready, lease(1, "RTX5090-32G", "12", 2, ready));
    let end_ms = ms("2026-12-01T00:10:00+08:00");
    step(&mut l, end_ms, end(1, end_ms, EndReason::Released));

    let t = l.lease_totals(LeaseId(1)).expect("known lease");
    assert_eq!((t.billed_seconds, t.amount), (570, d("3.80")));
    // fee 8 % of 3.80 = 0.304; supplier 3.80 - 0.304 = 3.496
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("96.20"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("3.496"));
    assert_eq!(l.balance(Account::PlatformFee), d("0.304"));

    let b = l.buyer_statement(BUYER, &day()).expect("accrued");
    assert_eq!(b.charges.len(), 1);
    let c = &b.charges[0];
    assert_eq!((c.ready_ms, c.start_ms, c.end_ms), (ready, ready, end_ms));
    assert_eq!(c.ready_local, "2026-12-01T00:00:30.000+08:00");
    assert_eq!((c.billed_seconds, c.amount), (570, d("3.80")));
    assert_eq!(c.end_reason, Some(EndReason::Released));
    assert_eq!(b.closing_balance, d("96.20"));
    let csv = text(to_csv(&b.table()).expect("csv"));
    assert!(
        csv.contains(
            "\ncharge,,1,,RTX5090-32G,cn-east-2,2,2026-12-01T00:00:30.000+08:00,2026-12-01T00:10:00.000+08:00,570,12,3.80,2026-12-01T00:00:30.000+08:00,released\n"
        ),
        "{csv}"
    );

    let s = l.supplier_statement(SUPPLIER, &day()).expect("accrued");
    let e = &s.earnings[0];
    assert_eq!((e.ready_ms, e.billed_seconds), (ready, 570));
    assert_eq!(e.end_reason, Some(EndReason::Released));
    // gross 3.80; the running payable 3.496 prints 3.50, so the fee prints 0.30, net 3.50.
    assert_eq!((e.gross, e.fee, e.net), (d("3.80"), d("0.30"), d("3.50")));
    assert_eq!(s.totals.failed_deliveries, 0);
    let csv = text(to_csv(&s.table()).expect("csv"));
    assert!(
        csv.starts_with(
            "section,transfer_id,lease_id,reference,sku,region,gpus,start,end,billed_seconds,unit_price_cny_per_gpu_hour,gross_cny,fee_cny,net_cny,amount_cny,ready,end_reason,count\n"
        ),
        "{csv}"
    );
    assert!(
        csv.contains(
            "\nearning,,1,,RTX5090-32G,cn-east-2,2,2026-12-01T00:00:30.000+08:00,2026-12-01T00:10:00.000+08:00,570,12,3.80,0.30,3.50,,2026-12-01T00:00:30.000+08:00,released,\n"
        ),
        "{csv}"
    );
    assert!(csv.contains(&format!("\ntotal_failed_deliveries{}0\n", ",".repeat(17))));

    let json = text(to_json(&b).expect("json"));
    assert!(json.contains("\"ready_local\": \"2026-12-01T00:00:30.000+08:00\""));
    assert!(json.contains("\"end_reason\": \"released\""));
    assert!(json.contains("\"billed_seconds\": 570"));
    assert!(l.trial_balance(&day()).expect("accrued").balanced());
}

/// A lease whose provisioning deadline passed (180 s after the fill) is never started in the
/// ledger: its `DeliveryFailed` moves no money, is listed on the supplier statement at 0.00
/// and counted, shows on the buyer statement as not delivered 0.00, and repeats are no-ops.
#[test]
fn a_failed_delivery_is_charged_zero_listed_counted_and_idempotent() {
    let mut l = ledger();
    step(&mut l, ms(FILL), deposit("pay-1", BUYER, "100"));
    let at = ms("2026-12-01T00:03:00+08:00");
    let first = step(&mut l, at, failed(9, SUPPLIER, 8, at));
    assert!(first.transfers.is_empty() && first.shortfalls.is_empty());
    assert!(!first.replayed);
    assert_eq!(
        l.delivery_failure(LeaseId(9)),
        Some(&DeliveryFailure {
            lease: LeaseId(9),
            buyer: BUYER,
            supplier: SUPPLIER,
            sku: "H100-80G".into(),
            region: "cn-east-2".into(),
            gpus: 8,
            at_ms: at,
        })
    );
    // Nothing moved: the deposit is all there is.
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("100"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("0"));
    assert_eq!(l.balance(Account::PlatformFee), d("0"));
    assert_eq!(l.journal().len(), 1);
    assert!(l.lease_totals(LeaseId(9)).is_none(), "never started");

    // The same fact again, later or even earlier than the clock: replayed, nothing posted.
    let later = ms("2026-12-01T00:05:00+08:00");
    step(&mut l, later, deposit("pay-2", BUYER, "1"));
    for t in [later, at] {
        let again = step(&mut l, t, failed(9, SUPPLIER, 8, at));
        assert!(again.replayed && again.transfers.is_empty());
    }
    // A different fact for the same lease: refused, the record is unchanged.
    for other in [
        failed(9, SUPPLIER, 4, at),
        failed(9, AccountId(101), 8, at),
        failed(9, SUPPLIER, 8, at + 1),
    ] {
        assert_eq!(
            l.apply(later, &other),
            Err(SettlementError::DeliveryFailureConflict(LeaseId(9)))
        );
    }
    assert_eq!(l.delivery_failure(LeaseId(9)).map(|f| f.gpus), Some(8));

    let s = l.supplier_statement(SUPPLIER, &day()).expect("accrued");
    assert_eq!(
        s.failed_deliveries.len(),
        1,
        "listed once despite the repeats"
    );
    let f = &s.failed_deliveries[0];
    assert_eq!(
        (f.lease, f.sku.as_str(), f.gpus, f.at_ms, f.amount),
        (LeaseId(9), "H100-80G", 8, at, d("0.00"))
    );
    assert_eq!(f.at_local, "2026-12-01T00:03:00.000+08:00");
    assert_eq!(s.totals.failed_deliveries, 1);
    assert_eq!((s.totals.gross, s.closing_payable), (d("0.00"), d("0.00")));
    let csv = text(to_csv(&s.table()).expect("csv"));
    assert!(
        csv.contains(&failed_delivery_row(9, 8, "2026-12-01T00:03:00.000+08:00")),
        "{csv}"
    );
    assert!(
        csv.contains(&format!("\ntotal_failed_deliveries{}1\n", ",".repeat(17))),
        "{csv}"
    );
    let json = text(to_json(&s).expect("json"));
    assert!(json.contains("\"failed_deliveries\": 1"), "{json}");
    assert!(json.contains("\"amount\": \"0.00\""), "{json}");

    let b = l.buyer_statement(BUYER, &day()).expect("accrued");
    assert_eq!(b.not_delivered.len(), 1);
    assert_eq!(b.not_delivered[0].amount, d("0.00"));
    assert!(b.charges.is_empty());
    assert_eq!(
        (b.totals.charges, b.closing_balance),
        (d("0.00"), d("101.00"))
    );
    let csv = text(to_csv(&b.table()).expect("csv"));
    assert!(
        csv.contains(
            "\nnot_delivered,,9,,H100-80G,cn-east-2,8,2026-12-01T00:03:00.000+08:00,,0,,0.00,,not_delivered\n"
        ),
        "{csv}"
    );

    // Another supplier's statement and the next day's list nothing.
    let other = l.supplier_statement(AccountId(101), &day()).expect("ok");
    assert!(other.failed_deliveries.is_empty());
    let next = Period::new(day().to_ms, day().to_ms + 86_400_000, SH).expect("valid");
    let s = l.supplier_statement(SUPPLIER, &next).expect("accrued");
    assert_eq!(
        (s.failed_deliveries.len(), s.totals.failed_deliveries),
        (0, 0)
    );

    // The trial balance stays zero: no transfer was posted for the failure.
    let tb = l.trial_balance(&day()).expect("accrued");
    assert!(tb.balanced());
    assert_eq!(
        (tb.totals.opening, tb.totals.closing),
        (d("0.00"), d("0.00"))
    );
    assert_eq!(tb.totals.debits, tb.totals.credits);
    assert_eq!(tb.totals.debits, d("101.00"), "the two deposits only");

    // XLSX renders the new rows and stays deterministic.
    let xlsx = || {
        to_xlsx(&[
            l.buyer_statement(BUYER, &day()).expect("accrued").table(),
            l.supplier_statement(SUPPLIER, &day())
                .expect("accrued")
                .table(),
        ])
        .expect("xlsx")
    };
    let a = xlsx();
    assert_eq!(&a[..2], b"PK");
    assert_eq!(a, xlsx());
}

#[test]
fn delivery_failed_is_validated_and_a_refusal_changes_nothing() {
    let mut l = ledger();
    let t = ms("2026-12-01T00:03:00+08:00");
    step(&mut l, t, deposit("pay-1", BUYER, "10"));
    assert!(matches!(
        l.apply(t, &failed(5, SUPPLIER, 0, t)),
        Err(SettlementError::InvalidLease {
            lease: LeaseId(5),
            ..
        })
    ));
    assert!(matches!(
        l.apply(t, &failed(5, SUPPLIER, 100_001, t)),
        Err(SettlementError::InvalidLease { .. })
    ));
    assert_eq!(
        l.apply(t, &failed(5, SUPPLIER, 1, -1)),
        Err(SettlementError::TimeOutOfRange { ms: -1 })
    );
    assert!(matches!(
        l.apply(t - 1, &failed(5, SUPPLIER, 1, t - 1)),
        Err(SettlementError::ClockWentBackwards { .. })
    ));
    assert!(l.delivery_failure(LeaseId(5)).is_none(), "nothing recorded");
    // The refused facts did not take the lease id: a valid one is recorded once.
    assert!(!step(&mut l, t, failed(5, SUPPLIER, 1, t)).replayed);

    // A lease started in the ledger was ready: it was delivered and cannot fail delivery.
    step(&mut l, t, lease(6, "H100-80G", "22.50", 1, t));
    assert_eq!(
        l.apply(t, &failed(6, SUPPLIER, 1, t)),
        Err(SettlementError::LeaseWasReady(LeaseId(6)))
    );
    // A lease recorded as not delivered never starts (its replacement has a new id).
    assert_eq!(
        l.apply(t, &lease(5, "H100-80G", "22.50", 1, t)),
        Err(SettlementError::DeliveryAlreadyFailed(LeaseId(5)))
    );
    // No SLA credit for a failed delivery: there is no ledger lease to fail over.
    assert_eq!(
        l.apply(
            t,
            &Input::Failover {
                lease: LeaseId(5),
                replacement_start_ms: None,
                replacement_price: None,
            }
        ),
        Err(SettlementError::UnknownLease(LeaseId(5)))
    );
    assert!(l.check_invariants().is_ok());
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("10"));
}

/// 8 × H100 at 22.50 = 180 CNY/h. Provisioning began at 00:00:00 (the fill), the lease was
/// ready at 00:03:00 (= t) and its node failed at 00:13:00 (last heartbeat, t + 600 s).
/// No replacement: the base credit 10 × 180 × 1 h = 1800 is capped at what the buyer paid,
/// which is the billed (ready) time X = 600 s: 180 × 600 / 3600 = 30.00. Computed on
/// provisioning as well (780 s) it would have been 39.00.
#[test]
fn sla_credit_is_computed_on_billed_ready_time_not_provisioning() {
    let mut l = ledger();
    step(&mut l, ms(FILL), deposit("pay-1", BUYER, "1000"));
    let ready = ms("2026-12-01T00:03:00+08:00");
    step(&mut l, ready, lease(1, "H100-80G", "22.50", 8, ready));
    let fail = ready + 600_000;
    step(&mut l, fail, end(1, fail, EndReason::NodeFailure));
    let f = step(
        &mut l,
        fail + 1_000,
        Input::Failover {
            lease: LeaseId(1),
            replacement_start_ms: None,
            replacement_price: None,
        },
    );
    let t = l.lease_totals(LeaseId(1)).expect("known");
    assert_eq!((t.billed_seconds, t.collected), (600, d("30.00")));
    assert_eq!(t.sla_credit, d("30.00"));
    assert_eq!(f.transfers.len(), 2, "funding and credit");
    // buyer 1000 - 30 + 30; supplier 30 - 2.40 fee - 30 credit
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("1000"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("-2.40"));

    // Same shape, failing 20 s after ready, replacement ready 90 s after the failure: the
    // outage credit 10 × 180 × 90 / 3600 = 45.00 is capped at the 20 s billed from ready,
    // 180 × 20 / 3600 = 1.00.
    let ready2 = ms("2026-12-01T01:00:00+08:00");
    step(&mut l, ready2, lease(2, "H100-80G", "22.50", 8, ready2));
    step(
        &mut l,
        ready2 + 20_000,
        end(2, ready2 + 20_000, EndReason::NodeFailure),
    );
    step(
        &mut l,
        ready2 + 110_000,
        Input::Failover {
            lease: LeaseId(2),
            replacement_start_ms: Some(ready2 + 110_000),
            replacement_price: None,
        },
    );
    assert_eq!(
        l.lease_totals(LeaseId(2))
            .map(|t| (t.collected, t.sla_credit)),
        Some((d("1.00"), d("1.00")))
    );

    // The statement shows the ready time, the billed seconds and the end reason.
    let b = l.buyer_statement(BUYER, &day()).expect("accrued");
    let lines: Vec<_> = b
        .charges
        .iter()
        .map(|c| (c.lease, c.ready_ms, c.billed_seconds, c.end_reason))
        .collect();
    assert_eq!(
        lines,
        vec![
            (LeaseId(1), ready, 600, Some(EndReason::NodeFailure)),
            (LeaseId(2), ready2, 20, Some(EndReason::NodeFailure)),
        ]
    );
    assert_eq!(b.totals.credits, d("31.00"));
    assert!(l.trial_balance(&day()).expect("accrued").balanced());
}

/// The engine never ends a ready lease `not_delivered`; should such an end come for a lease
/// the ledger started, it is charged nothing (accrued seconds refunded), earns no SLA credit
/// and is listed as a failed delivery at its end time. 8 × H100 accrued 60 s = 3.00, fee 0.24.
#[test]
fn a_started_lease_ended_not_delivered_is_refunded_and_listed() {
    let mut l = ledger();
    step(&mut l, ms(FILL), deposit("pay-1", BUYER, "100"));
    let start = ms("2026-12-01T00:03:00+08:00");
    step(&mut l, start, lease(3, "H100-80G", "22.50", 8, start));
    step(
        &mut l,
        start + 60_000,
        Input::Accrue {
            now_ms: start + 60_000,
        },
    );
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("97"));
    let r = step(
        &mut l,
        start + 60_000,
        end(3, start + 60_000, EndReason::NotDelivered),
    );
    assert_eq!(r.transfers.len(), 2, "refund and fee refund");
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("100"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("0"));
    assert_eq!(l.balance(Account::PlatformFee), d("0"));
    let t = l.lease_totals(LeaseId(3)).expect("known");
    assert_eq!((t.billed_seconds, t.amount), (0, d("0")));
    assert_eq!(
        l.delivery_failure(LeaseId(3)).map(|f| f.at_ms),
        Some(start + 60_000)
    );
    assert_eq!(
        l.apply(
            start + 60_000,
            &Input::Failover {
                lease: LeaseId(3),
                replacement_start_ms: None,
                replacement_price: None,
            }
        ),
        Err(SettlementError::NotNodeFailure(LeaseId(3)))
    );
    assert_eq!(
        l.apply(start + 60_000, &failed(3, SUPPLIER, 8, start + 60_000)),
        Err(SettlementError::LeaseWasReady(LeaseId(3)))
    );
    let s = l.supplier_statement(SUPPLIER, &day()).expect("accrued");
    assert!(s.earnings.is_empty());
    assert_eq!(s.totals.failed_deliveries, 1);
    let csv = text(to_csv(&s.table()).expect("csv"));
    assert!(csv.contains(&failed_delivery_row(3, 8, "2026-12-01T00:04:00.000+08:00")));
    assert!(l.trial_balance(&day()).expect("accrued").balanced());
}

/// A lease running past the period end shows no end reason in that period, so the period's
/// statement regenerates byte-identically after the lease ends later.
#[test]
fn a_past_period_does_not_change_when_its_lease_ends_later() {
    let mut l = ledger();
    step(&mut l, ms(FILL), deposit("pay-1", BUYER, "100"));
    let ready = ms("2026-12-01T23:00:00+08:00");
    step(&mut l, ready, lease(1, "RTX4090-24G", "1.98", 1, ready));
    let midnight = day().to_ms;
    step(&mut l, midnight, Input::Accrue { now_ms: midnight });
    let render = |l: &Ledger| {
        (
            to_csv(&l.buyer_statement(BUYER, &day()).expect("accrued").table()).expect("csv"),
            to_csv(
                &l.supplier_statement(SUPPLIER, &day())
                    .expect("accrued")
                    .table(),
            )
            .expect("csv"),
        )
    };
    let before = render(&l);
    let b = l.buyer_statement(BUYER, &day()).expect("accrued");
    assert_eq!(b.charges[0].end_reason, None);
    assert_eq!(b.charges[0].billed_seconds, 3600);
    let end_ms = midnight + 1_800_000;
    step(&mut l, end_ms, end(1, end_ms, EndReason::Released));
    assert_eq!(render(&l), before);
    // The next day's slice carries the reason and the original ready time.
    let next = Period::new(midnight, midnight + 86_400_000, SH).expect("valid");
    let b = l.buyer_statement(BUYER, &next).expect("accrued");
    let c = &b.charges[0];
    assert_eq!(
        (c.ready_ms, c.start_ms, c.billed_seconds, c.end_reason),
        (ready, midnight, 1800, Some(EndReason::Released))
    );
    assert_eq!(c.ready_local, "2026-12-01T23:00:00.000+08:00");
}

/// The failed-delivery records survive a snapshot (serde) round trip, and a snapshot made
/// before issue 15 (without them) still loads.
#[test]
fn failed_deliveries_survive_serialization() {
    let mut l = ledger();
    let at = ms("2026-12-01T00:03:00+08:00");
    step(&mut l, at, failed(9, SUPPLIER, 8, at));
    let json = serde_json::to_value(&l).expect("serialize");
    let back: Ledger = serde_json::from_value(json.clone()).expect("deserialize");
    assert_eq!(back.delivery_failure(LeaseId(9)).map(|f| f.gpus), Some(8));
    let mut old = json;
    let map = old.as_object_mut().expect("a struct");
    for field in [
        "delivery_failures",
        "failures_by_buyer",
        "failures_by_supplier",
    ] {
        assert!(map.remove(field).is_some(), "{field}");
    }
    let old: Ledger = serde_json::from_value(old).expect("an old snapshot loads");
    assert!(old.delivery_failure(LeaseId(9)).is_none());
    assert!(old.check_invariants().is_ok());
}
