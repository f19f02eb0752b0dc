//! Periods and close (issue 17, docs/settlement.md "Periods and close"): refusals, idempotent
//! replay, late facts posted into the open period with a reference to the closed one while
//! the closed period's reports stay byte-identical, gapless invoice and statement numbers
//! across closes and a serialize / deserialize round trip. Expected amounts are computed by
//! hand from the docs (8 × H100 at 22.50 = 180 CNY/h = 0.05 CNY/s; fee 8 %), never copied
//! from the ledger.

use crate::common::*;
use settlement::ledger::TransferKind;
use settlement::reports::csv::to_csv;
use settlement::reports::to_json;
use settlement::{
    Account, AccountId, Config, EndReason, Input, LeaseId, Ledger, Period, PeriodId,
    SettlementError,
};

const SH: &str = "Asia/Shanghai";

fn ledger() -> Ledger {
    Ledger::new(Config::default()).expect("default config is valid")
}

fn close(key: &str, p: &Period) -> Input {
    Input::ClosePeriod {
        key: key.to_string(),
        from_ms: p.from_ms,
        to_ms: p.to_ms,
    }
}

/// Every report of `period` as text (CSV and JSON are UTF-8, so equal text is equal bytes):
/// the statements of `buyers` and `suppliers`, the platform summary and the trial balance.
fn reports(l: &Ledger, p: &Period, buyers: &[u64], suppliers: &[u64]) -> Vec<String> {
    let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8");
    let mut out = Vec::new();
    for b in buyers {
        let s = l.buyer_statement(AccountId(*b), p).expect("accrued");
        out.push(text(to_csv(&s.table()).expect("csv")));
        out.push(text(to_json(&s).expect("json")));
    }
    for s in suppliers {
        let s = l.supplier_statement(AccountId(*s), p).expect("accrued");
        out.push(text(to_csv(&s.table()).expect("csv")));
        out.push(text(to_json(&s).expect("json")));
    }
    let ps = l.platform_summary(p).expect("accrued");
    out.push(text(to_csv(&ps.table()).expect("csv")));
    out.push(text(to_json(&ps).expect("json")));
    let tb = l.trial_balance(p).expect("accrued");
    out.push(text(to_csv(&tb.table()).expect("csv")));
    out.push(text(to_json(&tb).expect("json")));
    out
}

fn refused(l: &mut Ledger, at_ms: i64, input: &Input) -> SettlementError {
    let before = rmp_serde::to_vec_named(&*l).expect("serialises");
    let e = l.apply(at_ms, input).expect_err("refused");
    assert_eq!(
        rmp_serde::to_vec_named(&*l).expect("serialises"),
        before,
        "a refused input changes nothing"
    );
    e
}

