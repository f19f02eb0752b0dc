//! The websocket protocol at `/v1/ws` (subprotocol `gpux.v1`; docs/api.md §4): client
//! messages ([`ClientMsg`]) and server messages ([`ServerMsg`]), each a JSON object tagged by
//! `type`. Replies to a client message echo its `request_id`; feed messages carry the journal
//! sequence number (`seq`) of the command that caused them.
//!
//! Inventory: a subscription starts with an [`InventorySnapshot`] at `seq`; each
//! [`InventoryDelta`] then covers `first_seq..=last_seq` and its `first_seq` is the previous
//! message's `seq`/`last_seq` + 1. A gap means the view is stale: resubscribe (or wait for the
//! server's own resync snapshot, `resync: true`).

use crate::enums::{CloseReasonDto, EndReasonDto, HoldReasonDto, KindDto, Role};
use crate::launch::{AccessRequest, LaunchRequest};
use crate::requests::BidRequest;
use crate::scalar::IdStr;
use crate::views::{
    AccessView, BalanceView, BidCanceled, BidPlaced, BidsCanceled, LeaseReleased, LeaseView,
    LevelView, NodeView,
};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

/// A client message.
// One message is decoded per websocket frame and dropped after it is handled: the bid
// variant's size (its constraints grew with issue 26's trust fields) costs nothing a box
// would save.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientMsg {
    /// Place a bid (buyers); answered `bid_accepted`.
    PlaceBid {
        /// Echoed in the reply.
        request_id: Option<String>,
        /// The bid.
        bid: BidRequest,
    },
    /// Cancel a resting bid; answered `bid_canceled`.
    CancelBid {
        /// Echoed.
        request_id: Option<String>,
        /// Bid id.
        bid_id: IdStr,
    },
    /// Cancel every resting bid of the account; answered `bids_canceled`.
    CancelAll {
        /// Echoed.
        request_id: Option<String>,
    },
    /// Release a lease now; answered `lease_released`.
    ReleaseLease {
        /// Echoed.
        request_id: Option<String>,
        /// Lease id.
        lease_id: IdStr,
    },
    /// Subscribe to a SKU's inventory (optionally one region); answered `subscribed`, then an
    /// `inventory_snapshot` and deltas.
    Subscribe {
        /// Echoed.
        request_id: Option<String>,
        /// SKU id.
        sku: String,
        /// Region filter.
        region: Option<String>,
    },
    /// End a subscription; answered `unsubscribed`.
    Unsubscribe {
        /// Echoed.
        request_id: Option<String>,
        /// SKU id.
        sku: String,
        /// Region filter (as subscribed).
        region: Option<String>,
    },
    /// Balance and runway now; answered `balance`.
    GetBalance {
        /// Echoed.
        request_id: Option<String>,
    },
    /// Liveness; answered `pong`.
    Ping {
        /// Echoed.
        request_id: Option<String>,
    },
    /// A supplier reports a lease of its node ready (answered `lease_reported` with the lease).
    ReportReady {
        /// Echoed.
        request_id: Option<String>,
        /// Lease id.
        lease_id: IdStr,
        /// How the buyer gets in.
        access: AccessRequest,
    },
    /// A supplier reports a lease of its node not deliverable.
    ReportFailed {
        /// Echoed.
        request_id: Option<String>,
        /// Lease id.
        lease_id: IdStr,
        /// Why.
        reason: String,
        /// Whose side the failure is on (default `node`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<crate::FailureCauseDto>,
    },
    /// A supplier reports that its node lost a running lease's workload (issue 25).
    ReportLost {
        /// Echoed.
        request_id: Option<String>,
        /// Lease id.
        lease_id: IdStr,
        /// What happened.
        reason: String,
    },
    /// A supplier reports an ended lease's GPUs wiped.
    ReportTornDown {
        /// Echoed.
        request_id: Option<String>,
        /// Lease id.
        lease_id: IdStr,
        /// How.
        method: String,
    },
    /// A supplier puts a held node back on the market (answered `node_resumed`).
    ResumeNode {
        /// Echoed.
        request_id: Option<String>,
        /// Node id.
        node_id: IdStr,
    },
}

