//! Issue 17, "One allocation for rounding": the `-0.00` defect with its input, hand cases
//! (0.525 prints 0.53 on the buyer statement, the supplier statement and the platform
//! summary alike), and property tests that every report's lines add up to its totals, that
//! an amount alone prints `round_fen(x)` on every report, and that no report prints
//! `-0.00`. Expected figures are derived by hand from docs/settlement.md, "Rounding
//! allocation".

use crate::common::*;
use proptest::prelude::*;
use rust_decimal::Decimal;
use settlement::money::{FEN_DP, HOURS_DP, allocate, allocate_fen, round_dp};
use settlement::reports::invoice::{DEFAULT_VAT_RATE, InvoiceTerms, TaxParty};
use settlement::reports::{csv::to_csv, to_json};
use settlement::{
    Account, AccountId, Config, EndReason, Input, LeaseId, LeaseStart, Ledger, Period, round_fen,
};

const SH: &str = "Asia/Shanghai";

fn ledger() -> Ledger {
    Ledger::new(Config::default()).expect("default config is valid")
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("utf-8")
}

/// Issue 17's defect, with its input: deposit 100, one GPU at 12 CNY/h for 1 s, the buyer
/// statement for that hour. The charge is 12 / 3600 = 0.00333… CNY: it prints `0.00`,
/// never `-0.00` (it used to be negated after rounding). The same lease on the supplier
/// statement: gross 0.00333…, fee 8 % = 0.000266…, and a payout of 0.003 all print `0.00`.
#[test]
fn a_one_second_lease_prints_zero_on_both_statements_not_negative_zero() {
    let mut l = ledger();
    let t0 = ms("2026-11-10T10:00:00+08:00");
    step(&mut l, t0, deposit("pay-1", BUYER, "100"));
    step(&mut l, t0, lease(1, "RTX4090-24G", "12", 1, t0));
    step(&mut l, t0 + 1_000, end(1, t0 + 1_000, EndReason::Released));
    step(
        &mut l,
        t0 + 2_000,
        Input::Payout {
            key: "po-1".into(),
            supplier: SUPPLIER,
            amount: d("0.003"),
        },
    );
    let hour = Period::new(t0, t0 + 3_600_000, SH).expect("period");

    let s = l.buyer_statement(BUYER, &hour).expect("accrued");
    let csv = text(to_csv(&s.table()).expect("csv"));
    assert!(csv.contains(
        "\ncharge,,1,,RTX4090-24G,cn-east-2,1,2026-11-10T10:00:00.000+08:00,2026-11-10T10:00:01.000+08:00,1,12,0.00,2026-11-10T10:00:00.000+08:00,released\n"
    ), "{csv}");
    // 100 − 0.00333… = 99.99666… prints 100.00: opening 0.00 + 100.00 − 0.00 = 100.00.
    assert!(csv.contains("\ntotal_charges,,,,,,,,,,,0.00,,\n"), "{csv}");
    assert!(csv.contains("\nrounding,,,,,,,,,,,0.00,,\n"), "{csv}");
    assert!(
        csv.ends_with("\nclosing_balance,,,,,,,,,,,100.00,,\n"),
        "{csv}"
    );
    assert!(!csv.contains("-0.00"), "{csv}");
    let json = text(to_json(&s).expect("json"));
    assert!(json.contains("\"amount\": \"0.00\""), "{json}");
    assert!(!json.contains("-0.00"), "{json}");

    let s = l.supplier_statement(SUPPLIER, &hour).expect("accrued");
    let e = &s.earnings[0];
    assert_eq!(
        (e.gross.to_string(), e.fee.to_string(), e.net.to_string()),
        ("0.00".into(), "0.00".into(), "0.00".into())
    );
    assert_eq!(s.payouts[0].amount.to_string(), "0.00");
    let csv = text(to_csv(&s.table()).expect("csv"));
    assert!(csv.contains(",0.00,0.00,0.00,,"), "{csv}");
    assert!(
        csv.contains("\npayout,4,,po-1,,,,2026-11-10T10:00:02.000+08:00,,,,,,,0.00,,,\n"),
        "{csv}"
    );
    assert!(!csv.contains("-0.00"), "{csv}");
    let json = text(to_json(&s).expect("json"));
    assert!(json.contains("\"fee\": \"0.00\""), "{json}");
    assert!(!json.contains("-0.00"), "{json}");
}