#[test]
fn close_is_refused_while_open_unaccrued_or_overlapping_and_replays_by_key() {
    let nov = Period::month(2026, 11, SH).expect("month");
    let dec = Period::month(2026, 12, SH).expect("month");
    let mut l = ledger();
    step(&mut l, nov.from_ms, deposit("pay-1", BUYER, "100"));
    let start = ms("2026-11-30T23:00:00+08:00");
    step(&mut l, start, lease(7, "H100-80G", "22.50", 8, start));

    // Not ended yet: one ms before the end of November.
    let e = refused(&mut l, nov.to_ms - 1, &close("close-2026-11", &nov));
    assert_eq!(
        e,
        SettlementError::PeriodNotEnded {
            to_ms: nov.to_ms,
            at_ms: nov.to_ms - 1
        }
    );
    assert!(e.to_string().contains("close it at or after its end"));
    // An end far past any time the ledger keeps has not ended either (found in issue 25's
    // review: it answered "invalid period").
    let far = Input::ClosePeriod {
        key: "close-far".into(),
        from_ms: nov.from_ms,
        to_ms: i64::MAX,
    };
    assert_eq!(
        refused(&mut l, nov.to_ms - 1, &far),
        SettlementError::PeriodNotEnded {
            to_ms: i64::MAX,
            at_ms: nov.to_ms - 1
        }
    );
    // Ended, but lease 7 is not accrued through the end of November.
    let e = refused(&mut l, nov.to_ms, &close("close-2026-11", &nov));
    assert!(
        matches!(e, SettlementError::NotAccrued { lease: LeaseId(7), to_ms, .. } if to_ms == nov.to_ms)
    );
    // An empty range.
    let empty = Input::ClosePeriod {
        key: "k".into(),
        from_ms: nov.to_ms,
        to_ms: nov.to_ms,
    };
    assert_eq!(
        refused(&mut l, nov.to_ms, &empty),
        SettlementError::InvalidPeriod {
            from_ms: nov.to_ms,
            to_ms: nov.to_ms
        }
    );

    step(&mut l, nov.to_ms, Input::Accrue { now_ms: nov.to_ms });
    let closed_at = ms("2026-12-01T00:00:05+08:00");
    let r = step(&mut l, closed_at, close("close-2026-11", &nov));
    assert_eq!(r.closed, Some(PeriodId(1)));
    assert!(r.transfers.is_empty() && !r.replayed);
    let p = l.closed_period(PeriodId(1)).expect("recorded");
    assert_eq!(
        (p.key.as_str(), p.from_ms, p.to_ms, p.closed_at_ms),
        ("close-2026-11", nov.from_ms, nov.to_ms, closed_at)
    );
    // Turnover of November: deposit 100 (debit external cash) + lease 7's 3600 s = 180.00
    // due but 100.00 collected (debit buyer), fee 8.00 (debit supplier) = 208.00.
    assert_eq!(p.debits, d("208"));
    assert_eq!(l.closed_through_ms(), Some(nov.to_ms));
    assert_eq!(l.closed_periods().len(), 1);
    assert_eq!(
        l.closed_period_at(nov.to_ms - 1).map(|p| p.id),
        Some(PeriodId(1))
    );
    assert_eq!(l.closed_period_at(nov.to_ms), None);
    assert_eq!(l.closed_period(PeriodId(2)), None);
    assert_eq!(l.closed_period(PeriodId(0)), None);

    // The same close again (any time): replayed, nothing new.
    let again = step(&mut l, closed_at + 60_000, close("close-2026-11", &nov));
    assert!(again.replayed);
    assert_eq!(again.closed, Some(PeriodId(1)));
    assert_eq!(l.closed_periods().len(), 1);
    // The same key with another range: a conflict.
    assert_eq!(
        refused(&mut l, closed_at + 60_000, &close("close-2026-11", &dec)),
        SettlementError::IdempotencyConflict {
            key: "close-2026-11".into()
        }
    );
    // November again under another key: overlaps.
    let e = refused(&mut l, closed_at + 60_000, &close("close-nov-again", &nov));
    assert_eq!(
        e,
        SettlementError::CloseNotContiguous {
            from_ms: nov.from_ms,
            closed_through_ms: nov.to_ms
        }
    );
    assert!(e.to_string().contains("the next close must start at"));
    // A gap: December from its 2nd day.
    let gap = Period::new(ms("2026-12-02T00:00:00+08:00"), dec.to_ms, SH).expect("period");
    assert!(matches!(
        refused(&mut l, dec.to_ms, &close("close-gap", &gap)),
        SettlementError::CloseNotContiguous { .. }
    ));
}

