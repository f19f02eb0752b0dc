//! Requests validated at the edge into engine commands. The wire types themselves (JSON
//! shapes, schemas) live in the `gpux-wire` crate, shared with the typed client; this module
//! re-exports them under their old paths and holds what only the server knows: conversion
//! into the engine's domain types (extension traits [`ToSpec`] and friends), defaults filled
//! relative to the exchange clock. (The wire names of engine enums live in the leaf
//! [`crate::wire_conv`], re-exported here.)

use crate::api::error::ApiError;
use crate::node_facts::{GpuFacts, GpuProblem, HostFacts, Nic};
/// Engine → wire conversions, moved to the leaf [`crate::wire_conv`] (the feed uses them too);
/// re-exported under their old paths.
pub use crate::wire_conv::{
    close_reason_dto, end_reason_dto, hold_dto, interconnect_dto, kind_dto, kind_str,
    placement_dto, price_str,
};
use exchange::{
    BidSpec, Catalog, Constraints, GangScope, GangSpec, Interconnect, Jurisdiction, LeaseKind,
    MemberLoss, NodeFabric, NodeSpec, NodeUpdate, OfferTerms, Placement, Price, SkuId, TimeInForce,
};
pub use gpux_wire::{
    AmountRequest, AttestationRequest, BidRequest, ConstraintsDto, CreateAccountRequest,
    DecimalStr, HeartbeatRequest, IdStr, InterconnectDto, KindDto, NodeRequest, NodeUpdateRequest,
    OfferRequest, PlacementDto, TifDto, parse_id,
};
use gpux_wire::{CreditCapDto, SlaTermsDto, SlaTermsView};
use settlement::{CreditCap, SlaTerms};

/// Default `min_lease_s` of an offer: 60 s.
pub const DEFAULT_MIN_LEASE_S: u64 = 60;
/// Default `max_lease_s` of an offer: 7 days.
pub const DEFAULT_MAX_LEASE_S: u64 = 7 * 24 * 3600;
/// Default preemption notice of an offer: 30 s.
pub const DEFAULT_NOTICE_S: u32 = 30;
/// Default `available_until_ms` of an offer: 30 days after the request.
pub const DEFAULT_AVAILABLE_FOR_MS: i64 = 30 * 24 * 3600 * 1000;

/// A price of the wire: at most 4 decimals written (the tick; `20.50000` too is refused, as
/// the schemas' pattern says), > 0, ≤ 100000.
pub(crate) fn price(field: &'static str, d: DecimalStr) -> Result<Price, ApiError> {
    if d.0.scale() > exchange::price::PRICE_SCALE {
        return Err(ApiError::invalid(
            field,
            "invalid_price",
            "a price has at most 4 decimal places (0.0001 CNY per GPU-hour)",
        ));
    }
    Price::from_decimal(d.0).map_err(|e| ApiError::invalid(field, "invalid_price", e.to_string()))
}

fn sku(catalog: &Catalog, id: &str) -> Result<SkuId, ApiError> {
    catalog.lookup(id).ok_or_else(|| unknown_sku(catalog, id))
}

/// Most edits (Levenshtein distance, ignoring case) between a SKU asked for and a catalog id
/// for the id to be suggested.
pub const SKU_SUGGESTION_MAX_EDITS: usize = 3;

/// The catalog's id nearest to `id`: the same but for case, `-`, `_` and `.` (`rtx4090-24g`,
/// `H100_80G`), else the fewest edits ignoring case, at most [`SKU_SUGGESTION_MAX_EDITS`]
/// (ties: catalog order).
pub fn nearest_sku<'a>(catalog: &'a Catalog, id: &str) -> Option<&'a str> {
    let fold = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '-' | '_' | '.' | ' '))
            .flat_map(char::to_lowercase)
            .collect()
    };
    let wanted = fold(id);
    let ids: Vec<&str> = catalog.iter().map(|(_, s)| s.id.as_str()).collect();
    if let Some(same) = ids.iter().find(|c| fold(c) == wanted) {
        return Some(same);
    }
    let lower = id.to_lowercase();
    ids.iter()
        .map(|c| (strsim::levenshtein(&c.to_lowercase(), &lower), *c))
        .filter(|(d, _)| *d <= SKU_SUGGESTION_MAX_EDITS)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// 400 `unknown_sku` (field `sku`) for `id`, suggesting the nearest catalog id when there is
/// one (issue 25: `rtx4090-24g` for `RTX4090-24G`).
pub fn unknown_sku(catalog: &Catalog, id: &str) -> ApiError {
    let hint = match nearest_sku(catalog, id) {
        Some(near) => format!("; did you mean {near:?}?"),
        None => String::new(),
    };
    ApiError::invalid(
        "sku",
        "unknown_sku",
        format!("{id:?} is not in the catalog{hint} (GET /v1/catalog lists every SKU)"),
    )
}

