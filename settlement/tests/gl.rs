//! General-ledger export and cash reconciliation (issue 17, docs/settlement.md
//! "General-ledger export" and "Reconciliation"). Every expected figure is computed by hand
//! from the docs (8 × H100 at 22.50 = 180 CNY/h = 0.05 CNY/s; fee 8 %; SLA credit 10× the
//! outage's charge), never copied from the ledger.
//!
//! November 2026 (Asia/Shanghai), buyer 1, suppliers 100 and 200:
//!
//! | when (11-…) | input | GL entry (debit → credit) |
//! |---|---|---|
//! | 01 10:00 | deposit `pay-1` 1000.00 | 1002 → 2203/1 1000.00 |
//! | 10 00:00–01:00 | lease 7, 3600 s, released | 2203/1 → 2202/100 180.00; 2202/100 → 6001 13.59 + 2221 0.81 (fee 14.40) |
//! | 20 00:00–00:30 | lease 8, 1800 s, node failure | 2203/1 → 2202/100 90.00; 2202/100 → 6001 6.79 + 2221 0.41 (fee 7.20) |
//! | 20 00:31 | failover, 60 s outage: 10 × 3.00 | 2202/100 → 2241 30.00; 2241 → 2203/1 30.00 |
//! | 25 10:00 | payout `po-1` 100.00 | 2202/100 → 1002 |
//! | 26 10:00 | goodwill credit 5.00 | 6601 → 2203/1 |
//! | 26 11:00 | correction supplier 100 → buyer 1 2.50 | 2202/100 → 2203/1 |
//! | 27 10:00 | refund 50.00 | 2203/1 → 1002 |
//! | 27 11:00 | SLA cash-out 10.00 | 2203/1 → 1002 |
//! | 28 10:00 | correction supplier 200 → platform fee 3.00 | 2202/200 → 6001 |
//! | 28 11:00 | write-off supplier 200 2.00 | 6601 → 2202/200 |
//!
//! Output VAT (issue 25), 6 % included in the fee: 14.40 × 6/106 = 0.815094 and 7.20 × 6/106
//! = 0.407547, Σ 1.222641 → 1.22; rounded alone 0.82 + 0.41 = 1.23, so the leg pushed up
//! furthest (0.815094 → 0.82, by 0.004906) gives the fen back: 0.81 and 0.41; the net
//! revenue legs are 14.40 − 0.81 = 13.59 and 7.20 − 0.41 = 6.79.
//!
//! December: deposit `pay-2` 200.00, a goodwill credit 1.00 referencing `period:1` (a
//! restatement), and a legacy adjustment external cash → buyer 1 0.50.

use crate::common::*;
use rust_decimal::Decimal;
use settlement::reports::csv::to_csv;
use settlement::reports::gl::GlExport;
use settlement::reports::to_json;
use settlement::reports::xlsx::to_xlsx;
use settlement::{
    Account, AccountId, Adjustment, AdjustmentKind, Config, EndReason, Input, LeaseId, Ledger,
    Period, PeriodId, TransferId,
};

const SH: &str = "Asia/Shanghai";
const SUPPLIER_2: AccountId = AccountId(200);

fn adjust(key: &str, kind: AdjustmentKind, amount: &str, reference: Option<&str>) -> Input {
    Input::Adjust(Adjustment {
        key: key.to_string(),
        kind,
        amount: d(amount),
        reason: format!("reason of {key}"),
        reference: reference.map(str::to_string),
    })
}

/// The ids of the journal transfers the example posts, by name.
struct Ids {
    deposit: TransferId,
    sla_funding: TransferId,
    sla_credit: TransferId,
    payout: TransferId,
    goodwill: TransferId,
    correction: TransferId,
    refund: TransferId,
    cash_out: TransferId,
    correction_2: TransferId,
    write_off: TransferId,
}

fn id(r: &settlement::Applied, i: usize) -> TransferId {
    r.transfers[i].id
}