/// The worked example of docs/settlement.md "After close".
#[test]
fn a_late_node_failure_and_its_credit_post_into_the_open_period_and_november_stays_identical() {
    let nov = Period::month(2026, 11, SH).expect("month");
    let dec = Period::month(2026, 12, SH).expect("month");
    let mut l = ledger();
    step(
        &mut l,
        ms("2026-11-30T22:00:00+08:00"),
        deposit("pay-1", BUYER, "1000"),
    );
    let ready = ms("2026-11-30T23:00:00+08:00");
    step(&mut l, ready, lease(7, "H100-80G", "22.50", 8, ready));
    let t_close = ms("2026-12-01T00:10:00+08:00");
    step(&mut l, t_close, Input::Accrue { now_ms: t_close });
    // 4200 s x 0.05 = 210.00 collected; fee 16.80.
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("790"));
    step(&mut l, t_close, close("close-2026-11", &nov));
    let before = reports(&l, &nov, &[1], &[100]);
    let nov_stmt = l.buyer_statement(BUYER, &nov).expect("accrued");
    assert_eq!(nov_stmt.totals.charges, d("180.00"));
    assert_eq!(nov_stmt.charges[0].end_reason, None);

    // The node failure is reported at 00:10:30, last heartbeat 23:50 (billed 3000 s = 150.00).
    let failure = ms("2026-11-30T23:50:00+08:00");
    let r = step(
        &mut l,
        t_close + 30_000,
        end(7, failure, EndReason::NodeFailure),
    );
    let got: Vec<_> = r
        .transfers
        .iter()
        .map(|t| (t.debit, t.credit, t.amount, t.restates, t.at_ms))
        .collect();
    let (b, s, at) = (
        Account::Buyer(BUYER),
        Account::Supplier(SUPPLIER),
        t_close + 30_000,
    );
    assert_eq!(
        got,
        vec![
            // December's 600 s, refunded as usual.
            (s, b, d("30"), None, at),
            (Account::PlatformFee, s, d("2.4"), None, at),
            // November's 600 s after the failure: a correction that restates period 1.
            (s, b, d("30"), Some(PeriodId(1)), at),
            (Account::PlatformFee, s, d("2.4"), Some(PeriodId(1)), at),
        ]
    );
    match &r.transfers[2].kind {
        TransferKind::Adjustment { key, memo } => {
            assert_eq!(key, "late-end:lease:7");
            assert_eq!(
                memo,
                &format!(
                    "correction: lease 7 ended node_failure at {failure} ms in closed time; 600 s charged before {} ms refunded [period:1]",
                    nov.to_ms
                )
            );
        }
        k => panic!("expected an adjustment, got {k:?}"),
    }
    // No failover capacity: 10 x 180 = 1800 capped at what the buyer paid net, 150.00.
    let r = step(
        &mut l,
        t_close + 60_000,
        Input::Failover {
            lease: LeaseId(7),
            replacement_start_ms: None,
            replacement_price: None,
        },
    );
    assert_eq!(r.transfers.len(), 2);
    assert!(
        r.transfers
            .iter()
            .all(|t| t.amount == d("150") && t.restates == Some(PeriodId(1)))
    );
    assert_eq!(l.balance(b), d("1000"));
    assert_eq!(l.balance(s), d("-12"));
    assert_eq!(l.balance(Account::PlatformFee), d("12"));
    let totals = l.lease_totals(LeaseId(7)).expect("known");
    assert_eq!(
        (
            totals.billed_seconds,
            totals.amount,
            totals.collected,
            totals.fee,
            totals.unpaid,
            totals.sla_credit,
            totals.end
        ),
        (
            3000,
            d("150"),
            d("150"),
            d("12"),
            d("0"),
            d("150"),
            Some((failure, EndReason::NodeFailure))
        )
    );

    // November regenerates byte for byte.
    assert_eq!(reports(&l, &nov, &[1], &[100]), before);
    // December shows the correction and the credit, and no charge for lease 7: both restate
    // November, so they are listed apart, in the `restatement` section, with its id.
    let ds = l.buyer_statement(BUYER, &dec).expect("accrued");
    assert_eq!(ds.opening_balance, d("820.00"));
    assert!(ds.charges.is_empty());
    assert!(ds.adjustments.is_empty() && ds.credits.is_empty());
    let got: Vec<_> = (ds.restatements.iter())
        .map(|r| (r.restates, r.kind, r.lease, r.amount))
        .collect();
    assert_eq!(
        got,
        [
            (PeriodId(1), "adjustment", None, d("30.00")),
            (PeriodId(1), "sla_credit", Some(LeaseId(7)), d("150.00")),
        ]
    );
    assert!(
        ds.restatements[0]
            .reference
            .starts_with("late-end:lease:7: correction: lease 7 ended node_failure")
    );
    assert_eq!(
        (
            ds.totals.adjustments,
            ds.totals.credits,
            ds.totals.restatements
        ),
        (d("0.00"), d("0.00"), d("180.00"))
    );
    // 820.00 + 180.00 restatements = 1000.00 (December's own 600 s were refunded as usual:
    // its slice is empty, so no charge).
    assert_eq!(ds.totals.rounding, d("0.00"));
    assert_eq!(ds.closing_balance, d("1000.00"));
    let csv = String::from_utf8(to_csv(&ds.table()).expect("csv")).expect("utf-8");
    assert!(csv.contains(&format!(
        "\nrestatement,{},7,period:1 sla_credit,",
        ds.restatements[1].transfer_id
    )));
    assert!(
        csv.contains("\ntotal_restatements,,,,,,,,,,,180.00,,\n"),
        "{csv}"
    );
    let ss = l.supplier_statement(SUPPLIER, &dec).expect("accrued");
    // Supplier: the correction −30.00 and its fee +2.40, the SLA deduction −150.00.
    let got: Vec<_> = (ss.restatements.iter())
        .map(|r| (r.restates, r.kind, r.amount))
        .collect();
    assert_eq!(
        got,
        [
            (PeriodId(1), "adjustment", d("-30.00")),
            (PeriodId(1), "adjustment", d("2.40")),
            (PeriodId(1), "sla_deduction", d("-150.00")),
        ]
    );
    assert_eq!(ss.totals.restatements, d("-177.60"));
    assert!(ss.adjustments.is_empty() && ss.sla_deductions.is_empty());
    // Opening 165.60 (180.00 − 14.40 for November's 3600 s) − 177.60 = −12.00.
    assert_eq!(ss.opening_payable, d("165.60"));
    assert_eq!(ss.closing_payable, d("-12.00"));
}

