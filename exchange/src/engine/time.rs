//! Time advancement, run by every command before it applies (docs/market-rules.md §7).

use super::Engine;
use super::index::{
    TIMER_END, TIMER_PROVISION, TIMER_START, TIMER_WIPE, bid_expiry_live, lease_timer_live,
    offer_expiry_live,
};
use crate::event::{BidCloseReason, EndReason, Event, NoticeReason};
use crate::ids::{BidId, NodeId};
use crate::state::NodeStatus;

impl Engine {
    /// Processes everything due at or before `now`: offer expiries, heartbeat timeouts, lease
    /// ends and starts, GTC expiries, forgotten client order ids — in that order.
    /// [`crate::Command::Resume`]: the span since `previous` (the previous command's time) was
    /// an outage of the exchange, so every online node's last heartbeat moves forward by it,
    /// capped at now. O(online nodes); runs before time advances.
    pub(crate) fn discount_outage(&mut self, previous: i64) {
        let now = self.st.now;
        let gap = now.saturating_sub(previous);
        if gap <= 0 {
            return;
        }
        if self.st.config.delivery {
            self.discount_outage_deadlines(gap);
        }
        self.discount_outage_verification(gap);
        let nodes = &mut self.st.nodes;
        self.idx.heartbeats.refile(|id| match nodes.get_mut(&id) {
            Some(node) => {
                node.last_heartbeat_ms = node.last_heartbeat_ms.saturating_add(gap).min(now);
                node.last_heartbeat_ms
            }
            None => now,
        });
    }

    pub(crate) fn advance_time(&mut self, out: &mut Vec<Event>) {
        let now = self.st.now;
        let day = crate::reliability::utc_day(now);
        if day != self.ext.score_day {
            self.roll_day_scores(day);
        }
        let timeout = self.st.config.heartbeat_timeout_ms;
        // Offers past their until leave first, so no later step sees them.
        while let Some((_, offer_id)) = self
            .idx
            .offer_expiry
            .pop_due(now, |t| offer_expiry_live(&self.st.offers, t))
        {
            if let Some(offer) = self.st.offers.remove(&offer_id) {
                self.ext.offer_sla.remove(&offer_id);
                if let Some(node) = self.st.nodes.get_mut(&offer.node) {
                    node.offer = None;
                }
                out.push(Event::OfferExpired { offer: offer_id });
                self.refile_node_victims(offer.node);
                self.relist(offer.node);
            }
        }
        // Every node timing out now goes offline first, so none of them takes a failover.
        // Silent for longer than the timeout: last heartbeat before now - timeout.
        let timed_out = self
            .idx
            .heartbeats
            .pop_before(now.saturating_sub(timeout), &self.st.nodes);
        for &(_, node_id) in &timed_out {
            if let Some(node) = self.st.nodes.get_mut(&node_id) {
                node.status = NodeStatus::Offline;
            }
            self.relist(node_id);
        }
        for (hb, node_id) in timed_out {
            self.node_offline(node_id, hb, out);
        }
        while let Some((at, kind, lease_id)) = self.idx.lease_timers.pop_due(now, |t| {
            lease_timer_live(&self.st.leases, &self.st.wipes, t)
        }) {
            if kind == TIMER_PROVISION {
                self.not_delivered(lease_id, at, out);
            } else if kind == TIMER_WIPE {
                self.teardown_overdue(lease_id, out);
            } else if kind == TIMER_END {
                let reason = match self
                    .st
                    .leases
                    .get(&lease_id)
                    .and_then(|l| l.notice.filter(|n| n.deadline_ms < l.end_ms))
                {
                    Some(n) => match n.reason {
                        NoticeReason::Preempted => EndReason::Preempted,
                        NoticeReason::OfferWithdrawn => EndReason::OfferWithdrawn,
                    },
                    None => EndReason::Expired,
                };
                self.end_lease(lease_id, reason, at, out);
            } else if kind == TIMER_START {
                self.start_lease(lease_id, out);
            }
        }
        while let Some((_, bid_id)) = self
            .idx
            .bid_expiry
            .pop_due(now, |t| bid_expiry_live(&self.st.bids, t))
        {
            if let Some(bid) = self.remove_resting_bid(bid_id) {
                out.push(Event::BidClosed {
                    bid: bid_id,
                    filled: bid.gpus - bid.remaining,
                    unfilled: bid.remaining,
                    reason: BidCloseReason::Expired,
                    detail: crate::event::CloseDetail::default(),
                });
            }
        }
        self.advance_verification(out);
        self.forget_client_order_ids();
    }