/// November as in the module table, closed at 2026-12-01T00:05.
fn november() -> (Ledger, Ids) {
    let mut l = Ledger::new(Config::default()).expect("default config");
    let deposit = id(
        &step(
            &mut l,
            ms("2026-11-01T10:00:00+08:00"),
            deposit("pay-1", BUYER, "1000"),
        ),
        0,
    );
    let t7 = ms("2026-11-10T00:00:00+08:00");
    step(&mut l, t7, lease(7, "H100-80G", "22.50", 8, t7));
    let t7_end = ms("2026-11-10T01:00:00+08:00");
    step(&mut l, t7_end, end(7, t7_end, EndReason::Released));
    let t8 = ms("2026-11-20T00:00:00+08:00");
    step(&mut l, t8, lease(8, "H100-80G", "22.50", 8, t8));
    let t8_end = ms("2026-11-20T00:30:00+08:00");
    step(&mut l, t8_end, end(8, t8_end, EndReason::NodeFailure));
    let t_failover = ms("2026-11-20T00:31:00+08:00");
    let sla = step(
        &mut l,
        t_failover,
        Input::Failover {
            lease: LeaseId(8),
            replacement_start_ms: Some(t_failover),
            replacement_price: None,
        },
    );
    let payout = step(
        &mut l,
        ms("2026-11-25T10:00:00+08:00"),
        Input::Payout {
            key: "po-1".into(),
            supplier: SUPPLIER,
            amount: d("100"),
        },
    );
    let goodwill = step(
        &mut l,
        ms("2026-11-26T10:00:00+08:00"),
        adjust(
            "gw-1",
            AdjustmentKind::GoodwillCredit { buyer: BUYER },
            "5",
            Some("T-1"),
        ),
    );
    let correction = step(
        &mut l,
        ms("2026-11-26T11:00:00+08:00"),
        adjust(
            "corr-1",
            AdjustmentKind::Correction {
                debit: Account::Supplier(SUPPLIER),
                credit: Account::Buyer(BUYER),
            },
            "2.50",
            None,
        ),
    );
    let refund = step(
        &mut l,
        ms("2026-11-27T10:00:00+08:00"),
        adjust("ref-1", AdjustmentKind::Refund { buyer: BUYER }, "50", None),
    );
    let cash_out = step(
        &mut l,
        ms("2026-11-27T11:00:00+08:00"),
        adjust(
            "cash-1",
            AdjustmentKind::SlaCashOut { buyer: BUYER },
            "10",
            None,
        ),
    );
    let correction_2 = step(
        &mut l,
        ms("2026-11-28T10:00:00+08:00"),
        adjust(
            "corr-2",
            AdjustmentKind::Correction {
                debit: Account::Supplier(SUPPLIER_2),
                credit: Account::PlatformFee,
            },
            "3",
            None,
        ),
    );
    let write_off = step(
        &mut l,
        ms("2026-11-28T11:00:00+08:00"),
        adjust(
            "wo-1",
            AdjustmentKind::WriteOff {
                supplier: SUPPLIER_2,
            },
            "2",
            None,
        ),
    );
    let nov = Period::month(2026, 11, SH).expect("month");
    step(
        &mut l,
        ms("2026-12-01T00:05:00+08:00"),
        Input::ClosePeriod {
            key: "close-2026-11".into(),
            from_ms: nov.from_ms,
            to_ms: nov.to_ms,
        },
    );
    let ids = Ids {
        deposit,
        sla_funding: id(&sla, 0),
        sla_credit: id(&sla, 1),
        payout: id(&payout, 0),
        goodwill: id(&goodwill, 0),
        correction: id(&correction, 0),
        refund: id(&refund, 0),
        cash_out: id(&cash_out, 0),
        correction_2: id(&correction_2, 0),
        write_off: id(&write_off, 0),
    };
    (l, ids)
}

/// December's inputs after the close.
fn december(l: &mut Ledger) {
    step(
        l,
        ms("2026-12-02T10:00:00+08:00"),
        deposit("pay-2", BUYER, "200"),
    );
    step(
        l,
        ms("2026-12-03T10:00:00+08:00"),
        adjust(
            "gw-2",
            AdjustmentKind::GoodwillCredit { buyer: BUYER },
            "1",
            Some("period:1"),
        ),
    );
    step(
        l,
        ms("2026-12-04T10:00:00+08:00"),
        Input::Adjustment {
            key: "legacy-1".into(),
            debit: Account::ExternalCash,
            credit: Account::Buyer(BUYER),
            amount: d("0.50"),
            memo: "bank interest".into(),
        },
    );
}

