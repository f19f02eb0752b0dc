//! Data-driven scenario tests: every `tests/scenarios/*.scn` script is run through a fresh
//! engine and its expectations (events, deltas, book, nodes) are compared line by line. All
//! failing scenarios are reported with a diff before the test fails.
//!
//! Expectations in the scripts are derived by hand from docs/market-rules.md, never copied from
//! the engine.
//!
//! # Script format
//!
//! One statement a line; `#` at the start of a line or after a blank starts a comment.
//! Scenario time 0 is 2026-01-01T00:00:00Z; all times are written and shown in seconds
//! relative to it (`15s`, `15.001s`). Durations take an optional unit: `s`, `m`, `h`, `d`.
//!
//! Directives:
//! - `at T` — time of the following commands: absolute (`at 30`, `at 15.001`) or relative
//!   (`at +5s`).
//! - `seq N` — the next command is applied with sequence number N (later ones N+1, …); by
//!   default each command takes the next number, starting at 1.
//! - `config delivery=on|off [teardown=DUR] [heartbeat_timeout=DUR]` — the `EngineConfig` of
//!   this script's engine (default: `EngineConfig::default()`, delivery off, so §1–10 alone);
//!   only before the first command. `teardown` sets `teardown_timeout_ms` (§11.4),
//!   `heartbeat_timeout` sets `heartbeat_timeout_ms` (§2).
//!
//! Commands (accounts, nodes, bids and leases are names; an unknown name becomes a bogus id):
//! - `register ACCT NODE SKU [gpus=8] [region=cn-east-2] [jur=CN] [fabric=roce] [nvlink]
//!   [domain=NAME] [nic=GBPS]`
//! - `update ACCT NODE [region=R] [jur=J] [fabric=F] [nvlink=on|off] [draining=on|off]
//!   [domain=NAME|none] [nic=GBPS]` — `fabric` is the interconnect; `domain`/`nic` the node's
//!   fabric record (§13.1: `domain=none` alone is an empty record, which clears it)
//! - `heartbeat ACCT NODE [healthy=N]` (default: all the node's GPUs)
//! - `offer ACCT NODE [gpus=all] spot=P [pre=P] [min=0] [max=1d] [until=+7d] [notice=0]
//!   [provision=180] [sla=AVAIL_BP/MULTIPLE]` (with `sla`: `PostOfferSla`, §12.4)
//! - `amend ACCT NODE [gpus=..] [spot=..] [pre=P|none] [min=..] [max=..] [until=..]
//!   [notice=..] [provision=..]` — fields not given keep the offer's current terms
//! - `withdraw ACCT NODE`
//! - `bid ACCT COID SKU gpus=N limit=P [spot|pre] [single|spread] [gtc|ioc] [dur=S]
//!   [expires=T] [regions=a,b] [jurs=CN,US] [fabric=F] [nvlink] [verified] [minrel=BP]
//!   [minsla=AVAIL_BP/MULTIPLE] [gang=NxG [scope=domain|region] [loss=keep|end_all]]
//!   [min=N]` (defaults: spot, single, gtc, open-ended, a gang domain-scoped with `keep`; any of
//!   `verified`, `minrel`, `minsla`: `PlaceTrustBid`, §12; `gang`: §13.2; `min`: `min_gpus`,
//!   §13.5)
//! - `cancel ACCT COID` (`cancel ACCT OWNER:COID` for another account's bid), `release ACCT
//!   LEASE`, `release_bid ACCT COID` (`ReleaseBid`, §13.6; `OWNER:COID` as for cancel),
//!   `unfunded LEASE`, `tick`
//! - `resume_exchange` — `Command::Resume`: the time since the previous command was an outage
//!   of the exchange (§2, §11.9)
//! - lease delivery (§11): `ready ACCT LEASE` (`ReportReady`), `failed ACCT LEASE`
//!   (`ReportFailed`), `launch_failed ACCT LEASE` (`ReportLaunchFailed`), `lost ACCT LEASE`
//!   (`ReportLost`), `torn_down ACCT LEASE`
//!   (`ReportTornDown`), `resume ACCT NODE` (`ResumeNode`)
//!
//! Blocks (header line, then indented lines), checking the state after the last command:
//! - `expect` — exactly the events, then the inventory deltas, of the last command.
//! - `book` — resting bids, live leases, wipes and inventory levels, in id / level order. A
//!   lease's state is `pending`, `active` (with delivery: `active ready=T`), `provisioning
//!   deadline=T`, `provisioning waiting` (for a wipe of its GPUs) or `provisioning ready (gang)`
//!   (a gang member reported ready, waiting for the rest, §13.3); a wipe is `wipe LEASE NODE
//!   mask=M deadline=T`.
//! - `nodes` — every node; with delivery, ` wiping=M` (GPUs of ended leases not yet torn down)
//!   and ` held=REASON` when they apply.
//!
//! A command without an `expect` block must not be rejected. `check_invariants` runs after
//! every command.
//!
//! # Rendering
//! Offers are named after their node (`n1`; a node's second offer is `n1/2`), bids by client
//! order id, leases `L1`, `L2`, … in order of first appearance in events. Fields that repeat
//! what is already known (a lease's terms at its start, the buyer of a bid, an offer's terms
//! as posted) are checked by the harness and shown only when they differ, as `!field=value`.
//! The delivery events render as `provision_started L1 deadline=T`, `lease_ready L1 at=T`,
//! `lease_wiping L1 NODE mask=M deadline=T`, `lease_wiped L1`, `teardown_overdue L1`,
//! `node_held NODE REASON` and `node_resumed NODE`; their lease's node, buyer and supplier are
//! checked against its fill (and `!node=`, `!buyer=`, `!supplier=` shown when they differ).
//! The gang events (§13) render as `gang_formed BID SUPPLIER L1,L2`, `gang_member_ready BID L1
//! at=T`, `gang_ready BID at=T`, `gang_failed BID lost=L1` and `gang_degraded BID lost=L1
//! live=N` (`!buyer=` when the buyer is not the bid's); a close's `fillable` (§13.2, §13.5) as
//! ` fillable=N`.

use exchange::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Scenario time 0: 2026-01-01T00:00:00Z, in ms since the Unix epoch.
const BASE_MS: i64 = 1_767_225_600_000;
/// Id used for names the script never created.
const BOGUS: u64 = 999_999_999;

fn fmt_time(abs_ms: i64) -> String {
    let rel = abs_ms - BASE_MS;
    let sign = if rel < 0 { "-" } else { "" };
    let a = rel.unsigned_abs();
    if a.is_multiple_of(1000) {
        format!("{sign}{}s", a / 1000)
    } else {
        format!("{sign}{}.{:03}s", a / 1000, a % 1000)
    }
}

fn fmt_mask(mask: u32) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < 32 {
        if mask & (1 << i) != 0 {
            let start = i;
            while i + 1 < 32 && mask & (1 << (i + 1)) != 0 {
                i += 1;
            }
            parts.push(if start == i {
                format!("{start}")
            } else {
                format!("{start}-{i}")
            });
        }
        i += 1;
    }
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(",")
    }
}

fn fmt_kind(k: LeaseKind) -> &'static str {
    match k {
        LeaseKind::Spot => "spot",
        LeaseKind::Preemptible => "pre",
    }
}

fn fmt_fabric(f: Interconnect) -> &'static str {
    match f {
        Interconnect::Pcie => "pcie",
        Interconnect::Roce => "roce",
        Interconnect::Infiniband => "infiniband",
    }
}

/// ` best=P` and ` excluded_by=X` when present (§4.1).
fn fmt_detail(d: &CloseDetail) -> String {
    let mut s = String::new();
    if let Some(p) = d.best_price {
        let _ = write!(s, " best={p}");
    }
    if let Some(x) = d.excluded_by {
        let name = match x {
            Exclusion::NodeUnavailable => "node_unavailable",
            Exclusion::SelfTrade => "self_trade",
            Exclusion::Region => "region",
            Exclusion::Jurisdiction => "jurisdiction",
            Exclusion::Interconnect => "interconnect",
            Exclusion::Nvlink => "nvlink",
            Exclusion::Trust => "trust",
            Exclusion::Term => "term",
            Exclusion::FabricDomain => "fabric_domain",
        };
        let _ = write!(s, " excluded_by={name}");
    }
    if let Some(n) = d.fillable {
        let _ = write!(s, " fillable={n}");
    }
    s
}

