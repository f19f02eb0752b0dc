//! Benchmarks (issue 3): accrual over 100 000 active leases, and a monthly
//! report over 1 000 000 lease slices, each beside a naive baseline over the
//! same data (plain `Decimal` arithmetic, no ledger) so a ratio can be given.
//!
//! Run: `cargo bench -p settlement --features bench` (criterion is an optional dependency,
//! so `cargo test` does not build it).

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use rust_decimal::Decimal;
use settlement::reports::csv::to_csv;
use settlement::{AccountId, Config, EndReason, Input, LeaseId, LeaseStart, Ledger, Period};
use std::hint::black_box;
use std::time::Duration;

/// 2026-11-01T00:00:00+08:00, ms since epoch.
const NOV_1: i64 = 1_793_462_400_000;
const PRICES: [(&str, i64, &str); 4] = [
    ("H100-80G", 2250, "cn-east-2"),
    ("RTX4090-24G", 198, "cn-north-1"),
    ("A100-80G", 1140, "cn-east-2"),
    ("RTX5090-32G", 325, "cn-south-1"),
];

fn start(i: u64, start_ms: i64) -> Input {
    let (sku, cents, region) = PRICES[(i % 4) as usize];
    Input::LeaseStarted(LeaseStart {
        lease: LeaseId(i),
        buyer: AccountId(i % 10_000),
        supplier: AccountId(1_000_000 + i % 1_000),
        sku: sku.to_string(),
        region: region.to_string(),
        gpus: 1 + (i % 8) as u32,
        price_per_gpu_hour: Decimal::new(cents, 2),
        start_ms,
        sla: None,
    })
}

fn funded_ledger() -> Ledger {
    let mut l = Ledger::new(Config::default()).expect("default config");
    for b in 0..10_000u64 {
        let input = Input::Deposit {
            key: format!("d{b}"),
            buyer: AccountId(b),
            amount: Decimal::from(10_000_000),
        };
        l.apply(NOV_1, &input).expect("deposit");
    }
    l
}

fn accrual(c: &mut Criterion) {
    let mut l = funded_ledger();
    for i in 0..100_000u64 {
        l.apply(NOV_1, &start(i, NOV_1 + (i % 60_000) as i64))
            .expect("start");
    }
    let t1 = NOV_1 + 3_600_000;
    l.apply(t1, &Input::Accrue { now_ms: t1 }).expect("accrue");
    let t2 = t1 + 60_000;
    let check = l
        .clone()
        .apply(t2, &Input::Accrue { now_ms: t2 })
        .expect("accrue");
    assert_eq!(
        check.transfers.len(),
        200_000,
        "a charge and a fee per lease"
    );
    // Baseline: the same 100 000 one-minute charges as plain Decimal arithmetic.
    let hourly: Vec<Decimal> = (0..100_000u64)
        .map(|i| Decimal::new(PRICES[(i % 4) as usize].1, 2) * Decimal::from(1 + i % 8))
        .collect();

    let mut g = c.benchmark_group("accrual_100k_active_leases");
    g.sample_size(20).measurement_time(Duration::from_secs(20));
    g.bench_function("ledger_accrue_60s", |b| {
        b.iter_batched(
            || l.clone(),
            |mut l| {
                let r = l.apply(t2, &Input::Accrue { now_ms: t2 }).expect("accrue");
                black_box(r.transfers.len());
                l
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("baseline_naive_decimal_sum", |b| {
        b.iter(|| {
            let mut sum = Decimal::ZERO;
            for h in &hourly {
                sum += h * Decimal::from(60) / Decimal::from(3600);
            }
            black_box(sum)
        })
    });
    g.finish();
}

fn monthly_report(c: &mut Criterion) {
    let mut l = funded_ledger();
    // 1 000 000 leases starting in time order over 1..29 November 2026
    // (Shanghai), 1 s .. ~2 h each, many crossing local midnight, all inside
    // the month. Inputs must be in time order; any refusal is fatal.
    let n = 1_000_000u64;
    let mut slices: Vec<(Decimal, u64)> = Vec::with_capacity(n as usize);
    for i in 0..n {
        let s = NOV_1 + i as i64 * 2_505;
        let dur = 1_000 + (i as i64 * 7_919) % 7_200_000;
        l.apply(s, &start(i, s)).expect("start");
        let end = Input::LeaseEnded {
            lease: LeaseId(i),
            end_ms: s + dur,
            reason: EndReason::Released,
        };
        l.apply(s, &end).expect("end");
        let hourly = Decimal::new(PRICES[(i % 4) as usize].1, 2) * Decimal::from(1 + i % 8);
        slices.push((hourly, (dur as u64).div_ceil(1000)));
    }
    let month = Period::month(2026, 11, "Asia/Shanghai").expect("month");
    let summary = l.platform_summary(&month).expect("summary");
    assert_eq!(
        summary.total.lease_slices, n,
        "every lease is one slice of the month"
    );
    let mut g = c.benchmark_group("monthly_report_1m_lease_slices");
    g.sample_size(10).measurement_time(Duration::from_secs(30));
    g.bench_function("platform_summary", |b| {
        b.iter(|| black_box(l.platform_summary(&month).expect("summary")))
    });
    g.bench_function("trial_balance", |b| {
        b.iter(|| black_box(l.trial_balance(&month).expect("tb")))
    });
    g.bench_function("all_supplier_statements", |b| {
        b.iter(|| {
            let mut lines = 0usize;
            for s in 0..1_000u64 {
                let st = l
                    .supplier_statement(AccountId(1_000_000 + s), &month)
                    .expect("statement");
                lines += st.earnings.len();
            }
            black_box(lines)
        })
    });
    // Every supplier's payout statement for the month, rendered to CSV:
    // 1 000 suppliers x 1 000 earning lines = 1 000 000 printed lease slices.
    g.bench_function("all_supplier_statements_csv", |b| {
        b.iter(|| {
            let mut bytes = 0usize;
            for s in 0..1_000u64 {
                let st = l
                    .supplier_statement(AccountId(1_000_000 + s), &month)
                    .expect("statement");
                bytes += to_csv(&st.table()).expect("csv").len();
            }
            black_box(bytes)
        })
    });
    g.bench_function("baseline_naive_decimal_sum", |b| {
        b.iter(|| {
            let mut sum = Decimal::ZERO;
            for (hourly, secs) in &slices {
                sum += hourly * Decimal::from(*secs) / Decimal::from(3600);
            }
            black_box(sum)
        })
    });
    g.finish();
}

criterion_group!(benches, accrual, monthly_report);
criterion_main!(benches);
