//! The command line: one clap `Subcommand` enum ([`Command`]) with the arguments of each
//! command (after tokio-rs/mini-redis `src/bin/cli.rs`). `run.rs` has the one `match` that
//! calls the client and prints. Doc comments are the help text; `after_help` has examples.

use crate::parse::{self, TimeArg};
use clap::{Args, Parser, Subcommand, ValueEnum};
use gpux_wire::DecimalStr;
use std::path::PathBuf;
use std::time::Duration;

const MAIN_EXAMPLES: &str = "\
Examples:
  gpux config set-profile default --url http://127.0.0.1:8080 --key gpux_…
  gpux inventory --sku H100-80G
  gpux offers search --sku H100-80G --verified --min-reliability 0.99
  gpux bid --sku H100-80G --gpus 2 --price 25 --duration 2h --ssh-key ~/.ssh/id_ed25519.pub --wait
  gpux leases --json | jq -r .id
  gpux node register --name sh-h100-01 --sku H100-80G --gpus 8 --region cn-east-2 \\
      --jurisdiction CN --interconnect infiniband --nvlink
  gpux report buyer-statements --from 2026-05-01 --to 2026-06-01 --format xlsx -o may.xlsx

Configuration: profile file ~/.config/gpux/config.toml ([profiles.NAME] url, key, ca_cert),
then GPUX_URL / GPUX_KEY / GPUX_CA_CERT, then --url / --key / --ca-cert. An https:// URL is
checked against the system's CAs and the --ca-cert file (a private CA). Output: tables on
stdout, or JSON Lines with --json; messages on stderr. Exit status: 0 ok, 1 refused by the
exchange (4xx), 2 usage or configuration error, 3 exchange unavailable (connection, TLS,
timeout, 5xx), 130 interrupted. Reference: docs/cli.md.";

/// Help heading of the options every command takes.
const GLOBAL: &str = "Global options";

/// gpux: the command line of the GPU-capacity exchange, for buyers, suppliers, finance and
/// admins.
#[derive(Debug, Parser)]
#[command(name = "gpux", version, after_help = MAIN_EXAMPLES, max_term_width = 100)]
pub struct Cli {
    /// Profile of the profile file to use.
    #[arg(long, global = true, env = "GPUX_PROFILE", value_name = "NAME", help_heading = GLOBAL)]
    pub profile: Option<String>,
    /// Base URL of the exchange [default: the profile's, else http://127.0.0.1:8080].
    #[arg(long, global = true, env = "GPUX_URL", value_name = "URL", help_heading = GLOBAL)]
    pub url: Option<String>,
    /// API key (`gpux_…`) [default: the profile's].
    #[arg(
        long,
        global = true,
        env = "GPUX_KEY",
        hide_env_values = true,
        value_name = "KEY",
        help_heading = GLOBAL
    )]
    pub key: Option<String>,
    /// PEM file of CA certificates to trust besides the system's, for an https:// exchange
    /// whose certificate a private CA issued [default: the profile's].
    #[arg(
        long,
        global = true,
        env = "GPUX_CA_CERT",
        value_name = "FILE",
        help_heading = GLOBAL
    )]
    pub ca_cert: Option<PathBuf>,
    /// Write JSON Lines of the API's objects to stdout (one object per line) instead of tables.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,
    /// Profile file [default: config.toml in the user's config dir, e.g.
    /// ~/.config/gpux/config.toml].
    #[arg(long, global = true, value_name = "FILE", help_heading = GLOBAL)]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Every command. Buyer, supplier, finance and admin commands need a key of that role.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage the profile file (URL and key per profile).
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Who the key belongs to: account, role, key id.
    Me,
    /// The SKUs traded, with reference prices (no key needed).
    Catalog,
    /// Listed capacity by region, kind and price (no key needed).
    #[command(after_help = "\
Examples:
  gpux inventory                        # every SKU
  gpux inventory --sku H100-80G --region cn-east-2
  gpux inventory --sku H100-80G --jurisdiction CN --min-interconnect infiniband --nvlink
  gpux inventory --sku H100-80G --watch # follow the live feed until Ctrl-C
  gpux inventory domains --sku H100-80G # whole free nodes per fabric domain (gangs)

`gpux offers search` lists the offers behind the levels, with what each node is.")]
    Inventory(InventoryArgs),
    /// [buyer] Place a bid for GPUs, with the launch spec its leases run.
    #[command(after_help = "\
Examples:
  gpux bid --sku H100-80G --gpus 2 --price 25 --duration 2h \\
      --ssh-key ~/.ssh/id_ed25519.pub --wait
  gpux bid --sku RTX4090-24G --gpus 8 --price 2.10 --placement spread --region cn-north-1 \\
      --tif gtc --expires-in 1h --image nvcr.io/nvidia/pytorch:24.05-py3 --port 8888 \\
      --env EPOCHS=3 --ssh-key ~/.ssh/id_ed25519.pub -- python train.py --epochs 3
  gpux bid --sku H100-80G --gang 8x8 --price 25 --duration 24h --ssh-key ~/.ssh/id_ed25519.pub
  gpux bid --sku H100-80G --gpus 64 --min-gpus 32 --placement spread --price 25 \\
      --ssh-key ~/.ssh/id_ed25519.pub

A gang (--gang NODESxGPUS) fills whole on one fabric domain or not at all; its leases bill
from the moment the whole gang is ready (`gpux inventory domains` shows what fits now).

With --wait, gpux follows the bid (resting → filled → provisioning → running) until every
lease of it runs, then prints the SSH command of each. Ctrl-C while waiting cancels a bid that
still rests (and says so) and exits 130; leases already made keep running.")]
    Bid(Box<BidArgs>),
    /// [buyer] Your resting bids.
    Bids,
    /// [buyer] Cancel a resting bid, or all of them.
    #[command(after_help = "Examples:\n  gpux cancel 2318401536\n  gpux cancel --all")]
    Cancel(CancelArgs),
    /// [buyer, supplier] Leases: yours (buyer) or on your nodes (supplier), newest first.
    #[command(after_help = "\
Examples:
  gpux leases                     # live: pending, provisioning, active
  gpux leases --all --from 2026-05-01 --to 2026-06-01
  gpux leases --ended --json | jq -r '[.id, .charged] | @tsv'")]
    Leases(LeasesArgs),
    /// [buyer, supplier] One lease in full: state, access, charges, teardown.
    Lease {
        /// Lease id.
        #[arg(value_parser = parse::id)]
        id: u64,
    },
    /// [buyer] End a lease now (billing stops), or with --bid every lease of a bid (a whole
    /// gang) and its resting rest.
    #[command(after_help = "Examples:\n  gpux release 2317352961\n  gpux release --bid 2318401536")]
    Release {
        /// Lease id.
        #[arg(value_parser = parse::id, required_unless_present = "bid", conflicts_with = "bid")]
        lease: Option<u64>,
        /// Release every live lease of this bid instead (a gang's members, a spread bid's
        /// leases) and cancel what of it still rests.
        #[arg(long, value_parser = parse::id, value_name = "BID_ID")]
        bid: Option<u64>,
    },
    /// [buyer] Log in to a running lease: runs `ssh -p PORT USER@HOST [ARGS…]`.
    #[command(after_help = "\