/// An optional `sku` query parameter resolved in the catalog: `None` when absent.
///
/// # Errors
/// 400 `unknown_sku` ([`unknown_sku`]) for an id the catalog lacks.
pub fn optional_sku(catalog: &Catalog, id: Option<&str>) -> Result<Option<SkuId>, ApiError> {
    id.map(|s| sku(catalog, s)).transpose()
}

pub(crate) fn jurisdiction(field: &'static str, s: &str) -> Result<Jurisdiction, ApiError> {
    Jurisdiction::parse(s).ok_or_else(|| {
        ApiError::invalid(
            field,
            "invalid_jurisdiction",
            "a jurisdiction is an ISO 3166-1 alpha-2 code such as \"CN\"",
        )
    })
}

/// The engine's fabric of a wire fabric.
pub fn interconnect(i: InterconnectDto) -> Interconnect {
    match i {
        InterconnectDto::Pcie => Interconnect::Pcie,
        InterconnectDto::Roce => Interconnect::Roce,
        InterconnectDto::Infiniband => Interconnect::Infiniband,
    }
}

/// The engine's lease kind of a wire kind.
pub fn kind(k: KindDto) -> LeaseKind {
    match k {
        KindDto::Spot => LeaseKind::Spot,
        KindDto::Preemptible => LeaseKind::Preemptible,
    }
}

/// Conversion of a node registration into the engine's node spec.
pub trait NodeSpecOf {
    /// The engine's node spec.
    ///
    /// # Errors
    /// 400 for an unknown SKU or a malformed jurisdiction (names, regions and counts are
    /// checked by the engine).
    fn to_spec(&self, catalog: &Catalog) -> Result<NodeSpec, ApiError>;
}

/// Conversion of a node change into the engine's node update.
pub trait NodeUpdateOf {
    /// The engine's node update. `current` is the node's fabric record now: the engine
    /// replaces the whole record, so a change of one part keeps the other (`fabric_domain:
    /// ""` clears the domain).
    ///
    /// # Errors
    /// 400 for a malformed jurisdiction; 422 `invalid_domain` naming `fabric_domain` or
    /// `nic_gbps` out of bounds.
    fn to_update(&self, current: Option<&NodeFabric>) -> Result<NodeUpdate, ApiError>;
}

/// 422 `invalid_domain` naming `field` (docs/market-rules.md §13.1).
fn invalid_domain(field: &'static str, message: impl Into<String>) -> ApiError {
    ApiError {
        status: actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
        ..ApiError::invalid(field, "invalid_domain", message)
    }
}

/// A fabric domain name checked at the edge: 1..=[`gpux_wire::MAX_DOMAIN_LEN`] of
/// `[A-Za-z0-9._-]`.
///
/// # Errors
/// 422 `invalid_domain` naming `fabric_domain`.
pub fn fabric_domain(s: &str) -> Result<String, ApiError> {
    let max = gpux_wire::MAX_DOMAIN_LEN;
    if s.is_empty()
        || s.len() > max
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid_domain(
            "fabric_domain",
            format!(
                "fabric_domain is 1 to {max} characters of letters, digits, '.', '_' and '-' \
                 (the supplier's own name for the node's IB/RoCE fabric); got {s:?}"
            ),
        ));
    }
    Ok(s.to_string())
}

/// A node's NIC bandwidth checked at the edge: 1..=[`gpux_wire::MAX_FABRIC_NIC_GBPS`].
///
/// # Errors
/// 422 `invalid_domain` naming `nic_gbps`.
pub fn nic_gbps(n: u32) -> Result<u32, ApiError> {
    let max = gpux_wire::MAX_FABRIC_NIC_GBPS;
    if n == 0 || n > max {
        return Err(invalid_domain(
            "nic_gbps",
            format!("nic_gbps is 1 to {max} Gbit/s (the sum of the node's NICs); got {n}"),
        ));
    }
    Ok(n)
}

/// Conversion of an offer request into the engine's offer terms.
pub trait OfferTermsOf {
    /// The engine's offer terms; defaults are filled relative to `now_ms`.
    ///
    /// # Errors
    /// 400 for a price off the 0.0001 tick, not positive or too high.
    fn to_terms(&self, now_ms: i64) -> Result<OfferTerms, ApiError>;
}

/// Conversion of a bid request into the engine's bid.
pub trait BidSpecOf {
    /// The engine's bid.
    ///
    /// # Errors
    /// 400 for an unknown SKU, a bad price or jurisdiction, or an expiry on an IOC bid.
    fn to_spec(&self, catalog: &Catalog) -> Result<BidSpec, ApiError>;
}

