//! The CLI's one error type and its exit codes (the table in `main.rs` and docs/cli.md).

use gpux_client::ClientError;
use gpux_wire::ErrorBody;

/// Exit status: success.
pub const EXIT_OK: i32 = 0;
/// Exit status: the exchange refused (a 4xx answer, or its answer rules out what was asked).
pub const EXIT_REFUSED: i32 = 1;
/// Exit status: usage or configuration error (clap's own status for bad flags).
pub const EXIT_USAGE: i32 = 2;
/// Exit status: the exchange could not be reached or failed (connection, timeout, 5xx).
pub const EXIT_UNAVAILABLE: i32 = 3;
/// Exit status: interrupted by Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Why a command failed.
#[derive(Debug)]
pub enum CliError {
    /// Bad input or configuration found before anything was sent (exit 2).
    Usage(String),
    /// The API answered an error envelope (4xx and websocket rejections: exit 1; 5xx: exit 3).
    Api {
        /// HTTP status (`None`: a websocket `rejected` message).
        status: Option<u16>,
        /// The envelope: code, message, request id.
        error: ErrorBody,
    },
    /// The exchange's answer rules out the request, e.g. `gpux ssh` on an ended lease (exit 1).
    Refused(String),
    /// No usable answer: connection refused, timeout, an answer that is not the API's (exit 3).
    Unavailable(String),
    /// Ctrl-C; the message says what was done about it (exit 130).
    Interrupted(String),
}

impl CliError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Api {
                status: Some(s), ..
            } if *s >= 500 => EXIT_UNAVAILABLE,
            CliError::Api { .. } | CliError::Refused(_) => EXIT_REFUSED,
            CliError::Unavailable(_) => EXIT_UNAVAILABLE,
            CliError::Interrupted(_) => EXIT_INTERRUPTED,
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Usage(m)
            | CliError::Refused(m)
            | CliError::Unavailable(m)
            | CliError::Interrupted(m) => f.write_str(m),
            CliError::Api { status, error } => {
                write!(f, "{}: {}", error.code, error.message)?;
                if let Some(field) = &error.field {
                    write!(f, " (field {field})")?;
                }
                if let Some(s) = error.retry_after_s {
                    write!(f, " (retry after {s} s)")?;
                }
                match status {
                    Some(s) => write!(f, "\nHTTP {s}, request_id {}", error.request_id),
                    None => write!(f, "\nrequest_id {}", error.request_id),
                }
            }
        }
    }
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Api { status, error } => CliError::Api {
                status: Some(status),
                error,
            },
            ClientError::Rejected { error } => CliError::Api {
                status: None,
                error,
            },
            ClientError::Invalid(m) => CliError::Usage(m),
            ClientError::Transport(m) => {
                CliError::Unavailable(format!("cannot reach the exchange: {m}"))
            }
            ClientError::Timeout => CliError::Unavailable(
                "the exchange did not answer in time (outcome unknown: check before repeating \
                 a command)"
                    .into(),
            ),
            ClientError::Decode(m) => CliError::Unavailable(format!(
                "the exchange's answer is not what gpux expects (another version?): {m}"
            )),
            ClientError::Closed => {
                CliError::Unavailable("the exchange closed the connection".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16) -> CliError {
        CliError::Api {
            status: Some(status),
            error: ErrorBody {
                code: "unknown_sku".into(),
                message: "no such SKU".into(),
                request_id: "r-1".into(),
                field: Some("sku".into()),
                retry_after_s: None,
            },
        }
    }

    #[test]
    fn exit_codes_follow_the_table() {
        assert_eq!(api(400).exit_code(), 1);
        assert_eq!(api(404).exit_code(), 1);
        assert_eq!(api(503).exit_code(), 3);
        assert_eq!(CliError::Usage(String::new()).exit_code(), 2);
        assert_eq!(CliError::Refused(String::new()).exit_code(), 1);
        assert_eq!(CliError::Unavailable(String::new()).exit_code(), 3);
        assert_eq!(CliError::Interrupted(String::new()).exit_code(), 130);
        assert_eq!(
            api(400).to_string(),
            "unknown_sku: no such SKU (field sku)\nHTTP 400, request_id r-1"
        );
    }
}