/// The connection's limits, as the `welcome` message states them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WsLimits {
    /// Largest frame a client may send, bytes.
    pub max_frame_bytes: usize,
    /// Commands in flight at once.
    pub max_inflight: usize,
    /// Messages the server queues for the connection before it resyncs or closes it.
    pub outbox: usize,
    /// Subscriptions per connection.
    pub max_subscriptions: usize,
}

/// A SKU's inventory at `seq` (a subscription's first message, a resync, or
/// `GET /v1/inventory`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct InventorySnapshot {
    /// SKU id.
    pub sku: String,
    /// Region filter of the subscription (absent: every region).
    pub region: Option<String>,
    /// The snapshot includes every command up to this sequence number.
    pub seq: u64,
    /// The last command the hub had seen when it built the snapshot.
    pub commit_seq: u64,
    /// Sent by the server because the connection fell behind (its outbox filled).
    pub resync: bool,
    /// Every level with free GPUs.
    pub levels: Vec<LevelView>,
}

/// Changed levels of a SKU's inventory over `first_seq..=last_seq`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct InventoryDelta {
    /// SKU id.
    pub sku: String,
    /// Region filter of the subscription.
    pub region: Option<String>,
    /// First sequence number covered (the previous message's last + 1).
    pub first_seq: u64,
    /// Last sequence number covered.
    pub last_seq: u64,
    /// The command that published it.
    pub commit_seq: u64,
    /// When that command was committed, ms since epoch.
    pub committed_at_ms: i64,
    /// When the hub published it, µs since epoch (feed lag = receive time − this).
    pub published_at_us: i64,
    /// Changed levels (free 0: the level is gone).
    pub levels: Vec<LevelView>,
}

/// Why a preemptible lease got notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NoticeReasonDto {
    /// A higher bid takes the GPUs.
    Preempted,
    /// The offer was withdrawn or shrunk.
    OfferWithdrawn,
}

/// Which side's price a fill took.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MakerDto {
    /// The offer was the maker (the bid paid the offer's price).
    Offer,
    /// The bid was the maker (it paid its own limit).
    Bid,
}