fn close_reason(r: BidCloseReason) -> &'static str {
    match r {
        BidCloseReason::Term => "term",
        BidCloseReason::OwnLease => "own_lease",
        BidCloseReason::Filled => "filled",
        BidCloseReason::NoCapacity => "no_capacity",
        BidCloseReason::Price => "price",
        BidCloseReason::Constraints => "constraints",
        BidCloseReason::Canceled => "canceled",
        BidCloseReason::Expired => "expired",
        BidCloseReason::InsufficientFunds => "insufficient_funds",
        BidCloseReason::Trust => "trust",
        BidCloseReason::MinGpus => "min_gpus",
        BidCloseReason::GangIncomplete => "gang_incomplete",
        BidCloseReason::GangTooLarge => "gang_too_large",
    }
}

fn end_reason(r: EndReason) -> &'static str {
    match r {
        EndReason::Released => "released",
        EndReason::Expired => "expired",
        EndReason::Preempted => "preempted",
        EndReason::NodeFailure => "node_failure",
        EndReason::OfferWithdrawn => "offer_withdrawn",
        EndReason::InsufficientFunds => "insufficient_funds",
        EndReason::NotDelivered => "not_delivered",
        EndReason::GangEnded => "gang_ended",
    }
}

fn hold_reason(r: HoldReason) -> &'static str {
    match r {
        HoldReason::NotDelivered => "not_delivered",
        HoldReason::TeardownOverdue => "teardown_overdue",
        HoldReason::Attestation => "attestation",
        HoldReason::DuplicateGpu => "duplicate_gpu",
        HoldReason::VerificationFailed => "verification_failed",
    }
}

fn notice_reason(r: NoticeReason) -> &'static str {
    match r {
        NoticeReason::Preempted => "preempted",
        NoticeReason::OfferWithdrawn => "offer_withdrawn",
    }
}

/// `[domain=NAME|none] [nic=GBPS]` (§13.1): the node's fabric record; `domain=none` alone is an
/// empty record (on an update: clears it).
fn parse_node_fabric(a: &mut Args) -> Result<Option<NodeFabric>, String> {
    let domain = a.opt("domain");
    let nic = a.opt("nic");
    if domain.is_none() && nic.is_none() {
        return Ok(None);
    }
    Ok(Some(NodeFabric {
        domain: domain.filter(|d| d != "none"),
        nic_gbps: nic
            .map(|v| v.parse().map_err(|e| format!("nic: {e}")))
            .transpose()?,
    }))
}

/// `22.5` → 225000 ticks.
/// `AVAIL_BP/MULTIPLE`, e.g. `9950/10`.
fn parse_sla(v: &str) -> Result<(u32, u16), String> {
    let (a, m) = v
        .split_once('/')
        .ok_or_else(|| format!("sla `{v}`: AVAIL_BP/MULTIPLE"))?;
    Ok((
        a.parse().map_err(|e| format!("sla availability: {e}"))?,
        m.parse().map_err(|e| format!("sla multiple: {e}"))?,
    ))
}

fn parse_price(s: &str) -> Result<Price, String> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 4 || int.is_empty() {
        return Err(format!("bad price {s:?}"));
    }
    let i: i64 = int.parse().map_err(|_| format!("bad price {s:?}"))?;
    let f: i64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<4}")
            .parse()
            .map_err(|_| format!("bad price {s:?}"))?
    };
    Price::from_ticks(i * 10_000 + f).map_err(|e| format!("bad price {s:?}: {e}"))
}

/// `90`, `1.5s`, `15.001`, `30m`, `2h`, `1d` → ms (a leading `-` negates).
fn parse_dur_ms(s: &str) -> Result<i64, String> {
    if let Some(rest) = s.strip_prefix('-') {
        return parse_dur_ms(rest).map(|v| -v);
    }
    let (num, mult) = match s.as_bytes().last() {
        Some(b's') => (&s[..s.len() - 1], 1_000),
        Some(b'm') => (&s[..s.len() - 1], 60_000),
        Some(b'h') => (&s[..s.len() - 1], 3_600_000),
        Some(b'd') => (&s[..s.len() - 1], 86_400_000),
        _ => (s, 1_000),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if frac.len() > 3 {
        return Err(format!("bad duration {s:?}"));
    }
    let i: i64 = int.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let f: i64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<3}")
            .parse()
            .map_err(|_| format!("bad duration {s:?}"))?
    };
    Ok(i * mult + f * mult / 1000)
}

fn parse_secs(s: &str) -> Result<u64, String> {
    let ms = parse_dur_ms(s)?;
    if ms < 0 || ms % 1000 != 0 {
        return Err(format!("bad whole seconds {s:?}"));
    }
    Ok((ms / 1000) as u64)
}

fn parse_onoff(s: &str) -> Result<bool, String> {
    match s {
        "on" | "yes" | "true" => Ok(true),
        "off" | "no" | "false" => Ok(false),
        _ => Err(format!("expected on/off, got {s:?}")),
    }
}

fn parse_fabric(s: &str) -> Result<Interconnect, String> {
    match s {
        "pcie" => Ok(Interconnect::Pcie),
        "roce" => Ok(Interconnect::Roce),
        "infiniband" | "ib" => Ok(Interconnect::Infiniband),
        _ => Err(format!("unknown fabric {s:?}")),
    }
}

/// Any two bytes (so invalid ones can be sent on purpose).
fn parse_jur(s: &str) -> Result<Jurisdiction, String> {
    let b = s.as_bytes();
    if b.len() != 2 {
        return Err(format!("jurisdiction must be 2 bytes: {s:?}"));
    }
    Ok(Jurisdiction([b[0], b[1]]))
}

/// Splits on blanks, keeping `"quoted strings"` (which may be empty) as one token.
fn tokenize(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut tok = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() {
                break;
            }
            chars.next();
            if c == '"' {
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some(c) => tok.push(c),
                        None => return Err("unterminated quote".to_string()),
                    }
                }
            } else {
                tok.push(c);
            }
        }
        out.push(tok);
    }
    Ok(out)
}

fn strip_comment(line: &str) -> &str {
    let mut prev_blank = true;
    for (i, c) in line.char_indices() {
        if c == '#' && prev_blank {
            return line[..i].trim_end();
        }
        prev_blank = c.is_whitespace();
    }
    line.trim_end()
}

/// Positional arguments, `key=value` options and bare flags of one command line.
struct Args {
    pos: Vec<String>,
    opts: BTreeMap<String, String>,
    flags: Vec<String>,
}

impl Args {
    fn parse(tokens: &[String], n_pos: usize) -> Result<Args, String> {
        if tokens.len() < n_pos {
            return Err(format!("expected {n_pos} positional arguments"));
        }
        let mut a = Args {
            pos: tokens[..n_pos].to_vec(),
            opts: BTreeMap::new(),
            flags: Vec::new(),
        };
        for t in &tokens[n_pos..] {
            match t.split_once('=') {
                Some((k, v)) => {
                    a.opts.insert(k.to_string(), v.to_string());
                }
                None => a.flags.push(t.clone()),
            }
        }
        Ok(a)
    }
    fn opt(&mut self, k: &str) -> Option<String> {
        self.opts.remove(k)
    }
    fn flag(&mut self, f: &str) -> bool {
        let had = self.flags.iter().any(|x| x == f);
        self.flags.retain(|x| x != f);
        had
    }
    fn finish(self) -> Result<(), String> {
        if self.opts.is_empty() && self.flags.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "unknown options {:?} / flags {:?}",
                self.opts.keys().collect::<Vec<_>>(),
                self.flags
            ))
        }
    }
}

/// What a fill said about a lease, to check its `LeaseStarted` against.
struct FillInfo {
    bid: BidId,
    buyer: AccountId,
    supplier: AccountId,
    node: NodeId,
    sku: SkuId,
    region: RegionId,
    kind: LeaseKind,
    gpus: u32,
    price: Price,
    start_ms: i64,
    end_ms: i64,
}

/// What the command being applied will name.
enum Pending {
    None,
    Register {
        name: String,
        account: AccountId,
        spec: NodeSpec,
    },
    Post {
        node: String,
        terms: OfferTerms,
    },
    Amend {
        terms: OfferTerms,
    },
    Bid {
        account: AccountId,
        coid: String,
    },
}