#[test]
fn other_late_facts_are_moved_out_of_closed_time_or_refused() {
    let nov = Period::month(2026, 11, SH).expect("month");
    let dec = Period::month(2026, 12, SH).expect("month");
    let mut l = ledger();
    step(&mut l, nov.from_ms, deposit("pay-1", BUYER, "100"));
    let t = ms("2026-11-30T23:59:50+08:00");
    step(&mut l, t, lease(1, "RTX4090-24G", "1.98", 1, t));
    step(&mut l, nov.to_ms, Input::Accrue { now_ms: nov.to_ms });
    step(&mut l, nov.to_ms, close("close-2026-11", &nov));
    let before = reports(&l, &nov, &[1], &[100, 101]);

    // A failed delivery in November, reported in December: listed at the lock date.
    let failed = Input::DeliveryFailed {
        lease: LeaseId(2),
        buyer: BUYER,
        supplier: AccountId(101),
        sku: "H100-80G".into(),
        region: "cn-east-2".into(),
        gpus: 8,
        at_ms: ms("2026-11-30T23:00:00+08:00"),
        sla: None,
    };
    let at = ms("2026-12-01T01:00:00+08:00");
    step(&mut l, at, failed.clone());
    assert_eq!(
        l.delivery_failure(LeaseId(2)).map(|f| f.at_ms),
        Some(nov.to_ms)
    );
    assert_eq!(
        l.delivery_failure_fact_ms(LeaseId(2)),
        Some(ms("2026-11-30T23:00:00+08:00"))
    );
    assert!(
        step(&mut l, at + 1, failed).replayed,
        "the same fact replays"
    );
    // Capacity listed from November 20:00 to December 01:00: only December's hour counts.
    step(
        &mut l,
        at,
        Input::ListedCapacity {
            supplier: SUPPLIER,
            sku: "RTX4090-24G".into(),
            region: "cn-east-2".into(),
            gpus: 4,
            from_ms: ms("2026-11-30T20:00:00+08:00"),
            to_ms: at,
        },
    );
    // A listing wholly in closed time is dropped.
    step(
        &mut l,
        at,
        Input::ListedCapacity {
            supplier: SUPPLIER,
            sku: "RTX4090-24G".into(),
            region: "cn-east-2".into(),
            gpus: 4,
            from_ms: ms("2026-11-30T20:00:00+08:00"),
            to_ms: nov.to_ms,
        },
    );
    // A lease start in closed time cannot be moved.
    let e = refused(
        &mut l,
        at,
        &lease(3, "H100-80G", "22.50", 1, ms("2026-11-30T23:30:00+08:00")),
    );
    assert_eq!(
        e,
        SettlementError::PeriodClosed {
            what: "a lease start",
            at_ms: ms("2026-11-30T23:30:00+08:00"),
            closed_through_ms: nov.to_ms
        }
    );
    assert!(e.to_string().contains("post a correction adjustment"));
    // A released lease whose end lies in November (a buyer-caused end, late): billed 5 s, no
    // minimum is added (its last real second is locked); 5 s refunded by a correction.
    step(
        &mut l,
        at,
        end(1, ms("2026-11-30T23:59:55+08:00"), EndReason::Released),
    );
    let totals = l.lease_totals(LeaseId(1)).expect("known");
    assert_eq!(totals.billed_seconds, 5);
    // 1.98 x 5 / 3600 = 0.00275
    assert_eq!(totals.collected, d("0.00275"));

    assert_eq!(reports(&l, &nov, &[1], &[100, 101]), before);
    let ss = l.supplier_statement(AccountId(101), &dec).expect("accrued");
    assert_eq!(ss.failed_deliveries.len(), 1);
    let ps = l.platform_summary(&dec).expect("accrued");
    assert_eq!(ps.total.listed_gpu_hours, d("4.0000"));
}

