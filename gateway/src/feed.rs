//! The feed hub: one task that turns committed commands into what websocket clients see — live
//! inventory (snapshot, then contiguous deltas) and each buyer's private events (fills, leases,
//! preemption notices, bid closes).
//!
//! The hub follows the sequencer's broadcast of committed (durable, applied) commands, so
//! nothing reaches a client before the journal confirmed it, and the deltas of a command go out
//! in the same step as the fills that caused them. It mirrors the inventory from the deltas;
//! a snapshot of one SKU (optionally one region) is built once per market sequence number and
//! shared by every client that asks for it.
//!
//! Sequence numbers are per SKU (the engine's `market_seq`). A snapshot carries the SKU's
//! sequence number `seq`; every later commit that changes the SKU sends one
//! `inventory_delta` with `first_seq = previous last_seq + 1` and `last_seq`, and the levels it
//! changed (filtered to the subscribed region, possibly none), so a client checks contiguity
//! with one comparison. Deltas carry `committed_at_ms` (the sequencer's time) and
//! `published_at_us` (when the hub sent them, µs since epoch) for lag measurements.
//!
//! Subscribers also get the public trade tape of their SKU: a `trade` message for every lease
//! that starts (SKU, region, kind, GPUs, price, start; never the parties). The hub also keeps
//! the last [`RECENT_FILLS`] of those `trade` messages (all SKUs, newest last), so a page that
//! opens later shows the fills before it (`GET /v1/fills/recent`). The tape starts empty when
//! the hub starts: it holds fills this process published, never a rebuild from the journal.
//!
//! Slow consumers: each connection has a bounded outbox ([`OUTBOX`] messages). When an
//! inventory message does not fit, that subscription stops receiving deltas and gets a fresh
//! snapshot (`resync: true`) as soon as there is room; a private event that does not fit, or
//! an outbox full for longer than [`SLOW_CONSUMER_CLOSE_MS`], closes the connection with
//! reason `slow_consumer`. Memory per client is bounded by the outbox.
//!
//! Private events go to an account's connections; a connection of a node key (issue 16,
//! [`FeedHandle::connect_node`]) gets only the supplier events of its node — every supplier
//! event names its node (events that name only a lease are routed through the lease's node).
//!
//! Messages are typed ([`gpux_wire::ws::ServerMsg`], the wire crate's description of every
//! server message) and encoded once ([`encode`]): the same bytes go to every connection that
//! gets the message. Engine values become wire values through the leaf
//! [`crate::wire_conv`]; the hub never imports from `crate::api` (which spawns it).

use crate::market::Market;
use crate::sequencer::{Committed, SequencerHandle};
use crate::wire_conv::{
    access_view, close_reason_dto, end_reason_dto, gpu_indexes, hold_dto, kind_dto, launch_request,
    maker_dto, notice_reason_dto, price_str,
};
use exchange::{Event, Level, LevelKey, NodeId, Output, RegionId, SkuId};
use gpux_wire::ws::{InventoryDelta, InventorySnapshot, ServerMsg};
use gpux_wire::{AccessView, LevelView};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

/// Messages one connection's outbox holds before the connection counts as slow.
pub const OUTBOX: usize = 512;
/// A connection whose outbox stays full this long is closed, ms.
pub const SLOW_CONSUMER_CLOSE_MS: u64 = 5_000;
/// Capacity of the hub's command channel.
pub const HUB_QUEUE: usize = 4096;
/// Most inventory subscriptions one connection may hold.
pub const MAX_SUBSCRIPTIONS: usize = 64;
/// Fills the public tape keeps (issue 25: "the last N fills"), all SKUs together; the oldest
/// is dropped when a new one comes.
pub const RECENT_FILLS: usize = 50;

/// A connection id (unique per process).
pub type ConnId = u64;

/// A text message for a client: one encoded [`ServerMsg`], shared between clients.
pub type OutMsg = Arc<str>;

/// Encodes a server message once, for every outbox that gets it.
///
/// # Panics
/// Never for a `ServerMsg`: its maps are keyed by strings or integers and its numbers are
/// integers, so JSON encoding cannot fail.
pub fn encode(m: &ServerMsg) -> OutMsg {
    serde_json::to_string(m)
        .expect("a ServerMsg always encodes as JSON")
        .into()
}

/// Where the hub sends a connection's messages, and how it closes the connection.
#[derive(Clone)]
pub struct Outbox {
    /// Messages.
    pub tx: mpsc::Sender<OutMsg>,
    /// Set to a reason to close the connection.
    pub close: watch::Sender<Option<String>>,
}

/// A subscription key: SKU and optional region name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Topic {
    /// SKU.
    pub sku: SkuId,
    /// Region name filter.
    pub region: Option<String>,
}

enum HubMsg {
    Connect {
        conn: ConnId,
        account: Option<u64>,
        /// Only this node's supplier events (a node key's connection).
        node: Option<NodeId>,
        out: Outbox,
    },
    Disconnect(ConnId),
    Subscribe {
        conn: ConnId,
        topic: Topic,
        reply: oneshot::Sender<Result<(), &'static str>>,
    },
    Unsubscribe {
        conn: ConnId,
        topic: Topic,
    },
    Snapshot {
        topic: Topic,
        reply: oneshot::Sender<(u64, OutMsg)>,
    },
    Stats(oneshot::Sender<FeedStats>),
    RecentFills {
        sku: Option<SkuId>,
        reply: oneshot::Sender<Vec<OutMsg>>,
    },
}