struct Runner {
    engine: Engine,
    now_rel_ms: i64,
    next_seq: u64,
    accounts: BTreeMap<String, AccountId>,
    account_names: BTreeMap<AccountId, String>,
    nodes: BTreeMap<String, NodeId>,
    node_names: BTreeMap<NodeId, String>,
    node_owner: BTreeMap<NodeId, AccountId>,
    node_specs: BTreeMap<NodeId, NodeSpec>,
    offers: BTreeMap<String, OfferId>,
    offer_names: BTreeMap<OfferId, String>,
    offer_count: BTreeMap<String, u32>,
    offer_terms: BTreeMap<OfferId, OfferTerms>,
    bids: BTreeMap<(AccountId, String), BidId>,
    bid_names: BTreeMap<BidId, String>,
    bid_buyer: BTreeMap<BidId, AccountId>,
    leases: BTreeMap<String, LeaseId>,
    lease_names: BTreeMap<LeaseId, String>,
    fills: BTreeMap<LeaseId, FillInfo>,
    /// Rendered output of the last command, with its line number.
    last: Option<(usize, Vec<String>)>,
    last_checked: bool,
    failures: Vec<String>,
}

impl Runner {
    fn new() -> Runner {
        Runner {
            engine: Engine::new(EngineConfig::default(), Catalog::builtin()),
            now_rel_ms: 0,
            next_seq: 1,
            accounts: BTreeMap::new(),
            account_names: BTreeMap::new(),
            nodes: BTreeMap::new(),
            node_names: BTreeMap::new(),
            node_owner: BTreeMap::new(),
            node_specs: BTreeMap::new(),
            offers: BTreeMap::new(),
            offer_names: BTreeMap::new(),
            offer_count: BTreeMap::new(),
            offer_terms: BTreeMap::new(),
            bids: BTreeMap::new(),
            bid_names: BTreeMap::new(),
            bid_buyer: BTreeMap::new(),
            leases: BTreeMap::new(),
            lease_names: BTreeMap::new(),
            fills: BTreeMap::new(),
            last: None,
            last_checked: true,
            failures: Vec::new(),
        }
    }

    /// `config delivery=on [teardown=DUR] [heartbeat_timeout=DUR]`: a fresh engine with that
    /// configuration; only before the first command.
    fn configure(&mut self, tokens: &[String]) -> Result<(), String> {
        if self.last.is_some() {
            return Err("config after the first command".to_string());
        }
        let mut a = Args::parse(tokens, 0)?;
        let mut config = EngineConfig::default();
        if let Some(v) = a.opt("delivery") {
            config.delivery = parse_onoff(&v)?;
        }
        if let Some(v) = a.opt("teardown") {
            config.teardown_timeout_ms = parse_dur_ms(&v)?;
        }
        if let Some(v) = a.opt("heartbeat_timeout") {
            config.heartbeat_timeout_ms = parse_dur_ms(&v)?;
        }
        let verification = a
            .opt("verification")
            .map(|v| parse_onoff(&v))
            .transpose()?
            .unwrap_or(false);
        a.finish()?;
        self.engine = Engine::new(config, Catalog::builtin());
        if verification {
            self.engine
                .set_verification(Some(exchange::verify::VerifyConfig::default()));
        }
        Ok(())
    }

    fn abs(&self, rel_ms: i64) -> i64 {
        BASE_MS + rel_ms
    }

    /// Absolute (`86400`, `1d`) or relative-to-now (`+60s`) scenario time → epoch ms.
    fn time(&self, s: &str) -> Result<i64, String> {
        Ok(match s.strip_prefix('+') {
            Some(rest) => self.abs(self.now_rel_ms + parse_dur_ms(rest)?),
            None => self.abs(parse_dur_ms(s)?),
        })
    }

    fn account(&mut self, name: &str) -> AccountId {
        if let Some(a) = self.accounts.get(name) {
            return *a;
        }
        let a = AccountId(self.accounts.len() as u64 + 1);
        self.accounts.insert(name.to_string(), a);
        self.account_names.insert(a, name.to_string());
        a
    }

    fn node_id(&self, name: &str) -> NodeId {
        self.nodes.get(name).copied().unwrap_or(NodeId(BOGUS))
    }

    fn offer_id(&self, node: &str) -> OfferId {
        self.offers.get(node).copied().unwrap_or(OfferId(BOGUS))
    }

    fn lease_id(&self, name: &str) -> LeaseId {
        self.leases.get(name).copied().unwrap_or(LeaseId(BOGUS))
    }

    fn sku(&self, s: &str) -> SkuId {
        self.engine.catalog().lookup(s).unwrap_or(SkuId(999))
    }

    fn sku_name(&self, s: SkuId) -> String {
        self.engine
            .catalog()
            .get(s)
            .map_or_else(|| format!("sku#{}", s.0), |k| k.id.clone())
    }

    fn region_name(&self, r: RegionId) -> String {
        self.engine
            .region_name(r)
            .map_or_else(|| format!("region#{}", r.0), str::to_string)
    }

    fn acct_name(&self, a: AccountId) -> String {
        self.account_names
            .get(&a)
            .cloned()
            .unwrap_or_else(|| format!("acct#{}", a.0))
    }

    fn node_name(&self, n: NodeId) -> String {
        self.node_names
            .get(&n)
            .cloned()
            .unwrap_or_else(|| format!("node#{}", n.0))
    }

    fn offer_name(&self, o: OfferId) -> String {
        self.offer_names
            .get(&o)
            .cloned()
            .unwrap_or_else(|| format!("offer#{}", o.0))
    }

    fn bid_name(&self, b: BidId) -> String {
        self.bid_names
            .get(&b)
            .cloned()
            .unwrap_or_else(|| format!("bid#{}", b.0))
    }

    fn lease_name(&mut self, l: LeaseId) -> String {
        if let Some(n) = self.lease_names.get(&l) {
            return n.clone();
        }
        let n = format!("L{}", self.lease_names.len() + 1);
        self.lease_names.insert(l, n.clone());
        self.leases.insert(n.clone(), l);
        n
    }

