//! One async method per REST endpoint (docs/api.md §2, §4), by audience. Paths, methods and
//! queries are the server's (`gateway/src/api/*.rs` `routes`); `Idempotency-Key` goes on
//! exactly the POSTs that honour it (docs/api.md §1.6): nodes, offers, bids, accounts, keys,
//! node keys (a fresh key per call, kept across the client's retries), and transfers,
//! adjustments and period closes (the caller's key, which names the action).

use crate::client::{Client, InventoryFilter, LeaseQuery, MarketOfferQuery, ReportQuery};
use crate::error::ClientError;
use gpux_wire::{
    AccessRequest, AccountCreated, AccountList, AdjustmentDone, AdjustmentRequest, AmountRequest,
    AttestationAnswer, AttestationRequest, BalanceView, BidCanceled, BidList, BidPlaced,
    BidRequest, BidView, BidsCanceled, CatalogView, ClosePeriodRequest, ClosedPeriodView,
    ClosedPeriods, CreateAccountRequest, DecimalStr, EarningsView, FailedRequest, HeartbeatAnswer,
    HeartbeatRequest, InventorySnapshots, KeyCreated, KeyRevoked, LeaseList, LeaseReleased,
    LeaseView, MarketOffers, MeView, NodeKeyCreated, NodeKeyList, NodeKeyRequest, NodeLeases,
    NodeList, NodeRequest, NodeUpdateRequest, NodeView, OfferList, OfferRequest, OfferView,
    OfferWithdrawn, ReadyRequest, TaxDetailsRequest, TaxDetailsView, TornDownRequest, TransferDone,
    UnhealthyGpu, ws::InventorySnapshot,
};
use gpux_wire::{BidReleased, DomainInventory};
use http::Method;

/// Public reads and the probes.
impl Client {
    /// `GET /v1/catalog`: every SKU with its reference prices; whether the market delivers.
    pub async fn catalog(&self) -> Result<CatalogView, ClientError> {
        self.run(self.call(Method::GET, &["v1", "catalog"])).await
    }

    /// `GET /v1/inventory?sku=&region=`: one SKU's inventory now.
    pub async fn inventory(
        &self,
        sku: &str,
        region: Option<&str>,
    ) -> Result<InventorySnapshot, ClientError> {
        let c = self.call(Method::GET, &["v1", "inventory"]).query(&[
            ("sku", Some(sku.to_string())),
            ("region", region.map(String::from)),
        ]);
        self.run(c).await
    }

    /// `GET /v1/inventory?region=`: every SKU's inventory now.
    pub async fn inventory_all(
        &self,
        region: Option<&str>,
    ) -> Result<InventorySnapshots, ClientError> {
        let c = self
            .call(Method::GET, &["v1", "inventory"])
            .query(&[("region", region.map(String::from))]);
        self.run(c).await
    }

    /// `GET /v1/inventory?sku=&region=&verified=&min_reliability=`: the capacity that meets a
    /// bid's trust requirements (issue 26, docs/api.md): with `verified`, only nodes whose
    /// latest verification run is `verified` and current; with `min_reliability` (a ratio
    /// string, "0.99"), only nodes whose reliability at the start of today (UTC) is at least
    /// that. One snapshot per SKU (`sku`, or every SKU of the catalog), each with `trust`.
    ///
    /// # Errors
    /// 422 `invalid_constraints` for a `min_reliability` outside "0".."1" or with more than 4
    /// places; 400 `unknown_sku`; 422 `unknown_region`.
    pub async fn inventory_trusted(
        &self,
        sku: Option<&str>,
        region: Option<&str>,
        verified: bool,
        min_reliability: Option<&str>,
    ) -> Result<Vec<InventorySnapshot>, ClientError> {
        let filter = InventoryFilter {
            verified,
            min_reliability: min_reliability.map(String::from),
            ..InventoryFilter::default()
        };
        self.inventory_filtered(sku, region, &filter).await
    }

