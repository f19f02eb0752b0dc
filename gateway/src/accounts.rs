//! Accounts, roles and API keys: journaled state of the market (so a restart recovers them)
//! and the helpers that make and hash keys at the edge.
//!
//! An API key is `gpux_` followed by 32 lowercase hex digits (122 random bits from a v4 UUID).
//! Only its SHA-256 is journaled; a key is shown once, when it is created. Its public id is
//! the first 12 hex digits of that hash (for listing and revoking without the secret).
//!
//! **Node keys** (issue 16, docs/api.md §1.3.1): a supplier's key may be scoped to one of its
//! nodes, named (node names are unique per supplier and never change, so the key can exist
//! before the node is registered). The scope is journaled with the key
//! ([`AccountRecord::node_keys`]); what a node key may do is decided at the edge
//! (`api::auth`). Invariants: every node key is also in [`AccountRecord::keys`] (lookup and
//! revoking treat both kinds alike); only supplier accounts hold node keys; an account holds at
//! most [`MAX_KEYS_PER_ACCOUNT`] account keys and [`MAX_NODE_KEYS_PER_ACCOUNT`] node keys.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most API keys one account may hold.
pub const MAX_KEYS_PER_ACCOUNT: usize = 16;
/// Longest account name, bytes.
pub const MAX_ACCOUNT_NAME: usize = 64;
/// Most node keys one supplier account may hold (issue 16: one or a few per node of a
/// fleet; a rotation holds two for a while). Account keys are counted apart.
pub const MAX_NODE_KEYS_PER_ACCOUNT: usize = 4096;

/// What an account may do (the wire type: the journal stores it by its snake_case name).
pub use gpux_wire::Role;

/// One account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountRecord {
    /// Account id (the engine's and the ledger's account id too), from 1.
    pub id: u64,
    /// Unique name: 1..=64 of `[A-Za-z0-9._-]`.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Creation time, ms since epoch.
    pub created_ms: i64,
    /// Key id → SHA-256 of the key (every key: account keys and node keys).
    pub keys: BTreeMap<String, [u8; 32]>,
    /// Key id → node name, for the keys scoped to one node (a subset of `keys`). Left out of
    /// the encoding when empty, so snapshots and state hashes of markets without node keys are
    /// the same bytes as before issue 16 (and older snapshots load).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_keys: BTreeMap<String, String>,
}

/// Why an account operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    /// The name is taken.
    #[error("an account named {0:?} exists")]
    NameTaken(String),
    /// The name is empty, too long or has other characters than `[A-Za-z0-9._-]`.
    #[error("account names are 1..=64 of [A-Za-z0-9._-]")]
    InvalidName,
    /// No such account.
    #[error("no account {0}")]
    UnknownAccount(u64),
    /// The key is already registered.
    #[error("this key is already registered")]
    KeyExists,
    /// No such key on the account.
    #[error("account {0} has no key {1:?}")]
    UnknownKey(u64, String),
    /// Too many keys.
    #[error("an account holds at most {MAX_KEYS_PER_ACCOUNT} keys")]
    TooManyKeys,
    /// Too many node keys.
    #[error("an account holds at most {MAX_NODE_KEYS_PER_ACCOUNT} node keys; revoke some first")]
    TooManyNodeKeys,
    /// Node keys are for supplier accounts only.
    #[error("account {0} is not a supplier: node keys are for suppliers' nodes")]
    NotSupplier(u64),
    /// The node name is not a valid node name.
    #[error("node names are 1..=64 of [A-Za-z0-9._-]")]
    InvalidNodeName,
}

impl AccountError {
    /// Machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            AccountError::NameTaken(_) => "account_exists",
            AccountError::InvalidName => "invalid_name",
            AccountError::UnknownAccount(_) => "unknown_account",
            AccountError::KeyExists => "key_exists",
            AccountError::UnknownKey(..) => "unknown_key",
            AccountError::TooManyKeys => "too_many_keys",
            AccountError::TooManyNodeKeys => "too_many_node_keys",
            AccountError::NotSupplier(_) => "wrong_role",
            AccountError::InvalidNodeName => "invalid_name",
        }
    }
}

/// All accounts (ordered maps: part of snapshots and the state hash).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accounts {
    by_id: BTreeMap<u64, AccountRecord>,
    by_name: BTreeMap<String, u64>,
    by_key: BTreeMap<[u8; 32], u64>,
}

/// True for 1..=64 of `[A-Za-z0-9._-]`.
pub fn valid_account_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_ACCOUNT_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// True for a valid node name: the engine's rule (1..=64 of `[A-Za-z0-9._-]`), checked here
/// too so that no node key is journaled for a node that could never be registered.
pub fn valid_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= exchange::limits::MAX_NODE_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl AccountRecord {
    /// The node a key is scoped to (`None`: an account key, or no such key).
    pub fn node_of_key(&self, key_id: &str) -> Option<&str> {
        self.node_keys.get(key_id).map(String::as_str)
    }
}