/// Counters for metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct FeedStats {
    /// Connected clients.
    pub connections: usize,
    /// Inventory subscriptions.
    pub subscriptions: usize,
    /// Last committed sequence number the hub has published.
    pub published_seq: u64,
    /// Snapshots built (not per client: once per SKU/region/sequence number).
    pub snapshots_built: u64,
    /// Resyncs sent to slow consumers.
    pub resyncs: u64,
    /// Connections closed as slow consumers.
    pub slow_closed: u64,
}

/// Handle to the hub.
#[derive(Clone)]
pub struct FeedHandle {
    tx: mpsc::Sender<HubMsg>,
    next_conn: Arc<std::sync::atomic::AtomicU64>,
}

impl FeedHandle {
    /// Registers a connection (with the buyer account whose private events it gets).
    pub async fn connect(&self, account: Option<u64>, out: Outbox) -> ConnId {
        self.connect_filtered(account, None, out).await
    }

    /// Registers a node key's connection: the supplier events of `node` only (issue 16).
    pub async fn connect_node(&self, supplier: u64, node: NodeId, out: Outbox) -> ConnId {
        self.connect_filtered(Some(supplier), Some(node), out).await
    }

    async fn connect_filtered(
        &self,
        account: Option<u64>,
        node: Option<NodeId>,
        out: Outbox,
    ) -> ConnId {
        let conn = self
            .next_conn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _ = self
            .tx
            .send(HubMsg::Connect {
                conn,
                account,
                node,
                out,
            })
            .await;
        conn
    }

    /// Forgets a connection.
    pub async fn disconnect(&self, conn: ConnId) {
        let _ = self.tx.send(HubMsg::Disconnect(conn)).await;
    }

    /// Subscribes a connection to a topic; the snapshot arrives in its outbox.
    ///
    /// # Errors
    /// `too_many_subscriptions`, `unknown_connection`, `feed_stopped`.
    pub async fn subscribe(&self, conn: ConnId, topic: Topic) -> Result<(), &'static str> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(HubMsg::Subscribe { conn, topic, reply })
            .await
            .map_err(|_| "feed_stopped")?;
        rx.await.map_err(|_| "feed_stopped")?
    }

    /// Ends a subscription.
    pub async fn unsubscribe(&self, conn: ConnId, topic: Topic) {
        let _ = self.tx.send(HubMsg::Unsubscribe { conn, topic }).await;
    }

    /// The current snapshot message of a topic and its sequence number (for REST).
    pub async fn snapshot(&self, topic: Topic) -> Option<(u64, OutMsg)> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(HubMsg::Snapshot { topic, reply }).await.ok()?;
        rx.await.ok()
    }

    /// The public tape's `trade` messages (of `sku`, or of every SKU), newest first, at most
    /// [`RECENT_FILLS`].
    pub async fn recent_fills(&self, sku: Option<SkuId>) -> Option<Vec<OutMsg>> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(HubMsg::RecentFills { sku, reply })
            .await
            .ok()?;
        rx.await.ok()
    }

    /// Counters.
    pub async fn stats(&self) -> Option<FeedStats> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(HubMsg::Stats(reply)).await.ok()?;
        rx.await.ok()
    }
}

/// What the hub mirrors of the market, read once at start (and after falling behind).
struct Mirror {
    seq: u64,
    levels: BTreeMap<LevelKey, Level>,
    market_seq: HashMap<SkuId, u64>,
    regions: Vec<String>,
    skus: Vec<String>,
    bid_buyer: HashMap<exchange::BidId, u64>,
    /// Live lease → (buyer, supplier) accounts and its node, to route events that name only
    /// the lease.
    lease_parties: HashMap<exchange::LeaseId, (u64, u64, NodeId)>,
    /// Gang → its member leases by rank (docs/market-rules.md §13), to route gang events to
    /// the supplier's member nodes.
    gangs: HashMap<exchange::BidId, Vec<exchange::LeaseId>>,
    /// Gang member lease → its gang.
    gang_lease: HashMap<exchange::LeaseId, exchange::BidId>,
}

fn mirror_of(m: &Market, seq: u64) -> Mirror {
    let e = m.engine();
    let mut regions = Vec::new();
    let mut i = 0u16;
    while let Some(r) = e.region_name(RegionId(i)) {
        regions.push(r.to_string());
        i += 1;
    }
    let skus: Vec<String> = e.catalog().iter().map(|(_, s)| s.id.clone()).collect();
    Mirror {
        seq,
        levels: e.inventory().into_iter().collect(),
        market_seq: e
            .catalog()
            .iter()
            .map(|(id, _)| (id, e.market_seq(id)))
            .collect(),
        regions,
        skus,
        bid_buyer: e.bids().map(|b| (b.id, b.buyer.0)).collect(),
        lease_parties: e
            .leases()
            .map(|l| (l.id, (l.buyer.0, l.supplier.0, l.node)))
            .collect(),
        gangs: e
            .gangs()
            .map(|(b, g)| (b, g.members.iter().filter_map(|m| m.lease).collect()))
            .collect(),
        gang_lease: e
            .gangs()
            .flat_map(|(b, g)| g.members.iter().filter_map(move |m| Some((m.lease?, b))))
            .collect(),
    }
}

struct Sub {
    /// Waiting for room to send a fresh snapshot.
    resync: bool,
}

struct Conn {
    account: Option<u64>,
    /// A node key's connection: only this node's supplier events.
    node: Option<NodeId>,
    out: Outbox,
    subs: HashMap<Topic, Sub>,
    /// When the outbox was first found full (ms on the hub's monotonic clock).
    full_since: Option<std::time::Instant>,
}