    /// `GET /v1/inventory?sku=&region=&verified=&min_reliability=&jurisdiction=&min_interconnect=&nvlink=`:
    /// the capacity a bid with these requirements can take (issue 26, docs/api.md): the trust
    /// requirements of [`Client::inventory_trusted`] and the site constraints (jurisdiction,
    /// least fabric, NVLink). One snapshot per SKU (`sku`, or every SKU of the catalog), each
    /// with `trust` and/or `constraints` when those filter.
    ///
    /// # Errors
    /// 422 `invalid_constraints` for a bad `min_reliability`; 400 `invalid_jurisdiction`,
    /// `bad_query` (an unknown fabric), `unknown_sku`; 422 `unknown_region`.
    pub async fn inventory_filtered(
        &self,
        sku: Option<&str>,
        region: Option<&str>,
        filter: &InventoryFilter,
    ) -> Result<Vec<InventorySnapshot>, ClientError> {
        let mut pairs = vec![
            ("sku", sku.map(String::from)),
            ("region", region.map(String::from)),
        ];
        pairs.extend(filter.pairs());
        let c = self.call(Method::GET, &["v1", "inventory"]).query(&pairs);
        if sku.is_some() {
            Ok(vec![self.run(c).await?])
        } else {
            let all: InventorySnapshots = self.run(c).await?;
            Ok(all.snapshots)
        }
    }

    /// `GET /v1/market/offers?…`: the public offer search (issue 26, docs/api.md): live listed
    /// offers with free GPUs, each with its node's attributes, verification, reliability, SLA
    /// terms and attested host facts (never the supplier or the node), filtered and ordered
    /// by `q`.
    ///
    /// # Errors
    /// 400 `bad_query`, `unknown_sku`, `invalid_jurisdiction`, `invalid_price`,
    /// `invalid_query` (`limit`, `min_cuda`); 422 `unknown_region`, `invalid_constraints`.
    pub async fn market_offers(&self, q: &MarketOfferQuery) -> Result<MarketOffers, ClientError> {
        let c = self
            .call(Method::GET, &["v1", "market", "offers"])
            .query(&q.pairs());
        self.run(c).await
    }

    /// `GET /v1/inventory/domains?sku=&region=&gpus_per_node=&min_nodes=`: whole free nodes
    /// per (SKU, region, fabric domain) and node size (issue 27): what a gang can take now.
    ///
    /// # Errors
    /// 400 `unknown_sku`, `invalid_query`; 422 `unknown_region`.
    pub async fn inventory_domains(
        &self,
        sku: Option<&str>,
        region: Option<&str>,
        gpus_per_node: Option<u32>,
        min_nodes: Option<u32>,
    ) -> Result<DomainInventory, ClientError> {
        let c = self
            .call(Method::GET, &["v1", "inventory", "domains"])
            .query(&[
                ("sku", sku.map(String::from)),
                ("region", region.map(String::from)),
                ("gpus_per_node", gpus_per_node.map(|g| g.to_string())),
                ("min_nodes", min_nodes.map(|n| n.to_string())),
            ]);
        self.run(c).await
    }

    /// `GET /v1/me`: who the key belongs to.
    pub async fn me(&self) -> Result<MeView, ClientError> {
        self.run(self.call(Method::GET, &["v1", "me"])).await
    }

    /// `GET /healthz`: the process is up (docs/api.md §5.1).
    pub async fn health(&self) -> Result<(), ClientError> {
        self.run_bytes(self.call(Method::GET, &["healthz"]))
            .await
            .map(drop)
    }
}

