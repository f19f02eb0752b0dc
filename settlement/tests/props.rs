//! Property tests over random lease histories (some leases never delivered):
//! conservation after every step, printed lines add up, splitting a period
//! gives the same sums, exact slices add up to lease totals, failed
//! deliveries listed once and split exactly, byte-identical CSV on replay.

use crate::common::d;
use proptest::prelude::*;
use rust_decimal::Decimal;
use settlement::reports::csv::to_csv;
use settlement::{
    Account, AccountId, Config, EndReason, Input, LeaseId, LeaseStart, Ledger, Period, round_fen,
};
use std::collections::BTreeMap;

/// 2026-03-27T00:00:00Z: the history spans the Berlin/New York DST change.
const T0: i64 = 1_774_569_600_000;
const HOUR: i64 = 3_600_000;
const ZONES: [&str; 4] = ["Asia/Shanghai", "Europe/Berlin", "America/New_York", "UTC"];
const SKUS: [(&str, &str); 3] = [
    ("H100-80G", "22.50"),
    ("RTX4090-24G", "1.98"),
    ("RTX5090-32G", "3.25"),
];
const REASONS: [EndReason; 6] = [
    EndReason::Released,
    EndReason::Expired,
    EndReason::Preempted,
    EndReason::NodeFailure,
    EndReason::OfferWithdrawn,
    EndReason::InsufficientFunds,
];

#[derive(Debug, Clone)]
struct LeaseSpec {
    buyer: u64,
    supplier: u64,
    sku: usize,
    region: usize,
    gpus: u32,
    start: i64,
    duration: i64,
    reason: usize,
    report_delay: i64,
    failover: Option<Option<i64>>,
    /// `false`: the supplier never delivered it (issue 15): only a `DeliveryFailed` fact.
    delivered: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Deposit {
        buyer: u64,
        cents: i64,
        at: i64,
        replay: bool,
    },
    Payout {
        supplier: u64,
        percent: u32,
        at: i64,
    },
    Adjust {
        buyer: u64,
        cents: i64,
        at: i64,
    },
}

fn lease_spec() -> impl Strategy<Value = LeaseSpec> {
    (
        (1u64..=3, 100u64..=101, 0usize..3, 0usize..2, 1u32..=8),
        0i64..(96 * HOUR),
        prop_oneof![0i64..3_000, 0i64..(2 * HOUR), 0i64..(40 * HOUR)],
        0usize..6,
        0i64..180_000,
        prop_oneof![Just(None), (0i64..(2 * HOUR)).prop_map(Some)],
        prop::bool::weighted(0.8),
    )
        .prop_map(
            |(
                (buyer, supplier, sku, region, gpus),
                start,
                duration,
                reason,
                report_delay,
                f,
                delivered,
            )| {
                LeaseSpec {
                    buyer,
                    supplier,
                    sku,
                    region,
                    gpus,
                    start: T0 + start,
                    duration,
                    reason,
                    report_delay,
                    failover: if REASONS[reason] == EndReason::NodeFailure {
                        Some(f)
                    } else {
                        None
                    },
                    delivered,
                }
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..=3, 1i64..200_000, 0i64..(100 * HOUR), any::<bool>())
            .prop_map(|(buyer, cents, at, replay)| Op::Deposit { buyer, cents, at: T0 + at, replay }),
        1 => (100u64..=101, 1u32..=100, 0i64..(140 * HOUR))
            .prop_map(|(supplier, percent, at)| Op::Payout { supplier, percent, at: T0 + at }),
        1 => (1u64..=3, 1i64..500, 0i64..(140 * HOUR)).prop_map(|(buyer, cents, at)| Op::Adjust { buyer, cents, at: T0 + at }),
    ]
}

/// Time-ordered inputs; payouts are sized at apply time from the payable.
#[derive(Debug, Clone)]
enum Step {
    Fixed(Input),
    Payout {
        key: String,
        supplier: AccountId,
        percent: u32,
    },
}

