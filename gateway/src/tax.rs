//! Tax details (开票信息) of the platform and of buyers and suppliers, as invoices print them
//! (issue 17; docs/settlement.md "Invoices", docs/api.md §2.5).
//!
//! Layout:
//! - [`TaxDetails`]: one party's details (the platform's come from `api.invoice.platform`,
//!   an account's from `PUT /v1/finance/accounts/{id}/tax-details`).
//! - [`TaxBook`]: journaled market state: each account's current details, and the details
//!   frozen into each closed period at its close.
//! - [`taxpayer_id_error`]: the shape and check character of a 统一社会信用代码.
//!
//! Invariants:
//! - **A closed period's documents never change.** An invoice or self-billing statement
//!   prints the counterparty frozen into its period at the close ([`TaxBook::freeze`]), never
//!   the current details: setting details after a close changes only later periods' documents,
//!   and a period closed before any details were set prints the account's name alone, byte
//!   for byte as before.
//! - **Hashes and snapshots of markets without tax details are unchanged.** The market leaves
//!   an empty book out of its state hash and its snapshot, as it does the audit trail.
//! - Leaf module: it uses nothing of `api`, `server` or `feed` (it is market state).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Length of a unified social credit code (统一社会信用代码, GB 32100-2015), characters.
pub const TAXPAYER_ID_CHARS: usize = 18;
/// The characters of a unified social credit code, in value order (0..=30): digits and the
/// capitals but I, O, S, V and Z (GB 32100-2015 table 1).
pub const TAXPAYER_ID_ALPHABET: &str = "0123456789ABCDEFGHJKLMNPQRTUWXY";
/// Weights of positions 1..=17 in the check character (GB 32100-2015 §4.2: 3^i mod 31).
const TAXPAYER_ID_WEIGHTS: [u32; 17] = [
    1, 3, 9, 27, 19, 26, 16, 17, 20, 29, 25, 13, 8, 24, 10, 30, 28,
];

/// A party's tax details (开票信息), as printed on invoices. In the configuration
/// (`[api.invoice.platform]`) every field defaults to empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaxDetails {
    /// Legal name (名称).
    pub name: String,
    /// Taxpayer id (纳税人识别号 / 统一社会信用代码).
    pub taxpayer_id: String,
    /// Registered address.
    pub address: String,
    /// Telephone.
    pub phone: String,
    /// Bank (开户行).
    pub bank: String,
    /// Bank account number.
    pub bank_account: String,
}

impl TaxDetails {
    /// Details with only a legal name: what an account without recorded details prints.
    pub fn named(name: &str) -> TaxDetails {
        TaxDetails {
            name: name.to_string(),
            ..TaxDetails::default()
        }
    }

    /// The party as the invoice renderer takes it.
    pub fn party(&self) -> settlement::reports::invoice::TaxParty {
        settlement::reports::invoice::TaxParty {
            name: self.name.clone(),
            taxpayer_id: self.taxpayer_id.clone(),
            address: self.address.clone(),
            phone: self.phone.clone(),
            bank: self.bank.clone(),
            bank_account: self.bank_account.clone(),
        }
    }
}

/// Why `id` is no unified social credit code: `None` when it is one. Checks the shape (18
/// characters of [`TAXPAYER_ID_ALPHABET`]) and the check character (GB 32100-2015 §4.2:
/// `c18 = (31 - Σ value(ci) × weight(i) mod 31) mod 31`).
pub fn taxpayer_id_error(id: &str) -> Option<String> {
    let values: Option<Vec<u32>> = id
        .chars()
        .map(|c| TAXPAYER_ID_ALPHABET.find(c).map(|v| v as u32))
        .collect();
    let Some(values) = values.filter(|v| v.len() == TAXPAYER_ID_CHARS) else {
        return Some(format!(
            "a taxpayer id (统一社会信用代码) is {TAXPAYER_ID_CHARS} characters of 0-9 and \
             A-Z without I, O, S, V, Z"
        ));
    };
    let sum: u32 = values
        .iter()
        .zip(TAXPAYER_ID_WEIGHTS)
        .map(|(v, w)| v * w)
        .sum();
    let check = (31 - sum % 31) % 31;
    (values[17] != check).then(|| {
        let want = TAXPAYER_ID_ALPHABET.as_bytes()[check as usize] as char;
        format!("taxpayer id {id}: the check character is {want}, not its last one (a typo?)")
    })
}