/// Buyers.
impl Client {
    /// `POST /v1/bids` → what the bid did (filled, resting or closed, with its fills).
    pub async fn place_bid(&self, bid: &BidRequest) -> Result<BidPlaced, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "bids"])
            .json(bid)?
            .idempotent(None);
        self.run(c).await
    }

    /// `GET /v1/bids`: the resting bids.
    pub async fn bids(&self) -> Result<BidList, ClientError> {
        self.run(self.call(Method::GET, &["v1", "bids"])).await
    }

    /// `GET /v1/bids/{id}`: a resting bid (a closed one is 404).
    pub async fn bid(&self, id: &str) -> Result<BidView, ClientError> {
        self.run(self.call(Method::GET, &["v1", "bids", id])).await
    }

    /// `DELETE /v1/bids/{id}`.
    pub async fn cancel_bid(&self, id: &str) -> Result<BidCanceled, ClientError> {
        self.run(self.call(Method::DELETE, &["v1", "bids", id]))
            .await
    }

    /// `DELETE /v1/bids`: every resting bid of the account.
    pub async fn cancel_all_bids(&self) -> Result<BidsCanceled, ClientError> {
        self.run(self.call(Method::DELETE, &["v1", "bids"])).await
    }

    /// `GET /v1/leases?…`: a page of the buyer's leases (a supplier's: those on its nodes),
    /// newest first.
    pub async fn leases(&self, q: &LeaseQuery) -> Result<LeaseList, ClientError> {
        let c = self.call(Method::GET, &["v1", "leases"]).query(&q.pairs());
        self.run(c).await
    }

    /// `GET /v1/leases/{id}`: a lease, live or ended (its buyer or its node's supplier).
    pub async fn lease(&self, id: &str) -> Result<LeaseView, ClientError> {
        self.run(self.call(Method::GET, &["v1", "leases", id]))
            .await
    }

    /// `POST /v1/leases/{id}/release`: end a lease now.
    pub async fn release_lease(&self, id: &str) -> Result<LeaseReleased, ClientError> {
        self.run(self.call(Method::POST, &["v1", "leases", id, "release"]))
            .await
    }

    /// `POST /v1/bids/{id}/release`: end every live lease of a bid now (a whole gang) and
    /// cancel its rest (issue 27).
    pub async fn release_bid(&self, id: &str) -> Result<BidReleased, ClientError> {
        self.run(self.call(Method::POST, &["v1", "bids", id, "release"]))
            .await
    }

    /// `GET /v1/balance`: balance, available, held by bids, burn rate, runway.
    pub async fn balance(&self) -> Result<BalanceView, ClientError> {
        self.run(self.call(Method::GET, &["v1", "balance"])).await
    }
}

