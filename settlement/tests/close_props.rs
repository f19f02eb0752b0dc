//! Property test (issue 17): after a period is closed, every report of it (buyer and
//! supplier statements, platform summary, trial balance; CSV and JSON) stays byte-identical
//! whatever comes later — late node failures and their credits, late failed deliveries,
//! listings reaching back, buyer-ended leases with a minimum, deposits, payouts and every
//! kind of typed adjustment — and accounts first seen after a close (no account is created
//! up front, so buyers and suppliers appear when their first deposit, lease or adjustment
//! comes). `check_invariants` (which recomputes every closed period's trial balance) runs
//! after every step.

use crate::common::d;
use proptest::prelude::*;
use rust_decimal::Decimal;
use settlement::reports::csv::to_csv;
use settlement::reports::to_json;
use settlement::{
    Account, AccountId, Adjustment, AdjustmentKind, Config, EndReason, Input, LeaseId, LeaseStart,
    Ledger, Period,
};
use std::collections::BTreeMap;

/// 2026-11-01T00:00:00+08:00.
const T0: i64 = 1_793_462_400_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
const SH: &str = "Asia/Shanghai";
const REASONS: [EndReason; 4] = [
    EndReason::Released,
    EndReason::NodeFailure,
    EndReason::Preempted,
    EndReason::InsufficientFunds,
];
const BUYERS: [u64; 3] = [1, 2, 3];
const SUPPLIERS: [u64; 2] = [100, 101];
/// A buyer and a supplier first seen in period 2 (after the first close) and a pair first
/// seen after the second close, with the hour (from `T0`) of their deposit and lease.
const LATE: [(u64, u64, i64); 2] = [(4, 102, 25), (5, 103, 49)];

#[derive(Debug, Clone)]
struct LeaseSpec {
    buyer: u64,
    supplier: u64,
    cheap: bool,
    gpus: u32,
    start: i64,
    duration: i64,
    reason: usize,
    delay: i64,
    failover: Option<i64>,
    delivered: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Deposit(u64, i64),
    Goodwill(u64, i64),
    Refund(u64, u32),
    CashOut(u64),
    Payout(u64, u32),
    WriteOff(u64),
    Listing(u64, i64, i64),
}

/// Inputs sized at apply time from balances.
#[derive(Debug, Clone)]
enum Step {
    Fixed(Input),
    Op(usize, Op),
}

fn lease_spec() -> impl Strategy<Value = LeaseSpec> {
    (
        (1u64..=3, 100u64..=101, any::<bool>(), 1u32..=8),
        0i64..(60 * HOUR),
        prop_oneof![0i64..3_000, 0i64..(2 * HOUR), 0i64..(30 * HOUR)],
        (0usize..4, 0i64..(3 * HOUR)),
        prop_oneof![Just(None), (0i64..(3 * HOUR)).prop_map(Some)],
        prop::bool::weighted(0.85),
    )
        .prop_map(
            |(
                (buyer, supplier, cheap, gpus),
                start,
                duration,
                (reason, delay),
                failover,
                delivered,
            )| {
                LeaseSpec {
                    buyer,
                    supplier,
                    cheap,
                    gpus,
                    start: T0 + start,
                    duration,
                    reason,
                    delay,
                    failover,
                    delivered,
                }
            },
        )
}

fn timed_op() -> impl Strategy<Value = (i64, Op)> {
    let at = 0i64..(90 * HOUR);
    let op = prop_oneof![
        3 => (1u64..=3, 1i64..100_000).prop_map(|(b, c)| Op::Deposit(b, c)),
        1 => (1u64..=3, 1i64..5_000).prop_map(|(b, c)| Op::Goodwill(b, c)),
        1 => (1u64..=3, 1u32..=100).prop_map(|(b, p)| Op::Refund(b, p)),
        1 => (1u64..=3).prop_map(Op::CashOut),
        1 => (100u64..=101, 1u32..=100).prop_map(|(s, p)| Op::Payout(s, p)),
        1 => (100u64..=101).prop_map(Op::WriteOff),
        1 => (100u64..=101, 0i64..(30 * HOUR), 1i64..(10 * HOUR)).prop_map(|(s, f, l)| Op::Listing(s, f, l)),
    ];
    (at, op).prop_map(|(at, op)| (T0 + at, op))
}