struct Hub {
    seq: SequencerHandle,
    rx: mpsc::Receiver<HubMsg>,
    mirror: Mirror,
    conns: HashMap<ConnId, Conn>,
    by_account: HashMap<u64, Vec<ConnId>>,
    by_sku: HashMap<SkuId, Vec<ConnId>>,
    /// (topic) → (market seq, message): built once per sequence number.
    snapshots: HashMap<Topic, (u64, OutMsg)>,
    stats: FeedStats,
    /// Leases that ended in the commit being processed: forgotten after it, because a
    /// failover's migration event follows the end of the lease it replaces.
    ended: Vec<exchange::LeaseId>,
    /// The public tape: the last [`RECENT_FILLS`] `trade` messages with their SKU, oldest first.
    tape: std::collections::VecDeque<(SkuId, OutMsg)>,
}

/// Starts the hub: subscribes to committed commands first, then reads the market's state, so
/// nothing committed between the two is missed.
///
/// # Errors
/// The sequencer has stopped.
pub async fn spawn(seq: SequencerHandle) -> Result<FeedHandle, crate::sequencer::SequencerError> {
    let events = seq.subscribe();
    let mirror = seq.read(mirror_of).await?;
    let (tx, rx) = mpsc::channel(HUB_QUEUE);
    let hub = Hub {
        seq,
        rx,
        mirror,
        conns: HashMap::new(),
        by_account: HashMap::new(),
        by_sku: HashMap::new(),
        snapshots: HashMap::new(),
        stats: FeedStats::default(),
        ended: Vec::new(),
        tape: std::collections::VecDeque::with_capacity(RECENT_FILLS),
    };
    tokio::spawn(hub.run(events));
    Ok(FeedHandle {
        tx,
        next_conn: Arc::new(std::sync::atomic::AtomicU64::new(1)),
    })
}

impl Hub {
    async fn run(mut self, mut events: broadcast::Receiver<Arc<Committed>>) {
        let mut sweep = tokio::time::interval(std::time::Duration::from_millis(100));
        loop {
            tokio::select! {
                biased;
                c = events.recv() => match c {
                    Ok(c) => self.on_commit(&c).await,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "feed hub fell behind; resyncing everyone");
                        self.resync_all().await;
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                m = self.rx.recv() => match m {
                    Some(m) => self.on_msg(m),
                    None => break,
                },
                _ = sweep.tick() => self.retry_resyncs(),
            }
        }
    }

    fn on_msg(&mut self, m: HubMsg) {
        match m {
            HubMsg::Connect {
                conn,
                account,
                node,
                out,
            } => {
                if let Some(a) = account {
                    self.by_account.entry(a).or_default().push(conn);
                }
                self.stats.connections += 1;
                self.conns.insert(
                    conn,
                    Conn {
                        account,
                        node,
                        out,
                        subs: HashMap::new(),
                        full_since: None,
                    },
                );
            }
            HubMsg::Disconnect(conn) => self.drop_conn(conn),
            HubMsg::Subscribe { conn, topic, reply } => {
                let r = self.subscribe(conn, topic);
                let _ = reply.send(r);
            }
            HubMsg::Unsubscribe { conn, topic } => {
                if let Some(c) = self.conns.get_mut(&conn)
                    && c.subs.remove(&topic).is_some()
                {
                    self.stats.subscriptions -= 1;
                    if !c.subs.keys().any(|t| t.sku == topic.sku)
                        && let Some(v) = self.by_sku.get_mut(&topic.sku)
                    {
                        v.retain(|x| *x != conn);
                    }
                }
            }
            HubMsg::Snapshot { topic, reply } => {
                let s = self.snapshot(&topic, false);
                let _ = reply.send(s);
            }
            HubMsg::Stats(reply) => {
                let mut s = self.stats;
                s.published_seq = self.mirror.seq;
                let _ = reply.send(s);
            }
            HubMsg::RecentFills { sku, reply } => {
                let fills = self
                    .tape
                    .iter()
                    .rev()
                    .filter(|(s, _)| sku.is_none_or(|x| x == *s))
                    .map(|(_, m)| m.clone())
                    .collect();
                let _ = reply.send(fills);
            }
        }
    }

    fn drop_conn(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.remove(&conn) {
            self.stats.connections -= 1;
            self.stats.subscriptions -= c.subs.len();
            if let Some(a) = c.account
                && let Some(v) = self.by_account.get_mut(&a)
            {
                v.retain(|x| *x != conn);
                if v.is_empty() {
                    self.by_account.remove(&a);
                }
            }
            for t in c.subs.keys() {
                if let Some(v) = self.by_sku.get_mut(&t.sku) {
                    v.retain(|x| *x != conn);
                }
            }
        }
    }

