//! Attestation (docs/market-rules.md §12.1, issue 26): what the node agent found on the host,
//! checked against what the node registered. A mismatch holds the node (§11.8) and refuses its
//! resume until a matching attestation arrives.
//!
//! Invariant: `Index::gpu_uuids` maps each UUID of every node whose latest attestation
//! matched to that node, and nothing else (rebuilt from the nodes on restore), so a UUID is
//! attested on one node at most.

use super::Engine;
use crate::command::AttestedGpu;
use crate::event::{AttestationMismatch, Event, HoldReason, RejectReason};
use crate::ids::{AccountId, NodeId};
use crate::limits::{MAX_GPU_MODEL_LEN, MAX_GPU_UUID_LEN, MAX_NODE_GPUS};
use crate::models::{known_family, sku_for_model};
use crate::state::NodeAttestation;

use super::commands::Reject;

/// Checks an attestation's shape (bad input: refused, nothing changes): at most
/// [`MAX_NODE_GPUS`] GPUs with strictly increasing indexes below it, each UUID
/// 1..=[`MAX_GPU_UUID_LEN`] printable ASCII and unique in the report, each model
/// 1..=[`MAX_GPU_MODEL_LEN`] characters without control characters and of a known family.
pub(crate) fn check_attestation(gpus: &[AttestedGpu]) -> Result<(), Reject> {
    let bad = Err((RejectReason::InvalidGpus, "gpus"));
    if gpus.is_empty() || gpus.len() > MAX_NODE_GPUS as usize {
        return bad;
    }
    let mut last: Option<u32> = None;
    for (i, g) in gpus.iter().enumerate() {
        if g.index >= MAX_NODE_GPUS || last.is_some_and(|l| g.index <= l) {
            return bad;
        }
        last = Some(g.index);
        let uuid_ok = !g.uuid.is_empty()
            && g.uuid.len() <= MAX_GPU_UUID_LEN
            && g.uuid.bytes().all(|b| b.is_ascii_graphic());
        let model_ok = !g.model.trim().is_empty()
            && g.model.chars().count() <= MAX_GPU_MODEL_LEN
            && !g.model.chars().any(char::is_control);
        if !uuid_ok || !model_ok || gpus[..i].iter().any(|o| o.uuid == g.uuid) {
            return bad;
        }
    }
    if gpus.iter().any(|g| !known_family(&g.model)) {
        return Err((RejectReason::UnknownModel, "gpus"));
    }
    Ok(())
}

impl Engine {
    /// `AttestNode` (§12.1).
    pub(crate) fn attest_node(
        &mut self,
        account: AccountId,
        node_id: NodeId,
        gpus: &[AttestedGpu],
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        let node = self.owned_node(account, node_id)?;
        check_attestation(gpus)?;
        let sku = self
            .st
            .catalog
            .get(node.sku)
            .map(|s| s.id.clone())
            .unwrap_or_default();
        let attested = u32::try_from(gpus.len()).unwrap_or(u32::MAX);
        let mismatch = if attested != node.gpus {
            Some(AttestationMismatch::GpuCount {
                attested,
                registered: node.gpus,
            })
        } else {
            gpus.iter()
                .find_map(|g| match sku_for_model(&g.model, u64::from(g.memory_mib)) {
                    None => Some(AttestationMismatch::Memory {
                        index: g.index,
                        memory_mib: g.memory_mib,
                    }),
                    Some(s) if s != sku => Some(AttestationMismatch::Model {
                        index: g.index,
                        model: g.model.clone(),
                    }),
                    Some(_) => None,
                })
                .or_else(|| {
                    gpus.iter().find_map(|g| {
                        self.idx
                            .gpu_uuids
                            .get(&g.uuid)
                            .filter(|n| **n != node_id)
                            .map(|_| AttestationMismatch::DuplicateGpu {
                                index: g.index,
                                uuid: g.uuid.clone(),
                            })
                    })
                })
        };
        let supplier = node.supplier;
        // This node's UUIDs leave the index; a matching attestation files them again.
        if let Some(old) = self.ext.attestations.get(&node_id) {
            for u in &old.uuids {
                if self.idx.gpu_uuids.get(u) == Some(&node_id) {
                    self.idx.gpu_uuids.remove(u);
                }
            }
        }
        if mismatch.is_none() {
            for g in gpus {
                self.idx.gpu_uuids.insert(g.uuid.clone(), node_id);
            }
        }
        // §12.1–12.2: GPUs whose UUID changed between two matching attestations (a card
        // swapped): bit i = GPU i.
        let changed = match self.ext.attestations.get(&node_id) {
            // Both lists are in index order: compare position by position (a report's
            // indexes need not start at 0), marking the GPU by its index.
            Some(old) if old.mismatch.is_none() && mismatch.is_none() => gpus
                .iter()
                .enumerate()
                .filter(|(pos, g)| old.uuids.get(*pos) != Some(&g.uuid))
                .fold(0u32, |m, (_, g)| m | (1 << g.index)),
            _ => 0,
        };
        let now = self.st.now;
        self.ext.attestations.insert(
            node_id,
            NodeAttestation {
                at_ms: now,
                uuids: gpus.iter().map(|g| g.uuid.clone()).collect(),
                mismatch: mismatch.clone(),
            },
        );
        match mismatch {
            None => {
                out.push(Event::NodeAttested {
                    node: node_id,
                    gpus: attested,
                });
                if changed != 0 {
                    self.uuids_changed(node_id, changed, out);
                }
            }
            Some(m) => {
                let reason = match m {
                    AttestationMismatch::DuplicateGpu { .. } => HoldReason::DuplicateGpu,
                    _ => HoldReason::Attestation,
                };
                out.push(Event::AttestationFailed {
                    node: node_id,
                    supplier,
                    mismatch: m,
                });
                self.hold(node_id, reason, out);
            }
        }
        Ok(())
    }
}