fn history(leases: &[LeaseSpec], ops: &[(i64, Op)], tick: i64) -> Vec<(i64, u32, Step)> {
    let mut steps = Vec::new();
    let mut push = |at: i64, s: Step| {
        let seq = steps.len() as u32;
        steps.push((at, seq, s));
    };
    for (i, l) in leases.iter().enumerate() {
        let id = LeaseId(i as u64 + 1);
        let (sku, price) = if l.cheap {
            ("RTX4090-24G", "1.98") // 600 s minimum in `config()`
        } else {
            ("H100-80G", "22.50")
        };
        if !l.delivered {
            let failed = Input::DeliveryFailed {
                lease: id,
                buyer: AccountId(l.buyer),
                supplier: AccountId(l.supplier),
                sku: sku.into(),
                region: "cn-east-2".into(),
                gpus: l.gpus,
                at_ms: l.start + 180_000,
                sla: None,
            };
            push(l.start + 180_000 + l.delay, Step::Fixed(failed.clone()));
            push(l.start + 180_000 + 2 * l.delay + 1, Step::Fixed(failed));
            continue;
        }
        push(
            l.start,
            Step::Fixed(Input::LeaseStarted(LeaseStart {
                lease: id,
                buyer: AccountId(l.buyer),
                supplier: AccountId(l.supplier),
                sku: sku.into(),
                region: "cn-east-2".into(),
                gpus: l.gpus,
                price_per_gpu_hour: d(price),
                start_ms: l.start,
                sla: None,
            })),
        );
        let end_ms = l.start + l.duration;
        let reason = REASONS[l.reason];
        // Only node failures are reported late (the last heartbeat is in the past).
        let at = if reason == EndReason::NodeFailure {
            end_ms + l.delay
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
        );
        if reason == EndReason::NodeFailure {
            let failover = Input::Failover {
                lease: id,
                replacement_start_ms: l.failover.map(|x| end_ms + x),
                replacement_price: None,
            };
            push(at + l.failover.unwrap_or(0) + 1, Step::Fixed(failover));
        }
    }
    for (i, (at, op)) in ops.iter().enumerate() {
        let at = match op {
            Op::Listing(_, from, len) => T0 + from + len, // reported when it ends
            _ => *at,
        };
        push(at, Step::Op(i, op.clone()));
    }
    for (i, (buyer, supplier, hour)) in LATE.into_iter().enumerate() {
        let at = T0 + hour * HOUR;
        let deposit = Input::Deposit {
            key: format!("late-{buyer}"),
            buyer: AccountId(buyer),
            amount: Decimal::from(100),
        };
        push(at, Step::Fixed(deposit));
        let id = LeaseId(1_000 + i as u64);
        let start = LeaseStart {
            lease: id,
            buyer: AccountId(buyer),
            supplier: AccountId(supplier),
            sku: "H100-80G".into(),
            region: "cn-east-2".into(),
            gpus: 1,
            price_per_gpu_hour: d("22.50"),
            start_ms: at,
            sla: None,
        };
        push(at, Step::Fixed(Input::LeaseStarted(start)));
        let end = Input::LeaseEnded {
            lease: id,
            end_ms: at + HOUR / 2,
            reason: EndReason::Released,
        };
        push(at + HOUR / 2, Step::Fixed(end));
    }
    let mut t = T0;
    while t <= T0 + 100 * HOUR {
        push(t, Step::Fixed(Input::Accrue { now_ms: t }));
        t += tick;
    }
    // Closes last among their instant: after that instant's accrual.
    for (k, from) in [(1, T0), (2, T0 + DAY)] {
        let close = Input::ClosePeriod {
            key: format!("close-{k}"),
            from_ms: from,
            to_ms: from + DAY,
        };
        push(from + DAY, Step::Fixed(close));
    }
    steps.sort_by_key(|(at, seq, _)| (*at, *seq));
    steps
}

