//! Output: human tables, or JSON Lines with `--json` (after cargo's `machine_message` and
//! ripgrep's JSON printer). Rules:
//!
//! - stdout carries results only: tables, or one JSON object per line. Each object is a wire
//!   type of `gpux-wire` exactly as the API answered it (a `LeaseView`, a `BidPlaced`, …); a
//!   list is one line per item, never an array; an empty list prints nothing.
//! - stderr carries everything else: notes, progress spinners, warnings, errors.
//! - A closed stdout (`gpux leases | head -1`) ends the process quietly with status 0.
//!
//! The human renderers ([`human`]) are the only place that formats for people.

use crate::error::CliError;
use serde::Serialize;
use std::io::Write;

/// Where results go.
#[derive(Clone, Copy, Debug)]
pub struct Out {
    /// JSON Lines instead of tables.
    pub json: bool,
}

impl Out {
    /// One JSON object as one line on stdout.
    pub fn line<T: Serialize + ?Sized>(&self, v: &T) -> Result<(), CliError> {
        let text = serde_json::to_string(v)
            .map_err(|e| CliError::Unavailable(format!("cannot encode JSON: {e}")))?;
        write_stdout(format_args!("{text}\n"));
        Ok(())
    }

    /// Text for people on stdout (a table, a summary).
    pub fn text(&self, s: impl std::fmt::Display) {
        write_stdout(format_args!("{s}\n"));
    }

    /// A list: one JSON line per item, or the table `human` renders.
    pub fn list<T: Serialize>(
        &self,
        items: &[T],
        human: impl FnOnce(&[T]) -> String,
    ) -> Result<(), CliError> {
        if self.json {
            items.iter().try_for_each(|i| self.line(i))
        } else {
            self.text(human(items));
            Ok(())
        }
    }

    /// One object: a JSON line, or what `human` renders.
    pub fn one<T: Serialize>(
        &self,
        item: &T,
        human: impl FnOnce(&T) -> String,
    ) -> Result<(), CliError> {
        if self.json {
            self.line(item)
        } else {
            self.text(human(item));
            Ok(())
        }
    }
}

/// A note for people, on stderr (never part of the results).
pub fn note(s: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr(), "{s}");
}

fn write_stdout(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        let _ = writeln!(std::io::stderr(), "gpux: cannot write to stdout: {e}");
        std::process::exit(crate::error::EXIT_UNAVAILABLE);
    }
}

/// Human renderings of the wire types.
pub mod human {
    use chrono::TimeZone;
    use comfy_table::{CellAlignment, Table, presets};
    use gpux_wire::ws::InventorySnapshot;
    use gpux_wire::*;

    /// A table with a header row, no borders (easy to read and to grep).
    pub fn table(header: &[&str]) -> Table {
        let mut t = Table::new();
        t.load_style(presets::NOTHING);
        t.set_header(header.to_vec());
        t
    }

