//! SLA terms per lease (issue 26, docs/settlement.md "SLA credit"): each term changes the
//! credit as documented, the default terms reproduce the configured rule, bad terms are
//! refused naming the field, the monthly availability credit of a scripted month, the
//! statement view, and snapshots made before issue 26 still load. Every expected figure is
//! computed by hand in the comments (8 × H100 at 22.50 CNY/GPU-hour = 180 CNY/h = 0.05 CNY/s
//! throughout).

use crate::common::{BUYER, SUPPLIER, d, deposit, end, ms, step};
use rust_decimal::Decimal;
use settlement::reports::csv::to_csv;
use settlement::reports::to_json;
use settlement::{
    Account, AccountId, Config, CreditCap, EndReason, Input, LeaseId, LeaseStart, Ledger, Period,
    PeriodId, ReplacementPrice, SettlementError, SlaTerms, SlaTermsError, UndeliveredSla,
};

const T0: i64 = 1_764_432_000_000; // 2025-11-30T00:00:00+08:00
const HOUR: i64 = 3_600_000;
const SH: &str = "Asia/Shanghai";

fn ledger() -> Ledger {
    Ledger::new(Config::default()).expect("valid config")
}

fn terms(multiple: u16, outage_cap_s: u32, cap: CreditCap) -> SlaTerms {
    SlaTerms {
        availability_bp: 9990,
        multiple,
        outage_cap_s,
        cap,
        non_delivery_credit: false,
    }
}

/// 8 × H100 at 22.50 for `buyer`, ready at `start_ms`, with `sla`.
fn h100(id: u64, buyer: AccountId, start_ms: i64, sla: Option<SlaTerms>) -> Input {
    Input::LeaseStarted(LeaseStart {
        lease: LeaseId(id),
        buyer,
        supplier: SUPPLIER,
        sku: "H100-80G".to_string(),
        region: "cn-east-2".to_string(),
        gpus: 8,
        price_per_gpu_hour: d("22.50"),
        start_ms,
        sla,
    })
}

fn failover(id: u64, replacement_start_ms: Option<i64>) -> Input {
    Input::Failover {
        lease: LeaseId(id),
        replacement_start_ms,
        replacement_price: None,
    }
}

/// A lease with `sla` that runs `run_ms`, fails (node_failure), and fails over with the
/// replacement ready `outage_ms` later (`None`: no capacity). Returns (ledger, credit).
fn failed_lease(
    sla: Option<SlaTerms>,
    run_ms: i64,
    replacement_after_ms: Option<i64>,
) -> (Ledger, Decimal) {
    let mut l = ledger();
    step(&mut l, T0, deposit("pay-1", BUYER, "100000"));
    step(&mut l, T0, h100(1, BUYER, T0, sla));
    let fail = T0 + run_ms;
    step(&mut l, fail, end(1, fail, EndReason::NodeFailure));
    let at = fail + replacement_after_ms.unwrap_or(1_000);
    step(
        &mut l,
        at,
        failover(1, replacement_after_ms.map(|o| fail + o)),
    );
    let credit = l.lease_totals(LeaseId(1)).expect("known").sla_credit;
    (l, credit)
}

#[test]
fn default_terms_reproduce_the_configured_rule() {
    let t = SlaTerms::default();
    assert_eq!(
        t,
        SlaTerms {
            availability_bp: 9900,
            multiple: 10,
            outage_cap_s: 3600,
            cap: CreditCap::ChargeSoFar,
            non_delivery_credit: false,
        }
    );
    assert_eq!(t.validate(), Ok(()));
    assert_eq!(SlaTerms::default_from(&Config::default()), t);
    // The three examples of docs/settlement.md "SLA credit", with no terms and with the
    // default terms: 1 h lease, replacement 90 s later: 10 × 4.50 = 45.00; a 10-minute lease
    // without replacement: 10 × 180 = 1800 capped at its 30.00; a 20-hour lease, replacement
    // 2 h later: outage capped at 1 h, 1800.00.
    for sla in [None, Some(t)] {
        assert_eq!(failed_lease(sla, HOUR, Some(90_000)).1, d("45.00"));
        assert_eq!(failed_lease(sla, 600_000, None).1, d("30.00"));
        assert_eq!(failed_lease(sla, 20 * HOUR, Some(2 * HOUR)).1, d("1800.00"));
    }
}