#[test]
fn invoice_numbers_are_gapless_across_two_closes_and_a_serde_round_trip() {
    let nov = Period::month(2026, 11, SH).expect("month");
    let dec = Period::month(2026, 12, SH).expect("month");
    let mut l = ledger();
    let fresh = serde_json::to_value(&l).expect("serialises").to_string();
    assert!(
        !fresh.contains("closes") && !fresh.contains("sla_cash_outs"),
        "a ledger without closes serialises as before issue 17: {fresh}"
    );
    let t = ms("2026-11-10T10:00:00+08:00");
    step(&mut l, t, deposit("pay-1", AccountId(1), "100"));
    step(&mut l, t, deposit("pay-2", AccountId(2), "100"));
    step(&mut l, t, lease(1, "H100-80G", "22.50", 1, t));
    step(
        &mut l,
        t + 3_600_000,
        end(1, t + 3_600_000, EndReason::Released),
    );
    step(&mut l, nov.to_ms, close("close-2026-11", &nov));
    assert_eq!(l.invoice_number(PeriodId(1), AccountId(1)), Some(1));
    assert_eq!(l.invoice_number(PeriodId(1), AccountId(2)), Some(2));
    assert_eq!(l.invoice_number(PeriodId(1), AccountId(3)), None);
    assert_eq!(l.statement_number(PeriodId(1), SUPPLIER), Some(1));

    // Restart: the ledger round-trips and keeps counting from where it was.
    let bytes = rmp_serde::to_vec_named(&l).expect("serialises");
    let mut l: Ledger = rmp_serde::from_slice(&bytes).expect("deserialises");
    assert_eq!(rmp_serde::to_vec_named(&l).expect("serialises"), bytes);
    l.check_invariants().expect("invariants after restore");

    let t = ms("2026-12-05T10:00:00+08:00");
    step(&mut l, t, deposit("pay-3", AccountId(3), "50"));
    step(
        &mut l,
        t,
        Input::LeaseStarted(settlement::LeaseStart {
            lease: LeaseId(2),
            buyer: AccountId(2),
            supplier: AccountId(101),
            sku: "H100-80G".into(),
            region: "cn-east-2".into(),
            gpus: 1,
            price_per_gpu_hour: d("22.50"),
            start_ms: t,
            sla: None,
        }),
    );
    step(&mut l, t + 60_000, end(2, t + 60_000, EndReason::Released));
    let r = step(&mut l, dec.to_ms, close("close-2026-12", &dec));
    assert_eq!(r.closed, Some(PeriodId(2)));
    let p = l.closed_period(PeriodId(2)).expect("closed");
    assert_eq!(
        p.invoices
            .iter()
            .map(|(a, n)| (a.0, *n))
            .collect::<Vec<_>>(),
        vec![(2, 3), (3, 4)]
    );
    assert_eq!(
        p.statements
            .iter()
            .map(|(a, n)| (a.0, *n))
            .collect::<Vec<_>>(),
        vec![(101, 2)]
    );
    assert_eq!(p.from_ms, nov.to_ms);
}

