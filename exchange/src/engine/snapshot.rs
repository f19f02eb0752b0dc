//! Snapshots (bytes that restore an equal engine) and the state hash.
//!
//! Format: `b"GPUXSNAP"`, format version (u16 little-endian), SHA-256 of the payload (32
//! bytes), payload (postcard encoding of the canonical state). Derived indexes are not stored;
//! restore rebuilds them and checks every invariant.

use super::{Engine, State, StateExt};
use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"GPUXSNAP";
/// Snapshot format version written by this build when it holds SLA promises or floors (2,
/// §12.4); a market without them is still written as format 1, byte for byte as before, and
/// format 1 (its later state in either earlier layout) is still restored.
pub const SNAPSHOT_VERSION: u16 = 2;
/// Snapshot format written when fabric domains or gangs are held (§13, issue 27): the state,
/// [`StateExt`] in the current layout (always present), then the fabric state.
pub const SNAPSHOT_VERSION_FABRIC: u16 = 3;
const HEADER: usize = 8 + 2 + 32;

/// Why a snapshot was refused by [`Engine::restore`]. The caller's live engine is never
/// touched: restore builds a new one.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Wrong magic bytes or truncated header.
    #[error("not an engine snapshot (bad magic or truncated)")]
    BadMagic,
    /// Written by an incompatible format version.
    #[error("unsupported snapshot format version {0}")]
    Version(u16),
    /// Checksum mismatch: the bytes were damaged.
    #[error("snapshot checksum mismatch")]
    Checksum,
    /// The payload did not decode.
    #[error("snapshot payload does not decode: {0}")]
    Decode(String),
    /// The decoded state breaks an invariant.
    #[error("snapshot state is inconsistent: {0}")]
    Inconsistent(String),
}

impl Engine {
    fn encode_state(&self) -> Vec<u8> {
        // Encoding plain data into a Vec cannot fail short of running out of memory.
        let mut bytes = postcard::to_allocvec(&self.st).unwrap_or_default();
        // State added later follows, only when there is any: a market without it encodes
        // (and hashes) exactly as before it existed.
        // A market that uses no SLA promise keeps the layout from before them (format 1):
        // its snapshots and state hashes do not change with this build.
        if !self.fab.is_empty() {
            bytes.extend(postcard::to_allocvec(&self.ext).unwrap_or_default());
            bytes.extend(postcard::to_allocvec(&self.fab).unwrap_or_default());
        } else if !self.ext.is_empty() {
            if self.ext.uses_sla() {
                bytes.extend(postcard::to_allocvec(&self.ext).unwrap_or_default());
            } else {
                bytes.extend(postcard::to_allocvec(&self.ext.as_v2()).unwrap_or_default());
            }
        }
        bytes
    }

    /// The format [`Engine::snapshot`] writes: 3 when fabric domains or gangs are held, 2 when
    /// SLA promises are, else 1.
    fn format_version(&self) -> u16 {
        if !self.fab.is_empty() {
            SNAPSHOT_VERSION_FABRIC
        } else if self.ext.uses_sla() {
            SNAPSHOT_VERSION
        } else {
            1
        }
    }

    /// SHA-256 of the canonical state (config, catalog, sequence, time, nodes, offers, resting
    /// bids, live leases, client order ids, delta counters). Equal for equal command streams in
    /// any process, and across [`Engine::snapshot`]/[`Engine::restore`].
    pub fn state_hash(&self) -> [u8; 32] {
        Sha256::digest(self.encode_state()).into()
    }