/// Suppliers (a node key: its node only, docs/api.md §1.3.1).
impl Client {
    /// `POST /v1/nodes` → 201 the node.
    pub async fn register_node(&self, r: &NodeRequest) -> Result<NodeView, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "nodes"])
            .json(r)?
            .idempotent(None);
        self.run(c).await
    }

    /// `GET /v1/nodes`.
    pub async fn nodes(&self) -> Result<NodeList, ClientError> {
        self.run(self.call(Method::GET, &["v1", "nodes"])).await
    }

    /// `GET /v1/nodes/{id}`.
    pub async fn node(&self, id: &str) -> Result<NodeView, ClientError> {
        self.run(self.call(Method::GET, &["v1", "nodes", id])).await
    }

    /// `PATCH /v1/nodes/{id}`: region, jurisdiction, fabric, NVLink, draining.
    pub async fn update_node(
        &self,
        id: &str,
        r: &NodeUpdateRequest,
    ) -> Result<NodeView, ClientError> {
        let c = self.call(Method::PATCH, &["v1", "nodes", id]).json(r)?;
        self.run(c).await
    }

    /// `POST /v1/nodes/{id}/heartbeat` `{healthy_gpus}`.
    pub async fn heartbeat(
        &self,
        id: &str,
        healthy_gpus: u32,
    ) -> Result<HeartbeatAnswer, ClientError> {
        self.heartbeat_with_offset(id, healthy_gpus, None).await
    }

    /// `POST /v1/nodes/{id}/heartbeat` `{healthy_gpus, clock_offset_ms}`: with the agent's
    /// clock minus the exchange's, ms (at most `gpux_wire::MAX_CLOCK_OFFSET_MS` either way;
    /// beyond, 400 `invalid_clock_offset`), shown in the node view (issue 25).
    pub async fn heartbeat_with_offset(
        &self,
        id: &str,
        healthy_gpus: u32,
        clock_offset_ms: Option<i64>,
    ) -> Result<HeartbeatAnswer, ClientError> {
        self.heartbeat_with_health(id, healthy_gpus, clock_offset_ms, None)
            .await
    }

    /// `POST /v1/nodes/{id}/heartbeat` `{healthy_gpus, clock_offset_ms?, unhealthy_gpus?}`
    /// (issue 26, docs/market-rules.md §12.1): with `unhealthy_gpus` (at most 16, each index
    /// below the node's GPU count: else 400 `invalid_unhealthy_gpus` or 422 `invalid_gpus`)
    /// the exchange ends exactly the leases on those GPUs and ignores `healthy_gpus`; `None`
    /// is the count-only heartbeat.
    pub async fn heartbeat_with_health(
        &self,
        id: &str,
        healthy_gpus: u32,
        clock_offset_ms: Option<i64>,
        unhealthy_gpus: Option<Vec<UnhealthyGpu>>,
    ) -> Result<HeartbeatAnswer, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "nodes", id, "heartbeat"])
            .json(&HeartbeatRequest {
                healthy_gpus,
                clock_offset_ms,
                unhealthy_gpus,
            })?
            .repeatable();
        self.run(c).await
    }

    /// `POST /v1/nodes/{id}/attestation`: what the node agent found on the host (issue 26,
    /// docs/market-rules.md §12.1) → whether it matched, the first mismatch, whether the node
    /// is held. Errors: 400 naming the field for a malformed body, 422 `unknown_model`
    /// (`gpus`), 404 for a node not the caller's.
    pub async fn attest_node(
        &self,
        id: &str,
        attestation: &AttestationRequest,
    ) -> Result<AttestationAnswer, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "nodes", id, "attestation"])
            .json(attestation)?
            .repeatable();
        self.run(c).await
    }

    /// `POST /v1/nodes/{id}/resume`: a held node back on the market (a no-op when not held).
    pub async fn resume_node(&self, id: &str) -> Result<NodeView, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "nodes", id, "resume"])
            .repeatable();
        self.run(c).await
    }

    /// `GET /v1/nodes/{id}/leases`: what the node's agent must act on.
    pub async fn node_leases(&self, id: &str) -> Result<NodeLeases, ClientError> {
        self.run(self.call(Method::GET, &["v1", "nodes", id, "leases"]))
            .await
    }

    /// `POST /v1/offers` → 201 the offer (`node_id` required).
    pub async fn post_offer(&self, r: &OfferRequest) -> Result<OfferView, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "offers"])
            .json(r)?
            .idempotent(None);
        self.run(c).await
    }

    /// `GET /v1/offers`.
    pub async fn offers(&self) -> Result<OfferList, ClientError> {
        self.run(self.call(Method::GET, &["v1", "offers"])).await
    }

    /// `GET /v1/offers/{id}`.
    pub async fn offer(&self, id: &str) -> Result<OfferView, ClientError> {
        self.run(self.call(Method::GET, &["v1", "offers", id]))
            .await
    }

    /// `PUT /v1/offers/{id}`: new terms (`node_id` must be absent).
    pub async fn amend_offer(&self, id: &str, r: &OfferRequest) -> Result<OfferView, ClientError> {
        let c = self.call(Method::PUT, &["v1", "offers", id]).json(r)?;
        self.run(c).await
    }

    /// `DELETE /v1/offers/{id}`: withdraw.
    pub async fn withdraw_offer(&self, id: &str) -> Result<OfferWithdrawn, ClientError> {
        self.run(self.call(Method::DELETE, &["v1", "offers", id]))
            .await
    }

    /// `GET /v1/earnings`.
    pub async fn earnings(&self) -> Result<EarningsView, ClientError> {
        self.run(self.call(Method::GET, &["v1", "earnings"])).await
    }

    /// `POST /v1/leases/{id}/ready` `{access}` → the lease, active (a repeat corrects the
    /// access details and keeps the ready time).
    pub async fn report_ready(
        &self,
        lease: &str,
        access: &AccessRequest,
    ) -> Result<LeaseView, ClientError> {
        let body = ReadyRequest {
            access: access.clone(),
        };
        let c = self
            .call(Method::POST, &["v1", "leases", lease, "ready"])
            .json(&body)?
            .repeatable();
        self.run(c).await
    }

    /// `POST /v1/leases/{id}/failed` `{reason}` → the lease, ended `not_delivered` (the node's
    /// failure: it fails over and the node is held).
    pub async fn report_failed(&self, lease: &str, reason: &str) -> Result<LeaseView, ClientError> {
        self.report_failed_because(lease, reason, None).await
    }

    /// `POST /v1/leases/{id}/failed` `{reason, cause}`: with `cause` `launch_spec` the buyer's
    /// launch spec cannot run, and the lease ends at no charge without a failover or a hold.
    pub async fn report_failed_because(
        &self,
        lease: &str,
        reason: &str,
        cause: Option<gpux_wire::FailureCauseDto>,
    ) -> Result<LeaseView, ClientError> {
        let body = FailedRequest {
            reason: reason.to_string(),
            cause,
        };
        let c = self
            .call(Method::POST, &["v1", "leases", lease, "failed"])
            .json(&body)?;
        self.run(c).await
    }

    /// `POST /v1/leases/{id}/torn-down` `{method}` → the ended lease with its deletion record
    /// (a repeat answers the record).
    pub async fn report_torn_down(
        &self,
        lease: &str,
        method: &str,
    ) -> Result<LeaseView, ClientError> {
        let body = TornDownRequest {
            method: method.to_string(),
        };
        let c = self
            .call(Method::POST, &["v1", "leases", lease, "torn-down"])
            .json(&body)?
            .repeatable();
        self.run(c).await
    }

    /// `POST /v1/leases/{id}/verification` `{gpus, allreduce_busbw_gbps, dcgm_diag,
    /// duration_s, raw_tail}` (node key; issue 26, docs/market-rules.md §12.2): the figures a
    /// node agent measured on a verification lease → the node, with the run's judgment (the
    /// run then leaves the node's leases: it has no wipe, it ran no buyer's workload).
    pub async fn report_verification(
        &self,
        lease: &str,
        report: &gpux_wire::VerificationReport,
    ) -> Result<NodeView, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "leases", lease, "verification"])
            .json(report)?;
        self.run(c).await
    }

    /// `POST /v1/node-keys` → 201 a key scoped to the node named `node_name` (account keys
    /// only).
    pub async fn create_node_key(&self, node_name: &str) -> Result<NodeKeyCreated, ClientError> {
        let body = NodeKeyRequest {
            node_name: node_name.to_string(),
        };
        let c = self
            .call(Method::POST, &["v1", "node-keys"])
            .json(&body)?
            .idempotent(None);
        self.run(c).await
    }

    /// `GET /v1/node-keys`.
    pub async fn node_keys(&self) -> Result<NodeKeyList, ClientError> {
        self.run(self.call(Method::GET, &["v1", "node-keys"])).await
    }

    /// `DELETE /v1/node-keys/{key_id}`.
    pub async fn revoke_node_key(&self, key_id: &str) -> Result<KeyRevoked, ClientError> {
        self.run(self.call(Method::DELETE, &["v1", "node-keys", key_id]))
            .await
    }
}

