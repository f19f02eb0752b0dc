//! `--demo`: a small market from the catalog's reference prices (`data/gpu-price-list.csv`),
//! so a new user sees a working exchange at once.
//!
//! Three suppliers (an IDC in Shanghai, one in Beijing, an enterprise lab in Shenzhen) with
//! 14 nodes of H100, H200, A100, RTX 4090 and RTX 5090; offers at the reference spot price
//! plus a small per-node spread, preemptible at the list's preemptible price or 70 % of spot;
//! a buyer funded with 100,000 CNY holding one lease and one resting bid; a finance account.
//!
//! Rules (issue 25, item 5: a restart must not break what a user added):
//! - **The demo simulates only the nodes it seeded** ([`plan`], by supplier and name): its
//!   agents heartbeat them every [`DEMO_HEARTBEAT_MS`], deliver and wipe their leases. Other
//!   nodes of the demo suppliers — ones a user registered and runs a real `gpux-agent` for —
//!   are never heartbeated, delivered or wiped by the demo.
//! - **Its keys are its own and stay the same.** One account key per demo account (the role
//!   keys it prints), generated at random once and kept in [`DEMO_KEYS_FILE`] in the data
//!   directory (mode 0600; only their hashes are journaled, so the file is the only place the
//!   secrets live). Started again on the same data, the demo market is kept and the same keys
//!   are printed; nothing is revoked — neither node keys nor keys a user created on the demo
//!   accounts. A key of the file that no longer signs in for its account (revoked through the
//!   API, or a file from another store) is replaced by a new one, written to the file before
//!   it is registered; a revoked key is never registered again.

use crate::accounts::Role;
use crate::api::dto::{BidRequest, ConstraintsDto, DecimalStr, KindDto, PlacementDto, TifDto};
use crate::api::error::{ApiError, ApiResult};
use crate::api::{Api, buyer, engine_output};
use crate::market::Op;
use exchange::{
    AccountId, Command, Event, Interconnect, Jurisdiction, NodeId, NodeSpec, OfferTerms, Price,
};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Heartbeat period of the demo's node agents, ms.
pub const DEMO_HEARTBEAT_MS: u64 = 5_000;
/// The demo buyer's deposit, CNY.
pub const DEMO_DEPOSIT_CNY: i64 = 100_000;

/// The demo node whose agent never delivers (its image pulls "hang"): the cheapest RTX 4090,
/// offering one GPU, so the demo buyer's first lease takes it, misses its provisioning
/// deadline and fails over to another node while the user watches. The node then stays held
/// (so the user's own bids are delivered) until someone resumes it from the page or the API.
pub const DEMO_BROKEN_NODE: &str = "bj-4090-03";
/// Provisioning deadline of the broken node's offer, s (short, so the failover shows soon).
pub const DEMO_BROKEN_PROVISION_S: u32 = 20;
/// How long the demo's working agents take to provision a lease, ms (plus up to 2 s).
pub const DEMO_PROVISION_MS: u64 = 2_000;
/// How long the demo's agents take to wipe an ended lease, ms.
pub const DEMO_WIPE_MS: u64 = 1_500;
/// How often the demo's agents look at their nodes' leases, ms.
pub const DEMO_AGENT_POLL_MS: u64 = 500;

/// The file in the data directory that keeps the demo's role keys across restarts (JSON,
/// mode 0600): `{"keys": {"<account name>": "gpux_…"}}`.
pub const DEMO_KEYS_FILE: &str = "demo-keys.json";

/// The demo platform's taxpayer id (统一社会信用代码): 18 characters whose check character
/// (`X`) is computed by GB 32100-2015 §4.2, so [`crate::tax::taxpayer_id_error`] accepts it.
/// Fictitious: it names no registered company.
pub const DEMO_PLATFORM_TAXPAYER_ID: &str = "91310115MA1H00000X";

/// The demo platform's seller details (issue 25: the demo's invoices are filing-shaped, with
/// 名称, 纳税人识别号, 地址、电话 and 开户行及账号 filled). A fictitious company; `--demo` uses
/// them when `[api.invoice.platform]` is not configured ([`with_demo_seller`]).
pub fn demo_platform() -> crate::tax::TaxDetails {
    crate::tax::TaxDetails {
        name: "上海算力交易所演示有限公司".into(),
        taxpayer_id: DEMO_PLATFORM_TAXPAYER_ID.into(),
        address: "上海市浦东新区世纪大道100号".into(),
        phone: "021-61234567".into(),
        bank: "招商银行上海分行营业部".into(),
        bank_account: "121900000000001".into(),
    }
}