    fn build(&mut self, tokens: &[String]) -> Result<(Command, Pending), String> {
        let verb = tokens[0].as_str();
        let rest = &tokens[1..];
        Ok(match verb {
            "register" => {
                let mut a = Args::parse(rest, 3)?;
                let account = self.account(&a.pos[0]);
                let spec = NodeSpec {
                    name: a.pos[1].clone(),
                    sku: self.sku(&a.pos[2]),
                    gpus: a
                        .opt("gpus")
                        .map_or(Ok(8), |v| v.parse())
                        .map_err(|e| format!("{e}"))?,
                    region: a.opt("region").unwrap_or_else(|| "cn-east-2".to_string()),
                    jurisdiction: parse_jur(&a.opt("jur").unwrap_or_else(|| "CN".to_string()))?,
                    interconnect: parse_fabric(&a.opt("fabric").unwrap_or_else(|| "roce".into()))?,
                    nvlink: a.flag("nvlink"),
                    fabric: parse_node_fabric(&mut a)?,
                };
                a.finish()?;
                let name = spec.name.clone();
                (
                    Command::RegisterNode {
                        account,
                        spec: spec.clone(),
                    },
                    Pending::Register {
                        name,
                        account,
                        spec,
                    },
                )
            }
            "update" => {
                let mut a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let node = self.node_id(&a.pos[1]);
                let update = NodeUpdate {
                    region: a.opt("region"),
                    jurisdiction: a.opt("jur").map(|j| parse_jur(&j)).transpose()?,
                    interconnect: a.opt("fabric").map(|f| parse_fabric(&f)).transpose()?,
                    nvlink: a.opt("nvlink").map(|v| parse_onoff(&v)).transpose()?,
                    draining: a.opt("draining").map(|v| parse_onoff(&v)).transpose()?,
                    fabric: parse_node_fabric(&mut a)?,
                };
                a.finish()?;
                (
                    Command::UpdateNode {
                        account,
                        node,
                        update,
                    },
                    Pending::None,
                )
            }
            "heartbeat" => {
                let mut a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let node = self.node_id(&a.pos[1]);
                let all = self.node_specs.get(&node).map_or(8, |s| s.gpus);
                let healthy_gpus = match a.opt("healthy") {
                    Some(v) => v.parse().map_err(|e| format!("healthy: {e}"))?,
                    None => all,
                };
                a.finish()?;
                (
                    Command::Heartbeat {
                        account,
                        node,
                        healthy_gpus,
                    },
                    Pending::None,
                )
            }
            "attest" => {
                // `attest SUP NODE [count=N] [uuids=PFX] [gpuK=SKU] [memK=MIB] [model=unknown]`
                // (§12.1): the node's SKU's model on every GPU unless overridden, UUIDs
                // `GPU-PFX-i` (PFX defaults to the node's name).
                let mut a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let node = self.node_id(&a.pos[1]);
                let spec = self.node_specs.get(&node).cloned();
                let sku_name = |id: SkuId| {
                    Catalog::builtin()
                        .get(id)
                        .map(|s| s.id.clone())
                        .unwrap_or_default()
                };
                let base_sku = spec.as_ref().map(|s| sku_name(s.sku)).unwrap_or_default();
                let row = |sku: &str| {
                    exchange::models::MODEL_SKUS
                        .iter()
                        .find(|m| m.sku == sku)
                        .copied()
                        .ok_or(format!("no model row for {sku}"))
                };
                let count: u32 = match a.opt("count") {
                    Some(v) => v.parse().map_err(|e| format!("count: {e}"))?,
                    None => spec.as_ref().map_or(8, |s| s.gpus),
                };
                let pfx = a.opt("uuids").unwrap_or_else(|| a.pos[1].clone());
                let unknown = a.opt("model").as_deref() == Some("unknown");
                let mut gpus = Vec::new();
                for i in 0..count {
                    let sku = a
                        .opt(&format!("gpu{i}"))
                        .unwrap_or_else(|| base_sku.clone());
                    let r = row(&sku)?;
                    let memory_mib = match a.opt(&format!("mem{i}")) {
                        Some(v) => v.parse().map_err(|e| format!("mem{i}: {e}"))?,
                        None => r.example_memory_mib as u32,
                    };
                    gpus.push(AttestedGpu {
                        index: i,
                        uuid: a
                            .opt(&format!("uuid{i}"))
                            .unwrap_or_else(|| format!("GPU-{pfx}-{i}")),
                        model: if unknown {
                            "Tesla T4".to_string()
                        } else {
                            r.example_name.to_string()
                        },
                        memory_mib,
                    });
                }
                a.finish()?;
                (
                    Command::AttestNode {
                        account,
                        node,
                        gpus,
                    },
                    Pending::None,
                )
            }
            "verify" => {
                // `verify SUP RUN [tflops=T] [bw=B] [ar=A] [dcgm=pass|warn|fail] [gpus=N]
                // [missing=I] [faultI=pcie]` (§12.2): figures for GPUs 0..N (the node's
                // GPUs by default), TFLOPS and all-reduce in decimals, bandwidth in GB/s.
                let mut a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let lease = self.lease_id(&a.pos[1]);
                let tenths = |v: String| -> Result<u32, String> {
                    let d: f64 = v.parse().map_err(|e| format!("{v}: {e}"))?;
                    Ok((d * 10.0).round() as u32)
                };
                let tflops = a.opt("tflops").map(tenths).transpose()?.unwrap_or(7_945);
                let bw: u32 = a
                    .opt("bw")
                    .map(|v| v.parse().map_err(|e| format!("bw: {e}")))
                    .transpose()?
                    .unwrap_or(2_800);
                let ar = a.opt("ar").map(tenths).transpose()?;
                let dcgm = match a.opt("dcgm").as_deref() {
                    None => None,
                    Some("pass") => Some(exchange::verify::DcgmResult::Pass),
                    Some("warn") => Some(exchange::verify::DcgmResult::Warn),
                    Some("fail") => Some(exchange::verify::DcgmResult::Fail),
                    Some(o) => return Err(format!("dcgm={o}")),
                };
                let n: u32 = a
                    .opt("gpus")
                    .map(|v| v.parse().map_err(|e| format!("gpus: {e}")))
                    .transpose()?
                    .unwrap_or(8);
                let missing: Option<u32> = a
                    .opt("missing")
                    .map(|v| v.parse().map_err(|e| format!("missing: {e}")))
                    .transpose()?;
                let mut gpus = Vec::new();
                for index in 0..n {
                    if Some(index) == missing {
                        continue;
                    }
                    let faults = match a.opt(&format!("fault{index}")).as_deref() {
                        None => 0,
                        Some("pcie") => exchange::verify::fault::PCIE_LINK_BELOW_MAX,
                        Some("ecc") => exchange::verify::fault::ECC_OFF,
                        Some("bogus") => 0x80,
                        Some(o) => return Err(format!("fault{index}={o}")),
                    };
                    let t = a.opt(&format!("tflops{index}")).map(tenths).transpose()?;
                    gpus.push(exchange::verify::GpuFigures {
                        index,
                        bf16_tflops_x10: Some(t.unwrap_or(tflops)),
                        mem_bw_gbps: Some(bw),
                        faults,
                    });
                }
                a.finish()?;
                (
                    Command::ReportVerification {
                        account,
                        lease,
                        figures: exchange::verify::VerificationFigures {
                            gpus,
                            allreduce_busbw_x10: ar,
                            dcgm,
                        },
                    },
                    Pending::None,
                )
            }
            "gpu_health" => {
                // `gpu_health SUP NODE unhealthy=4,5` (§12.1); `unhealthy=` for none.
                let mut a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let node = self.node_id(&a.pos[1]);
                let all = self.node_specs.get(&node).map_or(8, |s| s.gpus);
                let mut healthy_mask = if all >= 32 {
                    u32::MAX
                } else {
                    (1u32 << all) - 1
                };
                for i in a.opt("unhealthy").unwrap_or_default().split(',') {
                    if i.is_empty() {
                        continue;
                    }
                    let i: u32 = i.parse().map_err(|e| format!("unhealthy: {e}"))?;
                    if i >= 32 {
                        return Err(format!("unhealthy: GPU index {i} out of range"));
                    }
                    healthy_mask &= !(1u32 << i);
                    if i >= all {
                        healthy_mask |= 1u32 << i; // a GPU the node does not have: invalid
                    }
                }
                a.finish()?;
                (
                    Command::GpuHealth {
                        account,
                        node,
                        healthy_mask,
                    },
                    Pending::None,
                )
            }
            "offer" | "amend" => {
                let mut a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let node_name = a.pos[1].clone();
                let node = self.node_id(&node_name);
                let offer = self.offer_id(&node_name);
                let base = if verb == "amend" {
                    self.offer_terms.get(&offer).copied()
                } else {
                    None
                };
                let gpus_default = self.node_specs.get(&node).map_or(8, |s| s.gpus);
                let mut terms = base.unwrap_or(OfferTerms {
                    gpus: gpus_default,
                    spot_price: parse_price("1")?,
                    preemptible_price: None,
                    min_lease_s: 0,
                    max_lease_s: 86_400,
                    available_until_ms: self.time("+7d")?,
                    notice_s: 0,
                    provision_s: 180,
                });
                if let Some(v) = a.opt("gpus") {
                    terms.gpus = v.parse().map_err(|e| format!("gpus: {e}"))?;
                }
                match a.opt("spot") {
                    Some(v) => terms.spot_price = parse_price(&v)?,
                    None if base.is_none() => return Err("offer needs spot=".into()),
                    None => {}
                }
                if let Some(v) = a.opt("pre") {
                    terms.preemptible_price = if v == "none" {
                        None
                    } else {
                        Some(parse_price(&v)?)
                    };
                }
                if let Some(v) = a.opt("min") {
                    terms.min_lease_s = parse_secs(&v)?;
                }
                if let Some(v) = a.opt("max") {
                    terms.max_lease_s = parse_secs(&v)?;
                }
                if let Some(v) = a.opt("until") {
                    terms.available_until_ms = self.time(&v)?;
                }
                if let Some(v) = a.opt("notice") {
                    terms.notice_s = parse_secs(&v)? as u32;
                }
                if let Some(v) = a.opt("provision") {
                    terms.provision_s = parse_secs(&v)? as u32;
                }
                // `sla=AVAIL_BP/MULTIPLE`: posted with an SLA promise (§12.4).
                let sla = a
                    .opt("sla")
                    .map(|v| {
                        parse_sla(&v).map(|(a, m)| exchange::SlaPromise {
                            availability_bp: a,
                            credit_multiple: m,
                        })
                    })
                    .transpose()?;
                a.finish()?;
                if sla.is_some() && verb != "offer" {
                    return Err("an amendment keeps the offer's SLA promise: no sla=".into());
                }
                if verb == "offer" {
                    let cmd = match sla {
                        Some(sla) => Command::PostOfferSla {
                            account,
                            node,
                            terms,
                            sla,
                        },
                        None => Command::PostOffer {
                            account,
                            node,
                            terms,
                        },
                    };
                    (
                        cmd,
                        Pending::Post {
                            node: node_name,
                            terms,
                        },
                    )
                } else {
                    (
                        Command::AmendOffer {
                            account,
                            offer,
                            terms,
                        },
                        Pending::Amend { terms },
                    )
                }
            }
            "withdraw" => {
                let a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let offer = self.offer_id(&a.pos[1]);
                a.finish()?;
                (Command::WithdrawOffer { account, offer }, Pending::None)
            }
            "bid" => {
                let mut a = Args::parse(rest, 3)?;
                let account = self.account(&a.pos[0]);
                let coid = a.pos[1].clone();
                let sku = self.sku(&a.pos[2]);
                let gpus = a
                    .opt("gpus")
                    .ok_or("bid needs gpus=")?
                    .parse()
                    .map_err(|e| format!("gpus: {e}"))?;
                let limit = parse_price(&a.opt("limit").ok_or("bid needs limit=")?)?;
                let kind = if a.flag("pre") {
                    LeaseKind::Preemptible
                } else {
                    a.flag("spot");
                    LeaseKind::Spot
                };
                // `gang=NxG [scope=domain|region] [loss=keep|end_all]` (§13.2)
                let placement = if let Some(shape) = a.opt("gang") {
                    let (n, g) = shape
                        .split_once('x')
                        .ok_or_else(|| format!("gang `{shape}`: NODESxGPUS"))?;
                    let scope = match a.opt("scope").as_deref() {
                        None | Some("domain") => GangScope::Domain,
                        Some("region") => GangScope::Region,
                        Some(x) => return Err(format!("scope `{x}`: domain or region")),
                    };
                    let on_member_loss = match a.opt("loss").as_deref() {
                        None | Some("keep") => MemberLoss::Keep,
                        Some("end_all") => MemberLoss::EndAll,
                        Some(x) => return Err(format!("loss `{x}`: keep or end_all")),
                    };
                    Placement::Gang(GangSpec {
                        nodes: n.parse().map_err(|e| format!("gang nodes: {e}"))?,
                        gpus_per_node: g.parse().map_err(|e| format!("gang gpus: {e}"))?,
                        scope,
                        on_member_loss,
                    })
                } else if a.flag("spread") {
                    Placement::Spread
                } else {
                    a.flag("single");
                    Placement::SingleNode
                };
                // `min=N` (§13.5)
                let min_gpus = a
                    .opt("min")
                    .map(|v| v.parse::<u32>().map_err(|e| format!("min: {e}")))
                    .transpose()?;
                let expires = a.opt("expires").map(|v| self.time(&v)).transpose()?;
                let tif = if a.flag("ioc") {
                    TimeInForce::Ioc
                } else {
                    a.flag("gtc");
                    TimeInForce::Gtc {
                        expires_at_ms: expires,
                    }
                };
                let duration_s = a.opt("dur").map(|v| parse_secs(&v)).transpose()?;
                let split = |v: Option<String>| -> Vec<String> {
                    v.map(|v| v.split(',').map(str::to_string).collect())
                        .unwrap_or_default()
                };
                let regions = split(a.opt("regions"));
                let jurisdictions = split(a.opt("jurs"))
                    .iter()
                    .map(|j| parse_jur(j))
                    .collect::<Result<Vec<_>, _>>()?;
                let constraints = Constraints {
                    regions,
                    jurisdictions,
                    min_interconnect: a.opt("fabric").map(|f| parse_fabric(&f)).transpose()?,
                    nvlink: a.flag("nvlink"),
                };
                let min_reliability_bp = a
                    .opt("minrel")
                    .map(|v| v.parse::<u32>().map_err(|e| format!("minrel (bp): {e}")))
                    .transpose()?;
                // `minsla=AVAIL_BP/MULTIPLE` (§12.4).
                let min_sla = a
                    .opt("minsla")
                    .map(|v| {
                        parse_sla(&v).map(|(a, m)| exchange::SlaFloor {
                            availability_bp: a,
                            credit_multiple: m,
                        })
                    })
                    .transpose()?;
                let trust = exchange::TrustConstraints {
                    verified: a.flag("verified"),
                    min_reliability_bp,
                    min_sla,
                };
                a.finish()?;
                let bid = BidSpec {
                    client_order_id: coid.clone(),
                    sku,
                    gpus,
                    limit,
                    kind,
                    placement,
                    constraints: constraints.clone(),
                    duration_s,
                    tif,
                    min_gpus,
                };
                if !trust.is_none() {
                    return Ok((
                        Command::PlaceTrustBid {
                            account,
                            bid,
                            trust,
                        },
                        Pending::Bid { account, coid },
                    ));
                }
                (
                    Command::PlaceBid {
                        account,
                        bid: BidSpec {
                            client_order_id: coid.clone(),
                            sku,
                            gpus,
                            limit,
                            kind,
                            placement,
                            constraints,
                            duration_s,
                            tif,
                            min_gpus,
                        },
                    },
                    Pending::Bid { account, coid },
                )
            }
            "cancel" => {
                let a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                // `OWNER:COID` names another account's bid (for not_owner).
                let key = match a.pos[1].split_once(':') {
                    Some((owner, coid))
                        if !self.bids.contains_key(&(account, a.pos[1].clone())) =>
                    {
                        (self.account(owner), coid.to_string())
                    }
                    _ => (account, a.pos[1].clone()),
                };
                let bid = self.bids.get(&key).copied().unwrap_or(BidId(BOGUS));
                a.finish()?;
                (Command::CancelBid { account, bid }, Pending::None)
            }
            "release_bid" => {
                // `release_bid ACCT COID` (`OWNER:COID` for another account's bid, §13.6)
                let a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let key = match a.pos[1].split_once(':') {
                    Some((owner, coid))
                        if !self.bids.contains_key(&(account, a.pos[1].clone())) =>
                    {
                        (self.account(owner), coid.to_string())
                    }
                    _ => (account, a.pos[1].clone()),
                };
                let bid = self.bids.get(&key).copied().unwrap_or(BidId(BOGUS));
                a.finish()?;
                (Command::ReleaseBid { account, bid }, Pending::None)
            }
            "release" => {
                let a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let lease = self.lease_id(&a.pos[1]);
                a.finish()?;
                (Command::ReleaseLease { account, lease }, Pending::None)
            }
            "unfunded" => {
                let a = Args::parse(rest, 1)?;
                let lease = self.lease_id(&a.pos[0]);
                a.finish()?;
                (Command::EndLeaseInsufficientFunds { lease }, Pending::None)
            }
            "tick" => {
                Args::parse(rest, 0)?.finish()?;
                (Command::Tick, Pending::None)
            }
            "resume_exchange" => {
                Args::parse(rest, 0)?.finish()?;
                (Command::Resume, Pending::None)
            }
            "ready" | "failed" | "launch_failed" | "lost" | "torn_down" => {
                let a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let lease = self.lease_id(&a.pos[1]);
                a.finish()?;
                let cmd = match verb {
                    "ready" => Command::ReportReady { account, lease },
                    "failed" => Command::ReportFailed { account, lease },
                    "launch_failed" => Command::ReportLaunchFailed { account, lease },
                    "lost" => Command::ReportLost { account, lease },
                    _ => Command::ReportTornDown { account, lease },
                };
                (cmd, Pending::None)
            }
            "resume" => {
                let a = Args::parse(rest, 2)?;
                let account = self.account(&a.pos[0]);
                let node = self.node_id(&a.pos[1]);
                a.finish()?;
                (Command::ResumeNode { account, node }, Pending::None)
            }
            _ => return Err(format!("unknown statement {verb:?}")),
        })
    }

