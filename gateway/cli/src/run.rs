//! The one `match`: each command calls the client and prints (tokio-rs/mini-redis
//! `src/bin/cli.rs`). Commands with more to do than one call live in `buyer`, `supplier`,
//! `admin` and `finance`.

use crate::cli::{Command, ConfigCmd, NodeCmd, NodeKeyCmd, OfferCmd, OffersCmd};
use crate::config::{self, Overrides, Resolved, Source};
use crate::error::CliError;
use crate::output::{Out, human, note};
use crate::{admin, buyer, finance, market, supplier};
use gpux_client::Client;
use tokio::sync::watch;

/// What a command runs with: settings, output, and the Ctrl-C flag.
pub struct Ctx {
    /// URL, key, profile.
    pub cfg: Resolved,
    /// Where results go.
    pub out: Out,
    /// Set by Ctrl-C.
    pub interrupt: Interrupt,
}

impl Ctx {
    /// A client without a key, for the public endpoints (a stale key in a profile cannot
    /// break them).
    pub fn public(&self) -> Result<Client, CliError> {
        let opts = self.cfg.client_options();
        Ok(Client::new_with_options(&self.cfg.url, None, &opts)?)
    }

    /// A client with the key; a clear usage error without one.
    pub fn client(&self) -> Result<Client, CliError> {
        let key = self.cfg.require_key()?;
        let opts = self.cfg.client_options();
        Ok(Client::new_with_options(&self.cfg.url, Some(key), &opts)?)
    }
}

/// Ctrl-C, as a flag commands can poll or await. The first Ctrl-C sets it; a second one exits
/// at once with status 130 (when the first one's cleanup hangs).
#[derive(Clone)]
pub struct Interrupt(watch::Receiver<bool>);

impl Interrupt {
    /// Listens for Ctrl-C from now on.
    pub fn install() -> Interrupt {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = tx.send(true);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(crate::error::EXIT_INTERRUPTED);
                }
            }
            // Keep the sender (and so the flag) alive.
            std::future::pending::<()>().await;
        });
        Interrupt(rx)
    }

    /// Whether Ctrl-C was pressed.
    pub fn fired(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes when Ctrl-C is pressed.
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|v| *v).await;
    }
}

/// Runs a command. Commands that handle Ctrl-C themselves (`bid`, which says how to check
/// whether an interrupted bid landed; `inventory --watch`) get the flag; every other one is
/// abandoned on Ctrl-C (exit 130).
pub async fn run(
    cmd: Command,
    overrides: Overrides,
    out: Out,
    interrupt: Interrupt,
) -> Result<(), CliError> {
    if let Command::Config(c) = cmd {
        return config_cmd(c, &overrides, out);
    }
    let ctx = Ctx {
        cfg: config::resolve(&overrides)?,
        out,
        interrupt: interrupt.clone(),
    };
    let own_interrupt =
        matches!(&cmd, Command::Bid(_)) || matches!(&cmd, Command::Inventory(i) if i.watch);
    if own_interrupt {
        return dispatch(cmd, &ctx).await;
    }
    tokio::select! {
        r = dispatch(cmd, &ctx) => r,
        () = interrupt.wait() => Err(CliError::Interrupted("interrupted".into())),
    }
}