Examples:
  gpux ssh 2317352961
  gpux ssh 2317352961 -- -L 8888:localhost:8888
  gpux ssh 2317352961 -- nvidia-smi

Arguments after `--` follow USER@HOST (OpenSSH reads options there too, then the remote
command). `ssh` is looked up on PATH and replaces gpux (exec).")]
    Ssh {
        /// Lease id.
        #[arg(value_parser = parse::id)]
        lease: u64,
        /// Extra ssh arguments (after `--`).
        #[arg(last = true, value_name = "SSH_ARGS")]
        args: Vec<String>,
    },
    /// [buyer] Balance, funds held by bids, burn rate and runway.
    Balance,
    /// [supplier] Your nodes.
    Nodes,
    /// [supplier] Register, change and resume nodes; node keys for gpux-agent.
    #[command(subcommand)]
    Node(NodeCmd),
    /// [supplier] Your live offers; `gpux offers search` (no key): the market's offers.
    #[command(after_help = "\
Examples:
  gpux offers                            # [supplier] your live offers
  gpux offers search --verified --min-reliability 0.99
  gpux offers search --sku H100-80G --min-gpus 8 --nvlink --min-interconnect infiniband \\
      --min-cuda 12.4 --order reliability
  gpux offers search --kind preemptible --max-price 12 --json | jq -r .offer_id")]
    Offers {
        /// `search`: the market's offers; none: your own.
        #[command(subcommand)]
        cmd: Option<OffersCmd>,
    },
    /// [supplier] Post, amend and withdraw offers.
    #[command(subcommand)]
    Offer(OfferCmd),
    /// [supplier] Payable balance, live leases and earning rate.
    Earnings,
    /// [finance, admin; buyers and suppliers their own] Download a finance report.
    #[command(after_help = "\
Examples:
  gpux report trial-balance
  gpux report buyer-statements --from 2026-05-01 --to 2026-06-01 --format csv -o may.csv
  gpux report supplier-payouts --account 2 --tz Europe/Berlin -o payouts.xlsx
  gpux report platform-summary --from 2026-05-01T00:00:00+08:00 --json

Dates are YYYY-MM-DD (midnight) or YYYY-MM-DDTHH:MM:SS in --tz, RFC 3339 with an offset, or ms
since epoch; --to is exclusive and cut to now by the server. The format follows -o's
extension unless --format is given; xlsx needs -o.")]
    Report(ReportArgs),
    /// [finance, admin] Post an adjustment: goodwill credit, refund, SLA cash-out, write-off or
    /// correction.
    #[command(after_help = "\
Examples:
  gpux adjust --kind goodwill-credit --account 2 --amount 50.00 \\
      --reason \"outage on 2026-11-03\" --reference INC-7 --idempotency-key INC-7-credit
  gpux adjust --kind refund --account 2 --amount 120 --reason \"account closed\"
  gpux adjust --kind correction --debit buyer:2 --credit platform_fee --amount 5.00 \\
      --reason \"fee charged twice, reversed\" --reference period:3

--account names the buyer (goodwill-credit, refund, sla-cash-out) or the supplier (write-off);
a correction names --debit and --credit instead (external_cash, platform_fee, buyer:ID or
supplier:ID). Reason and reference are one line of text. Without --idempotency-key a fresh
one is made and printed on stderr: repeat the command with it after an unclear failure
(exit 3), and the adjustment posts at most once.")]
    Adjust(AdjustArgs),
    /// [finance, admin] The closed periods, with their invoice and statement numbers.
    Periods {
        /// IANA time zone the periods' times are shown in (the finance time zone).
        #[arg(long, default_value = "Asia/Shanghai", value_parser = parse::time_zone)]
        tz: chrono_tz::Tz,
    },
    /// [finance, admin] Close a period: nothing posts into it afterwards, and its buyers'
    /// invoices and suppliers' self-billing statements are numbered.
    #[command(after_help = "\
Examples:
  gpux close --month 2026-11                      # November in Asia/Shanghai
  gpux close --month 2026-11 --tz Europe/Berlin
  gpux close --from 2026-11-01 --to 2026-12-01 --idempotency-key close-2026-11
  gpux close --to now                             # from the latest close up to now

A period starts where the latest closed period ended (the first one anywhere: it needs
--from) and must have ended; --to alone starts it there. --month M is --from M-01 --to the next month's first day, local to --tz. Without
--idempotency-key a fresh one is made and printed on stderr (repeat with it after an unclear
failure).")]
    Close(CloseArgs),
    /// [finance, admin; buyers and suppliers their own] A closed period's invoice (buyer) or
    /// self-billing statement (supplier).
    #[command(after_help = "\
Examples:
  gpux invoice 3 2                       # a summary of period 3's invoice of account 2
  gpux invoice 3 2 -o inv-3-2.pdf        # the PDF (the format follows -o's extension)
  gpux invoice 3 2 --format csv
  gpux invoice 3 2 --json | jq .totals

A closed period's documents never change: every download is the same bytes. pdf and xlsx
need -o.")]
    Invoice(InvoiceArgs),
    /// [buyers and suppliers their own; finance, admin every account's] The documents of
    /// closed periods: invoices, credit notes (红字) and self-billing statements.
    #[command(after_help = "\
Examples:
  gpux invoices                                  # your documents, newest period first
  gpux invoices --account 2                      # finance: one account's
  gpux invoices get 3 -o inv-3.pdf               # your invoice (or statement) of period 3
  gpux invoices get 4 --kind credit-note --format pdf -o cn.pdf

`get` finds the document in the list (with --account for a finance key) and downloads it;
pdf and xlsx need -o.")]
    Invoices(InvoicesArgs),
    /// [admin] Create accounts; [finance, admin] set an account's tax details.
    #[command(subcommand)]
    Account(AccountCmd),
    /// [admin] Every account, with its key ids.
    Accounts,
    /// [admin] Create and revoke API keys of accounts.
    #[command(subcommand)]
    Key(KeyCmd),
    /// [admin] Record a deposit to a buyer's prepaid balance.
    #[command(after_help = "\
Examples:
  gpux deposit team-a 1000.00 --idempotency-key dep-2026-05-12-001
  gpux deposit 3 250

Without --idempotency-key a fresh one is made and printed on stderr: repeat the command
with it after an unclear failure (exit 3), and the money moves at most once.")]
    Deposit(TransferArgs),
    /// [admin] Record a payout from a supplier's payable.
    #[command(after_help = "\
Examples:
  gpux payout idc-1 500.00 --idempotency-key pay-2026-05-31-idc-1")]
    Payout(TransferArgs),
}

/// `gpux config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Create or update a profile: the URL, key and CA file given by --url / --key /
    /// --ca-cert (as flags; the environment is not stored). The file is written with mode
    /// 0600.
    #[command(after_help = "\
