//! API errors: every failure is JSON `{code, message, request_id}` with a fitting status.

use crate::market::Refusal;
use crate::sequencer::SequencerError;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

/// An error answer: status, machine-readable code and a human message.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable code, e.g. `insufficient_funds`.
    pub code: &'static str,
    /// Human message.
    pub message: String,
    /// The offending field, when one is known.
    pub field: Option<&'static str>,
    /// The offending field's path in the request's JSON (`launch.ports[1]`), for a value that
    /// does not decode; answered as `field` in its place.
    pub field_path: Option<String>,
    /// Seconds to wait before retrying (429 answers: `Retry-After`).
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            field_path: None,
            retry_after_s: None,
        }
    }

    /// 400 for invalid input, naming the field.
    pub fn invalid(
        field: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            field: Some(field),
            ..ApiError::new(StatusCode::BAD_REQUEST, code, message)
        }
    }

    /// 401: no or unknown API key.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: the key's role may not do this.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404 for a resource the caller cannot see (another tenant's looks the same as none).
    pub fn not_found(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no such {what}"),
        )
    }

    /// An engine rejection (422 for rule violations on valid input; 404 for unknown or other
    /// tenants' objects; 409 for conflicts).
    pub fn rejected(reason: exchange::RejectReason, field: Option<&'static str>) -> ApiError {
        use exchange::RejectReason as R;
        let status = match reason {
            R::UnknownNode | R::UnknownOffer | R::UnknownBid | R::UnknownLease | R::NotOwner => {
                StatusCode::NOT_FOUND
            }
            R::NodeExists
            | R::OfferExists
            | R::DuplicateClientOrderId
            | R::LeaseEnded
            | R::NotProvisioning
            | R::NotActive
            | R::AttestationMismatch
            | R::NotVerifying
            | R::LeaseNotEnded => StatusCode::CONFLICT,
            R::StaleSequence | R::SequenceOutOfRange | R::ClockRegression => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        };
        // Another tenant's object answers exactly like a missing one (no existence oracle).
        let missing = matches!(
            reason,
            R::UnknownNode | R::UnknownOffer | R::UnknownBid | R::UnknownLease | R::NotOwner
        );
        let code = if missing { "not_found" } else { reason.code() };
        let message = if missing {
            format!("no such {} on this account", field.unwrap_or("object"))
        } else {
            rejection_message(reason, field)
        };
        ApiError {
            field,
            ..ApiError::new(status, code, message)
        }
    }

    /// A refusal before the engine (pre-trade check, ledger, accounts).
    ///
    /// (See also [`rejection_message`] for the engine's rules.)
    pub fn refusal(r: &Refusal) -> ApiError {
        let status = match r.code {
            "insufficient_funds" => StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_account" | "unknown_key" => StatusCode::NOT_FOUND,
            _ => StatusCode::CONFLICT,
        };
        ApiError::new(status, r.code, r.message.clone())
    }

    /// The wire envelope ([`gpux_wire::ErrorBody`], the type `/openapi.json` declares) with the
    /// request's id ([`crate::api::request_id::current`]); a 429 carries `retry_after_s` as well as the `Retry-After` header.
    pub fn body(&self) -> gpux_wire::ErrorBody {
        gpux_wire::ErrorBody {
            code: self.code.to_string(),
            message: self.message.clone(),
            request_id: crate::api::request_id::current(),
            field: self
                .field_path
                .clone()
                .or_else(|| self.field.map(str::to_string)),
            retry_after_s: self.retry_after_s,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut b = HttpResponse::build(self.status);
        if let Some(s) = self.retry_after_s {
            b.insert_header(("Retry-After", s.to_string()));
        }
        b.json(self.body())
    }
}

