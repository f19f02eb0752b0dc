//! Engine benchmark (issue 2): a seeded, realistic mixed market, per-operation latency
//! percentiles, scaling over market size, and a like-for-like comparison with the `lobster`
//! limit order book in the same run.
//!
//! Run: `cargo bench -p exchange` (optional env: `EXCHANGE_BENCH_OPS` ops per run, default
//! 1,000,000; `EXCHANGE_BENCH_RUNS` repetitions, default 5). Prints tables; medians and spread
//! (min–max) over the runs. `EXCHANGE_BENCH_WARMUP_S` (default 300) sets the untimed market
//! time before a steady-state run; every figure is given both from an empty book (timing starts
//! right after the nodes list) and at steady state (leases, resting bids and preemption victims
//! at their running levels) — the two differ, and a large market from an empty book never
//! reaches steady state within a run. `EXCHANGE_BENCH_ONLY=nodes=N` runs one market size and
//! prints its per-operation table (`EXCHANGE_BENCH_MIX=delivery` or `trust`: of the delivery
//! or trust mix below).
//!
//! Lease delivery (issue 15): the same mix with `EngineConfig::delivery` on, where simulated
//! suppliers report ready, failed or nothing for each lease provisioning, torn down for each
//! wipe and resume their held nodes, beside the old mix in alternating runs of the same seeds
//! (10,000 nodes, steady state; ratio of ops/s per run). `EXCHANGE_BENCH_ONLY=delivery` runs
//! that comparison alone, `delivery=N` at N nodes.
//!
//! Trust (issue 26): `EXCHANGE_BENCH_ONLY=trust` (or `trust=N`, default 10,000 nodes) runs the
//! delivery mix with verification on (docs/market-rules.md §12.2: a node is unlisted from its
//! first offer until its supplier reports the run; the simulated suppliers answer every
//! `VerificationStarted` with figures judged verified, degraded or failed, 80/15/5 %, and
//! resume the nodes a failed run holds) and 30 % of its bids `PlaceTrustBid` (§12.2–12.3: half
//! `verified`, a quarter `min_reliability` 0.90, a quarter both), beside the delivery mix
//! without trust (verification off, plain bids), in alternating runs of the same seeds. Done
//! means a ratio of ops/s >= 0.90. Every node of the bench is `new` to the reliability score
//! (no market has 24 lease-hours of history after minutes), so `min_reliability` bids never
//! fill: they rest until they expire or are cancelled, which is their cost in a young market.
//!
//! Attestation (issue 26): `EXCHANGE_BENCH_ONLY=attest` (or `attest=N`) registers 100,000
//! (N) nodes of 8 GPUs, attests each (docs/market-rules.md §12.1) and sends one per-GPU
//! health report per node (§12.1), printing time per command and the memory added.
//!
//! Gangs (issue 27): `EXCHANGE_BENCH_ONLY=gang` (or `gang=N`, default 10,000 nodes, with
//! 100,000 printed beside) lists N nodes of 8 GPUs in 64-node fabric domains (16 domains per
//! supplier), fills the cheapest fifth of them with single-node leases, then
//! times gang bids (docs/market-rules.md §13.2), each released whole (`ReleaseBid`, untimed)
//! before the next: 8×8 and 64×8 that fill, 65×8 that no domain holds, and 8×8 under every
//! price. Targets (issue 27): 8×8 p99 < 250 µs, 64×8 < 1 ms, infeasible < 50 µs.
//!
//! The scaling table carries a control measured in the same run: one hash-map lookup in a map
//! of as many records as the market's nodes, offers, leases and bids, which shows how much of
//! the growth in cost per operation is the machine's memory hierarchy rather than the
//! engine's work.

use exchange::state::LeaseState;
use exchange::verify::{DcgmResult, GpuFigures, VerificationFigures, VerifyConfig, VerifyOutcome};
use exchange::*;
use hdrhistogram::Histogram;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::hint::black_box;
use std::time::Instant;

/// SplitMix64: a tiny deterministic generator for the workload (the engine itself has no RNG).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const REGIONS: [&str; 8] = [
    "cn-east-1",
    "cn-east-2",
    "cn-north-1",
    "cn-north-2",
    "cn-south-1",
    "cn-west-1",
    "sg-1",
    "us-west-1",
];

/// A count from the environment (`default` when unset); exits with status 2 and a message when
/// it is set to anything but a whole number of at least `min`.
fn env_usize(name: &str, default: usize, min: usize) -> usize {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if n >= min => n,
            _ => {
                eprintln!("{name}={v:?}: expected a whole number >= {min}");
                std::process::exit(2);
            }
        },
    }
}

/// The priced SKUs of the catalog: (id, reference spot ticks, reference preemptible ticks).
fn priced_skus(catalog: &Catalog) -> Vec<(SkuId, i64, i64)> {
    catalog
        .iter()
        .filter_map(|(id, s)| {
            let spot = s.reference_spot?.ticks();
            let pre = s.reference_preemptible.map_or(spot * 6 / 10, Price::ticks);
            Some((id, spot, pre))
        })
        .collect()
}

fn price(ticks: i64) -> Price {
    Price::from_ticks(ticks.max(1)).unwrap()
}

/// Op types of the mixed market, for per-type latency. The four from `report_ready` are the
/// delivery mix's lifecycle commands (docs/market-rules.md §11), which the old mix never sends;
/// the last two only the trust mix sends (§12.2–12.3).
const OPS: [&str; 14] = [
    "heartbeat",
    "amend_offer",
    "bid_ioc_spot",
    "bid_ioc_preemptible",
    "bid_gtc",
    "cancel_bid",
    "release_lease",
    "tick",
    "report_ready",
    "report_failed",
    "report_torn_down",
    "resume_node",
    "report_verification",
    "bid_trust",
];
/// Index in [`OPS`] of the first lifecycle command.
const FIRST_LIFECYCLE_OP: usize = 8;
/// Index in [`OPS`] of `ReportVerification` (trust mix).
const REPORT_VERIFICATION_OP: usize = 12;
/// Index in [`OPS`] of `PlaceTrustBid` (trust mix).
const BID_TRUST_OP: usize = 13;

/// Which market the bench runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mix {
    /// The mixed market of issue 2.
    Old,
    /// The old mix with lease delivery on and the suppliers' lifecycle commands (issue 15).
    Delivery,
    /// The delivery mix with verification on, the suppliers reporting each run, and trust
    /// bids (issue 26).
    Trust,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::Old => "old",
            Mix::Delivery => "delivery",
            Mix::Trust => "trust",
        }
    }
}

/// Of the verification runs the suppliers report, the percentage whose figures are judged
/// degraded (one GPU's BF16 at 80 % of the reference) and failed (at 50 %: the node is held
/// and its supplier resumes it, which starts a new run); the rest report the reference figures
/// and are verified.
const VERIFY_DEGRADED_PERCENT: u64 = 15;
const VERIFY_FAILED_PERCENT: u64 = 5;
/// Of the trust mix's bids, the percentage sent as `PlaceTrustBid`.
const TRUST_BID_PERCENT: u64 = 30;

/// What the trust mix's verification did, counted from the engine's events.
const VERIFICATION: [&str; 5] = [
    "runs started",
    "verified",
    "degraded",
    "failed",
    "timed out",
];

/// A simulated supplier's report in the delivery mix (issue 15), due at a market time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Report {
    Ready(AccountId, LeaseId),
    Failed(AccountId, LeaseId),
    TornDown(AccountId, LeaseId),
    Resume(AccountId, NodeId),
    /// A verification run's figures, judged (by design) 0 verified, 1 degraded, 2 failed.
    Verify(AccountId, LeaseId, u8),
}

/// Of the leases whose provisioning starts, how many per 1,000 their supplier reports failed,
/// and how many it never reports at all (they time out at the provisioning deadline); the
/// rest it reports ready. A failed or silent lease's node is held (and resumed later).
const FAILED_PER_MILLE: u64 = 10;
const SILENT_PER_MILLE: u64 = 20;

/// What the delivery mix's lifecycle did, counted from the engine's events.
const LIFECYCLE: [&str; 10] = [
    "provisioning started",
    "ready",
    "reported failed",
    "provisioning timed out",
    "wiping",
    "wiped",
    "teardown overdue",
    "nodes held",
    "nodes resumed",
    "lifecycle commands rejected",
];

/// The simulated suppliers of the delivery mix: each watches the engine's events for its
/// leases and nodes, as a supplier agent watches its private feed, and reports a little later
/// in market time — ready 1–10 s after `ProvisionStarted` (or failed, or never: see
/// [`FAILED_PER_MILLE`]), torn down 1–10 s after `LeaseWiping`, and resumes a held node
/// 10–30 s after `NodeHeld`. A separate generator, so the delivery decisions do not shift the
/// mix's own draws.
struct Suppliers {
    rng: Rng,
    /// (due ms, sequence, report): earliest first, in order of scheduling at equal times.
    due: BinaryHeap<Reverse<(i64, u64, Report)>>,
    scheduled: u64,
    /// Counts, as [`LIFECYCLE`].
    counts: [u64; LIFECYCLE.len()],
    /// The trust mix's draws of verification outcomes (separate, so the delivery decisions
    /// are drawn alike with and without verification).
    verify_rng: Rng,
    /// Counts, as [`VERIFICATION`].
    verify: [u64; VERIFICATION.len()],
}

impl Suppliers {
    fn schedule(&mut self, now: i64, min_s: u64, max_s: u64, report: Report) {
        let delay_ms = 1000 * min_s + self.rng.below(1000 * (max_s - min_s + 1));
        self.scheduled += 1;
        self.due
            .push(Reverse((now + delay_ms as i64, self.scheduled, report)));
    }

