//! What the agent remembers across restarts (`<state_dir>/state.json`): the exchange and node
//! it runs for, the node's id, and each lease it works on with the step it reached.
//!
//! The exchange is the source of truth for leases (`GET /v1/nodes/{id}/leases`); this file
//! only keeps what the exchange cannot tell the agent after a restart:
//! - a hook's **outcome not yet reported** (access details, a failure reason, a wipe
//!   method), so a lost report is sent again without running the hook again;
//! - that a provision or teardown hook **was started** (it may have been cut off: it runs
//!   again, so hooks must be safe to run twice — README "Hooks");
//! - the leases the agent knows to be **active**, so a restart never provisions them again.
//!
//! Rules:
//! - Durable before visible (STYLE model 7): a step is saved before the report it leads to is
//!   sent, and before a hook starts.
//! - Written atomically: a temporary file in the same directory, fsynced, renamed over the
//!   old one, then the directory fsynced. A crash leaves the old file or the new one.
//! - A file of another exchange (`url`) or node name is not used (the agent starts over and
//!   says so); a file that does not parse is set aside the same way. Neither is an error: the
//!   exchange's lease list rebuilds what matters.
//! - Bounded: only leases the exchange still lists (live or wiping) are kept (the run loop
//!   forgets the others at each reconcile), at most a node's GPUs' worth plus their wipes.

use crate::error::AgentError;
use gpux_wire::{AccessRequest, FailureCauseDto, VerificationReport};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The state file's name in `state_dir`.
pub const STATE_FILE: &str = "state.json";
/// The state file's format version.
pub const STATE_VERSION: u32 = 1;

/// Where the agent is with one lease.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// The provision hook was started (after a restart: it runs again).
    Provisioning,
    /// The provision hook succeeded; the ready report with these details is not confirmed.
    ReportReady {
        /// The access details to report.
        access: AccessRequest,
    },
    /// Provisioning failed; the failed report with this reason is not confirmed.
    ReportFailed {
        /// The reason to report.
        reason: String,
        /// Whose side the failure is on (`launch_spec`: the provision hook exited 65). A
        /// file saved before issue 25 has none: `node`, as those reports were.
        #[serde(default)]
        cause: FailureCauseDto,
    },
    /// A verification lease's checks ran (issue 26); the verification report with these
    /// figures is not confirmed. (Its checks running are saved as `provisioning`.)
    ReportVerification {
        /// The report to send.
        report: VerificationReport,
    },
    /// The exchange has the lease active (ready reported, or found active).
    Active,
    /// Reported failed (or its verification reported): the lease ended and waits for its
    /// wipe.
    Ended,
    /// The teardown hook was started (after a restart: it runs again).
    TearingDown,
    /// The teardown hook succeeded; the torn-down report with this method is not confirmed.
    ReportTornDown {
        /// The wipe method to report.
        method: String,
    },
}

/// One lease the agent works on (the step's fields flattened in: serde's `flatten` rules out
/// `deny_unknown_fields` here).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedLease {
    /// The lease's GPU indexes on this node.
    pub gpu_indexes: Vec<u32>,
    /// Where the agent is with it.
    #[serde(flatten)]
    pub step: Step,
}

/// The state file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedState {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// The exchange's base URL the state belongs to.
    pub url: String,
    /// The node's name.
    pub node_name: String,
    /// The node's id, once registered or found.
    pub node_id: Option<String>,
    /// Leases by id.
    pub leases: BTreeMap<String, SavedLease>,
}

impl SavedState {
    /// An empty state for `url` and `node_name`.
    pub fn new(url: &str, node_name: &str) -> SavedState {
        SavedState {
            version: STATE_VERSION,
            url: url.to_string(),
            node_name: node_name.to_string(),
            node_id: None,
            leases: BTreeMap::new(),
        }
    }
}

/// The state file in a directory.
#[derive(Clone, Debug)]
pub struct StateFile {
    dir: PathBuf,
}

impl StateFile {
    /// The state file of `dir`.
    pub fn new(dir: &Path) -> StateFile {
        StateFile {
            dir: dir.to_path_buf(),
        }
    }

