//! The naive reference of the reliability score (docs/market-rules.md §12.3).
//!
//! Written from the specification alone and naive on purpose: the whole event history is kept
//! (time, event), and a score is recomputed from scratch by scanning it: no buckets, no open
//! lease table, no pruning. It shares nothing with `exchange::reliability` beyond its public
//! types ([`Score`], [`Ratio`]) and constants. The model check compares it with the engine's
//! book after every step; the test at the bottom compares it on the scripted history of the
//! worked example.

use exchange::reliability::{
    DAY_MS, LOST_CAP_S, MIN_LEASE_HOURS, MIN_LEASES, Ratio, Score, WINDOW_DAYS,
};
use exchange::{AccountId, EndReason, Event, LeaseId, NodeId};

/// The raw sums of one node or supplier.
#[derive(Clone, Copy, Default)]
struct Sums {
    delivered_gpu_ms: u64,
    lost_gpu_ms: u64,
    delivered_lease_ms: u64,
    known_ms: u64,
    offline_ms: u64,
    ended: u64,
    ready: u64,
    not_delivered: u64,
    failures: u64,
    overdue: u64,
}

/// The node and supplier an event names, for the events that make a node known to the score:
/// its registration, and (for a node registered before the history) its first lease or
/// overdue teardown.
fn introduces(e: &Event) -> Option<(NodeId, AccountId)> {
    match *e {
        Event::NodeRegistered { node, supplier, .. }
        | Event::LeaseStarted { node, supplier, .. }
        | Event::TeardownOverdue { node, supplier, .. } => Some((node, supplier)),
        _ => None,
    }
}

/// Where in the history `node` became known (index, time) and its supplier, if it is.
fn known(history: &[(i64, Event)], node: NodeId) -> Option<(usize, i64, AccountId)> {
    history
        .iter()
        .enumerate()
        .find_map(|(i, (t, e))| match introduces(e) {
            Some((n, s)) if n == node => Some((i, *t, s)),
            _ => None,
        })
}

/// Is `t` (an event's time) in the window of `now_ms`: from midnight UTC of the 29th day
/// before the day of `now_ms`, through `now_ms`.
fn in_window(t: i64, now_ms: i64) -> bool {
    t.div_euclid(DAY_MS) > now_ms.div_euclid(DAY_MS) - WINDOW_DAYS && t <= now_ms
}

