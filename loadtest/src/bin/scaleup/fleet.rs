//! The market the scale-up runs in: an admin (the key the gateway registered at start), one
//! buyer funded with [`BUYER_DEPOSIT`], one supplier whose fleet is N node agents in this
//! process.
//!
//! Each agent is the agent library's [`gpux_agent::run`] with simulated GPUs (`SKU:COUNT`, as
//! `gpux-agent --simulate`), its own node key (`POST /v1/node-keys`, docs/api.md §1.3.1) and
//! its own HTTP client (its own connections, as a host has), the default heartbeat period and
//! jitter, and shell hooks:
//! - provision: `/bin/sh provision.sh DELAY_FILE` reads the node's drawn delay (seconds) from
//!   its file, `sleep`s it, prints access details — one `sh` and one `sleep` process per
//!   lease, as a real agent runs its hook per lease;
//! - teardown: `/bin/sh teardown.sh` prints a wipe method.
//!
//! Agents start spread evenly over one heartbeat period ([`gpux_agent::config::
//! DEFAULT_HEARTBEAT_PERIOD_MS`]), so their heartbeat phases are spread as in a fleet that has
//! run for a while rather than all in step. Their state dirs are on tmpfs when there is one
//! (`/dev/shm`): the agent fsyncs its state file at each step, and 1,000 hosts each have a disk
//! of their own, not one shared with the server's journal.
//!
//! The supplier's account key registers nothing itself: each agent registers its node; the
//! supplier then posts one offer per node at the offer price. Every wait is bounded
//! ([`SETUP_TIMEOUT_MS`], [`LISTED_TIMEOUT_MS`]) and fails if an agent stopped.

use anyhow::{Context, bail};
use futures_util::{StreamExt, stream};
use gpux_agent::config::{AgentConfig, DEFAULT_HEARTBEAT_PERIOD_MS, HookConfig, Hooks};
use gpux_agent::gpus::SimulatedGpus;
use gpux_agent::{AgentError, SystemClock};
use gpux_client::Client;
use gpux_client::wire::{
    CreateAccountRequest, DecimalStr, IdStr, KindDto, NodeStatusDto, NodeView, OfferRequest, Role,
};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// What the buyer is funded with, CNY (a 1,000-GPU bid needs its limit × GPUs over the
/// exchange's 600 s runway; each run bills seconds).
pub const BUYER_DEPOSIT: &str = "1000000.00";
/// Region and jurisdiction of every node.
pub const REGION: &str = "cn-east-2";
/// Jurisdiction of every node.
pub const JURISDICTION: &str = "CN";
/// Setup requests in flight at once (node keys, offers, releases).
pub const SETUP_CONCURRENCY: usize = 32;
/// Longest wait for every agent to register its node, ms.
pub const SETUP_TIMEOUT_MS: u64 = 300_000;
/// Longest wait for every node to be online with its whole offer listed, ms.
pub const LISTED_TIMEOUT_MS: u64 = 300_000;
/// Poll period of the waits, ms.
pub const POLL_MS: u64 = 500;
/// Time limit of a hook, ms (the provisioning deadline, 180 s by default, is the other bound).
pub const HOOK_TIMEOUT_MS: u64 = 60_000;
/// SIGTERM → SIGKILL grace of a hook, ms.
pub const HOOK_GRACE_MS: u64 = 1_000;
/// How long stopping waits for the agents, ms.
pub const STOP_TIMEOUT_MS: u64 = 10_000;

/// The provision hook: notes when it starts and when its sleep ends (the machine's uptime, s,
/// read with shell builtins only: no extra process) in `$1.started` and `$1.slept`, sleeps the
/// node's drawn delay (seconds, in the file `$1`), prints the access details.
const PROVISION_SH: &str = r#"set -eu
read up rest < /proc/uptime
echo "$up" > "$1.started"
read delay < "$1"
sleep "$delay"
read up rest < /proc/uptime
echo "$up" > "$1.slept"
echo '{"ssh_host":"203.0.113.7","ssh_port":22,"ssh_user":"gpux"}'
"#;
const TEARDOWN_SH: &str = r#"set -eu
echo "scaleup: simulated host, nothing to wipe"
"#;