    /// Takes note of one command's events: schedules the reports they call for and counts.
    fn observe(&mut self, cmd: &Command, events: &[Event], now: i64) {
        let lifecycle_cmd = matches!(
            cmd,
            Command::ReportReady { .. }
                | Command::ReportFailed { .. }
                | Command::ReportTornDown { .. }
                | Command::ResumeNode { .. }
                | Command::ReportVerification { .. }
        );
        for e in events {
            match *e {
                Event::ProvisionStarted {
                    lease, supplier, ..
                } => {
                    self.counts[0] += 1;
                    let roll = self.rng.below(1000);
                    if roll < SILENT_PER_MILLE {
                        continue;
                    }
                    let report = if roll < SILENT_PER_MILLE + FAILED_PER_MILLE {
                        Report::Failed(supplier, lease)
                    } else {
                        Report::Ready(supplier, lease)
                    };
                    self.schedule(now, 1, 10, report);
                }
                Event::LeaseReady { .. } => self.counts[1] += 1,
                Event::LeaseEnded {
                    reason: EndReason::NotDelivered,
                    ..
                } => {
                    if matches!(cmd, Command::ReportFailed { .. }) {
                        self.counts[2] += 1
                    } else {
                        self.counts[3] += 1
                    }
                }
                Event::LeaseWiping {
                    lease, supplier, ..
                } => {
                    self.counts[4] += 1;
                    self.schedule(now, 1, 10, Report::TornDown(supplier, lease));
                }
                Event::LeaseWiped { .. } => self.counts[5] += 1,
                Event::TeardownOverdue { .. } => self.counts[6] += 1,
                Event::NodeHeld { node, supplier, .. } => {
                    self.counts[7] += 1;
                    self.schedule(now, 10, 30, Report::Resume(supplier, node));
                }
                Event::NodeResumed { .. } => self.counts[8] += 1,
                Event::VerificationStarted {
                    lease, supplier, ..
                } => {
                    self.verify[0] += 1;
                    let roll = self.verify_rng.below(100);
                    let outcome = if roll < VERIFY_FAILED_PERCENT {
                        2
                    } else if roll < VERIFY_FAILED_PERCENT + VERIFY_DEGRADED_PERCENT {
                        1
                    } else {
                        0
                    };
                    let delay_ms = 1000 + self.verify_rng.below(9000);
                    self.scheduled += 1;
                    self.due.push(Reverse((
                        now + delay_ms as i64,
                        self.scheduled,
                        Report::Verify(supplier, lease, outcome),
                    )));
                }
                Event::VerificationEnded { judgment, .. } => {
                    self.verify[match judgment.outcome {
                        VerifyOutcome::Verified => 1,
                        VerifyOutcome::Degraded => 2,
                        _ if judgment.decided_by == Some(verify::Figure::Timeout) => 4,
                        VerifyOutcome::Failed => 3,
                    }] += 1
                }
                Event::Rejected { .. } if lifecycle_cmd => self.counts[9] += 1,
                _ => {}
            }
        }
    }
}

struct Market {
    engine: Engine,
    rng: Rng,
    seq: u64,
    now: i64,
    start: i64,
    now_us: u64,
    skus: Vec<(SkuId, i64, i64)>,
    nodes: Vec<(AccountId, NodeId, SkuId, u32)>,
    offers: Vec<Option<(OfferId, OfferTerms)>>,
    /// Nodes currently "failed" (skipping heartbeats) until the given time.
    failed_until: BTreeMap<usize, i64>,
    next_hb: usize,
    resting: Vec<(AccountId, BidId)>,
    leases: Vec<(AccountId, LeaseId)>,
    /// Fills (leases created) so far.
    fills: u64,
    out: Output,
    /// The delivery mix's suppliers (`EngineConfig::delivery` on); `None`: the old mix.
    suppliers: Option<Suppliers>,
    /// Lifecycle commands applied so far, and the ns spent in them.
    lifecycle_ops: u64,
    lifecycle_ns: u64,
    /// The trust mix (verification on, trust bids).
    trust: bool,
    /// The trust mix's draws of which bids carry trust (separate, so the mix's own draws are
    /// alike with and without trust).
    trust_rng: Rng,
    /// Trust bids placed, and the fills they made when placed.
    trust_bids: u64,
    trust_fills: u64,
    /// The share of bids that carry trust, percent, and the trust of each, by a draw of 0..4
    /// ([`trust_bid_kinds`]).
    trust_percent: u64,
    trust_kinds: [TrustConstraints; 4],
}

/// The trust bids of the trust mix: [`TRUST_BID_PERCENT`] of the bids, half `verified`, a
/// quarter `min_reliability` 0.90, a quarter both. For finding where the trust mix's cost is,
/// `EXCHANGE_BENCH_TRUST_BIDS` = `verified` (every trust bid `verified` alone), `reliability`
/// (`min_reliability` alone) or `none` (no trust bids: verification alone) changes that.
fn trust_bid_kinds() -> (u64, [TrustConstraints; 4]) {
    let t = |verified, rel: bool| TrustConstraints {
        verified,
        min_reliability_bp: rel.then_some(9000),
        min_sla: None,
    };
    match std::env::var("EXCHANGE_BENCH_TRUST_BIDS").as_deref() {
        Err(_) | Ok("all") => (
            TRUST_BID_PERCENT,
            [
                t(true, false),
                t(true, false),
                t(false, true),
                t(true, true),
            ],
        ),
        Ok("verified") => (TRUST_BID_PERCENT, [t(true, false); 4]),
        Ok("reliability") => (TRUST_BID_PERCENT, [t(false, true); 4]),
        Ok("none") => (0, [t(false, false); 4]),
        Ok(v) => {
            eprintln!(
                "EXCHANGE_BENCH_TRUST_BIDS={v:?}: expected all, verified, reliability or none"
            );
            std::process::exit(2);
        }
    }
}

impl Market {
    fn apply(&mut self, cmd: &Command) -> u64 {
        self.seq += 1;
        let meta = Meta {
            seq: self.seq,
            timestamp_ms: self.now,
        };
        let t0 = Instant::now();
        self.engine.apply_into(cmd, meta, &mut self.out);
        let ns = t0.elapsed().as_nanos() as u64;
        for e in &self.out.events {
            match (e, cmd) {
                (Event::Fill { lease, buyer, .. }, _) => {
                    self.fills += 1;
                    if matches!(cmd, Command::PlaceTrustBid { .. }) {
                        self.trust_fills += 1;
                    }
                    self.leases.push((*buyer, *lease))
                }
                (
                    Event::BidRested { bid, .. },
                    Command::PlaceBid { account, .. } | Command::PlaceTrustBid { account, .. },
                ) => self.resting.push((*account, *bid)),
                _ => {}
            }
        }
        if let Some(s) = &mut self.suppliers {
            s.observe(cmd, &self.out.events, self.now);
        }
        ns
    }