fn adjust(key: String, kind: AdjustmentKind, amount: Decimal) -> Input {
    Input::Adjust(Adjustment {
        key,
        kind,
        amount,
        reason: "property test".into(),
        reference: None,
    })
}

/// The input an `Op` makes at apply time; `None` when there is nothing to move.
fn op_input(l: &Ledger, i: usize, op: &Op) -> Option<Input> {
    let key = format!("op-{i}");
    let positive = |x: Decimal| Some(x).filter(|x| *x > Decimal::ZERO);
    match *op {
        Op::Deposit(b, cents) => Some(Input::Deposit {
            key,
            buyer: AccountId(b),
            amount: Decimal::new(cents, 2),
        }),
        Op::Goodwill(b, cents) => Some(adjust(
            key,
            AdjustmentKind::GoodwillCredit {
                buyer: AccountId(b),
            },
            Decimal::new(cents, 2),
        )),
        Op::Refund(b, pct) => {
            let bal = l.balance(Account::Buyer(AccountId(b)));
            let amount = positive((bal * Decimal::from(pct) / Decimal::from(100)).floor())?;
            Some(adjust(
                key,
                AdjustmentKind::Refund {
                    buyer: AccountId(b),
                },
                amount,
            ))
        }
        Op::CashOut(b) => {
            let b = AccountId(b);
            let avail = l.sla_credits_received(b) - l.sla_cashed_out(b);
            let amount = positive(avail.min(l.balance(Account::Buyer(b))))?;
            Some(adjust(key, AdjustmentKind::SlaCashOut { buyer: b }, amount))
        }
        Op::Payout(s, pct) => {
            let bal = l.balance(Account::Supplier(AccountId(s)));
            let amount = positive((bal * Decimal::from(pct) / Decimal::from(100)).floor())?;
            Some(Input::Payout {
                key,
                supplier: AccountId(s),
                amount,
            })
        }
        Op::WriteOff(s) => {
            let debt = positive(-l.balance(Account::Supplier(AccountId(s))))?;
            Some(adjust(
                key,
                AdjustmentKind::WriteOff {
                    supplier: AccountId(s),
                },
                debt,
            ))
        }
        Op::Listing(s, from, len) => Some(Input::ListedCapacity {
            supplier: AccountId(s),
            sku: "H100-80G".into(),
            region: "cn-east-2".into(),
            gpus: 4,
            from_ms: T0 + from,
            to_ms: T0 + from + len,
        }),
    }
}

fn config() -> Config {
    let mut c = Config::default();
    c.min_billed_seconds_by_sku
        .insert("RTX4090-24G".into(), 600);
    c
}