    /// Its path.
    pub fn path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The saved state for `url` and `node_name`: the file's when it is theirs, else an empty
    /// one (a missing file, another exchange or node, a file that does not parse: the reason
    /// is logged, and the file is replaced at the next save).
    ///
    /// # Errors
    /// [`AgentError::Io`] when the file exists but cannot be read.
    pub fn load(&self, url: &str, node_name: &str) -> Result<SavedState, AgentError> {
        let path = self.path();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(SavedState::new(url, node_name));
            }
            Err(source) => return Err(AgentError::Io { path, source }),
        };
        match serde_json::from_str::<SavedState>(&text) {
            Ok(s) if s.version == STATE_VERSION && s.url == url && s.node_name == node_name => {
                Ok(s)
            }
            Ok(s) => {
                tracing::warn!(
                    path = %path.display(),
                    saved_url = %s.url,
                    saved_node = %s.node_name,
                    "the state file belongs to another exchange or node: starting over"
                );
                Ok(SavedState::new(url, node_name))
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "the state file does not parse: starting over");
                Ok(SavedState::new(url, node_name))
            }
        }
    }

    /// Writes `state` atomically (module docs); creates the directory (mode 0700) if needed.
    ///
    /// # Errors
    /// [`AgentError::Io`] naming the file that could not be written.
    pub fn save(&self, state: &SavedState) -> Result<(), AgentError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AgentError::Io { path, source }
        };
        create_private_dir(&self.dir).map_err(io(&self.dir))?;
        let path = self.path();
        let tmp = self.dir.join(format!("{STATE_FILE}.tmp"));
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| AgentError::Io {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        write_synced(&tmp, &bytes).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.dir))
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SavedState {
        let mut s = SavedState::new("http://127.0.0.1:8080/", "sh-h100-01");
        s.node_id = Some("1932525568".into());
        s.leases.insert(
            "2317352961".into(),
            SavedLease {
                gpu_indexes: vec![0, 1],
                step: Step::ReportReady {
                    access: AccessRequest {
                        ssh_host: Some("203.0.113.7".into()),
                        ssh_port: Some(2222),
                        ..AccessRequest::default()
                    },
                },
            },
        );
        s.leases.insert(
            "2317352962".into(),
            SavedLease {
                gpu_indexes: vec![2],
                step: Step::Active,
            },
        );
        s
    }

    #[test]
    fn saves_atomically_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("state");
        let f = StateFile::new(&sub);
        assert_eq!(
            f.load("http://127.0.0.1:8080/", "sh-h100-01").unwrap(),
            SavedState::new("http://127.0.0.1:8080/", "sh-h100-01")
        );
        let s = sample();
        f.save(&s).unwrap();
        f.save(&s).unwrap(); // over an existing file
        assert_eq!(f.load("http://127.0.0.1:8080/", "sh-h100-01").unwrap(), s);
        assert!(!sub.join("state.json.tmp").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(f.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(f.path()).unwrap();
        assert!(text.contains(r#""step": "report_ready""#), "{text}");
    }

    /// Issue 25: a state file saved before the failure cause existed still loads, its
    /// unconfirmed failed report of cause `node`; a `launch_spec` one saves and loads back.
    #[test]
    fn a_failed_report_saved_without_a_cause_loads_as_the_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let f = StateFile::new(dir.path());
        let old = r#"{"version": 1, "url": "http://127.0.0.1:8080/", "node_name": "n1",
            "node_id": "7", "leases": {"10": {"gpu_indexes": [0], "step": "report_failed",
            "reason": "provision hook exited with code 1"}}}"#;
        std::fs::write(f.path(), old).unwrap();
        let s = f.load("http://127.0.0.1:8080/", "n1").unwrap();
        assert_eq!(
            s.leases["10"].step,
            Step::ReportFailed {
                reason: "provision hook exited with code 1".into(),
                cause: FailureCauseDto::Node,
            }
        );
        let mut s = s;
        s.leases.get_mut("10").unwrap().step = Step::ReportFailed {
            reason: "the launch spec cannot run".into(),
            cause: FailureCauseDto::LaunchSpec,
        };
        f.save(&s).unwrap();
        let text = std::fs::read_to_string(f.path()).unwrap();
        assert!(text.contains(r#""cause": "launch_spec""#), "{text}");
        assert_eq!(f.load("http://127.0.0.1:8080/", "n1").unwrap(), s);
    }

    /// Issue 26: a `gpu_changed` failure and an unconfirmed verification report are saved
    /// and load back as they were.
    #[test]
    fn a_gpu_changed_failure_and_a_verification_report_save_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let f = StateFile::new(dir.path());
        let mut s = SavedState::new("http://127.0.0.1:8080/", "n1");
        s.leases.insert(
            "10".into(),
            SavedLease {
                gpu_indexes: vec![1],
                step: Step::ReportFailed {
                    reason: "GPU 1: expected UUID GPU-a, found GPU-b".into(),
                    cause: FailureCauseDto::GpuChanged,
                },
            },
        );
        s.leases.insert(
            "11".into(),
            SavedLease {
                gpu_indexes: vec![0],
                step: Step::ReportVerification {
                    report: VerificationReport {
                        gpus: vec![gpux_wire::GpuFiguresDto {
                            index: 0,
                            uuid: Some("GPU-a".into()),
                            bf16_tflops: Some(761.5),
                            mem_bw_gbps: Some(2900.0),
                            faults: vec![gpux_wire::NvmlFaultDto::Throttled],
                        }],
                        allreduce_busbw_gbps: None,
                        dcgm_diag: Some(gpux_wire::DcgmResultDto::Pass),
                        duration_s: 12,
                        raw_tail: Some("ok".into()),
                    },
                },
            },
        );
        f.save(&s).unwrap();
        let text = std::fs::read_to_string(f.path()).unwrap();
        assert!(text.contains(r#""cause": "gpu_changed""#), "{text}");
        assert!(text.contains(r#""step": "report_verification""#), "{text}");
        assert_eq!(f.load("http://127.0.0.1:8080/", "n1").unwrap(), s);
    }

    #[test]
    fn another_exchange_or_node_or_garbage_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let f = StateFile::new(dir.path());
        f.save(&sample()).unwrap();
        let fresh = |url: &str, name: &str| SavedState::new(url, name);
        assert_eq!(
            f.load("http://other:8080/", "sh-h100-01").unwrap(),
            fresh("http://other:8080/", "sh-h100-01")
        );
        assert_eq!(
            f.load("http://127.0.0.1:8080/", "sh-h100-02").unwrap(),
            fresh("http://127.0.0.1:8080/", "sh-h100-02")
        );
        std::fs::write(f.path(), "{not json").unwrap();
        assert_eq!(
            f.load("http://127.0.0.1:8080/", "sh-h100-01").unwrap(),
            fresh("http://127.0.0.1:8080/", "sh-h100-01")
        );
    }
}