/// A server message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    /// First message of every connection.
    Welcome {
        /// The key's account (absent: anonymous, inventory only).
        account_id: Option<String>,
        /// The key's role.
        role: Option<Role>,
        /// A node key's node name (absent: an account key).
        node_name: Option<String>,
        /// A node key's node id, once registered (its delivery events only reach the
        /// connection).
        node_id: Option<String>,
        /// Resting GTC bids of this connection are canceled when it closes.
        cancel_on_disconnect: bool,
        /// The connection's limits.
        limits: WsLimits,
    },
    /// A client message failed (the error envelope without `request_id` of the HTTP layer).
    Rejected {
        /// The client message's `request_id`.
        request_id: Option<String>,
        /// Machine-readable code.
        code: String,
        /// Human message.
        message: String,
        /// The offending field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        field: Option<String>,
        /// Seconds to wait (rate limited).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_s: Option<u64>,
    },
    /// A subscription's inventory.
    InventorySnapshot(InventorySnapshot),
    /// A subscription's changed levels.
    InventoryDelta(InventoryDelta),
    /// A fill on a subscribed SKU (the public trade tape).
    Trade {
        /// Sequence number.
        seq: u64,
        /// SKU id.
        sku: String,
        /// Region.
        region: String,
        /// Spot or preemptible.
        kind: KindDto,
        /// GPUs.
        gpus: u32,
        /// Price, CNY per GPU-hour.
        price: String,
        /// Lease start, ms since epoch.
        start_ms: i64,
    },
    /// Reply to `subscribe`.
    Subscribed {
        /// Echoed.
        #[serde(default)]
        request_id: Option<String>,
        /// SKU id.
        sku: String,
        /// Region filter.
        region: Option<String>,
    },
    /// Reply to `unsubscribe`.
    Unsubscribed {
        /// Echoed.
        #[serde(default)]
        request_id: Option<String>,
        /// SKU id.
        sku: String,
        /// Region filter.
        region: Option<String>,
    },
    /// Reply to `place_bid`.
    BidAccepted {
        /// Echoed.
        #[serde(default)]
        request_id: Option<String>,
        /// What the bid did.
        #[serde(flatten)]
        bid: BidPlaced,
    },
    /// Reply to `cancel_bid`.
    BidCanceled {
        /// Echoed.
        #[serde(default)]
        request_id: Option<String>,
        /// The cancel.
        #[serde(flatten)]
        cancel: BidCanceled,
    },
    /// Reply to `cancel_all`.
    BidsCanceled {
        /// Echoed.
        #[serde(default)]
        request_id: Option<String>,
        /// The cancels.
        #[serde(flatten)]
        cancel: BidsCanceled,
    },
    /// Reply to `release_lease`.
    LeaseReleased {
        /// Echoed.
        #[serde(default)]
        request_id: Option<String>,
        /// The release.
        #[serde(flatten)]
        release: LeaseReleased,
    },
    /// Reply to `get_balance`, and pushed to buyers every 5 s when it changed.
    Balance {
        /// A reply: `Some` (the echoed id, `null` when the client sent none); a push: `None`
        /// (the field is absent).
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "reply_id"
        )]
        request_id: Option<Option<String>>,
        /// The balance.
        #[serde(flatten)]
        balance: BalanceView,
    },
    /// Reply to `ping`.
    Pong {
        /// Echoed.
        #[serde(default)]
        request_id: Option<String>,
        /// Server time, ms since epoch.
        at_ms: i64,
    },
    /// Reply to a supplier's report: the lease after it.
    LeaseReported {
        /// Echoed.
        #[serde(default)]
        request_id: Option<String>,
        /// The lease.
        #[serde(deserialize_with = "via_json")]
        lease: Box<LeaseView>,
    },
    /// Reply to `resume_node` (with `node`), or a supplier's feed event (with `seq` and
    /// `node_id`): the node is back on the market.
    NodeResumed {
        /// A reply: `Some` (the echoed id, `null` when the client sent none); an event: `None`
        /// (the field is absent).
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "reply_id"
        )]
        request_id: Option<Option<String>>,
        /// The node (replies).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<Box<NodeView>>,
        /// Sequence number (events).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
        /// Node id (events).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node_id: Option<String>,
    },
    /// Buyer: a bid of this account filled.
    Fill {
        /// Sequence number.
        seq: u64,
        /// Bid id.
        bid_id: String,
        /// The lease made.
        lease_id: String,
        /// The offer filled.
        offer_id: String,
        /// Node.
        node_id: String,
        /// GPUs.
        gpus: u32,
        /// Price, CNY per GPU-hour.
        price: String,
        /// Spot or preemptible.
        kind: KindDto,
        /// Whose price.
        maker: MakerDto,
        /// Start, ms since epoch.
        start_ms: i64,
        /// Scheduled end, ms since epoch.
        end_ms: i64,
    },
    /// Buyer: a lease's GPUs became its.
    LeaseStarted {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
        /// Bid id.
        bid_id: String,
        /// Node.
        node_id: String,
        /// SKU.
        sku: String,
        /// Region.
        region: String,
        /// Spot or preemptible.
        kind: KindDto,
        /// GPUs.
        gpus: u32,
        /// The node's GPU indexes.
        gpu_indexes: Vec<u32>,
        /// Price, CNY per GPU-hour.
        price: String,
        /// Start, ms since epoch.
        start_ms: i64,
        /// Scheduled end, ms since epoch.
        end_ms: i64,
    },
    /// Buyer: a preemptible lease got notice.
    PreemptionNotice {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
        /// The lease taking the GPUs (absent: offer withdrawn).
        by_lease_id: Option<String>,
        /// The lease ends then, ms since epoch.
        deadline_ms: i64,
        /// Why.
        reason: NoticeReasonDto,
    },
    /// Buyer and supplier: a lease ended.
    LeaseEnded {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
        /// Why.
        reason: EndReasonDto,
        /// Billing end, ms since epoch.
        at_ms: i64,
    },
    /// Buyer: a failover moved a lease.
    LeaseMigrated {
        /// Sequence number.
        seq: u64,
        /// The failed lease.
        from_lease_id: String,
        /// Its replacement.
        to_lease_id: String,
    },
    /// Buyer: a failover could not place some GPUs.
    FailoverFailed {
        /// Sequence number.
        seq: u64,
        /// The failed lease.
        lease_id: String,
        /// GPUs not placed.
        gpus: u32,
        /// Why.
        reason: CloseReasonDto,
        /// The best price or the excluding constraint, and a message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<crate::views::CloseDetailView>,
    },
    /// Buyer: a bid rests.
    BidRested {
        /// Sequence number.
        seq: u64,
        /// Bid id.
        bid_id: String,
        /// GPUs resting.
        remaining: u32,
    },
    /// Buyer: a bid closed.
    BidClosed {
        /// Sequence number.
        seq: u64,
        /// Bid id.
        bid_id: String,
        /// GPUs filled over its life.
        filled: u32,
        /// GPUs never filled.
        unfilled: u32,
        /// Why.
        reason: CloseReasonDto,
        /// For an IOC remainder: the best price or the excluding constraint, and a message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<crate::views::CloseDetailView>,
    },
    /// Supplier: a lease was assigned to the node: provision it.
    LeaseAssigned {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
        /// Node.
        node_id: String,
        /// Report ready by then, ms since epoch (absent while the GPUs are still wiping).
        deadline_ms: Option<i64>,
        /// What to run.
        launch: Option<LaunchRequest>,
    },
    /// Supplier: a lease on the node got notice.
    LeaseNotice {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
        /// It ends then, ms since epoch.
        deadline_ms: i64,
        /// Why.
        reason: NoticeReasonDto,
    },
    /// Buyer: the supplier's node is setting the lease up (not billed).
    LeaseProvisioning {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
        /// Node.
        node_id: String,
        /// Ready by then or it fails over, ms since epoch.
        deadline_ms: Option<i64>,
    },
    /// Buyer and supplier: the lease is running (billing starts).
    LeaseReady {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
        /// Ready (billing start), ms since epoch.
        at_ms: i64,
        /// How to get in.
        #[serde(default, deserialize_with = "via_json")]
        access: Option<AccessView>,
    },
    /// Buyer: the supplier corrected a running lease's access details (a repeated ready
    /// report with other details; issue 25): use these from now on.
    LeaseAccessChanged {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
        /// How to get in now.
        #[serde(default, deserialize_with = "via_json")]
        access: Option<AccessView>,
    },
    /// Buyer and supplier: an ended lease's GPUs are being wiped (supplier: wipe and report).
    LeaseWiping {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
        /// Node (supplier's copy).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node_id: Option<String>,
        /// The node's GPU indexes to wipe (supplier's copy).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpu_indexes: Option<Vec<u32>>,
        /// Report torn down by then, ms since epoch.
        deadline_ms: i64,
    },
    /// Buyer and supplier: the wipe is recorded (the buyer's deletion record).
    LeaseTornDown {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
        /// Recorded at, ms since epoch.
        at_ms: i64,
        /// How, as the supplier reported it.
        method: Option<String>,
    },
    /// Buyer and supplier: no wipe report by the deadline.
    TeardownOverdue {
        /// Sequence number.
        seq: u64,
        /// Lease id.
        lease_id: String,
    },
    /// Buyer and supplier: a gang filled whole (docs/market-rules.md §13.2): its member
    /// leases in rank order (after their `fill` and `lease_started`).
    GangFormed {
        /// Sequence number.
        seq: u64,
        /// The gang's id (its bid's).
        bid_id: String,
        /// Member leases; index = rank.
        members: Vec<String>,
    },
    /// Buyer and supplier: a gang member was reported ready and waits, unbilled, for the rest
    /// (§13.3).
    GangMemberReady {
        /// Sequence number.
        seq: u64,
        /// The gang.
        bid_id: String,
        /// The member.
        lease_id: String,
        /// Ready time, ms since epoch.
        at_ms: i64,
    },
    /// Buyer and supplier: every member is ready; all bill from `at_ms` (`lease_ready` for
    /// each follows).
    GangReady {
        /// Sequence number.
        seq: u64,
        /// The gang.
        bid_id: String,
        /// Ready (billing start), ms since epoch.
        at_ms: i64,
    },
    /// Buyer and supplier: the gang could not be delivered whole; its other members end
    /// `not_delivered`, never charged (§13.3).
    GangFailed {
        /// Sequence number.
        seq: u64,
        /// The gang.
        bid_id: String,
        /// The member whose loss failed it.
        lost_lease_id: String,
    },
    /// Buyer and supplier: a running gang lost a member nothing could replace and runs on
    /// with the rest (`on_member_loss: keep`, §13.4).
    GangDegraded {
        /// Sequence number.
        seq: u64,
        /// The gang.
        bid_id: String,
        /// The lost member.
        lost_lease_id: String,
        /// Members still live.
        live: u32,
    },
    /// Supplier: the node is held off the market until resumed.
    NodeHeld {
        /// Sequence number.
        seq: u64,
        /// Node.
        node_id: String,
        /// Why.
        reason: HoldReasonDto,
    },
}