/// Each entry as (transfer id, [(code, sub-account, debit, credit, kind)]).
type Legs = Vec<(&'static str, Option<u64>, Decimal, Decimal, &'static str)>;

fn entries(g: &GlExport) -> Vec<(Option<TransferId>, Legs)> {
    g.entries
        .iter()
        .map(|e| {
            let legs = e
                .legs
                .iter()
                .map(|l| {
                    (
                        l.account_code,
                        l.sub_account.map(|a| a.0),
                        l.debit,
                        l.credit,
                        l.kind,
                    )
                })
                .collect();
            (e.transfer_id, legs)
        })
        .collect()
}

#[test]
fn the_gl_export_has_one_balanced_entry_per_transfer_and_lease_slice() {
    let (l, ids) = november();
    let nov = Period::month(2026, 11, SH).expect("month");
    let g = l.gl_export(&nov).expect("accrued");
    let z = d("0.00");
    let dr = |code, sub, amount: &str, kind| (code, sub, d(amount), z, kind);
    let cr = |code, sub, amount: &str, kind| (code, sub, z, d(amount), kind);
    let two = |code_dr, sub_dr, code_cr, sub_cr, amount: &str, kind| -> Legs {
        vec![
            dr(code_dr, sub_dr, amount, kind),
            cr(code_cr, sub_cr, amount, kind),
        ]
    };
    let slice = |charge: &str, fee: &str, net: &str, vat: &str| -> Legs {
        vec![
            dr("2203", Some(1), charge, "charge"),
            dr("2202", Some(100), fee, "fee"),
            cr("2202", Some(100), charge, "charge"),
            cr("6001", None, net, "fee"),
            cr("2221", None, vat, "vat"),
        ]
    };
    assert_eq!(
        entries(&g),
        vec![
            (
                Some(ids.deposit),
                two("1002", None, "2203", Some(1), "1000.00", "deposit")
            ),
            // 3600 s × 0.05 = 180.00; fee 8 % = 14.40 = 13.59 net + 0.81 VAT.
            (None, slice("180.00", "14.40", "13.59", "0.81")),
            // 1800 s × 0.05 = 90.00; fee 7.20 = 6.79 net + 0.41 VAT.
            (None, slice("90.00", "7.20", "6.79", "0.41")),
            // 60 s outage: 10 × 3.00 = 30.00, funded by the supplier, passed to the buyer.
            (
                Some(ids.sla_funding),
                two("2202", Some(100), "2241", None, "30.00", "sla_funding")
            ),
            (
                Some(ids.sla_credit),
                two("2241", None, "2203", Some(1), "30.00", "sla_credit")
            ),
            (
                Some(ids.payout),
                two("2202", Some(100), "1002", None, "100.00", "payout")
            ),
            (
                Some(ids.goodwill),
                two("6601", None, "2203", Some(1), "5.00", "adjustment")
            ),
            (
                Some(ids.correction),
                two("2202", Some(100), "2203", Some(1), "2.50", "adjustment")
            ),
            (
                Some(ids.refund),
                two("2203", Some(1), "1002", None, "50.00", "adjustment")
            ),
            (
                Some(ids.cash_out),
                two("2203", Some(1), "1002", None, "10.00", "adjustment")
            ),
            (
                Some(ids.correction_2),
                two("2202", Some(200), "6001", None, "3.00", "adjustment")
            ),
            (
                Some(ids.write_off),
                two("6601", None, "2202", Some(200), "2.00", "adjustment")
            ),
        ]
    );
    // Entries are numbered 1..12 in posting order; slices are dated at their service end.
    assert_eq!(
        g.entries.iter().map(|e| e.entry).collect::<Vec<_>>(),
        (1..=12).collect::<Vec<u64>>()
    );
    let slice_7 = &g.entries[1];
    assert_eq!(
        (slice_7.lease, slice_7.posted_ms, slice_7.date.as_str()),
        (
            Some(LeaseId(7)),
            ms("2026-11-10T01:00:00+08:00"),
            "2026-11-10"
        )
    );
    assert_eq!(slice_7.memo, "charge lease 7: H100-80G 8 GPUs 3600 s");
    assert_eq!(g.entries[3].lease, Some(LeaseId(8)));
    assert_eq!(
        g.entries[6].memo,
        "adjustment gw-1: goodwill_credit: reason of gw-1 [T-1]"
    );
    // Debits equal credits per entry and overall: 1524.10 (hand sum of the table above).
    for e in &g.entries {
        let (dr, cr): (Decimal, Decimal) = (
            e.legs.iter().map(|l| l.debit).sum(),
            e.legs.iter().map(|l| l.credit).sum(),
        );
        assert_eq!(dr, cr, "entry {}", e.entry);
    }
    assert_eq!(
        (g.total_debits, g.total_credits),
        (d("1524.10"), d("1524.10"))
    );

    // Per account: the trial balance's debits and credits, row for row.
    let got: Vec<_> = (g.accounts.iter())
        .map(|a| {
            (
                a.account_code,
                a.ledger_account.as_str(),
                a.debits,
                a.credits,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("1002", "external_cash", d("1000.00"), d("160.00")),
            ("2202", "supplier:100", d("154.10"), d("270.00")),
            ("2202", "supplier:200", d("3.00"), d("2.00")),
            ("2203", "buyer:1", d("330.00"), d("1037.50")),
            ("2221", "platform_fee", d("0.00"), d("1.22")),
            ("2241", "sla_credits", d("30.00"), d("30.00")),
            // 13.59 + 6.79 + the correction 3.00; fee revenue is never debited.
            ("6001", "platform_fee", d("0.00"), d("23.38")),
            // Goodwill 5.00 + write-off 2.00.
            ("6601", "platform_fee", d("7.00"), d("0.00")),
        ]
    );
    // The GL accounts of one ledger account (platform_fee: 2221 + 6001 + 6601) add up to
    // its trial-balance row.
    let tb = l.trial_balance(&nov).expect("accrued");
    for row in &tb.rows {
        let (gd, gc) = (g.accounts.iter())
            .filter(|a| a.ledger_account == row.account)
            .fold((Decimal::ZERO, Decimal::ZERO), |(x, y), a| {
                (x + a.debits, y + a.credits)
            });
        assert_eq!((row.debits, row.credits), (gd, gc), "{}", row.account);
    }
    assert_eq!(
        (tb.totals.debits, tb.totals.credits),
        (g.total_debits, g.total_credits)
    );
}

#[test]
fn the_gl_csv_has_one_row_per_leg_and_a_restatement_says_so() {
    let (mut l, ids) = november();
    let nov = Period::month(2026, 11, SH).expect("month");
    let csv = String::from_utf8(to_csv(&l.gl_export(&nov).expect("gl").table()).expect("csv"))
        .expect("utf-8");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some(
            "entry,transfer_id,posted_ms,posted_at,date,account_code,account_name,sub_account,ledger_account,debit_cny,credit_cny,kind,lease_id,restates_period,memo"
        )
    );
    assert_eq!(lines.count(), 30, "12 entries: 2 with 5 legs, 10 with 2");
    let deposit_ms = ms("2026-11-01T10:00:00+08:00");
    assert!(csv.contains(&format!(
        "\n1,{},{deposit_ms},2026-11-01T10:00:00.000+08:00,2026-11-01,1002,Bank deposits (external cash),,external_cash,1000.00,0.00,deposit,,,deposit pay-1\n",
        ids.deposit
    )));
    assert!(csv.contains(&format!(
        "\n1,{},{deposit_ms},2026-11-01T10:00:00.000+08:00,2026-11-01,2203,Buyer prepaid balances,1,buyer:1,0.00,1000.00,deposit,,,deposit pay-1\n",
        ids.deposit
    )));
    assert!(csv.contains(
        ",2026-11-10,6001,Platform fee revenue,,platform_fee,0.00,13.59,fee,7,,charge lease 7: H100-80G 8 GPUs 3600 s\n"
    ));
    assert!(csv.contains(
        ",2026-11-10,2221,Output VAT payable,,platform_fee,0.00,0.81,vat,7,,charge lease 7: H100-80G 8 GPUs 3600 s\n"
    ));

    december(&mut l);
    let dec = Period::month(2026, 12, SH).expect("month");
    let g = l.gl_export(&dec).expect("gl");
    let got: Vec<_> = (g.entries.iter())
        .map(|e| (e.restates, e.memo.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (None, "deposit pay-2"),
            (
                Some(PeriodId(1)),
                "adjustment gw-2: goodwill_credit: reason of gw-2 [period:1]; restates period 1"
            ),
            (None, "adjustment legacy-1: bank interest"),
        ]
    );
    assert_eq!(
        (g.total_debits, g.total_credits),
        (d("201.50"), d("201.50"))
    );
    let csv = String::from_utf8(to_csv(&g.table()).expect("csv")).expect("utf-8");
    assert!(
        csv.contains(",0.00,1.00,adjustment,,1,adjustment gw-2:"),
        "{csv}"
    );
    assert!(to_xlsx(&[g.table()]).expect("xlsx").starts_with(b"PK"));
    let json = String::from_utf8(to_json(&g).expect("json")).expect("utf-8");
    assert!(json.contains("\"account_code\": \"1002\""), "{json}");
}