/// `api` with [`demo_platform`] as the seller when `[api.invoice.platform]` is still the
/// unconfigured default; a configured seller is kept as it is.
pub fn with_demo_seller(mut api: crate::api::ApiConfig) -> crate::api::ApiConfig {
    if api.invoice.platform == crate::api::finance::InvoiceConfig::default().platform {
        api.invoice.platform = demo_platform();
    }
    api
}

/// The demo's accounts and their keys: (role, name, key), suppliers first, then the buyer and
/// finance. The same keys on every start on one data directory.
pub type DemoKeys = Vec<(Role, String, String)>;

/// The demo's accounts, in the order their keys are printed.
fn demo_accounts() -> Vec<(Role, &'static str)> {
    SUPPLIERS
        .iter()
        .map(|s| (Role::Supplier, *s))
        .chain([(Role::Buyer, "demo-buyer"), (Role::Finance, "demo-finance")])
        .collect()
}

/// The shell lines that put the demo's keys where the README's examples expect them:
/// (variable, key) for `BUYER_KEY`, `SUPPLIER_KEY` (the first demo supplier,
/// demo-idc-shanghai), `FINANCE_KEY`, and `ADMIN_KEY` when the admin key is known (given with
/// `--admin-key` or `GPUX_ADMIN_KEY`).
pub fn exports<'a>(keys: &'a DemoKeys, admin_key: Option<&'a str>) -> Vec<(&'static str, &'a str)> {
    let of = |name: &str| {
        keys.iter()
            .find(|(_, n, _)| n == name)
            .map(|(_, _, k)| k.as_str())
    };
    [
        ("BUYER_KEY", of("demo-buyer")),
        ("SUPPLIER_KEY", of(SUPPLIERS[0])),
        ("FINANCE_KEY", of("demo-finance")),
        ("ADMIN_KEY", admin_key),
    ]
    .into_iter()
    .filter_map(|(var, key)| Some((var, key?)))
    .collect()
}

/// The nodes the demo seeded and simulates: (supplier account name, node name).
pub fn seeded_nodes() -> Vec<(&'static str, &'static str)> {
    plan().iter().map(|p| (p.supplier, p.name)).collect()
}

struct NodePlan {
    supplier: &'static str,
    name: &'static str,
    sku: &'static str,
    gpus: u32,
    region: &'static str,
    fabric: Interconnect,
    nvlink: bool,
    /// Spread over the reference spot price, CNY per GPU-hour.
    spread: &'static str,
}

const SUPPLIERS: [&str; 3] = ["demo-idc-shanghai", "demo-idc-beijing", "demo-lab-shenzhen"];