/// Found by `close_props.rs`: the trial balance listed every account the ledger knew (with
/// zeros), so an account first seen after a close added a row to the closed period's trial
/// balance. It now lists the fixed accounts and the accounts with a transfer or a lease
/// effect before the period end (docs/settlement.md "Trial balance").
#[test]
fn a_new_account_after_close_does_not_change_the_closed_trial_balance() {
    let nov = Period::month(2026, 11, SH).expect("month");
    let dec = Period::month(2026, 12, SH).expect("month");
    let mut l = ledger();
    step(&mut l, nov.from_ms, deposit("pay-1", BUYER, "100"));
    step(&mut l, nov.to_ms, close("close-2026-11", &nov));
    let before = reports(&l, &nov, &[1], &[]);
    // A new buyer (deposit) and a new supplier (lease effects only) after the close.
    let start = nov.to_ms + 1;
    step(&mut l, start, deposit("pay-2", AccountId(2), "5"));
    step(
        &mut l,
        start,
        Input::LeaseStarted(settlement::LeaseStart {
            lease: LeaseId(1),
            buyer: AccountId(2),
            supplier: AccountId(101),
            sku: "H100-80G".into(),
            region: "cn-east-2".into(),
            gpus: 8,
            price_per_gpu_hour: d("22.50"),
            start_ms: start,
            sla: None,
        }),
    );
    step(
        &mut l,
        start + 10_000,
        end(1, start + 10_000, EndReason::Released),
    );
    assert_eq!(reports(&l, &nov, &[1], &[]), before);
    let accounts = |p: &Period| -> Vec<String> {
        let tb = l.trial_balance(p).expect("accrued");
        assert!(tb.balanced(), "{:?}", tb.checks);
        tb.rows.into_iter().map(|r| r.account).collect()
    };
    assert_eq!(
        accounts(&nov),
        ["external_cash", "platform_fee", "sla_credits", "buyer:1"]
    );
    // The open period lists them: 10 s at 0.05 CNY/s = 0.50 collected, fee 0.04.
    assert_eq!(
        accounts(&dec),
        [
            "external_cash",
            "platform_fee",
            "sla_credits",
            "buyer:1",
            "buyer:2",
            "supplier:101"
        ]
    );
    let tb = l.trial_balance(&dec).expect("accrued");
    let row = |a: &str| {
        let r = tb.rows.iter().find(|r| r.account == a).expect("listed");
        (r.opening, r.debits, r.credits, r.closing)
    };
    assert_eq!(row("buyer:2"), (d("0.00"), d("0.50"), d("5.00"), d("4.50")));
    assert_eq!(
        row("supplier:101"),
        (d("0.00"), d("0.04"), d("0.50"), d("0.46"))
    );
}