    /// Records the names the output introduces (nodes, offers, bids, leases).
    fn learn(&mut self, out: &Output, pending: &Pending) {
        for e in &out.events {
            match (e, pending) {
                (
                    Event::NodeRegistered { node, .. },
                    Pending::Register {
                        name,
                        account,
                        spec,
                    },
                ) => {
                    self.nodes.insert(name.clone(), *node);
                    self.node_names.insert(*node, name.clone());
                    self.node_owner.insert(*node, *account);
                    self.node_specs.insert(*node, spec.clone());
                }
                (Event::OfferPosted { offer, .. }, Pending::Post { node, terms }) => {
                    let k = self.offer_count.entry(node.clone()).or_insert(0);
                    *k += 1;
                    let name = if *k == 1 {
                        node.clone()
                    } else {
                        format!("{node}/{k}")
                    };
                    self.offers.insert(node.clone(), *offer);
                    self.offer_names.insert(*offer, name);
                    self.offer_terms.insert(*offer, *terms);
                }
                (Event::OfferAmended { offer, terms }, _) => {
                    self.offer_terms.insert(*offer, *terms);
                }
                (Event::BidAccepted { bid, .. }, Pending::Bid { account, coid }) => {
                    self.bids.insert((*account, coid.clone()), *bid);
                    self.bid_names.insert(*bid, coid.clone());
                    self.bid_buyer.insert(*bid, *account);
                }
                _ => {}
            }
        }
    }

