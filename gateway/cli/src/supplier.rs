//! Supplier requests from flags: nodes and offers. `offer amend` starts from the offer's
//! current terms, because the API replaces terms as a whole (docs/api.md §2.2 `PUT
//! /v1/offers/{id}`): what the user did not type stays as it is.

use crate::cli::{
    Fabric, NodeRegisterArgs, NodeUpdateArgs, OfferAmendArgs, OfferPostArgs, OfferSlaArgs,
    OfferTerms,
};
use crate::error::CliError;
use crate::output::human;
use crate::parse::whole_seconds;
use gpux_wire::NodeKeyView;
use gpux_wire::{
    CreditCapDto, DecimalStr, InterconnectDto, NodeRequest, NodeUpdateRequest, OfferRequest,
    OfferView, SlaTermsDto,
};

/// The wire fabric of a flag.
pub fn fabric(f: Fabric) -> InterconnectDto {
    match f {
        Fabric::Pcie => InterconnectDto::Pcie,
        Fabric::Roce => InterconnectDto::Roce,
        Fabric::Infiniband => InterconnectDto::Infiniband,
    }
}

/// `gpux node register` → `POST /v1/nodes`.
pub fn node_request(a: NodeRegisterArgs) -> NodeRequest {
    NodeRequest {
        name: a.name,
        sku: a.sku,
        gpus: a.gpus,
        region: a.region,
        jurisdiction: a.jurisdiction,
        interconnect: fabric(a.interconnect),
        nvlink: a.nvlink,
        fabric_domain: a.fabric_domain,
        nic_gbps: a.nic_gbps,
    }
}

/// `gpux node update` → `PATCH /v1/nodes/{id}`.
pub fn node_update(a: NodeUpdateArgs) -> NodeUpdateRequest {
    NodeUpdateRequest {
        region: a.region,
        jurisdiction: a.jurisdiction,
        interconnect: a.interconnect.map(fabric),
        nvlink: a.nvlink,
        draining: a.draining,
        fabric_domain: a.fabric_domain,
        nic_gbps: a.nic_gbps,
    }
}

fn until_ms(t: &OfferTerms) -> Result<Option<i64>, CliError> {
    t.until
        .as_ref()
        .map(|u| u.to_ms(&chrono::Local).map_err(CliError::Usage))
        .transpose()
}

/// The SLA terms of `gpux offer post`'s `--sla-*` flags (issue 26): `None` without any.
pub fn offer_sla(a: &OfferSlaArgs) -> Option<SlaTermsDto> {
    let any = a.sla_availability.is_some()
        || a.sla_multiple.is_some()
        || a.sla_outage_cap.is_some()
        || a.sla_cap.is_some()
        || a.sla_non_delivery;
    any.then(|| SlaTermsDto {
        availability: a.sla_availability.clone().unwrap_or_else(|| "99".into()),
        credit_multiple: a.sla_multiple.unwrap_or(10),
        outage_cap_s: a.sla_outage_cap.map_or(3600, |d| {
            u32::try_from(whole_seconds(d)).unwrap_or(u32::MAX)
        }),
        credit_cap: a.sla_cap.unwrap_or(CreditCapDto::ChargeSoFar),
        non_delivery_credit: a.sla_non_delivery,
    })
}

/// `gpux offer post` → `POST /v1/offers`; terms not given take the server's defaults.
pub fn offer_post(a: OfferPostArgs) -> Result<OfferRequest, CliError> {
    Ok(OfferRequest {
        node_id: Some(gpux_wire::IdStr(a.node)),
        gpus: a.gpus,
        spot_price: a.spot_price,
        preemptible_price: a.terms.preemptible_price,
        min_lease_s: a.terms.min_lease.map(whole_seconds),
        max_lease_s: a.terms.max_lease.map(whole_seconds),
        available_until_ms: until_ms(&a.terms)?,
        notice_s: a.terms.notice_s,
        provision_s: a.terms.provision_s,
        sla: offer_sla(&a.sla),
    })
}

fn price_of(s: &str) -> Result<DecimalStr, CliError> {
    s.parse()
        .map_err(|e| CliError::Unavailable(format!("the server sent price {s:?}: {e}")))
}