#[test]
fn the_reconciliation_lists_every_movement_of_external_cash_and_checks_to_zero() {
    let (mut l, ids) = november();
    let nov = Period::month(2026, 11, SH).expect("month");
    let r = l.reconciliation(&nov).expect("report");
    assert_eq!(r.opening_balance, d("0.00"));
    let section = |v: &[settlement::reports::reconciliation::CashMovement]| {
        v.iter()
            .map(|m| {
                (
                    m.transfer_id,
                    m.counterparty.clone(),
                    m.reference.clone(),
                    m.amount,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        section(&r.deposits),
        [(ids.deposit, "buyer:1".into(), "pay-1".into(), d("1000.00"))]
    );
    assert_eq!(
        section(&r.payouts),
        [(
            ids.payout,
            "supplier:100".into(),
            "po-1".into(),
            d("100.00")
        )]
    );
    assert_eq!(
        section(&r.refunds),
        [(
            ids.refund,
            "buyer:1".into(),
            "ref-1: refund: reason of ref-1".into(),
            d("50.00")
        )]
    );
    assert_eq!(
        section(&r.sla_cash_outs),
        [(
            ids.cash_out,
            "buyer:1".into(),
            "cash-1: sla_cash_out: reason of cash-1".into(),
            d("10.00")
        )]
    );
    assert!(r.other.is_empty());
    // 0.00 + 1000.00 − 100.00 − 50.00 − 10.00 = 840.00 held at the bank.
    let t = &r.totals;
    assert_eq!(
        (
            t.deposits,
            t.payouts,
            t.refunds,
            t.sla_cash_outs,
            t.other,
            t.rounding
        ),
        (
            d("1000.00"),
            d("100.00"),
            d("50.00"),
            d("10.00"),
            d("0.00"),
            d("0.00")
        )
    );
    assert_eq!(r.closing_balance, d("840.00"));
    assert!(r.check.ok && r.check.value.is_zero());
    // The cash held is the trial balance's external_cash negated.
    let tb = l.trial_balance(&nov).expect("accrued");
    assert_eq!(tb.rows[0].account, "external_cash");
    assert_eq!(tb.rows[0].closing, d("-840.00"));

    let csv = String::from_utf8(to_csv(&r.table()).expect("csv")).expect("utf-8");
    assert!(csv.starts_with(
        "section,transfer_id,reference,counterparty,start,end,restates_period,amount_cny,check_value_cny,check_ok\nperiod,,Asia/Shanghai,,2026-11-01T00:00:00.000+08:00,2026-12-01T00:00:00.000+08:00,,,,\nopening_balance,,,,,,,0.00,,\n"
    ), "{csv}");
    assert!(csv.contains(&format!(
        "\nrefund,{},ref-1: refund: reason of ref-1,buyer:1,2026-11-27T10:00:00.000+08:00,,,50.00,,\n",
        ids.refund
    )));
    assert!(csv.ends_with(
        "\nclosing_balance,,,,,,,840.00,,\ncheck,,cash movement equals deposits - payouts - refunds - sla_cash_outs + other,,,,,,0,true\n"
    ), "{csv}");

    // December: opening 840.00 + 200.00 deposit + 0.50 other (a legacy adjustment into the
    // bank) = 1040.50; the goodwill credit does not touch cash.
    december(&mut l);
    let dec = Period::month(2026, 12, SH).expect("month");
    let r = l.reconciliation(&dec).expect("report");
    assert_eq!(r.opening_balance, d("840.00"));
    assert_eq!(section(&r.deposits)[0].3, d("200.00"));
    assert_eq!(
        section(&r.other),
        [(
            r.other[0].transfer_id,
            "buyer:1".into(),
            "legacy-1: bank interest".into(),
            d("0.50")
        )]
    );
    assert_eq!(r.closing_balance, d("1040.50"));
    assert!(r.check.ok);
    // November regenerates byte for byte after December's inputs.
    let again = l.reconciliation(&nov).expect("report");
    assert_eq!(again.closing_balance, d("840.00"));
}

/// The new-user pass of issue 17: two slices of 0.195556 (2 × H100 at 22.00 for 16 s) printed
/// 0.20 each when rounded alone, and the buyer's GL turnover was 0.01 over its trial-balance
/// row and statement. Now each account's legs are allocated over the export, and an entry
/// whose sides then differ gets a `rounding` leg.
#[test]
fn each_account_prints_its_trial_balance_row_and_entries_balance_with_a_rounding_leg() {
    let mut l = Ledger::new(Config::default()).expect("default config");
    let buyer_2 = AccountId(2);
    let t0 = ms("2026-11-03T10:00:00+08:00");
    step(&mut l, t0, deposit("pay-a", BUYER, "10"));
    step(&mut l, t0, deposit("pay-b", buyer_2, "10"));
    // Buyer 2 once, then buyer 1 twice, all on supplier 100: 0.195556 each.
    let mut at = ms("2026-11-04T10:00:00+08:00");
    for (id, buyer) in [(11, buyer_2), (12, BUYER), (13, BUYER)] {
        let mut start = lease(id, "H100-80G", "22.00", 2, at);
        if let Input::LeaseStarted(s) = &mut start {
            s.buyer = buyer;
        }
        step(&mut l, at, start);
        step(
            &mut l,
            at + 16_000,
            end(id, at + 16_000, EndReason::Released),
        );
        at += 60_000;
    }
    let nov = Period::month(2026, 11, SH).expect("month");
    let g = l.gl_export(&nov).expect("gl");
    let tb = l.trial_balance(&nov).expect("accrued");
    let total = |code: &str, ledger: &str| {
        let a = (g.accounts.iter())
            .find(|a| a.account_code == code && a.ledger_account == ledger)
            .unwrap_or_else(|| panic!("{ledger}"));
        (a.debits, a.credits)
    };
    // Σ exact 0.391111 → 0.39 for buyer 1, 0.195556 → 0.20 for buyer 2, and 0.586667 → 0.59
    // for the supplier's charges. Equal remainders give the fen back from the earliest leg
    // (`money::allocate`): buyer 1 (0.19, 0.20), the supplier (0.19, 0.20, 0.20).
    assert_eq!(total("2203", "buyer:1"), (d("0.39"), d("10.00")));
    assert_eq!(total("2203", "buyer:2"), (d("0.20"), d("10.00")));
    // Fees 8 %: 0.015644 each, Σ 0.046933 → 0.05 (0.01, 0.02, 0.02) on both sides.
    assert_eq!(total("2202", "supplier:100"), (d("0.05"), d("0.59")));
    assert_eq!(total("6001", "platform_fee"), (d("0.00"), d("0.05")));
    for a in g.accounts.iter().filter(|a| a.account_code != "6603") {
        let row = (tb.rows.iter())
            .find(|r| r.account == a.ledger_account)
            .expect("a trial-balance row");
        assert_eq!((row.debits, row.credits), (a.debits, a.credits), "{a:?}");
    }
    // Slices in order: buyer 2 (0.20 | supplier 0.19), buyer 1 (0.19 | 0.20), buyer 1
    // (0.20 | 0.20). The first entry debits a fen more than it credits, the second a fen
    // less: a rounding leg each (a credit, then a debit), and the rounding account nets to
    // zero, as the trial balance's `rounding` row does here.
    let slices: Vec<_> = g.entries.iter().filter(|e| e.lease.is_some()).collect();
    assert_eq!(slices.len(), 3);
    let rounding = |e: &settlement::reports::gl::GlEntry| {
        (e.legs.iter())
            .find(|l| l.kind == "rounding")
            .map(|l| (l.debit, l.credit))
    };
    assert_eq!(rounding(slices[0]), Some((d("0.00"), d("0.01"))));
    assert_eq!(rounding(slices[1]), Some((d("0.01"), d("0.00"))));
    assert_eq!(rounding(slices[2]), None);
    for e in &g.entries {
        let dr: Decimal = e.legs.iter().map(|l| l.debit).sum();
        let cr: Decimal = e.legs.iter().map(|l| l.credit).sum();
        assert_eq!(dr, cr, "entry {} balances", e.entry);
    }
    assert_eq!(total("6603", "rounding"), (d("0.01"), d("0.01")));
    // The trial balance's rows add up a fen over its totals on both sides (debit rows 20.00
    // + 0.39 + 0.20 + 0.05 = 20.64 against round(20.633600) = 20.63): its rounding row is
    // −0.01 on each, and the GL's rounding account nets as it does (debits − credits = 0).
    assert_eq!(
        (tb.rounding.debits, tb.rounding.credits),
        (d("-0.01"), d("-0.01"))
    );
    let (rd, rc) = total("6603", "rounding");
    assert_eq!(rd - rc, tb.rounding.debits - tb.rounding.credits);
    assert_eq!(g.total_debits, g.total_credits);
}

/// Issue 25: output VAT at another rate, none at 0 %, and a rate outside [0, 1) refused.
#[test]
fn output_vat_follows_the_rate_and_a_bad_rate_is_refused() {
    let (l, _) = november();
    let nov = Period::month(2026, 11, SH).expect("month");
    let total = |g: &GlExport, code: &str| {
        (g.accounts.iter())
            .find(|a| a.account_code == code)
            .map(|a| (a.debits, a.credits))
    };
    // 0 %: no VAT legs; 6001 carries the whole fee 14.40 + 7.20 + the correction 3.00.
    let g = l
        .gl_export_with_vat(&nov, Decimal::ZERO)
        .expect("gl at 0 %");
    assert_eq!(total(&g, "2221"), None);
    assert_eq!(total(&g, "6001"), Some((d("0.00"), d("24.60"))));
    // 13 %: 14.40 × 13/113 = 1.656637 and 7.20 × 13/113 = 0.828319, Σ 2.484956 → 2.48;
    // rounded alone 1.66 + 0.83 = 2.49, so the leg pushed up furthest (1.656637 → 1.66, by
    // 0.003363, against 0.001681) gives the fen back: 1.65 and 0.83. Net 12.75 and 6.37,
    // + the correction 3.00 = 22.12.
    let g = l.gl_export_with_vat(&nov, d("0.13")).expect("gl at 13 %");
    assert_eq!(total(&g, "2221"), Some((d("0.00"), d("2.48"))));
    assert_eq!(total(&g, "6001"), Some((d("0.00"), d("22.12"))));
    assert_eq!(g.total_debits, g.total_credits);
    for bad in [d("-0.01"), d("1")] {
        assert!(matches!(
            l.gl_export_with_vat(&nov, bad),
            Err(settlement::SettlementError::InvalidConfig(_))
        ));
    }
}