/// docs/settlement.md "Credit notes": the capped SLA credit of the "After close" example
/// (150.00, restating November) is issued at December's close as credit note 1 against the
/// buyer's November invoice 1 (gross 180.00; December's invoice 2 is at 0.00): VAT
/// round(150 × 6/106 = 8.490566) = 8.49, net 141.51, printed negative. The late end's
/// correction is not a credit-note credit (finance's entry). The credit-note counter
/// survives a serialize / deserialize round trip and stays gapless.
#[test]
fn an_sla_credit_for_a_closed_month_becomes_a_credit_note_against_its_invoice() {
    use settlement::reports::invoice::{DEFAULT_VAT_RATE, InvoiceKind, InvoiceTerms, TaxParty};
    use settlement::{CreditNoteRecord, InvoiceRef};
    let nov = Period::month(2026, 11, SH).expect("month");
    let dec = Period::month(2026, 12, SH).expect("month");
    let mut l = ledger();
    step(
        &mut l,
        ms("2026-11-30T22:00:00+08:00"),
        deposit("pay-1", BUYER, "1000"),
    );
    let ready = ms("2026-11-30T23:00:00+08:00");
    step(&mut l, ready, lease(7, "H100-80G", "22.50", 8, ready));
    let t_close = ms("2026-12-01T00:10:00+08:00");
    step(&mut l, t_close, Input::Accrue { now_ms: t_close });
    step(&mut l, t_close, close("close-2026-11", &nov));
    let failure = ms("2026-11-30T23:50:00+08:00");
    step(
        &mut l,
        t_close + 30_000,
        end(7, failure, EndReason::NodeFailure),
    );
    let credit = step(
        &mut l,
        t_close + 60_000,
        Input::Failover {
            lease: LeaseId(7),
            replacement_start_ms: None,
            replacement_price: None,
        },
    );
    let credit_id = credit
        .transfers
        .iter()
        .find(|t| matches!(t.kind, TransferKind::SlaCredit { .. }))
        .expect("the credit")
        .id;
    step(&mut l, dec.to_ms, close("close-2026-12", &dec));
    assert_eq!(l.invoice_number(PeriodId(2), BUYER), Some(2));
    let record = CreditNoteRecord {
        buyer: BUYER,
        number: 1,
        corrects: InvoiceRef {
            period: PeriodId(1),
            number: 1,
        },
        gross: d("150.00"),
        credits: vec![credit_id],
    };
    assert_eq!(l.credit_notes(PeriodId(2)), std::slice::from_ref(&record));

    let party = |name: &str| TaxParty {
        name: name.into(),
        taxpayer_id: String::new(),
        address: String::new(),
        phone: String::new(),
        bank: String::new(),
        bank_account: String::new(),
    };
    let terms = InvoiceTerms {
        number: 1,
        issued_ms: dec.to_ms,
        vat_rate: DEFAULT_VAT_RATE,
        platform: party("platform"),
        counterparty: party("buyer"),
    };
    let cn = l.credit_note(BUYER, &dec, &terms).expect("credit note");
    assert_eq!(cn.kind, InvoiceKind::CreditNote);
    let lines: Vec<_> = cn
        .lines
        .iter()
        .map(|l| (l.sku.as_str(), l.net, l.vat, l.gross))
        .collect();
    assert_eq!(
        lines,
        vec![("sla_credit", d("-141.51"), d("-8.49"), d("-150.00"))]
    );
    assert_eq!(cn.notes[0].reference, "lease 7");
    assert_eq!(cn.totals.gross_in_words, "负壹佰伍拾元整");

    // Restart: the counter round-trips; the next close keeps counting and stays gapless.
    let bytes = rmp_serde::to_vec_named(&l).expect("serialises");
    let mut l: Ledger = rmp_serde::from_slice(&bytes).expect("deserialises");
    assert_eq!(rmp_serde::to_vec_named(&l).expect("serialises"), bytes);
    l.check_invariants().expect("invariants after restore");
    let jan = Period::month(2027, 1, SH).expect("month");
    step(
        &mut l,
        ms("2027-01-04T10:00:00+08:00"),
        Input::Adjust(settlement::Adjustment {
            key: "gw-1".into(),
            kind: settlement::AdjustmentKind::GoodwillCredit { buyer: BUYER },
            amount: d("30"),
            reason: "sorry".into(),
            reference: None,
        }),
    );
    step(&mut l, jan.to_ms, close("close-2027-01", &jan));
    let notes = l.credit_notes(PeriodId(3));
    assert_eq!(
        notes
            .iter()
            .map(|c| (c.number, c.corrects.number, c.gross))
            .collect::<Vec<_>>(),
        vec![(2, 1, d("30.00"))]
    );
    l.check_invariants().expect("credit-note numbers gapless");
}