#[test]
fn multiple_20_doubles_the_credit() {
    // 1 h lease (180.00 paid), replacement 90 s later: 20 × 180 × 90 / 3600 = 90.00.
    let (l, credit) = failed_lease(
        Some(terms(20, 3600, CreditCap::ChargeSoFar)),
        HOUR,
        Some(90_000),
    );
    assert_eq!(credit, d("90.00"));
    // buyer 100000 − 180 + 90; supplier 180 − 14.40 − 90
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("99910.00"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("75.60"));
}

#[test]
fn a_30_minute_outage_cap_halves_a_long_outage() {
    // 20 h lease (3600.00 paid), replacement 2 h later: outage capped at 1800 s:
    // 10 × 180 × 1800 / 3600 = 900.00 (1800.00 with the default 1 h cap).
    let (l, credit) = failed_lease(
        Some(terms(10, 1800, CreditCap::ChargeSoFar)),
        20 * HOUR,
        Some(2 * HOUR),
    );
    assert_eq!(credit, d("900.00"));
    let f = l.failover_credit(LeaseId(1)).expect("computed");
    assert_eq!(
        (f.outage_ms, f.outage_credit, f.cap),
        (1_800_000, d("900.00"), d("3600.00"))
    );
}

#[test]
fn a_monthly_fee_cap_pays_more_than_the_minutes_already_paid() {
    // The seeds' "赔时长": a lease failing after 10 minutes has paid 30.00; with no
    // replacement the outage is the 1 h cap, 10 × 180 = 1800. Under the charge-so-far cap
    // it earns 30.00; under MonthlyFeePct(50) the cap is 0.5 × 180 × 720 = 64 800, so it
    // earns the full 1800.00.
    let (_, before) = failed_lease(Some(terms(10, 3600, CreditCap::ChargeSoFar)), 600_000, None);
    assert_eq!(before, d("30.00"));
    let (l, credit) = failed_lease(
        Some(terms(10, 3600, CreditCap::MonthlyFeePct(50))),
        600_000,
        None,
    );
    assert_eq!(credit, d("1800.00"));
    assert_eq!(
        l.failover_credit(LeaseId(1)).map(|f| f.cap),
        Some(d("64800"))
    );
    // buyer 100000 − 30 + 1800; supplier 30 − 2.40 − 1800
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("101770.00"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("-1772.40"));
    // A 10 % cap: 0.1 × 180 × 720 = 12 960 still covers it; multiple 50 with a 24 h outage
    // cap and no replacement: 50 × 180 × 24 = 216 000, capped at 12 960.00.
    let (_, big) = failed_lease(
        Some(terms(50, 86_400, CreditCap::MonthlyFeePct(10))),
        600_000,
        None,
    );
    assert_eq!(big, d("12960.00"));
}

fn undelivered(sla: SlaTerms, deadline_ms: i64) -> Input {
    Input::DeliveryFailed {
        lease: LeaseId(5),
        buyer: BUYER,
        supplier: SUPPLIER,
        sku: "H100-80G".to_string(),
        region: "cn-east-2".to_string(),
        gpus: 8,
        at_ms: deadline_ms,
        sla: Some(UndeliveredSla {
            terms: sla,
            price_per_gpu_hour: d("22.50"),
            deadline_ms,
        }),
    }
}

