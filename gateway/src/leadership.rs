//! Engine leadership on a Redis journal (issue 18, first step): one gateway leads, any other
//! started on the same journal waits as a standby and takes over when the leader's lease runs
//! out; a leader that lost its lease is fenced (its writes are refused by the journal's
//! scripts) and stops. docs/journal.md ("Leadership") is the contract.
//!
//! - [`lead`]: takes the lease, or waits for it (standby), polling every
//!   [`STANDBY_POLL_MS`]. [`campaign`] does it in the background for a process that follows
//!   the journal meanwhile (`sequencer::follow`: a hot standby, whose takeover needs no
//!   replay).
//! - [`Renewal`]: renews the lease every lease/[`RENEWALS_PER_LEASE`] on its own connection;
//!   when the lease is lost (taken by another, or not renewed within its length because Redis
//!   did not answer) it calls the `lost` callback once (the binary exits: fail-stop, so that a
//!   restart rejoins as a standby). [`Renewal::resign`] gives the lease up on a graceful stop.
//!
//! Takeover after a leader's death: at most the lease ([`DEFAULT_LEASE_MS`]) plus one standby
//! poll, plus the standby's catch-up (the entries it has not applied yet: usually none).

use crate::journal::{JournalError, RedisConfig, RedisJournal, redis::Leadership};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Default length of the leader's lease, ms: a leader dead (or paused) this long loses the
/// market to a standby.
pub const DEFAULT_LEASE_MS: u64 = 2_000;

/// Renewals per lease length: the leader renews every lease/4 (500 ms by default), so three
/// renewals in a row can fail (Redis slow or briefly away) before the lease runs out.
pub const RENEWALS_PER_LEASE: u32 = 4;

/// The exit status of a leader that lost its lease (`EX_TEMPFAIL`): its supervisor restarts
/// it, and it rejoins as a standby.
pub const EXIT_LEASE_LOST: i32 = 75;

/// How often a standby asks for the lease, ms.
pub const STANDBY_POLL_MS: u64 = 200;

/// Shortest lease accepted, ms (below it, a renewal's round trip is a fair share of it).
pub const MIN_LEASE_MS: u64 = 300;

/// This process's owner id in the lease: `<host>:<pid>:<8 hex>` (the random part tells a
/// restarted process with a reused pid from the one before).
pub fn owner_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &nonce[..8])
}

/// Takes the lease for `owner`, waiting as a standby while another holds it; answers the
/// epoch. Logs the leader it waits for (once per leader).
///
/// # Errors
/// The journal's, but `Unavailable` is retried (a standby outlives Redis restarts).
pub async fn lead(
    journal: &mut RedisJournal,
    owner: &str,
    lease: Duration,
    url: &str,
) -> Result<u64, JournalError> {
    let mut waiting_for: Option<(u64, String)> = None;
    loop {
        match journal.try_lead(owner, lease, url).await {
            Ok(Leadership::Leader { epoch }) => {
                tracing::info!(epoch, owner, "leading the journal");
                return Ok(epoch);
            }
            Ok(Leadership::Held {
                epoch,
                owner: holder,
                expires_in_ms,
            }) => {
                if waiting_for.as_ref() != Some(&(epoch, holder.clone())) {
                    tracing::info!(
                        epoch,
                        leader = %holder,
                        expires_in_ms,
                        "standby: another engine leads this journal; taking over when its lease runs out"
                    );
                    waiting_for = Some((epoch, holder));
                }
            }
            Err(JournalError::Unavailable(e)) => {
                tracing::warn!(error = %e, "standby: Redis unavailable; retrying");
            }
            Err(e) => return Err(e),
        }
        tokio::time::sleep(Duration::from_millis(STANDBY_POLL_MS)).await;
    }
}