fn plan() -> Vec<NodePlan> {
    let n = |supplier, name, sku, gpus, region, fabric, nvlink, spread| NodePlan {
        supplier,
        name,
        sku,
        gpus,
        region,
        fabric,
        nvlink,
        spread,
    };
    use Interconnect::*;
    vec![
        n(
            SUPPLIERS[0],
            "sh-h100-01",
            "H100-80G",
            8,
            "cn-east-2",
            Infiniband,
            true,
            "0.00",
        ),
        n(
            SUPPLIERS[0],
            "sh-h100-02",
            "H100-80G",
            8,
            "cn-east-2",
            Infiniband,
            true,
            "0.40",
        ),
        n(
            SUPPLIERS[0],
            "sh-a100-01",
            "A100-80G",
            8,
            "cn-east-2",
            Roce,
            true,
            "0.00",
        ),
        n(
            SUPPLIERS[0],
            "sh-a100-02",
            "A100-80G",
            8,
            "cn-east-2",
            Roce,
            true,
            "-0.20",
        ),
        n(
            SUPPLIERS[1],
            "bj-4090-01",
            "RTX4090-24G",
            8,
            "cn-north-1",
            Pcie,
            false,
            "0.00",
        ),
        n(
            SUPPLIERS[1],
            "bj-4090-02",
            "RTX4090-24G",
            8,
            "cn-north-1",
            Pcie,
            false,
            "0.05",
        ),
        n(
            SUPPLIERS[1],
            "bj-4090-03",
            "RTX4090-24G",
            8,
            "cn-north-1",
            Pcie,
            false,
            "-0.03",
        ),
        n(
            SUPPLIERS[1],
            "bj-h200-01",
            "H200-141G",
            8,
            "cn-north-1",
            Infiniband,
            true,
            "0.00",
        ),
        n(
            SUPPLIERS[1],
            "bj-h100-01",
            "H100-80G",
            8,
            "cn-north-1",
            Roce,
            true,
            "-0.50",
        ),
        n(
            SUPPLIERS[2],
            "sz-4090-01",
            "RTX4090-24G",
            4,
            "cn-south-1",
            Pcie,
            false,
            "0.07",
        ),
        n(
            SUPPLIERS[2],
            "sz-4090-02",
            "RTX4090-24G",
            2,
            "cn-south-1",
            Pcie,
            false,
            "0.10",
        ),
        n(
            SUPPLIERS[2],
            "sz-4090-03",
            "RTX4090-24G",
            1,
            "cn-south-1",
            Pcie,
            false,
            "0.12",
        ),
        n(
            SUPPLIERS[2],
            "sz-5090-01",
            "RTX5090-32G",
            2,
            "cn-south-1",
            Pcie,
            false,
            "0.00",
        ),
        n(
            SUPPLIERS[2],
            "sz-a100-01",
            "A100-40G",
            4,
            "cn-south-1",
            Pcie,
            false,
            "0.00",
        ),
    ]
}

fn internal(msg: impl Into<String>) -> ApiError {
    ApiError::new(
        actix_web::http::StatusCode::INTERNAL_SERVER_ERROR,
        "demo_failed",
        msg,
    )
}

/// [`DEMO_KEYS_FILE`] as stored.
#[derive(Debug, Default, Serialize, Deserialize)]
struct KeyFile {
    /// What the file is, for a reader.
    #[serde(default)]
    about: String,
    /// Account name → key.
    keys: BTreeMap<String, String>,
}

/// True for the shape of a key [`crate::accounts::new_key`] makes.
fn looks_like_key(k: &str) -> bool {
    k.len() == 37
        && k.starts_with("gpux_")
        && k[5..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The saved keys (none when the file does not exist yet).
///
/// # Errors
/// The file exists but cannot be read or is not a key file.
fn read_keys(path: &Path) -> ApiResult<BTreeMap<String, String>> {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(internal(format!("reading {}: {e}", path.display()))),
        Ok(bytes) => serde_json::from_slice::<KeyFile>(&bytes)
            .map(|f| f.keys)
            .map_err(|e| {
                internal(format!(
                    "{} is not a demo key file ({e}): delete it to have new demo keys issued",
                    path.display()
                ))
            }),
    }
}

/// Writes the keys (owner read/write only), replacing the file at once (a temporary file,
/// synced, then renamed), so a crash leaves the old file or the new one.
///
/// # Errors
/// The directory or the file cannot be written.
fn write_keys(path: &Path, keys: &BTreeMap<String, String>) -> ApiResult<()> {
    use std::io::Write;
    let fail = |e: std::io::Error| internal(format!("writing {}: {e}", path.display()));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let body = serde_json::to_vec_pretty(&KeyFile {
        about: "API keys of the gpux demo accounts (gateway --demo); keep secret".into(),
        keys: keys.clone(),
    })
    .map_err(|e| internal(e.to_string()))?;
    let tmp = path.with_extension("json.tmp");
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(fail(e)),
        _ => {}
    }
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    let mut f = open.open(&tmp).map_err(fail)?;
    f.write_all(&body).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(fail)
}