    /// ` !buyer=X` when a gang event's buyer is not its bid's.
    fn buyer_diff(&self, bid: BidId, buyer: AccountId) -> String {
        match self.bid_buyer.get(&bid) {
            Some(b) if *b == buyer => String::new(),
            _ => format!(" !buyer={}", self.acct_name(buyer)),
        }
    }

    fn render(&mut self, out: &Output, pending: &Pending) -> Vec<String> {
        let mut lines = Vec::new();
        for e in &out.events {
            let mut s: String;
            match e {
                Event::Rejected { reason, field } => {
                    s = format!("rejected {}", reason.code());
                    if let Some(f) = field {
                        let _ = write!(s, " {f}");
                    }
                }
                Event::NodeRegistered {
                    node,
                    supplier,
                    sku,
                    region,
                    gpus,
                } => {
                    s = format!("node_registered {}", self.node_name(*node));
                    if let Pending::Register { account, spec, .. } = pending {
                        if supplier != account {
                            let _ = write!(s, " !supplier={}", self.acct_name(*supplier));
                        }
                        if *sku != spec.sku {
                            let _ = write!(s, " !sku={}", self.sku_name(*sku));
                        }
                        if self.engine.region_name(*region) != Some(spec.region.as_str()) {
                            let _ = write!(s, " !region={}", self.region_name(*region));
                        }
                        if *gpus != spec.gpus {
                            let _ = write!(s, " !gpus={gpus}");
                        }
                    }
                }
                Event::NodeUpdated {
                    node,
                    region,
                    jurisdiction,
                    interconnect,
                    nvlink,
                    draining,
                } => {
                    s = format!(
                        "node_updated {} region={} jur={} fabric={} nvlink={} draining={}",
                        self.node_name(*node),
                        self.region_name(*region),
                        jurisdiction,
                        fmt_fabric(*interconnect),
                        if *nvlink { "on" } else { "off" },
                        if *draining { "on" } else { "off" },
                    );
                }
                Event::NodeOnline { node } => s = format!("node_online {}", self.node_name(*node)),
                Event::NodeOffline {
                    node,
                    last_heartbeat_ms,
                } => {
                    s = format!(
                        "node_offline {} last_heartbeat={}",
                        self.node_name(*node),
                        fmt_time(*last_heartbeat_ms)
                    );
                }
                Event::NodeHealth { node, healthy_gpus } => {
                    s = format!(
                        "node_health {} healthy={healthy_gpus}",
                        self.node_name(*node)
                    );
                }
                Event::OfferPosted { offer, node, terms } => {
                    s = format!("offer_posted {}", self.offer_name(*offer));
                    if let Pending::Post { node: n, terms: t } = pending {
                        if self.node_name(*node) != *n {
                            let _ = write!(s, " !node={}", self.node_name(*node));
                        }
                        if t != terms {
                            let _ = write!(s, " !terms={terms:?}");
                        }
                    }
                }
                Event::OfferAmended { offer, terms } => {
                    s = format!("offer_amended {}", self.offer_name(*offer));
                    if let Pending::Amend { terms: t } = pending
                        && t != terms
                    {
                        let _ = write!(s, " !terms={terms:?}");
                    }
                }
                Event::OfferWithdrawn { offer } => {
                    s = format!("offer_withdrawn {}", self.offer_name(*offer));
                }
                Event::OfferExpired { offer } => {
                    s = format!("offer_expired {}", self.offer_name(*offer));
                }
                Event::BidAccepted { bid, buyer } => {
                    s = format!("bid_accepted {}", self.bid_name(*bid));
                    if self.bid_buyer.get(bid) != Some(buyer) {
                        let _ = write!(s, " !buyer={}", self.acct_name(*buyer));
                    }
                }
                Event::Fill {
                    bid,
                    lease,
                    offer,
                    node,
                    buyer,
                    supplier,
                    gpus,
                    price,
                    kind,
                    maker,
                    start_ms,
                    end_ms,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!(
                        "fill {} {l} {} gpus={gpus} price={price} {} maker={} start={} end={}",
                        self.bid_name(*bid),
                        self.offer_name(*offer),
                        fmt_kind(*kind),
                        match maker {
                            Maker::Offer => "offer",
                            Maker::Bid => "bid",
                        },
                        fmt_time(*start_ms),
                        fmt_time(*end_ms),
                    );
                    let offer_node = self.offer_name(*offer);
                    let offer_node = offer_node.split('/').next().unwrap_or("");
                    if self.node_name(*node) != offer_node {
                        let _ = write!(s, " !node={}", self.node_name(*node));
                    }
                    if self.bid_buyer.get(bid) != Some(buyer) {
                        let _ = write!(s, " !buyer={}", self.acct_name(*buyer));
                    }
                    if self.node_owner.get(node) != Some(supplier) {
                        let _ = write!(s, " !supplier={}", self.acct_name(*supplier));
                    }
                    let (sku, region) = self
                        .engine
                        .node(*node)
                        .map_or((SkuId(999), RegionId(999)), |n| (n.sku, n.region));
                    self.fills.insert(
                        *lease,
                        FillInfo {
                            bid: *bid,
                            buyer: *buyer,
                            supplier: *supplier,
                            node: *node,
                            sku,
                            region,
                            kind: *kind,
                            gpus: *gpus,
                            price: *price,
                            start_ms: *start_ms,
                            end_ms: *end_ms,
                        },
                    );
                }
                Event::LeaseStarted {
                    lease,
                    bid,
                    buyer,
                    supplier,
                    node,
                    sku,
                    region,
                    kind,
                    gpus,
                    gpu_mask,
                    price,
                    start_ms,
                    end_ms,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!(
                        "lease_started {l} {} gpus={gpus} mask={} price={price}",
                        self.node_name(*node),
                        fmt_mask(*gpu_mask)
                    );
                    if gpu_mask.count_ones() != *gpus {
                        let _ = write!(s, " !mask-count");
                    }
                    match self.fills.get(lease) {
                        None => s.push_str(" !no-fill"),
                        Some(f) => {
                            let mut diffs = Vec::new();
                            if f.bid != *bid {
                                diffs.push(format!("bid={}", self.bid_name(*bid)));
                            }
                            if f.buyer != *buyer {
                                diffs.push(format!("buyer={}", self.acct_name(*buyer)));
                            }
                            if f.supplier != *supplier {
                                diffs.push(format!("supplier={}", self.acct_name(*supplier)));
                            }
                            if f.node != *node {
                                diffs.push("node".to_string());
                            }
                            if f.sku != *sku {
                                diffs.push(format!("sku={}", self.sku_name(*sku)));
                            }
                            if f.region != *region {
                                diffs.push(format!("region={}", self.region_name(*region)));
                            }
                            if f.kind != *kind {
                                diffs.push(format!("kind={}", fmt_kind(*kind)));
                            }
                            if f.gpus != *gpus {
                                diffs.push("gpus".to_string());
                            }
                            if f.price != *price {
                                diffs.push("price".to_string());
                            }
                            if f.start_ms != *start_ms {
                                diffs.push(format!("start={}", fmt_time(*start_ms)));
                            }
                            if f.end_ms != *end_ms {
                                diffs.push(format!("end={}", fmt_time(*end_ms)));
                            }
                            for d in diffs {
                                let _ = write!(s, " !{d}");
                            }
                        }
                    }
                }
                Event::PreemptionNotice {
                    lease,
                    by,
                    deadline_ms,
                    reason,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!("notice {l}");
                    if let Some(b) = by {
                        let b = self.lease_name(*b);
                        let _ = write!(s, " by={b}");
                    }
                    let _ = write!(
                        s,
                        " deadline={} {}",
                        fmt_time(*deadline_ms),
                        notice_reason(*reason)
                    );
                }
                Event::LeaseEnded {
                    lease,
                    buyer,
                    reason,
                    at_ms,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!(
                        "lease_ended {l} {} at={}",
                        end_reason(*reason),
                        fmt_time(*at_ms)
                    );
                    if self.fills.get(lease).map(|f| f.buyer) != Some(*buyer) {
                        let _ = write!(s, " !buyer={}", self.acct_name(*buyer));
                    }
                }
                Event::LeaseMigrated { from, to } => {
                    let f = self.lease_name(*from);
                    let t = self.lease_name(*to);
                    s = format!("lease_migrated {f} to={t}");
                }
                // §13: `gang_formed BID SUPPLIER L1,L2`, `gang_member_ready BID L1 at=T`,
                // `gang_ready BID at=T`, `gang_failed BID lost=L1`,
                // `gang_degraded BID lost=L1 live=N`; a buyer other than the bid's `!buyer=`
                Event::GangFormed {
                    bid,
                    buyer,
                    supplier,
                    members,
                } => {
                    let ms: Vec<String> = members.iter().map(|l| self.lease_name(*l)).collect();
                    s = format!(
                        "gang_formed {} {} {}",
                        self.bid_name(*bid),
                        self.acct_name(*supplier),
                        ms.join(",")
                    );
                    s.push_str(&self.buyer_diff(*bid, *buyer));
                }
                Event::GangMemberReady { bid, lease, at_ms } => {
                    let l = self.lease_name(*lease);
                    s = format!(
                        "gang_member_ready {} {l} at={}",
                        self.bid_name(*bid),
                        fmt_time(*at_ms)
                    );
                }
                Event::GangReady { bid, buyer, at_ms } => {
                    s = format!("gang_ready {} at={}", self.bid_name(*bid), fmt_time(*at_ms));
                    s.push_str(&self.buyer_diff(*bid, *buyer));
                }
                Event::GangFailed { bid, buyer, lost } => {
                    let l = self.lease_name(*lost);
                    s = format!("gang_failed {} lost={l}", self.bid_name(*bid));
                    s.push_str(&self.buyer_diff(*bid, *buyer));
                }
                Event::GangDegraded {
                    bid,
                    buyer,
                    lost,
                    live,
                } => {
                    let l = self.lease_name(*lost);
                    s = format!("gang_degraded {} lost={l} live={live}", self.bid_name(*bid));
                    s.push_str(&self.buyer_diff(*bid, *buyer));
                }
                Event::FailoverFailed {
                    lease,
                    gpus,
                    reason,
                    detail,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!(
                        "failover_failed {l} gpus={gpus} {}{}",
                        close_reason(*reason),
                        fmt_detail(detail)
                    );
                }
                Event::BidRested { bid, remaining } => {
                    s = format!("bid_rested {} remaining={remaining}", self.bid_name(*bid));
                }
                Event::BidClosed {
                    bid,
                    filled,
                    unfilled,
                    reason,
                    detail,
                } => {
                    s = format!(
                        "bid_closed {} filled={filled} unfilled={unfilled} {}{}",
                        self.bid_name(*bid),
                        close_reason(*reason),
                        fmt_detail(detail)
                    );
                }
                Event::ProvisionStarted {
                    lease,
                    buyer,
                    supplier,
                    node,
                    deadline_ms,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!("provision_started {l} deadline={}", fmt_time(*deadline_ms));
                    s.push_str(&self.party_diffs(*lease, *buyer, *supplier, *node));
                }
                Event::LeaseReady {
                    lease,
                    buyer,
                    supplier,
                    node,
                    at_ms,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!("lease_ready {l} at={}", fmt_time(*at_ms));
                    s.push_str(&self.party_diffs(*lease, *buyer, *supplier, *node));
                }
                Event::LeaseWiping {
                    lease,
                    buyer,
                    supplier,
                    node,
                    gpu_mask,
                    deadline_ms,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!(
                        "lease_wiping {l} {} mask={} deadline={}",
                        self.node_name(*node),
                        fmt_mask(*gpu_mask),
                        fmt_time(*deadline_ms)
                    );
                    s.push_str(&self.party_diffs(*lease, *buyer, *supplier, *node));
                }
                Event::LeaseWiped {
                    lease,
                    buyer,
                    supplier,
                    node,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!("lease_wiped {l}");
                    s.push_str(&self.party_diffs(*lease, *buyer, *supplier, *node));
                }
                Event::TeardownOverdue {
                    lease,
                    buyer,
                    supplier,
                    node,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!("teardown_overdue {l}");
                    s.push_str(&self.party_diffs(*lease, *buyer, *supplier, *node));
                }
                Event::NodeHeld {
                    node,
                    supplier,
                    reason,
                } => {
                    s = format!(
                        "node_held {} {}",
                        self.node_name(*node),
                        hold_reason(*reason)
                    );
                    if self.node_owner.get(node) != Some(supplier) {
                        let _ = write!(s, " !supplier={}", self.acct_name(*supplier));
                    }
                }
                Event::NodeAttested { node, gpus } => {
                    s = format!("node_attested {} gpus={gpus}", self.node_name(*node));
                }
                Event::AttestationFailed {
                    node,
                    supplier,
                    mismatch,
                } => {
                    let m = match mismatch {
                        event::AttestationMismatch::GpuCount {
                            attested,
                            registered,
                        } => format!("gpu_count attested={attested} registered={registered}"),
                        event::AttestationMismatch::Model { index, model } => {
                            format!("model gpu={index} model={}", model.replace(' ', "_"))
                        }
                        event::AttestationMismatch::Memory { index, memory_mib } => {
                            format!("memory gpu={index} mib={memory_mib}")
                        }
                        event::AttestationMismatch::DuplicateGpu { index, uuid } => {
                            format!("duplicate_gpu gpu={index} uuid={uuid}")
                        }
                    };
                    s = format!("attestation_failed {} {m}", self.node_name(*node));
                    if self.node_owner.get(node) != Some(supplier) {
                        let _ = write!(s, " !supplier={}", self.acct_name(*supplier));
                    }
                }
                Event::VerificationStarted {
                    lease,
                    node,
                    supplier,
                    gpu_mask,
                    deadline_ms,
                    trigger,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!(
                        "verification_started {l} {} gpus={gpu_mask:#x} deadline={} {}",
                        self.node_name(*node),
                        fmt_time(*deadline_ms),
                        match trigger {
                            event::VerifyTrigger::FirstListing => "first_listing",
                            event::VerifyTrigger::Changed => "changed",
                            event::VerifyTrigger::Periodic => "periodic",
                        }
                    );
                    if self.node_owner.get(node) != Some(supplier) {
                        let _ = write!(s, " !supplier={}", self.acct_name(*supplier));
                    }
                }
                Event::VerificationEnded {
                    lease,
                    node,
                    supplier,
                    judgment,
                } => {
                    let l = self.lease_name(*lease);
                    s = format!(
                        "verification_ended {l} {} {} worst={}",
                        self.node_name(*node),
                        format!("{:?}", judgment.outcome).to_lowercase(),
                        judgment.worst_bp
                    );
                    if let Some(by) = judgment.decided_by {
                        let _ = write!(s, " by={}", format!("{by:?}").to_lowercase());
                    }
                    if let Some(g) = judgment.gpu {
                        let _ = write!(s, " gpu={g}");
                    }
                    if self.node_owner.get(node) != Some(supplier) {
                        let _ = write!(s, " !supplier={}", self.acct_name(*supplier));
                    }
                }
                Event::NodeResumed { node, supplier } => {
                    s = format!("node_resumed {}", self.node_name(*node));
                    if self.node_owner.get(node) != Some(supplier) {
                        let _ = write!(s, " !supplier={}", self.acct_name(*supplier));
                    }
                }
            }
            lines.push(s);
        }
        for d in &out.deltas {
            lines.push(format!(
                "delta {} {} {} {} free={} max={} seq={}",
                self.sku_name(d.sku),
                self.region_name(d.region),
                fmt_kind(d.kind),
                d.price,
                d.free_gpus,
                d.max_single_node,
                d.market_seq
            ));
        }
        lines
    }