#[test]
fn non_delivery_credit_on_and_off() {
    let on = SlaTerms {
        non_delivery_credit: true,
        ..terms(10, 3600, CreditCap::MonthlyFeePct(50))
    };
    // On: the deadline passes at T0, the replacement is ready 300 s later:
    // 10 × 180 × 300 / 3600 = 150.00, funded by the supplier that did not deliver.
    let mut l = ledger();
    step(&mut l, T0, deposit("pay-1", BUYER, "100"));
    step(&mut l, T0, undelivered(on, T0));
    let r = step(&mut l, T0 + 300_000, failover(5, Some(T0 + 300_000)));
    assert_eq!(r.transfers.len(), 2, "funding and credit");
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("250.00"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("-150.00"));
    let f = l.failover_credit(LeaseId(5)).expect("computed");
    assert_eq!((f.outage_from_ms, f.outage_ms), (T0, 300_000));
    assert_eq!(
        l.apply(T0 + 300_000, &failover(5, None)),
        Err(SettlementError::DuplicateFailover(LeaseId(5)))
    );
    // A replacement ready before the deadline: no outage, no credit (but the fact applies).
    let mut l = ledger();
    step(&mut l, T0, undelivered(on, T0 + 60_000));
    let r = step(&mut l, T0 + 1_000, failover(5, Some(T0 + 1_000)));
    assert!(r.transfers.is_empty());
    // No replacement: the 1 h cap, 10 × 180 = 1800.00.
    let mut l = ledger();
    step(&mut l, T0, undelivered(on, T0));
    step(&mut l, T0 + 1_000, failover(5, None));
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("1800.00"));

    // Off (today's rule): no credit, and a failover for it is refused as before.
    let off = terms(10, 3600, CreditCap::MonthlyFeePct(50));
    let mut l = ledger();
    step(&mut l, T0, undelivered(off, T0));
    assert_eq!(
        l.apply(T0 + 300_000, &failover(5, Some(T0 + 300_000))),
        Err(SettlementError::UnknownLease(LeaseId(5)))
    );
    assert_eq!(l.balance(Account::Buyer(BUYER)), Decimal::ZERO);
}

#[test]
fn a_dearer_replacement_adds_the_price_difference_within_the_cap() {
    let with = |sla: Option<SlaTerms>, booked_end_ms: Option<i64>| {
        let mut l = ledger();
        step(&mut l, T0, deposit("pay-1", BUYER, "100000"));
        step(&mut l, T0, h100(1, BUYER, T0, sla));
        let fail = T0 + HOUR;
        step(&mut l, fail, end(1, fail, EndReason::NodeFailure));
        let ready = fail + 90_000;
        step(
            &mut l,
            ready,
            Input::Failover {
                lease: LeaseId(1),
                replacement_start_ms: Some(ready),
                replacement_price: Some(ReplacementPrice {
                    price_per_gpu_hour: d("24.00"),
                    booked_end_ms,
                }),
            },
        );
        l.failover_credit(LeaseId(1)).expect("computed")
    };
    let fee_cap = Some(terms(10, 3600, CreditCap::MonthlyFeePct(50)));
    // Booked to 2 h after the failure: 7110 s of term left at the replacement's ready time;
    // (24.00 − 22.50) × 8 × 7110 / 3600 = 23.70, plus the outage credit 45.00 = 68.70.
    let f = with(fee_cap, Some(T0 + 3 * HOUR));
    assert_eq!(
        (f.outage_credit, f.price_difference, f.credit),
        (d("45.00"), d("23.70"), d("68.70"))
    );
    // No fixed end: 24 h, 12 × 24 = 288.00; 45.00 + 288.00 = 333.00.
    let f = with(fee_cap, None);
    assert_eq!((f.price_difference, f.credit), (d("288.00"), d("333.00")));
    // Under the charge-so-far cap (a lease without terms): capped at the 180.00 paid.
    let f = with(None, None);
    assert_eq!((f.price_difference, f.credit), (d("288.00"), d("180.00")));
    // A cheaper replacement adds nothing.
    assert_eq!(
        settlement::sla::price_difference_credit(d("22.50"), d("20"), 8, None),
        Decimal::ZERO
    );
}