/// Admins.
impl Client {
    /// `POST /v1/admin/accounts` → 201 the account and its first key (shown once).
    pub async fn create_account(
        &self,
        r: &CreateAccountRequest,
    ) -> Result<AccountCreated, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "admin", "accounts"])
            .json(r)?
            .idempotent(None);
        self.run(c).await
    }

    /// `GET /v1/admin/accounts`.
    pub async fn accounts(&self) -> Result<AccountList, ClientError> {
        self.run(self.call(Method::GET, &["v1", "admin", "accounts"]))
            .await
    }

    /// `POST /v1/admin/accounts/{id}/keys` → 201 a new key (shown once).
    pub async fn create_key(&self, account: &str) -> Result<KeyCreated, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "admin", "accounts", account, "keys"])
            .idempotent(None);
        self.run(c).await
    }

    /// `DELETE /v1/admin/accounts/{id}/keys/{key_id}`.
    pub async fn revoke_key(&self, account: &str, key_id: &str) -> Result<KeyRevoked, ClientError> {
        let c = self.call(
            Method::DELETE,
            &["v1", "admin", "accounts", account, "keys", key_id],
        );
        self.run(c).await
    }

    /// `POST /v1/admin/accounts/{id}/deposits` `{amount}`: `idempotency_key` names the
    /// transfer (the same key and amount again moves no money twice).
    pub async fn deposit(
        &self,
        account: &str,
        amount: DecimalStr,
        idempotency_key: &str,
    ) -> Result<TransferDone, ClientError> {
        self.transfer("deposits", account, amount, idempotency_key)
            .await
    }

    /// `POST /v1/admin/accounts/{id}/payouts` `{amount}`, like [`Client::deposit`].
    pub async fn payout(
        &self,
        account: &str,
        amount: DecimalStr,
        idempotency_key: &str,
    ) -> Result<TransferDone, ClientError> {
        self.transfer("payouts", account, amount, idempotency_key)
            .await
    }

    async fn transfer(
        &self,
        kind: &str,
        account: &str,
        amount: DecimalStr,
        idempotency_key: &str,
    ) -> Result<TransferDone, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "admin", "accounts", account, kind])
            .json(&AmountRequest { amount })?
            .idempotent(Some(idempotency_key));
        self.run(c).await
    }
}