fn history(leases: &[LeaseSpec], ops: &[Op], tick: i64) -> Vec<(i64, u32, Step)> {
    let mut steps = Vec::new();
    let mut seq = 0u32;
    let mut push = |at: i64, s: Step, steps: &mut Vec<(i64, u32, Step)>| {
        seq += 1;
        steps.push((at, seq, s));
    };
    for (i, l) in leases.iter().enumerate() {
        let id = LeaseId(i as u64 + 1);
        let (sku, price) = SKUS[l.sku];
        let region = ["cn-east-2", "cn-north-1"][l.region].to_string();
        if !l.delivered {
            // Never ready: the deadline passes 180 s after the fill; the fact may come twice.
            let failed = Input::DeliveryFailed {
                lease: id,
                buyer: AccountId(l.buyer),
                supplier: AccountId(l.supplier),
                sku: sku.to_string(),
                region,
                gpus: l.gpus,
                at_ms: l.start + 180_000,
                sla: None,
            };
            push(l.start + 180_000, Step::Fixed(failed.clone()), &mut steps);
            push(l.start + HOUR, Step::Fixed(failed), &mut steps);
            continue;
        }
        let start = Input::LeaseStarted(LeaseStart {
            lease: id,
            buyer: AccountId(l.buyer),
            supplier: AccountId(l.supplier),
            sku: sku.to_string(),
            region,
            gpus: l.gpus,
            price_per_gpu_hour: d(price),
            start_ms: l.start,
            sla: None,
        });
        push(l.start, Step::Fixed(start), &mut steps);
        let end_ms = l.start + l.duration;
        let reason = REASONS[l.reason];
        // node_failure facts arrive late (after the last heartbeat), so accrual may overshoot.
        let at = if reason == EndReason::NodeFailure {
            end_ms + l.report_delay
        } else {
            end_ms
        };
        push(
            at,
            Step::Fixed(Input::LeaseEnded {
                lease: id,
                end_ms,
                reason,
            }),
            &mut steps,
        );
        if let Some(f) = l.failover {
            let replacement_start_ms = f.map(|x| end_ms + x);
            push(
                at + 1,
                Step::Fixed(Input::Failover {
                    lease: id,
                    replacement_start_ms,
                    replacement_price: None,
                }),
                &mut steps,
            );
        }
    }
    for (i, o) in ops.iter().enumerate() {
        match o {
            Op::Deposit {
                buyer,
                cents,
                at,
                replay,
            } => {
                let input = Input::Deposit {
                    key: format!("dep-{i}"),
                    buyer: AccountId(*buyer),
                    amount: Decimal::new(*cents, 2),
                };
                push(*at, Step::Fixed(input.clone()), &mut steps);
                if *replay {
                    push(*at + HOUR, Step::Fixed(input), &mut steps);
                }
            }
            Op::Payout {
                supplier,
                percent,
                at,
            } => push(
                *at,
                Step::Payout {
                    key: format!("pay-{i}"),
                    supplier: AccountId(*supplier),
                    percent: *percent,
                },
                &mut steps,
            ),
            Op::Adjust { buyer, cents, at } => push(
                *at,
                Step::Fixed(Input::Adjustment {
                    key: format!("adj-{i}"),
                    debit: Account::PlatformFee,
                    credit: Account::Buyer(AccountId(*buyer)),
                    amount: Decimal::new(*cents, 2),
                    memo: "goodwill".into(),
                }),
                &mut steps,
            ),
        }
    }
    let mut t = T0;
    while t <= T0 + 150 * HOUR {
        push(t, Step::Fixed(Input::Accrue { now_ms: t }), &mut steps);
        t += tick;
    }
    steps.sort_by_key(|(at, seq, _)| (*at, *seq));
    steps
}