impl From<SequencerError> for ApiError {
    fn from(e: SequencerError) -> ApiError {
        let (status, code) = match e {
            SequencerError::Unavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "journal_unavailable")
            }
            SequencerError::Refused(_) => (StatusCode::SERVICE_UNAVAILABLE, "journal_refused"),
            SequencerError::Stopped => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            SequencerError::NotLeader(_) => (StatusCode::SERVICE_UNAVAILABLE, "not_leader"),
            SequencerError::Unencodable(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        ApiError::new(status, code, e.to_string())
    }
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

/// What an engine rejection says to the user: the rule, with its limits (named constants of
/// `exchange::limits`), and what to do (issue 25: "rejected by the exchange: invalid gpus"
/// did not say the range). `field` is the rejection's field (`gpus` of a bid or an offer,
/// `healthy_gpus` of a heartbeat).
pub fn rejection_message(reason: exchange::RejectReason, field: Option<&'static str>) -> String {
    use exchange::RejectReason as R;
    use exchange::limits::{
        MAX_BID_GPUS, MAX_CLIENT_ORDER_ID_LEN, MAX_CONSTRAINT_ENTRIES, MAX_LEASE_SECONDS,
        MAX_NODE_GPUS, MAX_NODE_NAME_LEN, MAX_NOTICE_SECONDS, MAX_PROVISION_SECONDS,
    };
    match (reason, field) {
        (R::InvalidGpus, Some("healthy_gpus")) => {
            "healthy_gpus is at most the node's GPU count".into()
        }
        (R::InvalidGpus, Some("gpus")) => format!(
            "gpus must be 1 to {MAX_BID_GPUS} for a bid (at most {MAX_NODE_GPUS} for a \
             single_node bid: use placement spread for more), 1 to {MAX_NODE_GPUS} for a node, \
             and an offer's gpus at most its node's healthy GPUs"
        ),
        (R::InvalidPrice, Some("preemptible_price")) => {
            "preemptible_price must be below spot_price (a preemptible lease can be taken back)"
                .into()
        }
        (R::InvalidPrice, _) => {
            "a price is above 0 CNY per GPU-hour, with at most 4 decimal places".into()
        }
        (R::InvalidDuration, Some("duration_s")) => format!(
            "duration_s must be 1 to {MAX_LEASE_SECONDS} seconds (366 days), or absent for an \
             open-ended lease"
        ),
        (R::InvalidDuration, _) => format!(
            "min_lease_s and max_lease_s must be 1 to {MAX_LEASE_SECONDS} seconds, min at most \
             max"
        ),
        (R::InvalidNotice, _) => {
            format!("notice_s must be at most {MAX_NOTICE_SECONDS} seconds")
        }
        (R::InvalidProvision, _) => {
            format!("provision_s must be 1 to {MAX_PROVISION_SECONDS} seconds")
        }
        (R::InvalidUntil, _) => "available_until_ms must be in the future".into(),
        (R::InvalidExpiry, _) => {
            "expires_at_ms is for GTC bids only and must be in the future".into()
        }
        (R::InvalidConstraints, _) => format!(
            "at most {MAX_CONSTRAINT_ENTRIES} regions and {MAX_CONSTRAINT_ENTRIES} \
             jurisdictions in constraints"
        ),
        (R::InvalidClientOrderId, _) => format!(
            "client_order_id is 1 to {MAX_CLIENT_ORDER_ID_LEN} printable ASCII characters \
             (no spaces)"
        ),
        (R::InvalidName, _) => format!(
            "a node name is 1 to {MAX_NODE_NAME_LEN} characters of letters, digits, '-', '_' \
             and '.'"
        ),
        (R::NodeOffline, _) => "the node is offline: heartbeat it first".into(),
        (R::NotProvisioning, _) => "the lease is not provisioning (pending, waiting for a \
             wipe of its GPUs, or already running: a running lease whose workload is gone is \
             reported lost)"
            .into(),
        (R::NotActive, _) => "the lease is not running yet: report a lease that could not \
             start as failed"
            .into(),
        (R::InvalidGpus, Some("healthy_mask")) => format!(
            "a GPU index is at most the node's GPU count minus one (0 to {})",
            MAX_NODE_GPUS - 1
        ),
        (R::UnknownModel, _) => "a GPU model is not one the exchange knows (docs/market-rules.md \
             §12.1 lists the models; a host of another model registers without attesting)"
            .into(),
        (R::AttestationMismatch, _) => "the node's latest attestation does not match what it \
             registered (GPU count, model, memory or a GPU attested on another node): fix the \
             host or re-register the node, attest again, then resume"
            .into(),
        (R::NotVerifying, _) => "this lease is not a verification run under way (a buyer's \
             lease, or a run that already ended): report figures only for a lease whose \
             `purpose` is `verification`, before its deadline"
            .into(),
        (R::InvalidGpus, Some("figures")) => "the figures name at most 16 GPUs, with strictly \
             increasing indexes below 16 and known faults"
            .into(),
        (R::InvalidSla, _) => "the offer's SLA terms are out of bounds: availability \
             90.00..=99.99 %, credit multiple 1..=50"
            .into(),
        (R::InvalidGang, _) => format!(
            "a gang is 1 or more nodes of 1 to {MAX_NODE_GPUS} GPUs each, at most \
             {MAX_BID_GPUS} GPUs in all, with gpus = nodes × gpus_per_node and no min_gpus \
             (docs/market-rules.md §13.2)"
        ),
        (R::InvalidDomain, Some("nic_gbps")) => format!(
            "nic_gbps is 1 to {} Gbit/s (the sum of the node's NICs)",
            exchange::limits::MAX_NIC_GBPS
        ),
        (R::InvalidDomain, _) => format!(
            "fabric_domain is 1 to {} characters of letters, digits, '.', '_' and '-'",
            exchange::limits::MAX_DOMAIN_LEN
        ),
        (R::InvalidGpus, Some("min_gpus")) => "min_gpus is for spread IOC bids only, 1 to the \
             bid's gpus (docs/market-rules.md §13.5)"
            .into(),
        (R::LeaseNotEnded, _) => {
            "the lease is still live: its GPUs are torn down after it ends".into()
        }
        _ => format!(
            "rejected by the exchange: {}",
            reason.code().replace('_', " ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exchange::RejectReason as R;

    /// Issue 25: rule rejections state the rule's limits, not only the code.
    #[test]
    fn rejections_say_the_rule_and_its_limits() {
        let m = rejection_message(R::InvalidGpus, Some("gpus"));
        assert!(m.contains("1 to 1024") && m.contains("spread"), "{m}");
        let m = rejection_message(R::InvalidDuration, Some("duration_s"));
        assert!(m.contains("31622400"), "{m}");
        let m = rejection_message(R::InvalidPrice, Some("preemptible_price"));
        assert!(m.contains("below spot_price"), "{m}");
        let m = rejection_message(R::InvalidProvision, Some("provision_s"));
        assert!(m.contains("1 to 1800"), "{m}");
        // A reason without its own text still names it.
        let m = rejection_message(R::UnknownRegion, Some("region"));
        assert_eq!(m, "rejected by the exchange: unknown region");
        let e = ApiError::rejected(R::InvalidNotice, Some("notice_s"));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_notice")
        );
        assert!(e.message.contains("at most 900"), "{}", e.message);
    }
}
