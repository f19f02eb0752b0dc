//! Identifier newtypes.
//!
//! Account ids are assigned by the gateway. Node, offer, bid and lease ids are assigned by the
//! engine and derived from the command's sequence number (see [`derive_id`]), never random, so
//! the same command stream yields the same ids in every process.

use serde::{Deserialize, Serialize};

/// Bits reserved for the per-command index in an engine-assigned id.
pub const ID_INDEX_BITS: u32 = 20;

/// Derives the `index`-th id assigned while applying the command with sequence number `seq`:
/// `seq << 20 | index`. One command assigns at most 2^20 ids (far above any limit in
/// [`crate::limits`]).
pub fn derive_id(seq: u64, index: u32) -> u64 {
    (seq << ID_INDEX_BITS) | u64::from(index)
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $inner:ty) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        pub struct $name(pub $inner);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_type!(
    /// A trading account (supplier or buyer), assigned by the gateway.
    AccountId,
    u64
);
id_type!(
    /// A registered GPU node; engine-assigned ([`derive_id`]).
    NodeId,
    u64
);
id_type!(
    /// A supplier offer (ask); engine-assigned ([`derive_id`]).
    OfferId,
    u64
);
id_type!(
    /// A buyer bid; engine-assigned ([`derive_id`]).
    BidId,
    u64
);
id_type!(
    /// A lease on concrete GPUs. A fill creates exactly one lease, so the lease id is also the
    /// fill id. Engine-assigned ([`derive_id`]).
    LeaseId,
    u64
);
id_type!(
    /// Index of a SKU in the engine's [`crate::Catalog`] (order of the catalog's rows).
    SkuId,
    u16
);
id_type!(
    /// Index of a region name in the engine's region table, in order of first registration.
    RegionId,
    u16
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_unique_per_seq_and_index() {
        assert_eq!(derive_id(1, 0), 1 << 20);
        assert_eq!(derive_id(1, 5), (1 << 20) + 5);
        assert_ne!(derive_id(2, 0), derive_id(1, 1));
    }
}