async fn dispatch(cmd: Command, ctx: &Ctx) -> Result<(), CliError> {
    let out = ctx.out;
    match cmd {
        Command::Config(_) => unreachable!("handled before a client is made"),
        Command::Me => out.one(&ctx.client()?.me().await?, human::me),
        Command::Catalog => out.one(&ctx.public()?.catalog().await?, human::catalog),
        Command::Inventory(a) => buyer::inventory(ctx, a).await,
        Command::Bid(a) => buyer::bid(ctx, *a).await,
        Command::Bids => out.list(&ctx.client()?.bids().await?.bids, human::bids),
        Command::Cancel(a) => buyer::cancel(ctx, a).await,
        Command::Leases(a) => buyer::leases(ctx, a).await,
        Command::Lease { id } => {
            let l = ctx.client()?.lease(&id.to_string()).await?;
            out.one(&l, human::lease)
        }
        Command::Release {
            bid: Some(bid),
            lease: _,
        } => {
            let r = ctx.client()?.release_bid(&bid.to_string()).await?;
            out.one(&r, human::bid_released)
        }
        Command::Release { lease, bid: None } => {
            let lease = lease.ok_or_else(|| CliError::Usage("give a lease id or --bid".into()))?;
            let r = ctx.client()?.release_lease(&lease.to_string()).await?;
            out.one(&r, |r| {
                format!(
                    "lease {} released at {} (billing stopped)",
                    r.lease_id,
                    human::time(r.at_ms)
                )
            })
        }
        Command::Ssh { lease, args } => buyer::ssh(ctx, lease, args).await,
        Command::Balance => out.one(&ctx.client()?.balance().await?, human::balance),
        Command::Nodes => out.list(&ctx.client()?.nodes().await?.nodes, human::nodes),
        Command::Node(n) => node_cmd(ctx, n).await,
        Command::Offers { cmd: None } => {
            out.list(&ctx.client()?.offers().await?.offers, human::offers)
        }
        Command::Offers {
            cmd: Some(OffersCmd::Search(a)),
        } => market::search(ctx, &a).await,
        Command::Offer(o) => offer_cmd(ctx, o).await,
        Command::Earnings => out.one(&ctx.client()?.earnings().await?, human::earnings),
        Command::Report(a) => finance::report(ctx, a).await,
        Command::Adjust(a) => finance::adjust(ctx, a).await,
        Command::Periods { tz } => out.list(&ctx.client()?.periods().await?.periods, |p| {
            human::periods(p, tz)
        }),
        Command::Close(a) => finance::close(ctx, a).await,
        Command::Invoice(a) => finance::invoice(ctx, a).await,
        Command::Invoices(a) => finance::invoices(ctx, a).await,
        Command::Account(a) => admin::account(ctx, a).await,
        Command::Accounts => out.list(&ctx.client()?.accounts().await?.accounts, human::accounts),
        Command::Key(k) => admin::key(ctx, k).await,
        Command::Deposit(t) => admin::transfer(ctx, t, admin::Transfer::Deposit).await,
        Command::Payout(t) => admin::transfer(ctx, t, admin::Transfer::Payout).await,
    }
}

async fn node_cmd(ctx: &Ctx, cmd: NodeCmd) -> Result<(), CliError> {
    let out = ctx.out;
    let c = ctx.client()?;
    match cmd {
        NodeCmd::Register(a) => {
            let n = c.register_node(&supplier::node_request(a)).await?;
            out.one(&n, |n| {
                format!(
                    "node {} registered\n{}",
                    n.id,
                    human::nodes(std::slice::from_ref(n))
                )
            })
        }
        NodeCmd::Update(a) => {
            let id = a.id.to_string();
            let n = c.update_node(&id, &supplier::node_update(a)).await?;
            out.one(&n, |n| human::nodes(std::slice::from_ref(n)))
        }
        NodeCmd::Resume { id } => {
            let n = c.resume_node(&id.to_string()).await?;
            out.one(&n, |n| {
                format!(
                    "node {} resumed\n{}",
                    n.id,
                    human::nodes(std::slice::from_ref(n))
                )
            })
        }
        NodeCmd::Show { id } => {
            let n = c.node(&id.to_string()).await?;
            out.one(&n, human::node_detail)
        }
        NodeCmd::Key(NodeKeyCmd::Create { name }) => {
            let k = c.create_node_key(&name).await?;
            out.one(&k, |k| {
                format!(
                    "node key {} for node {:?} (shown once, keep it):\n  {}",
                    k.key_id, k.node_name, k.api_key
                )
            })
        }
        NodeCmd::Key(NodeKeyCmd::List) => {
            out.list(&c.node_keys().await?.node_keys, supplier::node_keys_table)
        }
        NodeCmd::Key(NodeKeyCmd::Revoke { key_id }) => {
            let r = c.revoke_node_key(&key_id).await?;
            out.one(&r, |r| format!("node key {} revoked", r.key_id))
        }
    }
}

async fn offer_cmd(ctx: &Ctx, cmd: OfferCmd) -> Result<(), CliError> {
    let out = ctx.out;
    let c = ctx.client()?;
    let one = |o: &gpux_wire::OfferView| human::offers(std::slice::from_ref(o));
    match cmd {
        OfferCmd::Post(a) => {
            let o = c.post_offer(&supplier::offer_post(a)?).await?;
            out.one(&o, |o| format!("offer {} posted\n{}", o.id, one(o)))
        }
        OfferCmd::Amend(a) => {
            let id = a.id.to_string();
            let current = c.offer(&id).await?;
            let o = c
                .amend_offer(&id, &supplier::offer_amend(&current, a)?)
                .await?;
            out.one(&o, |o| format!("offer {} amended\n{}", o.id, one(o)))
        }
        OfferCmd::Withdraw { id } => {
            let w = c.withdraw_offer(&id.to_string()).await?;
            out.one(&w, |w| {
                format!(
                    "offer {} withdrawn ({} preemptible lease(s) given notice)",
                    w.offer_id, w.preemption_notices
                )
            })
        }
        OfferCmd::Show { id } => out.one(&c.offer(&id.to_string()).await?, one),
    }
}