    fn subscribe(&mut self, conn: ConnId, topic: Topic) -> Result<(), &'static str> {
        let Some(c) = self.conns.get(&conn) else {
            return Err("unknown_connection");
        };
        if c.subs.contains_key(&topic) {
            return Err("already_subscribed");
        }
        if c.subs.len() >= MAX_SUBSCRIPTIONS {
            return Err("too_many_subscriptions");
        }
        let (_, msg) = self.snapshot(&topic, false);
        let Some(c) = self.conns.get_mut(&conn) else {
            return Err("unknown_connection");
        };
        let resync = c.out.tx.try_send(msg).is_err();
        if !c.subs.keys().any(|t| t.sku == topic.sku) {
            self.by_sku.entry(topic.sku).or_default().push(conn);
        }
        c.subs.insert(topic, Sub { resync });
        self.stats.subscriptions += 1;
        Ok(())
    }

    /// The snapshot message of a topic at the mirror's current SKU sequence number.
    fn snapshot(&mut self, topic: &Topic, resync: bool) -> (u64, OutMsg) {
        let seq = self.mirror.market_seq.get(&topic.sku).copied().unwrap_or(0);
        if !resync
            && let Some((s, m)) = self.snapshots.get(topic)
            && *s == seq
        {
            return (seq, m.clone());
        }
        let region_id = topic
            .region
            .as_ref()
            .map(|r| self.mirror.regions.iter().position(|x| x == r));
        let levels: Vec<LevelView> = self
            .mirror
            .levels
            .iter()
            .filter(|(k, _)| k.sku == topic.sku)
            .filter(|(k, _)| match region_id {
                None => true,
                Some(None) => false,
                Some(Some(r)) => usize::from(k.region.0) == r,
            })
            .map(|(k, l)| self.level_view(k, l))
            .collect();
        let msg = encode(&ServerMsg::InventorySnapshot(InventorySnapshot {
            sku: self.sku_name(topic.sku).to_string(),
            region: topic.region.clone(),
            seq,
            commit_seq: self.mirror.seq,
            resync,
            levels,
        }));
        self.stats.snapshots_built += 1;
        if !resync {
            self.snapshots.insert(topic.clone(), (seq, msg.clone()));
        }
        (seq, msg)
    }

    fn sku_name(&self, sku: SkuId) -> &str {
        self.mirror
            .skus
            .get(usize::from(sku.0))
            .map_or("", String::as_str)
    }

    fn region_name(&self, r: RegionId) -> &str {
        self.mirror
            .regions
            .get(usize::from(r.0))
            .map_or("", String::as_str)
    }

    fn level_view(&self, k: &LevelKey, l: &Level) -> LevelView {
        LevelView {
            region: self.region_name(k.region).to_string(),
            kind: kind_dto(k.kind),
            price: price_str(k.price),
            free_gpus: l.free_gpus,
            max_single_node: l.max_single_node,
            // The engine's deltas do not count verified capacity: only `GET /v1/inventory`
            // carries it (counted from the market at the request).
            verified_free_gpus: None,
        }
    }

    /// Region names only grow; learn new ones from the market when a delta names one.
    async fn learn_regions(&mut self, outputs: &[Output]) {
        let max = outputs
            .iter()
            .flat_map(|o| o.deltas.iter().map(|d| usize::from(d.region.0)))
            .max();
        if let Some(max) = max
            && max >= self.mirror.regions.len()
            && let Ok(regions) = self
                .seq
                .read(|m, _| {
                    let mut v = Vec::new();
                    let mut i = 0u16;
                    while let Some(r) = m.engine().region_name(RegionId(i)) {
                        v.push(r.to_string());
                        i += 1;
                    }
                    v
                })
                .await
        {
            self.mirror.regions = regions;
        }
    }

    async fn on_commit(&mut self, c: &Committed) {
        if c.seq <= self.mirror.seq {
            return; // already in the mirror's starting state
        }
        self.mirror.seq = c.seq;
        self.learn_regions(&c.outcome.engine).await;
        // Inventory: per SKU, the deltas of this commit.
        let mut by_sku: BTreeMap<SkuId, Vec<&exchange::InventoryDelta>> = BTreeMap::new();
        for o in &c.outcome.engine {
            for d in &o.deltas {
                by_sku.entry(d.sku).or_default().push(d);
            }
        }
        let mut sends: Vec<(ConnId, OutMsg, Option<Topic>)> = Vec::new();
        let published_at_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        for (sku, deltas) in &by_sku {
            let first = deltas.iter().map(|d| d.market_seq).min().unwrap_or(0);
            for d in deltas {
                let key = LevelKey {
                    sku: d.sku,
                    region: d.region,
                    kind: d.kind,
                    price: d.price,
                };
                if d.free_gpus == 0 {
                    self.mirror.levels.remove(&key);
                } else {
                    self.mirror.levels.insert(
                        key,
                        Level {
                            free_gpus: d.free_gpus,
                            max_single_node: d.max_single_node,
                        },
                    );
                }
            }
            let last = deltas.iter().map(|d| d.market_seq).max().unwrap_or(first);
            self.mirror.market_seq.insert(*sku, last);
            let Some(conns) = self.by_sku.get(sku) else {
                continue;
            };
            // One message per distinct region filter, shared by the clients that use it.
            let mut built: HashMap<Option<String>, OutMsg> = HashMap::new();
            for conn in conns {
                let Some(cn) = self.conns.get(conn) else {
                    continue;
                };
                for (topic, sub) in &cn.subs {
                    if topic.sku != *sku || sub.resync {
                        continue;
                    }
                    let msg = built
                        .entry(topic.region.clone())
                        .or_insert_with(|| {
                            let levels: Vec<LevelView> = deltas
                                .iter()
                                .filter(|d| {
                                    topic
                                        .region
                                        .as_deref()
                                        .is_none_or(|r| self.region_name(d.region) == r)
                                })
                                .map(|d| {
                                    self.level_view(
                                        &LevelKey {
                                            sku: d.sku,
                                            region: d.region,
                                            kind: d.kind,
                                            price: d.price,
                                        },
                                        &Level {
                                            free_gpus: d.free_gpus,
                                            max_single_node: d.max_single_node,
                                        },
                                    )
                                })
                                .collect();
                            encode(&ServerMsg::InventoryDelta(InventoryDelta {
                                sku: self.sku_name(*sku).to_string(),
                                region: topic.region.clone(),
                                first_seq: first,
                                last_seq: last,
                                commit_seq: c.seq,
                                committed_at_ms: c.timestamp_ms,
                                published_at_us,
                                levels,
                            }))
                        })
                        .clone();
                    sends.push((*conn, msg, Some(topic.clone())));
                }
            }
        }
        // Public trade tape: every lease that starts, without who bought or sold, to the
        // subscribers of its SKU (and region).
        for o in &c.outcome.engine {
            for e in &o.events {
                let Event::LeaseStarted {
                    sku,
                    region,
                    kind,
                    gpus,
                    price,
                    start_ms,
                    ..
                } = e
                else {
                    continue;
                };
                let region_name = self.region_name(*region).to_string();
                let msg = encode(&ServerMsg::Trade {
                    seq: c.seq,
                    sku: self.sku_name(*sku).to_string(),
                    region: region_name.clone(),
                    kind: kind_dto(*kind),
                    gpus: *gpus,
                    price: price_str(*price),
                    start_ms: *start_ms,
                });
                if self.tape.len() == RECENT_FILLS {
                    self.tape.pop_front();
                }
                self.tape.push_back((*sku, msg.clone()));
                let Some(conns) = self.by_sku.get(sku) else {
                    continue;
                };
                for conn in conns {
                    let Some(cn) = self.conns.get(conn) else {
                        continue;
                    };
                    if let Some(t) = cn.subs.keys().find(|t| {
                        t.sku == *sku && t.region.as_deref().is_none_or(|r| r == region_name)
                    }) {
                        sends.push((*conn, msg.clone(), Some(t.clone())));
                    }
                }
            }
        }
        // Private events: each buyer's own, and each supplier's for its nodes (a node key's
        // connection: for its node only).
        for o in &c.outcome.engine {
            for e in &o.events {
                for (account, node, msg) in self.private_events(c, e) {
                    if let Some(conns) = self.by_account.get(&account) {
                        for conn in conns {
                            let filter = self.conns.get(conn).and_then(|cn| cn.node);
                            if filter.is_none_or(|f| node == Some(f)) {
                                sends.push((*conn, msg.clone(), None));
                            }
                        }
                    }
                }
            }
        }
        // Gang events (issue 27): the buyer's, and the supplier's for the gang's nodes (a node
        // key's connection: when its node is one of them; an account's: once).
        for o in &c.outcome.engine {
            for e in &o.events {
                let Some((buyer, supplier, nodes, msg)) = self.gang_event(c.seq, e) else {
                    continue;
                };
                let mut msg_bytes: Option<OutMsg> = None;
                for (account, nodes) in [(buyer, None), (supplier, Some(&nodes))] {
                    let Some(conns) = self.by_account.get(&account) else {
                        continue;
                    };
                    for conn in conns {
                        let filter = self.conns.get(conn).and_then(|cn| cn.node);
                        let wanted = match (filter, nodes) {
                            (None, _) => true,
                            (Some(f), Some(ns)) => ns.contains(&f),
                            (Some(_), None) => false,
                        };
                        if wanted {
                            let bytes = msg_bytes.get_or_insert_with(|| encode(&msg));
                            sends.push((*conn, bytes.clone(), None));
                        }
                    }
                }
            }
        }
        // A running lease's corrected access details reach its buyer (no engine event: the
        // engine takes a repeated ready report as a no-op).
        if let Some(lease) = c.outcome.access_changed
            && let Some((buyer, _, _)) = self.mirror.lease_parties.get(&lease)
            && let Some(conns) = self.by_account.get(buyer)
        {
            let msg = encode(&ServerMsg::LeaseAccessChanged {
                seq: c.seq,
                lease_id: lease.0.to_string(),
                access: ready_access(c, lease),
            });
            for conn in conns {
                sends.push((*conn, msg.clone(), None));
            }
        }
        for lease in std::mem::take(&mut self.ended) {
            self.mirror.lease_parties.remove(&lease);
            if let Some(bid) = self.mirror.gang_lease.remove(&lease) {
                let m = &mut self.mirror;
                let live = m
                    .gangs
                    .get(&bid)
                    .is_some_and(|ls| ls.iter().any(|l| m.lease_parties.contains_key(l)));
                if !live && let Some(ls) = m.gangs.remove(&bid) {
                    for l in ls {
                        m.gang_lease.remove(&l);
                    }
                }
            }
        }
        for (conn, msg, topic) in sends {
            self.deliver(conn, msg, topic);
        }
    }

    /// Tries to put a message in a connection's outbox; inventory that does not fit turns
    /// into a resync, a private event that does not fit closes the connection.
    fn deliver(&mut self, conn: ConnId, msg: OutMsg, topic: Option<Topic>) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if let Some(t) = &topic
            && c.subs.get(t).is_none_or(|s| s.resync)
        {
            return;
        }
        match c.out.tx.try_send(msg) {
            Ok(()) => c.full_since = None,
            Err(mpsc::error::TrySendError::Closed(_)) => self.drop_conn(conn),
            Err(mpsc::error::TrySendError::Full(_)) => {
                c.full_since.get_or_insert_with(std::time::Instant::now);
                match topic {
                    Some(t) => {
                        if let Some(s) = c.subs.get_mut(&t) {
                            s.resync = true;
                        }
                    }
                    None => self.close_slow(conn),
                }
            }
        }
    }

    fn close_slow(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get(&conn) {
            let _ = c.out.close.send(Some("slow_consumer".into()));
            self.stats.slow_closed += 1;
        }
        self.drop_conn(conn);
    }

    /// Sends fresh snapshots to subscriptions waiting for room; closes connections whose
    /// outbox stayed full too long.
    fn retry_resyncs(&mut self) {
        let waiting: Vec<(ConnId, Topic)> = self
            .conns
            .iter()
            .flat_map(|(id, c)| {
                c.subs
                    .iter()
                    .filter(|(_, s)| s.resync)
                    .map(move |(t, _)| (*id, t.clone()))
            })
            .collect();
        for (conn, topic) in waiting {
            let Some(c) = self.conns.get(&conn) else {
                continue;
            };
            if c.out.tx.capacity() == 0 {
                if c.full_since.is_some_and(|t| {
                    t.elapsed() > std::time::Duration::from_millis(SLOW_CONSUMER_CLOSE_MS)
                }) {
                    self.close_slow(conn);
                }
                continue;
            }
            let (_, msg) = self.snapshot(&topic, true);
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            if c.out.tx.try_send(msg).is_ok() {
                c.full_since = None;
                if let Some(s) = c.subs.get_mut(&topic) {
                    s.resync = false;
                }
                self.stats.resyncs += 1;
            }
        }
    }

    /// After falling behind the broadcast: re-read the market, resync every subscription and
    /// close connections that get private events (those cannot be recovered from a snapshot).
    async fn resync_all(&mut self) {
        if let Ok(m) = self.seq.read(mirror_of).await {
            self.mirror = m;
        }
        self.snapshots.clear();
        let account_conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.account.is_some())
            .map(|(id, _)| *id)
            .collect();
        for conn in account_conns {
            if let Some(c) = self.conns.get(&conn) {
                let _ = c.out.close.send(Some("server_lagged".into()));
            }
            self.drop_conn(conn);
        }
        for c in self.conns.values_mut() {
            for s in c.subs.values_mut() {
                s.resync = true;
            }
        }
        self.retry_resyncs();
    }

    /// Every account a private event goes to, with the node it concerns (supplier events)
    /// and its message: the buyer's trading and delivery events, and the supplier's delivery
    /// events for its nodes (issue 15). Built only for accounts with a connection.
    fn private_events(&mut self, c: &Committed, e: &Event) -> Vec<(u64, Option<NodeId>, OutMsg)> {
        let mut msgs = Vec::new();
        // The supplier's side first: `lease_ended` must reach it before the mirror forgets.
        if let Some((a, node, m)) = self.supplier_event(c, e) {
            msgs.push((a, Some(node), m));
        }
        if let Some((a, m)) = self.delivery_buyer_event(c, e) {
            msgs.push((a, None, m));
        }
        if let Some((a, m)) = self.buyer_event(c, e) {
            msgs.push((a, None, m));
        }
        // Buyer and supplier often get the same message (ready, ended, torn down, overdue):
        // encode it once and share the bytes, like every other feed message.
        let mut out: Vec<(u64, Option<NodeId>, OutMsg)> = Vec::with_capacity(msgs.len());
        for (i, (a, node, m)) in msgs.iter().enumerate() {
            let bytes = match msgs[..i].iter().position(|(_, _, prev)| prev == m) {
                Some(j) => out[j].2.clone(),
                None => encode(m),
            };
            out.push((*a, *node, bytes));
        }
        out
    }

    /// What a supplier's node agent acts on: assignments (with the launch spec), notices,
    /// ends, wipes, holds; with the node each concerns.
    fn supplier_event(&self, c: &Committed, e: &Event) -> Option<(u64, NodeId, ServerMsg)> {
        let seq = c.seq;
        let (supplier, node_of, m) = match e {
            Event::ProvisionStarted {
                lease,
                supplier,
                node,
                deadline_ms,
                ..
            } => {
                if !self.by_account.contains_key(&supplier.0) {
                    return None;
                }
                let launch = c
                    .outcome
                    .assignments
                    .iter()
                    .find(|(l, _)| l == lease)
                    .map(|(_, s)| launch_request(s));
                (
                    supplier.0,
                    *node,
                    ServerMsg::LeaseAssigned {
                        seq,
                        lease_id: lease.0.to_string(),
                        node_id: node.0.to_string(),
                        deadline_ms: Some(*deadline_ms),
                        launch,
                    },
                )
            }
            Event::PreemptionNotice {
                lease,
                deadline_ms,
                reason,
                ..
            } => {
                let (_, supplier, node) = *self.mirror.lease_parties.get(lease)?;
                (
                    supplier,
                    node,
                    ServerMsg::LeaseNotice {
                        seq,
                        lease_id: lease.0.to_string(),
                        deadline_ms: *deadline_ms,
                        reason: notice_reason_dto(*reason),
                    },
                )
            }
            Event::LeaseEnded {
                lease,
                reason,
                at_ms,
                ..
            } => {
                let (_, supplier, node) = *self.mirror.lease_parties.get(lease)?;
                (
                    supplier,
                    node,
                    ServerMsg::LeaseEnded {
                        seq,
                        lease_id: lease.0.to_string(),
                        reason: end_reason_dto(*reason),
                        at_ms: *at_ms,
                    },
                )
            }
            Event::LeaseWiping {
                lease,
                supplier,
                node,
                gpu_mask,
                deadline_ms,
                ..
            } => (
                supplier.0,
                *node,
                ServerMsg::LeaseWiping {
                    seq,
                    lease_id: lease.0.to_string(),
                    node_id: Some(node.0.to_string()),
                    gpu_indexes: Some(gpu_indexes(*gpu_mask)),
                    deadline_ms: *deadline_ms,
                },
            ),
            Event::LeaseReady {
                lease,
                supplier,
                node,
                at_ms,
                ..
            } => (
                supplier.0,
                *node,
                ServerMsg::LeaseReady {
                    seq,
                    lease_id: lease.0.to_string(),
                    at_ms: *at_ms,
                    access: ready_access(c, *lease),
                },
            ),
            Event::LeaseWiped {
                lease,
                supplier,
                node,
                ..
            } => (supplier.0, *node, torn_down(c, *lease)),
            Event::TeardownOverdue {
                lease,
                supplier,
                node,
                ..
            } => (
                supplier.0,
                *node,
                ServerMsg::TeardownOverdue {
                    seq,
                    lease_id: lease.0.to_string(),
                },
            ),
            Event::NodeHeld {
                node,
                supplier,
                reason,
            } => (
                supplier.0,
                *node,
                ServerMsg::NodeHeld {
                    seq,
                    node_id: node.0.to_string(),
                    reason: hold_dto(*reason),
                },
            ),
            Event::NodeResumed { node, supplier } => (
                supplier.0,
                *node,
                ServerMsg::NodeResumed {
                    request_id: None,
                    node: None,
                    seq: Some(seq),
                    node_id: Some(node.0.to_string()),
                },
            ),
            _ => return None,
        };
        self.by_account
            .contains_key(&supplier)
            .then_some((supplier, node_of, m))
    }

    /// A gang event (docs/market-rules.md §13) with its buyer, its supplier and the gang's
    /// nodes; keeps the mirror's gangs (formed, a member replaced by a failover).
    fn gang_event(&mut self, seq: u64, e: &Event) -> Option<(u64, u64, Vec<NodeId>, ServerMsg)> {
        let m = &mut self.mirror;
        if let Event::LeaseMigrated { from, to } = e
            && let Some(bid) = m.gang_lease.get(from).copied()
        {
            if let Some(ls) = m.gangs.get_mut(&bid) {
                ls.push(*to);
            }
            m.gang_lease.insert(*to, bid);
            return None;
        }
        let bid = match e {
            Event::GangFormed { bid, members, .. } => {
                m.gangs.insert(*bid, members.clone());
                for l in members {
                    m.gang_lease.insert(*l, *bid);
                }
                *bid
            }
            Event::GangMemberReady { bid, .. }
            | Event::GangReady { bid, .. }
            | Event::GangFailed { bid, .. }
            | Event::GangDegraded { bid, .. } => *bid,
            _ => return None,
        };
        let members = m.gangs.get(&bid)?;
        let parties: Vec<(u64, u64, NodeId)> = members
            .iter()
            .filter_map(|l| m.lease_parties.get(l).copied())
            .collect();
        let (buyer, supplier, _) = *parties.first()?;
        let mut nodes: Vec<NodeId> = parties.iter().map(|p| p.2).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let bid_id = bid.0.to_string();
        let msg = match e {
            Event::GangFormed { members, .. } => ServerMsg::GangFormed {
                seq,
                bid_id,
                members: members.iter().map(|l| l.0.to_string()).collect(),
            },
            Event::GangMemberReady { lease, at_ms, .. } => ServerMsg::GangMemberReady {
                seq,
                bid_id,
                lease_id: lease.0.to_string(),
                at_ms: *at_ms,
            },
            Event::GangReady { at_ms, .. } => ServerMsg::GangReady {
                seq,
                bid_id,
                at_ms: *at_ms,
            },
            Event::GangFailed { lost, .. } => ServerMsg::GangFailed {
                seq,
                bid_id,
                lost_lease_id: lost.0.to_string(),
            },
            Event::GangDegraded { lost, live, .. } => ServerMsg::GangDegraded {
                seq,
                bid_id,
                lost_lease_id: lost.0.to_string(),
                live: *live,
            },
            _ => return None,
        };
        Some((buyer, supplier, nodes, msg))
    }

    /// A buyer's delivery events: provisioning began, ready (with the access details and the
    /// SSH command), wiping, torn down (the deletion record), teardown overdue.
    fn delivery_buyer_event(&self, c: &Committed, e: &Event) -> Option<(u64, ServerMsg)> {
        let seq = c.seq;
        let (buyer, m) = match e {
            Event::ProvisionStarted {
                lease,
                buyer,
                node,
                deadline_ms,
                ..
            } => (
                buyer.0,
                ServerMsg::LeaseProvisioning {
                    seq,
                    lease_id: lease.0.to_string(),
                    node_id: node.0.to_string(),
                    deadline_ms: Some(*deadline_ms),
                },
            ),
            Event::LeaseReady {
                lease,
                buyer,
                at_ms,
                ..
            } => (
                buyer.0,
                ServerMsg::LeaseReady {
                    seq,
                    lease_id: lease.0.to_string(),
                    at_ms: *at_ms,
                    access: ready_access(c, *lease),
                },
            ),
            Event::LeaseWiping {
                lease,
                buyer,
                deadline_ms,
                ..
            } => (
                buyer.0,
                ServerMsg::LeaseWiping {
                    seq,
                    lease_id: lease.0.to_string(),
                    node_id: None,
                    gpu_indexes: None,
                    deadline_ms: *deadline_ms,
                },
            ),
            Event::LeaseWiped { lease, buyer, .. } => (buyer.0, torn_down(c, *lease)),
            Event::TeardownOverdue { lease, buyer, .. } => (
                buyer.0,
                ServerMsg::TeardownOverdue {
                    seq,
                    lease_id: lease.0.to_string(),
                },
            ),
            _ => return None,
        };
        self.by_account.contains_key(&buyer).then_some((buyer, m))
    }

    /// The buyer a trading event belongs to and its message (built only when that buyer has
    /// a connection: the hub shares the sequencer's thread).
    fn buyer_event(&mut self, c: &Committed, e: &Event) -> Option<(u64, ServerMsg)> {
        let m = &mut self.mirror;
        let buyer = match e {
            Event::BidAccepted { bid, buyer } => {
                m.bid_buyer.insert(*bid, buyer.0);
                return None;
            }
            Event::Fill {
                lease,
                buyer,
                supplier,
                node,
                ..
            } => {
                m.lease_parties.insert(*lease, (buyer.0, supplier.0, *node));
                buyer.0
            }
            Event::LeaseStarted { buyer, .. } => buyer.0,
            Event::LeaseEnded { lease, buyer, .. } => {
                self.ended.push(*lease);
                buyer.0
            }
            Event::PreemptionNotice { lease, .. }
            | Event::LeaseMigrated { from: lease, .. }
            | Event::FailoverFailed { lease, .. } => m.lease_parties.get(lease)?.0,
            Event::BidRested { bid, .. } => *m.bid_buyer.get(bid)?,
            Event::BidClosed { bid, .. } => m.bid_buyer.remove(bid)?,
            _ => return None,
        };
        if !self.by_account.contains_key(&buyer) {
            return None;
        }
        Some((buyer, self.trading_msg(c.seq, e, op_bid_shape(&c.op))?))
    }

    /// The buyer's message of a trading event.
    fn trading_msg(
        &self,
        seq: u64,
        e: &Event,
        shape: Option<(exchange::Placement, Option<u32>)>,
    ) -> Option<ServerMsg> {
        Some(match e {
            Event::Fill {
                bid,
                lease,
                offer,
                node,
                gpus,
                price,
                kind,
                maker,
                start_ms,
                end_ms,
                ..
            } => ServerMsg::Fill {
                seq,
                bid_id: bid.0.to_string(),
                lease_id: lease.0.to_string(),
                offer_id: offer.0.to_string(),
                node_id: node.0.to_string(),
                gpus: *gpus,
                price: price_str(*price),
                kind: kind_dto(*kind),
                maker: maker_dto(*maker),
                start_ms: *start_ms,
                end_ms: *end_ms,
            },
            Event::LeaseStarted {
                lease,
                bid,
                node,
                sku,
                region,
                kind,
                gpus,
                gpu_mask,
                price,
                start_ms,
                end_ms,
                ..
            } => ServerMsg::LeaseStarted {
                seq,
                lease_id: lease.0.to_string(),
                bid_id: bid.0.to_string(),
                node_id: node.0.to_string(),
                sku: self.sku_name(*sku).to_string(),
                region: self.region_name(*region).to_string(),
                kind: kind_dto(*kind),
                gpus: *gpus,
                gpu_indexes: gpu_indexes(*gpu_mask),
                price: price_str(*price),
                start_ms: *start_ms,
                end_ms: *end_ms,
            },
            Event::PreemptionNotice {
                lease,
                by,
                deadline_ms,
                reason,
            } => ServerMsg::PreemptionNotice {
                seq,
                lease_id: lease.0.to_string(),
                by_lease_id: by.map(|b| b.0.to_string()),
                deadline_ms: *deadline_ms,
                reason: notice_reason_dto(*reason),
            },
            Event::LeaseEnded {
                lease,
                reason,
                at_ms,
                ..
            } => ServerMsg::LeaseEnded {
                seq,
                lease_id: lease.0.to_string(),
                reason: end_reason_dto(*reason),
                at_ms: *at_ms,
            },
            Event::LeaseMigrated { from, to } => ServerMsg::LeaseMigrated {
                seq,
                from_lease_id: from.0.to_string(),
                to_lease_id: to.0.to_string(),
            },
            Event::FailoverFailed {
                lease,
                gpus,
                reason,
                detail,
            } => ServerMsg::FailoverFailed {
                seq,
                lease_id: lease.0.to_string(),
                gpus: *gpus,
                reason: close_reason_dto(*reason),
                detail: crate::wire_conv::close_detail_view(*reason, *detail),
            },
            Event::BidRested { bid, remaining } => ServerMsg::BidRested {
                seq,
                bid_id: bid.0.to_string(),
                remaining: *remaining,
            },
            Event::BidClosed {
                bid,
                filled,
                unfilled,
                reason,
                detail,
            } => ServerMsg::BidClosed {
                seq,
                bid_id: bid.0.to_string(),
                filled: *filled,
                unfilled: *unfilled,
                reason: close_reason_dto(*reason),
                detail: crate::wire_conv::close_detail_view_for(*reason, *detail, shape),
            },
            _ => return None,
        })
    }
}