    /// ` !buyer=.. !supplier=.. !node=..` where a delivery event's parties differ from its
    /// lease's fill (empty when they agree).
    fn party_diffs(
        &self,
        lease: LeaseId,
        buyer: AccountId,
        supplier: AccountId,
        node: NodeId,
    ) -> String {
        let mut s = String::new();
        let Some(f) = self.fills.get(&lease) else {
            return " !no-fill".to_string();
        };
        if f.buyer != buyer {
            let _ = write!(s, " !buyer={}", self.acct_name(buyer));
        }
        if f.supplier != supplier {
            let _ = write!(s, " !supplier={}", self.acct_name(supplier));
        }
        if f.node != node {
            let _ = write!(s, " !node={}", self.node_name(node));
        }
        s
    }

    fn render_book(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        let bids: Vec<_> = self.engine.bids().cloned().collect();
        for b in bids {
            lines.push(format!(
                "bid {} {} {} limit={} remaining={}/{}",
                self.bid_name(b.id),
                fmt_kind(b.kind),
                match b.placement {
                    Placement::SingleNode => "single".to_string(),
                    Placement::Spread => "spread".to_string(),
                    Placement::Gang(g) => format!("gang={}x{}", g.nodes, g.gpus_per_node),
                },
                b.limit,
                b.remaining,
                b.gpus
            ));
        }
        let leases: Vec<_> = self.engine.leases().cloned().collect();
        for l in leases {
            let name = self.lease_name(l.id);
            let mut s = format!(
                "lease {name} {} {} {} gpus={} mask={} price={} start={} end={} {}",
                self.node_name(l.node),
                self.bid_name(l.bid),
                fmt_kind(l.kind),
                l.gpus,
                fmt_mask(l.gpu_mask),
                l.price,
                fmt_time(l.start_ms),
                fmt_time(l.end_ms),
                match (l.state, l.provision_deadline_ms, l.ready_ms) {
                    (exchange::state::LeaseState::Pending, _, _) => "pending".to_string(),
                    (exchange::state::LeaseState::Active, _, None) => "active".to_string(),
                    (exchange::state::LeaseState::Active, _, Some(r)) => {
                        format!("active ready={}", fmt_time(r))
                    }
                    (exchange::state::LeaseState::Provisioning, Some(d), _) => {
                        format!("provisioning deadline={}", fmt_time(d))
                    }
                    // §13.3: a gang member reported ready waits for the rest of its gang
                    (exchange::state::LeaseState::Provisioning, None, _)
                        if self.engine.lease_gang(l.id).is_some_and(|(b, _)| {
                            self.engine.gang(b).is_some_and(|g| g.whole_at_ms.is_none())
                        }) =>
                    {
                        "provisioning ready (gang)".to_string()
                    }
                    (exchange::state::LeaseState::Provisioning, None, _) => {
                        "provisioning waiting".to_string()
                    }
                }
            );
            if let Some(n) = l.notice {
                let _ = write!(
                    s,
                    " notice={}@{}",
                    notice_reason(n.reason),
                    fmt_time(n.deadline_ms)
                );
            }
            lines.push(s);
        }
        let wipes: Vec<_> = self.engine.wipes().cloned().collect();
        for w in wipes {
            let name = self.lease_name(w.lease);
            lines.push(format!(
                "wipe {name} {} mask={} deadline={}",
                self.node_name(w.node),
                fmt_mask(w.gpu_mask),
                fmt_time(w.deadline_ms)
            ));
        }
        for (k, v) in self.engine.inventory() {
            lines.push(format!(
                "level {} {} {} {} free={} max={}",
                self.sku_name(k.sku),
                self.region_name(k.region),
                fmt_kind(k.kind),
                k.price,
                v.free_gpus,
                v.max_single_node
            ));
        }
        lines
    }