/// Applies the history, checking Σ balances = 0 and buyers >= 0 after every step.
fn run(steps: &[(i64, u32, Step)]) -> Result<Ledger, TestCaseError> {
    let mut l = Ledger::new(Config::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    for (at, _, s) in steps {
        let input = match s {
            Step::Fixed(i) => i.clone(),
            Step::Payout {
                key,
                supplier,
                percent,
            } => {
                let payable = l.balance(Account::Supplier(*supplier));
                let amount = (payable * Decimal::from(*percent) / Decimal::from(100)).floor();
                if amount <= Decimal::ZERO {
                    continue;
                }
                Input::Payout {
                    key: key.clone(),
                    supplier: *supplier,
                    amount,
                }
            }
        };
        l.apply(*at, &input)
            .map_err(|e| TestCaseError::fail(format!("{input:?} at {at}: {e}")))?;
        prop_assert!(
            l.sum_of_balances().is_zero(),
            "Σ balances must be zero after {input:?}"
        );
        prop_assert!(l.check_invariants().is_ok(), "invariants after {input:?}");
    }
    Ok(l)
}

type Sums = BTreeMap<LeaseId, (u64, Decimal, Decimal, Decimal)>;

fn slice_sums(l: &Ledger, p: &Period) -> Sums {
    let mut m = Sums::new();
    for s in l.lease_slices(p).expect("all leases ended") {
        let e = m
            .entry(s.lease)
            .or_insert((0, Decimal::ZERO, Decimal::ZERO, Decimal::ZERO));
        e.0 += s.billed_seconds;
        e.1 += s.amount;
        e.2 += s.collected;
        e.3 += s.fee;
    }
    m
}

fn add(a: &Sums, b: &Sums) -> Sums {
    let mut m = a.clone();
    for (k, v) in b {
        let e = m
            .entry(*k)
            .or_insert((0, Decimal::ZERO, Decimal::ZERO, Decimal::ZERO));
        e.0 += v.0;
        e.1 += v.1;
        e.2 += v.2;
        e.3 += v.3;
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_histories_conserve_money_and_reports_add_up(
        leases in prop::collection::vec(lease_spec(), 1..10),
        ops in prop::collection::vec(op(), 0..12),
        tick in prop_oneof![Just(60_000i64), Just(HOUR), Just(7 * HOUR)],
        zone in 0usize..4,
        split in 1i64..(150 * HOUR),
        cut in 1i64..(150 * HOUR),
    ) {
        // Everything ends before T0 + 150 h; make sure the last lease end is inside.
        let steps = history(&leases, &ops, if tick == 60_000 { 6 * 60_000 } else { tick });
        let l = run(&steps)?;
        let zone = ZONES[zone];
        let (a, b) = (T0 - 24 * HOUR, T0 + 200 * HOUR);
        let m = T0 + split.min(cut);
        let whole = Period::new(a, b, zone).expect("period");
        let left = Period::new(a, m, zone).expect("period");
        let right = Period::new(m, b, zone).expect("period");

        // Exact slices: whole history = lease totals; split halves add up to the whole.
        let w = slice_sums(&l, &whole);
        for (id, v) in &w {
            let t = l.lease_totals(*id).expect("known lease");
            prop_assert_eq!(*v, (t.billed_seconds, t.amount, t.collected, t.fee));
        }
        prop_assert_eq!(add(&slice_sums(&l, &left), &slice_sums(&l, &right)), w);

        for buyer in 1..=3 {
            let buyer = AccountId(buyer);
            let [sw, sl, sr] = [&whole, &left, &right].map(|p| l.buyer_statement(buyer, p).expect("statement"));
            for s in [&sw, &sl, &sr] {
                // opening + deposits + adjustments + credits - charges + unpaid + rounding
                // = closing, in print; the rounding line (issue 17) is at most 0.03.
                prop_assert_eq!(
                    s.opening_balance + s.totals.deposits + s.totals.adjustments + s.totals.credits
                        - s.totals.charges + s.totals.unpaid + s.totals.rounding,
                    s.closing_balance
                );
                prop_assert!(s.totals.rounding.abs() <= Decimal::new(3, 2));
                prop_assert_eq!(s.charges.iter().map(|c| c.amount).sum::<Decimal>(), s.totals.charges);
            }
            prop_assert_eq!(sl.closing_balance, sr.opening_balance);
            prop_assert_eq!(sl.opening_balance, sw.opening_balance);
            prop_assert_eq!(sr.closing_balance, sw.closing_balance);
            // billed seconds split exactly
            let secs = |s: &settlement::reports::buyer::BuyerStatement| s.charges.iter().map(|c| c.billed_seconds).sum::<u64>();
            prop_assert_eq!(secs(&sl) + secs(&sr), secs(&sw));
            // after everything ended the statement agrees with the live balance
            prop_assert_eq!(sw.closing_balance, round_fen(l.balance(Account::Buyer(buyer))));
            prop_assert!(sw.closing_balance >= Decimal::ZERO);
        }
        for supplier in [100, 101] {
            let supplier = AccountId(supplier);
            let [sw, sl, sr] = [&whole, &left, &right].map(|p| l.supplier_statement(supplier, p).expect("statement"));
            for s in [&sw, &sl, &sr] {
                prop_assert_eq!(
                    s.opening_payable + s.totals.gross - s.totals.fee - s.totals.sla_deductions
                        + s.totals.adjustments - s.totals.payouts + s.totals.rounding,
                    s.closing_payable
                );
                prop_assert!(s.totals.rounding.abs() <= Decimal::new(3, 2));
                prop_assert_eq!(s.totals.gross - s.totals.fee, s.totals.net);
            }
            prop_assert_eq!(sl.closing_payable, sr.opening_payable);
            prop_assert_eq!(sw.closing_payable, round_fen(l.balance(Account::Supplier(supplier))));
            // Failed deliveries: each listed once (despite the repeated fact), 0.00, split exactly.
            let failed = leases.iter().filter(|x| !x.delivered && x.supplier == supplier.0).count() as u64;
            prop_assert_eq!(sw.totals.failed_deliveries, failed);
            prop_assert_eq!(sl.totals.failed_deliveries + sr.totals.failed_deliveries, failed);
            prop_assert!(sw.failed_deliveries.iter().all(|f| f.amount.is_zero()));
        }
        for p in [&whole, &left, &right] {
            let tb = l.trial_balance(p).expect("trial balance");
            prop_assert!(tb.balanced(), "{:?}", tb.checks);
            // Issue 25: every printed row adds up as printed, with its rounding column.
            for r in tb.rows.iter().chain([&tb.rounding, &tb.totals]) {
                prop_assert_eq!(r.opening + r.credits - r.debits + r.rounding, r.closing, "{}", r.account);
            }
            // An account row prints each cell rounded from its exact value, so its own
            // difference is under 2 fen; the `rounding` row's cells are themselves column
            // differences over every account and may sum further (CI found -0.03 there, its
            // input kept in props.proptest-regressions): only the identity binds those rows.
            for r in &tb.rows {
                prop_assert!(r.rounding.abs() <= Decimal::new(2, 2), "{}: {}", r.account, r.rounding);
            }
            let rounding_column: Decimal = tb.rows.iter().map(|r| r.rounding).sum::<Decimal>() + tb.rounding.rounding;
            prop_assert_eq!(rounding_column, tb.totals.rounding);
            for (name, col) in [("opening", 0), ("closing", 1)] {
                let printed: Decimal = tb.rows.iter().map(|r| if col == 0 { r.opening } else { r.closing }).sum::<Decimal>()
                    + if col == 0 { tb.rounding.opening } else { tb.rounding.closing };
                prop_assert!(printed.is_zero(), "{} column must add up to 0.00", name);
            }
            let ps = l.platform_summary(p).expect("summary");
            prop_assert_eq!(ps.by_sku.iter().map(|r| r.gmv).sum::<Decimal>(), ps.total.gmv);
            prop_assert_eq!(ps.by_region.iter().map(|r| r.gmv).sum::<Decimal>(), ps.total.gmv);
            prop_assert_eq!(ps.by_sku.iter().map(|r| r.fee_revenue).sum::<Decimal>(), ps.total.fee_revenue);
            prop_assert_eq!(ps.by_region.iter().map(|r| r.gpu_hours).sum::<Decimal>(), ps.total.gpu_hours);
        }
        let tb = l.trial_balance(&whole).expect("trial balance");
        for r in &tb.rows {
            let live = l.balances().iter().find(|(a, _)| a.to_string() == r.account).map(|(_, b)| *b).unwrap_or_default();
            prop_assert_eq!(r.closing, round_fen(live), "{}", r.account);
        }

        // Same inputs, fresh ledger: byte-identical CSV.
        let again = run(&steps)?;
        for buyer in 1..=3 {
            let x = to_csv(&l.buyer_statement(AccountId(buyer), &left).expect("s").table()).expect("csv");
            let y = to_csv(&again.buyer_statement(AccountId(buyer), &left).expect("s").table()).expect("csv");
            prop_assert_eq!(x, y);
        }
        let x = to_csv(&l.platform_summary(&whole).expect("s").table()).expect("csv");
        let y = to_csv(&again.platform_summary(&whole).expect("s").table()).expect("csv");
        prop_assert_eq!(x, y);
    }
}

fn any_decimal() -> impl Strategy<Value = Decimal> {
    prop_oneof![
        (any::<i64>(), 0u32..=28).prop_map(|(m, s)| Decimal::new(m, s)),
        Just(Decimal::MAX),
        Just(Decimal::MIN),
        (0i64..100_000, 0u32..=4).prop_map(|(m, s)| Decimal::new(m, s)),
    ]
}

fn any_time() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        Just(i64::MAX),
        Just(i64::MIN),
        T0..(T0 + 10 * HOUR)
    ]
}