#[test]
fn terms_out_of_bounds_are_refused_naming_the_field() {
    let ok = terms(10, 3600, CreditCap::MonthlyFeePct(50));
    let cases = [
        (
            SlaTerms {
                availability_bp: 8999,
                ..ok
            },
            "availability_bp",
        ),
        (
            SlaTerms {
                availability_bp: 10_000,
                ..ok
            },
            "availability_bp",
        ),
        (SlaTerms { multiple: 0, ..ok }, "multiple"),
        (SlaTerms { multiple: 51, ..ok }, "multiple"),
        (
            SlaTerms {
                outage_cap_s: 59,
                ..ok
            },
            "outage_cap_s",
        ),
        (
            SlaTerms {
                outage_cap_s: 86_401,
                ..ok
            },
            "outage_cap_s",
        ),
        (
            SlaTerms {
                cap: CreditCap::MonthlyFeePct(9),
                ..ok
            },
            "cap",
        ),
        (
            SlaTerms {
                cap: CreditCap::MonthlyFeePct(101),
                ..ok
            },
            "cap",
        ),
        (
            SlaTerms {
                cap: CreditCap::ChargeSoFar,
                non_delivery_credit: true,
                ..ok
            },
            "non_delivery_credit",
        ),
    ];
    for (bad, field) in cases {
        let e = bad.validate().expect_err("out of bounds");
        assert_eq!(e.field(), field, "{e}");
        let mut l = ledger();
        let before = rmp_serde::to_vec_named(&l).expect("serialises");
        assert_eq!(
            l.apply(T0, &h100(1, BUYER, T0, Some(bad))),
            Err(SettlementError::InvalidSlaTerms {
                lease: LeaseId(1),
                error: e.clone()
            })
        );
        assert_eq!(rmp_serde::to_vec_named(&l).expect("serialises"), before);
    }
    // The edges are accepted.
    for good in [
        SlaTerms {
            availability_bp: 9000,
            multiple: 1,
            outage_cap_s: 60,
            ..ok
        },
        SlaTerms {
            availability_bp: 9999,
            multiple: 50,
            outage_cap_s: 86_400,
            ..ok
        },
        SlaTerms {
            cap: CreditCap::MonthlyFeePct(10),
            ..ok
        },
        SlaTerms {
            cap: CreditCap::MonthlyFeePct(100),
            ..ok
        },
    ] {
        assert_eq!(good.validate(), Ok(()));
    }
    assert_eq!(
        SlaTerms { multiple: 51, ..ok }.validate(),
        Err(SlaTermsError::OutOfBounds {
            field: "multiple",
            value: 51,
            min: 1,
            max: 50
        })
    );
}