/// The complaint: the same 0.525 CNY printed 0.52 on one report and 0.53 on
/// another. A 150 s lease of one GPU at 12.60 CNY/h is exactly 0.525 CNY: it prints 0.53
/// (half away from zero) as the buyer's charge, the supplier's gross and the platform's GMV.
/// The 1 050 s H100 lease of docs/settlement.md (6.5625, fee exactly 0.525) prints fee 0.53
/// on the supplier statement and on the platform summary.
#[test]
fn the_same_0_525_prints_0_53_on_every_report() {
    let mut l = ledger();
    let t = ms("2026-11-30T10:00:00+08:00");
    step(&mut l, t, deposit("p", BUYER, "100"));
    step(&mut l, t, lease(1, "RTX4090-24G", "12.60", 1, t));
    step(
        &mut l,
        t + 150_000,
        end(1, t + 150_000, EndReason::Released),
    );
    let hour = Period::new(t, t + 3_600_000, SH).expect("period");
    let b = l.buyer_statement(BUYER, &hour).expect("accrued");
    let s = l.supplier_statement(SUPPLIER, &hour).expect("accrued");
    let p = l.platform_summary(&hour).expect("accrued");
    assert_eq!(b.charges[0].amount, d("0.53"));
    assert_eq!(b.totals.charges, d("0.53"));
    assert_eq!(s.earnings[0].gross, d("0.53"));
    assert_eq!(p.total.gmv, d("0.53"));
    assert_eq!(p.by_sku[0].gmv, d("0.53"));
    // The buyer's balance 99.475 prints 99.48 (the app shows the same): 100.00 − 0.53 +
    // rounding 0.01 = 99.48.
    assert_eq!(
        (b.totals.rounding, b.closing_balance),
        (d("0.01"), d("99.48"))
    );
    let csv = text(to_csv(&b.table()).expect("csv"));
    assert!(csv.contains(",12.60,0.53,"), "{csv}");
    let csv = text(to_csv(&p.table()).expect("csv"));
    assert!(
        csv.contains("\ntotal,total,1,0.0417,0.0000,,0.53,0.00,0.04,0.00,"),
        "{csv}"
    );

    let mut l = ledger();
    step(&mut l, t, deposit("p", BUYER, "100"));
    step(&mut l, t, lease(1, "H100-80G", "22.50", 1, t));
    step(
        &mut l,
        t + 1_050_000,
        end(1, t + 1_050_000, EndReason::Released),
    );
    let s = l.supplier_statement(SUPPLIER, &hour).expect("accrued");
    let p = l.platform_summary(&hour).expect("accrued");
    let b = l.buyer_statement(BUYER, &hour).expect("accrued");
    assert_eq!(s.earnings[0].fee, d("0.53"));
    assert_eq!(p.total.fee_revenue, d("0.53"));
    assert_eq!(b.charges[0].amount, d("6.56"));
    assert_eq!(p.total.gmv, d("6.56"));
    // net = gross − fee = 6.03; the payable 6.0375 prints 6.04: rounding +0.01.
    assert_eq!(
        (s.earnings[0].net, s.totals.rounding, s.closing_payable),
        (d("6.03"), d("0.01"), d("6.04"))
    );
}

/// Three 1-second H100 lines of 0.00625 each (docs/settlement.md, "Rounding allocation"):
/// alone each prints 0.01; together they print 0.00, 0.01, 0.01 = round(0.01875) = 0.02.
#[test]
fn three_tied_lines_give_the_extra_fen_back_from_the_first() {
    let x = d("0.00625");
    assert_eq!(allocate_fen(&[x]).lines, vec![d("0.01")]);
    let a = allocate_fen(&[x, x, x]);
    assert_eq!(a.lines, vec![d("0.00"), d("0.01"), d("0.01")]);
    assert_eq!(a.total, d("0.02"));
}

// ---------------------------------------------------------------------------------------
// Property tests.

/// 2026-11-29T16:00:00Z = 2026-11-30T00:00:00+08:00.
const T0: i64 = 1_764_432_000_000;
const HOUR: i64 = 3_600_000;
const SKUS: [(&str, &str); 3] = [
    ("H100-80G", "22.50"),
    ("RTX4090-24G", "1.98"),
    ("A800-80G", "12.60"),
];

#[derive(Debug, Clone)]
struct Spec {
    buyer: u64,
    supplier: u64,
    sku: usize,
    gpus: u32,
    start: i64,
    duration: i64,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        1u64..=3,
        100u64..=101,
        0usize..3,
        1u32..=8,
        0i64..(20 * HOUR),
        prop_oneof![1i64..5_000, 1i64..(3 * HOUR)],
    )
        .prop_map(|(buyer, supplier, sku, gpus, start, duration)| Spec {
            buyer,
            supplier,
            sku,
            gpus,
            start,
            duration,
        })
}