/// `gpux config …`: needs no server.
fn config_cmd(cmd: ConfigCmd, o: &Overrides, out: Out) -> Result<(), CliError> {
    match cmd {
        ConfigCmd::SetProfile { name, key_stdin } => set_profile(&name, key_stdin, o, out),
        ConfigCmd::Show => show_config(o, out),
    }
}

/// `gpux config set-profile`: only what was typed as flags (or piped with `--key-stdin`) is
/// stored, never the environment's values.
fn set_profile(name: &str, key_stdin: bool, o: &Overrides, out: Out) -> Result<(), CliError> {
    let file = match &o.file {
        Some(f) => f.clone(),
        None => config::default_path()?,
    };
    let flag = |v: &Option<(String, Source)>| {
        v.as_ref()
            .filter(|(_, s)| *s == Source::Flag)
            .map(|(v, _)| v.clone())
    };
    if key_stdin && flag(&o.key).is_some() {
        return Err(CliError::Usage(
            "give the key by --key or by --key-stdin, not both".into(),
        ));
    }
    let key = if key_stdin {
        let mut k = String::new();
        std::io::stdin()
            .read_line(&mut k)
            .map_err(|e| CliError::Usage(format!("cannot read the key from stdin: {e}")))?;
        Some(k.trim().to_string()).filter(|k| !k.is_empty())
    } else {
        flag(&o.key)
    };
    let url = flag(&o.url);
    let ca_cert = o
        .ca_cert
        .as_ref()
        .filter(|(_, s)| *s == Source::Flag)
        .map(|(c, _)| c.clone());
    if url.is_none() && key.is_none() && ca_cert.is_none() {
        return Err(CliError::Usage(
            "nothing to store: pass --url URL, --key KEY (or --key-stdin) and/or --ca-cert FILE"
                .into(),
        ));
    }
    // Refuse what no client could use: a bad URL, an unreadable CA file.
    if url.is_some() || ca_cert.is_some() {
        let mut opts = gpux_client::ClientOptions::default();
        if let Some(c) = &ca_cert {
            opts = opts.with_ca_cert(c);
        }
        Client::new_with_options(url.as_deref().unwrap_or(config::DEFAULT_URL), None, &opts)?;
    }
    let update = config::ProfileUpdate { url, key, ca_cert };
    let p = config::set_profile(&file, name, update)?;
    note(format!(
        "profile {name:?} saved in {} (mode 0600)",
        file.display()
    ));
    let masked = p.key.as_deref().map(config::mask_key);
    let shown = serde_json::json!({
        "profile": name,
        "file": file,
        "url": p.url,
        "key": masked,
        "ca_cert": p.ca_cert,
    });
    out.one(&shown, |_| {
        human::kv(&[
            ("profile", name.to_string()),
            ("url", p.url.clone().unwrap_or_else(|| "-".into())),
            ("key", masked.clone().unwrap_or_else(|| "-".into())),
            (
                "ca_cert",
                p.ca_cert
                    .as_ref()
                    .map_or_else(|| "-".into(), |c| c.display().to_string()),
            ),
        ])
    })
}

/// `gpux config show`: the settings in effect and where each came from (the key masked).
fn show_config(o: &Overrides, out: Out) -> Result<(), CliError> {
    let r = config::resolve(o)?;
    let shown = serde_json::json!({
        "file": r.file,
        "profile": r.profile,
        "url": r.url,
        "url_source": r.url_source,
        "key": r.key.as_deref().map(config::mask_key),
        "key_source": r.key.as_ref().map(|_| r.key_source),
        "ca_cert": r.ca_cert,
        "ca_cert_source": r.ca_cert.as_ref().map(|_| r.ca_cert_source),
    });
    out.one(&shown, |_| {
        let src = |s: Source| human::name(&s);
        human::kv(&[
            ("file", r.file.display().to_string()),
            ("profile", r.profile.clone()),
            ("url", format!("{} ({})", r.url, src(r.url_source))),
            (
                "key",
                match &r.key {
                    Some(k) => format!("{} ({})", config::mask_key(k), src(r.key_source)),
                    None => "none".into(),
                },
            ),
            (
                "ca_cert",
                match &r.ca_cert {
                    Some(c) => format!("{} ({})", c.display(), src(r.ca_cert_source)),
                    None => "none (the system's CAs)".into(),
                },
            ),
        ])
    })
}