/// Deserializes a field through `serde_json::Value`. Inside an internally tagged enum serde
/// buffers a message's fields first, and a buffered map key (the `"8888"` of
/// [`AccessView::urls`]) no longer parses as the `u16` it stands for; `serde_json::Value`'s
/// own deserializer parses it.
fn via_json<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<T, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    serde_json::from_value(v).map_err(serde::de::Error::custom)
}

/// The `request_id` of a message that is either a reply or a push: present (a string or
/// `null`) → `Some`; absent → `None` (through `#[serde(default)]`).
fn reply_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_messages_round_trip_with_their_type_tag() {
        let m: ServerMsg = serde_json::from_str(
            r#"{"type":"inventory_delta","sku":"H100-80G","region":null,"first_seq":5,
               "last_seq":7,"commit_seq":7,"committed_at_ms":1,"published_at_us":2,
               "levels":[{"region":"cn-east-2","kind":"spot","price":"18.0000","free_gpus":3,
               "max_single_node":3}]}"#,
        )
        .unwrap();
        let ServerMsg::InventoryDelta(d) = &m else {
            panic!("{m:?}")
        };
        assert_eq!((d.first_seq, d.last_seq, d.levels[0].free_gpus), (5, 7, 3));
        let back = serde_json::to_value(&m).unwrap();
        assert_eq!(back["type"], "inventory_delta");
        let b: ServerMsg = serde_json::from_str(
            r#"{"type":"bid_accepted","request_id":"r1","bid_id":"9","client_order_id":"c",
               "seq":3,"status":"resting","filled_gpus":0,"remaining_gpus":2,
               "close_reason":null,"fills":[]}"#,
        )
        .unwrap();
        let ServerMsg::BidAccepted { request_id, bid } = b else {
            panic!()
        };
        assert_eq!(request_id.as_deref(), Some("r1"));
        assert_eq!(bid.remaining_gpus, 2);
    }

    #[test]
    fn access_urls_keyed_by_port_survive_the_type_tag() {
        let json = r#"{"type":"lease_ready","seq":13,"lease_id":"4","at_ms":1,
            "access":{"ssh_host":"h","ssh_port":2222,"ssh_user":"root",
            "urls":{"8888":"https://l1-8888.example"},"ssh_command":"ssh -p 2222 root@h"}}"#;
        let m: ServerMsg = serde_json::from_str(json).unwrap();
        let ServerMsg::LeaseReady { access, .. } = &m else {
            panic!("{m:?}")
        };
        let urls = &access.as_ref().unwrap().urls;
        assert_eq!(urls[&8888], "https://l1-8888.example");
        let back = serde_json::to_value(&m).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(json).unwrap()
        );
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(serde_json::from_value::<ServerMsg>(v).unwrap(), m);
    }

    #[test]
    fn replies_keep_a_null_request_id_and_pushes_have_none() {
        let balance = r#"{"type":"balance","account_id":"7","balance":"1.00",
            "available":"1.00","held_by_bids":"0.00","burn_rate_per_hour":"0.0000",
            "runway_s":null"#;
        for (json, id) in [
            (format!("{balance}}}"), None),
            (format!("{balance},\"request_id\":null}}"), Some(None)),
            (
                format!("{balance},\"request_id\":\"b\"}}"),
                Some(Some("b".to_string())),
            ),
        ] {
            let m: ServerMsg = serde_json::from_str(&json).unwrap();
            let ServerMsg::Balance { request_id, .. } = &m else {
                panic!("{m:?}")
            };
            assert_eq!(request_id, &id, "{json}");
            let back = serde_json::to_value(&m).unwrap();
            let sent: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(back, sent);
        }
    }

    #[test]
    fn client_messages_refuse_unknown_fields() {
        let ok = r#"{"type":"ping","request_id":"x"}"#;
        assert!(serde_json::from_str::<ClientMsg>(ok).is_ok());
        let bad = r#"{"type":"ping","request_id":"x","extra":1}"#;
        assert!(serde_json::from_str::<ClientMsg>(bad).is_err());
    }
}