/// Accounts' tax details: current ones, and those frozen into each closed period.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaxBook {
    /// Current details, by account id.
    #[serde(default)]
    current: BTreeMap<u64, TaxDetails>,
    /// Details as they were at each close, by period id then account id (only periods whose
    /// documents had details to freeze).
    #[serde(default)]
    at_close: BTreeMap<u32, BTreeMap<u64, TaxDetails>>,
}

impl TaxBook {
    /// No details were ever set (the market leaves the book out of its hash and snapshot).
    pub fn is_empty(&self) -> bool {
        self.current.is_empty() && self.at_close.is_empty()
    }

    /// Sets `account`'s details from now on (later closes freeze them).
    pub fn set(&mut self, account: u64, details: TaxDetails) {
        self.current.insert(account, details);
    }

    /// `account`'s current details.
    pub fn current(&self, account: u64) -> Option<&TaxDetails> {
        self.current.get(&account)
    }

    /// Freezes the current details of `accounts` (those with a document in the period) into
    /// closed period `period`. A period already frozen is left as it is (a replayed close).
    pub fn freeze(&mut self, period: u32, accounts: impl IntoIterator<Item = u64>) {
        if self.at_close.contains_key(&period) {
            return;
        }
        let frozen: BTreeMap<u64, TaxDetails> = accounts
            .into_iter()
            .filter_map(|a| self.current.get(&a).map(|d| (a, d.clone())))
            .collect();
        if !frozen.is_empty() {
            self.at_close.insert(period, frozen);
        }
    }

    /// The details of `account` frozen into closed period `period` (`None`: none were set
    /// before that close).
    pub fn at_close(&self, period: u32, account: u64) -> Option<&TaxDetails> {
        self.at_close.get(&period).and_then(|m| m.get(&account))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taxpayer_ids_are_checked_by_shape_and_check_character() {
        // Published examples of valid codes.
        for ok in ["91350100M000100Y43", "91110000600037341L"] {
            assert_eq!(taxpayer_id_error(ok), None, "{ok}");
        }
        let msg = taxpayer_id_error("91350100M000100Y44").expect("bad check character");
        assert!(msg.contains("check character is 3"), "{msg}");
        for bad in [
            "",
            "91350100M000100Y4",   // 17
            "91350100M000100Y433", // 19
            "91350100m000100Y43",  // lower case
            "91350100O000100Y43",  // O is not in the alphabet
            "9135010０M000100Y43", // a full-width digit
        ] {
            assert!(
                taxpayer_id_error(bad).expect(bad).contains("18 characters"),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_close_freezes_the_details_of_its_documents_only() {
        let mut book = TaxBook::default();
        assert!(book.is_empty());
        book.freeze(1, [2, 3]);
        assert!(book.is_empty(), "nothing to freeze: the book stays empty");
        let d = TaxDetails::named("上海算力科技有限公司");
        book.set(2, d.clone());
        book.freeze(2, [2, 3]);
        assert_eq!(book.at_close(2, 2), Some(&d));
        assert_eq!(book.at_close(2, 3), None);
        assert_eq!(book.at_close(1, 2), None);
        // Later changes do not reach a frozen period, nor does a replayed close.
        book.set(2, TaxDetails::named("renamed"));
        book.freeze(2, [2]);
        assert_eq!(book.at_close(2, 2), Some(&d));
        assert_eq!(book.current(2).map(|d| d.name.as_str()), Some("renamed"));
    }
}