/// Largest agent clock offset a heartbeat may report, ms, either way (issue 25; the wire's
/// `gpux_wire::MAX_CLOCK_OFFSET_MS`, one day): beyond it, 400 `invalid_clock_offset`.
pub const MAX_AGENT_CLOCK_OFFSET_MS: i64 = gpux_wire::MAX_CLOCK_OFFSET_MS;

/// Validates a heartbeat's fields beyond their JSON types.
pub trait HeartbeatOf {
    /// The agent's clock offset, ms, if the heartbeat carries one.
    ///
    /// # Errors
    /// 400 `invalid_clock_offset` naming `clock_offset_ms` when it is more than
    /// [`MAX_AGENT_CLOCK_OFFSET_MS`] either way.
    fn clock_offset(&self) -> Result<Option<i64>, ApiError>;

    /// The unhealthy GPUs, in index order, if the heartbeat names them (issue 26).
    ///
    /// # Errors
    /// 400 `invalid_unhealthy_gpus` naming `unhealthy_gpus`: more than
    /// [`gpux_wire::MAX_NODE_GPUS_WIRE`] entries, an index at or above it, a UUID empty, over [`gpux_wire::MAX_GPU_UUID_LEN`] or not printable ASCII without spaces,
    /// a reason empty, over [`gpux_wire::MAX_GPU_REASON_LEN`] characters or with control
    /// characters. (An index at or above the node's own GPU count is the handler's 422.) An
    /// index named twice counts once, with its first entry's UUID and reason.
    fn unhealthy(&self) -> Result<Option<Vec<GpuProblem>>, ApiError>;
}

/// Printable ASCII without spaces, 1..=`max` bytes (GPU UUIDs, NIC names).
fn graphic_ascii(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic())
}

/// 1..=`max` characters without control characters (`char::is_control`).
fn plain_text(s: &str, max: usize) -> bool {
    !s.is_empty() && s.chars().count() <= max && !s.chars().any(char::is_control)
}

impl HeartbeatOf for HeartbeatRequest {
    fn clock_offset(&self) -> Result<Option<i64>, ApiError> {
        match self.clock_offset_ms {
            Some(ms) if ms.unsigned_abs() > MAX_AGENT_CLOCK_OFFSET_MS.unsigned_abs() => {
                Err(ApiError::invalid(
                    "clock_offset_ms",
                    "invalid_clock_offset",
                    format!(
                        "clock_offset_ms {ms} is more than a day ({MAX_AGENT_CLOCK_OFFSET_MS} ms) \
                         either way: sync the host's clock (NTP)"
                    ),
                ))
            }
            other => Ok(other),
        }
    }

    fn unhealthy(&self) -> Result<Option<Vec<GpuProblem>>, ApiError> {
        let Some(list) = &self.unhealthy_gpus else {
            return Ok(None);
        };
        let bad = |m: String| ApiError::invalid("unhealthy_gpus", "invalid_unhealthy_gpus", m);
        let max = gpux_wire::MAX_NODE_GPUS_WIRE;
        if list.len() > max as usize {
            return Err(bad(format!(
                "unhealthy_gpus lists at most {max} GPUs, not {}",
                list.len()
            )));
        }
        let mut seen = 0u32;
        let mut out = Vec::with_capacity(list.len());
        for g in list {
            if g.index >= max {
                return Err(bad(format!(
                    "GPU index {} is not below {max} (indexes are 0 to {})",
                    g.index,
                    max - 1
                )));
            }
            // Named twice: the first entry's UUID and reason stand (the mask is the same).
            if seen & (1 << g.index) != 0 {
                continue;
            }
            seen |= 1 << g.index;
            if let Some(u) = &g.uuid
                && !graphic_ascii(u, gpux_wire::MAX_GPU_UUID_LEN)
            {
                return Err(bad(format!(
                    "GPU {}'s uuid is 1 to {} printable ASCII characters without spaces",
                    g.index,
                    gpux_wire::MAX_GPU_UUID_LEN
                )));
            }
            if let Some(r) = &g.reason
                && !plain_text(r, gpux_wire::MAX_GPU_REASON_LEN)
            {
                return Err(bad(format!(
                    "GPU {}'s reason is 1 to {} characters without control characters",
                    g.index,
                    gpux_wire::MAX_GPU_REASON_LEN
                )));
            }
            out.push(GpuProblem {
                index: g.index,
                uuid: g.uuid.clone(),
                reason: g.reason.clone(),
            });
        }
        out.sort_by_key(|g| g.index);
        Ok(Some(out))
    }
}

