//! The audit trail (issue 17, docs/settlement.md "Audit trail"): who did what to money and
//! access, when, and under which request id.
//!
//! Every money-moving or access-changing action the API takes — deposit, payout, adjustment,
//! period close, account creation, API key or node key issued or revoked — reaches the journal
//! wrapped in [`crate::market::Op::Audited`] with its [`Actor`]: the account and key that
//! asked, and the request id the answer carried (`X-Request-Id`). Applying it records one
//! [`AuditEntry`], whether the market applied the action or refused it, so the trail is part
//! of the journaled state: replay rebuilds it exactly, a snapshot holds it, the state hash
//! covers it, and it is never edited (entries are only appended; ids are gapless from 1).
//!
//! Invariants: entry ids are 1, 2, 3… in journal order; `at_ms` never decreases along the
//! trail (operations apply in non-decreasing time), so a time range is a binary search.
//! Actions the market takes by itself (ticks, fills, accruals) and actions from the server's
//! own start-up (the demo market, `--admin-key`) carry no actor and are not in the trail; the
//! ledger's transfers show them.
//!
//! This module imports nothing from `api`, `server` or `feed` (STYLE anti-model 1).

use serde::{Deserialize, Serialize};

/// Longest request id kept, bytes (a client's `X-Request-Id` beyond it is replaced).
pub const MAX_REQUEST_ID_BYTES: usize = 64;

/// Who asked for an audited action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// The account whose key signed the request.
    pub account: u64,
    /// The id of the key used (`crate::accounts::key_id`).
    pub key_id: String,
    /// The request id the answer carried (`X-Request-Id`), at most [`MAX_REQUEST_ID_BYTES`].
    pub request_id: String,
}

/// What became of an audited action: applied, replayed (no money moved again) or refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum AuditOutcome {
    /// The market applied it.
    Applied,
    /// A repeat of an idempotency key the ledger had seen (asked again by another account,
    /// or after the API's own replay window): nothing moved again.
    Replayed,
    /// The market refused it, with the refusal's machine-readable code.
    Refused {
        /// E.g. `ledger_rejected`, `period_closed`.
        code: String,
    },
}

/// One line of the trail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// 1, 2, 3… in journal order, without gaps.
    pub id: u64,
    /// When the action was applied, ms since epoch.
    pub at_ms: i64,
    /// Who asked.
    pub actor: Actor,
    /// The operation's snake_case name (`deposit`, `payout`, `adjustment`, `close_period`,
    /// `create_account`, `add_api_key`, `revoke_api_key`, `add_node_key`).
    pub action: String,
    /// The account acted on, if one (the buyer of a deposit, the key's account).
    pub subject: Option<u64>,
    /// What was asked, as `field=value` pairs (amounts in CNY, keys by idempotency key; never
    /// a secret: key hashes are not shown).
    pub detail: String,
    /// Applied or refused.
    pub outcome: AuditOutcome,
}

/// The trail: entries in journal order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditTrail {
    entries: Vec<AuditEntry>,
}

impl AuditTrail {
    /// Whether nothing was recorded (the trail is left out of snapshots then, so markets
    /// without audited actions keep the bytes and state hash they had before issue 17).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries recorded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Appends an entry with the next id and returns that id.
    pub fn record(
        &mut self,
        at_ms: i64,
        actor: &Actor,
        action: &str,
        subject: Option<u64>,
        detail: String,
        outcome: AuditOutcome,
    ) -> u64 {
        let id = self.entries.len() as u64 + 1;
        let at_ms = self.entries.last().map_or(at_ms, |e| e.at_ms.max(at_ms));
        self.entries.push(AuditEntry {
            id,
            at_ms,
            actor: actor.clone(),
            action: action.to_string(),
            subject,
            detail,
            outcome,
        });
        id
    }

    /// The entries applied in [`from_ms`, `to_ms`) (ms since epoch), oldest first.
    pub fn between(&self, from_ms: i64, to_ms: i64) -> &[AuditEntry] {
        let start = self.entries.partition_point(|e| e.at_ms < from_ms);
        let end = self.entries.partition_point(|e| e.at_ms < to_ms).max(start);
        &self.entries[start..end]
    }

    /// Checks the invariants: ids 1, 2, 3… and times that never decrease.
    ///
    /// # Errors
    /// The first entry that breaks one (a bug, never bad input).
    pub fn check(&self) -> Result<(), String> {
        for (i, e) in self.entries.iter().enumerate() {
            if e.id != i as u64 + 1 {
                return Err(format!("audit entry {} has id {}", i + 1, e.id));
            }
            if i > 0 && e.at_ms < self.entries[i - 1].at_ms {
                return Err(format!("audit entry {} goes back in time", e.id));
            }
        }
        Ok(())
    }
}

/// A request id as the trail keeps it: a client's `X-Request-Id` of 1..=[`MAX_REQUEST_ID_BYTES`]
/// visible ASCII characters, else `None` (the server then makes its own).
pub fn valid_request_id(s: &str) -> Option<&str> {
    (!s.is_empty() && s.len() <= MAX_REQUEST_ID_BYTES && s.bytes().all(|b| b.is_ascii_graphic()))
        .then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor() -> Actor {
        Actor {
            account: 3,
            key_id: "k1".into(),
            request_id: "r-1".into(),
        }
    }

    #[test]
    fn ids_are_gapless_and_a_range_is_half_open() {
        let mut t = AuditTrail::default();
        assert!(t.is_empty());
        assert_eq!(
            t.record(
                10,
                &actor(),
                "deposit",
                Some(2),
                "amount=5.00".into(),
                AuditOutcome::Applied
            ),
            1
        );
        let refused = AuditOutcome::Refused {
            code: "ledger_rejected".into(),
        };
        assert_eq!(
            t.record(20, &actor(), "payout", Some(1), String::new(), refused),
            2
        );
        assert_eq!(
            t.record(
                20,
                &actor(),
                "close_period",
                None,
                String::new(),
                AuditOutcome::Applied
            ),
            3
        );
        assert_eq!(t.len(), 3);
        let ids = |s: &[AuditEntry]| s.iter().map(|e| e.id).collect::<Vec<_>>();
        assert_eq!(ids(t.between(0, 20)), [1]);
        assert_eq!(ids(t.between(20, 21)), [2, 3]);
        assert_eq!(ids(t.between(11, 20)), Vec::<u64>::new());
        assert_eq!(ids(t.between(30, 10)), Vec::<u64>::new());
        assert_eq!(t.check(), Ok(()));
    }

    #[test]
    fn a_time_earlier_than_the_last_entry_is_kept_in_order() {
        let mut t = AuditTrail::default();
        t.record(
            50,
            &actor(),
            "deposit",
            None,
            String::new(),
            AuditOutcome::Applied,
        );
        t.record(
            40,
            &actor(),
            "deposit",
            None,
            String::new(),
            AuditOutcome::Applied,
        );
        assert_eq!(t.between(50, 51).len(), 2);
        assert_eq!(t.check(), Ok(()));
    }

    #[test]
    fn request_ids_are_short_visible_ascii() {
        assert_eq!(valid_request_id("abc-1"), Some("abc-1"));
        assert_eq!(valid_request_id(""), None);
        assert_eq!(valid_request_id("a b"), None);
        assert_eq!(valid_request_id("é"), None);
        assert_eq!(valid_request_id(&"x".repeat(64)).map(str::len), Some(64));
        assert_eq!(valid_request_id(&"x".repeat(65)), None);
    }
}