/// The worked example of docs/settlement.md "Monthly availability credit": November 2026
/// (Asia/Shanghai, 720 h), two buyers of supplier 100.
///
/// Buyer 1, terms 99.90 %, 10×, 1 h, MonthlyFeePct(50): lease 1 ready 11-01 00:00 fails
/// 11-11 00:00 (240 h, 43 200.00); its replacement lease 2 (same terms) is ready 11-11 10:00
/// and is released at the month end (470 h, 84 600.00). Per-lease credit: outage 10 h capped at 1 h,
/// 10 × 180 = 1800.00. Month: outage 10 h, committed 240 + 470 + 10 = 720 h, availability
/// 710 / 720 = 98.6111 % < 99.90 − 1 = 98.90 % (not < 94.90 %): tier 2, 25 % of 127 800.00 =
/// 31 950.00 (cap 2 × 64 800 not reached), less the 1800.00 already granted: 30 150.00.
///
/// Buyer 2, terms 99.90 %, 50×, 24 h, MonthlyFeePct(50): lease 11 fails at the same time and
/// lease 12 is ready 2 h later (478 h). Per-lease credit 50 × 180 × 2 = 18 000.00. Month:
/// 718 / 720 = 99.7222 % < 99.90 %: tier 1, 10 % of 129 240.00 = 12 924.00, less 18 000.00:
/// nothing (never negative).
#[test]
fn monthly_availability_credit_is_tiered_and_net_of_lease_credits() {
    let nov = Period::month(2026, 11, SH).expect("month");
    let dec = Period::month(2026, 12, SH).expect("month");
    let (from, to) = (nov.from_ms, nov.to_ms);
    let b2 = AccountId(2);
    let t1 = terms(10, 3600, CreditCap::MonthlyFeePct(50));
    let t2 = terms(50, 86_400, CreditCap::MonthlyFeePct(50));
    let mut l = ledger();
    step(&mut l, from, deposit("pay-1", BUYER, "200000"));
    step(&mut l, from, deposit("pay-2", b2, "200000"));
    step(&mut l, from, h100(1, BUYER, from, Some(t1)));
    step(&mut l, from, h100(11, b2, from, Some(t2)));
    let fail = ms("2026-11-11T00:00:00+08:00");
    step(&mut l, fail, end(1, fail, EndReason::NodeFailure));
    step(&mut l, fail, end(11, fail, EndReason::NodeFailure));
    let r2 = fail + 2 * HOUR;
    step(&mut l, r2, h100(12, b2, r2, Some(t2)));
    step(&mut l, r2, failover(11, Some(r2)));
    let r1 = fail + 10 * HOUR;
    step(&mut l, r1, h100(2, BUYER, r1, Some(t1)));
    step(&mut l, r1, failover(1, Some(r1)));
    assert_eq!(
        l.lease_totals(LeaseId(1)).map(|t| t.sla_credit),
        Some(d("1800.00"))
    );
    assert_eq!(
        l.lease_totals(LeaseId(11)).map(|t| t.sla_credit),
        Some(d("18000.00"))
    );
    // Both replacements are released at the month end.
    step(&mut l, to, end(2, to, EndReason::Released));
    step(&mut l, to, end(12, to, EndReason::Released));
    let closed = step(
        &mut l,
        to,
        Input::ClosePeriod {
            key: "close-2026-11".to_string(),
            from_ms: from,
            to_ms: to,
        },
    );
    assert_eq!(closed.closed, Some(PeriodId(1)));
    // November's closed statements, printed now, regenerate byte for byte after the credit
    // and December's close (it posts into the open period).
    let printed = |l: &Ledger| {
        [BUYER, b2].map(|b| to_csv(&l.buyer_statement(b, &nov).expect("accrued").table()))
    };
    let at_close = printed(&l);
    assert_eq!(
        closed.transfers.len(),
        2,
        "buyer 1's funding and credit only"
    );
    assert!(
        closed
            .transfers
            .iter()
            .all(|t| t.amount == d("30150.00") && t.at_ms == to && t.restates == Some(PeriodId(1)))
    );
    let a = l
        .availability_credits()
        .get(&closed.transfers[1].id)
        .expect("recorded");
    assert_eq!(
        (
            a.buyer,
            a.lease,
            a.promise_bp,
            a.outage_ms,
            a.committed_ms,
            a.tier_pct
        ),
        (BUYER, LeaseId(1), 9990, 10 * HOUR, 720 * HOUR, 25)
    );
    assert_eq!(
        (a.charges, a.cap, a.lease_credits, a.credit),
        (d("127800.00"), d("129600"), d("1800.00"), d("30150.00"))
    );
    // buyer 1: 200000 − 127800 + 1800 + 30150; buyer 2: 200000 − 129240 + 18000;
    // supplier: 0.92 × (127800 + 129240) − 1800 − 30150 − 18000.
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("104150.00"));
    assert_eq!(l.balance(Account::Buyer(b2)), d("88760.00"));
    assert_eq!(l.balance(Account::Supplier(SUPPLIER)), d("186526.80"));
    // The close's replay returns the same transfers, posting nothing again.
    let again = l
        .apply(
            to + 1,
            &Input::ClosePeriod {
                key: "close-2026-11".to_string(),
                from_ms: from,
                to_ms: to,
            },
        )
        .expect("replay");
    assert!(again.replayed);
    assert_eq!(l.balance(Account::Buyer(BUYER)), d("104150.00"));

    // December's statement lists it as a restatement of period 1 with its computation.
    step(&mut l, dec.to_ms, Input::Accrue { now_ms: dec.to_ms });
    let s = l.buyer_statement(BUYER, &dec).expect("accrued");
    let line = &s.restatements[0];
    assert_eq!((line.kind, line.amount), ("sla_credit", d("30150.00")));
    let info = line.sla.as_ref().expect("an SLA line");
    assert_eq!(info.basis, "availability");
    let csv = String::from_utf8(to_csv(&s.table()).expect("csv")).expect("utf-8");
    assert!(
        csv.contains(&format!(
            "\nsla_terms,{},1,availability period:1 98.6111% < promise 99.90% tier 25% of charges 127800.00 cap 129600.00 less lease credits 1800.00; promise 99.90% multiple 10x outage_cap 3600s cap monthly_fee_pct:50 non_delivery_credit no,"
        , line.transfer_id)),
        "{csv}"
    );
    // Closing December issues it as a credit note against November's invoice.
    step(
        &mut l,
        dec.to_ms,
        Input::ClosePeriod {
            key: "close-2026-12".to_string(),
            from_ms: dec.from_ms,
            to_ms: dec.to_ms,
        },
    );
    assert_eq!(printed(&l), at_close);
    let notes = l.credit_notes(PeriodId(2));
    let note = notes
        .iter()
        .find(|n| n.buyer == BUYER)
        .expect("a credit note");
    assert_eq!(
        (note.corrects.period, note.gross),
        (PeriodId(1), d("30150.00"))
    );
}

