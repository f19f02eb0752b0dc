//! The public market views beside the inventory (issue 26): `gpux offers search`, the offers
//! behind the inventory's levels with what each node is (`GET /v1/market/offers`), and the
//! site filters `gpux inventory` passes to `GET /v1/inventory`.

use crate::cli::{CapacityFilter, Fabric, Kind, OfferOrder, OfferSearchArgs};
use crate::error::CliError;
use crate::output::human;
use crate::run::Ctx;
use gpux_client::{InventoryFilter, MarketOfferQuery};

/// A fabric's wire name (`pcie`, `roce`, `infiniband`).
pub fn fabric_name(f: Fabric) -> String {
    human::name(&crate::supplier::fabric(f))
}

/// The capacity filters of `gpux inventory` and `gpux offers search` (trust, SLA, site) as
/// the client's query filter.
pub fn capacity_filter(f: &CapacityFilter) -> InventoryFilter {
    InventoryFilter {
        verified: f.verified,
        min_reliability: f.min_reliability.clone(),
        jurisdiction: f.jurisdiction.clone(),
        min_interconnect: f.min_interconnect.map(fabric_name),
        nvlink: f.nvlink,
        min_sla: f.min_sla.clone(),
        min_sla_multiple: f.min_sla_multiple,
    }
}

/// The query of `gpux offers search`.
pub fn search_query(a: &OfferSearchArgs) -> MarketOfferQuery {
    MarketOfferQuery {
        sku: a.sku.clone(),
        region: a.region.clone(),
        filter: capacity_filter(&a.filter),
        min_gpus: a.min_gpus,
        max_price: a.max_price.map(|p| p.0.to_string()),
        kind: a.kind.map(|k| {
            match k {
                Kind::Spot => "spot",
                Kind::Preemptible => "preemptible",
            }
            .to_string()
        }),
        min_cpu_cores: a.min_cpu_cores,
        min_ram_gib: a.min_ram_gib,
        min_disk_gb: a.min_disk_gb,
        min_nic_gbps: a.min_nic_gbps,
        min_cuda: a.min_cuda.clone(),
        order: a.order.map(|o| {
            match o {
                OfferOrder::Price => "price",
                OfferOrder::Reliability => "reliability",
                OfferOrder::Gpus => "gpus",
            }
            .to_string()
        }),
        limit: a.limit,
    }
}

/// `gpux offers search`: no key needed.
pub async fn search(ctx: &Ctx, a: &OfferSearchArgs) -> Result<(), CliError> {
    let found = ctx.public()?.market_offers(&search_query(a)).await?;
    ctx.out.list(&found.offers, human::market_offers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command, OffersCmd};
    use clap::Parser;

    fn search_args(args: &[&str]) -> OfferSearchArgs {
        let cli = Cli::try_parse_from(args).unwrap();
        match cli.command {
            Command::Offers {
                cmd: Some(OffersCmd::Search(a)),
            } => *a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn offers_search_flags_become_the_query() {
        let a = search_args(&[
            "gpux",
            "offers",
            "search",
            "--sku",
            "H100-80G",
            "--jurisdiction",
            "CN",
            "--min-interconnect",
            "infiniband",
            "--nvlink",
            "--verified",
            "--min-reliability",
            "0.99",
            "--min-gpus",
            "4",
            "--max-price",
            "18.50",
            "--kind",
            "preemptible",
            "--min-cpu-cores",
            "64",
            "--min-ram-gib",
            "512",
            "--min-disk-gb",
            "2000",
            "--min-nic-gbps",
            "400",
            "--min-cuda",
            "12.4",
            "--order",
            "reliability",
            "--limit",
            "7",
        ]);
        let q = search_query(&a);
        assert_eq!(
            q,
            MarketOfferQuery {
                sku: Some("H100-80G".into()),
                region: None,
                filter: InventoryFilter {
                    jurisdiction: Some("CN".into()),
                    min_interconnect: Some("infiniband".into()),
                    nvlink: true,
                    verified: true,
                    min_reliability: Some("0.99".into()),
                    min_sla: None,
                    min_sla_multiple: None,
                },
                min_gpus: Some(4),
                max_price: Some("18.50".into()),
                kind: Some("preemptible".into()),
                min_cpu_cores: Some(64),
                min_ram_gib: Some(512),
                min_disk_gb: Some(2000),
                min_nic_gbps: Some(400),
                min_cuda: Some("12.4".into()),
                order: Some("reliability".into()),
                limit: Some(7),
            }
        );
        // Nothing given: nothing sent (the server's defaults).
        assert_eq!(
            search_query(&search_args(&["gpux", "offers", "search"])),
            MarketOfferQuery::default()
        );
        // `gpux offers` alone still lists the supplier's own offers.
        let cli = Cli::try_parse_from(["gpux", "offers"]).unwrap();
        assert!(matches!(cli.command, Command::Offers { cmd: None }));
    }

    #[test]
    fn inventory_site_flags_become_the_filter() {
        let cli = Cli::try_parse_from([
            "gpux",
            "inventory",
            "--jurisdiction",
            "CN",
            "--min-interconnect",
            "roce",
            "--nvlink",
            "--min-sla",
            "99.9",
            "--min-sla-multiple",
            "10",
        ])
        .unwrap();
        let Command::Inventory(a) = cli.command else {
            panic!("not inventory");
        };
        assert_eq!(
            capacity_filter(&a.filter),
            InventoryFilter {
                verified: false,
                min_reliability: None,
                jurisdiction: Some("CN".into()),
                min_interconnect: Some("roce".into()),
                nvlink: true,
                min_sla: Some("99.9".into()),
                min_sla_multiple: Some(10),
            }
        );
    }
}