fn node_sums(
    history: &[(i64, Event)],
    launch_failed: &[LeaseId],
    node: NodeId,
    now_ms: i64,
) -> Sums {
    let mut s = Sums::default();
    let Some((first, known_at, _)) = known(history, node) else {
        return s;
    };
    let window_start = (now_ms.div_euclid(DAY_MS) - (WINDOW_DAYS - 1)) * DAY_MS;
    let overlap = |a: i64, b: i64| (b.min(now_ms) - a.max(window_start)).max(0) as u64;
    s.known_ms = overlap(known_at, now_ms);
    // Heartbeat coverage: offline from each NodeOffline (while online) to the next NodeOnline
    // (or now), clipped to the window; only after the node became known.
    let mut offline_since: Option<i64> = None;
    for (t, e) in &history[first..] {
        match *e {
            Event::NodeOffline { node: n, .. } if n == node && offline_since.is_none() => {
                offline_since = Some(*t);
            }
            Event::NodeOnline { node: n } if n == node => {
                if let Some(from) = offline_since.take() {
                    s.offline_ms += overlap(from, *t);
                }
            }
            _ => {}
        }
    }
    if let Some(from) = offline_since {
        s.offline_ms += overlap(from, now_ms);
    }
    for (i, (t, e)) in history.iter().enumerate() {
        if !in_window(*t, now_ms) {
            continue;
        }
        let before = &history[..i];
        match *e {
            Event::LeaseEnded {
                lease,
                reason,
                at_ms,
                ..
            } => {
                // The lease's start, on this node, before its end.
                let Some((gpus, start_ms, end_ms)) = before
                    .iter()
                    .rev()
                    .find_map(|(_, e)| match *e {
                        Event::LeaseStarted {
                            lease: l,
                            node: n,
                            gpus,
                            start_ms,
                            end_ms,
                            ..
                        } if l == lease => Some((n, gpus, start_ms, end_ms)),
                        _ => None,
                    })
                    .and_then(|(n, g, a, b)| (n == node).then_some((g, a, b)))
                else {
                    continue;
                };
                let gpus = u64::from(gpus);
                // Delivery is on once anything of §11 happened; off, a lease is delivered from
                // its start; on, from its ready time, if it got one.
                let delivery = before.iter().any(|(_, e)| {
                    matches!(
                        e,
                        Event::ProvisionStarted { .. }
                            | Event::LeaseReady { .. }
                            | Event::LeaseWiping { .. }
                    )
                });
                let ready_at = before.iter().rev().find_map(|(_, e)| match *e {
                    Event::LeaseReady {
                        lease: l, at_ms, ..
                    } if l == lease => Some(at_ms),
                    _ => None,
                });
                let delivered_from = match ready_at {
                    Some(r) => Some(r),
                    None if !delivery => Some(start_ms),
                    None => None,
                };
                s.ended += 1;
                if ready_at.is_some() {
                    s.ready += 1;
                }
                if let Some(from) = delivered_from {
                    let ms = (at_ms - from).max(0) as u64;
                    s.delivered_gpu_ms += gpus * ms;
                    s.delivered_lease_ms += ms;
                }
                let cap = LOST_CAP_S * 1000;
                match reason {
                    EndReason::NodeFailure => {
                        s.failures += 1;
                        s.lost_gpu_ms += gpus * (end_ms - at_ms).clamp(0, cap) as u64;
                    }
                    EndReason::NotDelivered if !launch_failed.contains(&lease) => {
                        s.not_delivered += 1;
                        s.lost_gpu_ms += gpus * (end_ms - start_ms).clamp(0, cap) as u64;
                    }
                    _ => {}
                }
            }
            Event::TeardownOverdue { lease, node: n, .. } if n == node => {
                let gpus = before
                    .iter()
                    .rev()
                    .find_map(|(_, e)| match *e {
                        Event::LeaseWiping {
                            lease: l, gpu_mask, ..
                        } if l == lease => Some(gpu_mask.count_ones()),
                        _ => None,
                    })
                    .unwrap_or(1);
                s.overdue += 1;
                s.lost_gpu_ms += u64::from(gpus) * (LOST_CAP_S as u64) * 1000;
            }
            _ => {}
        }
    }
    s
}

fn score(s: Sums) -> Score {
    let online = s.known_ms - s.offline_ms;
    Score {
        reliability: Ratio {
            num: s.delivered_gpu_ms,
            den: s.delivered_gpu_ms + s.lost_gpu_ms,
        },
        delivery_rate: Ratio {
            num: s.ready,
            den: s.ready + s.not_delivered,
        },
        node_failures_per_1000_lease_hours: Ratio {
            num: s.failures * 1000 * 3_600_000,
            den: s.delivered_lease_ms,
        },
        heartbeat_coverage: Ratio {
            num: online,
            den: online + s.offline_ms,
        },
        leases_ended: s.ended,
        node_failures: s.failures,
        teardowns_overdue: s.overdue,
        delivered_lease_ms: s.delivered_lease_ms,
        is_new: s.ended < MIN_LEASES || s.delivered_lease_ms < MIN_LEASE_HOURS * 3_600_000,
    }
}

/// `node`'s score at `now_ms` from the whole `history` (event times are the times of the
/// commands that emitted them); `launch_failed`: the leases a `ReportLaunchFailed` ended.
pub fn naive_node_score(
    history: &[(i64, Event)],
    launch_failed: &[LeaseId],
    node: NodeId,
    now_ms: i64,
) -> Score {
    score(node_sums(history, launch_failed, node, now_ms))
}