#[test]
fn statements_show_each_credit_with_its_terms() {
    let (l, _) = failed_lease(
        Some(terms(20, 3600, CreditCap::ChargeSoFar)),
        HOUR,
        Some(90_000),
    );
    let day = Period::new(T0, T0 + 24 * HOUR, SH).expect("period");
    let s = l.buyer_statement(BUYER, &day).expect("accrued");
    let c = &s.credits[0];
    assert_eq!(c.amount, d("90.00"));
    let info = c.sla.as_ref().expect("terms");
    assert_eq!(info.basis, "node_failure");
    assert_eq!(info.terms.multiple, Decimal::from(20));
    assert_eq!(
        s.charges[0].sla_terms.map(|t| t.availability_bp),
        Some(Some(9990))
    );
    let csv = String::from_utf8(to_csv(&s.table()).expect("csv")).expect("utf-8");
    assert!(
        csv.contains(&format!(
            "\nsla_terms,{},1,node_failure outage 90s outage_credit 90.00 price_difference 0.00 cap 180.00; promise 99.90% multiple 20x outage_cap 3600s cap charge_so_far non_delivery_credit no,",
            c.transfer_id
        )),
        "{csv}"
    );
    let json = String::from_utf8(to_json(&s).expect("json")).expect("utf-8");
    assert!(json.contains("\"basis\": \"node_failure\""), "{json}");
    // A lease without terms shows the configured rule and no promise.
    let (l, _) = failed_lease(None, HOUR, Some(90_000));
    let s = l.buyer_statement(BUYER, &day).expect("accrued");
    let csv = String::from_utf8(to_csv(&s.table()).expect("csv")).expect("utf-8");
    assert!(
        csv.contains("promise none multiple 10x outage_cap 3600s cap charge_so_far"),
        "{csv}"
    );
}

/// A lease start as written before issue 26 (no `sla`).
#[derive(serde::Serialize)]
struct OldLeaseStart {
    lease: LeaseId,
    buyer: AccountId,
    supplier: AccountId,
    sku: String,
    region: String,
    gpus: u32,
    price_per_gpu_hour: Decimal,
    start_ms: i64,
}

