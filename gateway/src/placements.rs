//! What placing each bid did, kept while its client order id is remembered (issue 25): a bid
//! re-sent after a timeout or a lost answer (same account, client order id and terms) is
//! answered with the first answer, on any process, instead of 409
//! `duplicate_client_order_id` for a bid that rests (docs/api.md "Bids").
//!
//! Invariants: one [`Placement`] per (account, client order id) whose bid the engine accepted;
//! a record is dropped once `client_order_id_retention_ms` (the engine's retention of client
//! order ids) has passed since the bid was placed, in time order; the records are part of the
//! market's snapshot and state hash, so every process that applied the same journal answers a
//! re-sent bid the same. Pure: no IO, time comes in with each call.

use crate::market::Op;
use exchange::{AccountId, BidCloseReason, BidId, Event, LeaseId, LeaseKind, NodeId, Price};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// A bid's fill at its placement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedFill {
    /// The lease made.
    pub lease: LeaseId,
    /// Its node.
    pub node: NodeId,
    /// GPUs.
    pub gpus: u32,
    /// Price, CNY per GPU-hour.
    pub price: Price,
    /// Spot or preemptible.
    pub kind: LeaseKind,
    /// Start, ms since epoch.
    pub start_ms: i64,
    /// Scheduled end, ms since epoch.
    pub end_ms: i64,
}

/// Where a bid stood right after it was placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacedStatus {
    /// Resting on the book (GTC with GPUs left).
    Resting,
    /// Every GPU filled.
    Filled,
    /// Closed with GPUs unfilled (an IOC remainder), see the close reason.
    Closed,
}

/// What placing one bid did: the answer to `POST /v1/bids`, in domain terms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The bid.
    pub bid: BidId,
    /// Journal sequence number of the placement.
    pub seq: u64,
    /// When it was placed, ms since epoch.
    pub at_ms: i64,
    /// SHA-256 of the placing operation ([`Placements::digest`]): a re-sent bid is answered
    /// only when its terms are the same.
    pub digest: [u8; 32],
    /// Status right after placement.
    pub status: PlacedStatus,
    /// GPUs filled at placement.
    pub filled_gpus: u32,
    /// GPUs resting after placement.
    pub remaining_gpus: u32,
    /// Why it closed, when it did.
    pub close_reason: Option<BidCloseReason>,
    /// What the buyer can act on when its remainder did not fill (§4.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_detail: Option<exchange::CloseDetail>,
    /// Its fills at placement, in event order.
    pub fills: Vec<PlacedFill>,
}

impl Placement {
    /// What `events` (one engine command's output) say placing a bid did; `None` when no bid
    /// was accepted (a rejection).
    pub fn from_events(events: &[Event], seq: u64, at_ms: i64, digest: [u8; 32]) -> Option<Self> {
        let mut p: Option<Placement> = None;
        for e in events {
            match e {
                Event::BidAccepted { bid, .. } => {
                    p = Some(Placement {
                        bid: *bid,
                        seq,
                        at_ms,
                        digest,
                        status: PlacedStatus::Resting,
                        filled_gpus: 0,
                        remaining_gpus: 0,
                        close_reason: None,
                        close_detail: None,
                        fills: Vec::new(),
                    });
                }
                Event::Fill {
                    bid,
                    lease,
                    node,
                    gpus,
                    price,
                    kind,
                    start_ms,
                    end_ms,
                    ..
                } => {
                    if let Some(p) = p.as_mut().filter(|p| p.bid == *bid) {
                        p.filled_gpus += gpus;
                        p.fills.push(PlacedFill {
                            lease: *lease,
                            node: *node,
                            gpus: *gpus,
                            price: *price,
                            kind: *kind,
                            start_ms: *start_ms,
                            end_ms: *end_ms,
                        });
                    }
                }
                Event::BidRested { bid, remaining } => {
                    if let Some(p) = p.as_mut().filter(|p| p.bid == *bid) {
                        p.status = PlacedStatus::Resting;
                        p.remaining_gpus = *remaining;
                    }
                }
                Event::BidClosed {
                    bid,
                    reason,
                    detail,
                    ..
                } => {
                    if let Some(p) = p.as_mut().filter(|p| p.bid == *bid) {
                        p.status = if *reason == BidCloseReason::Filled {
                            PlacedStatus::Filled
                        } else {
                            PlacedStatus::Closed
                        };
                        p.remaining_gpus = 0;
                        p.close_reason = Some(*reason);
                        p.close_detail = Some(*detail).filter(|d| *d != Default::default());
                    }
                }
                _ => {}
            }
        }
        p
    }
}