    fn right(t: &mut Table, cols: &[usize]) {
        for &c in cols {
            if let Some(col) = t.column_mut(c) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
    }

    /// A time in the local zone, `2026-05-12 16:00:00`.
    pub fn time(ms: i64) -> String {
        chrono::Local
            .timestamp_millis_opt(ms)
            .single()
            .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or_else(|| ms.to_string())
    }

    /// An optional time, `-` when absent.
    pub fn opt_time(ms: Option<i64>) -> String {
        ms.map(time).unwrap_or_else(|| "-".into())
    }

    /// A node agent's clock offset from the exchange, ms → `+600.0 s` (ahead), `-0.2 s`
    /// (behind); `-` before its agent reported one (issue 25).
    pub fn clock_offset(ms: Option<i64>) -> String {
        ms.map_or_else(
            || "-".into(),
            |ms| {
                let sign = if ms < 0 { '-' } else { '+' };
                format!("{sign}{:.1} s", ms.unsigned_abs() as f64 / 1000.0)
            },
        )
    }

    /// Most decimals of an amount of money shown: CNY in whole fen.
    pub const MONEY_DECIMALS: u32 = 2;
    /// Most decimals of a rate (CNY per hour) shown: a price's 0.0001 CNY ticks.
    pub const RATE_DECIMALS: u32 = 4;

    /// An amount of CNY at its precision, `99929.65` (the ledger's exact value has up to 12
    /// decimals), half away from zero as the invoices round. Text that is no decimal is shown
    /// as sent.
    pub fn money(s: &str) -> String {
        let Ok(d) = s.parse::<rust_decimal::Decimal>() else {
            return s.to_string();
        };
        let mut r = d.round_dp_with_strategy(
            MONEY_DECIMALS,
            rust_decimal::RoundingStrategy::MidpointAwayFromZero,
        );
        r.rescale(MONEY_DECIMALS);
        r.to_string()
    }

    /// A rate in CNY per hour: up to [`RATE_DECIMALS`], at least 2 (`12.50`, `0.0833`).
    pub fn rate(s: &str) -> String {
        let Ok(d) = s.parse::<rust_decimal::Decimal>() else {
            return s.to_string();
        };
        let mut r = d
            .round_dp_with_strategy(
                RATE_DECIMALS,
                rust_decimal::RoundingStrategy::MidpointAwayFromZero,
            )
            .normalize();
        if r.scale() < MONEY_DECIMALS {
            r.rescale(MONEY_DECIMALS);
        }
        r.to_string()
    }

    /// An optional amount, `-` when absent.
    fn opt_money(s: &Option<String>) -> String {
        s.as_deref().map(money).unwrap_or_else(|| "-".into())
    }

    /// A long span for people, in its largest whole unit, rounded: `about 2 years`, `about 3
    /// hours`.
    pub fn about(secs: u64) -> String {
        const UNITS: [(u64, &str); 6] = [
            (365 * 86_400, "year"),
            (30 * 86_400, "month"),
            (86_400, "day"),
            (3_600, "hour"),
            (60, "minute"),
            (1, "second"),
        ];
        let (unit, name) = UNITS
            .iter()
            .copied()
            .find(|(u, _)| secs >= *u)
            .unwrap_or((1, "second"));
        let n = (secs + unit / 2) / unit;
        format!("about {n} {name}{}", if n == 1 { "" } else { "s" })
    }

    /// A time in `tz`: the date alone at local midnight (`2026-11-01`), else
    /// `2026-11-03 14:05:00`.
    pub fn zoned(ms: i64, tz: chrono_tz::Tz) -> String {
        let Some(t) = tz.timestamp_millis_opt(ms).single() else {
            return ms.to_string();
        };
        if t.time() == chrono::NaiveTime::MIN {
            t.format("%Y-%m-%d").to_string()
        } else {
            t.format("%Y-%m-%d %H:%M:%S").to_string()
        }
    }

    /// A message of the API with every `<ms since epoch> ms` written as a time in `tz`
    /// (`period ending at 4102444800000 ms` → `period ending at 2100-01-01 (Asia/Shanghai)`).
    pub fn ms_as_times(msg: &str, tz: chrono_tz::Tz) -> String {
        let words: Vec<&str> = msg.split(' ').collect();
        let mut out: Vec<String> = Vec::with_capacity(words.len());
        let mut i = 0;
        while i < words.len() {
            let w = words[i];
            let next = words.get(i + 1).copied().unwrap_or("");
            let is_ms = w.len() >= 10 && w.bytes().all(|b| b.is_ascii_digit());
            match (is_ms, next.strip_prefix("ms"), w.parse::<i64>()) {
                (true, Some(rest), Ok(ms)) => {
                    out.push(format!("{} ({}){rest}", zoned(ms, tz), tz.name()));
                    i += 2;
                }
                _ => {
                    out.push(w.to_string());
                    i += 1;
                }
            }
        }
        out.join(" ")
    }

    /// Seconds as `1h 30m`, `45s`.
    pub fn secs(s: u64) -> String {
        humantime::format_duration(std::time::Duration::from_secs(s)).to_string()
    }

    fn opt<T: ToString>(v: &Option<T>) -> String {
        v.as_ref().map(T::to_string).unwrap_or_else(|| "-".into())
    }

    /// A serde enum's wire name (`single_node`).
    pub fn name<T: serde::Serialize>(v: &T) -> String {
        match serde_json::to_value(v) {
            Ok(serde_json::Value::String(s)) => s,
            _ => "?".into(),
        }
    }

    fn empty(t: Table, what: &str, n: usize) -> String {
        if n == 0 {
            format!("(no {what})")
        } else {
            t.to_string()
        }
    }

    /// `gpux catalog`.
    pub fn catalog(c: &CatalogView) -> String {
        let mut t = table(&[
            "SKU",
            "VENDOR",
            "MEMORY GB",
            "CLASS",
            "REF SPOT",
            "REF PREEMPTIBLE",
        ]);
        for s in &c.skus {
            t.add_row(vec![
                s.sku.clone(),
                s.vendor.clone(),
                s.gpu_memory_gb.to_string(),
                s.class.clone(),
                opt(&s.reference_spot_price),
                opt(&s.reference_preemptible_price),
            ]);
        }
        right(&mut t, &[2, 4, 5]);
        t.to_string()
    }

    /// `gpux inventory`: levels of one or more SKUs (prices CNY per GPU-hour).
    pub fn inventory(snaps: &[InventorySnapshot]) -> String {
        let mut t = table(&[
            "SKU",
            "REGION",
            "KIND",
            "PRICE",
            "FREE GPUS",
            "MAX ON ONE NODE",
            "VERIFIED",
        ]);
        let mut n = 0;
        for s in snaps {
            for l in &s.levels {
                n += 1;
                t.add_row(vec![
                    s.sku.clone(),
                    l.region.clone(),
                    l.kind.as_str().to_string(),
                    l.price.clone(),
                    l.free_gpus.to_string(),
                    l.max_single_node.to_string(),
                    l.verified_free_gpus
                        .map_or_else(|| "-".into(), |v| v.to_string()),
                ]);
            }
        }
        right(&mut t, &[3, 4, 5, 6]);
        empty(t, "listed capacity", n)
    }

    /// `gpux bid` (placed).
    pub fn bid_placed(b: &BidPlaced) -> String {
        let mut s = format!(
            "bid {} ({}): {}, {} GPU(s) filled, {} resting",
            opt(&b.bid_id),
            b.client_order_id,
            name(&b.status),
            b.filled_gpus,
            b.remaining_gpus
        );
        if let Some(r) = &b.close_reason {
            s += &format!(", close reason {}", name(r));
        }
        if let Some(d) = &b.close_detail {
            s += &format!("\n  {}", d.message);
        }
        if !b.fills.is_empty() {
            let mut t = table(&["LEASE", "NODE", "GPUS", "PRICE", "KIND", "START", "END"]);
            for f in &b.fills {
                t.add_row(vec![
                    f.lease_id.clone(),
                    f.node_id.clone(),
                    f.gpus.to_string(),
                    f.price.clone(),
                    f.kind.as_str().to_string(),
                    time(f.start_ms),
                    time(f.end_ms),
                ]);
            }
            right(&mut t, &[2, 3]);
            s += "\n";
            s += &t.to_string();
        }
        s
    }

    /// `gpux bid --gang` (placed): the members in rank order and when billing starts.
    pub fn gang_placed(b: &BidPlaced) -> String {
        let mut s = bid_placed(b);
        if !b.fills.is_empty() {
            let members: Vec<&str> = b.fills.iter().map(|f| f.lease_id.as_str()).collect();
            s += &format!(
                "\ngang {}: {} member(s) in rank order: {}\nbilling starts when the whole gang \
                 is ready (every member's node reported it ready); `gpux release --bid {}` \
                 ends them all",
                opt(&b.bid_id),
                members.len(),
                members.join(", "),
                opt(&b.bid_id)
            );
        }
        s
    }

    /// `gpux release --bid`.
    pub fn bid_released(r: &gpux_wire::BidReleased) -> String {
        let mut s = format!(
            "bid {}: {} lease(s) released at {} (billing stopped)",
            r.bid_id,
            r.released.len(),
            time(r.at_ms)
        );
        if !r.released.is_empty() {
            s += &format!(": {}", r.released.join(", "));
        }
        if r.canceled {
            s += "; its resting rest canceled";
        }
        s
    }

    /// `gpux inventory domains`.
    pub fn domains(rows: &[gpux_wire::DomainInventoryView]) -> String {
        let mut t = table(&[
            "DOMAIN",
            "SKU",
            "REGION",
            "FABRIC",
            "NIC GBIT/S",
            "WHOLE FREE NODES",
            "FROM",
            "LARGEST GANG",
        ]);
        for r in rows {
            let nic = match (r.nic_gbps_min, r.nic_gbps_max) {
                (Some(a), Some(b)) if a == b => a.to_string(),
                (Some(a), Some(b)) => format!("{a}-{b}"),
                _ => "-".into(),
            };
            let sizes: Vec<String> = r
                .free_nodes
                .iter()
                .map(|z| format!("{}×{}", z.nodes, z.gpus_per_node))
                .collect();
            t.add_row(vec![
                r.domain_id.clone(),
                r.sku.clone(),
                r.region.clone(),
                name(&r.interconnect),
                nic,
                sizes.join(" "),
                r.cheapest_spot_price.clone(),
                format!("{}x{}", r.largest_gang.nodes, r.largest_gang.gpus_per_node),
            ]);
        }
        empty(t, "fabric domains with whole free nodes", rows.len())
    }

    /// `gpux bids`.
    pub fn bids(bids: &[BidView]) -> String {
        let mut t = table(&[
            "ID",
            "CLIENT ORDER",
            "SKU",
            "GPUS",
            "REMAINING",
            "LIMIT",
            "KIND",
            "PLACEMENT",
            "DURATION",
            "EXPIRES",
        ]);
        for b in bids {
            t.add_row(vec![
                b.id.clone(),
                opt(&b.client_order_id),
                b.sku.clone(),
                b.gpus.to_string(),
                b.remaining.to_string(),
                b.limit_price.clone(),
                b.kind.as_str().to_string(),
                name(&b.placement),
                b.duration_s.map(secs).unwrap_or_else(|| "open".into()),
                opt_time(b.expires_at_ms),
            ]);
        }
        right(&mut t, &[3, 4, 5]);
        empty(t, "resting bids", bids.len())
    }

    /// The SSH command of a lease's access details, `ssh -p PORT USER@HOST`.
    pub fn ssh_command(a: &AccessView) -> Option<String> {
        if let Some(c) = &a.ssh_command {
            return Some(c.clone());
        }
        let host = a.ssh_host.as_ref()?;
        let port = a.ssh_port.unwrap_or(22);
        Some(match &a.ssh_user {
            Some(u) => format!("ssh -p {port} {u}@{host}"),
            None => format!("ssh -p {port} {host}"),
        })
    }

    /// `gpux leases`.
    pub fn leases(leases: &[LeaseView]) -> String {
        let mut t = table(&[
            "ID", "STATE", "SKU", "REGION", "GPUS", "PRICE", "KIND", "START", "END", "CHARGED",
            "ACCESS",
        ]);
        for l in leases {
            // A preemption notice moves the end forward: it shows, marked.
            let end = match (l.ended_at_ms, l.notice_deadline_ms) {
                (Some(ended), _) => time(ended),
                (None, Some(notice)) => format!("{} (notice)", time(notice)),
                (None, None) => time(l.end_ms),
            };
            t.add_row(vec![
                l.id.clone(),
                match l.end_reason {
                    Some(r) => format!("ended ({})", name(&r)),
                    None => name(&l.state),
                },
                l.sku.clone(),
                l.region.clone(),
                l.gpus.to_string(),
                l.price.clone(),
                l.kind.as_str().to_string(),
                time(l.start_ms),
                end,
                opt_money(&l.charged),
                l.access
                    .as_ref()
                    .and_then(ssh_command)
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
        right(&mut t, &[4, 5, 9]);
        empty(t, "leases", leases.len())
    }

    /// `gpux lease ID`: every field worth reading, one per line.
    pub fn lease(l: &LeaseView) -> String {
        let mut rows: Vec<(&str, String)> = vec![
            ("lease", l.id.clone()),
            ("state", name(&l.state)),
            ("bid", l.bid_id.clone()),
            ("node", l.node_id.clone()),
            ("offer", l.offer_id.clone()),
            ("sku", format!("{} in {}", l.sku, l.region)),
            ("kind", l.kind.as_str().to_string()),
            ("gpus", format!("{} (indexes {:?})", l.gpus, l.gpu_indexes)),
            ("price", format!("{} CNY per GPU-hour", l.price)),
            ("start", time(l.start_ms)),
            ("scheduled end", time(l.end_ms)),
        ];
        if let Some(g) = &l.gang {
            rows.push((
                "gang",
                format!(
                    "{} rank {} of {} ({}){}",
                    g.id,
                    g.rank,
                    g.size,
                    name(&g.status),
                    if g.ready {
                        ""
                    } else {
                        ": billing starts when the whole gang is ready"
                    }
                ),
            ));
            let members: Vec<String> = g
                .members
                .iter()
                .map(|m| m.clone().unwrap_or_else(|| "-".into()))
                .collect();
            rows.push(("gang members", members.join(", ")));
            if let Some(ns) = &g.nodes {
                let ns: Vec<String> = ns
                    .iter()
                    .map(|n| n.clone().unwrap_or_else(|| "-".into()))
                    .collect();
                rows.push(("gang nodes", ns.join(", ")));
            }
        }
        if let Some(d) = l.provision_deadline_ms {
            rows.push(("ready by", time(d)));
        }
        if let Some(r) = l.ready_ms {
            rows.push(("ready", time(r)));
        }
        if let Some(a) = &l.access {
            if let Some(c) = ssh_command(a) {
                rows.push(("ssh", c));
            }
            for (port, url) in &a.urls {
                rows.push(("url", format!("{port}: {url}")));
            }
        }
        if let Some(d) = l.notice_deadline_ms {
            rows.push(("notice: ends", time(d)));
        }
        rows.push((
            "charged",
            format!(
                "{} CNY for {}",
                opt_money(&l.charged),
                secs(l.billed_seconds)
            ),
        ));
        if let Some(c) = l.sla_credit.as_ref().filter(|c| c.as_str() != "0.00") {
            rows.push(("sla credit", format!("{} CNY", money(c))));
        }
        if let Some(b) = &l.sla_credit_basis {
            rows.push((
                "sla credit basis",
                format!(
                    "{}: outage {} → {} CNY, price difference {} CNY, cap {} CNY",
                    b.basis,
                    secs(b.outage_s),
                    b.outage_credit,
                    b.price_difference,
                    b.cap
                ),
            ));
        }
        if let Some(t) = &l.sla_terms {
            rows.push(("sla terms", sla_terms(t)));
        }
        if let Some(r) = &l.end_reason {
            rows.push((
                "ended",
                format!("{} ({})", opt_time(l.ended_at_ms), name(r)),
            ));
        }
        if let Some(r) = &l.failure_reason {
            rows.push(("failure", r.clone()));
        }
        if let Some(td) = &l.teardown {
            let how = match (&td.method, td.torn_down_ms) {
                (Some(m), Some(at)) => format!("{} at {}: {m}", name(&td.status), time(at)),
                _ => format!("{} (deadline {})", name(&td.status), time(td.deadline_ms)),
            };
            rows.push(("teardown", how));
        }
        if let Some(f) = &l.migrated_from {
            rows.push(("migrated from", f.clone()));
        }
        if !l.migrated_to.is_empty() {
            rows.push(("migrated to", l.migrated_to.join(", ")));
        }
        if let (Some(g), Some(r)) = (l.failover_failed_gpus, &l.failover_failed_reason) {
            rows.push(("failover failed", format!("{g} GPU(s): {}", name(r))));
        }
        if let Some(spec) = &l.launch {
            rows.push(("launch", launch(spec)));
        }
        kv(&rows)
    }

    fn launch(s: &LaunchRequest) -> String {
        let mut parts = vec![format!("{} ssh key(s)", s.ssh_keys.len())];
        if let Some(i) = &s.image {
            parts.push(format!("image {i}"));
        }
        if !s.command.is_empty() {
            parts.push(format!("command {:?}", s.command));
        }
        if !s.ports.is_empty() {
            parts.push(format!("ports {:?}", s.ports));
        }
        if !s.env.is_empty() {
            let names: Vec<&str> = s.env.keys().map(String::as_str).collect();
            parts.push(format!("env {}", names.join(",")));
        }
        if s.disk_gb > 0 {
            parts.push(format!("disk {} GB", s.disk_gb));
        }
        parts.join("; ")
    }

    /// Aligned `key: value` lines.
    pub fn kv(rows: &[(&str, String)]) -> String {
        let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        rows.iter()
            .map(|(k, v)| format!("{k:>w$}  {v}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `gpux balance`.
    pub fn balance(b: &BalanceView) -> String {
        kv(&[
            ("account", b.account_id.clone()),
            ("balance", format!("{} CNY", money(&b.balance))),
            // The API's figure: the balance less accrued charges and bid holds.
            ("available", format!("{} CNY", money(&b.available))),
            ("held by bids", format!("{} CNY", money(&b.held_by_bids))),
            (
                "burn rate",
                format!("{} CNY/hour", rate(&b.burn_rate_per_hour)),
            ),
            (
                "runway",
                b.runway_s
                    .map(about)
                    .unwrap_or_else(|| "- (nothing burns)".into()),
            ),
        ])
    }

    /// `gpux nodes`.
    pub fn nodes(nodes: &[NodeView]) -> String {
        let mut t = table(&[
            "ID",
            "NAME",
            "SKU",
            "GPUS",
            "HEALTHY",
            "LEASED",
            "LISTED",
            "WIPING",
            "REGION",
            "STATUS",
            "OFFER",
            "LAST HEARTBEAT",
            "AGENT CLOCK",
            "ATTESTED",
            "VERIFIED",
            "RELIABILITY",
            "UNHEALTHY",
        ]);
        for n in nodes {
            let mut status = name(&n.status);
            if n.draining {
                status += ", draining";
            }
            if let Some(h) = &n.held {
                status += &format!(", held ({})", name(h));
            }
            t.add_row(vec![
                n.id.clone(),
                n.name.clone(),
                n.sku.clone(),
                n.gpus.to_string(),
                n.healthy_gpus.to_string(),
                n.leased_gpus.to_string(),
                n.listed_free_gpus.to_string(),
                n.wiping_gpus.to_string(),
                format!("{} ({})", n.region, n.jurisdiction),
                status,
                opt(&n.offer_id),
                time(n.last_heartbeat_ms),
                clock_offset(n.agent_clock_offset_ms),
                n.attestation
                    .as_ref()
                    .map_or_else(|| "-".into(), |a| name(&a.status)),
                n.verification.as_ref().map_or_else(
                    || "-".into(),
                    |v| match &v.worst_pct {
                        Some(p) if v.status != "verifying" => format!("{} ({p} %)", v.status),
                        _ => v.status.clone(),
                    },
                ),
                n.reliability
                    .as_ref()
                    .map_or_else(|| "-".into(), reliability_cell),
                unhealthy_indexes(&n.unhealthy_gpus),
            ]);
        }
        right(&mut t, &[3, 4, 5, 6, 7]);
        empty(t, "nodes", nodes.len())
    }

    /// `gpux node show`: the node's row, then its attestation (issue 26: status, what
    /// differs, driver, CUDA, host size (CPU cores, RAM GiB, disk GB), each GPU's UUID,
    /// model, memory and PCIe link, NICs) and its
    /// unhealthy GPUs with their reasons.
    pub fn node_detail(n: &NodeView) -> String {
        let mut out = nodes(std::slice::from_ref(n));
        out += &format!(
            "\nfabric domain: {}, nic: {}\n",
            n.fabric_domain.as_deref().unwrap_or("none"),
            n.nic_gbps
                .map_or_else(|| "-".to_string(), |g| format!("{g} Gbit/s"))
        );
        match &n.attestation {
            None => out += "\nattestation: none (no agent has attested this host)\n",
            Some(a) => {
                out += &format!(
                    "\nattestation: {} at {} ({} GPUs; driver {}, CUDA {})\n",
                    name(&a.status),
                    time(a.at_ms),
                    a.gpus,
                    or_dash(&a.driver_version),
                    or_dash(&a.cuda_version)
                );
                if a.cpu_cores.is_some() || a.ram_mib.is_some() || a.disk_gb.is_some() {
                    let or = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                    out += &format!(
                        "  host: {} CPU cores, {} GiB RAM, {} GB disk\n",
                        or(a.cpu_cores.map(|c| c.to_string())),
                        or(a.ram_mib.map(|m| (m / 1024).to_string())),
                        or(a.disk_gb.map(|d| d.to_string()))
                    );
                }
                if let Some(m) = &a.mismatch {
                    out += &format!("  mismatch ({}): {}\n", name(&m.kind), m.message);
                }
                for g in &a.gpu_details {
                    let link = match (g.pcie_gen, g.pcie_width) {
                        (Some(gen_now), Some(w)) => format!(
                            ", PCIe gen{gen_now} x{w}{}",
                            match (g.pcie_max_gen, g.pcie_max_width) {
                                (Some(mg), Some(mw)) => format!(" (max gen{mg} x{mw})"),
                                _ => String::new(),
                            }
                        ),
                        _ => String::new(),
                    };
                    let mig = if g.mig_mode == Some(true) {
                        ", MIG on"
                    } else {
                        ""
                    };
                    out += &format!(
                        "  GPU {}: {} {} ({} MiB){link}{mig}\n",
                        g.index, g.uuid, g.model, g.memory_mib
                    );
                }
                for nic in &a.nics {
                    out += &format!("  NIC {}: {} Gb/s\n", nic.name, nic.gbps);
                }
            }
        }
        if let Some(v) = &n.verification {
            out += &format!("verification: {}", v.status);
            if let (Some(o), Some(at)) = (&v.outcome, v.at_ms) {
                out += &format!(
                    "; last run {o} at {} (worst {} % of the reference{}{})",
                    time(at),
                    v.worst_pct.as_deref().unwrap_or("-"),
                    v.decided_by
                        .as_deref()
                        .map(|d| format!(", by {d}"))
                        .unwrap_or_default(),
                    v.gpu.map(|g| format!(" on GPU {g}")).unwrap_or_default()
                );
            }
            if let (Some(l), Some(d)) = (&v.run_lease_id, v.run_deadline_ms) {
                out += &format!("; run {l} under way, report by {}", time(d));
            }
            out += "\n";
        }
        if let Some(r) = &n.reliability {
            out += &format!(
                "reliability (30 days): {}; delivered/committed {}/{} lease-GPU-ms, delivery \
                 {}/{}, node failures per 1,000 lease-hours {}, heartbeat coverage {}/{} ms, \
                 {} leases ended; bids compare today against {}\n",
                reliability_cell(r),
                r.reliability.num,
                r.reliability.den,
                r.delivery_rate.num,
                r.delivery_rate.den,
                r.node_failures_per_1000_lease_hours
                    .value
                    .as_deref()
                    .unwrap_or("-"),
                r.heartbeat_coverage.num,
                r.heartbeat_coverage.den,
                r.leases_ended,
                r.matching_reliability.as_deref().unwrap_or("none (new)")
            );
        }
        if n.unhealthy_gpus.is_empty() {
            out += "unhealthy GPUs: none\n";
        } else {
            out += "unhealthy GPUs:\n";
            for g in &n.unhealthy_gpus {
                out += &format!(
                    "  GPU {}{}: {}\n",
                    g.index,
                    g.uuid
                        .as_deref()
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default(),
                    g.reason.as_deref().unwrap_or("no reason given")
                );
            }
        }
        out
    }

    /// A reliability score in a cell: `new`, or the ratio with 4 decimals.
    fn reliability_cell(r: &gpux_wire::ReliabilityView) -> String {
        if r.status == "new" {
            "new".into()
        } else {
            r.reliability.value.clone().unwrap_or_else(|| "-".into())
        }
    }

    /// What an offer's node delivered, beside its SLA promise (issue 26): `new (3 leases)`, or
    /// the reliability with its delivered / committed lease-GPU-hours (`0.9251 (68.0/73.5
    /// GPU-h)`).
    fn measured_cell(r: &gpux_wire::ReliabilityView) -> String {
        // Tenths of an hour, floor, in integers.
        let hours = |ms: u64| {
            let tenths = ms / 360_000;
            format!("{}.{}", tenths / 10, tenths % 10)
        };
        if r.status == "new" {
            format!("new ({} leases)", r.leases_ended)
        } else {
            format!(
                "{} ({}/{} GPU-h)",
                reliability_cell(r),
                hours(r.reliability.num),
                hours(r.reliability.den)
            )
        }
    }

    /// SLA terms in a cell or a line (issue 26): `99.90% 20x cap 600s charge` or
    /// `… 50% of monthly fee`, `+ non-delivery` when set.
    pub fn sla_terms(t: &gpux_wire::SlaTermsView) -> String {
        let cap = match t.credit_cap {
            gpux_wire::CreditCapDto::ChargeSoFar => "charge so far".to_string(),
            gpux_wire::CreditCapDto::MonthlyFeePct(p) => format!("{p}% of monthly fee"),
        };
        format!(
            "{}% {}x outage cap {} capped at {cap}{}",
            t.availability,
            t.credit_multiple,
            secs(t.outage_cap_s.into()),
            if t.non_delivery_credit {
                " + non-delivery"
            } else {
                ""
            }
        )
    }

    /// `gpux offers`.
    pub fn offers(offers: &[OfferView]) -> String {
        let mut t = table(&[
            "ID",
            "NODE",
            "GPUS",
            "SPOT",
            "PREEMPTIBLE",
            "MIN LEASE",
            "MAX LEASE",
            "NOTICE",
            "PROVISION",
            "UNTIL",
            "SLA",
            "MEASURED",
        ]);
        for o in offers {
            t.add_row(vec![
                o.id.clone(),
                o.node_id.clone(),
                o.gpus.to_string(),
                o.spot_price.clone(),
                opt(&o.preemptible_price),
                secs(o.min_lease_s),
                secs(o.max_lease_s),
                secs(o.notice_s.into()),
                secs(o.provision_s.into()),
                time(o.available_until_ms),
                o.sla.as_ref().map_or_else(|| "default".into(), sla_terms),
                o.reliability
                    .as_ref()
                    .map_or_else(|| "-".into(), measured_cell),
            ]);
        }
        right(&mut t, &[2, 3, 4]);
        empty(t, "live offers", offers.len())
    }

    /// `gpux offers search` (issue 26): the market's offers with what each node is. SLA is
    /// the promised availability (`default`: the exchange's rule), CPU logical cores, RAM GiB,
    /// NIC the host's Gb/s over all NICs; `-`: not reported.
    pub fn market_offers(offers: &[MarketOfferView]) -> String {
        let mut t = table(&[
            "ID", "SKU", "REGION", "JURIS", "IC", "NVL", "FREE", "SPOT", "PREEMPT", "VERIFIED",
            "RELIAB", "SLA", "CUDA", "CPU", "RAM", "NIC",
        ]);
        let num = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| v.to_string());
        for o in offers {
            t.add_row(vec![
                o.offer_id.clone(),
                o.sku.clone(),
                o.region.clone(),
                o.jurisdiction.clone(),
                name(&o.interconnect),
                if o.nvlink { "yes" } else { "no" }.to_string(),
                format!("{}/{}", o.free_gpus, o.node_gpus),
                o.spot_price.clone(),
                opt(&o.preemptible_price),
                o.verification.clone(),
                reliability_cell(&o.reliability),
                o.sla
                    .as_ref()
                    .map_or_else(|| "default".into(), |s| format!("{}%", s.availability)),
                o.cuda_version.clone().unwrap_or_else(|| "-".into()),
                num(o.cpu_cores.map(u64::from)),
                // GiB, floor.
                num(o.ram_mib.map(|m| m / 1024)),
                num(o.nic_gbps.map(u64::from)),
            ]);
        }
        right(&mut t, &[6, 7, 8, 10, 13, 14, 15]);
        empty(t, "offers that meet the search", offers.len())
    }

    /// `gpux earnings`.
    pub fn earnings(e: &EarningsView) -> String {
        kv(&[
            ("account", e.account_id.clone()),
            ("payable", format!("{} CNY", money(&e.payable))),
            ("live leases", e.live_leases.to_string()),
            ("leased gpus", e.leased_gpus.to_string()),
            (
                "gross rate",
                format!("{} CNY/hour", rate(&e.gross_rate_per_hour)),
            ),
        ])
    }

    /// `gpux accounts`.
    pub fn accounts(accounts: &[AccountView]) -> String {
        let mut t = table(&["ID", "NAME", "ROLE", "CREATED", "KEY IDS"]);
        for a in accounts {
            t.add_row(vec![
                a.id.clone(),
                a.name.clone(),
                a.role.as_str().to_string(),
                time(a.created_ms),
                a.key_ids.join(" "),
            ]);
        }
        empty(t, "accounts", accounts.len())
    }

    /// `gpux me`.
    pub fn me(m: &MeView) -> String {
        kv(&[
            ("account", m.account_id.clone()),
            ("name", opt(&m.name)),
            ("role", m.role.as_str().to_string()),
            ("key id", m.key_id.clone()),
        ])
    }

    /// `gpux adjust`.
    pub fn adjustment(a: &AdjustmentDone) -> String {
        format!(
            "{} of {} CNY posted: {} → {} (seq {})\nmemo: {}",
            name(&a.kind),
            money(&a.amount),
            a.debit,
            a.credit,
            a.seq,
            a.memo
        )
    }

    /// `gpux periods`, `gpux close`: times in the finance time zone `tz`.
    pub fn periods(periods: &[ClosedPeriodView], tz: chrono_tz::Tz) -> String {
        let mut t = table(&[
            "ID",
            "FROM",
            "TO",
            "CLOSED",
            "INVOICES",
            "STATEMENTS",
            "CREDIT NOTES",
        ]);
        let numbers = |m: &std::collections::BTreeMap<String, u64>| match (
            m.values().min(),
            m.values().max(),
        ) {
            (Some(lo), Some(hi)) if lo == hi => format!("{} (#{lo})", m.len()),
            (Some(lo), Some(hi)) => format!("{} (#{lo}–#{hi})", m.len()),
            _ => "0".into(),
        };
        for p in periods {
            t.add_row(vec![
                p.id.to_string(),
                zoned(p.from_ms, tz),
                zoned(p.to_ms, tz),
                zoned(p.closed_at_ms, tz),
                numbers(&p.invoices),
                numbers(&p.statements),
                numbers(
                    &p.credit_notes
                        .iter()
                        .map(|c| (c.number.to_string(), c.number))
                        .collect(),
                ),
            ]);
        }
        right(&mut t, &[0]);
        match periods.len() {
            0 => "(no closed periods)".into(),
            _ => format!("{t}\n(times in {})", tz.name()),
        }
    }

    /// `gpux account tax-details set`.
    pub fn tax_details(v: &TaxDetailsView) -> String {
        let d = &v.details;
        format!(
            "tax details of account {} recorded (seq {}); documents of periods closed from \
             now on print them\n{}",
            v.account_id,
            v.seq,
            kv(&[
                ("legal name", d.legal_name.clone()),
                ("taxpayer id", d.taxpayer_id.clone()),
                ("address", opt(&d.address)),
                ("phone", opt(&d.phone)),
                ("bank", opt(&d.bank_name)),
                ("bank account", opt(&d.bank_account)),
            ])
        )
    }

    /// `gpux invoice` without -o: the header, one row per SKU line, and the totals. The
    /// document is the server's JSON (a settlement type, not a wire type), read by field name.
    pub fn invoice(v: &serde_json::Value) -> String {
        let s = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => "-".into(),
            other => other.to_string(),
        };
        let head = kv(&[
            (
                "document",
                format!("{} #{}", s(&v["kind"]), s(&v["number"])),
            ),
            ("account", s(&v["account"])),
            (
                "period",
                format!(
                    "{} – {}",
                    s(&v["period"]["from_local"]),
                    s(&v["period"]["to_local"])
                ),
            ),
            ("issued", s(&v["issued_date"])),
            (
                "seller",
                format!(
                    "{} {}",
                    s(&v["seller"]["name"]),
                    s(&v["seller"]["taxpayer_id"])
                ),
            ),
            (
                "purchaser",
                format!(
                    "{} {}",
                    s(&v["purchaser"]["name"]),
                    s(&v["purchaser"]["taxpayer_id"])
                ),
            ),
            ("vat rate", s(&v["vat_rate"])),
        ]);
        let mut t = table(&["SKU", "GPU-HOURS", "NET", "VAT", "GROSS"]);
        let lines = v["lines"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        for l in lines.iter().chain(std::iter::once(&v["totals"])) {
            let sku = l.get("sku").map_or_else(|| "total".into(), s);
            t.add_row(vec![
                sku,
                s(&l["gpu_hours"]),
                s(&l["net"]),
                s(&l["vat"]),
                s(&l["gross"]),
            ]);
        }
        right(&mut t, &[1, 2, 3, 4]);
        format!("{}\n\n{t}", head.trim_end())
    }

    /// `gpux deposit` / `gpux payout`.
    pub fn transfer(t: &TransferDone) -> String {
        let after = match t.kind {
            TransferKindDto::Deposit => "balance",
            TransferKindDto::Payout => "payable",
        };
        format!(
            "{} of {} CNY recorded for account {} ({after} now {} CNY)",
            name(&t.kind),
            money(&t.amount),
            t.account_id,
            money(&t.balance_after)
        )
    }

    /// The unhealthy GPUs' indexes, `-` for none (`gpux nodes`).
    fn unhealthy_indexes(gpus: &[gpux_client::wire::UnhealthyGpu]) -> String {
        if gpus.is_empty() {
            return "-".into();
        }
        gpus.iter()
            .map(|g| g.index.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `s`, or `-` when empty.
    fn or_dash(s: &str) -> &str {
        if s.is_empty() { "-" } else { s }
    }
}

#[cfg(test)]
mod tests {
    use super::human::*;
    use gpux_wire::LeaseView;

    /// `gpux node show` prints the attested host size beside the driver and GPUs (a fresh
    /// user found it only in `--json`).
    #[test]
    fn node_detail_prints_the_host_size() {
        let n: gpux_wire::NodeView = serde_json::from_value(serde_json::json!({
            "id": "7", "name": "n1", "sku": "H100-80G", "gpus": 1, "healthy_gpus": 1,
            "region": "cn-east-2", "jurisdiction": "CN", "interconnect": "roce",
            "nvlink": false, "status": "online", "draining": false, "last_heartbeat_ms": 0,
            "offer_id": null, "leased_gpus": 0, "listed_free_gpus": 0, "wiping_gpus": 0,
            "held": null,
            "attestation": {"at_ms": 0, "status": "matched", "gpus": 1,
                "driver_version": "550.54.15", "cuda_version": "12.4",
                "cpu_cores": 64, "ram_mib": 524_288, "disk_gb": 1920},
        }))
        .unwrap();
        let out = node_detail(&n);
        assert!(
            out.contains("host: 64 CPU cores, 512 GiB RAM, 1920 GB disk"),
            "{out}"
        );
    }

    #[test]
    fn money_prints_at_its_precision() {
        assert_eq!(money("99929.654999999999"), "99929.65");
        assert_eq!(money("99929.655000000000"), "99929.66");
        assert_eq!(money("5"), "5.00");
        assert_eq!(money("-0.125"), "-0.13");
        assert_eq!(money("n/a"), "n/a");
        assert_eq!(rate("41.0000"), "41.00");
        assert_eq!(rate("0.083333333333"), "0.0833");
    }

    #[test]
    fn a_clock_offset_reads_in_signed_seconds() {
        assert_eq!(clock_offset(Some(600_000)), "+600.0 s");
        assert_eq!(clock_offset(Some(-240)), "-0.2 s");
        assert_eq!(clock_offset(Some(0)), "+0.0 s");
        assert_eq!(clock_offset(None), "-");
    }

    #[test]
    fn a_runway_reads_in_words() {
        assert_eq!(about(2 * 365 * 86_400 + 86_400), "about 2 years");
        assert_eq!(about(3 * 3_600 + 600), "about 3 hours");
        assert_eq!(about(86_400), "about 1 day");
        assert_eq!(about(45 * 86_400), "about 2 months");
        assert_eq!(about(90), "about 2 minutes");
        assert_eq!(about(0), "about 0 seconds");
    }

    #[test]
    fn times_in_a_message_read_as_dates() {
        let tz = chrono_tz::Asia::Shanghai;
        assert_eq!(
            ms_as_times(
                "period ending at 4102444800000 ms cannot be closed at 1764518400000 ms; close it",
                tz
            ),
            "period ending at 2100-01-01 08:00:00 (Asia/Shanghai) cannot be closed at \
             2025-12-01 (Asia/Shanghai); close it"
        );
        assert_eq!(
            ms_as_times("no times here, 12 ms", tz),
            "no times here, 12 ms"
        );
    }

    /// A lease under preemption notice shows the notice's end in END, marked; its charge in fen.
    #[test]
    fn a_notice_shows_in_the_end_column() {
        let l: LeaseView = serde_json::from_value(serde_json::json!({
            "id": "9", "bid_id": "5", "node_id": "1", "offer_id": "2", "sku": "H100-80G",
            "region": "cn-east-2", "kind": "preemptible", "gpus": 1, "gpu_indexes": [0],
            "price": "20.0000", "start_ms": 0, "end_ms": 7_200_000_000i64, "state": "active",
            "provision_deadline_ms": null, "ready_ms": null, "access": null, "launch": null,
            "notice_deadline_ms": 3_600_000_000i64, "charged": "12.345678901234",
            "billed_seconds": 60, "sla_credit": null, "end_reason": null, "ended_at_ms": null,
            "failure_reason": null, "teardown": null, "migrated_from": null, "migrated_to": [],
            "failover_failed_gpus": null, "failover_failed_reason": null
        }))
        .unwrap();
        let t = leases(std::slice::from_ref(&l));
        assert!(
            t.contains(&format!("{} (notice)", time(3_600_000_000))),
            "{t}"
        );
        assert!(!t.contains(&time(7_200_000_000)), "{t}");
        assert!(t.contains(" 12.35 "), "{t}");
        assert!(!t.contains("12.3456"), "{t}");
    }
}