Examples:
  gpux config set-profile default --url http://127.0.0.1:8080 --key gpux_…
  gpux config set-profile prod --url https://exchange.example
  gpux config set-profile staging --url https://staging.internal --ca-cert ./private-ca.pem
  printf %s \"$KEY\" | gpux config set-profile prod --key-stdin")]
    SetProfile {
        /// Profile name ([A-Za-z0-9._-]+).
        name: String,
        /// Read the key from standard input (keeps it out of shell history).
        #[arg(long)]
        key_stdin: bool,
    },
    /// Show the settings in effect: file, profile, URL, key (masked) and CA file, with their
    /// sources.
    Show,
}

/// The capacity filters `gpux inventory` and `gpux offers search` share: what a bid with the
/// same constraints can take (docs/market-rules.md §12; a `new` node has no reliability score,
/// and an offer without stated SLA terms meets no `--min-sla`).
#[derive(Args, Debug, Clone, Default)]
pub struct CapacityFilter {
    /// Only nodes the exchange verified in the last 14 days (§12.2).
    #[arg(long)]
    pub verified: bool,
    /// Only nodes whose reliability at the start of today (UTC) is at least this, 0..1 with
    /// at most 4 places, e.g. 0.99 (§12.3).
    #[arg(long, value_name = "RATIO")]
    pub min_reliability: Option<String>,
    /// Only offers whose SLA terms promise at least this monthly availability, percent
    /// 90..99.99, e.g. 99.9 (§12.4).
    #[arg(long, value_name = "PERCENT")]
    pub min_sla: Option<String>,
    /// Only offers whose SLA credits at least this multiple of the outage charge, 1..50.
    #[arg(long, value_name = "N")]
    pub min_sla_multiple: Option<u16>,
    /// Only nodes in this jurisdiction, ISO 3166-1 alpha-2 such as CN.
    #[arg(long, value_name = "CC")]
    pub jurisdiction: Option<String>,
    /// Only nodes with at least this fabric.
    #[arg(long, value_enum, value_name = "FABRIC")]
    pub min_interconnect: Option<Fabric>,
    /// Only nodes with NVLink between their GPUs.
    #[arg(long)]
    pub nvlink: bool,
}

/// `gpux inventory`.
#[derive(Debug, Args)]
pub struct InventoryArgs {
    /// One SKU (default: every SKU of the catalog).
    #[arg(long)]
    pub sku: Option<String>,
    /// One region.
    #[arg(long)]
    pub region: Option<String>,
    /// Follow the live feed and redraw on every change; Ctrl-C stops. Not with the filters
    /// below (the feed counts all listed capacity).
    #[arg(long)]
    pub watch: bool,
    /// What a bid with these constraints can take (not with `--watch`: the feed counts all).
    #[command(flatten)]
    pub filter: CapacityFilter,
    /// `domains`: whole free nodes per fabric domain (for gangs).
    #[command(subcommand)]
    pub cmd: Option<InventoryCmd>,
}

/// `gpux inventory …`.
#[derive(Debug, Subcommand)]
pub enum InventoryCmd {
    /// Whole free nodes per (SKU, region, fabric domain) and node size, the cheapest spot
    /// price and the largest gang each domain could take now (no key needed; domains are
    /// opaque ids, never the supplier).
    #[command(after_help = "\
Examples:
  gpux inventory domains --sku H100-80G
  gpux inventory domains --sku H100-80G --region cn-east-2 --gpus-per-node 8 --min-nodes 4")]
    Domains(DomainsArgs),
}

/// `gpux inventory domains`.
#[derive(Debug, Args)]
pub struct DomainsArgs {
    /// One SKU (default: every SKU).
    #[arg(long)]
    pub sku: Option<String>,
    /// One region.
    #[arg(long)]
    pub region: Option<String>,
    /// Count only whole free nodes of at least this many GPUs (1–16).
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<u32>,
    /// Only domains with at least this many such nodes (1–1024).
    #[arg(long, value_name = "N")]
    pub min_nodes: Option<u32>,
}

/// `gpux offers …`.
#[derive(Debug, Subcommand)]
pub enum OffersCmd {
    /// The market's live offers with free GPUs, each with what its node is (fabric, NVLink,
    /// verification, reliability, SLA, attested CUDA, CPU, RAM, NICs) — no key needed;
    /// anonymous (no supplier, no node). Filters on host facts leave out nodes that did not
    /// report them.
    #[command(after_help = "\
Examples:
  gpux offers search --verified --min-reliability 0.99
  gpux offers search --sku H100-80G --region cn-east-2 --min-gpus 8 --order gpus
  gpux offers search --min-cpu-cores 64 --min-ram-gib 512 --min-nic-gbps 400 --min-cuda 12.4
  gpux offers search --kind preemptible --max-price 12 --limit 10")]
    Search(Box<OfferSearchArgs>),
}

/// Order of `gpux offers search`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OfferOrder {
    /// Cheapest first (the preemptible price with `--kind preemptible`).
    Price,
    /// Most reliable first (today's score; new nodes last).
    Reliability,
    /// Most free GPUs first.
    Gpus,
}

/// `gpux offers search`.
#[derive(Debug, Args)]
pub struct OfferSearchArgs {
    /// SKU, e.g. H100-80G [default: every SKU].
    #[arg(long)]
    pub sku: Option<String>,
    /// Region [default: every region].
    #[arg(long)]
    pub region: Option<String>,
    /// What a bid with these constraints can take.
    #[command(flatten)]
    pub filter: CapacityFilter,
    /// At least this many GPUs free on the node.
    #[arg(long, value_name = "N")]
    pub min_gpus: Option<u32>,
    /// At most this price, CNY per GPU-hour (the preemptible price with `--kind
    /// preemptible`).
    #[arg(long, value_name = "PRICE", value_parser = parse::price)]
    pub max_price: Option<DecimalStr>,
    /// `preemptible`: only offers with a preemptible price, compared by it [default: spot].
    #[arg(long, value_enum)]
    pub kind: Option<Kind>,
    /// At least this many logical CPU cores on the host.
    #[arg(long, value_name = "N")]
    pub min_cpu_cores: Option<u32>,
    /// At least this much RAM on the host, GiB.
    #[arg(long, value_name = "GIB")]
    pub min_ram_gib: Option<u32>,
    /// At least this much disk on the host, GB.
    #[arg(long, value_name = "GB")]
    pub min_disk_gb: Option<u32>,
    /// At least this much network bandwidth on the host (all its NICs together), Gb/s.
    #[arg(long, value_name = "GBPS")]
    pub min_nic_gbps: Option<u32>,
    /// At least this CUDA version, e.g. 12.4 (compared number by number).
    #[arg(long, value_name = "VERSION")]
    pub min_cuda: Option<String>,
    /// Order of the rows [default: price].
    #[arg(long, value_enum)]
    pub order: Option<OfferOrder>,
    /// Most rows, 1..=500 [default: 100].
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

/// Lease kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// Never preempted by other bids.
    Spot,
    /// May be preempted with notice; pays its own limit.
    Preemptible,
}