/// The placements of the bids whose client order ids are remembered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placements {
    by_order: BTreeMap<(AccountId, String), Placement>,
    /// (placed at, key) in placement order, for dropping the oldest (derived: rebuilt by
    /// [`Placements::reindex`]).
    #[serde(skip)]
    by_time: VecDeque<(i64, (AccountId, String))>,
}

impl Placements {
    /// SHA-256 of a placing operation's MessagePack: equal for a re-sent bid with the same
    /// terms (client order id, SKU, GPUs, price, kind, time in force, placement, constraints,
    /// launch spec), different when any differs.
    pub fn digest(op: &Op) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        Sha256::digest(rmp_serde::to_vec_named(op).unwrap_or_default()).into()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.by_order.is_empty()
    }

    /// How many are kept.
    pub fn len(&self) -> usize {
        self.by_order.len()
    }

    /// Keeps `p` for `account`'s `client_order_id` (the first placement of an id stays).
    pub fn record(&mut self, account: AccountId, client_order_id: &str, p: Placement) {
        let key = (account, client_order_id.to_string());
        if self.by_order.contains_key(&key) {
            return;
        }
        self.by_time.push_back((p.at_ms, key.clone()));
        self.by_order.insert(key, p);
    }

    /// The placement of `account`'s bid `client_order_id`, while kept.
    pub fn get(&self, account: AccountId, client_order_id: &str) -> Option<&Placement> {
        self.by_order.get(&(account, client_order_id.to_string()))
    }

    /// Drops the placements made `retention_ms` or more before `now_ms`.
    pub fn expire(&mut self, now_ms: i64, retention_ms: i64) {
        while let Some((at, _)) = self.by_time.front() {
            if at.saturating_add(retention_ms) > now_ms {
                break;
            }
            if let Some((_, key)) = self.by_time.pop_front() {
                self.by_order.remove(&key);
            }
        }
    }

    /// Rebuilds the time index after a restore.
    pub fn reindex(&mut self) {
        let mut v: Vec<(i64, (AccountId, String))> = self
            .by_order
            .iter()
            .map(|(k, p)| (p.at_ms, k.clone()))
            .collect();
        v.sort();
        self.by_time = v.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(at_ms: i64) -> Placement {
        Placement {
            bid: BidId(1),
            seq: 1,
            at_ms,
            digest: [0; 32],
            status: PlacedStatus::Resting,
            filled_gpus: 0,
            remaining_gpus: 1,
            close_reason: None,
            close_detail: None,
            fills: Vec::new(),
        }
    }

    #[test]
    fn the_first_placement_stays_and_old_ones_expire_in_time_order() {
        let mut p = Placements::default();
        p.record(AccountId(1), "a", placement(1_000));
        let mut later = placement(2_000);
        later.bid = BidId(2);
        p.record(AccountId(1), "a", later.clone());
        assert_eq!(p.get(AccountId(1), "a").map(|x| x.bid), Some(BidId(1)));
        p.record(AccountId(2), "a", later);
        assert_eq!(p.len(), 2);
        p.expire(2_000, 1_000);
        assert!(
            p.get(AccountId(1), "a").is_none(),
            "placed at 1,000: gone at 2,000"
        );
        assert!(p.get(AccountId(2), "a").is_some());
        let mut restored: Placements =
            rmp_serde::from_slice(&rmp_serde::to_vec_named(&p).unwrap()).unwrap();
        restored.reindex();
        assert_eq!(restored.by_order, p.by_order);
        restored.expire(3_000, 1_000);
        assert!(restored.is_empty());
    }
}
