//! [`ClientError`]: the one error of the client. An answer of the server keeps its HTTP status
//! and error envelope (docs/api.md §1.4: branch on [`ClientError::code`], never on the
//! message); everything else says whether the request may have reached the server.

use gpux_wire::ErrorBody;
use std::time::Duration;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error status and its envelope. An answer that was not the
    /// envelope (a proxy's page) has code [`UNEXPECTED_RESPONSE`] and the body's start as
    /// message.
    #[error("{status} {}: {} (request_id {})", error.code, error.message, error.request_id)]
    Api {
        /// HTTP status.
        status: u16,
        /// The envelope; `retry_after_s` is filled from `Retry-After` when the body lacks it.
        error: ErrorBody,
    },
    /// The websocket refused a message (`rejected`): the envelope without an HTTP status;
    /// `request_id` is the message's own.
    #[error("rejected {}: {}", error.code, error.message)]
    Rejected {
        /// The envelope.
        error: ErrorBody,
    },
    /// The request may not have reached the server, or its answer was lost (connect refused,
    /// reset, DNS, a failed TLS handshake). Outcome unknown for commands: retry with the same
    /// `Idempotency-Key` or client order id. A failed TLS handshake's message starts with
    /// `TLS with host:port:` and names the cause (e.g. "certificate not trusted": give the
    /// private CA's certificate, `ClientOptions::with_ca_cert`).
    #[error("transport: {0}")]
    Transport(String),
    /// The answer was not the JSON this client expects (a server of another version?).
    #[error("decode: {0}")]
    Decode(String),
    /// No answer within the client's timeout (`Client::with_timeout`). Outcome unknown for
    /// commands, as for [`ClientError::Transport`].
    #[error("timed out")]
    Timeout,
    /// The websocket is closed (by the server: see `WsSession::close_frame`, or after an
    /// error).
    #[error("connection closed")]
    Closed,
    /// Something the client cannot send, refused before any IO: a base URL that is neither
    /// `http://host…` nor `https://host…`, a CA certificate file that cannot be read or holds
    /// no certificate (named), a key a header cannot carry, an id that is not a string of digits (for
    /// the websocket's typed ids), a message larger than the server takes.
    #[error("invalid: {0}")]
    Invalid(String),
}

/// Code of an [`ClientError::Api`] built for an error answer that was not the envelope.
pub const UNEXPECTED_RESPONSE: &str = "unexpected_response";

/// Longest part of an unexpected body kept in the message, bytes.
pub const UNEXPECTED_BODY_BYTES: usize = 512;

impl ClientError {
    /// The API's error code (`unknown_sku`, `rate_limited`, ...), for answers and websocket
    /// rejections; `None` for transport, decode, timeout and closed.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { error, .. } | ClientError::Rejected { error } => Some(&error.code),
            _ => None,
        }
    }

    /// The HTTP status of an answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The envelope of an answer or rejection.
    pub fn body(&self) -> Option<&ErrorBody> {
        match self {
            ClientError::Api { error, .. } | ClientError::Rejected { error } => Some(error),
            _ => None,
        }
    }

    /// How long the server asked to wait (429 `Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        self.body()
            .and_then(|b| b.retry_after_s)
            .map(Duration::from_secs)
    }

    /// True when the same request may succeed later: transport errors, timeouts, closed
    /// connections, 429 `rate_limited`, 409 `idempotency_in_flight`, and 502/503/504
    /// (`journal_unavailable`, `request_timeout`, `shutting_down`, a proxy). A command whose
    /// outcome is unknown is safe to repeat only with the same `Idempotency-Key` (the client
    /// reuses it across its own retries: `Client::with_retries`) or the same client order id.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Transport(_) | ClientError::Timeout | ClientError::Closed => true,
            ClientError::Api { status, error } => {
                matches!(status, 429 | 502 | 503 | 504) || error.code == "idempotency_in_flight"
            }
            ClientError::Rejected { error } => error.code == "rate_limited",
            ClientError::Decode(_) | ClientError::Invalid(_) => false,
        }
    }

    /// An error answer from its status, body and `Retry-After` header.
    pub(crate) fn from_answer(status: u16, body: &[u8], retry_after: Option<u64>) -> ClientError {
        let mut error = serde_json::from_slice::<ErrorBody>(body).unwrap_or_else(|_| {
            let text = String::from_utf8_lossy(body);
            let mut end = text.len().min(UNEXPECTED_BODY_BYTES);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            ErrorBody {
                code: UNEXPECTED_RESPONSE.into(),
                message: format!("HTTP {status}: {}", &text[..end]),
                request_id: String::new(),
                field: None,
                retry_after_s: None,
            }
        });
        if error.retry_after_s.is_none() {
            error.retry_after_s = retry_after;
        }
        ClientError::Api { status, error }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_keep_the_envelope_and_fall_back_on_other_bodies() {
        let e = ClientError::from_answer(
            400,
            br#"{"code":"unknown_sku","message":"no","request_id":"r1","field":"sku"}"#,
            None,
        );
        assert_eq!(e.code(), Some("unknown_sku"));
        assert_eq!(e.status(), Some(400));
        assert_eq!(e.body().and_then(|b| b.field.as_deref()), Some("sku"));
        assert!(!e.is_retryable());

        let e = ClientError::from_answer(502, "<html>bad gateway é</html>".as_bytes(), None);
        assert_eq!(e.code(), Some(UNEXPECTED_RESPONSE));
        assert!(e.to_string().contains("bad gateway"), "{e}");
        assert!(e.is_retryable());

        let e = ClientError::from_answer(
            429,
            br#"{"code":"rate_limited","message":"slow down","request_id":"r2"}"#,
            Some(3),
        );
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        assert!(e.is_retryable());
    }

    #[test]
    fn retryable_is_transient_only() {
        assert!(ClientError::Timeout.is_retryable());
        assert!(ClientError::Closed.is_retryable());
        assert!(ClientError::Transport("reset".into()).is_retryable());
        assert!(!ClientError::Decode("x".into()).is_retryable());
        let in_flight = ClientError::from_answer(
            409,
            br#"{"code":"idempotency_in_flight","message":"m","request_id":"r"}"#,
            None,
        );
        assert!(in_flight.is_retryable());
        let conflict = ClientError::from_answer(
            409,
            br#"{"code":"duplicate_client_order_id","message":"m","request_id":"r"}"#,
            None,
        );
        assert!(!conflict.is_retryable());
        assert_eq!(ClientError::Timeout.code(), None);
    }
}