/// Where a bid's GPUs may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Placement {
    /// All GPUs on one node.
    SingleNode,
    /// Any number of nodes.
    Spread,
    /// All-or-none over one fabric domain (give its shape with --gang).
    Gang,
}

/// What a gang's nodes share (`--scope`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GangScope {
    /// One fabric domain of one supplier (the default).
    Domain,
    /// One region of one supplier (no fabric domain needed).
    Region,
}

/// What a running gang does when a member is lost (`--on-member-loss`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MemberLoss {
    /// The rest run on (the default).
    Keep,
    /// Every member ends.
    #[value(name = "end_all", alias = "end-all")]
    EndAll,
}

/// Time in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Tif {
    /// Immediate or cancel: fill what can be filled now.
    Ioc,
    /// Good till canceled: the rest waits on the book.
    Gtc,
}

/// Network fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Fabric {
    /// PCIe / Ethernet.
    Pcie,
    /// RoCE v2.
    Roce,
    /// InfiniBand.
    Infiniband,
}

/// `gpux bid`.
#[derive(Debug, Args)]
pub struct BidArgs {
    /// SKU, e.g. H100-80G (`gpux catalog`).
    #[arg(long, help_heading = "Bid")]
    pub sku: String,
    /// GPUs wanted (1–1024; at most 16 on one node) [with --gang: nodes × GPUs per node].
    #[arg(long, allow_negative_numbers = true, value_parser = parse::positive("gpus"),
          required_unless_present = "gang", help_heading = "Bid")]
    pub gpus: Option<u32>,
    /// All-or-none gang of NODES×GPUS (e.g. 8x8: eight nodes of 8 GPUs), on one fabric domain
    /// (or region with --scope region) of one supplier, filled whole or not at all; billing
    /// starts when the whole gang is ready (docs/market-rules.md §13).
    #[arg(long, value_parser = parse::gang, value_name = "NODESxGPUS", help_heading = "Gang")]
    pub gang: Option<(u32, u32)>,
    /// What a gang's nodes share.
    #[arg(long, value_enum, requires = "gang", help_heading = "Gang")]
    pub scope: Option<GangScope>,
    /// What a running gang does when a member is lost and nothing replaces it.
    #[arg(long, value_enum, requires = "gang", help_heading = "Gang")]
    pub on_member_loss: Option<MemberLoss>,
    /// Spread IOC bids: fill at least this many GPUs now, or none (1..gpus).
    #[arg(long, allow_negative_numbers = true, value_parser = parse::positive("min-gpus"),
          value_name = "N", help_heading = "Bid")]
    pub min_gpus: Option<u32>,
    /// Limit price, CNY per GPU-hour, as a decimal (at most 4 decimals).
    #[arg(long, allow_negative_numbers = true, value_parser = parse::price, help_heading = "Bid")]
    pub price: DecimalStr,
    /// Lease kind.
    #[arg(long, value_enum, default_value_t = Kind::Spot, help_heading = "Bid")]
    pub kind: Kind,
    /// One node, or spread over several.
    #[arg(long, value_enum, default_value_t = Placement::SingleNode, help_heading = "Bid")]
    pub placement: Placement,
    /// Lease term, e.g. 90m, 2h, 3days [default: open-ended, up to the offer's maximum].
    #[arg(long, value_parser = parse::duration, help_heading = "Bid")]
    pub duration: Option<Duration>,
    /// Time in force.
    #[arg(long, value_enum, default_value_t = Tif::Ioc, help_heading = "Bid")]
    pub tif: Tif,
    /// GTC only: the resting bid expires at this time (RFC 3339, or local YYYY-MM-DDTHH:MM:SS).
    #[arg(long, value_parser = parse::time, conflicts_with = "expires_in", value_name = "TIME",
          help_heading = "Bid")]
    pub expires_at: Option<TimeArg>,
    /// GTC only: the resting bid expires after this long, e.g. 30m.
    #[arg(long, value_parser = parse::duration, value_name = "DURATION", help_heading = "Bid")]
    pub expires_in: Option<Duration>,
    /// Your id for the bid (1–64 printable ASCII, unique) [default: generated, gpux-…]. Sending
    /// the same bid again with the same id is safe: the exchange answers with the first
    /// answer and never places a second bid.
    #[arg(long, value_name = "ID", help_heading = "Bid")]
    pub client_order_id: Option<String>,
    /// Allowed region (repeatable) [default: any].
    #[arg(long = "region", value_name = "REGION", help_heading = "Constraints")]
    pub regions: Vec<String>,
    /// Allowed jurisdiction, ISO 3166-1 alpha-2 such as CN (repeatable) [default: any].
    #[arg(long = "jurisdiction", value_name = "CC", help_heading = "Constraints")]
    pub jurisdictions: Vec<String>,
    /// Slowest fabric accepted.
    #[arg(long, value_enum, value_name = "FABRIC", help_heading = "Constraints")]
    pub min_interconnect: Option<Fabric>,
    /// Require NVLink between the node's GPUs.
    #[arg(long, help_heading = "Constraints")]
    pub nvlink: bool,
    /// Only nodes the exchange verified in the last 14 days (docs/market-rules.md §12.2).
    #[arg(long, help_heading = "Trust")]
    pub verified: bool,
    /// Only nodes whose reliability at the start of today (UTC) is at least this, 0..1 with
    /// at most 4 places, e.g. 0.99 (new nodes never qualify; docs/market-rules.md §12.3).
    #[arg(long, value_name = "RATIO", help_heading = "Trust")]
    pub min_reliability: Option<String>,
    /// Only offers whose SLA terms promise at least this monthly availability, percent
    /// 90..99.99, e.g. 99.9 (offers without stated terms never qualify; docs/market-rules.md
    /// §12.4).
    #[arg(long, value_name = "PERCENT", help_heading = "Trust")]
    pub min_sla: Option<String>,
    /// Only offers whose SLA credits at least this multiple of the outage charge, 1..50.
    #[arg(long, value_name = "N", help_heading = "Trust")]
    pub min_sla_multiple: Option<u16>,
    /// OpenSSH public key file to authorise, e.g. ~/.ssh/id_ed25519.pub (repeatable).
    #[arg(long = "ssh-key", value_name = "FILE", help_heading = "Launch spec")]
    pub ssh_keys: Vec<PathBuf>,
    /// Container image, e.g. nvcr.io/nvidia/pytorch:24.05-py3.
    #[arg(long, help_heading = "Launch spec")]
    pub image: Option<String>,
    /// Environment variable KEY=VALUE (repeatable; visible to the supplier: no secrets).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse::env_var,
          help_heading = "Launch spec")]
    pub env: Vec<(String, String)>,
    /// Port to expose (repeatable).
    #[arg(long = "port", value_name = "PORT", allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(1..=65535), help_heading = "Launch spec")]
    pub ports: Vec<u32>,
    /// Scratch disk, GB [default: the node's].
    #[arg(long, allow_negative_numbers = true, value_parser = parse::positive("disk-gb"),
          help_heading = "Launch spec")]
    pub disk_gb: Option<u32>,
    /// Command to run, after `--` (an argument vector, no shell).
    #[arg(last = true, value_name = "COMMAND", help_heading = "Launch spec")]
    pub command: Vec<String>,
    /// Wait until every lease of the bid runs, showing progress, then print the SSH commands.
    #[arg(long)]
    pub wait: bool,
}