/// The admin, supplier and buyer.
pub struct Accounts {
    /// The supplier's account key.
    pub supplier: Client,
    /// The buyer.
    pub buyer: Client,
    /// The buyer's key (for the CLI).
    pub buyer_key: String,
}

/// Creates the supplier and the buyer, and funds the buyer.
///
/// # Errors
/// A request failed.
pub async fn accounts(base: &str, admin_key: &str) -> anyhow::Result<Accounts> {
    let admin = Client::new(base, Some(admin_key.to_string()))?;
    let mut keys = Vec::new();
    for (name, role) in [
        ("scaleup-idc", Role::Supplier),
        ("scaleup-buyer", Role::Buyer),
    ] {
        let a = admin
            .create_account(&CreateAccountRequest {
                name: name.into(),
                role,
            })
            .await
            .with_context(|| format!("creating account {name}"))?;
        keys.push((a.account.id, a.api_key));
    }
    let amount: DecimalStr = BUYER_DEPOSIT
        .parse()
        .map_err(|e| anyhow::anyhow!("deposit amount: {e}"))?;
    admin
        .deposit(&keys[1].0, amount, "scaleup-deposit")
        .await
        .context("funding the buyer")?;
    Ok(Accounts {
        supplier: admin.with_key(&keys[0].1)?,
        buyer: admin.with_key(&keys[1].1)?,
        buyer_key: keys[1].1.clone(),
    })
}

/// The fleet's shape.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Nodes (agents).
    pub agents: usize,
    /// Simulated GPUs per node.
    pub gpus_per_node: u32,
    /// Catalog SKU.
    pub sku: String,
    /// Offer (spot) price, CNY per GPU-hour.
    pub offer_price: DecimalStr,
    /// Run the shell hooks (else the agent's simulated delivery: ready at once, no process; a
    /// diagnostic that leaves out the hook processes and the delays).
    pub hooks: bool,
}

/// One node of the fleet.
#[derive(Clone, Debug)]
pub struct Node {
    /// Its name.
    pub name: String,
    /// Its id (once registered).
    pub id: String,
    /// The file its provision hook reads its delay from.
    pub delay_file: PathBuf,
}

/// The running agents.
pub struct Fleet {
    /// The nodes, in name order.
    pub nodes: Vec<Node>,
    /// Where the agents keep their state.
    pub state_dir: PathBuf,
    /// Held nodes resumed so far.
    pub resumed: usize,
    spec: Spec,
    stop: watch::Sender<bool>,
    agents: JoinSet<(String, Result<(), AgentError>)>,
    _state: tempfile::TempDir,
}