/// Deposits (some of odd, 12-place amounts), leases, payouts, adjustments; all ended and
/// accrued by T0 + 24 h.
fn build(specs: &[Spec], deposits: &[(u64, i64)], payout_percent: u32) -> Ledger {
    let mut l = ledger();
    let mut events: Vec<(i64, u32, Input)> = Vec::new();
    for (i, (buyer, fen)) in deposits.iter().enumerate() {
        events.push((
            T0 - HOUR + i as i64,
            0,
            Input::Deposit {
                key: format!("dep-{i}"),
                buyer: AccountId(*buyer),
                amount: Decimal::new(*fen, 5),
            },
        ));
    }
    for (i, s) in specs.iter().enumerate() {
        let id = i as u64 + 1;
        let (sku, price) = SKUS[s.sku];
        let start = T0 + s.start;
        events.push((
            start,
            1,
            Input::LeaseStarted(LeaseStart {
                lease: LeaseId(id),
                buyer: AccountId(s.buyer),
                supplier: AccountId(s.supplier),
                sku: sku.into(),
                region: if s.supplier == 100 {
                    "cn-east-2"
                } else {
                    "cn-north-1"
                }
                .into(),
                gpus: s.gpus,
                price_per_gpu_hour: d(price),
                start_ms: start,
                sla: None,
            }),
        ));
        events.push((
            start + s.duration,
            2,
            Input::LeaseEnded {
                lease: LeaseId(id),
                end_ms: start + s.duration,
                reason: EndReason::Released,
            },
        ));
    }
    for i in 1..24 {
        events.push((
            T0 + i * HOUR,
            3,
            Input::Accrue {
                now_ms: T0 + i * HOUR,
            },
        ));
    }
    events.sort_by_key(|(t, k, _)| (*t, *k));
    for (t, _, input) in events {
        // Leases of a buyer out of funds end early; refusals are fine.
        let _ = l.apply(t, &input);
        for e in l.leases_to_end(t) {
            let _ = l.apply(
                t,
                &Input::LeaseEnded {
                    lease: e.lease,
                    end_ms: t,
                    reason: EndReason::InsufficientFunds,
                },
            );
        }
    }
    let end = T0 + 24 * HOUR;
    let _ = l.apply(end, &Input::Accrue { now_ms: end });
    for supplier in [100, 101] {
        let payable = l.balance(Account::Supplier(AccountId(supplier)));
        let amount = round_dp(
            payable * Decimal::from(payout_percent) / Decimal::from(100),
            7,
        );
        if amount > Decimal::ZERO {
            let _ = l.apply(
                end,
                &Input::Payout {
                    key: format!("po-{supplier}"),
                    supplier: AccountId(supplier),
                    amount,
                },
            );
        }
    }
    let _ = l.apply(
        end,
        &Input::Adjustment {
            key: "adj-1".into(),
            debit: Account::PlatformFee,
            credit: Account::Buyer(AccountId(1)),
            amount: d("0.004999"),
            memo: "goodwill".into(),
        },
    );
    l
}

fn party(name: &str) -> TaxParty {
    TaxParty {
        name: name.into(),
        taxpayer_id: "91310000MA1FL0000X".into(),
        address: "上海市浦东新区".into(),
        phone: String::new(),
        bank: "招商银行上海分行".into(),
        bank_account: "6214 0000 0000 0000".into(),
    }
}