/// `gpux cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Bid id.
    #[arg(value_parser = parse::id, required_unless_present = "all", conflicts_with = "all")]
    pub bid: Option<u64>,
    /// Cancel every resting bid of the account.
    #[arg(long)]
    pub all: bool,
}

/// `gpux leases`.
#[derive(Debug, Args)]
pub struct LeasesArgs {
    /// Ended leases only.
    #[arg(long, group = "state")]
    pub ended: bool,
    /// Live and ended leases.
    #[arg(long, group = "state")]
    pub all: bool,
    /// [supplier] Ended leases whose GPUs wait for a wipe.
    #[arg(long, group = "state")]
    pub wiping: bool,
    /// Leases that ran at or after this time (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS local, RFC 3339,
    /// or ms).
    #[arg(long, value_parser = parse::time)]
    pub from: Option<TimeArg>,
    /// Leases that started before this time (same forms).
    #[arg(long, value_parser = parse::time)]
    pub to: Option<TimeArg>,
    /// At most this many leases (pages are fetched as needed).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
}

/// `gpux node …`.
#[derive(Debug, Subcommand)]
pub enum NodeCmd {
    /// Register a node (online at once; heartbeat it, e.g. with gpux-agent).
    #[command(after_help = "\
Example:
  gpux node register --name sh-h100-01 --sku H100-80G --gpus 8 --region cn-east-2 \\
      --jurisdiction CN --interconnect infiniband --nvlink --fabric-domain ib-pod-1 \\
      --nic-gbps 3200")]
    Register(NodeRegisterArgs),
    /// Change a node's region, jurisdiction, fabric, NVLink, draining, fabric domain or NIC
    /// bandwidth.
    #[command(after_help = "\
Examples:
  gpux node update 1932525568 --draining true
  gpux node update 1932525568 --region cn-east-3 --interconnect roce
  gpux node update 1932525568 --fabric-domain ib-pod-2 --nic-gbps 3200
  gpux node update 1932525568 --fabric-domain \"\"   # on no shared fabric")]
    Update(NodeUpdateArgs),
    /// Put a held node back on the market.
    Resume {
        /// Node id.
        #[arg(value_parser = parse::id)]
        id: u64,
    },
    /// One node.
    Show {
        /// Node id.
        #[arg(value_parser = parse::id)]
        id: u64,
    },
    /// Node keys: API keys scoped to one node, for its gpux-agent.
    #[command(subcommand)]
    Key(NodeKeyCmd),
}

/// `gpux node key …`.
#[derive(Debug, Subcommand)]
pub enum NodeKeyCmd {
    /// Make a key for the node of this name (it may be registered later); shown once.
    #[command(after_help = "Example:\n  gpux node key create sh-h100-01")]
    Create {
        /// The node's name.
        name: String,
    },
    /// Your node keys (ids and node names, never the keys).
    List,
    /// Revoke a node key (it stops working at once).
    Revoke {
        /// The key's id (from `gpux node key list`).
        key_id: String,
    },
}

/// `gpux node register`.
#[derive(Debug, Args)]
pub struct NodeRegisterArgs {
    /// Your name for the node, unique in the account (1–64 of [A-Za-z0-9._-]).
    #[arg(long)]
    pub name: String,
    /// SKU, e.g. H100-80G.
    #[arg(long)]
    pub sku: String,
    /// Physical GPUs (1–16).
    #[arg(long, allow_negative_numbers = true, value_parser = parse::positive("gpus"))]
    pub gpus: u32,
    /// Region, e.g. cn-east-2.
    #[arg(long)]
    pub region: String,
    /// Jurisdiction, ISO 3166-1 alpha-2, e.g. CN.
    #[arg(long)]
    pub jurisdiction: String,
    /// Fabric between nodes.
    #[arg(long, value_enum)]
    pub interconnect: Fabric,
    /// NVLink between the node's GPUs.
    #[arg(long)]
    pub nvlink: bool,
    /// Your own name for the IB/RoCE fabric the node is on (1–64 of [A-Za-z0-9._-]): nodes
    /// with the same domain can take one gang (docs/market-rules.md §13).
    #[arg(long, value_name = "DOMAIN")]
    pub fabric_domain: Option<String>,
    /// The node's NIC bandwidth, Gbit/s (1–25600; the sum of its NICs).
    #[arg(long, value_name = "GBPS")]
    pub nic_gbps: Option<u32>,
}

/// `gpux node update`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("change").required(true).multiple(true)
    .args(["region", "jurisdiction", "interconnect", "nvlink", "draining", "fabric_domain",
        "nic_gbps"]))]
pub struct NodeUpdateArgs {
    /// Node id.
    #[arg(value_parser = parse::id)]
    pub id: u64,
    /// New region.
    #[arg(long)]
    pub region: Option<String>,
    /// New jurisdiction.
    #[arg(long)]
    pub jurisdiction: Option<String>,
    /// New fabric.
    #[arg(long, value_enum)]
    pub interconnect: Option<Fabric>,
    /// NVLink: true or false.
    #[arg(long, value_name = "BOOL")]
    pub nvlink: Option<bool>,
    /// Draining (no new leases; running ones continue): true or false.
    #[arg(long, value_name = "BOOL")]
    pub draining: Option<bool>,
    /// New fabric domain (1–64 of [A-Za-z0-9._-]); "" clears it. Running gangs keep their
    /// members.
    #[arg(long, value_name = "DOMAIN")]
    pub fabric_domain: Option<String>,
    /// New NIC bandwidth, Gbit/s (1–25600).
    #[arg(long, value_name = "GBPS")]
    pub nic_gbps: Option<u32>,
}

/// `gpux offer …`.
#[derive(Debug, Subcommand)]
pub enum OfferCmd {
    /// Post an offer of a node's GPUs.
    #[command(after_help = "\
Example:
  gpux offer post --node 1932525568 --gpus 8 --spot-price 20.50 --preemptible-price 14 \\
      --max-lease 7days --until 2026-07-01")]
    Post(OfferPostArgs),
    /// Change an offer's terms; terms not given keep their current values.
    #[command(after_help = "\
Examples:
  gpux offer amend 1933574144 --spot-price 19.00
  gpux offer amend 1933574144 --gpus 4 --no-preemptible")]
    Amend(OfferAmendArgs),
    /// Withdraw an offer (spot leases run on; preemptible ones get notice).
    Withdraw {
        /// Offer id.
        #[arg(value_parser = parse::id)]
        id: u64,
    },
    /// One offer.
    Show {
        /// Offer id.
        #[arg(value_parser = parse::id)]
        id: u64,
    },
}