#[test]
fn snapshots_and_inputs_from_before_issue_26_still_load() {
    // A ledger with terms round-trips (rmp-serde named, as the gateway snapshots it).
    let (l, _) = failed_lease(
        Some(terms(20, 3600, CreditCap::MonthlyFeePct(50))),
        HOUR,
        Some(90_000),
    );
    let bytes = rmp_serde::to_vec_named(&l).expect("serialises");
    let back: Ledger = rmp_serde::from_slice(&bytes).expect("deserialises");
    assert_eq!(
        back.sla_terms(LeaseId(1)),
        Some(terms(20, 3600, CreditCap::MonthlyFeePct(50)))
    );
    assert_eq!(
        back.failover_credit(LeaseId(1)),
        l.failover_credit(LeaseId(1))
    );
    assert_eq!(back.lease_totals(LeaseId(1)), l.lease_totals(LeaseId(1)));
    // A ledger without terms or failovers writes none of the issue 26 fields (they are
    // skipped when empty), so its bytes are what a ledger before issue 26 wrote: here a
    // lease (no terms) ended by node_failure after 1 h, its failover still to come.
    let mut plain = ledger();
    step(&mut plain, T0, deposit("pay-1", BUYER, "1000"));
    step(&mut plain, T0, h100(1, BUYER, T0, None));
    step(
        &mut plain,
        T0 + HOUR,
        end(1, T0 + HOUR, EndReason::NodeFailure),
    );
    let bytes = rmp_serde::to_vec_named(&plain).expect("serialises");
    // msgpack keys: a fixstr's first byte is 0xa0 + its length.
    for field in [
        &b"\xafundelivered_sla"[..],
        b"\xb4availability_credits",
        b"\xa8failover",
        b"\xa3sla",
    ] {
        assert!(!bytes.windows(field.len()).any(|w| w == field));
    }
    // It loads, and the failover credits by the configured rule: 10 × 4.50 = 45.00.
    let mut old: Ledger = rmp_serde::from_slice(&bytes).expect("an old snapshot loads");
    assert!(old.check_invariants().is_ok());
    assert_eq!(old.sla_terms(LeaseId(1)), None);
    step(
        &mut old,
        T0 + HOUR + 90_000,
        failover(1, Some(T0 + HOUR + 90_000)),
    );
    assert_eq!(
        old.lease_totals(LeaseId(1)).map(|t| t.sla_credit),
        Some(d("45.00"))
    );
    // A lease start written before issue 26 (rmp-serde named) reads with `sla: None`.
    let bytes = rmp_serde::to_vec_named(&OldLeaseStart {
        lease: LeaseId(1),
        buyer: BUYER,
        supplier: SUPPLIER,
        sku: "H100-80G".to_string(),
        region: "cn-east-2".to_string(),
        gpus: 8,
        price_per_gpu_hour: d("22.50"),
        start_ms: T0,
    })
    .expect("serialises");
    let start: LeaseStart = rmp_serde::from_slice(&bytes).expect("an old lease start loads");
    assert_eq!(Input::LeaseStarted(start), h100(1, BUYER, T0, None));
    // Inputs written before issue 26 (no `sla`, no `replacement_price`) parse.
    let start: Input = serde_json::from_str(
        r#"{"type":"lease_started","lease":1,"buyer":1,"supplier":100,"sku":"H100-80G","region":"cn-east-2","gpus":8,"price_per_gpu_hour":"22.50","start_ms":0}"#,
    )
    .expect("an old lease start");
    assert!(matches!(
        start,
        Input::LeaseStarted(LeaseStart { sla: None, .. })
    ));
    let f: Input =
        serde_json::from_str(r#"{"type":"failover","lease":1,"replacement_start_ms":null}"#)
            .expect("an old failover");
    assert_eq!(f, failover(1, None));
}