/// Registers `key` on `account` (a new account named `name` when `account` is `None`);
/// answers the account id.
async fn register_key(
    api: &Api,
    account: Option<u64>,
    name: &str,
    role: Role,
    key: &str,
) -> ApiResult<u64> {
    let hash = crate::accounts::hash_key(key);
    let op = match account {
        Some(account) => Op::AddApiKey {
            account,
            key_hash: hash,
        },
        None => Op::CreateAccount {
            name: name.to_string(),
            role,
            key_hash: Some(hash),
        },
    };
    let c = api.submit(op).await?;
    if let Some(r) = &c.outcome.refusal {
        return Err(internal(format!(
            "registering the key of {name}: {}",
            r.message
        )));
    }
    let account = account
        .or(c.outcome.account)
        .ok_or_else(|| internal(format!("account {name} not created")))?;
    let key_id = c
        .outcome
        .key_id
        .clone()
        .ok_or_else(|| internal(format!("the key of {name} not added")))?;
    api.auth.insert(
        hash,
        crate::api::auth::Principal {
            account,
            role,
            key_id,
            node: None,
        },
    );
    Ok(account)
}

/// The demo accounts' keys: the saved ones that still sign in for their account, new ones
/// for the rest (saved to `path` before they are registered); creates the accounts when
/// `fresh`. Never revokes a key. Answers the keys and the accounts' ids by name.
async fn demo_keys(
    api: &Api,
    path: &Path,
    fresh: bool,
) -> ApiResult<(DemoKeys, BTreeMap<&'static str, u64>)> {
    let names = demo_accounts();
    let mut saved = read_keys(path)?;
    // Per account: its id (when the market exists) and whether its saved key signs in for it.
    let lookup: Vec<(&'static str, Option<u64>, Option<String>)> = names
        .iter()
        .map(|(_, n)| {
            (
                *n,
                None,
                saved.get(*n).filter(|k| looks_like_key(k)).cloned(),
            )
        })
        .collect();
    let found: Vec<(Option<u64>, bool)> = api
        .read(move |m, _| {
            lookup
                .iter()
                .map(|(name, _, key)| {
                    let id = m.accounts().by_name(name).map(|a| a.id);
                    let signs_in = key.as_deref().is_some_and(|k| {
                        let owner = m.accounts().by_key_hash(&crate::accounts::hash_key(k));
                        id.is_some() && owner.map(|a| a.id) == id
                    });
                    (id, signs_in)
                })
                .collect()
        })
        .await?;
    let mut keys = DemoKeys::new();
    let mut to_register = Vec::new();
    let mut ids = BTreeMap::new();
    for ((role, name), (id, signs_in)) in names.iter().zip(found) {
        if !fresh && id.is_none() {
            return Err(internal(format!("demo account {name} missing")));
        }
        let key = if signs_in && !fresh {
            saved[*name].clone()
        } else {
            let key = crate::accounts::new_key();
            saved.insert(name.to_string(), key.clone());
            to_register.push((*role, *name, id, key.clone()));
            key
        };
        if let Some(id) = id {
            ids.insert(*name, id);
        }
        keys.push((*role, name.to_string(), key));
    }
    if !to_register.is_empty() {
        // Saved first: a key registered but never saved could not be printed again.
        write_keys(path, &saved)?;
    }
    for (role, name, id, key) in to_register {
        let id = register_key(api, if fresh { None } else { id }, name, role, &key).await?;
        ids.insert(name, id);
    }
    Ok((keys, ids))
}

/// Creates the demo market (or revives it) and starts its node agents; answers the keys and
/// the agents' task (stop it at shutdown: it holds the API).
///
/// The demo accounts' keys are kept in [`DEMO_KEYS_FILE`] in `data_dir` (created if need
/// be): the same keys on every start (module docs).
///
/// # Errors
/// A command was refused, the journal is unavailable, or the key file cannot be read or
/// written.
pub async fn setup(
    api: &Api,
    data_dir: &Path,
) -> ApiResult<(DemoKeys, tokio::task::JoinHandle<()>)> {
    let existing = api
        .read(|m, _| m.accounts().by_name("demo-buyer").map(|a| a.id))
        .await?;
    let (keys, ids) = demo_keys(api, &data_dir.join(DEMO_KEYS_FILE), existing.is_none()).await?;
    if existing.is_none() {
        let now = crate::api::now_ms();
        for p in plan() {
            let sku = api
                .catalog
                .lookup(p.sku)
                .ok_or_else(|| internal(format!("{} not in the catalog", p.sku)))?;
            let reference = api.catalog.get(sku).and_then(|s| s.reference_spot);
            let pre_ref = api.catalog.get(sku).and_then(|s| s.reference_preemptible);
            let spread: Decimal = p.spread.parse().map_err(|_| internal("bad spread"))?;
            let spot = reference
                .map_or(Decimal::from(10), Price::to_decimal)
                .checked_add(spread)
                .ok_or_else(|| internal("price overflow"))?;
            let pre = pre_ref.map_or_else(
                || (spot * Decimal::new(7, 1)).round_dp(2),
                |p| p.to_decimal() + spread,
            );
            let supplier = AccountId(ids[p.supplier]);
            let c = api
                .submit(Op::Engine(Command::RegisterNode {
                    account: supplier,
                    spec: NodeSpec {
                        name: p.name.into(),
                        sku,
                        gpus: p.gpus,
                        region: p.region.into(),
                        jurisdiction: Jurisdiction::parse("CN").ok_or_else(|| internal("CN"))?,
                        interconnect: p.fabric,
                        nvlink: p.nvlink,
                        // Nodes on IB or RoCE share their supplier's fabric in their region:
                        // one domain each, so a gang (docs/market-rules.md §13) can be tried.
                        fabric: match p.fabric {
                            Interconnect::Pcie => None,
                            f => Some(exchange::NodeFabric {
                                domain: Some(format!(
                                    "{}-{}",
                                    p.region,
                                    if f == Interconnect::Infiniband {
                                        "ib"
                                    } else {
                                        "roce"
                                    }
                                )),
                                nic_gbps: Some(if f == Interconnect::Infiniband {
                                    3200
                                } else {
                                    800
                                }),
                            }),
                        },
                    },
                }))
                .await?;
            let node = engine_output(&c)?
                .events
                .iter()
                .find_map(|e| match e {
                    Event::NodeRegistered { node, .. } => Some(*node),
                    _ => None,
                })
                .ok_or_else(|| internal("node not registered"))?;
            let price = |d: Decimal| Price::from_decimal(d).map_err(|e| internal(e.to_string()));
            let c = api
                .submit(Op::Engine(Command::PostOffer {
                    account: supplier,
                    node,
                    terms: OfferTerms {
                        gpus: if p.name == DEMO_BROKEN_NODE {
                            1
                        } else {
                            p.gpus
                        },
                        spot_price: price(spot)?,
                        preemptible_price: Some(price(pre)?),
                        min_lease_s: 60,
                        max_lease_s: 7 * 24 * 3600,
                        available_until_ms: now + 30 * 24 * 3600 * 1000,
                        notice_s: 30,
                        provision_s: if p.name == DEMO_BROKEN_NODE {
                            DEMO_BROKEN_PROVISION_S
                        } else {
                            180
                        },
                    },
                }))
                .await?;
            let out = engine_output(&c)?;
            // Verification on (the demo's market): the first listing placed a run; the demo
            // host measures at once so the demo's bids below find the node listed.
            let run = out.events.iter().find_map(|e| match e {
                Event::VerificationStarted {
                    lease, gpu_mask, ..
                } => Some((lease.0, *gpu_mask)),
                _ => None,
            });
            if let (Some((lease, mask)), Some(reference)) = (
                run,
                api.catalog
                    .get(sku)
                    .and_then(|s| exchange::verify::reference_for(&s.id)),
            ) {
                report_demo_verification(
                    api,
                    supplier,
                    lease,
                    mask,
                    reference,
                    p.name == DEMO_BROKEN_NODE,
                )
                .await;
            }
        }
        let buyer_id = ids["demo-buyer"];
        api.submit(Op::Deposit {
            key: format!("{buyer_id}:demo-initial-deposit"),
            buyer: buyer_id,
            amount: Decimal::from(DEMO_DEPOSIT_CNY),
        })
        .await?;
        let bid = |coid: &str, sku: &str, gpus, limit: &str, tif| BidRequest {
            client_order_id: coid.into(),
            sku: sku.into(),
            gpus: Some(gpus),
            limit_price: DecimalStr(limit.parse().unwrap_or(Decimal::ONE)),
            kind: KindDto::Spot,
            placement: PlacementDto::SingleNode,
            gang: None,
            min_gpus: None,
            constraints: ConstraintsDto::default(),
            duration_s: Some(4 * 3600),
            time_in_force: tif,
            expires_at_ms: None,
            launch: Some(demo_launch()),
        };
        buyer::placed_bid(
            api,
            buyer_id,
            &bid("demo-1", "RTX4090-24G", 1, "2.50", TifDto::Ioc),
        )
        .await?;
        buyer::placed_bid(
            api,
            buyer_id,
            &bid("demo-2", "H100-80G", 8, "20.00", TifDto::Gtc),
        )
        .await?;
    }
    let agents = spawn_node_agents(api.clone()).await?;
    Ok((keys, agents))
}

/// The demo's node agents, for the nodes it seeded only ([`seeded_nodes`]: never another node
/// of the demo suppliers, which a user may run a real agent for): heartbeat each with all
/// GPUs healthy every [`DEMO_HEARTBEAT_MS`]; deliver each lease assigned to it within
/// [`DEMO_PROVISION_MS`] + 0–2 s with plausible access details (SSH to a documentation-range
/// address, a URL per exposed port), report ended leases torn down after [`DEMO_WIPE_MS`] —
/// except on [`DEMO_BROKEN_NODE`], which never reports ready.
async fn spawn_node_agents(api: Api) -> ApiResult<tokio::task::JoinHandle<()>> {
    let nodes: Vec<(AccountId, NodeId, u32, String)> = api
        .read(|m, _| {
            let seeded: Vec<(u64, &str)> = seeded_nodes()
                .into_iter()
                .filter_map(|(s, name)| Some((m.accounts().by_name(s)?.id, name)))
                .collect();
            m.engine()
                .nodes()
                .filter(|n| seeded.contains(&(n.supplier.0, n.name.as_str())))
                .map(|n| (n.supplier, n.id, n.gpus, n.name.clone()))
                .collect()
        })
        .await?;
    Ok(tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        let mut next_heartbeat = start;
        // Per node: when each of its leases was first seen needing work (provisioning or
        // wiping); only leases still needing work are kept.
        let mut seen: std::collections::HashMap<
            NodeId,
            std::collections::HashMap<u64, tokio::time::Instant>,
        > = Default::default();
        let mut every = tokio::time::interval(std::time::Duration::from_millis(DEMO_AGENT_POLL_MS));
        loop {
            every.tick().await;
            let now = tokio::time::Instant::now();
            if now >= next_heartbeat {
                next_heartbeat = now + std::time::Duration::from_millis(DEMO_HEARTBEAT_MS);
                for (account, node, gpus, _) in &nodes {
                    let _ = api
                        .seq
                        .submit(Op::Engine(Command::Heartbeat {
                            account: *account,
                            node: *node,
                            healthy_gpus: *gpus,
                        }))
                        .await;
                }
            }
            for (account, node, _, name) in &nodes {
                deliver_node(
                    &api,
                    *account,
                    *node,
                    name == DEMO_BROKEN_NODE,
                    seen.entry(*node).or_default(),
                    now,
                )
                .await;
            }
        }
    }))
}