impl Accounts {
    /// Creates an account with the next id.
    ///
    /// # Errors
    /// [`AccountError::InvalidName`], [`AccountError::NameTaken`].
    pub fn create(&mut self, name: &str, role: Role, at_ms: i64) -> Result<u64, AccountError> {
        if !valid_account_name(name) {
            return Err(AccountError::InvalidName);
        }
        if self.by_name.contains_key(name) {
            return Err(AccountError::NameTaken(name.to_string()));
        }
        let id = self.by_id.keys().next_back().map_or(1, |k| k + 1);
        self.by_id.insert(
            id,
            AccountRecord {
                id,
                name: name.to_string(),
                role,
                created_ms: at_ms,
                keys: BTreeMap::new(),
                node_keys: BTreeMap::new(),
            },
        );
        self.by_name.insert(name.to_string(), id);
        Ok(id)
    }

    /// Registers a key hash on an account; returns the key id.
    ///
    /// # Errors
    /// Unknown account, a key already registered, or too many keys.
    pub fn add_key(&mut self, account: u64, hash: [u8; 32]) -> Result<String, AccountError> {
        self.insert_key(account, hash, None)
    }

    /// Registers a key hash on a supplier account, scoped to its node named `node` (which
    /// need not be registered yet); returns the key id.
    ///
    /// # Errors
    /// Unknown account, not a supplier, an invalid node name, a key already registered, or
    /// too many node keys.
    pub fn add_node_key(
        &mut self,
        account: u64,
        hash: [u8; 32],
        node: &str,
    ) -> Result<String, AccountError> {
        self.insert_key(account, hash, Some(node))
    }

    fn insert_key(
        &mut self,
        account: u64,
        hash: [u8; 32],
        node: Option<&str>,
    ) -> Result<String, AccountError> {
        if self.by_key.contains_key(&hash) {
            return Err(AccountError::KeyExists);
        }
        let rec = self
            .by_id
            .get_mut(&account)
            .ok_or(AccountError::UnknownAccount(account))?;
        match node {
            None if rec.keys.len() - rec.node_keys.len() >= MAX_KEYS_PER_ACCOUNT => {
                return Err(AccountError::TooManyKeys);
            }
            None => {}
            Some(_) if rec.role != Role::Supplier => {
                return Err(AccountError::NotSupplier(account));
            }
            Some(name) if !valid_node_name(name) => return Err(AccountError::InvalidNodeName),
            Some(_) if rec.node_keys.len() >= MAX_NODE_KEYS_PER_ACCOUNT => {
                return Err(AccountError::TooManyNodeKeys);
            }
            Some(name) => {
                rec.node_keys.insert(key_id(&hash), name.to_string());
            }
        }
        let id = key_id(&hash);
        rec.keys.insert(id.clone(), hash);
        self.by_key.insert(hash, account);
        Ok(id)
    }

    /// Revokes a key (an account key or a node key) by its id.
    ///
    /// # Errors
    /// Unknown account or key.
    pub fn revoke_key(&mut self, account: u64, key_id: &str) -> Result<(), AccountError> {
        let rec = self
            .by_id
            .get_mut(&account)
            .ok_or(AccountError::UnknownAccount(account))?;
        let hash = rec
            .keys
            .remove(key_id)
            .ok_or_else(|| AccountError::UnknownKey(account, key_id.to_string()))?;
        rec.node_keys.remove(key_id);
        self.by_key.remove(&hash);
        Ok(())
    }

    /// An account by id.
    pub fn get(&self, id: u64) -> Option<&AccountRecord> {
        self.by_id.get(&id)
    }

    /// An account by name.
    pub fn by_name(&self, name: &str) -> Option<&AccountRecord> {
        self.by_name.get(name).and_then(|id| self.by_id.get(id))
    }

    /// The account a key hash belongs to.
    pub fn by_key_hash(&self, hash: &[u8; 32]) -> Option<&AccountRecord> {
        self.by_key.get(hash).and_then(|id| self.by_id.get(id))
    }

    /// All accounts in id order.
    pub fn iter(&self) -> impl Iterator<Item = &AccountRecord> {
        self.by_id.values()
    }
}

/// SHA-256 of an API key.
pub fn hash_key(key: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(key.as_bytes()).into()
}

/// The public id of a key: the first 12 hex digits of its hash.
pub fn key_id(hash: &[u8; 32]) -> String {
    crate::server::hex(&hash[..6])
}