/// Campaigns for the lease in the background: connects (retrying while Redis is away), waits
/// for the lease like [`lead`] (recording `url` for followers), starts the [`Renewal`] (with
/// `lost`), then sends the fencing token on the channel answered. The task answers the
/// renewal, to resign at a graceful stop; `None` when it could not lead (logged).
pub fn campaign(
    config: RedisConfig,
    owner: String,
    lease: Duration,
    url: String,
    lost: impl FnOnce(String) + Send + 'static,
) -> (oneshot::Receiver<String>, JoinHandle<Option<Renewal>>) {
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut journal = loop {
            match RedisJournal::connect(config.clone()).await {
                Ok(j) => break j,
                Err(JournalError::Unavailable(e)) => {
                    tracing::warn!(error = %e, "standby: Redis unavailable; retrying");
                    tokio::time::sleep(Duration::from_millis(STANDBY_POLL_MS)).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "standby: cannot campaign for the lease");
                    return None;
                }
            }
        };
        let epoch = match lead(&mut journal, &owner, lease, &url).await {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "standby: cannot campaign for the lease");
                return None;
            }
        };
        let token = journal.fencing_token()?.to_string();
        let renewal = match Renewal::spawn(config, token.clone(), lease, lost).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(epoch, error = %e, "won the lease but cannot renew it: giving it up");
                let _ = journal.resign().await;
                return None;
            }
        };
        let _ = tx.send(token);
        Some(renewal)
    });
    (rx, task)
}

/// The task that keeps the lease ([`Renewal::spawn`]).
#[derive(Debug)]
pub struct Renewal {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Option<RedisJournal>>,
}

impl Renewal {
    /// Renews the lease whose token is `token` on a connection of its own (`config`), every
    /// `lease / RENEWALS_PER_LEASE`. `lost` runs once when the lease is gone: renewed `false`
    /// (another leads, or it expired), or no successful renewal within `lease`.
    ///
    /// # Errors
    /// `Unavailable` when the renewal connection cannot be opened.
    pub async fn spawn(
        config: RedisConfig,
        token: String,
        lease: Duration,
        lost: impl FnOnce(String) + Send + 'static,
    ) -> Result<Renewal, JournalError> {
        let mut journal = RedisJournal::connect(config).await?;
        journal.set_fencing_token(Some(token));
        let (stop, mut stopped) = oneshot::channel();
        let every = lease / RENEWALS_PER_LEASE;
        let task = tokio::spawn(async move {
            let mut last_ok = tokio::time::Instant::now();
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => return Some(journal),
                    _ = interval.tick() => {}
                }
                let why = match journal.renew(lease).await {
                    Ok(true) => {
                        last_ok = tokio::time::Instant::now();
                        continue;
                    }
                    Ok(false) => {
                        "the lease is no longer this engine's (expired and taken, or removed)"
                            .to_string()
                    }
                    Err(e) if last_ok.elapsed() < lease => {
                        tracing::warn!(error = %e, "lease renewal failed; retrying");
                        continue;
                    }
                    Err(e) => format!(
                        "the lease could not be renewed within its {} ms: {e}",
                        lease.as_millis()
                    ),
                };
                lost(why);
                return None;
            }
        });
        Ok(Renewal {
            stop: Some(stop),
            task,
        })
    }

    /// Stops renewing and gives the lease up, so that a standby takes over at once (a
    /// graceful stop, after the final snapshot). Answers whether the lease was still held.
    pub async fn resign(mut self) -> bool {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(Some(mut journal)) => journal.resign().await.unwrap_or(false),
            _ => false,
        }
    }
}

/// The lease length in `ms`, checked.
///
/// # Errors
/// A message when `ms` is below [`MIN_LEASE_MS`].
pub fn lease_of(ms: u64) -> Result<Duration, String> {
    if ms < MIN_LEASE_MS {
        return Err(format!(
            "lease_ms {ms} is below the minimum of {MIN_LEASE_MS} ms"
        ));
    }
    Ok(Duration::from_millis(ms))
}