    /// The state as bytes for [`Engine::restore`] (format in the module docs).
    pub fn snapshot(&self) -> Vec<u8> {
        let payload = self.encode_state();
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.format_version().to_le_bytes());
        out.extend_from_slice(&Sha256::digest(&payload));
        out.extend_from_slice(&payload);
        out
    }

    /// A new engine from snapshot bytes, with every derived index rebuilt.
    ///
    /// # Errors
    /// [`SnapshotError`] for bad magic, another format version, a checksum mismatch, an
    /// undecodable payload, or a state that breaks an invariant.
    pub fn restore(bytes: &[u8]) -> Result<Engine, SnapshotError> {
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if !matches!(version, 1 | SNAPSHOT_VERSION | SNAPSHOT_VERSION_FABRIC) {
            return Err(SnapshotError::Version(version));
        }
        let payload = &bytes[HEADER..];
        let digest: [u8; 32] = Sha256::digest(payload).into();
        if digest[..] != bytes[10..HEADER] {
            return Err(SnapshotError::Checksum);
        }
        let (st, rest): (State, &[u8]) =
            postcard::take_from_bytes(payload).map_err(|e| SnapshotError::Decode(e.to_string()))?;
        let decode = |e: postcard::Error| SnapshotError::Decode(e.to_string());
        let mut fab = super::gang::FabricExt::default();
        let ext: StateExt = if version == SNAPSHOT_VERSION_FABRIC {
            let (ext, rest): (StateExt, &[u8]) = postcard::take_from_bytes(rest).map_err(decode)?;
            fab = postcard::from_bytes(rest).map_err(decode)?;
            ext
        } else if rest.is_empty() {
            StateExt::default()
        } else if version == SNAPSHOT_VERSION {
            postcard::from_bytes(rest).map_err(decode)?
        } else {
            // Format 1: the layout before offer promises, or (the first issue-26 build)
            // attestations only; each must take every byte.
            match postcard::take_from_bytes::<super::StateExtV2>(rest) {
                Ok((v2, [])) => v2.into(),
                other => match postcard::take_from_bytes::<super::StateExtV1>(rest) {
                    Ok((v1, [])) => StateExt {
                        attestations: v1.attestations,
                        ..StateExt::default()
                    },
                    _ => {
                        return Err(match other {
                            Err(e) => decode(e),
                            Ok(_) => SnapshotError::Decode("trailing bytes".into()),
                        });
                    }
                },
            }
        };
        let mut engine = Engine::new(st.config.clone(), st.catalog.clone());
        engine.st = st;
        engine.ext = ext;
        engine.fab = fab;
        engine
            .check_structure()
            .map_err(SnapshotError::Inconsistent)?;
        engine.rebuild_index();
        engine
            .check_invariants()
            .map_err(SnapshotError::Inconsistent)?;
        Ok(engine)
    }

    /// Cross-references that indexing relies on: ids in range, records where they claim to be.
    pub(crate) fn check_structure(&self) -> Result<(), String> {
        let skus = self.st.catalog.len();
        let regions = self.st.regions.len();
        if self.st.market_seq.len() != skus {
            return Err("market sequence table does not match the catalog".into());
        }
        for (id, node) in &self.st.nodes {
            if *id != node.id
                || usize::from(node.sku.0) >= skus
                || usize::from(node.region.0) >= regions
            {
                return Err(format!("node {id} is malformed"));
            }
            if node.gpus == 0 || node.gpus > crate::limits::MAX_NODE_GPUS {
                return Err(format!("node {id} has {} GPUs", node.gpus));
            }
            if let Some(o) = node.offer
                && self.st.offers.get(&o).is_none_or(|offer| offer.node != *id)
            {
                return Err(format!(
                    "node {id} points at offer {o} which is not its own"
                ));
            }
        }
        for (id, offer) in &self.st.offers {
            if *id != offer.id
                || self
                    .st
                    .nodes
                    .get(&offer.node)
                    .is_none_or(|n| n.offer != Some(*id) || n.supplier != offer.supplier)
            {
                return Err(format!("offer {id} is malformed"));
            }
        }
        if let Some(o) = self
            .ext
            .offer_sla
            .keys()
            .find(|o| !self.st.offers.contains_key(o))
        {
            return Err(format!("offer {o} has an SLA promise but is not live"));
        }
        for (id, bid) in &self.st.bids {
            if *id != bid.id || usize::from(bid.sku.0) >= skus {
                return Err(format!("bid {id} is malformed"));
            }
        }
        for (id, lease) in &self.st.leases {
            if *id != lease.id
                || usize::from(lease.sku.0) >= skus
                || self
                    .st
                    .nodes
                    .get(&lease.node)
                    .is_none_or(|n| !n.leases.contains(id))
            {
                return Err(format!("lease {id} is malformed"));
            }
        }
        for node in self.st.nodes.values() {
            for l in &node.leases {
                if !self.st.leases.contains_key(l) {
                    return Err(format!("node {} lists unknown lease {l}", node.id));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{
        BidSpec, Command, Constraints, Interconnect, Jurisdiction, LeaseKind, Meta, NodeSpec,
        OfferTerms, Placement, SlaFloor, SlaPromise, TimeInForce, TrustConstraints,
    };
    use crate::{AccountId, Catalog, EngineConfig, Price};

    /// A market with a resting trust bid (state in `StateExt`), then an offer with an SLA
    /// promise when `promise`.
    fn market(promise: bool) -> Engine {
        let mut e = Engine::new(EngineConfig::default(), Catalog::builtin());
        let sku = Catalog::builtin().lookup("H100-80G").unwrap();
        let price = |t| Price::from_ticks(t).unwrap();
        let mut cmds = vec![
            Command::RegisterNode {
                account: AccountId(1),
                spec: NodeSpec {
                    name: "n1".into(),
                    sku,
                    gpus: 2,
                    region: "cn-east-2".into(),
                    jurisdiction: Jurisdiction(*b"CN"),
                    interconnect: Interconnect::Roce,
                    nvlink: false,
                    fabric: None,
                },
            },
            Command::PlaceTrustBid {
                account: AccountId(2),
                bid: BidSpec {
                    client_order_id: "b1".into(),
                    sku,
                    gpus: 1,
                    limit: price(2_000),
                    kind: LeaseKind::Spot,
                    placement: Placement::SingleNode,
                    constraints: Constraints::default(),
                    duration_s: None,
                    tif: TimeInForce::Gtc {
                        expires_at_ms: None,
                    },
                    min_gpus: None,
                },
                trust: TrustConstraints {
                    verified: !promise,
                    min_reliability_bp: None,
                    min_sla: promise.then_some(SlaFloor {
                        availability_bp: 9_999,
                        credit_multiple: 50,
                    }),
                },
            },
        ];
        if promise {
            cmds.push(Command::PostOfferSla {
                account: AccountId(1),
                node: crate::NodeId(crate::ids::derive_id(1, 0)),
                terms: OfferTerms {
                    gpus: 2,
                    spot_price: price(1_000),
                    preemptible_price: None,
                    min_lease_s: 0,
                    max_lease_s: 86_400,
                    available_until_ms: 86_400_000,
                    notice_s: 0,
                    provision_s: 180,
                },
                // below the bid's floor: the offer and the bid both stay
                sla: SlaPromise {
                    availability_bp: 9_990,
                    credit_multiple: 10,
                },
            });
        }
        for (i, c) in cmds.iter().enumerate() {
            let out = e.apply(
                c,
                Meta {
                    seq: i as u64 + 1,
                    timestamp_ms: 1_000 * i as i64,
                },
            );
            assert!(out.rejection().is_none(), "{c:?}: {out:?}");
        }
        assert_eq!(e.ext.offer_sla.len(), usize::from(promise));
        assert_eq!(e.bids().count(), 1);
        e
    }

    /// A format-1 snapshot written by the build before offer promises (its `StateExt` layout,
    /// trust without `min_sla`) restores to the same state.
    #[test]
    fn restores_format_1_from_before_offer_promises() {
        let e = market(false);
        assert!(!e.ext.bid_trust.is_empty());
        let old = super::super::StateExtV2 {
            attestations: e.ext.attestations.clone(),
            verify: e.ext.verify,
            verifications: e.ext.verifications.clone(),
            bid_trust: e
                .ext
                .bid_trust
                .iter()
                .map(|(k, t)| {
                    let v = super::super::TrustV2 {
                        verified: t.verified,
                        min_reliability_bp: t.min_reliability_bp,
                    };
                    (*k, v)
                })
                .collect(),
            lease_trust: Default::default(),
            reliability: e.ext.reliability.clone(),
            score_day: e.ext.score_day,
            day_scores: e.ext.day_scores.clone(),
        };
        let mut payload = postcard::to_allocvec(&e.st).unwrap();
        payload.extend(postcard::to_allocvec(&old).unwrap());
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&1u16.to_le_bytes());
        bytes.extend_from_slice(&Sha256::digest(&payload));
        bytes.extend_from_slice(&payload);
        let back = Engine::restore(&bytes).expect("format 1 restores");
        assert_eq!(back.ext, e.ext);
        // Without promises the state encodes (and hashes) exactly as that build wrote it.
        let old_hash: [u8; 32] = Sha256::digest(&payload).into();
        assert_eq!(e.state_hash(), old_hash);
        assert_eq!(back.state_hash(), old_hash);
        assert_eq!(e.snapshot(), bytes);
        // The current format round-trips offer promises and SLA floors.
        let e = market(true);
        let snap = e.snapshot();
        assert_eq!(u16::from_le_bytes([snap[8], snap[9]]), SNAPSHOT_VERSION);
        let back = Engine::restore(&snap).expect("format 2 restores");
        assert_eq!(back.ext, e.ext);
        assert_eq!(back.state_hash(), e.state_hash());
    }

    /// The format-1 bytes of `e` as the build before offer promises wrote them: the state,
    /// then its `StateExt` layout (trust without `min_sla`), nothing after.
    fn format_1_bytes(e: &Engine) -> Vec<u8> {
        let old = super::super::StateExtV2 {
            attestations: e.ext.attestations.clone(),
            verify: e.ext.verify,
            verifications: e.ext.verifications.clone(),
            bid_trust: e
                .ext
                .bid_trust
                .iter()
                .map(|(k, t)| {
                    let v = super::super::TrustV2 {
                        verified: t.verified,
                        min_reliability_bp: t.min_reliability_bp,
                    };
                    (*k, v)
                })
                .collect(),
            lease_trust: Default::default(),
            reliability: e.ext.reliability.clone(),
            score_day: e.ext.score_day,
            day_scores: e.ext.day_scores.clone(),
        };
        let mut payload = postcard::to_allocvec(&e.st).unwrap();
        payload.extend(postcard::to_allocvec(&old).unwrap());
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&1u16.to_le_bytes());
        bytes.extend_from_slice(&Sha256::digest(&payload));
        bytes.extend_from_slice(&payload);
        bytes
    }

    fn apply_all(e: &mut Engine, first_seq: u64, cmds: &[Command]) {
        for (i, c) in cmds.iter().enumerate() {
            let seq = first_seq + i as u64;
            let out = e.apply(
                c,
                Meta {
                    seq,
                    timestamp_ms: 1_000 * seq as i64,
                },
            );
            assert!(out.rejection().is_none(), "{c:?}: {out:?}");
        }
    }

    /// §13 (issue 27): a market holding a fabric domain and a live gang snapshots as format 3
    /// and restores to an equal state (hash, fabric records, gangs) that goes on alike; a
    /// market without them (§13 commands that leave nothing: a gang that could not fill, an
    /// empty fabric record, a released bid) still writes format 1, byte for byte as before.
    #[test]
    fn fabric_and_gangs_write_format_3() {
        use crate::command::{GangScope, GangSpec, MemberLoss, NodeFabric};
        let sku = Catalog::builtin().lookup("H100-80G").unwrap();
        let price = |t| Price::from_ticks(t).unwrap();
        let node = |name: &str, fabric: Option<NodeFabric>| Command::RegisterNode {
            account: AccountId(1),
            spec: NodeSpec {
                name: name.into(),
                sku,
                gpus: 2,
                region: "cn-east-2".into(),
                jurisdiction: Jurisdiction(*b"CN"),
                interconnect: Interconnect::Roce,
                nvlink: false,
                fabric,
            },
        };
        let offer = |seq: u64| Command::PostOffer {
            account: AccountId(1),
            node: crate::NodeId(crate::ids::derive_id(seq, 0)),
            terms: OfferTerms {
                gpus: 2,
                spot_price: price(1_000),
                preemptible_price: None,
                min_lease_s: 0,
                max_lease_s: 86_400,
                available_until_ms: 86_400_000,
                notice_s: 0,
                provision_s: 180,
            },
        };
        let gang = |coid: &str, nodes: u32| Command::PlaceBid {
            account: AccountId(2),
            bid: BidSpec {
                client_order_id: coid.into(),
                sku,
                gpus: nodes * 2,
                limit: price(2_000),
                kind: LeaseKind::Spot,
                placement: Placement::Gang(GangSpec {
                    nodes,
                    gpus_per_node: 2,
                    scope: GangScope::Region,
                    on_member_loss: MemberLoss::Keep,
                }),
                constraints: Constraints::default(),
                duration_s: None,
                tif: TimeInForce::Ioc,
                min_gpus: None,
            },
        };
        // Without §13 state: format 1, as before.
        let mut e = market(false);
        apply_all(
            &mut e,
            3,
            &[
                node("n2", Some(NodeFabric::default())),
                offer(3),
                gang("g1", 2),
                gang("g2", 1),
                Command::ReleaseBid {
                    account: AccountId(2),
                    bid: crate::BidId(crate::ids::derive_id(6, 0)),
                },
            ],
        );
        assert!(e.fab.is_empty());
        let snap = e.snapshot();
        assert_eq!(u16::from_le_bytes([snap[8], snap[9]]), 1);
        assert_eq!(snap, format_1_bytes(&e));
        // A fabric domain and a live gang: format 3, restored alike.
        let mut e = Engine::new(EngineConfig::default(), Catalog::builtin());
        let ib = || {
            Some(NodeFabric {
                domain: Some("ib-a".into()),
                nic_gbps: Some(400),
            })
        };
        apply_all(
            &mut e,
            1,
            &[node("n1", ib()), node("n2", ib()), offer(1), offer(2)],
        );
        let snap = e.snapshot();
        assert_eq!(
            u16::from_le_bytes([snap[8], snap[9]]),
            SNAPSHOT_VERSION_FABRIC
        );
        let back = Engine::restore(&snap).expect("format 3 restores");
        assert_eq!(back.fab, e.fab);
        assert_eq!(back.state_hash(), e.state_hash());
        apply_all(&mut e, 5, &[gang("g1", 2)]);
        let bid = crate::BidId(crate::ids::derive_id(5, 0));
        assert!(e.gang(bid).is_some_and(|g| g.whole_at_ms.is_some()));
        let snap = e.snapshot();
        assert_eq!(
            u16::from_le_bytes([snap[8], snap[9]]),
            SNAPSHOT_VERSION_FABRIC
        );
        let mut back = Engine::restore(&snap).expect("format 3 restores");
        assert_eq!(back.fab, e.fab);
        assert_eq!(back.gang(bid), e.gang(bid));
        assert_eq!(back.state_hash(), e.state_hash());
        back.check_invariants().expect("restored invariants");
        // ... and goes on alike: a member lost, the gang degraded.
        let member = e
            .gang(bid)
            .and_then(|g| g.members[0].lease)
            .expect("member");
        let lost = Command::ReportLost {
            account: AccountId(1),
            lease: member,
        };
        let meta = Meta {
            seq: 6,
            timestamp_ms: 6_000,
        };
        let (a, b) = (e.apply(&lost, meta), back.apply(&lost, meta));
        assert_eq!(a, b);
        assert!(
            a.events
                .iter()
                .any(|ev| matches!(ev, crate::Event::GangDegraded { .. })),
            "{a:?}"
        );
        assert_eq!(back.state_hash(), e.state_hash());
    }
}