/// Terms of an offer; `None` leaves the server's default (post) or the current value (amend).
#[derive(Debug, Args)]
pub struct OfferTerms {
    /// Preemptible price, CNY per GPU-hour, below the spot price [default: none].
    #[arg(long, allow_negative_numbers = true, value_parser = parse::price)]
    pub preemptible_price: Option<DecimalStr>,
    /// Preemption notice, seconds (0–900) [server default: 30].
    #[arg(long)]
    pub notice_s: Option<u32>,
    /// Provisioning deadline, seconds (1–1800) [server default: 180].
    #[arg(long)]
    pub provision_s: Option<u32>,
    /// Shortest fixed-term lease, e.g. 1m [server default: 60 s].
    #[arg(long, value_parser = parse::duration)]
    pub min_lease: Option<Duration>,
    /// Longest lease, e.g. 7days [server default: 7 days].
    #[arg(long, value_parser = parse::duration)]
    pub max_lease: Option<Duration>,
    /// The offer leaves the market then (YYYY-MM-DD[THH:MM:SS] local, RFC 3339, or ms)
    /// [server default: in 30 days].
    #[arg(long, value_parser = parse::time)]
    pub until: Option<TimeArg>,
}

/// `gpux offer post`.
#[derive(Debug, Args)]
pub struct OfferPostArgs {
    /// Node id.
    #[arg(long, value_parser = parse::id)]
    pub node: u64,
    /// GPUs offered (up to the node's healthy GPUs).
    #[arg(long, allow_negative_numbers = true, value_parser = parse::positive("gpus"))]
    pub gpus: u32,
    /// Spot price, CNY per GPU-hour (at most 4 decimals).
    #[arg(long, allow_negative_numbers = true, value_parser = parse::price)]
    pub spot_price: DecimalStr,
    /// Other terms.
    #[command(flatten)]
    pub terms: OfferTerms,
    /// SLA terms (issue 26; docs/settlement.md "SLA credit"); none given: the exchange's rule.
    #[command(flatten)]
    pub sla: OfferSlaArgs,
}

/// An offer's SLA terms (issue 26): any of these flags posts the offer with terms, the
/// others taking the defaults shown (the exchange's rule, with a 99 % promise).
#[derive(Debug, Args)]
pub struct OfferSlaArgs {
    /// Promised monthly availability, percent 90–99.99, e.g. 99.9 [with terms: 99].
    #[arg(long)]
    pub sla_availability: Option<String>,
    /// Credit multiple of the outage charge, 1–50 [with terms: 10].
    #[arg(long)]
    pub sla_multiple: Option<u16>,
    /// Longest outage credited per failure, 60 s–24 h, e.g. 1h [with terms: 1h].
    #[arg(long, value_parser = parse::duration)]
    pub sla_outage_cap: Option<Duration>,
    /// Credit cap: `charge` (the lease's charge so far) or a percentage of the monthly fee
    /// (price × GPUs × 720 h), 10–100 %, e.g. 50% [with terms: charge].
    #[arg(long, value_parser = parse::sla_cap)]
    pub sla_cap: Option<gpux_wire::CreditCapDto>,
    /// A lease never delivered earns a credit too (needs a percentage cap).
    #[arg(long)]
    pub sla_non_delivery: bool,
}

/// `gpux offer amend`.
#[derive(Debug, Args)]
pub struct OfferAmendArgs {
    /// Offer id.
    #[arg(value_parser = parse::id)]
    pub id: u64,
    /// GPUs offered.
    #[arg(long, allow_negative_numbers = true, value_parser = parse::positive("gpus"))]
    pub gpus: Option<u32>,
    /// Spot price, CNY per GPU-hour.
    #[arg(long, allow_negative_numbers = true, value_parser = parse::price)]
    pub spot_price: Option<DecimalStr>,
    /// Remove the preemptible price (no more preemptible leases).
    #[arg(long, conflicts_with = "preemptible_price")]
    pub no_preemptible: bool,
    /// Other terms.
    #[command(flatten)]
    pub terms: OfferTerms,
}

/// Finance report kinds (docs/api.md §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportKind {
    /// Buyer statements: deposits, charges, credits, balances.
    BuyerStatements,
    /// Supplier payout statements: gross, fee, net, payouts.
    SupplierPayouts,
    /// Platform summary by SKU and region.
    PlatformSummary,
    /// Trial balance of the ledger with its checks.
    TrialBalance,
    /// Audit trail: who moved money or changed access, with request ids (issue 17).
    AuditTrail,
    /// General-ledger export: every transfer of the period as debit/credit legs with account
    /// codes, for accounting software.
    GlExport,
    /// Reconciliation: deposits, payouts and refunds against the external-cash account.
    Reconciliation,
}

impl ReportKind {
    /// The kind in the URL.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportKind::BuyerStatements => "buyer-statements",
            ReportKind::SupplierPayouts => "supplier-payouts",
            ReportKind::PlatformSummary => "platform-summary",
            ReportKind::TrialBalance => "trial-balance",
            ReportKind::AuditTrail => "audit-trail",
            ReportKind::GlExport => "gl-export",
            ReportKind::Reconciliation => "reconciliation",
        }
    }
}

/// Report file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// JSON (pretty-printed; one line per statement with --json).
    Json,
    /// CSV, one table per statement.
    Csv,
    /// Excel workbook (needs -o).
    Xlsx,
}

impl ReportFormat {
    /// The `format` query value (and file extension).
    pub fn as_str(self) -> &'static str {
        match self {
            ReportFormat::Json => "json",
            ReportFormat::Csv => "csv",
            ReportFormat::Xlsx => "xlsx",
        }
    }
}

/// `gpux report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Which report.
    #[arg(value_enum)]
    pub kind: ReportKind,
    /// Period start, inclusive [default: start of this month in --tz].
    #[arg(long, value_parser = parse::time)]
    pub from: Option<TimeArg>,
    /// Period end, exclusive [default: now].
    #[arg(long, value_parser = parse::time)]
    pub to: Option<TimeArg>,
    /// IANA time zone of local dates and of the report's local times.
    #[arg(long, default_value = "Asia/Shanghai", value_parser = parse::time_zone)]
    pub tz: chrono_tz::Tz,
    /// File format [default: from -o's extension, else json].
    #[arg(long, value_enum)]
    pub format: Option<ReportFormat>,
    /// One account id (finance and admin only) [default: all].
    #[arg(long, value_parser = parse::id)]
    pub account: Option<u64>,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Adjustment kinds (docs/settlement.md "Adjustments and refunds").
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AdjustKind {
    /// A credit to a buyer's balance, borne by the platform fee account.
    GoodwillCredit,
    /// Between two ledger accounts (--debit, --credit).
    Correction,
    /// A buyer's balance back to its bank account (at most the balance).
    Refund,
    /// A buyer's SLA credits paid out as cash.
    SlaCashOut,
    /// A supplier's debt written off by the platform.
    WriteOff,
}