/// Validates an attestation at the edge (issue 26, docs/market-rules.md §12.1).
pub trait AttestationOf {
    /// The host facts, GPUs included, for [`crate::market::Op::AttestNode`]. A model the
    /// exchange does not know is the engine's to refuse (422 `unknown_model` naming `gpus`).
    ///
    /// # Errors
    /// 422 `invalid_gpus` (`gpus`): indexes not strictly increasing, a UUID repeated (rules the
    /// schema cannot state). 400 naming the field: `invalid_gpus` (`gpus`): no GPU or more than
    /// [`gpux_wire::MAX_NODE_GPUS_WIRE`], an index at or above it, a UUID empty, over
    /// [`gpux_wire::MAX_GPU_UUID_LEN`] or not printable ASCII without spaces, a model empty, only spaces, over [`gpux_wire::MAX_GPU_MODEL_LEN`] characters
    /// or with control characters, a PCIe generation outside 1..=[`gpux_wire::MAX_PCIE_GEN`]
    /// or width outside 1..=[`gpux_wire::MAX_PCIE_WIDTH`] (the same rules as the engine's,
    /// exchange `engine::attest::check_attestation`); `invalid_attestation`
    /// (`driver_version`, `cuda_version`): over [`gpux_wire::MAX_VERSION_LEN`] or not
    /// printable ASCII; `invalid_attestation` (`nics`): more than [`gpux_wire::MAX_NICS`], a
    /// name empty, over [`gpux_wire::MAX_NIC_NAME_LEN`] or not printable ASCII without spaces,
    /// a speed over [`gpux_wire::MAX_NIC_GBPS`]; `invalid_attestation` (`cpu_cores`,
    /// `ram_mib`, `disk_gb`): outside 1..=[`gpux_wire::MAX_CPU_CORES`],
    /// 1..=[`gpux_wire::MAX_RAM_MIB`], 0..=[`gpux_wire::MAX_DISK_GB`].
    fn to_host_facts(&self) -> Result<HostFacts, ApiError>;
}

impl AttestationOf for AttestationRequest {
    fn to_host_facts(&self) -> Result<HostFacts, ApiError> {
        use gpux_wire::{
            MAX_CPU_CORES, MAX_DISK_GB, MAX_GPU_MODEL_LEN, MAX_GPU_UUID_LEN, MAX_NIC_GBPS,
            MAX_NIC_NAME_LEN, MAX_NICS, MAX_NODE_GPUS_WIRE, MAX_PCIE_GEN, MAX_PCIE_WIDTH,
            MAX_RAM_MIB, MAX_VERSION_LEN,
        };
        let gpus_bad = |m: String| ApiError::invalid("gpus", "invalid_gpus", m);
        // What the schema cannot say (order, uniqueness) is the engine's rule: 422.
        let gpus_rule = |m: String| ApiError {
            status: actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
            ..gpus_bad(m)
        };
        if self.gpus.is_empty() || self.gpus.len() > MAX_NODE_GPUS_WIRE as usize {
            return Err(gpus_bad(format!(
                "an attestation lists 1 to {MAX_NODE_GPUS_WIRE} GPUs, not {}",
                self.gpus.len()
            )));
        }
        let mut last: Option<u32> = None;
        let mut gpus = Vec::with_capacity(self.gpus.len());
        for (i, g) in self.gpus.iter().enumerate() {
            if g.index >= MAX_NODE_GPUS_WIRE {
                return Err(gpus_bad(format!(
                    "GPU index {} is not below {MAX_NODE_GPUS_WIRE}",
                    g.index
                )));
            }
            if last.is_some_and(|l| g.index <= l) {
                return Err(gpus_rule(format!(
                    "GPU indexes are strictly increasing: {} at position {i}",
                    g.index
                )));
            }
            last = Some(g.index);
            if !graphic_ascii(&g.uuid, MAX_GPU_UUID_LEN) {
                return Err(gpus_bad(format!(
                    "GPU {}'s uuid is 1 to {MAX_GPU_UUID_LEN} printable ASCII characters \
                     without spaces",
                    g.index
                )));
            }
            if self.gpus[..i].iter().any(|o| o.uuid == g.uuid) {
                return Err(gpus_rule(format!(
                    "GPU {}'s uuid {:?} is listed twice",
                    g.index, g.uuid
                )));
            }
            if g.model.trim().is_empty() || !plain_text(&g.model, MAX_GPU_MODEL_LEN) {
                return Err(gpus_bad(format!(
                    "GPU {}'s model is 1 to {MAX_GPU_MODEL_LEN} characters without control \
                     characters",
                    g.index
                )));
            }
            let gen_ok = |v: Option<u32>| v.is_none_or(|v| (1..=MAX_PCIE_GEN).contains(&v));
            let width_ok = |v: Option<u32>| v.is_none_or(|v| (1..=MAX_PCIE_WIDTH).contains(&v));
            if !gen_ok(g.pcie_gen)
                || !gen_ok(g.pcie_max_gen)
                || !width_ok(g.pcie_width)
                || !width_ok(g.pcie_max_width)
            {
                return Err(gpus_bad(format!(
                    "GPU {}'s PCIe generation is 1 to {MAX_PCIE_GEN} and width 1 to \
                     {MAX_PCIE_WIDTH} lanes",
                    g.index
                )));
            }
            gpus.push(GpuFacts {
                index: g.index,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                memory_mib: g.memory_mib,
                pcie_gen: g.pcie_gen,
                pcie_width: g.pcie_width,
                pcie_max_gen: g.pcie_max_gen,
                pcie_max_width: g.pcie_max_width,
                mig_mode: g.mig_mode,
            });
        }
        for (field, v) in [
            ("driver_version", &self.driver_version),
            ("cuda_version", &self.cuda_version),
        ] {
            if v.len() > MAX_VERSION_LEN || !v.bytes().all(|b| (b' '..=b'~').contains(&b)) {
                return Err(ApiError::invalid(
                    field,
                    "invalid_attestation",
                    format!("{field} is at most {MAX_VERSION_LEN} printable ASCII characters"),
                ));
            }
        }
        let nics_bad = |m: String| ApiError::invalid("nics", "invalid_attestation", m);
        if self.nics.len() > MAX_NICS {
            return Err(nics_bad(format!(
                "an attestation lists at most {MAX_NICS} NICs"
            )));
        }
        let mut nics = Vec::with_capacity(self.nics.len());
        for n in &self.nics {
            if !graphic_ascii(&n.name, MAX_NIC_NAME_LEN) || n.gbps > MAX_NIC_GBPS {
                return Err(nics_bad(format!(
                    "a NIC's name is 1 to {MAX_NIC_NAME_LEN} printable ASCII characters without \
                     spaces and its speed at most {MAX_NIC_GBPS} Gb/s"
                )));
            }
            nics.push(Nic {
                name: n.name.clone(),
                gbps: n.gbps,
            });
        }
        if self
            .cpu_cores
            .is_some_and(|c| !(1..=MAX_CPU_CORES).contains(&c))
        {
            return Err(ApiError::invalid(
                "cpu_cores",
                "invalid_attestation",
                format!("cpu_cores is 1 to {MAX_CPU_CORES} logical cores"),
            ));
        }
        if self
            .ram_mib
            .is_some_and(|r| !(1..=MAX_RAM_MIB).contains(&r))
        {
            return Err(ApiError::invalid(
                "ram_mib",
                "invalid_attestation",
                format!("ram_mib is 1 to {MAX_RAM_MIB} MiB"),
            ));
        }
        if self.disk_gb.is_some_and(|d| d > MAX_DISK_GB) {
            return Err(ApiError::invalid(
                "disk_gb",
                "invalid_attestation",
                format!("disk_gb is at most {MAX_DISK_GB} GB"),
            ));
        }
        Ok(HostFacts {
            driver_version: self.driver_version.clone(),
            cuda_version: self.cuda_version.clone(),
            gpus,
            nics,
            cpu_cores: self.cpu_cores,
            ram_mib: self.ram_mib,
            disk_gb: self.disk_gb,
        })
    }
}

