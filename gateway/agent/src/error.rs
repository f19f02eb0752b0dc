//! The crate's one error type (STYLE model 5). Every message says what the operator should do.
//! A hook that fails is not an error of the agent: it is a [`crate::hooks::HookOutcome`],
//! turned into a failure report for the exchange.

use gpux_client::ClientError;
use std::path::PathBuf;

/// Why the agent cannot go on (bad configuration, no usable GPUs) or a step failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration file or environment could not be read or has the wrong shape
    /// (figment's message names the key and the file; not a `source`, so it prints once).
    #[error("configuration: {0}")]
    ConfigLoad(Box<figment::Error>),
    /// A configuration value is out of its range; `field` is its dotted key.
    #[error("configuration: {field}: {message}")]
    Config {
        /// Dotted key, e.g. `hooks.provision.timeout_ms`.
        field: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A `--simulate` spec that is not `SKU:COUNT`.
    #[error(
        "simulate {spec:?}: {message} (expected SKU:COUNT with COUNT in 1..=16, e.g. H100-80G:8)"
    )]
    Simulate {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        message: String,
    },
    /// NVML could not be loaded or initialized: no driver, no library, or no permission.
    #[error(
        "NVML is unavailable ({detail}): install the NVIDIA driver (libnvidia-ml.so.1), set \
         `nvml_lib` to its path, or run with --simulate SKU:COUNT to test without GPUs"
    )]
    NvmlUnavailable {
        /// NVML's or the loader's message.
        detail: String,
    },
    /// An NVML call failed for the host as a whole (per-GPU failures are health problems).
    #[error("NVML {call}: {detail}")]
    Nvml {
        /// The NVML call, e.g. `nvmlDeviceGetCount`.
        call: &'static str,
        /// NVML's message.
        detail: String,
    },
    /// NVML answered, but found no GPU.
    #[error("NVML found no GPU on this host: check `nvidia-smi`, or use --simulate SKU:COUNT")]
    NoGpus,
    /// The GPUs' model is not in the agent's model table (or the host mixes models).
    #[error(
        "cannot tell the catalog SKU of GPU model(s) {models:?}: set `sku` in the config (a \
         catalog SKU id such as H100-80G; one SKU per node)"
    )]
    UnknownModel {
        /// The distinct model names NVML reported.
        models: Vec<String>,
    },
    /// Discovery did not answer in time (a hung driver call).
    #[error("GPU discovery took longer than {timeout_ms} ms: the driver may be hung (check dmesg)")]
    DiscoveryTimedOut {
        /// The bound that passed, ms.
        timeout_ms: u64,
    },
    /// The exchange refused a request for good: a retry will not fix it (401: the key is
    /// unknown or revoked; 403: a node key of another node, or a role that may not; 404: the
    /// node is gone; 400/422: a value the exchange does not take, e.g. an unknown region).
    #[error(
        "the exchange refused to {action}: {error} (check the key — a node key made for this \
         node's name with POST /v1/node-keys, not revoked — and the configuration)"
    )]
    Refused {
        /// What the agent tried, e.g. `register the node`.
        action: &'static str,
        /// The exchange's answer (boxed: it carries the error envelope).
        error: Box<ClientError>,
    },
    /// The node of this name on the exchange does not match the host (a node's SKU never
    /// changes).
    #[error(
        "node {node}: its {field} on the exchange is {registered}, this host's is {host}: give \
         this host another node name (and a node key for it), or set `sku` to the node's"
    )]
    NodeMismatch {
        /// The node's name.
        node: String,
        /// The field that differs.
        field: &'static str,
        /// The node's value on the exchange.
        registered: String,
        /// The host's value.
        host: String,
    },
    /// A task of the agent panicked (a bug, never bad input).
    #[error("{task} failed (a bug in gpux-agent): {detail}")]
    TaskFailed {
        /// Which task.
        task: &'static str,
        /// The panic.
        detail: String,
    },
    /// A file the agent needs could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl AgentError {
    /// A [`AgentError::Refused`].
    pub fn refused(action: &'static str, error: ClientError) -> AgentError {
        AgentError::Refused {
            action,
            error: Box::new(error),
        }
    }

    /// A [`AgentError::TaskFailed`] from the task's join error.
    pub fn task_failed(task: &'static str, e: &tokio::task::JoinError) -> AgentError {
        AgentError::TaskFailed {
            task,
            detail: e.to_string(),
        }
    }

    /// A configuration error a restart will not fix (the binary exits 78, `EX_CONFIG`):
    /// bad configuration, an unknown GPU model without `sku`, a key the exchange refuses, a
    /// node that is not this host's. A node the exchange no longer knows (404) is not: a
    /// restart registers it again.
    pub fn is_config(&self) -> bool {
        match self {
            AgentError::Config { .. }
            | AgentError::ConfigLoad(_)
            | AgentError::Simulate { .. }
            | AgentError::UnknownModel { .. }
            | AgentError::NodeMismatch { .. } => true,
            AgentError::Refused { error, .. } => error
                .status()
                .is_some_and(|s| (400..500).contains(&s) && s != 404 && s != 429),
            _ => false,
        }
    }

    /// A [`AgentError::Config`] for `field`.
    pub fn config(field: impl Into<String>, message: impl Into<String>) -> AgentError {
        AgentError::Config {
            field: field.into(),
            message: message.into(),
        }
    }
}