/// `supplier`'s score at `now_ms`: the sums over every node it registered.
pub fn naive_supplier_score(
    history: &[(i64, Event)],
    launch_failed: &[LeaseId],
    supplier: AccountId,
    now_ms: i64,
) -> Score {
    let mut nodes: Vec<NodeId> = history
        .iter()
        .filter_map(|(_, e)| introduces(e))
        .map(|(n, _)| n)
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut t = Sums::default();
    for n in nodes {
        if known(history, n).is_none_or(|(_, _, s)| s != supplier) {
            continue;
        }
        let s = node_sums(history, launch_failed, n, now_ms);
        t.delivered_gpu_ms += s.delivered_gpu_ms;
        t.lost_gpu_ms += s.lost_gpu_ms;
        t.delivered_lease_ms += s.delivered_lease_ms;
        t.known_ms += s.known_ms;
        t.offline_ms += s.offline_ms;
        t.ended += s.ended;
        t.ready += s.ready;
        t.not_delivered += s.not_delivered;
        t.failures += s.failures;
        t.overdue += s.overdue;
    }
    score(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use exchange::reliability::ReliabilityBook;
    use exchange::{BidId, LeaseKind, Price, RegionId, SkuId};

    const S: i64 = 1000;
    const T0: i64 = 20_000 * DAY_MS;
    const S1: AccountId = AccountId(1);
    const S2: AccountId = AccountId(2);
    const N1: NodeId = NodeId(11);
    const N2: NodeId = NodeId(12);
    const N3: NodeId = NodeId(13);
    const BUYER: AccountId = AccountId(99);

    fn registered(node: NodeId, supplier: AccountId) -> Event {
        Event::NodeRegistered {
            node,
            supplier,
            sku: SkuId(0),
            region: RegionId(0),
            gpus: 8,
        }
    }

    fn started(
        l: u64,
        node: NodeId,
        supplier: AccountId,
        gpus: u32,
        start: i64,
        end: i64,
    ) -> Event {
        Event::LeaseStarted {
            lease: LeaseId(l),
            bid: BidId(l),
            buyer: BUYER,
            supplier,
            node,
            sku: SkuId(0),
            region: RegionId(0),
            kind: LeaseKind::Spot,
            gpus,
            gpu_mask: (1u32 << gpus) - 1,
            price: Price::from_ticks(10_000).expect("price"),
            start_ms: start,
            end_ms: end,
        }
    }

    fn provision(l: u64, node: NodeId, supplier: AccountId, deadline: i64) -> Event {
        Event::ProvisionStarted {
            lease: LeaseId(l),
            buyer: BUYER,
            supplier,
            node,
            deadline_ms: deadline,
        }
    }

    fn ready(l: u64, node: NodeId, supplier: AccountId, at: i64) -> Event {
        Event::LeaseReady {
            lease: LeaseId(l),
            buyer: BUYER,
            supplier,
            node,
            at_ms: at,
        }
    }

    fn ended(l: u64, reason: EndReason, at: i64) -> Event {
        Event::LeaseEnded {
            lease: LeaseId(l),
            buyer: BUYER,
            reason,
            at_ms: at,
        }
    }

    fn wiping(l: u64, node: NodeId, supplier: AccountId, mask: u32) -> Event {
        Event::LeaseWiping {
            lease: LeaseId(l),
            buyer: BUYER,
            supplier,
            node,
            gpu_mask: mask,
            deadline_ms: 0,
        }
    }

    fn overdue(l: u64, node: NodeId, supplier: AccountId) -> Event {
        Event::TeardownOverdue {
            lease: LeaseId(l),
            buyer: BUYER,
            supplier,
            node,
        }
    }

    /// The worked example of docs/market-rules.md §12.3 (the same as the unit test of
    /// `exchange::reliability`).
    fn scripted() -> Vec<(i64, Event)> {
        let mut h = Vec::new();
        for (n, s) in [(N1, S1), (N2, S1), (N3, S2)] {
            h.push((T0, registered(n, s)));
        }
        for k in 1..=10i64 {
            let (start, l) = (T0 + (k - 1) * 3600 * S, k as u64);
            let rdy = start + 60 * S;
            let end = rdy + 10_800 * S;
            h.push((start, started(l, N1, S1, 2, start, start + 86_400 * S)));
            h.push((start, provision(l, N1, S1, start + 180 * S)));
            h.push((rdy, ready(l, N1, S1, rdy)));
            h.push((end, ended(l, EndReason::Released, end)));
            h.push((end, wiping(l, N1, S1, 0b11)));
        }
        let start = T0 + 43_200 * S;
        h.push((start, started(11, N1, S1, 4, start, start + 36_000 * S)));
        h.push((start, provision(11, N1, S1, start + 180 * S)));
        h.push((start + 60 * S, ready(11, N1, S1, start + 60 * S)));
        let (off, last_hb) = (T0 + 50_475 * S, T0 + 50_460 * S);
        h.push((
            off,
            Event::NodeOffline {
                node: N1,
                last_heartbeat_ms: last_hb,
            },
        ));
        h.push((off, ended(11, EndReason::NodeFailure, last_hb)));
        h.push((off, wiping(11, N1, S1, 0b1111)));
        h.push((off + 3600 * S, Event::NodeOnline { node: N1 }));
        let start = T0 + 60_000 * S;
        let dl = start + 180 * S;
        h.push((start, started(12, N1, S1, 1, start, start + 1800 * S)));
        h.push((start, provision(12, N1, S1, dl)));
        h.push((dl, ended(12, EndReason::NotDelivered, dl)));
        h.push((dl, wiping(12, N1, S1, 0b1)));
        h.push((dl + 600 * S, overdue(12, N1, S1)));
        h.push((
            T0 + 940 * S,
            started(13, N2, S1, 8, T0 + 940 * S, T0 + 90_000 * S),
        ));
        h.push((T0 + 940 * S, provision(13, N2, S1, T0 + 1120 * S)));
        h.push((T0 + 1000 * S, ready(13, N2, S1, T0 + 1000 * S)));
        h.push((T0 + 4600 * S, ended(13, EndReason::Released, T0 + 4600 * S)));
        h.push((
            T0 + 5000 * S,
            started(14, N2, S1, 2, T0 + 5000 * S, T0 + 9000 * S),
        ));
        h.push((T0 + 5000 * S, provision(14, N2, S1, T0 + 5180 * S)));
        h.push((
            T0 + 5100 * S,
            ended(14, EndReason::NotDelivered, T0 + 5100 * S),
        ));
        h.sort_by_key(|(t, _)| *t);
        h
    }

    /// Feeds `history` to a book step by step and compares every node's and supplier's score
    /// with the naive recomputation after each step (and at `extra` later times).
    fn compare(history: &[(i64, Event)], launch_failed: &[LeaseId], every: usize, extra: &[i64]) {
        let nodes = [N1, N2, N3, NodeId(14)];
        let suppliers = [S1, S2, AccountId(3)];
        let mut book = ReliabilityBook::new();
        let check = |book: &ReliabilityBook, upto: usize, now: i64| {
            let h = &history[..upto];
            for n in nodes {
                let naive = naive_node_score(h, launch_failed, n, now);
                assert_eq!(book.node(n, now), naive, "node {n} at {now} after {upto}");
                assert_eq!(book.node_reliability_bp(n, now), naive.reliability_bp());
            }
            for s in suppliers {
                let naive = naive_supplier_score(h, launch_failed, s, now);
                assert_eq!(
                    book.supplier(s, now),
                    naive,
                    "supplier {s} at {now} after {upto}"
                );
            }
        };
        for (i, (t, e)) in history.iter().enumerate() {
            if let Event::LeaseEnded { lease, .. } = e
                && launch_failed.contains(lease)
            {
                book.observe_launch_failed(*lease);
            }
            book.observe(*t, e);
            if i % every == 0 || i + 1 == history.len() {
                check(&book, i + 1, *t);
            }
        }
        for now in extra {
            check(&book, history.len(), *now);
        }
    }

    #[test]
    fn scripted_history_matches_the_book_and_the_hand_computation() {
        let h = scripted();
        let lf = [LeaseId(14)];
        let now = T0 + 129_600 * S;
        compare(
            &h,
            &lf,
            1,
            &[now, T0 + 29 * DAY_MS, T0 + 30 * DAY_MS, T0 + 45 * DAY_MS],
        );
        let n1 = naive_node_score(&h, &lf, N1, now);
        assert_eq!(
            n1.reliability,
            Ratio {
                num: 244_800_000,
                den: 264_600_000
            }
        );
        assert_eq!(n1.reliability_bp(), Some(9251));
        assert_eq!(n1.delivery_rate, Ratio { num: 11, den: 12 });
        assert_eq!(
            n1.node_failures_per_1000_lease_hours,
            Ratio {
                num: 3_600_000_000,
                den: 115_200_000
            }
        );
        assert_eq!(
            n1.heartbeat_coverage,
            Ratio {
                num: 126_000_000,
                den: 129_600_000
            }
        );
        assert!(!n1.is_new);
        let s1 = naive_supplier_score(&h, &lf, S1, now);
        assert_eq!(s1.reliability_bp(), Some(9325));
        // Day D has left the window at D+30: nothing ended since, so N1 is new again.
        assert!(naive_node_score(&h, &lf, N1, T0 + 30 * DAY_MS).is_new);
    }

    /// A pseudo-random history over 50 days (delivery on and off, every end reason, launch
    /// failures, wipes wiped or overdue, nodes going offline and back, a node known only from
    /// its first lease), compared with the book step by step.
    #[test]
    fn random_histories_match_the_book() {
        for seed in 1..=6u64 {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut rnd = move |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let delivery = seed % 3 != 0;
            let mut h = Vec::new();
            let mut lf = Vec::new();
            let mut t = T0 + 7 * 3600 * S;
            let homes = [(N1, S1), (N2, S1), (N3, S2), (NodeId(14), S2)];
            for &(n, s) in &homes[..3] {
                h.push((t, registered(n, s)));
            }
            let mut online = [true; 4];
            for l in 1..=120u64 {
                t += rnd(12 * 3600) as i64 * S;
                let (node, sup) = homes[rnd(4) as usize];
                let i = homes.iter().position(|h| h.0 == node).expect("home");
                if rnd(5) == 0 {
                    online[i] = !online[i];
                    let e = if online[i] {
                        Event::NodeOnline { node }
                    } else {
                        Event::NodeOffline {
                            node,
                            last_heartbeat_ms: t - 15 * S,
                        }
                    };
                    h.push((t, e));
                }
                let gpus = 1 + rnd(8) as u32;
                let term = (1 + rnd(6 * 3600) as i64) * S;
                h.push((t, started(l, node, sup, gpus, t, t + term)));
                let mut got_ready = false;
                let mut began = !delivery;
                if delivery {
                    if rnd(6) != 0 {
                        h.push((t, provision(l, node, sup, t + 180 * S)));
                        began = true;
                    }
                    if began && rnd(5) != 0 {
                        t += rnd(200) as i64 * S;
                        h.push((t, ready(l, node, sup, t)));
                        got_ready = true;
                    }
                }
                t += rnd(term as u64 / S as u64 + 7200) as i64 * S;
                let reason = match rnd(8) {
                    0 => EndReason::NodeFailure,
                    1 | 2 if delivery && !got_ready => {
                        if rnd(2) == 0 {
                            lf.push(LeaseId(l));
                        }
                        EndReason::NotDelivered
                    }
                    1 => EndReason::Preempted,
                    2 => EndReason::OfferWithdrawn,
                    3 => EndReason::Expired,
                    4 => EndReason::InsufficientFunds,
                    _ => EndReason::Released,
                };
                let at = if reason == EndReason::NodeFailure {
                    t - rnd(30) as i64 * S
                } else {
                    t
                };
                h.push((t, ended(l, reason, at)));
                if delivery && began {
                    h.push((t, wiping(l, node, sup, (1u32 << gpus) - 1)));
                    t += rnd(900) as i64 * S;
                    if rnd(3) == 0 {
                        h.push((t, overdue(l, node, sup)));
                    } else {
                        h.push((
                            t,
                            Event::LeaseWiped {
                                lease: LeaseId(l),
                                buyer: BUYER,
                                supplier: sup,
                                node,
                            },
                        ));
                    }
                }
                // A called-off pending lease: an end with no start.
                if rnd(10) == 0 {
                    h.push((t, ended(1000 + l, EndReason::Preempted, t)));
                }
            }
            let last = t;
            // The stream exercises every figure (checked on the naive side).
            let busy = naive_supplier_score(&h, &lf, S1, T0 + 30 * DAY_MS);
            assert!(
                busy.leases_ended >= 10 && busy.node_failures > 0,
                "{busy:?}"
            );
            assert!(busy.heartbeat_coverage.num < busy.heartbeat_coverage.den);
            if delivery {
                assert!(
                    busy.teardowns_overdue > 0 && busy.delivery_rate.den > busy.delivery_rate.num
                );
            }
            compare(
                &h,
                &lf,
                7,
                &[last + DAY_MS, last + 20 * DAY_MS, last + 40 * DAY_MS],
            );
        }
    }
}