impl NodeSpecOf for NodeRequest {
    fn to_spec(&self, catalog: &Catalog) -> Result<NodeSpec, ApiError> {
        Ok(NodeSpec {
            name: self.name.clone(),
            sku: sku(catalog, &self.sku)?,
            gpus: self.gpus,
            region: self.region.clone(),
            jurisdiction: jurisdiction("jurisdiction", &self.jurisdiction)?,
            interconnect: interconnect(self.interconnect),
            nvlink: self.nvlink,
            fabric: {
                let f = NodeFabric {
                    domain: self
                        .fabric_domain
                        .as_deref()
                        .map(fabric_domain)
                        .transpose()?,
                    nic_gbps: self.nic_gbps.map(nic_gbps).transpose()?,
                };
                (!f.is_empty()).then_some(f)
            },
        })
    }
}

impl NodeUpdateOf for NodeUpdateRequest {
    fn to_update(&self, current: Option<&NodeFabric>) -> Result<NodeUpdate, ApiError> {
        let fabric = if self.fabric_domain.is_none() && self.nic_gbps.is_none() {
            None
        } else {
            let mut f = current.cloned().unwrap_or_default();
            match self.fabric_domain.as_deref() {
                None => {}
                Some("") => f.domain = None,
                Some(d) => f.domain = Some(fabric_domain(d)?),
            }
            if let Some(n) = self.nic_gbps {
                f.nic_gbps = Some(nic_gbps(n)?);
            }
            Some(f)
        };
        Ok(NodeUpdate {
            fabric,
            region: self.region.clone(),
            jurisdiction: self
                .jurisdiction
                .as_deref()
                .map(|j| jurisdiction("jurisdiction", j))
                .transpose()?,
            interconnect: self.interconnect.map(interconnect),
            nvlink: self.nvlink,
            draining: self.draining,
        })
    }
}