impl Fleet {
    /// Writes the hooks, makes the node keys, starts the agents, waits for their nodes and
    /// posts one offer per node.
    ///
    /// # Errors
    /// A request failed, an agent stopped, or the agents did not register in time.
    pub async fn start(
        spec: Spec,
        base: &str,
        supplier: &Client,
        work: &Path,
    ) -> anyhow::Result<Fleet> {
        let hooks = write_hooks(work)?;
        let names: Vec<String> = (0..spec.agents).map(|i| format!("scale-{i:04}")).collect();
        let keys = node_keys(supplier, &names).await?;
        let state = tempfile::Builder::new()
            .prefix("gpux-scaleup-agents-")
            .tempdir_in(state_root())
            .context("agent state dir")?;
        let (stop, stop_rx) = watch::channel(false);
        let mut fleet = Fleet {
            nodes: Vec::new(),
            state_dir: state.path().to_path_buf(),
            resumed: 0,
            spec,
            stop,
            agents: JoinSet::new(),
            _state: state,
        };
        for (i, (name, key)) in names.iter().zip(&keys).enumerate() {
            let delay_file = work.join("delays").join(name);
            std::fs::write(&delay_file, "0.000\n")?;
            fleet.spawn_agent(i, name, key, base, &hooks, &delay_file, stop_rx.clone())?;
            fleet.nodes.push(Node {
                name: name.clone(),
                id: String::new(),
                delay_file,
            });
        }
        fleet.wait_registered(supplier).await?;
        fleet.post_offers(supplier).await?;
        Ok(fleet)
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn_agent(
        &mut self,
        i: usize,
        name: &str,
        key: &str,
        base: &str,
        hooks: &(PathBuf, PathBuf),
        delay_file: &Path,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let simulate = format!("{}:{}", self.spec.sku, self.spec.gpus_per_node);
        let hook = |argv: Vec<String>| HookConfig {
            argv,
            timeout_ms: HOOK_TIMEOUT_MS,
            grace_ms: HOOK_GRACE_MS,
        };
        let sh = |p: &Path| vec!["/bin/sh".to_string(), p.display().to_string()];
        let mut provision = sh(&hooks.0);
        provision.push(delay_file.display().to_string());
        let cfg = AgentConfig {
            url: base.into(),
            key: Some(key.into()),
            name: name.into(),
            region: REGION.into(),
            jurisdiction: JURISDICTION.into(),
            simulate: Some(simulate.clone()),
            hooks: if self.spec.hooks {
                Hooks {
                    provision: hook(provision),
                    teardown: hook(sh(&hooks.1)),
                    ..Hooks::default()
                }
            } else {
                Hooks::default()
            },
            state_dir: self.state_dir.join(name),
            ..AgentConfig::default()
        };
        let gpus = Arc::new(SimulatedGpus::parse(&simulate)?);
        let client = Client::new(base, Some(key.into()))?;
        let offset = DEFAULT_HEARTBEAT_PERIOD_MS * i as u64 / self.spec.agents.max(1) as u64;
        let name = name.to_string();
        self.agents.spawn(async move {
            tokio::time::sleep(Duration::from_millis(offset)).await;
            let r = gpux_agent::run(cfg, gpus, client, SystemClock, stop).await;
            (name, r)
        });
        Ok(())
    }

    /// `Err` when an agent has stopped (none should before [`Fleet::stop`]).
    pub fn check_agents(&mut self) -> anyhow::Result<()> {
        match self.agents.try_join_next() {
            None => Ok(()),
            Some(Ok((name, Ok(())))) => bail!("agent {name} stopped"),
            Some(Ok((name, Err(e)))) => bail!("agent {name} failed: {e}"),
            Some(Err(e)) => bail!("an agent task failed: {e}"),
        }
    }

    async fn wait_registered(&mut self, supplier: &Client) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_millis(SETUP_TIMEOUT_MS);
        loop {
            self.check_agents()?;
            let ids: HashMap<String, String> = supplier
                .nodes()
                .await?
                .nodes
                .into_iter()
                .map(|n| (n.name, n.id))
                .collect();
            if self.nodes.iter().all(|n| ids.contains_key(&n.name)) {
                for n in &mut self.nodes {
                    n.id = ids[&n.name].clone();
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{} of {} nodes registered within {SETUP_TIMEOUT_MS} ms",
                    ids.len(),
                    self.nodes.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }

    async fn post_offers(&self, supplier: &Client) -> anyhow::Result<()> {
        let posts = self.nodes.iter().map(|n| {
            let r = OfferRequest {
                node_id: n.id.parse().ok().map(IdStr),
                gpus: self.spec.gpus_per_node,
                spot_price: self.spec.offer_price,
                preemptible_price: None,
                min_lease_s: None,
                max_lease_s: None,
                available_until_ms: None,
                notice_s: None,
                provision_s: None,
                sla: None,
            };
            async move { supplier.post_offer(&r).await }
        });
        let results: Vec<_> = stream::iter(posts)
            .buffer_unordered(SETUP_CONCURRENCY)
            .collect()
            .await;
        for r in results {
            r.context("posting an offer")?;
        }
        Ok(())
    }

    /// Waits until every node is online, holds no lease and no wipe, and its whole offer is
    /// listed; resumes held nodes as their supplier would (a lease not delivered holds its
    /// node, docs/market-rules.md §11.8; counted in [`Fleet::resumed`]) (the node's `listed_free_gpus`, and the SKU's public spot inventory summing to
    /// the fleet's GPUs). Answers how long it took.
    ///
    /// # Errors
    /// An agent stopped, a request failed, or [`LISTED_TIMEOUT_MS`] passed.
    pub async fn wait_listed(&mut self, supplier: &Client) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(LISTED_TIMEOUT_MS);
        let want = self.spec.gpus_per_node as u64 * self.nodes.len() as u64;
        let mut resumed: HashSet<String> = HashSet::new();
        loop {
            self.check_agents()?;
            let nodes = supplier.nodes().await?.nodes;
            for n in nodes.iter().filter(|n| n.held.is_some()) {
                if resumed.insert(n.id.clone()) {
                    supplier
                        .resume_node(&n.id)
                        .await
                        .context("resuming a held node")?;
                    self.resumed += 1;
                }
            }
            let ready = nodes.iter().filter(|n| self.node_listed(n)).count();
            let free: u64 = supplier
                .inventory(&self.spec.sku, None)
                .await?
                .levels
                .iter()
                .filter(|l| l.kind == KindDto::Spot)
                .map(|l| u64::from(l.free_gpus))
                .sum();
            if ready == self.nodes.len() && free == want {
                return Ok(started.elapsed());
            }
            if Instant::now() > deadline {
                bail!(
                    "after {LISTED_TIMEOUT_MS} ms: {ready} of {} nodes online and fully listed, {free} of {want} GPUs in the inventory",
                    self.nodes.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }

    fn node_listed(&self, n: &NodeView) -> bool {
        n.status == NodeStatusDto::Online
            && n.offer_id.is_some()
            && n.held.is_none()
            && n.leased_gpus == 0
            && n.wiping_gpus == 0
            && n.listed_free_gpus == self.spec.gpus_per_node
    }

    /// Writes each node's provisioning delay (ms, in node order) for its next lease.
    ///
    /// # Errors
    /// A file cannot be written.
    pub fn write_delays(&self, delays_ms: &[u64]) -> anyhow::Result<()> {
        for (n, ms) in self.nodes.iter().zip(delays_ms) {
            std::fs::write(&n.delay_file, format!("{}.{:03}\n", ms / 1000, ms % 1000))?;
            for mark in [STARTED, SLEPT] {
                let _ = std::fs::remove_file(mark_file(&n.delay_file, mark));
            }
        }
        Ok(())
    }

    /// Node id → (hook started, sleep ended), the machine's uptime in s, as the provision
    /// hooks noted them since [`Fleet::write_delays`].
    pub fn hook_marks(&self) -> HashMap<String, (Option<f64>, Option<f64>)> {
        let read = |n: &Node, mark: &str| {
            std::fs::read_to_string(mark_file(&n.delay_file, mark))
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
        };
        self.nodes
            .iter()
            .map(|n| (n.id.clone(), (read(n, STARTED), read(n, SLEPT))))
            .collect()
    }

    /// Stops every agent (their running hooks are killed) and waits for them.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_millis(STOP_TIMEOUT_MS), async {
            while self.agents.join_next().await.is_some() {}
        })
        .await;
        self.agents.shutdown().await;
    }
}

/// Suffix of the file a provision hook notes its start in.
const STARTED: &str = "started";
/// Suffix of the file a provision hook notes the end of its sleep in.
const SLEPT: &str = "slept";

fn mark_file(delay_file: &Path, mark: &str) -> PathBuf {
    let mut name = delay_file.as_os_str().to_owned();
    name.push(format!(".{mark}"));
    PathBuf::from(name)
}

/// The machine's uptime, s (`/proc/uptime`, 10 ms steps): the provision hooks' clock.
pub fn uptime_s() -> Option<f64> {
    std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// tmpfs when there is one (module docs), else the temp dir.
fn state_root() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// The hook scripts (provision, teardown) and the delays' dir under `work`.
fn write_hooks(work: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(work.join("delays"))?;
    let provision = work.join("provision.sh");
    let teardown = work.join("teardown.sh");
    std::fs::write(&provision, PROVISION_SH)?;
    std::fs::write(&teardown, TEARDOWN_SH)?;
    Ok((provision, teardown))
}

/// One node key per name, made by the supplier.
async fn node_keys(supplier: &Client, names: &[String]) -> anyhow::Result<Vec<String>> {
    let calls = names.iter().map(|name| async move {
        supplier
            .create_node_key(name)
            .await
            .with_context(|| format!("node key for {name}"))
            .map(|k| k.api_key)
    });
    stream::iter(calls)
        .buffered(SETUP_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Releases `leases` as the buyer; answers how many releases failed (and the first error).
pub async fn release_all(buyer: &Client, leases: &[String]) -> (usize, Option<String>) {
    let calls = leases
        .iter()
        .map(|id| async move { buyer.release_lease(id).await });
    let results: Vec<_> = stream::iter(calls)
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect()
        .await;
    let errors: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    (errors.len(), errors.into_iter().next())
}