    fn render_nodes(&self) -> Vec<String> {
        self.engine
            .nodes()
            .map(|n| {
                let mut s = format!(
                    "node {} {} healthy={} free={} hb={} offer={}",
                    self.node_name(n.id),
                    match n.status {
                        exchange::state::NodeStatus::Online => "online",
                        exchange::state::NodeStatus::Offline => "offline",
                    },
                    n.healthy_gpus(),
                    self.engine.listed_free_gpus(n.id),
                    fmt_time(n.last_heartbeat_ms),
                    n.offer
                        .map_or_else(|| "-".to_string(), |o| self.offer_name(o)),
                );
                if n.draining {
                    s.push_str(" draining");
                }
                if n.wiping_mask != 0 {
                    let _ = write!(s, " wiping={}", fmt_mask(n.wiping_mask));
                }
                if let Some(h) = n.held {
                    let _ = write!(s, " held={}", hold_reason(h));
                }
                s
            })
            .collect()
    }

    fn finish_last(&mut self) {
        if !self.last_checked
            && let Some((line, out)) = &self.last
            && let Some(r) = out.iter().find(|l| l.starts_with("rejected"))
        {
            self.failures.push(format!(
                "line {line}: unexpected `{r}` (command has no expect block)"
            ));
        }
        self.last_checked = true;
    }

    fn run_command(&mut self, line_no: usize, tokens: &[String]) -> Result<(), String> {
        self.finish_last();
        let (cmd, pending) = self.build(tokens)?;
        let meta = Meta {
            seq: self.next_seq,
            timestamp_ms: self.abs(self.now_rel_ms),
        };
        self.next_seq += 1;
        let out = self.engine.apply(&cmd, meta);
        self.learn(&out, &pending);
        let lines = self.render(&out, &pending);
        if let Err(msg) = self.engine.check_invariants() {
            self.failures.push(format!(
                "line {line_no}: invariant broken after `{}`: {msg}",
                tokens.join(" ")
            ));
        }
        self.last = Some((line_no, lines));
        self.last_checked = false;
        Ok(())
    }
}

/// A minimal line diff (LCS): `  ` same, `- ` expected only, `+ ` actual only.
fn diff(expected: &[String], actual: &[String]) -> String {
    let (n, m) = (expected.len(), actual.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if expected[i] == actual[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut s = String::new();
    while i < n || j < m {
        if i < n && j < m && expected[i] == actual[j] {
            let _ = writeln!(s, "      {}", expected[i]);
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(s, "    - {}", expected[i]);
            i += 1;
        } else {
            let _ = writeln!(s, "    + {}", actual[j]);
            j += 1;
        }
    }
    s
}

/// Runs one script; returns its failures.
fn run_script(text: &str) -> Vec<String> {
    let mut r = Runner::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line_no = i + 1;
        let raw = lines[i];
        let line = strip_comment(raw);
        i += 1;
        if line.trim().is_empty() {
            continue;
        }
        if raw.starts_with(char::is_whitespace) {
            r.failures.push(format!(
                "line {line_no}: indented line outside a block: {line:?}"
            ));
            continue;
        }
        let tokens = match tokenize(line) {
            Ok(t) => t,
            Err(e) => {
                r.failures.push(format!("line {line_no}: {e}"));
                continue;
            }
        };
        match tokens[0].as_str() {
            "expect" | "book" | "nodes" => {
                let mut expected = Vec::new();
                while i < lines.len() {
                    let l = strip_comment(lines[i]);
                    if l.trim().is_empty() {
                        i += 1;
                        continue;
                    }
                    if !lines[i].starts_with(char::is_whitespace) {
                        break;
                    }
                    expected.push(l.split_whitespace().collect::<Vec<_>>().join(" "));
                    i += 1;
                }
                let actual = match tokens[0].as_str() {
                    "expect" => {
                        r.last_checked = true;
                        match &r.last {
                            Some((_, out)) => out.clone(),
                            None => {
                                r.failures
                                    .push(format!("line {line_no}: expect before any command"));
                                continue;
                            }
                        }
                    }
                    "book" => r.render_book(),
                    _ => r.render_nodes(),
                };
                if expected != actual {
                    let what = match &r.last {
                        Some((l, _)) => format!("{} after the command on line {l}", tokens[0]),
                        None => tokens[0].clone(),
                    };
                    r.failures.push(format!(
                        "line {line_no}: {what} differs (- expected, + actual):\n{}",
                        diff(&expected, &actual)
                    ));
                }
            }
            "at" => {
                let res = match tokens.get(1) {
                    Some(t) => match t.strip_prefix('+') {
                        Some(rest) => parse_dur_ms(rest).map(|d| r.now_rel_ms + d),
                        None => parse_dur_ms(t),
                    },
                    None => Err("at needs a time".to_string()),
                };
                match res {
                    Ok(t) => r.now_rel_ms = t,
                    Err(e) => r.failures.push(format!("line {line_no}: {e}")),
                }
            }
            "config" => {
                if let Err(e) = r.configure(&tokens[1..]) {
                    r.failures.push(format!("line {line_no}: {e}"));
                }
            }
            "seq" => match tokens.get(1).map(|s| s.parse::<u64>()) {
                Some(Ok(n)) => r.next_seq = n,
                _ => r
                    .failures
                    .push(format!("line {line_no}: seq needs a number")),
            },
            _ => {
                if let Err(e) = r.run_command(line_no, &tokens) {
                    r.failures.push(format!("line {line_no}: {e}: {line}"));
                }
            }
        }
    }
    r.finish_last();
    r.failures
}

#[test]
fn scenarios() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scenarios");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {dir}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "scn"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no scenarios in {dir}");
    let mut report = String::new();
    let mut failed = 0;
    for path in &paths {
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into());
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let failures = match catch_unwind(AssertUnwindSafe(|| run_script(&text))) {
            Ok(f) => f,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                vec![format!("panicked: {msg}")]
            }
        };
        if failures.is_empty() {
            println!("ok   {name}");
        } else {
            failed += 1;
            println!("FAIL {name}");
            let _ = writeln!(report, "=== {name}");
            for f in failures {
                let _ = writeln!(report, "  {f}");
            }
        }
    }
    assert!(
        failed == 0,
        "{failed} of {} scenarios failed:\n{report}",
        paths.len()
    );
}