impl OfferTermsOf for OfferRequest {
    fn to_terms(&self, now_ms: i64) -> Result<OfferTerms, ApiError> {
        Ok(OfferTerms {
            gpus: self.gpus,
            spot_price: price("spot_price", self.spot_price)?,
            preemptible_price: self
                .preemptible_price
                .map(|p| price("preemptible_price", p))
                .transpose()?,
            min_lease_s: self.min_lease_s.unwrap_or(DEFAULT_MIN_LEASE_S),
            max_lease_s: self.max_lease_s.unwrap_or(DEFAULT_MAX_LEASE_S),
            available_until_ms: self
                .available_until_ms
                .unwrap_or(now_ms.saturating_add(DEFAULT_AVAILABLE_FOR_MS)),
            notice_s: self.notice_s.unwrap_or(DEFAULT_NOTICE_S),
            provision_s: self
                .provision_s
                .unwrap_or(exchange::limits::DEFAULT_PROVISION_SECONDS),
        })
    }
}

/// Conversion of an offer's wire SLA terms into the ledger's (issue 26, docs/settlement.md
/// "SLA credit").
pub trait SlaTermsOf {
    /// The ledger's terms, checked by [`SlaTerms::validate`].
    ///
    /// # Errors
    /// 422 `invalid_sla` naming the field (`sla.availability`, `sla.credit_multiple`,
    /// `sla.outage_cap_s`, `sla.credit_cap`, `sla.non_delivery_credit`).
    fn to_sla(&self) -> Result<SlaTerms, ApiError>;
}

/// 422 `invalid_sla` naming `field`.
fn invalid_sla(field: &'static str, message: impl Into<String>) -> ApiError {
    ApiError {
        status: actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
        ..ApiError::invalid(field, "invalid_sla", message)
    }
}

/// An availability promise in basis points from its wire text, percent 90.00..=99.99 with at
/// most 2 decimals (`gpux_wire::SLA_AVAILABILITY_PATTERN`): `"99.9"` → 9990.
pub fn availability_bp(s: &str) -> Option<u16> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let ok = whole.len() == 2
        && whole.starts_with('9')
        && digits(whole)
        && digits(frac)
        && frac.len() <= 2
        && (s.contains('.') != frac.is_empty());
    if !ok {
        return None;
    }
    let w: u16 = whole.parse().ok()?;
    let f: u16 = format!("{frac:0<2}").parse().ok()?;
    Some(w * 100 + f)
}

impl SlaTermsOf for SlaTermsDto {
    fn to_sla(&self) -> Result<SlaTerms, ApiError> {
        let availability_bp = availability_bp(&self.availability).ok_or_else(|| {
            invalid_sla(
                "sla.availability",
                format!(
                    "sla.availability must be a percentage 90.00..=99.99 with at most 2 \
                     decimals, e.g. \"99.9\"; got {:?}",
                    self.availability
                ),
            )
        })?;
        let terms = SlaTerms {
            availability_bp,
            multiple: self.credit_multiple,
            outage_cap_s: self.outage_cap_s,
            cap: match self.credit_cap {
                CreditCapDto::ChargeSoFar => CreditCap::ChargeSoFar,
                CreditCapDto::MonthlyFeePct(p) => CreditCap::MonthlyFeePct(p),
            },
            non_delivery_credit: self.non_delivery_credit,
        };
        terms.validate().map_err(|e| {
            let field = match e.field() {
                "availability_bp" => "sla.availability",
                "multiple" => "sla.credit_multiple",
                "outage_cap_s" => "sla.outage_cap_s",
                "cap" => "sla.credit_cap",
                _ => "sla.non_delivery_credit",
            };
            let message = e
                .to_string()
                .replace("sla.availability_bp", "sla.availability (basis points)")
                .replace("sla.multiple", "sla.credit_multiple")
                .replace("sla.cap ", "sla.credit_cap.monthly_fee_pct ");
            invalid_sla(field, message)
        })?;
        Ok(terms)
    }
}

/// The wire view of SLA terms (issue 26): the shape they were posted in.
pub fn sla_view(t: &SlaTerms) -> SlaTermsView {
    SlaTermsView {
        availability: rust_decimal::Decimal::new(i64::from(t.availability_bp), 2).to_string(),
        credit_multiple: t.multiple,
        outage_cap_s: t.outage_cap_s,
        credit_cap: match t.cap {
            CreditCap::ChargeSoFar => CreditCapDto::ChargeSoFar,
            CreditCap::MonthlyFeePct(p) => CreditCapDto::MonthlyFeePct(p),
        },
        non_delivery_credit: t.non_delivery_credit,
        availability_ratio: crate::wire_conv::bp_str(u32::from(t.availability_bp)),
    }
}

/// A 422 of a bid's rule (the body has the documented shape): `code` naming `field`.
fn bid_rule(field: &'static str, code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError {
        status: actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
        ..ApiError::invalid(field, code, message)
    }
}