/// `gpux offer amend` → `PUT /v1/offers/{id}`: the current terms with the flags applied.
pub fn offer_amend(current: &OfferView, a: OfferAmendArgs) -> Result<OfferRequest, CliError> {
    let preemptible_price = if a.no_preemptible {
        None
    } else {
        match a.terms.preemptible_price {
            Some(p) => Some(p),
            None => current
                .preemptible_price
                .as_deref()
                .map(price_of)
                .transpose()?,
        }
    };
    Ok(OfferRequest {
        node_id: None,
        gpus: a.gpus.unwrap_or(current.gpus),
        spot_price: match a.spot_price {
            Some(p) => p,
            None => price_of(&current.spot_price)?,
        },
        preemptible_price,
        min_lease_s: Some(a.terms.min_lease.map_or(current.min_lease_s, whole_seconds)),
        max_lease_s: Some(a.terms.max_lease.map_or(current.max_lease_s, whole_seconds)),
        available_until_ms: Some(until_ms(&a.terms)?.unwrap_or(current.available_until_ms)),
        notice_s: Some(a.terms.notice_s.unwrap_or(current.notice_s)),
        provision_s: Some(a.terms.provision_s.unwrap_or(current.provision_s)),
        sla: None,
    })
}

/// `gpux node key list`.
pub fn node_keys_table(keys: &[NodeKeyView]) -> String {
    if keys.is_empty() {
        return "(no node keys)".into();
    }
    let mut t = human::table(&["KEY ID", "NODE NAME", "NODE ID"]);
    for k in keys {
        t.add_row(vec![
            k.key_id.clone(),
            k.node_name.clone(),
            k.node_id
                .clone()
                .unwrap_or_else(|| "- (not registered)".into()),
        ]);
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn amend(args: &[&str]) -> OfferAmendArgs {
        let mut v = vec!["gpux", "offer", "amend", "7"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v).unwrap().command {
            Command::Offer(crate::cli::OfferCmd::Amend(a)) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn amending_keeps_what_was_not_typed() {
        let current = OfferView {
            id: "7".into(),
            node_id: "3".into(),
            gpus: 8,
            spot_price: "20.5000".into(),
            preemptible_price: Some("14.0000".into()),
            min_lease_s: 60,
            max_lease_s: 604_800,
            available_until_ms: 1_781_164_800_000,
            notice_s: 30,
            provision_s: 180,
            sla: None,
            reliability: None,
            supplier_reliability: None,
        };
        let r = offer_amend(&current, amend(&["--spot-price", "19.00"])).unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"gpus": 8, "spot_price": "19.00", "preemptible_price": "14.0000",
                "min_lease_s": 60, "max_lease_s": 604800, "available_until_ms": 1781164800000i64,
                "notice_s": 30, "provision_s": 180})
        );
        let r = offer_amend(
            &current,
            amend(&["--gpus", "4", "--no-preemptible", "--max-lease", "1day"]),
        )
        .unwrap();
        assert_eq!(
            (r.gpus, r.preemptible_price, r.max_lease_s),
            (4, None, Some(86_400))
        );
        assert_eq!(r.spot_price.0.to_string(), "20.5000");
    }

    fn post(args: &[&str]) -> OfferRequest {
        let mut v = vec!["gpux", "offer", "post", "--node", "3", "--gpus", "8"];
        v.extend_from_slice(&["--spot-price", "20"]);
        v.extend_from_slice(args);
        match Cli::try_parse_from(v).unwrap().command {
            Command::Offer(crate::cli::OfferCmd::Post(a)) => offer_post(a).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sla_flags_post_terms_and_none_posts_none() {
        assert_eq!(post(&[]).sla, None);
        let r = post(&[
            "--sla-availability",
            "99.9",
            "--sla-multiple",
            "20",
            "--sla-outage-cap",
            "10m",
            "--sla-cap",
            "50%",
        ]);
        let v = serde_json::to_value(r.sla.unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"availability": "99.9", "credit_multiple": 20,
                "outage_cap_s": 600, "credit_cap": {"monthly_fee_pct": 50},
                "non_delivery_credit": false})
        );
        let r = post(&["--sla-cap", "charge"]).sla.unwrap();
        assert_eq!(
            (
                r.availability.as_str(),
                r.credit_multiple,
                r.outage_cap_s,
                r.credit_cap
            ),
            ("99", 10, 3600, CreditCapDto::ChargeSoFar)
        );
        assert!(crate::parse::sla_cap("half").is_err());
    }
}