/// A demo host's verification report (docs/market-rules.md §12.2): 96 % of the SKU's
/// reference figures on every GPU of the run (`verified`); the broken node's 80 %
/// (`degraded`: listed and flagged).
async fn report_demo_verification(
    api: &Api,
    account: AccountId,
    lease: u64,
    mask: u32,
    reference: &exchange::verify::Reference,
    broken: bool,
) {
    let pct = if broken { 80 } else { 96 };
    let gpus = (0..32u32)
        .filter(|i| mask & (1 << i) != 0)
        .map(|index| exchange::verify::GpuFigures {
            index,
            bf16_tflops_x10: Some(reference.bf16_tflops_x10 * pct / 100),
            mem_bw_gbps: Some(reference.mem_bw_gbps * pct / 100),
            faults: 0,
        })
        .collect();
    let _ = api
        .seq
        .submit(Op::Engine(exchange::Command::ReportVerification {
            account,
            lease: exchange::LeaseId(lease),
            figures: exchange::verify::VerificationFigures {
                gpus,
                allreduce_busbw_x10: reference.allreduce8_busbw_x10.map(|a| a * pct / 100),
                dcgm: None,
            },
        }))
        .await;
}

/// What one demo agent does on one poll: report ready or torn down.
async fn deliver_node(
    api: &Api,
    account: AccountId,
    node: NodeId,
    broken: bool,
    seen: &mut std::collections::HashMap<u64, tokio::time::Instant>,
    now: tokio::time::Instant,
) {
    use crate::delivery::{AccessDetails, Report};
    use std::time::Duration;
    let Ok((provisioning, wiping, run)) = api
        .read(move |m, _| {
            let Some(n) = m.engine().node(node) else {
                return (Vec::new(), Vec::new(), None);
            };
            // A verification run (§12.2) under way: its lease, GPUs and the SKU's reference.
            let run = m
                .engine()
                .verification(node)
                .and_then(|v| v.run)
                .and_then(|r| {
                    let sku = m.engine().catalog().get(n.sku)?;
                    let reference = exchange::verify::reference_for(&sku.id)?;
                    Some((r.lease.0, r.gpu_mask, *reference))
                });
            let provisioning: Vec<(u64, Vec<u16>)> = n
                .leases
                .iter()
                .filter_map(|l| m.engine().lease(*l))
                .filter(|l| l.provision_deadline_ms.is_some())
                .map(|l| {
                    let ports = m
                        .deliveries()
                        .launch(l.bid)
                        .map(|s| s.ports.clone())
                        .unwrap_or_default();
                    (l.id.0, ports)
                })
                .collect();
            let wiping: Vec<u64> = m.deliveries().wiping_on(node).map(|r| r.lease.0).collect();
            (provisioning, wiping, run)
        })
        .await
    else {
        return;
    };
    // Leases that ended or were wiped meanwhile need nothing more: forget them.
    seen.retain(|k, _| {
        provisioning.iter().any(|(l, _)| l == k)
            || wiping.contains(k)
            || run.is_some_and(|r| r.0 == *k)
    });
    let due =
        |seen: &mut std::collections::HashMap<u64, tokio::time::Instant>, key: u64, ms: u64| {
            let first = *seen.entry(key).or_insert(now);
            now.duration_since(first) >= Duration::from_millis(ms)
        };
    if let Some((lease, mask, reference)) = run
        && due(seen, lease, DEMO_PROVISION_MS)
    {
        seen.remove(&lease);
        report_demo_verification(api, account, lease, mask, &reference, broken).await;
    }
    for (lease, ports) in provisioning {
        if broken || !due(seen, lease, DEMO_PROVISION_MS + lease % 2_000) {
            continue;
        }
        seen.remove(&lease);
        let access = AccessDetails {
            ssh_host: Some(format!("203.0.113.{}", 10 + node.0 % 200)),
            ssh_port: Some(22_000 + (lease % 1_000) as u16),
            ssh_user: Some("root".into()),
            urls: ports
                .iter()
                .map(|p| (*p, format!("https://l{lease}-{p}.demo.gpux.example")))
                .collect(),
        };
        let _ = api
            .seq
            .submit(Op::Report(Report::Ready {
                account: account.0,
                lease,
                access,
            }))
            .await;
    }
    for lease in wiping {
        if !due(seen, lease, DEMO_WIPE_MS) {
            continue;
        }
        seen.remove(&lease);
        let _ = api
            .seq
            .submit(Op::Report(Report::TornDown {
                account: account.0,
                lease,
                method: "container and volumes removed; scratch NVMe blkdiscard; GPU memory cleared by driver reset (demo)".into(),
            }))
            .await;
    }
}

/// The demo buyer's launch spec: a PyTorch image reachable over SSH and Jupyter.
fn demo_launch() -> crate::api::launch::LaunchRequest {
    crate::api::launch::LaunchRequest {
        ssh_keys: vec![DEMO_SSH_KEY.to_string()],
        image: Some("nvcr.io/nvidia/pytorch:24.05-py3".into()),
        command: vec!["sleep".into(), "infinity".into()],
        env: std::collections::BTreeMap::from([("HF_HOME".into(), "/scratch/hf".into())]),
        ports: vec![8888],
        disk_gb: 200,
    }
}

/// The demo buyer's SSH public key (a throwaway key: its private half was never kept).
pub const DEMO_SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPhoa1qOz4O8pHhg06YIYUAUa2Ph1wr+ityyFcRifDJ4 demo@gpux";