/// A bid's placement, GPUs and `min_gpus` checked together (issue 27, docs/market-rules.md
/// §13.2 and §13.5).
///
/// # Errors
/// 422 `invalid_gang` (`gang`: a gang without its shape, a shape on another placement, more
/// than 1024 GPUs; `gpus`: not nodes × GPUs per node), `invalid_gpus` (`gpus` missing on
/// another placement; `min_gpus` on another placement than spread, on a GTC bid, or above
/// `gpus`).
pub fn bid_shape(r: &BidRequest) -> Result<(Placement, u32, Option<u32>), ApiError> {
    use gpux_wire::{GangScopeDto, MemberLossDto};
    let max = exchange::limits::MAX_BID_GPUS;
    let (placement, gpus) = match (r.placement, &r.gang) {
        (PlacementDto::Gang, None) => {
            return Err(bid_rule(
                "gang",
                "invalid_gang",
                "placement gang needs its shape: \"gang\": {\"nodes\": N, \"gpus_per_node\": G}",
            ));
        }
        (PlacementDto::Gang, Some(g)) => {
            let total = u64::from(g.nodes) * u64::from(g.gpus_per_node);
            if g.nodes == 0
                || g.gpus_per_node == 0
                || g.gpus_per_node > exchange::limits::MAX_NODE_GPUS
                || total > u64::from(max)
            {
                return Err(bid_rule(
                    "gang",
                    "invalid_gang",
                    format!(
                        "a gang is 1 or more nodes of 1 to {} GPUs each, at most {max} GPUs in \
                         all; got {} × {} = {total}",
                        exchange::limits::MAX_NODE_GPUS,
                        g.nodes,
                        g.gpus_per_node
                    ),
                ));
            }
            let total = total as u32;
            if let Some(n) = r.gpus
                && n != total
            {
                return Err(bid_rule(
                    "gpus",
                    "invalid_gang",
                    format!(
                        "a gang's gpus is its nodes × gpus_per_node = {total}, not {n} (omit \
                         gpus for a gang)"
                    ),
                ));
            }
            let spec = GangSpec {
                nodes: g.nodes,
                gpus_per_node: g.gpus_per_node,
                scope: match g.scope {
                    GangScopeDto::Domain => GangScope::Domain,
                    GangScopeDto::Region => GangScope::Region,
                },
                on_member_loss: match g.on_member_loss {
                    MemberLossDto::Keep => MemberLoss::Keep,
                    MemberLossDto::EndAll => MemberLoss::EndAll,
                },
            };
            (Placement::Gang(spec), total)
        }
        (_, Some(_)) => {
            return Err(bid_rule(
                "gang",
                "invalid_gang",
                "`gang` is the shape of a gang bid: set \"placement\": \"gang\" with it, or \
                 leave it out",
            ));
        }
        (p, None) => {
            let Some(n) = r.gpus else {
                return Err(bid_rule(
                    "gpus",
                    "invalid_gpus",
                    "gpus is required (only a gang bid may omit it)",
                ));
            };
            (
                match p {
                    PlacementDto::SingleNode => Placement::SingleNode,
                    _ => Placement::Spread,
                },
                n,
            )
        }
    };
    if let Some(m) = r.min_gpus {
        let why = if placement != Placement::Spread {
            Some("min_gpus is for spread bids only (a gang is all-or-none already)".to_string())
        } else if r.time_in_force != TifDto::Ioc {
            Some("min_gpus is for IOC bids only (a GTC bid rests for what did not fill)".into())
        } else if m == 0 || m > gpus {
            Some(format!("min_gpus is 1 to the bid's gpus ({gpus}), not {m}"))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(bid_rule("min_gpus", "invalid_gpus", why));
        }
    }
    Ok((placement, gpus, r.min_gpus))
}