    /// The next supplier report due by now, as a command with its op type; reports whose
    /// subject has moved on (the lease ended, the wipe or hold is over: what the supplier's
    /// feed would have told it) are dropped, outside the timed section.
    fn due_report(&mut self) -> Option<(usize, Command)> {
        let s = self.suppliers.as_mut()?;
        while let Some(&Reverse((due, _, report))) = s.due.peek() {
            if due > self.now {
                return None;
            }
            s.due.pop();
            let provisioning = |l: LeaseId| {
                self.engine.lease(l).is_some_and(|l| {
                    l.state == LeaseState::Provisioning && l.provision_deadline_ms.is_some()
                })
            };
            match report {
                Report::Ready(account, lease) if provisioning(lease) => {
                    return Some((8, Command::ReportReady { account, lease }));
                }
                Report::Failed(account, lease) if provisioning(lease) => {
                    return Some((9, Command::ReportFailed { account, lease }));
                }
                Report::TornDown(account, lease) if self.engine.wipe(lease).is_some() => {
                    return Some((10, Command::ReportTornDown { account, lease }));
                }
                Report::Resume(account, node)
                    if self.engine.node(node).is_some_and(|n| n.held.is_some()) =>
                {
                    return Some((11, Command::ResumeNode { account, node }));
                }
                Report::Verify(account, lease, outcome) => {
                    if let Some(figures) = Self::verification_figures(&self.engine, lease, outcome)
                    {
                        return Some((
                            REPORT_VERIFICATION_OP,
                            Command::ReportVerification {
                                account,
                                lease,
                                figures,
                            },
                        ));
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// The figures a supplier reports for the verification run `lease` if it is still under
    /// way: the SKU's reference figures on every GPU of the run, but one GPU's BF16 at 80 %
    /// (`outcome` 1: degraded) or 50 % (2: failed) of it.
    fn verification_figures(
        engine: &Engine,
        lease: LeaseId,
        outcome: u8,
    ) -> Option<VerificationFigures> {
        let node = engine.verification_node(lease)?;
        let mask = engine.verification(node)?.run?.gpu_mask;
        let sku = engine.catalog().get(engine.node(node)?.sku)?;
        let r = verify::reference_for(&sku.id)?;
        let first = mask.trailing_zeros();
        let gpus = (0..32)
            .filter(|i| mask & (1 << i) != 0)
            .map(|index| GpuFigures {
                index,
                bf16_tflops_x10: Some(match outcome {
                    1 if index == first => r.bf16_tflops_x10 * 8 / 10,
                    2 if index == first => r.bf16_tflops_x10 / 2,
                    _ => r.bf16_tflops_x10,
                }),
                mem_bw_gbps: Some(r.mem_bw_gbps),
                faults: 0,
            })
            .collect();
        Some(VerificationFigures {
            gpus,
            allreduce_busbw_x10: r.allreduce8_busbw_x10,
            dcgm: Some(DcgmResult::Pass),
        })
    }

    /// A random still-live resting bid (dropping dead entries, outside the timed section).
    fn pick_resting(&mut self) -> Option<(AccountId, BidId)> {
        while !self.resting.is_empty() {
            let i = self.rng.below(self.resting.len() as u64) as usize;
            let (a, b) = self.resting.swap_remove(i);
            if self.engine.bid(b).is_some() {
                return Some((a, b));
            }
        }
        None
    }

    /// A random still-live lease.
    fn pick_lease(&mut self) -> Option<(AccountId, LeaseId)> {
        while !self.leases.is_empty() {
            let i = self.rng.below(self.leases.len() as u64) as usize;
            let (a, l) = self.leases.swap_remove(i);
            if self.engine.lease(l).is_some() {
                return Some((a, l));
            }
        }
        None
    }

    /// Registers `n` nodes across the priced SKUs and 8 regions and posts an offer on each;
    /// in the delivery and trust mixes the engine runs lease delivery and the suppliers report,
    /// in the trust mix with verification on (the first offer starts each node's run).
    fn new(n_nodes: usize, seed: u64, mix: Mix) -> Market {
        let catalog = Catalog::builtin();
        let skus = priced_skus(&catalog);
        let delivery = mix != Mix::Old;
        let mut engine = Engine::new(
            EngineConfig {
                delivery,
                ..EngineConfig::default()
            },
            catalog,
        );
        if mix == Mix::Trust {
            engine.set_verification(Some(VerifyConfig::default()));
        }
        let mut m = Market {
            engine,
            rng: Rng(seed),
            seq: 0,
            now: 1_767_225_600_000, // 2026-01-01T00:00:00Z
            start: 1_767_225_600_000,
            now_us: 0,
            skus,
            nodes: Vec::new(),
            offers: Vec::new(),
            failed_until: BTreeMap::new(),
            next_hb: 0,
            resting: Vec::new(),
            leases: Vec::new(),
            fills: 0,
            out: Output::default(),
            suppliers: delivery.then(|| Suppliers {
                rng: Rng(seed ^ 0xDE11_7E20_0000_0015),
                due: BinaryHeap::new(),
                scheduled: 0,
                counts: [0; LIFECYCLE.len()],
                verify_rng: Rng(seed ^ 0x7E57_0000_0000_0026),
                verify: [0; VERIFICATION.len()],
            }),
            lifecycle_ops: 0,
            lifecycle_ns: 0,
            trust: mix == Mix::Trust,
            trust_rng: Rng(seed ^ 0x7E57_B1D5_0000_0026),
            trust_bids: 0,
            trust_fills: 0,
            trust_percent: 0,
            trust_kinds: [TrustConstraints::default(); 4],
        };
        if mix == Mix::Trust {
            (m.trust_percent, m.trust_kinds) = trust_bid_kinds();
        }
        let suppliers = (n_nodes / 50).max(4) as u64;
        for i in 0..n_nodes {
            let (sku, spot, pre) = m.skus[m.rng.below(m.skus.len() as u64) as usize];
            let supplier = AccountId(1 + m.rng.below(suppliers));
            let gpus = [1, 2, 4, 8, 8, 8][m.rng.below(6) as usize];
            let region = REGIONS[m.rng.below(8) as usize];
            let interconnect = [
                Interconnect::Pcie,
                Interconnect::Roce,
                Interconnect::Infiniband,
            ][m.rng.below(3) as usize];
            m.apply(&Command::RegisterNode {
                account: supplier,
                spec: NodeSpec {
                    name: format!("node-{i}"),
                    sku,
                    gpus,
                    region: region.to_string(),
                    jurisdiction: Jurisdiction(if region.starts_with("cn") {
                        *b"CN"
                    } else {
                        *b"SG"
                    }),
                    interconnect,
                    nvlink: gpus == 8,
                    fabric: None,
                },
            });
            let node = match m.out.events.first() {
                Some(Event::NodeRegistered { node, .. }) => *node,
                other => panic!("registration failed: {other:?}"),
            };
            m.nodes.push((supplier, node, sku, gpus));
            let terms = m.terms(spot, pre, gpus);
            m.apply(&Command::PostOffer {
                account: supplier,
                node,
                terms,
            });
            let offer = match m
                .out
                .events
                .iter()
                .find(|e| matches!(e, Event::OfferPosted { .. }))
            {
                Some(Event::OfferPosted { offer, .. }) => *offer,
                other => panic!("offer failed: {other:?}"),
            };
            m.offers.push(Some((offer, terms)));
        }
        m
    }

    fn terms(&mut self, spot: i64, pre: i64, gpus: u32) -> OfferTerms {
        let spread = 90 + self.rng.below(30) as i64; // 90%..120% of the reference price
        OfferTerms {
            gpus,
            spot_price: price(spot * spread / 100),
            preemptible_price: Some(price(pre * spread / 100)),
            min_lease_s: 0,
            max_lease_s: 7 * 24 * 3600,
            available_until_ms: self.now + 30 * 24 * 3600 * 1000,
            notice_s: [0, 30, 120][self.rng.below(3) as usize],
            provision_s: 180,
        }
    }

    /// One random operation of the mix; returns (op type index, ns spent in `apply`). In the
    /// delivery mix a supplier report due by now comes first, at the same market time: the
    /// lifecycle commands are added to the old mix, which runs as before in market time.
    fn step(&mut self) -> (usize, u64) {
        if let Some((kind, cmd)) = self.due_report() {
            let ns = self.apply(&cmd);
            self.lifecycle_ns += ns;
            self.lifecycle_ops += 1;
            return (kind, ns);
        }
        // Market time: heartbeats are 40% of ops, round robin, so advancing 2 s / nodes per op
        // gives every node a heartbeat every 5 s of market time (timeout 15 s).
        self.now_us += 2_000_000 / self.nodes.len() as u64;
        self.now = self.start + (self.now_us / 1000) as i64;
        let roll = self.rng.below(1000);
        if roll < 400 {
            // Heartbeats, round robin: every node about every (nodes / 400) ms × … of market time.
            let i = self.next_hb;
            self.next_hb = (self.next_hb + 1) % self.nodes.len();
            let (account, node, _, gpus) = self.nodes[i];
            if let Some(&until) = self.failed_until.get(&i) {
                if self.now < until {
                    return (7, self.apply(&Command::Tick));
                }
                self.failed_until.remove(&i);
            } else if self.rng.below(2000) == 0 {
                self.failed_until.insert(i, self.now + 20_000);
            }
            let healthy = if self.rng.below(500) == 0 {
                gpus.saturating_sub(1)
            } else {
                gpus
            };
            return (
                0,
                self.apply(&Command::Heartbeat {
                    account,
                    node,
                    healthy_gpus: healthy,
                }),
            );
        }
        if roll < 450 {
            let i = self.rng.below(self.nodes.len() as u64) as usize;
            let (account, _, sku, gpus) = self.nodes[i];
            if let Some((offer, _)) = self.offers[i] {
                let (_, spot, pre) = *self.skus.iter().find(|s| s.0 == sku).unwrap();
                let terms = self.terms(spot, pre, gpus);
                self.offers[i] = Some((offer, terms));
                return (
                    1,
                    self.apply(&Command::AmendOffer {
                        account,
                        offer,
                        terms,
                    }),
                );
            }
        }
        if roll < 850 {
            let (sku, spot, pre) = self.skus[self.rng.below(self.skus.len() as u64) as usize];
            let preemptible = self.rng.chance(30);
            let gtc = self.rng.chance(40);
            let gpus = [1, 1, 1, 2, 2, 4, 8, 8][self.rng.below(8) as usize];
            let reference = if preemptible { pre } else { spot };
            let limit = price(reference * (85 + self.rng.below(35) as i64) / 100);
            let buyer = AccountId(1_000_000 + self.rng.below(500));
            let constraints = if self.rng.chance(20) {
                Constraints {
                    regions: vec![REGIONS[self.rng.below(8) as usize].to_string()],
                    ..Constraints::default()
                }
            } else {
                Constraints::default()
            };
            let bid = BidSpec {
                client_order_id: format!("b{}", self.seq),
                sku,
                gpus,
                limit,
                kind: if preemptible {
                    LeaseKind::Preemptible
                } else {
                    LeaseKind::Spot
                },
                placement: if gpus == 8 || self.rng.chance(50) {
                    Placement::SingleNode
                } else {
                    Placement::Spread
                },
                constraints,
                duration_s: Some(10 + self.rng.below(290)),
                tif: if gtc {
                    TimeInForce::Gtc {
                        expires_at_ms: Some(self.now + 120_000),
                    }
                } else {
                    TimeInForce::Ioc
                },
                min_gpus: None,
            };
            if self.trust && self.trust_rng.chance(self.trust_percent) {
                let trust = self.trust_kinds[self.trust_rng.below(4) as usize];
                self.trust_bids += 1;
                return (
                    BID_TRUST_OP,
                    self.apply(&Command::PlaceTrustBid {
                        account: buyer,
                        bid,
                        trust,
                    }),
                );
            }
            let kind = if gtc {
                4
            } else if preemptible {
                3
            } else {
                2
            };
            return (
                kind,
                self.apply(&Command::PlaceBid {
                    account: buyer,
                    bid,
                }),
            );
        }
        if roll < 900
            && let Some((account, bid)) = self.pick_resting()
        {
            return (5, self.apply(&Command::CancelBid { account, bid }));
        }
        if (900..980).contains(&roll)
            && let Some((account, lease)) = self.pick_lease()
        {
            return (6, self.apply(&Command::ReleaseLease { account, lease }));
        }
        (7, self.apply(&Command::Tick))
    }
}

struct RunResult {
    ops_per_s: f64,
    hist: Vec<Histogram<u64>>,
    /// Records in the engine's state at the end: nodes, offers, live leases, resting bids.
    records: usize,
    /// Fills per timed operation: how much trading the mix makes at this size (more fills
    /// mean more work per operation for the same algorithm).
    fills_per_op: f64,
    /// The timed operations that were lifecycle commands (delivery mix; 0 in the old mix).
    lifecycle_ops: u64,
    /// ops/s of the timed operations other than lifecycle commands: the old mix's operations,
    /// each with whatever delivery adds to it.
    other_ops_per_s: f64,
    /// What the lifecycle did in the timed operations, as [`LIFECYCLE`].
    lifecycle: [u64; LIFECYCLE.len()],
    /// Wipes under way at the end.
    wipes: usize,
    /// Bids resting at the end.
    bids: usize,
    /// What verification did over the whole run (listing, warm-up and timed operations), and
    /// in the timed operations alone, as [`VERIFICATION`].
    verification: [u64; VERIFICATION.len()],
    verification_timed: [u64; VERIFICATION.len()],
    /// Trust bids placed in the timed operations, and the fills they made when placed.
    trust_bids: u64,
    trust_fills: u64,
    /// Nodes by verification status at the end: verified, degraded, failed, verifying,
    /// unverified (stale cannot happen within a run).
    statuses: [usize; 5],
}

/// One run of `ops` timed operations on a market of `nodes` nodes, after `warmup_s` seconds of
/// market time run untimed (0: timing starts on the freshly listed, empty-book market); with
/// `mix`.
fn run_mixed(nodes: usize, ops: usize, seed: u64, warmup_s: u64, mix: Mix) -> RunResult {
    run_market(nodes, ops, seed, warmup_s, mix).0
}

/// [`run_mixed`], also returning the market at the end.
fn run_market(nodes: usize, ops: usize, seed: u64, warmup_s: u64, mix: Mix) -> (RunResult, Market) {
    let mut m = Market::new(nodes, seed, mix);
    let warm_until = m.now + warmup_s as i64 * 1000;
    while m.now < warm_until {
        m.step();
    }
    let mut hist: Vec<Histogram<u64>> = OPS
        .iter()
        .map(|_| Histogram::new_with_bounds(1, 1_000_000_000, 3).unwrap())
        .collect();
    let fills_before = m.fills;
    let (lifecycle_ops, lifecycle_ns) = (m.lifecycle_ops, m.lifecycle_ns);
    let lifecycle_before = m.suppliers.as_ref().map(|s| s.counts);
    let verify_before = m
        .suppliers
        .as_ref()
        .map_or([0; VERIFICATION.len()], |s| s.verify);
    let (trust_bids, trust_fills) = (m.trust_bids, m.trust_fills);
    let total_ns = if warmup_s == 0 {
        timed_ops(&mut m, ops, &mut hist)
    } else {
        timed_ops_at_steady_state(&mut m, ops, &mut hist)
    };
    black_box(m.engine.state_hash());
    let e = &m.engine;
    let lifecycle_ops = m.lifecycle_ops - lifecycle_ops;
    let lifecycle_ns = m.lifecycle_ns - lifecycle_ns;
    let mut lifecycle = [0; LIFECYCLE.len()];
    if let (Some(s), Some(before)) = (&m.suppliers, lifecycle_before) {
        for ((l, now), before) in lifecycle.iter_mut().zip(s.counts).zip(before) {
            *l = now - before;
        }
    }
    let result = RunResult {
        ops_per_s: ops as f64 / (total_ns as f64 / 1e9),
        hist,
        records: e.nodes().count() + e.offers().count() + e.leases().count() + e.bids().count(),
        fills_per_op: (m.fills - fills_before) as f64 / ops as f64,
        lifecycle_ops,
        other_ops_per_s: (ops as u64 - lifecycle_ops) as f64
            / ((total_ns - lifecycle_ns) as f64 / 1e9),
        lifecycle,
        wipes: e.wipes().count(),
        bids: e.bids().count(),
        verification: m
            .suppliers
            .as_ref()
            .map_or([0; VERIFICATION.len()], |s| s.verify),
        verification_timed: m.suppliers.as_ref().map_or([0; VERIFICATION.len()], |s| {
            std::array::from_fn(|i| s.verify[i] - verify_before[i])
        }),
        trust_bids: m.trust_bids - trust_bids,
        trust_fills: m.trust_fills - trust_fills,
        statuses: if m.trust {
            let mut st = [0; 5];
            for n in e.nodes() {
                st[match e.verify_status(n.id) {
                    VerifyStatus::Verified => 0,
                    VerifyStatus::Degraded => 1,
                    VerifyStatus::Failed => 2,
                    VerifyStatus::Verifying => 3,
                    _ => 4,
                }] += 1;
            }
            st
        } else {
            [0; 5]
        },
    };
    (result, m)
}

/// The timed part of a run: `ops` steps of the market, each recorded in `hist` by kind;
/// returns the total ns spent inside the engine. Not inlined, so that an instruction counter
/// (callgrind's `--toggle-collect`) can count exactly these steps.
#[inline(never)]
fn timed_ops(m: &mut Market, ops: usize, hist: &mut [Histogram<u64>]) -> u64 {
    let mut total_ns = 0u64;
    for _ in 0..ops {
        let (kind, ns) = m.step();
        total_ns += ns;
        hist[kind].saturating_record(ns.max(1));
    }
    total_ns
}

/// [`timed_ops`] after a warm-up: a separate, not inlined function so that
/// `valgrind --tool=callgrind --toggle-collect=engine::timed_ops_at_steady_state` counts the
/// steady-state run alone (exchange/benches/instructions.sh).
#[inline(never)]
fn timed_ops_at_steady_state(m: &mut Market, ops: usize, hist: &mut [Histogram<u64>]) -> u64 {
    timed_ops(m, ops, hist)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The equivalent single-SKU stream: offers of 8 GPUs (asks of 8) and 1-GPU GTC limit bids
/// (bids of 1) around one price, plus cancels of resting bids. Returns (ours ops/s, lobster
/// ops/s).
fn run_lobster_comparison(ops: usize, seed: u64) -> (f64, f64) {
    #[derive(Clone, Copy)]
    enum Op {
        Offer(u32, i64),
        Bid(u64, i64),
        Cancel(u64),
    }
    let mut rng = Rng(seed);
    let mut stream = Vec::with_capacity(ops);
    let mut bid_ids = Vec::new();
    let mut offers = 0u32;
    for i in 0..ops as u64 {
        let roll = rng.below(100);
        let px = 225_000 + rng.below(2_000) as i64 - 1_000;
        if roll < 20 {
            stream.push(Op::Offer(offers, px));
            offers += 1;
        } else if roll < 90 || bid_ids.is_empty() {
            stream.push(Op::Bid(i, px));
            bid_ids.push(i);
        } else {
            let j = rng.below(bid_ids.len() as u64) as usize;
            stream.push(Op::Cancel(bid_ids.swap_remove(j)));
        }
    }
    // Ours: nodes registered up front (not timed), one per offer.
    let catalog = Catalog::builtin();
    let sku = catalog.lookup("H100-80G").unwrap();
    let mut e = Engine::new(EngineConfig::default(), catalog);
    let supplier = AccountId(1);
    let buyer = AccountId(2);
    let mut seq = 0u64;
    let now = 1_767_225_600_000i64;
    let mut nodes = Vec::with_capacity(offers as usize);
    for i in 0..offers {
        seq += 1;
        let out = e.apply(
            &Command::RegisterNode {
                account: supplier,
                spec: NodeSpec {
                    name: format!("n{i}"),
                    sku,
                    gpus: 8,
                    region: "cn-east-2".into(),
                    jurisdiction: Jurisdiction(*b"CN"),
                    interconnect: Interconnect::Infiniband,
                    nvlink: true,
                    fabric: None,
                },
            },
            Meta {
                seq,
                timestamp_ms: now,
            },
        );
        match out.events[0] {
            Event::NodeRegistered { node, .. } => nodes.push(node),
            ref other => panic!("{other:?}"),
        }
    }
    // Pre-build commands so only apply is timed; bid ids are derived from the sequence number.
    let base_seq = seq;
    let cmds: Vec<Command> = stream
        .iter()
        .enumerate()
        .map(|(i, op)| match *op {
            Op::Offer(n, px) => Command::PostOffer {
                account: supplier,
                node: nodes[n as usize],
                terms: OfferTerms {
                    gpus: 8,
                    spot_price: price(px),
                    preemptible_price: None,
                    min_lease_s: 0,
                    max_lease_s: 86_400,
                    available_until_ms: now + 86_400_000,
                    notice_s: 0,
                    provision_s: 180,
                },
            },
            Op::Bid(_, px) => Command::PlaceBid {
                account: buyer,
                bid: BidSpec {
                    client_order_id: format!("c{i}"),
                    sku,
                    gpus: 1,
                    limit: price(px),
                    kind: LeaseKind::Spot,
                    placement: Placement::SingleNode,
                    constraints: Constraints::default(),
                    duration_s: None,
                    tif: TimeInForce::Gtc {
                        expires_at_ms: None,
                    },
                    min_gpus: None,
                },
            },
            Op::Cancel(j) => Command::CancelBid {
                account: buyer,
                bid: BidId((base_seq + 1 + j) << 20),
            },
        })
        .collect();
    let mut out = Output::default();
    let t0 = Instant::now();
    for (i, cmd) in cmds.iter().enumerate() {
        e.apply_into(
            cmd,
            Meta {
                seq: base_seq + 1 + i as u64,
                timestamp_ms: now,
            },
            &mut out,
        );
        black_box(&out);
    }
    let ours = ops as f64 / t0.elapsed().as_secs_f64();

    let lob_orders: Vec<lobster::OrderType> = stream
        .iter()
        .map(|op| match *op {
            Op::Offer(n, px) => lobster::OrderType::Limit {
                id: 1_000_000_000 + u128::from(n),
                side: lobster::Side::Ask,
                qty: 8,
                price: px as u64,
            },
            Op::Bid(i, px) => lobster::OrderType::Limit {
                id: u128::from(i),
                side: lobster::Side::Bid,
                qty: 1,
                price: px as u64,
            },
            Op::Cancel(j) => lobster::OrderType::Cancel { id: u128::from(j) },
        })
        .collect();
    let mut ob = lobster::OrderBook::default();
    let t0 = Instant::now();
    for o in lob_orders {
        black_box(ob.execute(o));
    }
    let lob = ops as f64 / t0.elapsed().as_secs_f64();
    (ours, lob)
}

/// Market seconds run untimed before a steady-state run: longer than the longest lease of the
/// mix (300 s) and a GTC bid's expiry (120 s), so leases, resting bids and victims have reached
/// their running levels (a market of N nodes sees N/2 operations per market second).
const STEADY_WARMUP_S: u64 = 300;

fn main() {
    // `cargo bench` passes `--bench`; anything else (`cargo test --benches` passes nothing) is a
    // quick smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let ops = if quick {
        20_000
    } else {
        env_usize("EXCHANGE_BENCH_OPS", 1_000_000, 1)
    };
    let runs = if quick {
        1
    } else {
        env_usize("EXCHANGE_BENCH_RUNS", 5, 1)
    };
    let warmup = if quick {
        0
    } else {
        env_usize("EXCHANGE_BENCH_WARMUP_S", STEADY_WARMUP_S as usize, 0) as u64
    };

    let only = std::env::var("EXCHANGE_BENCH_ONLY").unwrap_or_default();
    let nodes_only = only.strip_prefix("nodes=").map(str::parse::<usize>);
    let delivery_only = match only.as_str() {
        "delivery" => Some(Ok(DELIVERY_NODES)),
        _ => only.strip_prefix("delivery=").map(str::parse::<usize>),
    };
    let trust_only = match only.as_str() {
        "trust" => Some(Ok(TRUST_NODES)),
        _ => only.strip_prefix("trust=").map(str::parse::<usize>),
    };
    let attest_only = match only.as_str() {
        "attest" => Some(Ok(ATTEST_NODES)),
        _ => only.strip_prefix("attest=").map(str::parse::<usize>),
    };
    if let Some(Ok(n)) = attest_only
        && n > 0
    {
        attest_table(n);
        return;
    }
    let gang_only = match only.as_str() {
        "gang" => Some(Ok(GANG_NODES)),
        _ => only.strip_prefix("gang=").map(str::parse::<usize>),
    };
    if let Some(Ok(n)) = gang_only
        && n > 0
    {
        let iters = if quick { 50 } else { 2_000 };
        gang_table(n, iters);
        if only == "gang" && !quick {
            gang_table(100_000, iters / 4);
        }
        return;
    }
    if !(only.is_empty()
        || only == "mixed"
        || only == "lobster"
        || matches!(nodes_only, Some(Ok(n)) if n > 0)
        || matches!(delivery_only, Some(Ok(n)) if n > 0)
        || matches!(trust_only, Some(Ok(n)) if n > 0))
    {
        eprintln!(
            "EXCHANGE_BENCH_ONLY={only:?}: expected mixed, lobster, delivery, delivery=N, trust, trust=N, attest, attest=N, gang, gang=N or nodes=N (N a node count > 0)"
        );
        std::process::exit(2);
    }
    if only.is_empty() || only == "mixed" {
        mixed_tables(ops, runs, warmup);
    }
    if only.is_empty() || delivery_only.is_some() {
        let nodes = match delivery_only {
            Some(Ok(n)) => n,
            _ => DELIVERY_NODES,
        };
        delivery_table(nodes, ops, runs, warmup);
        if quick {
            delivery_coverage(Mix::Delivery);
        }
    }
    if only.is_empty() || trust_only.is_some() {
        let nodes = match trust_only {
            Some(Ok(n)) => n,
            _ => TRUST_NODES,
        };
        trust_table(nodes, ops, runs, warmup);
        if quick {
            delivery_coverage(Mix::Trust);
        }
    }
    if let Some(Ok(n)) = nodes_only {
        // One run of each (EXCHANGE_BENCH_RUNS does not apply): a quick look at one size.
        let mix = match std::env::var("EXCHANGE_BENCH_MIX").as_deref() {
            Err(_) | Ok("old") => Mix::Old,
            Ok("delivery") => Mix::Delivery,
            Ok("trust") => Mix::Trust,
            Ok(v) => {
                eprintln!("EXCHANGE_BENCH_MIX={v:?}: expected old, delivery or trust");
                std::process::exit(2);
            }
        };
        let cold = run_mixed(n, ops, 7, 0, mix);
        let steady = run_mixed(n, ops, 7, warmup, mix);
        println!(
            "{} mix, {n} nodes: {:.0} ops/s from an empty book, {:.0} ops/s after {warmup} s of market time ({} records: nodes, offers, leases, bids)",
            mix.name(),
            cold.ops_per_s,
            steady.ops_per_s,
            steady.records
        );
        println!(
            "fills per operation: {:.3} from an empty book, {:.3} at steady state",
            cold.fills_per_op, steady.fills_per_op
        );
        println!("per operation, steady state:");
        per_op_table(&steady.hist);
    }
    if only.is_empty() || only == "lobster" {
        lobster_table(ops, runs);
    }
}

/// Median, min and max of `runs` runs' ops/s, merging their histograms into `merged`; and the
/// most records a run's market held at its end ([`RunResult::records`]).
fn rates(
    nodes: usize,
    ops: usize,
    runs: usize,
    seed: u64,
    warmup_s: u64,
    mut merged: Option<&mut Vec<Histogram<u64>>>,
) -> (f64, f64, f64, usize) {
    let mut v = Vec::new();
    let mut records = 0;
    for r in 0..runs {
        let res = run_mixed(nodes, ops, seed + r as u64, warmup_s, Mix::Old);
        v.push(res.ops_per_s);
        records = records.max(res.records);
        if let Some(m) = merged.as_deref_mut() {
            for (m, h) in m.iter_mut().zip(&res.hist) {
                m.add(h).unwrap();
            }
        }
    }
    let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = v.iter().cloned().fold(0.0, f64::max);
    (median(&mut v), lo, hi, records)
}

/// The control for the scaling table: the machine's memory penalty at a given number of
/// records, with no algorithm around it. Mean ns per lookup in an `FxHashMap` of `records`
/// 192-byte records (the size of a lease) under engine-style ids, 2,000,000 lookups, each
/// reading one field: (independent lookups at random, each key known in advance; dependent
/// lookups, each key read from the record found before, as the engine's offer → node → lease
/// hops are, along one cycle through every record).
fn lookup_control(records: usize, seed: u64) -> (f64, f64) {
    const LOOKUPS: usize = 2_000_000;
    let mut rng = Rng(seed);
    let records = records.max(2);
    let keys: Vec<u64> = (0..records as u64).map(|i| (i + 1) << 20).collect();
    // Sattolo's shuffle: `next` is one cycle through all records, so the dependent walk visits
    // every record before it repeats (a random successor per record would fall into a short
    // loop that stays in cache).
    let mut next: Vec<usize> = (0..records).collect();
    for i in (1..records).rev() {
        next.swap(i, rng.below(i as u64) as usize);
    }
    // Record i holds the key of record next[i] at [0].
    let map: rustc_hash::FxHashMap<u64, [u64; 24]> = keys
        .iter()
        .zip(&next)
        .map(|(&k, &n)| (k, [keys[n]; 24]))
        .collect();
    let probes: Vec<u64> = (0..LOOKUPS)
        .map(|_| keys[rng.below(records as u64) as usize])
        .collect();
    let t0 = Instant::now();
    let mut sum = 0u64;
    for k in &probes {
        sum = sum.wrapping_add(map.get(k).map_or(0, |r| r[1]));
    }
    let independent = t0.elapsed().as_nanos() as f64 / LOOKUPS as f64;
    let t0 = Instant::now();
    let mut k = keys[0];
    for _ in 0..LOOKUPS {
        k = map.get(&k).map_or(keys[0], |r| r[0]);
    }
    let dependent = t0.elapsed().as_nanos() as f64 / LOOKUPS as f64;
    black_box((sum, k));
    (independent, dependent)
}

/// Market size of the delivery comparison (issue 15) unless `EXCHANGE_BENCH_ONLY=delivery=N`.
const DELIVERY_NODES: usize = 10_000;

/// Issue 15's check: the delivery mix (lease delivery on, the suppliers' lifecycle commands in
/// the mix) beside the old mix, in alternating runs of the same seeds at `nodes` nodes after
/// `warmup` s of market time. Done means: the delivery mix's ops/s within 10 % of the old
/// mix's (ratio >= 0.90).
fn delivery_table(nodes: usize, ops: usize, runs: usize, warmup: u64) {
    println!(
        "\n== Lease delivery (issue 15): the mixed market with and without delivery, {nodes} nodes, {ops} ops per run, {runs} runs, after {warmup} s of market time =="
    );
    let mut old = Vec::new();
    let mut new = Vec::new();
    let mut other = Vec::new();
    let mut ratio = Vec::new();
    let mut other_ratio = Vec::new();
    let new_hist = || -> Vec<Histogram<u64>> {
        OPS.iter()
            .map(|_| Histogram::new_with_bounds(1, 1_000_000_000, 3).unwrap())
            .collect()
    };
    let (mut merged_old, mut merged) = (new_hist(), new_hist());
    let mut lifecycle = [0u64; LIFECYCLE.len()];
    let (mut lifecycle_ops, mut fills_old, mut fills_new, mut wipes) = (0u64, 0.0, 0.0, 0);
    for r in 0..runs {
        let seed = 42 + r as u64;
        // Alternate which goes first, so a drift in the machine's speed favours neither.
        let (o, d) = if r % 2 == 0 {
            let o = run_mixed(nodes, ops, seed, warmup, Mix::Old);
            (o, run_mixed(nodes, ops, seed, warmup, Mix::Delivery))
        } else {
            let d = run_mixed(nodes, ops, seed, warmup, Mix::Delivery);
            (run_mixed(nodes, ops, seed, warmup, Mix::Old), d)
        };
        println!(
            "run {}: old mix {:.0} ops/s, delivery mix {:.0} ops/s, ratio {:.3}",
            r + 1,
            o.ops_per_s,
            d.ops_per_s,
            d.ops_per_s / o.ops_per_s
        );
        old.push(o.ops_per_s);
        new.push(d.ops_per_s);
        other.push(d.other_ops_per_s);
        ratio.push(d.ops_per_s / o.ops_per_s);
        other_ratio.push(d.other_ops_per_s / o.ops_per_s);
        for (m, h) in merged.iter_mut().zip(&d.hist) {
            m.add(h).unwrap();
        }
        for (m, h) in merged_old.iter_mut().zip(&o.hist) {
            m.add(h).unwrap();
        }
        for (l, x) in lifecycle.iter_mut().zip(d.lifecycle) {
            *l += x;
        }
        lifecycle_ops += d.lifecycle_ops;
        fills_old += o.fills_per_op / runs as f64;
        fills_new += d.fills_per_op / runs as f64;
        wipes = wipes.max(d.wipes);
    }
    let spread = |v: &[f64]| {
        (
            v.iter().cloned().fold(f64::INFINITY, f64::min),
            v.iter().cloned().fold(0.0, f64::max),
        )
    };
    let (olo, ohi) = spread(&old);
    let (nlo, nhi) = spread(&new);
    let (rlo, rhi) = spread(&ratio);
    let (xlo, xhi) = spread(&other);
    let (qlo, qhi) = spread(&other_ratio);
    println!(
        "old mix (delivery off)  ops/s: median {:.0}  (min {olo:.0}, max {ohi:.0})",
        median(&mut old)
    );
    println!(
        "delivery mix            ops/s: median {:.0}  (min {nlo:.0}, max {nhi:.0})",
        median(&mut new)
    );
    println!(
        "ratio delivery / old (per run): median {:.3}  (min {rlo:.3}, max {rhi:.3})  target >= 0.90",
        median(&mut ratio)
    );
    println!(
        "delivery mix without its lifecycle commands: median {:.0} ops/s (min {xlo:.0}, max {xhi:.0}), {:.3} of the old mix (min {qlo:.3}, max {qhi:.3})",
        median(&mut other),
        median(&mut other_ratio)
    );
    let timed = (ops * runs) as f64;
    println!(
        "lifecycle commands: {:.1} % of the delivery mix's operations; fills per operation {fills_old:.3} (old) / {fills_new:.3} (delivery); at most {wipes} wipes under way at a run's end",
        100.0 * lifecycle_ops as f64 / timed
    );
    println!(
        "lifecycle over the timed operations of all runs: {}",
        LIFECYCLE
            .iter()
            .zip(lifecycle)
            .map(|(n, c)| format!("{c} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("per operation, old mix | delivery mix (all runs):");
    println!(
        "{:<20} {:>9} {:>8} {:>7} | {:>9} {:>8} {:>7} {:>7}",
        "operation", "count", "mean ns", "p50 ns", "count", "mean ns", "p50 ns", "time %"
    );
    let total: f64 = merged.iter().map(|h| h.mean() * h.len() as f64).sum();
    let columns = |h: &Histogram<u64>| {
        if h.is_empty() {
            format!("{:>9} {:>8} {:>7}", "-", "-", "-")
        } else {
            format!(
                "{:>9} {:>8.0} {:>7}",
                h.len(),
                h.mean(),
                h.value_at_quantile(0.5)
            )
        }
    };
    for ((name, o), d) in OPS.iter().zip(&merged_old).zip(&merged) {
        println!(
            "{name:<20} {} | {} {:>6.1}%",
            columns(o),
            columns(d),
            100.0 * d.mean() * d.len() as f64 / total
        );
    }
}

/// The smoke run's check that the delivery (or trust) mix exercises the whole lifecycle: a
/// small market (100 nodes, so 40,000 operations cover 800 s of market time, past the 180 s
/// provisioning deadline and the resumes after it), whose counts must all be non-zero except
/// teardown overdue (the suppliers always tear down in time) and rejections (they report only
/// what is still so), and whose engine must pass its invariant checks. The trust mix must also
/// have verified, degraded and failed runs (none timed out), trust bids that fill (the
/// `verified` ones: no node has a reliability score yet), and the nodes its failed runs held
/// resumed and run again.
fn delivery_coverage(mix: Mix) -> RunResult {
    let (r, m) = run_market(100, 40_000, 5, 0, mix);
    println!(
        "{} coverage, 100 nodes, 40000 ops: {}",
        mix.name(),
        LIFECYCLE
            .iter()
            .zip(r.lifecycle)
            .map(|(n, c)| format!("{c} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (name, count) in LIFECYCLE.iter().zip(r.lifecycle) {
        let expect_none = *name == "teardown overdue" || *name == "lifecycle commands rejected";
        assert_eq!(
            count == 0,
            expect_none,
            "delivery mix: {count} {name} in 40,000 operations"
        );
    }
    for (kind, h) in OPS
        .iter()
        .zip(&r.hist)
        .skip(FIRST_LIFECYCLE_OP)
        .take(if mix == Mix::Trust { 6 } else { 4 })
    {
        assert!(!h.is_empty(), "{} mix sent no {kind}", mix.name());
    }
    if mix == Mix::Trust {
        println!(
            "trust coverage: verification {}; {} trust bids, {} fills when placed; nodes at the end: {} verified, {} degraded, {} failed, {} verifying, {} unverified",
            counts(&VERIFICATION, r.verification),
            r.trust_bids,
            r.trust_fills,
            r.statuses[0],
            r.statuses[1],
            r.statuses[2],
            r.statuses[3],
            r.statuses[4]
        );
        for (name, count) in VERIFICATION.iter().zip(r.verification) {
            assert_eq!(
                count == 0,
                *name == "timed out",
                "trust mix: {count} verification {name}"
            );
        }
        // A failed run's node was held, resumed and started a new run.
        assert!(
            r.verification[0] > 100,
            "trust mix: no re-runs after failures"
        );
        assert!(r.trust_fills > 0, "trust mix: no trust bid filled");
    }
    m.engine
        .check_invariants()
        .unwrap_or_else(|e| panic!("{} mix: engine invariants: {e:?}", mix.name()));
    r
}

/// `count name, ...` of a table of counts.
fn counts(names: &[&str], counts: [u64; VERIFICATION.len()]) -> String {
    names
        .iter()
        .zip(counts)
        .map(|(n, c)| format!("{c} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Market size of the trust comparison (issue 26) unless `EXCHANGE_BENCH_ONLY=trust=N`.
const TRUST_NODES: usize = 10_000;

/// Issue 26's check: the trust mix (the delivery mix with verification on, the suppliers
/// reporting each run, 30 % trust bids) beside the delivery mix without trust, in alternating
/// runs of the same seeds at `nodes` nodes after `warmup` s of market time. Done means: the
/// trust mix's ops/s at least 0.90 of the delivery mix's.
fn trust_table(nodes: usize, ops: usize, runs: usize, warmup: u64) {
    println!(
        "\n== Trust (issue 26): the delivery mix with and without verification and trust bids, {nodes} nodes, {ops} ops per run, {runs} runs, after {warmup} s of market time =="
    );
    let new_hist = || -> Vec<Histogram<u64>> {
        OPS.iter()
            .map(|_| Histogram::new_with_bounds(1, 1_000_000_000, 3).unwrap())
            .collect()
    };
    let (mut merged_base, mut merged) = (new_hist(), new_hist());
    let (mut base, mut new, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    let mut verification = [0u64; VERIFICATION.len()];
    let mut verification_timed = [0u64; VERIFICATION.len()];
    let (mut trust_bids, mut trust_fills, mut fills_base, mut fills_new) = (0u64, 0u64, 0.0, 0.0);
    let mut statuses = [0usize; 5];
    let (mut bids_base, mut bids_new) = (0, 0);
    for r in 0..runs {
        let seed = 42 + r as u64;
        // Alternate which goes first, so a drift in the machine's speed favours neither.
        let (b, t) = if r % 2 == 0 {
            let b = run_mixed(nodes, ops, seed, warmup, Mix::Delivery);
            (b, run_mixed(nodes, ops, seed, warmup, Mix::Trust))
        } else {
            let t = run_mixed(nodes, ops, seed, warmup, Mix::Trust);
            (run_mixed(nodes, ops, seed, warmup, Mix::Delivery), t)
        };
        println!(
            "run {}: delivery mix {:.0} ops/s, trust mix {:.0} ops/s, ratio {:.3} ({} trust bids, verification {})",
            r + 1,
            b.ops_per_s,
            t.ops_per_s,
            t.ops_per_s / b.ops_per_s,
            t.trust_bids,
            counts(&VERIFICATION, t.verification)
        );
        base.push(b.ops_per_s);
        new.push(t.ops_per_s);
        ratio.push(t.ops_per_s / b.ops_per_s);
        for (m, h) in merged.iter_mut().zip(&t.hist) {
            m.add(h).unwrap();
        }
        for (m, h) in merged_base.iter_mut().zip(&b.hist) {
            m.add(h).unwrap();
        }
        for i in 0..VERIFICATION.len() {
            verification[i] += t.verification[i];
            verification_timed[i] += t.verification_timed[i];
        }
        trust_bids += t.trust_bids;
        trust_fills += t.trust_fills;
        fills_base += b.fills_per_op / runs as f64;
        fills_new += t.fills_per_op / runs as f64;
        for (s, x) in statuses.iter_mut().zip(t.statuses) {
            *s += x;
        }
        bids_base = bids_base.max(b.bids);
        bids_new = bids_new.max(t.bids);
    }
    let spread = |v: &[f64]| {
        (
            v.iter().cloned().fold(f64::INFINITY, f64::min),
            v.iter().cloned().fold(0.0, f64::max),
        )
    };
    let (blo, bhi) = spread(&base);
    let (nlo, nhi) = spread(&new);
    let (rlo, rhi) = spread(&ratio);
    println!(
        "delivery mix (no trust)   ops/s: median {:.0}  (min {blo:.0}, max {bhi:.0})",
        median(&mut base)
    );
    println!(
        "trust mix                 ops/s: median {:.0}  (min {nlo:.0}, max {nhi:.0})",
        median(&mut new)
    );
    println!(
        "ratio trust / delivery (per run): median {:.3}  (min {rlo:.3}, max {rhi:.3})  target >= 0.90",
        median(&mut ratio)
    );
    let timed = (ops * runs) as f64;
    println!(
        "trust bids: {trust_bids} ({:.1} % of the trust mix's operations), {trust_fills} fills when placed; fills per operation {fills_base:.3} (delivery) / {fills_new:.3} (trust)",
        100.0 * trust_bids as f64 / timed
    );
    println!("bids resting at a run's end, at most: {bids_base} (delivery) / {bids_new} (trust)");
    println!(
        "verification, all runs from listing on: {}",
        counts(&VERIFICATION, verification)
    );
    println!(
        "verification, timed operations of all runs: {}",
        counts(&VERIFICATION, verification_timed)
    );
    println!(
        "nodes at the runs' ends (all runs): {} verified, {} degraded, {} failed, {} verifying, {} unverified (SKUs without reference figures)",
        statuses[0], statuses[1], statuses[2], statuses[3], statuses[4]
    );
    println!("per operation, delivery mix | trust mix (all runs):");
    println!(
        "{:<20} {:>9} {:>8} {:>7} | {:>9} {:>8} {:>7} {:>7}",
        "operation", "count", "mean ns", "p50 ns", "count", "mean ns", "p50 ns", "time %"
    );
    let total: f64 = merged.iter().map(|h| h.mean() * h.len() as f64).sum();
    let columns = |h: &Histogram<u64>| {
        if h.is_empty() {
            format!("{:>9} {:>8} {:>7}", "-", "-", "-")
        } else {
            format!(
                "{:>9} {:>8.0} {:>7}",
                h.len(),
                h.mean(),
                h.value_at_quantile(0.5)
            )
        }
    };
    for ((name, b), t) in OPS.iter().zip(&merged_base).zip(&merged) {
        println!(
            "{name:<20} {} | {} {:>6.1}%",
            columns(b),
            columns(t),
            100.0 * t.mean() * t.len() as f64 / total
        );
    }
}

/// Market sizes of the scaling table, in nodes; the first is the baseline.
const SCALING_SIZES: [usize; 3] = [1_000, 10_000, 100_000];

fn mixed_tables(ops: usize, runs: usize, warmup: u64) {
    println!("== Mixed market, 10,000 nodes, {ops} ops per run, {runs} runs ==");
    let mut merged: Vec<Histogram<u64>> = OPS
        .iter()
        .map(|_| Histogram::new_with_bounds(1, 1_000_000_000, 3).unwrap())
        .collect();
    let (m, lo, hi, _) = rates(10_000, ops, runs, 42, 0, None);
    println!(
        "mixed ops/s from an empty book: median {m:.0}  (min {lo:.0}, max {hi:.0})  target >= 1,000,000"
    );
    let (m, lo, hi, _) = rates(10_000, ops, runs, 42, warmup, Some(&mut merged));
    println!(
        "mixed ops/s at steady state (after {warmup} s of market time): median {m:.0}  (min {lo:.0}, max {hi:.0})"
    );
    println!("per operation, steady state:");
    per_op_table(&merged);

    println!("\n== Scaling: mixed ops/s by market size (median of {runs}) ==");
    println!(
        "{:>7}  {:>25}  {:>25}  {:>9}  {:>30}",
        "nodes", "from an empty book", "steady state", "records", "control ns: indep / dep"
    );
    let mut cold_base = None;
    /// One market size's steady-state throughput and lookup control, in absolute units.
    struct Size {
        nodes: usize,
        steady_ops_s: f64,
        independent_ns: f64,
        dependent_ns: f64,
    }
    let mut rows: Vec<Size> = Vec::new();
    for nodes in SCALING_SIZES {
        let (cold, _, _, _) = rates(nodes, ops, runs, 7, 0, None);
        let (steady, _, _, records) = rates(nodes, ops, runs, 7, warmup, None);
        let (ind, dep) = lookup_control(records, 11);
        let cold_base = *cold_base.get_or_insert(cold);
        rows.push(Size {
            nodes,
            steady_ops_s: steady,
            independent_ns: ind,
            dependent_ns: dep,
        });
        let b = &rows[0];
        println!(
            "{nodes:>7}  {cold:>10.0} ops/s ({:>5.2}x)  {steady:>10.0} ops/s ({:>5.2}x)  {records:>9}  {ind:>6.1} ({:>4.2}x) / {dep:>5.1} ({:>4.2}x)",
            cold / cold_base,
            steady / b.steady_ops_s,
            b.independent_ns / ind,
            b.dependent_ns / dep
        );
    }
    println!(
        "(x: of 1,000 nodes, as throughput; cost per operation growing as log(nodes) allows 0.75x at 10,000 and 0.60x at 100,000)"
    );
    println!(
        "control: one hash lookup in a map of as many 192-byte records as the steady-state market's nodes, offers, leases and bids"
    );
    println!(
        "engine / control > 1: the engine's throughput fell less than a single lookup's between 1,000 nodes and that size"
    );
    let b = &rows[0];
    for r in &rows[1..] {
        let steady = r.steady_ops_s / b.steady_ops_s;
        let (ind, dep) = (
            b.independent_ns / r.independent_ns,
            b.dependent_ns / r.dependent_ns,
        );
        println!(
            "{:>7} nodes: steady-state throughput {steady:.2}x of {} nodes; a single lookup's {ind:.2}x (independent) / {dep:.2}x (dependent): engine / control = {:.2} / {:.2}",
            r.nodes,
            b.nodes,
            steady / ind,
            steady / dep
        );
        // Log growth from the first size's ns per operation leaves `budget_ns` more per
        // operation: how many dependent lookups is that, each costing `extra_ns` more here?
        let base_ns = 1e9 / b.steady_ops_s;
        let budget_ns = base_ns * ((r.nodes as f64).ln() / (b.nodes as f64).ln() - 1.0);
        let extra_ns = r.dependent_ns - b.dependent_ns;
        let lookups = if extra_ns > 0.0 {
            format!("{:.1}", budget_ns / extra_ns)
        } else {
            "n/a (the control is no slower here)".to_string()
        };
        println!(
            "{:>7} nodes: log growth allows {budget_ns:.0} ns per operation over {} nodes' {base_ns:.0} ns: the price of {lookups} dependent lookups of records not in cache ({extra_ns:.0} ns more each than at {} nodes)",
            r.nodes, b.nodes, b.nodes
        );
    }
}

fn per_op_table(hist: &[Histogram<u64>]) {
    println!(
        "{:<22} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "operation", "count", "mean ns", "p50 ns", "p99 ns", "p99.9 ns", "time %"
    );
    let total: f64 = hist.iter().map(|h| h.mean() * h.len() as f64).sum();
    for (name, h) in OPS.iter().zip(hist) {
        if h.is_empty() {
            continue;
        }
        println!(
            "{:<22} {:>10} {:>9.0} {:>9} {:>9} {:>9} {:>6.1}%",
            name,
            h.len(),
            h.mean(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            100.0 * h.mean() * h.len() as f64 / total
        );
    }
}

fn lobster_table(ops: usize, runs: usize) {
    println!("\n== Single-SKU limit-order stream vs lobster 0.7 (median of {runs}) ==");
    let mut ours = Vec::new();
    let mut lob = Vec::new();
    let mut ratio = Vec::new();
    for r in 0..runs {
        let (o, l) = run_lobster_comparison(ops, 99 + r as u64);
        ours.push(o);
        lob.push(l);
        ratio.push(o / l);
    }
    let (rmin, rmax) = (
        ratio.iter().cloned().fold(f64::INFINITY, f64::min),
        ratio.iter().cloned().fold(0.0, f64::max),
    );
    println!("exchange ops/s: {:.0}", median(&mut ours));
    println!("lobster  ops/s: {:.0}", median(&mut lob));
    println!(
        "ratio exchange/lobster: median {:.2}x (min {rmin:.2}, max {rmax:.2})  target >= 1.0x, goal 2x",
        median(&mut ratio)
    );
}

/// Market size of the attestation measurement (issue 26) unless `EXCHANGE_BENCH_ONLY=attest=N`.
const ATTEST_NODES: usize = 100_000;

/// Resident memory of this process, bytes (Linux `/proc/self/statm`; 0 elsewhere).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Issue 26: attesting `nodes` nodes × 8 GPUs (docs/market-rules.md §12.1), each GPU a unique
/// UUID of the node's model, then one per-GPU health report per node failing one GPU (§12.1):
/// time per command and the memory the attestations add. `EXCHANGE_BENCH_ONLY=attest[=N]`.
fn attest_table(nodes: usize) {
    let catalog = Catalog::builtin();
    let sku = catalog.lookup("H100-80G").unwrap();
    let row = exchange::models::MODEL_SKUS
        .iter()
        .find(|m| m.sku == "H100-80G")
        .unwrap();
    let mut e = Engine::new(EngineConfig::default(), catalog);
    let supplier = AccountId(1);
    let now = 1_767_225_600_000i64;
    let mut seq = 0u64;
    let mut ids = Vec::with_capacity(nodes);
    for i in 0..nodes {
        seq += 1;
        let out = e.apply(
            &Command::RegisterNode {
                account: supplier,
                spec: NodeSpec {
                    name: format!("n{i}"),
                    sku,
                    gpus: 8,
                    region: "cn-east-2".into(),
                    jurisdiction: Jurisdiction(*b"CN"),
                    interconnect: Interconnect::Infiniband,
                    nvlink: true,
                    fabric: None,
                },
            },
            Meta {
                seq,
                timestamp_ms: now,
            },
        );
        match out.events[0] {
            Event::NodeRegistered { node, .. } => ids.push(node),
            ref other => panic!("{other:?}"),
        }
    }
    let cmds: Vec<Command> = ids
        .iter()
        .enumerate()
        .map(|(i, &node)| Command::AttestNode {
            account: supplier,
            node,
            gpus: (0..8)
                .map(|g| AttestedGpu {
                    index: g,
                    uuid: format!("GPU-{i:08x}-{g:04x}-4a5b-8c9d-0123456789ab"),
                    model: row.example_name.to_string(),
                    memory_mib: row.example_memory_mib as u32,
                })
                .collect(),
        })
        .collect();
    let before = rss_bytes();
    let t0 = Instant::now();
    let mut attested = 0usize;
    for c in &cmds {
        seq += 1;
        let out = e.apply(
            c,
            Meta {
                seq,
                timestamp_ms: now,
            },
        );
        attested += usize::from(matches!(
            out.events.first(),
            Some(Event::NodeAttested { .. })
        ));
    }
    let attest_s = t0.elapsed().as_secs_f64();
    drop(cmds);
    let after = rss_bytes();
    let t0 = Instant::now();
    for &node in &ids {
        seq += 1;
        black_box(e.apply(
            &Command::GpuHealth {
                account: supplier,
                node,
                healthy_mask: 0b1101_1111,
            },
            Meta {
                seq,
                timestamp_ms: now,
            },
        ));
    }
    let health_s = t0.elapsed().as_secs_f64();
    println!(
        "\n== Attestation (issue 26): {nodes} nodes x 8 GPUs ==\n\
         attest: {attested} matched in {attest_s:.2} s ({:.1} us per node, {:.0} nodes/s)\n\
         memory: resident {:.1} MiB before, {:.1} MiB after (+{:.1} MiB, {:.0} bytes per node, \
         the attestation command buffers freed)\n\
         per-GPU health, one GPU failing per node: {:.1} us per report",
        attest_s * 1e6 / nodes as f64,
        nodes as f64 / attest_s,
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        after.saturating_sub(before) as f64 / 1048576.0,
        after.saturating_sub(before) as f64 / nodes as f64,
        health_s * 1e6 / nodes as f64,
    );
}

/// Market size of the gang measurement (issue 27) unless `EXCHANGE_BENCH_ONLY=gang=N`.
const GANG_NODES: usize = 10_000;

/// Issue 27: gang fills over `nodes` nodes of 8 GPUs in 64-node fabric domains (module docs).
fn gang_table(nodes: usize, iters: usize) {
    let catalog = Catalog::builtin();
    let sku = catalog.lookup("H100-80G").unwrap();
    let mut e = Engine::new(EngineConfig::default(), catalog);
    let now = 1_767_225_600_000i64;
    let mut seq = 0u64;
    let mut apply = |e: &mut Engine, c: &Command| {
        seq += 1;
        e.apply(
            c,
            Meta {
                seq,
                timestamp_ms: now,
            },
        )
    };
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for i in 0..nodes {
        let domain = i / 64;
        let supplier = AccountId(1 + (domain / 16) as u64);
        let out = apply(
            &mut e,
            &Command::RegisterNode {
                account: supplier,
                spec: NodeSpec {
                    name: format!("n{i}"),
                    sku,
                    gpus: 8,
                    region: format!("cn-r{}", domain % 4),
                    jurisdiction: Jurisdiction(*b"CN"),
                    interconnect: Interconnect::Infiniband,
                    nvlink: true,
                    fabric: Some(NodeFabric {
                        domain: Some(format!("ib-{domain}")),
                        nic_gbps: Some(3200),
                    }),
                },
            },
        );
        let Event::NodeRegistered { node, .. } = out.events[0] else {
            panic!("{:?}", out.events[0]);
        };
        // The first fifth of the domains is the cheapest: the busy leases below take it.
        let (base, spread) = if i < nodes / 5 {
            (50_000, 50_000)
        } else {
            (150_000, 100_000)
        };
        let price = Price::from_ticks(base + (next() % spread) as i64).unwrap();
        apply(
            &mut e,
            &Command::PostOffer {
                account: supplier,
                node,
                terms: OfferTerms {
                    gpus: 8,
                    spot_price: price,
                    preemptible_price: None,
                    min_lease_s: 60,
                    max_lease_s: 30 * 86_400,
                    available_until_ms: now + 60 * 86_400_000,
                    notice_s: 0,
                    provision_s: 180,
                },
            },
        );
    }
    let bid = |k: usize, gpus: u32, placement: Placement, limit: i64| BidSpec {
        client_order_id: format!("g{k}"),
        sku,
        gpus,
        limit: Price::from_ticks(limit).unwrap(),
        kind: LeaseKind::Spot,
        placement,
        constraints: Constraints::default(),
        duration_s: Some(3600),
        tif: TimeInForce::Ioc,
        min_gpus: None,
    };
    let gang = |n: u32| {
        Placement::Gang(GangSpec {
            nodes: n,
            gpus_per_node: 8,
            scope: GangScope::Domain,
            on_member_loss: MemberLoss::Keep,
        })
    };
    // A fifth of the nodes busy: single-node leases of other buyers take the cheapest.
    for k in 0..nodes / 5 {
        apply(
            &mut e,
            &Command::PlaceBid {
                account: AccountId(100_000 + k as u64),
                bid: bid(k, 8, Placement::SingleNode, 400_000),
            },
        );
    }
    let buyer = AccountId(99_999);
    let mut k = nodes;
    let mut measure = |e: &mut Engine, n: u32, limit: i64| {
        let mut h = Histogram::<u64>::new(3).unwrap();
        let mut filled = 0usize;
        for _ in 0..iters {
            k += 1;
            let c = Command::PlaceBid {
                account: buyer,
                bid: bid(k, n * 8, gang(n), limit),
            };
            seq += 1;
            let meta = Meta {
                seq,
                timestamp_ms: now,
            };
            let t0 = Instant::now();
            let out = e.apply(&c, meta);
            h.record(t0.elapsed().as_nanos() as u64).unwrap();
            if out
                .events
                .iter()
                .any(|ev| matches!(ev, Event::GangFormed { .. }))
            {
                filled += 1;
                let Event::BidAccepted { bid, .. } = out.events[0] else {
                    continue;
                };
                seq += 1;
                e.apply(
                    &Command::ReleaseBid {
                        account: buyer,
                        bid,
                    },
                    Meta {
                        seq,
                        timestamp_ms: now,
                    },
                );
            }
        }
        (h, filled)
    };
    println!(
        "\n== Gangs (issue 27): {nodes} nodes x 8 GPUs, {} fabric domains of 64, a fifth busy, {iters} bids each ==",
        nodes.div_ceil(64)
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>8}  target",
        "gang IOC", "p50 us", "p99 us", "max us", "filled"
    );
    let rows: [(&str, u32, i64, &str); 4] = [
        ("8x8 (fills)", 8, 400_000, "p99 < 250 us"),
        ("64x8 (fills a whole domain)", 64, 400_000, "p99 < 1000 us"),
        ("65x8 (no domain holds it)", 65, 400_000, "p99 < 50 us"),
        ("8x8 under every price", 8, 40_000, "p99 < 50 us"),
    ];
    for (name, n, limit, target) in rows {
        let (h, filled) = measure(&mut e, n, limit);
        println!(
            "{name:<34} {:>9.1} {:>9.1} {:>9.1} {:>8}  {target}",
            h.value_at_quantile(0.5) as f64 / 1e3,
            h.value_at_quantile(0.99) as f64 / 1e3,
            h.max() as f64 / 1e3,
            filled
        );
    }
}