fn sum(v: impl Iterator<Item = Decimal>) -> Decimal {
    v.sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The allocation rule itself: lines add up to round(Σ exact); each line is within one
    /// fen of its exact amount; lines whose rounded sum already matches print round(x);
    /// one line alone prints round(x); never -0.00.
    #[test]
    fn allocation_adds_up_and_moves_lines_by_at_most_one_unit(
        raw in prop::collection::vec(-10_000_000i64..10_000_000, 0..40),
        scale in 3u32..8,
        dp in prop_oneof![Just(FEN_DP), Just(HOURS_DP)],
    ) {
        let exact: Vec<Decimal> = raw.iter().map(|m| Decimal::new(*m, scale)).collect();
        let a = allocate(&exact, dp);
        prop_assert_eq!(a.lines.len(), exact.len());
        prop_assert_eq!(a.total, round_dp(exact.iter().copied().sum(), dp));
        prop_assert_eq!(sum(a.lines.iter().copied()), a.total);
        let unit = Decimal::new(1, dp);
        let naive: Vec<Decimal> = exact.iter().map(|x| round_dp(*x, dp)).collect();
        for ((line, x), n) in a.lines.iter().zip(&exact).zip(&naive) {
            prop_assert!((*line - *x).abs() < unit, "{} vs {}", line, x);
            prop_assert!((*line - *n).abs() <= unit);
            prop_assert!(!line.to_string().starts_with("-0.0") || !line.is_zero());
            prop_assert_eq!(line.scale(), dp);
        }
        if sum(naive.iter().copied()) == a.total {
            prop_assert_eq!(&a.lines, &naive);
        }
        if let Some(x) = exact.first() {
            prop_assert_eq!(allocate(&[*x], dp).lines, vec![round_dp(*x, dp)]);
        }
        prop_assert_eq!(allocate(&exact, dp), a, "deterministic");
    }

    /// Every report's lines add up to its totals, the statements' identities hold in print
    /// with a rounding line of at most 0.03, an amount alone prints round_fen(x) on every
    /// report that shows it, and no report prints -0.00.
    #[test]
    fn every_report_adds_up_and_an_amount_alone_prints_the_same_everywhere(
        specs in prop::collection::vec(spec(), 1..8),
        deposits in prop::collection::vec((1u64..=3, 1i64..20_000_000), 1..5),
        payout_percent in 0u32..=100,
        from_h in 0i64..12,
        len_h in 1i64..30,
    ) {
        let l = build(&specs, &deposits, payout_percent);
        let period = Period::new(T0 + from_h * HOUR - HOUR, T0 + (from_h + len_h).min(25) * HOUR, SH)
            .expect("period");
        let slices = l.lease_slices(&period).expect("accrued");
        let terms = |n| InvoiceTerms {
            number: n,
            issued_ms: T0 + 40 * HOUR,
            vat_rate: DEFAULT_VAT_RATE,
            platform: party("上海算力交易所有限公司"),
            counterparty: party("杭州云智算科技有限公司"),
        };
        let fen3 = Decimal::new(3, 2);
        let p = l.platform_summary(&period).expect("summary");
        let mut csvs = vec![to_csv(&p.table()).expect("csv")];
        for rows in [&p.by_sku, &p.by_region] {
            prop_assert_eq!(sum(rows.iter().map(|r| r.gmv)), p.total.gmv);
            prop_assert_eq!(sum(rows.iter().map(|r| r.unpaid)), p.total.unpaid);
            prop_assert_eq!(sum(rows.iter().map(|r| r.fee_revenue)), p.total.fee_revenue);
            prop_assert_eq!(sum(rows.iter().map(|r| r.sla_credits)), p.total.sla_credits);
            prop_assert_eq!(sum(rows.iter().map(|r| r.gpu_hours)), p.total.gpu_hours);
            prop_assert_eq!(sum(rows.iter().map(|r| r.listed_gpu_hours)), p.total.listed_gpu_hours);
        }
        prop_assert_eq!(p.total.gmv, round_fen(sum(slices.iter().map(|s| s.amount))));
        prop_assert_eq!(p.total.fee_revenue, round_fen(sum(slices.iter().map(|s| s.fee))));
        for buyer in 1..=3 {
            let s = l.buyer_statement(AccountId(buyer), &period).expect("statement");
            let t = &s.totals;
            prop_assert_eq!(sum(s.deposits.iter().map(|x| x.amount)), t.deposits);
            prop_assert_eq!(sum(s.adjustments.iter().map(|x| x.amount)), t.adjustments);
            prop_assert_eq!(sum(s.credits.iter().map(|x| x.amount)), t.credits);
            prop_assert_eq!(sum(s.charges.iter().map(|x| x.amount)), t.charges);
            prop_assert_eq!(sum(s.unpaid.iter().map(|x| x.amount)), t.unpaid);
            prop_assert_eq!(
                s.opening_balance + t.deposits + t.adjustments + t.credits - t.charges + t.unpaid + t.rounding,
                s.closing_balance
            );
            prop_assert!(t.rounding.abs() <= fen3, "rounding {}", t.rounding);
            let mine: Vec<_> = slices.iter().filter(|x| x.buyer.0 == buyer).collect();
            prop_assert_eq!(t.charges, round_fen(sum(mine.iter().map(|x| x.amount))));
            if let [only] = mine.as_slice() {
                // Alone on the statement: round_fen(x), as the platform prints it alone.
                prop_assert_eq!(s.charges[0].amount, round_fen(only.amount));
                if slices.len() == 1 {
                    prop_assert_eq!(p.total.gmv, s.charges[0].amount);
                }
            }
            let inv = l.buyer_invoice(AccountId(buyer), &period, &terms(buyer)).expect("invoice");
            let it = &inv.totals;
            prop_assert_eq!(sum(inv.lines.iter().map(|x| x.gross)), it.gross);
            prop_assert_eq!(sum(inv.lines.iter().map(|x| x.net)) + sum(inv.lines.iter().map(|x| x.vat)), it.gross);
            prop_assert_eq!(it.net + it.vat, it.gross);
            prop_assert_eq!(sum(inv.lines.iter().map(|x| x.gpu_hours)), it.gpu_hours);
            for x in &inv.lines {
                prop_assert_eq!(x.net + x.vat, x.gross);
            }
            prop_assert_eq!(it.gross, round_fen(sum(mine.iter().map(|x| x.collected))));
            csvs.push(to_csv(&s.table()).expect("csv"));
            csvs.push(to_csv(&inv.table()).expect("csv"));
            csvs.push(to_json(&s).expect("json"));
            csvs.push(to_json(&inv).expect("json"));
        }
        for supplier in [100, 101] {
            let s = l.supplier_statement(AccountId(supplier), &period).expect("statement");
            let t = &s.totals;
            prop_assert_eq!(sum(s.earnings.iter().map(|x| x.gross)), t.gross);
            prop_assert_eq!(sum(s.earnings.iter().map(|x| x.fee)), t.fee);
            prop_assert_eq!(sum(s.earnings.iter().map(|x| x.net)), t.net);
            prop_assert_eq!(sum(s.sla_deductions.iter().map(|x| x.amount)), t.sla_deductions);
            prop_assert_eq!(sum(s.adjustments.iter().map(|x| x.amount)), t.adjustments);
            prop_assert_eq!(sum(s.payouts.iter().map(|x| x.amount)), t.payouts);
            for e in &s.earnings {
                prop_assert_eq!(e.gross - e.fee, e.net);
            }
            prop_assert_eq!(
                s.opening_payable + t.gross - t.fee - t.sla_deductions + t.adjustments - t.payouts + t.rounding,
                s.closing_payable
            );
            prop_assert!(t.rounding.abs() <= fen3, "rounding {}", t.rounding);
            let mine: Vec<_> = slices.iter().filter(|x| x.supplier.0 == supplier).collect();
            if let [only] = mine.as_slice() {
                prop_assert_eq!(s.earnings[0].fee, round_fen(only.fee));
                prop_assert_eq!(s.earnings[0].gross, round_fen(only.collected));
                if slices.len() == 1 {
                    prop_assert_eq!(p.total.fee_revenue, s.earnings[0].fee);
                }
            }
            let inv = l.supplier_self_billing(AccountId(supplier), &period, &terms(supplier)).expect("invoice");
            // The self-billing statement's gross is the statement's net earnings.
            prop_assert_eq!(inv.totals.gross, t.net);
            prop_assert_eq!(inv.totals.net + inv.totals.vat, inv.totals.gross);
            prop_assert_eq!(sum(inv.lines.iter().map(|x| x.net)) + sum(inv.lines.iter().map(|x| x.vat)), inv.totals.gross);
            csvs.push(to_csv(&s.table()).expect("csv"));
            csvs.push(to_csv(&inv.table()).expect("csv"));
            csvs.push(to_json(&s).expect("json"));
        }
        let tb = l.trial_balance(&period).expect("trial balance");
        prop_assert_eq!(sum(tb.rows.iter().map(|r| r.opening)) + tb.rounding.opening, tb.totals.opening);
        prop_assert_eq!(sum(tb.rows.iter().map(|r| r.debits)) + tb.rounding.debits, tb.totals.debits);
        prop_assert_eq!(sum(tb.rows.iter().map(|r| r.credits)) + tb.rounding.credits, tb.totals.credits);
        prop_assert_eq!(sum(tb.rows.iter().map(|r| r.closing)) + tb.rounding.closing, tb.totals.closing);
        // Balances print the same on the trial balance and the statements.
        for r in &tb.rows {
            if let Some(id) = r.account.strip_prefix("buyer:") {
                let s = l.buyer_statement(AccountId(id.parse().expect("id")), &period).expect("s");
                prop_assert_eq!((r.opening, r.closing), (s.opening_balance, s.closing_balance));
            }
        }
        csvs.push(to_csv(&tb.table()).expect("csv"));
        for bytes in csvs {
            let t = String::from_utf8(bytes).expect("utf-8");
            prop_assert!(!t.contains("-0.00"), "{}", t);
        }
    }
}