/// Finance.
impl Client {
    /// `GET /v1/reports/{kind}?from=&to=&tz=&format=&account=`: the report's bytes as served
    /// (JSON, CSV or XLSX by `format`). Kinds: `buyer-statements`, `supplier-payouts`,
    /// `platform-summary`, `trial-balance`.
    pub async fn report(&self, kind: &str, q: &ReportQuery) -> Result<Vec<u8>, ClientError> {
        let c = self
            .call(Method::GET, &["v1", "reports", kind])
            .query(&q.pairs());
        self.run_bytes(c).await
    }

    /// `POST /v1/finance/adjustments` → 201 the adjustment as posted: `idempotency_key` names
    /// it (the same key and body again posts nothing twice and answers the same).
    pub async fn adjust(
        &self,
        r: &AdjustmentRequest,
        idempotency_key: &str,
    ) -> Result<AdjustmentDone, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "finance", "adjustments"])
            .json(r)?
            .idempotent(Some(idempotency_key));
        self.run(c).await
    }

    /// `GET /v1/finance/periods`: the closed periods, oldest first.
    pub async fn periods(&self) -> Result<ClosedPeriods, ClientError> {
        self.run(self.call(Method::GET, &["v1", "finance", "periods"]))
            .await
    }

    /// `POST /v1/finance/periods` → 201 the closed period: `idempotency_key` names the close
    /// (the same key and body again answers the same period).
    pub async fn close_period(
        &self,
        r: &ClosePeriodRequest,
        idempotency_key: &str,
    ) -> Result<ClosedPeriodView, ClientError> {
        let c = self
            .call(Method::POST, &["v1", "finance", "periods"])
            .json(r)?
            .idempotent(Some(idempotency_key));
        self.run(c).await
    }

    /// `GET /v1/finance/periods/{period}/invoices/{account}?format=&tz=`: the bytes of a
    /// buyer's invoice or a supplier's self-billing statement of a closed period, as served
    /// (`format`: `json` by default, `csv`, `xlsx` or `pdf`; `tz`: the zone dates print in,
    /// `Asia/Shanghai` by default).
    pub async fn invoice(
        &self,
        period: &str,
        account: &str,
        format: Option<&str>,
        tz: Option<&str>,
    ) -> Result<Vec<u8>, ClientError> {
        let c = self
            .call(
                Method::GET,
                &["v1", "finance", "periods", period, "invoices", account],
            )
            .query(&[
                ("format", format.map(String::from)),
                ("tz", tz.map(String::from)),
            ]);
        self.run_bytes(c).await
    }

    /// `GET /v1/finance/periods/{period}/credit-notes/{account}?format=&tz=&number=`: the
    /// bytes of a buyer's credit note (红字发票) of a closed period, as served (`number`:
    /// needed only when the buyer has several in the period, else 409 `number_required`;
    /// `format` and `tz` as [`Client::invoice`]).
    pub async fn credit_note(
        &self,
        period: &str,
        account: &str,
        number: Option<&str>,
        format: Option<&str>,
        tz: Option<&str>,
    ) -> Result<Vec<u8>, ClientError> {
        let c = self
            .call(
                Method::GET,
                &["v1", "finance", "periods", period, "credit-notes", account],
            )
            .query(&[
                ("number", number.map(String::from)),
                ("format", format.map(String::from)),
                ("tz", tz.map(String::from)),
            ]);
        self.run_bytes(c).await
    }

    /// `GET /v1/invoices?account=&tz=`: the documents of closed periods (a buyer's invoices
    /// and credit notes, a supplier's self-billing statements; finance and admin every
    /// account's, or `account`'s), newest first, each with its download path; local dates in
    /// `tz` (default `Asia/Shanghai`).
    pub async fn documents(
        &self,
        account: Option<&str>,
        tz: Option<&str>,
    ) -> Result<gpux_wire::Documents, ClientError> {
        let c = self.call(Method::GET, &["v1", "invoices"]).query(&[
            ("account", account.map(String::from)),
            ("tz", tz.map(String::from)),
        ]);
        self.run(c).await
    }

    /// `PUT /v1/finance/accounts/{id}/tax-details`: a buyer's or supplier's tax details (开票
    /// 信息), printed on the documents of periods closed from now on.
    pub async fn set_tax_details(
        &self,
        account: &str,
        r: &TaxDetailsRequest,
    ) -> Result<TaxDetailsView, ClientError> {
        let c = self
            .call(
                Method::PUT,
                &["v1", "finance", "accounts", account, "tax-details"],
            )
            .json(r)?;
        self.run(c).await
    }
}