/// The placement and `min_gpus` of the bid an operation places, if it places one (for the
/// close message of a gang or a `min_gpus` bid, issue 27).
pub(crate) fn op_bid_shape(op: &crate::market::Op) -> Option<(exchange::Placement, Option<u32>)> {
    use crate::market::Op;
    match op {
        Op::Engine(exchange::Command::PlaceBid { bid, .. })
        | Op::PlaceBid { bid, .. }
        | Op::PlaceTrustBid { bid, .. } => Some((bid.placement, bid.min_gpus)),
        Op::Audited { op, .. } => op_bid_shape(op),
        _ => None,
    }
}

/// The access details a commit's ready report gave `lease`, as the websocket shows them.
fn ready_access(c: &Committed, lease: exchange::LeaseId) -> Option<AccessView> {
    match &c.op {
        crate::market::Op::Report(crate::delivery::Report::Ready {
            lease: l, access, ..
        }) if *l == lease.0 => Some(access_view(access)),
        _ => None,
    }
}

/// `lease_torn_down` (buyer's and supplier's copy alike): when and how, as the commit's
/// torn-down report gave it.
fn torn_down(c: &Committed, lease: exchange::LeaseId) -> ServerMsg {
    let method = match &c.op {
        crate::market::Op::Report(crate::delivery::Report::TornDown {
            lease: l, method, ..
        }) if *l == lease.0 => Some(method.clone()),
        _ => None,
    };
    ServerMsg::LeaseTornDown {
        seq: c.seq,
        lease_id: lease.0.to_string(),
        at_ms: c.timestamp_ms,
        method,
    }
}
