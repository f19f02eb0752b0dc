//! Accounts, roles and API keys: journaled state of the market (so a restart recovers them)
//! and the helpers that make and hash keys at the edge.
//!
//! An API key is `gpux_` followed by 32 lowercase hex digits (122 random bits from a v4 UUID).
//! Only its SHA-256 is journaled; a key is shown once, when it is created. Its public id is
//! the first 12 hex digits of that hash (for listing and revoking without the secret).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most API keys one account may hold.
pub const MAX_KEYS_PER_ACCOUNT: usize = 16;
/// Longest account name, bytes.
pub const MAX_ACCOUNT_NAME: usize = 64;

/// What an account may do.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Registers nodes and posts offers; reads its own nodes, offers, leases and earnings.
    Supplier,
    /// Places bids and holds leases; reads its own bids, leases, balance and statements.
    Buyer,
    /// Reads every finance report.
    Finance,
    /// Creates accounts and keys, records deposits and payouts.
    Admin,
}

impl Role {
    /// The snake_case name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Supplier => "supplier",
            Role::Buyer => "buyer",
            Role::Finance => "finance",
            Role::Admin => "admin",
        }
    }
}

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
    /// Key id → SHA-256 of the key.
    pub keys: BTreeMap<String, [u8; 32]>,
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
        if self.by_key.contains_key(&hash) {
            return Err(AccountError::KeyExists);
        }
        let rec = self
            .by_id
            .get_mut(&account)
            .ok_or(AccountError::UnknownAccount(account))?;
        if rec.keys.len() >= MAX_KEYS_PER_ACCOUNT {
            return Err(AccountError::TooManyKeys);
        }
        let id = key_id(&hash);
        rec.keys.insert(id.clone(), hash);
        self.by_key.insert(hash, account);
        Ok(id)
    }

    /// Revokes a key by its id.
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
}