fn any_account() -> impl Strategy<Value = Account> {
    prop_oneof![
        Just(Account::ExternalCash),
        Just(Account::PlatformFee),
        Just(Account::SlaCredits),
        (0u64..3).prop_map(|b| Account::Buyer(AccountId(b))),
        (0u64..3).prop_map(|s| Account::Supplier(AccountId(s))),
    ]
}

fn any_input() -> impl Strategy<Value = Input> {
    prop_oneof![
        (
            0u64..4,
            0u64..3,
            0u64..3,
            any::<u32>(),
            any_decimal(),
            any_time()
        )
            .prop_map(|(l, b, s, gpus, price, start_ms)| {
                Input::LeaseStarted(LeaseStart {
                    lease: LeaseId(l),
                    buyer: AccountId(b),
                    supplier: AccountId(s),
                    sku: "H100-80G".into(),
                    region: "cn-east-2".into(),
                    gpus,
                    price_per_gpu_hour: price,
                    start_ms,
                    sla: None,
                })
            }),
        (0u64..4, any_time(), 0usize..6).prop_map(|(l, end_ms, r)| Input::LeaseEnded {
            lease: LeaseId(l),
            end_ms,
            reason: REASONS[r]
        }),
        (0u64..4, prop::option::of(any_time())).prop_map(|(l, replacement_start_ms)| {
            Input::Failover {
                lease: LeaseId(l),
                replacement_start_ms,
                replacement_price: None,
            }
        }),
        (0u8..3, 0u64..3, any_decimal()).prop_map(|(k, b, amount)| Input::Deposit {
            key: format!("k{k}"),
            buyer: AccountId(b),
            amount
        }),
        (0u8..3, 0u64..3, any_decimal()).prop_map(|(k, s, amount)| Input::Payout {
            key: format!("k{k}"),
            supplier: AccountId(s),
            amount
        }),
        (0u8..3, any_account(), any_account(), any_decimal()).prop_map(
            |(k, debit, credit, amount)| {
                Input::Adjustment {
                    key: format!("k{k}"),
                    debit,
                    credit,
                    amount,
                    memo: String::new(),
                }
            }
        ),
        (0u64..4, any_time(), 0usize..7).prop_map(|(l, end_ms, r)| Input::LeaseEnded {
            lease: LeaseId(l),
            end_ms,
            reason: if r == 6 {
                EndReason::NotDelivered
            } else {
                REASONS[r]
            },
        }),
        (0u64..6, 0u64..3, 0u64..3, any::<u32>(), any_time()).prop_map(|(l, b, s, gpus, at_ms)| {
            Input::DeliveryFailed {
                lease: LeaseId(l),
                buyer: AccountId(b),
                supplier: AccountId(s),
                sku: "H100-80G".into(),
                region: "cn-east-2".into(),
                gpus,
                at_ms,
                sla: None,
            }
        }),
        any_time().prop_map(|now_ms| Input::Accrue { now_ms }),
        (any::<u32>(), any_time(), any_time()).prop_map(|(gpus, from_ms, to_ms)| {
            Input::ListedCapacity {
                supplier: AccountId(0),
                sku: "H100-80G".into(),
                region: "cn-east-2".into(),
                gpus,
                from_ms,
                to_ms,
            }
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary (mostly invalid) inputs never panic, and every accepted or
    /// refused input leaves the invariants intact; reports never panic either.
    #[test]
    fn arbitrary_inputs_never_panic_or_break_invariants(
        inputs in prop::collection::vec((any_time(), any_input()), 1..40),
        from in any_time(),
        len in any::<i64>(),
    ) {
        let mut l = Ledger::new(Config::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (at, input) in &inputs {
            let before = l.clone().balances().clone();
            match l.apply(*at, input) {
                Ok(_) => {}
                Err(_) => prop_assert_eq!(l.balances(), &before, "a refused input changes nothing"),
            }
            prop_assert!(l.check_invariants().is_ok(), "{:?}", l.check_invariants());
        }
        if let Ok(p) = Period::new(from, from.saturating_add(len), "Asia/Shanghai") {
            if let Ok(tb) = l.trial_balance(&p) {
                prop_assert!(tb.balanced());
            }
            let _ = l.platform_summary(&p);
            let _ = l.buyer_statement(AccountId(0), &p).map(|s| to_csv(&s.table()));
            let _ = l.supplier_statement(AccountId(0), &p).map(|s| to_csv(&s.table()));
        }
    }
}