    /// Midnight UTC (§12.3): every node's score at the start of `day` becomes what bids'
    /// `min_reliability` compares against until the next midnight; a node whose score rose
    /// (or stopped being `new`) is marked dirty so resting bids look at it again.
    fn roll_day_scores(&mut self, day: i64) {
        let at = day.saturating_mul(crate::reliability::DAY_MS);
        let mut scores = std::collections::BTreeMap::new();
        for id in self.st.nodes.keys() {
            if let Some(bp) = self.ext.reliability.node_reliability_bp(*id, at) {
                scores.insert(*id, bp);
            }
        }
        let rose: Vec<NodeId> = scores
            .iter()
            .filter(|(id, bp)| self.ext.day_scores.get(id).is_none_or(|old| old < bp))
            .map(|(id, _)| *id)
            .collect();
        for id in rose {
            self.idx.mark_dirty(id);
        }
        self.idx.max_day_score = scores.values().copied().max();
        self.idx.day_score = scores.iter().map(|(n, s)| (*n, *s)).collect();
        self.ext.day_scores = scores;
        self.ext.score_day = day;
        self.repark_trust_bids();
    }

    /// After the day's scores change the highest score: files the parked bids some node now
    /// meets back into their books, and parks the booked bids none meets (§12.3;
    /// `Index::parked_trust`). Once a day, over the resting bids with `min_reliability`.
    fn repark_trust_bids(&mut self) {
        let max = self.idx.max_day_score;
        let unpark: Vec<(u32, BidId)> = match max {
            Some(mx) => self
                .idx
                .parked_trust
                .range(..=(mx, BidId(u64::MAX)))
                .copied()
                .collect(),
            None => Vec::new(),
        };
        for key in unpark {
            self.idx.parked_trust.remove(&key);
            if let Some(bid) = self.st.bids.get(&key.1) {
                self.idx.book_bid(bid);
            }
        }
        let park: Vec<(u32, BidId)> = self
            .ext
            .bid_trust
            .iter()
            .filter_map(|(id, t)| Some((self.idx.parks(Some(t))?, *id)))
            .filter(|k| !self.idx.parked_trust.contains(k))
            .collect();
        for key in park {
            if let Some(bid) = self.st.bids.get(&key.1) {
                self.idx.unbook_bid(bid);
                self.idx.parked_trust.insert(key);
            }
        }
    }

    /// Forgets client order ids accepted `client_order_id_retention_ms` or longer ago, except
    /// those of bids still resting (forgotten when the bid leaves the book).
    fn forget_client_order_ids(&mut self) {
        let retention = self.st.config.client_order_id_retention_ms;
        while let Some((accepted, _)) = self.idx.client_order_expiry.front() {
            if accepted.saturating_add(retention) > self.st.now {
                break;
            }
            if let Some((accepted, key)) = self.idx.client_order_expiry.pop_front()
                && let Some(&(bid, at)) = self.st.client_orders.get(&key)
                && at == accepted
            {
                if self.st.bids.contains_key(&bid) {
                    // Still resting: forgotten when it leaves the book.
                    self.idx.parked_client_orders.insert(bid, key);
                } else {
                    self.st.client_orders.remove(&key);
                }
            }
        }
    }

    /// A node that missed its heartbeats (already marked offline): its leases end at the last
    /// heartbeat and fail over.
    fn node_offline(&mut self, node_id: NodeId, last_heartbeat_ms: i64, out: &mut Vec<Event>) {
        let Some(node) = self.st.nodes.get(&node_id) else {
            return;
        };
        let mut lease_ids = node.leases.clone();
        lease_ids.sort_unstable();
        out.push(Event::NodeOffline {
            node: node_id,
            last_heartbeat_ms,
        });
        let mut ended = Vec::with_capacity(lease_ids.len());
        for id in lease_ids {
            if let Some(l) = self.end_lease(id, EndReason::NodeFailure, last_heartbeat_ms, out) {
                ended.push(l);
            }
        }
        for lease in &ended {
            self.failover(lease, node_id, out);
        }
    }
}