/// `gpux adjust`.
#[derive(Debug, Args)]
pub struct AdjustArgs {
    /// What the adjustment does.
    #[arg(long, value_enum)]
    pub kind: AdjustKind,
    /// The buyer's or supplier's account id (not for a correction).
    #[arg(long, value_parser = parse::id, value_name = "ID")]
    pub account: Option<u64>,
    /// A correction's account debited: external_cash, platform_fee, buyer:ID or supplier:ID.
    #[arg(long, value_name = "ACCOUNT")]
    pub debit: Option<String>,
    /// A correction's account credited (same forms as --debit).
    #[arg(long, value_name = "ACCOUNT")]
    pub credit: Option<String>,
    /// CNY, a decimal with at most 2 decimals, e.g. 50.00.
    #[arg(long, allow_negative_numbers = true, value_parser = parse::amount)]
    pub amount: DecimalStr,
    /// Why (1–500 characters, one line), printed on the statements it touches.
    #[arg(long)]
    pub reason: String,
    /// What it refers to: a ticket, a lease, or period:ID for a closed period it corrects.
    #[arg(long)]
    pub reference: Option<String>,
    /// Names the adjustment: the same key and body never post twice [default: a fresh one,
    /// printed on stderr].
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// `gpux close`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("range").required(true).args(["to", "month"]))]
pub struct CloseArgs {
    /// Period start, inclusive (YYYY-MM-DD[THH:MM:SS] in --tz, RFC 3339, or ms) [default:
    /// where the latest closed period ended].
    #[arg(long, value_parser = parse::time, requires = "to")]
    pub from: Option<TimeArg>,
    /// Period end, exclusive (same forms, or `now`); not after now.
    #[arg(long, value_parser = parse::time_or_now)]
    pub to: Option<TimeArg>,
    /// A calendar month, YYYY-MM, in --tz (instead of --from and --to).
    #[arg(long, value_parser = parse::month, value_name = "YYYY-MM",
          conflicts_with_all = ["from", "to"])]
    pub month: Option<chrono::NaiveDate>,
    /// IANA time zone of local dates and of --month.
    #[arg(long, default_value = "Asia/Shanghai", value_parser = parse::time_zone)]
    pub tz: chrono_tz::Tz,
    /// Names the close: the same key and range answer the same period [default: a fresh
    /// one, printed on stderr].
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// Invoice file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InvoiceFormat {
    /// JSON, as served when named with --format (without -o and --format: a summary; one
    /// line with --json).
    Json,
    /// CSV.
    Csv,
    /// Excel workbook (needs -o).
    Xlsx,
    /// Printable A4 PDF (needs -o).
    Pdf,
}

impl InvoiceFormat {
    /// The `format` query value (and file extension).
    pub fn as_str(self) -> &'static str {
        match self {
            InvoiceFormat::Json => "json",
            InvoiceFormat::Csv => "csv",
            InvoiceFormat::Xlsx => "xlsx",
            InvoiceFormat::Pdf => "pdf",
        }
    }
}

/// `gpux invoice`.
#[derive(Debug, Args)]
pub struct InvoiceArgs {
    /// Closed period id (`gpux periods`).
    #[arg(value_parser = parse::id)]
    pub period: u64,
    /// The buyer's or supplier's account id.
    #[arg(value_parser = parse::id)]
    pub account: u64,
    /// File format [default: from -o's extension, else json].
    #[arg(long, value_enum)]
    pub format: Option<InvoiceFormat>,
    /// IANA time zone the document prints dates in.
    #[arg(long, default_value = "Asia/Shanghai", value_parser = parse::time_zone)]
    pub tz: chrono_tz::Tz,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `gpux invoices [get …]`.
#[derive(Debug, Args)]
pub struct InvoicesArgs {
    /// `get`: download one document; without it, the list.
    #[command(subcommand)]
    pub cmd: Option<InvoicesCmd>,
    /// [finance, admin] Only this account's documents (buyers and suppliers see their own).
    #[arg(long, global = true, value_parser = parse::id)]
    pub account: Option<u64>,
    /// IANA time zone of the periods' dates (and of the document's, for `get`).
    #[arg(long, global = true, default_value = "Asia/Shanghai", value_parser = parse::time_zone)]
    pub tz: chrono_tz::Tz,
}

/// `gpux invoices get`.
#[derive(Debug, Subcommand)]
pub enum InvoicesCmd {
    /// Download one document of a closed period.
    Get(InvoiceGetArgs),
}

/// Which document `gpux invoices get` downloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DocKind {
    /// The invoice (a buyer's) or self-billing statement (a supplier's).
    Invoice,
    /// A buyer's credit note (红字发票).
    CreditNote,
}

/// `gpux invoices get PERIOD`.
#[derive(Debug, Args)]
pub struct InvoiceGetArgs {
    /// Closed period id (`gpux invoices` lists them).
    #[arg(value_parser = parse::id)]
    pub period: u64,
    /// Which document of the period.
    #[arg(long, value_enum, default_value = "invoice")]
    pub kind: DocKind,
    /// The document number, when the period holds several of that kind for you.
    #[arg(long, value_parser = parse::id)]
    pub number: Option<u64>,
    /// File format [default: from -o's extension, else json].
    #[arg(long, value_enum)]
    pub format: Option<InvoiceFormat>,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `gpux account …`.
#[derive(Debug, Subcommand)]
pub enum AccountCmd {
    /// Create an account with its first API key (shown once).
    #[command(after_help = "\
Examples:
  gpux account create team-a --role buyer
  gpux account create idc-1 --role supplier --json | jq -r .api_key")]
    Create {
        /// Unique name (1–64 of [A-Za-z0-9._-]).
        name: String,
        /// Role of the account and all its keys.
        #[arg(long, value_enum)]
        role: RoleArg,
    },
    /// [finance, admin] A buyer's or supplier's tax details (开票信息), printed on its
    /// invoices or self-billing statements.
    #[command(subcommand)]
    TaxDetails(TaxDetailsCmd),
}

/// `gpux account tax-details …`.
#[derive(Debug, Subcommand)]
pub enum TaxDetailsCmd {
    /// Set an account's tax details (replacing earlier ones); documents of periods closed
    /// from now on print them, those of closed periods never change.
    #[command(after_help = "\
Example:
  gpux account tax-details set 2 --legal-name 上海算力科技有限公司 \\
      --taxpayer-id 91350100M000100Y43 --address \"上海市浦东新区…\" --phone 021-61234567 \\
      --bank-name \"招商银行上海分行\" --bank-account 6225880212345678")]
    Set(TaxDetailsArgs),
}

/// `gpux account tax-details set`.
#[derive(Debug, Args)]
pub struct TaxDetailsArgs {
    /// Account id (or, with an admin key, name).
    pub account: String,
    /// Legal name (名称), 1–100 characters.
    #[arg(long)]
    pub legal_name: String,
    /// Taxpayer id: the 18-character unified social credit code (统一社会信用代码).
    #[arg(long)]
    pub taxpayer_id: String,
    /// Registered address (地址), at most 200 characters.
    #[arg(long)]
    pub address: Option<String>,
    /// Telephone (电话): digits, spaces, + - ( ), 5–40 characters.
    #[arg(long)]
    pub phone: Option<String>,
    /// Bank (开户行), at most 100 characters.
    #[arg(long)]
    pub bank_name: Option<String>,
    /// Bank account number (账号), 6–34 digits.
    #[arg(long)]
    pub bank_account: Option<String>,
}