impl BidSpecOf for BidRequest {
    fn to_spec(&self, catalog: &Catalog) -> Result<BidSpec, ApiError> {
        let tif = match (self.time_in_force, self.expires_at_ms) {
            (TifDto::Ioc, Some(_)) => {
                // 422 like an expiry in the past: the body has the documented shape, the
                // combination is a rule (docs/api.md §1.4).
                return Err(ApiError {
                    status: actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
                    ..ApiError::invalid(
                        "expires_at_ms",
                        "invalid_expiry",
                        "an IOC bid cannot carry expires_at_ms",
                    )
                });
            }
            (TifDto::Ioc, None) => TimeInForce::Ioc,
            (TifDto::Gtc, e) => TimeInForce::Gtc { expires_at_ms: e },
        };
        let sku = sku(catalog, &self.sku)?;
        let limit = price("limit_price", self.limit_price)?;
        let (placement, gpus, min_gpus) = bid_shape(self)?;
        Ok(BidSpec {
            client_order_id: self.client_order_id.clone(),
            sku,
            gpus,
            limit,
            kind: kind(self.kind),
            placement,
            constraints: Constraints {
                regions: self.constraints.regions.clone(),
                jurisdictions: self
                    .constraints
                    .jurisdictions
                    .iter()
                    .map(|j| jurisdiction("constraints.jurisdictions", j))
                    .collect::<Result<_, _>>()?,
                min_interconnect: self.constraints.min_interconnect.map(interconnect),
                nvlink: self.constraints.nvlink,
            },
            duration_s: self.duration_s,
            tif,
            min_gpus,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sla_terms_convert_and_name_the_field_out_of_bounds() {
        for (s, bp) in [
            ("99.9", Some(9990)),
            ("90", Some(9000)),
            ("99.99", Some(9999)),
        ] {
            assert_eq!(availability_bp(s), bp, "{s}");
        }
        for s in [
            "100", "89.99", "99.999", "99.", ".9", "9a.1", "+99.9", "", "099.9",
        ] {
            assert_eq!(availability_bp(s), None, "{s}");
        }
        let ok = r#"{"availability":"99.9","credit_multiple":20,"outage_cap_s":600,
            "credit_cap":{"monthly_fee_pct":50},"non_delivery_credit":true}"#;
        let d: SlaTermsDto = serde_json::from_str(ok).unwrap();
        let t = d.to_sla().unwrap();
        assert_eq!(
            (t.availability_bp, t.multiple, t.outage_cap_s, t.cap),
            (9990, 20, 600, CreditCap::MonthlyFeePct(50))
        );
        let v = serde_json::to_value(sla_view(&t)).unwrap();
        assert_eq!(v["availability"], "99.90");
        assert_eq!(v["credit_cap"], serde_json::json!({"monthly_fee_pct": 50}));
        let plain: SlaTermsDto = serde_json::from_str(
            r#"{"availability":"99","credit_multiple":10,"outage_cap_s":3600,
                "credit_cap":"charge_so_far"}"#,
        )
        .unwrap();
        assert_eq!(plain.to_sla().unwrap(), SlaTerms::default());
        for (bad, field) in [
            (ok.replace("20,", "51,"), "sla.credit_multiple"),
            (ok.replace("600", "59"), "sla.outage_cap_s"),
            (ok.replace(":50}", ":9}"), "sla.credit_cap"),
            (ok.replace("99.9", "100"), "sla.availability"),
            (
                ok.replace(r#"{"monthly_fee_pct":50}"#, r#""charge_so_far""#),
                "sla.non_delivery_credit",
            ),
        ] {
            let d: SlaTermsDto = serde_json::from_str(&bad).unwrap();
            let e = d.to_sla().unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.code, e.field),
                (422, "invalid_sla", Some(field))
            );
        }
        assert!(serde_json::from_str::<SlaTermsDto>(&ok.replace("true", "true,\"x\":1")).is_err());
    }

    #[test]
    fn bids_refuse_unknown_fields_and_ioc_expiry() {
        let ok = r#"{"client_order_id":"a","sku":"H100-80G","gpus":1,"limit_price":"20",
            "kind":"spot","time_in_force":"ioc"}"#;
        let b: BidRequest = serde_json::from_str(ok).unwrap();
        let spec = b.to_spec(&Catalog::builtin()).unwrap();
        assert_eq!(spec.limit.ticks(), 200_000);
        assert_eq!(spec.placement, Placement::SingleNode);
        let extra = ok.replace("\"gpus\":1", "\"gpus\":1,\"colour\":\"red\"");
        assert!(serde_json::from_str::<BidRequest>(&extra).is_err());
        let ioc_exp = ok.replace("\"ioc\"", "\"ioc\",\"expires_at_ms\":5");
        let b: BidRequest = serde_json::from_str(&ioc_exp).unwrap();
        assert_eq!(
            b.to_spec(&Catalog::builtin()).unwrap_err().code,
            "invalid_expiry"
        );
        let unknown = ok.replace("H100-80G", "Z9");
        let b: BidRequest = serde_json::from_str(&unknown).unwrap();
        let e = b.to_spec(&Catalog::builtin()).unwrap_err();
        assert_eq!(e.code, "unknown_sku");
        assert!(!e.message.contains("did you mean"), "{}", e.message);
        // Issue 25: the nearest id is suggested.
        let c = Catalog::builtin();
        for (asked, near) in [
            ("rtx4090-24g", "RTX4090-24G"),
            ("h100_80g", "H100-80G"),
            ("H100-80", "H100-80G"),
            ("H100 80G", "H100-80G"),
        ] {
            assert_eq!(nearest_sku(&c, asked), Some(near), "{asked}");
            let m = unknown_sku(&c, asked).message;
            assert!(m.contains(&format!("did you mean {near:?}")), "{m}");
        }
        assert_eq!(nearest_sku(&c, "TPU-v5"), None);
    }
}