/// A fresh random API key, `gpux_` + 32 hex digits.
pub fn new_key() -> String {
    format!("gpux_{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Role` is the wire crate's type and the journal stores it (MessagePack: by variant
    /// name in snapshots, `to_vec_named`, and in records): renaming or reordering a wire
    /// variant would stop old journals from decoding, so the encoding is pinned here.
    #[test]
    fn the_journal_encoding_of_roles_is_pinned() {
        for (role, name) in [
            (Role::Supplier, "supplier"),
            (Role::Buyer, "buyer"),
            (Role::Finance, "finance"),
            (Role::Admin, "admin"),
        ] {
            let mut expected = vec![0xa0 | u8::try_from(name.len()).unwrap()];
            expected.extend_from_slice(name.as_bytes());
            assert_eq!(rmp_serde::to_vec(&role).unwrap(), expected, "{name}");
            assert_eq!(rmp_serde::to_vec_named(&role).unwrap(), expected, "{name}");
            assert_eq!(rmp_serde::from_slice::<Role>(&expected).unwrap(), role);
        }
    }

    #[test]
    fn accounts_keys_and_refusals() {
        let mut a = Accounts::default();
        assert_eq!(a.create("idc-1", Role::Supplier, 5), Ok(1));
        assert_eq!(a.create("team-a", Role::Buyer, 6), Ok(2));
        assert_eq!(
            a.create("idc-1", Role::Buyer, 7),
            Err(AccountError::NameTaken("idc-1".into()))
        );
        assert_eq!(a.create("", Role::Buyer, 7), Err(AccountError::InvalidName));
        assert_eq!(
            a.create("bad name", Role::Buyer, 7),
            Err(AccountError::InvalidName)
        );
        let key = new_key();
        assert_eq!(key.len(), 37);
        let h = hash_key(&key);
        let id = a.add_key(2, h).unwrap();
        assert_eq!(id.len(), 12);
        assert_eq!(a.by_key_hash(&h).map(|r| r.id), Some(2));
        assert_eq!(a.add_key(1, h), Err(AccountError::KeyExists));
        assert_eq!(
            a.add_key(9, hash_key("x")),
            Err(AccountError::UnknownAccount(9))
        );
        a.revoke_key(2, &id).unwrap();
        assert!(a.by_key_hash(&h).is_none());
        assert_eq!(
            a.revoke_key(2, &id),
            Err(AccountError::UnknownKey(2, id.clone()))
        );
        for i in 0..MAX_KEYS_PER_ACCOUNT {
            a.add_key(1, hash_key(&format!("k{i}"))).unwrap();
        }
        assert_eq!(
            a.add_key(1, hash_key("one-more")),
            Err(AccountError::TooManyKeys)
        );
    }

    #[test]
    fn node_keys_scope_limits_and_encoding() {
        let mut a = Accounts::default();
        assert_eq!(a.create("idc-1", Role::Supplier, 5), Ok(1));
        assert_eq!(a.create("team-a", Role::Buyer, 6), Ok(2));
        // Without node keys the encoding is the one before issue 16 (no `node_keys` field).
        let before = rmp_serde::to_vec_named(&a).unwrap();
        assert!(!String::from_utf8_lossy(&before).contains("node_keys"));
        let h = hash_key("node-key-1");
        let id = a.add_node_key(1, h, "sh-h100-01").unwrap();
        let rec = a.by_key_hash(&h).unwrap();
        assert_eq!(rec.id, 1);
        assert_eq!(rec.node_of_key(&id), Some("sh-h100-01"));
        assert!(rec.keys.contains_key(&id));
        assert_eq!(
            a.add_node_key(2, hash_key("n2"), "x"),
            Err(AccountError::NotSupplier(2))
        );
        assert_eq!(
            a.add_node_key(1, hash_key("n3"), "bad name"),
            Err(AccountError::InvalidNodeName)
        );
        assert_eq!(a.add_node_key(1, h, "other"), Err(AccountError::KeyExists));
        // Node keys do not count against the account keys, nor account keys against them.
        for i in 0..MAX_KEYS_PER_ACCOUNT {
            a.add_key(1, hash_key(&format!("k{i}"))).unwrap();
        }
        assert_eq!(
            a.add_key(1, hash_key("one-more")),
            Err(AccountError::TooManyKeys)
        );
        assert!(a.add_node_key(1, hash_key("n4"), "sh-h100-02").is_ok());
        // Round trip, then revoke drops the scope with the key.
        let back: Accounts = rmp_serde::from_slice(&rmp_serde::to_vec_named(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        a.revoke_key(1, &id).unwrap();
        assert!(a.by_key_hash(&h).is_none());
        assert_eq!(a.get(1).unwrap().node_of_key(&id), None);
        let mut full = Accounts::default();
        full.create("idc-2", Role::Supplier, 5).unwrap();
        for i in 0..MAX_NODE_KEYS_PER_ACCOUNT {
            full.add_node_key(1, hash_key(&format!("n{i}")), "n")
                .unwrap();
        }
        assert_eq!(
            full.add_node_key(1, hash_key("more"), "n"),
            Err(AccountError::TooManyNodeKeys)
        );
        assert!(full.add_key(1, hash_key("account key")).is_ok());
    }
}