/// Account roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    /// Registers nodes, posts offers.
    Supplier,
    /// Places bids, holds leases.
    Buyer,
    /// Reads every report.
    Finance,
    /// Manages accounts, keys and money.
    Admin,
}

/// `gpux key …`.
#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Create another API key for an account (at most 16); shown once.
    #[command(after_help = "Example:\n  gpux key create team-a")]
    Create {
        /// Account id or name.
        account: String,
    },
    /// Revoke an account's key (it stops working at once).
    #[command(after_help = "Example:\n  gpux key revoke team-a a41c0e9b77d2")]
    Revoke {
        /// Account id or name.
        account: String,
        /// Key id (from `gpux accounts`).
        key_id: String,
    },
}

/// `gpux deposit` / `gpux payout`.
#[derive(Debug, Args)]
pub struct TransferArgs {
    /// Account id or name.
    pub account: String,
    /// CNY, a decimal with at most 2 decimals, e.g. 1000.00.
    #[arg(allow_negative_numbers = true, value_parser = parse::amount)]
    pub amount: DecimalStr,
    /// Names the transfer: the same key and amount never move money twice [default: a fresh
    /// one, printed on stderr].
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every command and every argument has help text (`gpux … --help` is complete).
    #[test]
    fn every_command_and_argument_is_documented() {
        fn check(cmd: &clap::Command, path: &str, seen: &mut usize) {
            *seen += 1;
            assert!(cmd.get_about().is_some(), "{path}: no about");
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if ["help", "version"].contains(&id) {
                    continue;
                }
                assert!(a.get_help().is_some(), "{path} {id}: no help");
            }
            for sub in cmd.get_subcommands() {
                check(sub, &format!("{path} {}", sub.get_name()), seen);
            }
        }
        let mut seen = 0;
        check(&Cli::command(), "gpux", &mut seen);
        // gpux, 28 commands (invoices, issue 25), and config (2), node (5 + key 3), offer (4),
        // offers (search 1, issue 26), account (2 + tax-details 1), key (2), invoices (get 1),
        // inventory (domains 1, issue 27).
        assert_eq!(seen, 1 + 28 + 2 + 5 + 3 + 4 + 1 + 2 + 1 + 2 + 1 + 1);
    }

    /// Issue 27: `--gang NODESxGPUS` with its scope and member-loss rule, `--min-gpus`, and
    /// `release --bid` beside `release LEASE`.
    #[test]
    fn gangs_min_gpus_and_release_by_bid_parse() {
        let cli = Cli::try_parse_from([
            "gpux",
            "bid",
            "--sku",
            "H100-80G",
            "--gang",
            "8x8",
            "--scope",
            "region",
            "--on-member-loss",
            "end_all",
            "--price",
            "25",
        ])
        .expect("parses");
        let Command::Bid(a) = cli.command else {
            panic!("bid")
        };
        assert_eq!(
            (a.gang, a.gpus, a.scope, a.on_member_loss),
            (
                Some((8, 8)),
                None,
                Some(GangScope::Region),
                Some(MemberLoss::EndAll)
            )
        );
        for bad in ["0x8", "8x0", "8x17", "65x16", "8", "8x", "x8", "eight"] {
            assert!(
                Cli::try_parse_from(["gpux", "bid", "--sku", "S", "--gang", bad, "--price", "1"])
                    .is_err(),
                "{bad}"
            );
        }
        // --gpus is required without --gang; --scope needs --gang.
        assert!(Cli::try_parse_from(["gpux", "bid", "--sku", "S", "--price", "1"]).is_err());
        assert!(
            Cli::try_parse_from([
                "gpux", "bid", "--sku", "S", "--gpus", "8", "--scope", "domain", "--price", "1"
            ])
            .is_err()
        );
        let cli = Cli::try_parse_from([
            "gpux",
            "bid",
            "--sku",
            "S",
            "--gpus",
            "64",
            "--placement",
            "spread",
            "--min-gpus",
            "32",
            "--price",
            "1",
        ])
        .expect("parses");
        let Command::Bid(a) = cli.command else {
            panic!("bid")
        };
        assert_eq!((a.gpus, a.min_gpus), (Some(64), Some(32)));
        let cli = Cli::try_parse_from(["gpux", "release", "--bid", "42"]).expect("parses");
        assert!(matches!(
            cli.command,
            Command::Release {
                lease: None,
                bid: Some(42)
            }
        ));
        let cli = Cli::try_parse_from(["gpux", "release", "7"]).expect("parses");
        assert!(matches!(
            cli.command,
            Command::Release {
                lease: Some(7),
                bid: None
            }
        ));
        assert!(Cli::try_parse_from(["gpux", "release"]).is_err());
        assert!(Cli::try_parse_from(["gpux", "release", "7", "--bid", "42"]).is_err());
        let cli = Cli::try_parse_from([
            "gpux",
            "inventory",
            "domains",
            "--sku",
            "H100-80G",
            "--gpus-per-node",
            "8",
        ])
        .expect("parses");
        let Command::Inventory(i) = cli.command else {
            panic!("inventory")
        };
        let Some(InventoryCmd::Domains(d)) = i.cmd else {
            panic!("domains")
        };
        assert_eq!(
            (d.sku.as_deref(), d.gpus_per_node),
            (Some("H100-80G"), Some(8))
        );
    }

    #[test]
    fn a_bid_parses_every_field() {
        let cli = Cli::try_parse_from([
            "gpux",
            "bid",
            "--sku",
            "H100-80G",
            "--gpus",
            "2",
            "--price",
            "25.50",
            "--kind",
            "preemptible",
            "--placement",
            "spread",
            "--region",
            "cn-east-2",
            "--region",
            "cn-east-1",
            "--jurisdiction",
            "CN",
            "--min-interconnect",
            "roce",
            "--nvlink",
            "--duration",
            "2h",
            "--tif",
            "gtc",
            "--expires-in",
            "30m",
            "--client-order-id",
            "job-1",
            "--ssh-key",
            "/k.pub",
            "--image",
            "img:1",
            "--env",
            "A=1",
            "--port",
            "8888",
            "--disk-gb",
            "100",
            "--wait",
            "--",
            "python",
            "train.py",
            "--lr",
            "3",
        ])
        .unwrap();
        let Command::Bid(b) = cli.command else {
            panic!()
        };
        assert_eq!(b.price.0.to_string(), "25.50");
        assert_eq!(b.regions, ["cn-east-2", "cn-east-1"]);
        assert_eq!(b.duration, Some(Duration::from_secs(7200)));
        assert_eq!(b.command, ["python", "train.py", "--lr", "3"]);
        assert_eq!(b.env, [("A".to_string(), "1".to_string())]);
        assert!(b.wait && b.nvlink);
        assert!(
            Cli::try_parse_from(["gpux", "bid", "--sku", "X", "--gpus", "1", "--price", "1e3"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["gpux", "cancel"]).is_err());
        assert!(Cli::try_parse_from(["gpux", "node", "update", "1"]).is_err());
    }
}