/// Every report of `p` as bytes (statements, platform summary, trial balance, GL export,
/// reconciliation).
fn reports(l: &Ledger, p: &Period) -> Result<Vec<Vec<u8>>, TestCaseError> {
    let fail = |e: settlement::SettlementError| TestCaseError::fail(e.to_string());
    let mut out = Vec::new();
    for b in BUYERS.into_iter().chain(LATE.map(|x| x.0)) {
        let s = l.buyer_statement(AccountId(b), p).map_err(fail)?;
        out.push(to_csv(&s.table()).map_err(fail)?);
        out.push(to_json(&s).map_err(fail)?);
    }
    for s in SUPPLIERS.into_iter().chain(LATE.map(|x| x.1)) {
        let s = l.supplier_statement(AccountId(s), p).map_err(fail)?;
        out.push(to_csv(&s.table()).map_err(fail)?);
        out.push(to_json(&s).map_err(fail)?);
    }
    let ps = l.platform_summary(p).map_err(fail)?;
    out.push(to_csv(&ps.table()).map_err(fail)?);
    out.push(to_json(&ps).map_err(fail)?);
    let tb = l.trial_balance(p).map_err(fail)?;
    out.push(to_csv(&tb.table()).map_err(fail)?);
    out.push(to_json(&tb).map_err(fail)?);
    // The GL export and the cash reconciliation (issue 17): also frozen once closed, and
    // every entry balances.
    let gl = l.gl_export(p).map_err(fail)?;
    for e in &gl.entries {
        let debits: Decimal = e.legs.iter().map(|l| l.debit).sum();
        let credits: Decimal = e.legs.iter().map(|l| l.credit).sum();
        prop_assert_eq!(debits, credits, "GL entry {} does not balance", e.entry);
    }
    prop_assert_eq!(gl.total_debits, gl.total_credits);
    out.push(to_csv(&gl.table()).map_err(fail)?);
    out.push(to_json(&gl).map_err(fail)?);
    let rec = l.reconciliation(p).map_err(fail)?;
    prop_assert!(rec.check.ok, "reconciliation check: {}", rec.check.value);
    out.push(to_csv(&rec.table()).map_err(fail)?);
    out.push(to_json(&rec).map_err(fail)?);
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn reports_of_a_closed_period_never_change(
        leases in prop::collection::vec(lease_spec(), 1..14),
        ops in prop::collection::vec(timed_op(), 0..20),
        tick in prop_oneof![Just(60_000i64), Just(600_000i64), Just(HOUR)],
    ) {
        let mut l = Ledger::new(config()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut frozen: BTreeMap<u32, (Period, Vec<Vec<u8>>)> = BTreeMap::new();
        for (at, _, s) in history(&leases, &ops, tick) {
            let input = match &s {
                Step::Fixed(i) => i.clone(),
                Step::Op(i, op) => match op_input(&l, *i, op) {
                    Some(input) => input,
                    None => continue,
                },
            };
            let r = l
                .apply(at, &input)
                .map_err(|e| TestCaseError::fail(format!("{input:?} at {at}: {e}")))?;
            l.check_invariants().map_err(|e| TestCaseError::fail(format!("after {input:?}: {e}")))?;
            let lock = l.closed_through_ms().unwrap_or(i64::MIN);
            prop_assert!(r.transfers.iter().all(|t| t.at_ms >= lock), "no transfer in closed time");
            if let Some(id) = r.closed.filter(|_| !r.replayed) {
                let c = l.closed_period(id).expect("recorded");
                let p = Period::new(c.from_ms, c.to_ms, SH).map_err(|e| TestCaseError::fail(e.to_string()))?;
                frozen.insert(id.0, (p, reports(&l, &p)?));
            }
        }
        prop_assert_eq!(frozen.len(), 2);
        for (id, (p, before)) in &frozen {
            let after = reports(&l, p)?;
            for (i, (a, b)) in after.iter().zip(before).enumerate() {
                prop_assert!(
                    a == b,
                    "report {} of closed period {} changed:\nbefore:\n{}\nafter:\n{}",
                    i, id, String::from_utf8_lossy(b), String::from_utf8_lossy(a)
                );
            }
        }
    }
}

fn any_account() -> impl Strategy<Value = Account> {
    prop_oneof![
        Just(Account::ExternalCash),
        Just(Account::PlatformFee),
        Just(Account::SlaCredits),
        (1u64..=3).prop_map(|b| Account::Buyer(AccountId(b))),
        (100u64..=101).prop_map(|s| Account::Supplier(AccountId(s))),
    ]
}

fn any_amount() -> impl Strategy<Value = Decimal> {
    prop_oneof![
        (-100i64..100_000).prop_map(|c| Decimal::new(c, 2)),
        Just(Decimal::ZERO),
        Just(Decimal::new(1, 13)),
        Just(Decimal::from(10i64.pow(15)) + Decimal::ONE),
    ]
}

/// Arbitrary close, adjustment and lease inputs at non-decreasing times.
fn any_input() -> impl Strategy<Value = (i64, Input)> {
    let kind = prop_oneof![
        (1u64..=3).prop_map(|b| AdjustmentKind::GoodwillCredit {
            buyer: AccountId(b)
        }),
        (any_account(), any_account())
            .prop_map(|(debit, credit)| AdjustmentKind::Correction { debit, credit }),
        (1u64..=3).prop_map(|b| AdjustmentKind::Refund {
            buyer: AccountId(b)
        }),
        (1u64..=3).prop_map(|b| AdjustmentKind::SlaCashOut {
            buyer: AccountId(b)
        }),
        (100u64..=101).prop_map(|s| AdjustmentKind::WriteOff {
            supplier: AccountId(s)
        }),
    ];
    let reference = prop_oneof![
        Just(None),
        Just(Some("period:1".to_string())),
        Just(Some("period:x".to_string())),
        Just(Some(" ".to_string())),
    ];
    let input = prop_oneof![
        2 => (0u8..4, 1u64..=3, any_amount()).prop_map(|(k, b, amount)| Input::Deposit {
            key: format!("k{k}"), buyer: AccountId(b), amount
        }),
        3 => (0u8..6, kind, any_amount(), prop_oneof![Just("r"), Just(""), Just("why")], reference)
            .prop_map(|(k, kind, amount, reason, reference)| Input::Adjust(Adjustment {
                key: format!("k{k}"), kind, amount, reason: reason.into(), reference
            })),
        2 => (0u8..4, -2i64..6, 1i64..4).prop_map(|(k, from, len)| Input::ClosePeriod {
            key: format!("k{k}"), from_ms: T0 + from * DAY, to_ms: T0 + (from + len) * DAY
        }),
        2 => (1u64..6, 1u64..=3, 100u64..=101, -DAY..(6 * DAY)).prop_map(|(id, b, s, start)| {
            Input::LeaseStarted(LeaseStart {
                lease: LeaseId(id), buyer: AccountId(b), supplier: AccountId(s),
                sku: "H100-80G".into(), region: "cn-east-2".into(), gpus: 2,
                price_per_gpu_hour: d("22.50"), start_ms: T0 + start,
                sla: None,
            })
        }),
        2 => (1u64..6, -DAY..(6 * DAY), 0usize..4).prop_map(|(id, end, r)| Input::LeaseEnded {
            lease: LeaseId(id), end_ms: T0 + end, reason: REASONS[r]
        }),
        1 => (1u64..6, prop::option::of(0i64..(2 * HOUR))).prop_map(|(id, x)| Input::Failover {
            lease: LeaseId(id), replacement_start_ms: x.map(|x| T0 + x),
            replacement_price: None,
        }),
        1 => (6u64..9, -DAY..(6 * DAY)).prop_map(|(id, at)| Input::DeliveryFailed {
            lease: LeaseId(id), buyer: AccountId(1), supplier: AccountId(100),
            sku: "H100-80G".into(), region: "cn-east-2".into(), gpus: 1, at_ms: T0 + at,
            sla: None,
        }),
        1 => (-DAY..(6 * DAY), 0i64..DAY).prop_map(|(from, len)| Input::ListedCapacity {
            supplier: AccountId(100), sku: "H100-80G".into(), region: "cn-east-2".into(),
            gpus: 2, from_ms: T0 + from, to_ms: T0 + from + len
        }),
        3 => (0i64..(6 * DAY)).prop_map(|t| Input::Accrue { now_ms: T0 + t }),
    ];
    (0i64..(12 * HOUR), input)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// No input panics; a refused one changes nothing; invariants (closed periods included)
    /// hold after every step.
    #[test]
    fn arbitrary_close_and_adjustment_inputs_never_panic_or_break_invariants(
        inputs in prop::collection::vec(any_input(), 1..60),
    ) {
        let mut l = Ledger::new(config()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut at = T0;
        for (dt, input) in inputs {
            at += dt;
            let before = rmp_serde::to_vec_named(&l).map_err(|e| TestCaseError::fail(e.to_string()))?;
            if l.apply(at, &input).is_err() {
                let after = rmp_serde::to_vec_named(&l).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(after == before, "refused {input:?} changed the ledger");
            }
            l.check_invariants().map_err(|e| TestCaseError::fail(format!("after {input:?}: {e}")))?;
        }
    }
}
