//! Operator hooks run as real processes (`gpux_agent::hooks`): access details from the last
//! stdout line, failures with their stderr tail, time limits that take down the whole process
//! group, the lease passed only as environment values (a buyer's `$(…)` or `; rm` is inert),
//! and output capped to its tail. Expected values are written from the hooks' contract in the
//! module header, not copied from runs.

use gpux_agent::config::HookConfig;
use gpux_agent::hooks::{
    AccessDetails, DEFAULT_WIPE_METHOD, HookOutcome, LAUNCH_SPEC_EXIT_CODE, LeaseContext,
    MAX_HOOK_OUTPUT_BYTES, MAX_REPORT_TEXT_BYTES, Phase, provision_result, run_hook,
    teardown_result,
};
use gpux_client::wire::FailureCauseDto;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// A `/bin/sh -c SCRIPT` hook with these limits.
fn sh(script: &str, timeout_ms: u64, grace_ms: u64) -> HookConfig {
    HookConfig {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        timeout_ms,
        grace_ms,
    }
}

fn lease() -> LeaseContext {
    LeaseContext {
        lease_id: "2317352961".into(),
        node_id: "1932525568".into(),
        gpu_indexes: vec![0, 3],
        gpu_uuids: vec!["GPU-sim-H100-80G-0".into(), "GPU-sim-H100-80G-3".into()],
        image: Some("nvcr.io/nvidia/pytorch:24.05-py3".into()),
        command: vec![
            "python".into(),
            "train.py".into(),
            "--epochs".into(),
            "3".into(),
        ],
        ssh_keys: vec![
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv a@b"
                .into(),
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv c@d"
                .into(),
        ],
        ports: vec![8888, 6006],
        disk_gb: 100,
        env: BTreeMap::from([("EPOCHS".to_string(), "3".to_string())]),
        lease_end_ms: Some(1_778_576_400_000),
        gang: None,
    }
}

/// Whether process `pid` is gone: no such process, or a zombie waiting for a reaper.
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Waits up to 3 s for `pid` to be gone.
async fn wait_gone(pid: i32) -> bool {
    for _ in 0..150 {
        if gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_provision_hook_that_prints_access_json_last_is_ready() {
    let hook = sh(
        r#"echo "pulling $GPUX_IMAGE"
echo 'progress on stderr' >&2
printf '%s\n' '{"ssh_host":"203.0.113.7","ssh_port":2222,"ssh_user":"root","urls":{"8888":"https://lease.example/"}}'
echo"#,
        5_000,
        1_000,
    );
    let outcome = run_hook(&hook, &lease().env_vars(Phase::Provision)).await;
    let HookOutcome::Exited {
        code: 0,
        stdout_tail,
        stderr_tail,
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    assert!(stdout_tail.starts_with("pulling nvcr.io/nvidia/pytorch:24.05-py3\n"));
    assert_eq!(stderr_tail, "progress on stderr\n");
    let access = provision_result(&outcome).unwrap();
    assert_eq!(
        access,
        AccessDetails {
            ssh_host: Some("203.0.113.7".into()),
            ssh_port: Some(2222),
            ssh_user: Some("root".into()),
            urls: BTreeMap::from([(8888, "https://lease.example/".into())]),
        }
    );
}

#[tokio::test]
async fn a_failing_hook_is_a_failure_with_its_stderr_tail() {
    let hook = sh(
        "echo 'pulling image' >&2; echo 'image pull failed: manifest unknown' >&2; exit 3",
        5_000,
        1_000,
    );
    let outcome = run_hook(&hook, &lease().env_vars(Phase::Provision)).await;
    assert_eq!(
        outcome,
        HookOutcome::Exited {
            code: 3,
            stdout_tail: String::new(),
            stderr_tail: "pulling image\nimage pull failed: manifest unknown\n".into(),
        }
    );
    let failure = provision_result(&outcome).unwrap_err();
    assert_eq!(
        failure.reason,
        "provision hook exited with code 3: pulling image | image pull failed: manifest unknown"
    );
    assert_eq!(
        failure.cause,
        FailureCauseDto::Node,
        "only 65 blames the spec"
    );
    assert_eq!(
        teardown_result(&outcome).unwrap_err(),
        "teardown hook exited with code 3: pulling image | image pull failed: manifest unknown"
    );
}

/// Issue 25: exit 65 (`EX_DATAERR`, `LAUNCH_SPEC_EXIT_CODE`) blames the buyer's launch spec:
/// the failure's cause is `launch_spec` and its reason carries the hook's message (stderr,
/// else the last stdout line).
#[tokio::test]
async fn exit_65_is_a_launch_spec_failure_with_the_hooks_message() {
    assert_eq!(LAUNCH_SPEC_EXIT_CODE, 65);
    let hook = sh(
        "echo 'pulling nvcr.io/nvidia/pytorch:24.05-py3' >&2; echo 'manifest unknown: no such tag' >&2; exit 65",
        5_000,
        1_000,
    );
    let outcome = run_hook(&hook, &lease().env_vars(Phase::Provision)).await;
    let failure = provision_result(&outcome).unwrap_err();
    assert_eq!(failure.cause, FailureCauseDto::LaunchSpec);
    assert_eq!(
        failure.reason,
        "the launch spec cannot run (provision hook exited with code 65): pulling nvcr.io/nvidia/pytorch:24.05-py3 | manifest unknown: no such tag"
    );
    let quiet = sh("echo 'no such command: trian.py'; exit 65", 5_000, 1_000);
    let failure = provision_result(&run_hook(&quiet, &[]).await).unwrap_err();
    assert_eq!(failure.cause, FailureCauseDto::LaunchSpec);
    assert!(
        failure.reason.ends_with(": no such command: trian.py"),
        "{}",
        failure.reason
    );
    // A teardown has no launch-spec failure: 65 is a failure like any other.
    assert!(
        teardown_result(&outcome)
            .unwrap_err()
            .starts_with("teardown hook exited with code 65: ")
    );
}

#[tokio::test]
async fn a_hook_killed_by_a_signal_reads_128_plus_the_signal() {
    let outcome = run_hook(&sh("kill -9 $$", 5_000, 1_000), &[]).await;
    assert!(
        matches!(outcome, HookOutcome::Exited { code: 137, .. }),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_hanging_hook_times_out_and_its_whole_process_group_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "echo $$ > '{d}/leader'; sleep 60 & echo $! > '{d}/child'; echo 'stuck waiting for docker' >&2; sleep 60",
        d = dir.path().display()
    );
    let started = Instant::now();
    let outcome = run_hook(&sh(&script, 300, 2_000), &[]).await;
    let took = started.elapsed();
    let HookOutcome::TimedOut { stderr_tail, .. } = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(stderr_tail, "stuck waiting for docker\n");
    // SIGTERM ends both sleeps and the shell at once: well inside the 2 s grace.
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_millis(2_000), "{took:?}");
    for name in ["leader", "child"] {
        let pid = read_pid(&dir.path().join(name));
        assert!(wait_gone(pid).await, "{name} {pid} still runs");
    }
    let reason = provision_result(&outcome).unwrap_err().reason;
    assert!(
        reason.starts_with("provision hook timed out (hooks.provision.timeout_ms)"),
        "{reason}"
    );
    assert!(reason.ends_with(": stuck waiting for docker"), "{reason}");
}

#[tokio::test]
async fn a_hook_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    // An ignored signal stays ignored across fork and exec: the background sleep ignores
    // SIGTERM too.
    let script = format!(
        "trap '' TERM; sleep 60 & echo $! > '{d}/child'; while :; do sleep 1; done",
        d = dir.path().display()
    );
    let started = Instant::now();
    let outcome = run_hook(&sh(&script, 200, 300), &[]).await;
    let took = started.elapsed();
    assert!(
        matches!(outcome, HookOutcome::TimedOut { killed: true, .. }),
        "{outcome:?}"
    );
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert!(took < Duration::from_millis(3_000), "{took:?}");
    let child = read_pid(&dir.path().join("child"));
    assert!(wait_gone(child).await, "{child} still runs");
    assert!(
        provision_result(&outcome)
            .unwrap_err()
            .reason
            .starts_with("provision hook timed out (hooks.provision.timeout_ms) and was killed")
    );
}

#[tokio::test]
async fn dropping_a_running_hook_kills_its_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "sleep 60 & echo $! > '{d}/child'; wait",
        d = dir.path().display()
    );
    let hook = sh(&script, 60_000, 1_000);
    let cancelled = tokio::time::timeout(Duration::from_millis(300), run_hook(&hook, &[])).await;
    assert!(
        cancelled.is_err(),
        "the hook ended by itself: {cancelled:?}"
    );
    let child = read_pid(&dir.path().join("child"));
    assert!(wait_gone(child).await, "{child} still runs");
}

#[tokio::test]
async fn a_garbage_printing_hook_is_a_failure() {
    let cases: &[(&str, &str)] = &[
        ("echo 'all good!'", "not access details JSON"),
        ("echo '{}'", "no way in"),
        (
            r#"echo '{"ssh_host":"h","password":"hunter2"}'"#,
            "unknown field",
        ),
        ("true", "not access details JSON"), // nothing printed
        // The access line must be last.
        (r#"echo '{"ssh_host":"h"}'; echo done"#, r#"line: "done""#),
    ];
    for &(script, why) in cases {
        let outcome = run_hook(&sh(script, 5_000, 1_000), &[]).await;
        let reason = provision_result(&outcome).unwrap_err().reason;
        assert!(reason.contains(why), "{script}: {reason}");
        assert!(
            reason.starts_with("provision hook exited 0, but"),
            "{reason}"
        );
    }
    // Its stderr tail comes along, bounded.
    let noisy = format!(
        "i=0; while [ $i -lt 300 ]; do echo \"warning $i: {}\" >&2; i=$((i+1)); done; echo nope",
        "x".repeat(50)
    );
    let reason = provision_result(&run_hook(&sh(&noisy, 5_000, 1_000), &[]).await)
        .unwrap_err()
        .reason;
    assert!(reason.len() <= MAX_REPORT_TEXT_BYTES, "{}", reason.len());
    assert!(
        reason.ends_with(&format!("warning 299: {}", "x".repeat(50))),
        "{reason}"
    );
    assert!(!reason.chars().any(char::is_control));
}

#[tokio::test]
async fn the_lease_reaches_the_hook_only_as_environment_values() {
    // No shell: /usr/bin/env prints exactly the environment it got.
    let hook = HookConfig {
        argv: vec!["/usr/bin/env".into()],
        timeout_ms: 5_000,
        grace_ms: 1_000,
    };
    let outcome = run_hook(&hook, &lease().env_vars(Phase::Provision)).await;
    let HookOutcome::Exited {
        code: 0,
        stdout_tail,
        ..
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    // GPUX_SSH_KEYS spans two lines: split on the variable names instead.
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut last = String::new();
    for line in stdout_tail.lines() {
        match line.split_once('=') {
            Some((k, v)) if k.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') => {
                last = k.to_string();
                env.insert(last.clone(), v.to_string());
            }
            _ => {
                let v = env.get_mut(&last).unwrap();
                v.push('\n');
                v.push_str(line);
            }
        }
    }
    let want = [
        ("GPUX_PHASE", "provision"),
        ("GPUX_LEASE_ID", "2317352961"),
        ("GPUX_NODE_ID", "1932525568"),
        ("GPUX_GPUS", "2"),
        ("GPUX_GPU_INDEXES", "0,3"),
        ("GPUX_GPU_UUIDS", "GPU-sim-H100-80G-0,GPU-sim-H100-80G-3"),
        ("GPUX_IMAGE", "nvcr.io/nvidia/pytorch:24.05-py3"),
        (
            "GPUX_COMMAND_JSON",
            r#"["python","train.py","--epochs","3"]"#,
        ),
        ("GPUX_PORTS", "8888,6006"),
        ("GPUX_DISK_GB", "100"),
        ("GPUX_ENV_JSON", r#"{"EPOCHS":"3"}"#),
        ("GPUX_LEASE_END_MS", "1778576400000"),
    ];
    for (k, v) in want {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
    }
    assert_eq!(env["GPUX_SSH_KEYS"], lease().ssh_keys.join("\n"));
    // The agent's own environment stays out (cargo sets these for the test process): only
    // PATH and the documented pass-through list, plus the lease.
    assert!(!env.contains_key("CARGO_MANIFEST_DIR"), "{env:?}");
    assert!(!env.contains_key("CARGO"), "{env:?}");
    assert!(env.contains_key("PATH"));
    let gpux: Vec<&String> = env.keys().filter(|k| k.starts_with("GPUX_")).collect();
    assert_eq!(gpux.len(), 17, "{gpux:?}");
    // Not a gang member: the gang variables are set, empty (hooks run under `set -u`).
    for k in [
        "GPUX_GANG_ID",
        "GPUX_GANG_RANK",
        "GPUX_GANG_SIZE",
        "GPUX_GANG_NODES",
    ] {
        assert_eq!(env.get(k).map(String::as_str), Some(""), "{k}");
    }
}

/// A host whose discovery found nothing (the hook env does not need UUIDs here).
fn no_gpus() -> gpux_agent::gpus::Discovery {
    gpux_agent::gpus::Discovery {
        driver_version: String::new(),
        cuda_version: String::new(),
        sku: None,
        gpus: Vec::new(),
        nics: Vec::new(),
        host: gpux_agent::gpus::HostSize::default(),
    }
}

/// Issue 27: a gang member's hooks learn the gang's id, their rank and the node names by
/// rank, from the lease view the exchange shows the supplier's agent.
#[tokio::test]
async fn a_gang_members_hooks_get_the_gang_id_rank_and_nodes() {
    let view: gpux_client::wire::LeaseView = serde_json::from_value(serde_json::json!({
        "id": "2317352961", "bid_id": "77", "node_id": "1932525568", "offer_id": "2",
        "sku": "H100-80G", "region": "cn-east-2", "kind": "spot", "gpus": 8,
        "gpu_indexes": [0, 1, 2, 3, 4, 5, 6, 7], "price": "20.0000", "start_ms": 0,
        "end_ms": 1, "state": "provisioning", "provision_deadline_ms": 5,
        "ready_ms": null, "access": null, "launch": null, "notice_deadline_ms": null,
        "charged": null, "billed_seconds": 0, "sla_credit": null, "end_reason": null,
        "ended_at_ms": null, "failure_reason": null, "teardown": null,
        "migrated_from": null, "migrated_to": [], "failover_failed_gpus": null,
        "failover_failed_reason": null,
        "gang": {"id": "77", "rank": 1, "size": 3, "members": ["2317352960", "2317352961",
            "2317352962"], "ready": false, "status": "provisioning",
            "nodes": ["sh-h100-01", "sh-h100-02", "sh-h100-03"]}
    }))
    .expect("lease view");
    let ctx = gpux_agent::jobs::lease_context(&view, "1932525568", &no_gpus());
    let hook = HookConfig {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "set -eu; MASTER_ADDR=${GPUX_GANG_NODES%%,*}; \
             echo \"$GPUX_GANG_ID $GPUX_GANG_RANK $GPUX_GANG_SIZE $GPUX_GANG_NODES $MASTER_ADDR\" >&2; \
             echo '{}'"
                .into(),
        ],
        timeout_ms: 5_000,
        grace_ms: 1_000,
    };
    let outcome = run_hook(&hook, &ctx.env_vars(Phase::Provision)).await;
    let HookOutcome::Exited {
        code: 0,
        stderr_tail,
        ..
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(
        stderr_tail.trim(),
        "77 1 3 sh-h100-01,sh-h100-02,sh-h100-03 sh-h100-01"
    );
    // A lease of no gang: no gang context.
    let mut plain = view.clone();
    plain.gang = None;
    assert_eq!(
        gpux_agent::jobs::lease_context(&plain, "1932525568", &no_gpus()).gang,
        None
    );
}

#[tokio::test]
async fn a_buyers_shell_syntax_is_never_executed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    std::fs::write(dir.path().join("keep"), "precious").unwrap();
    let mut l = lease();
    l.env = BTreeMap::from([
        ("SUBST".into(), format!("$(touch {d}/pwned)")),
        ("BACKTICK".into(), format!("`touch {d}/pwned2`")),
        ("SEMI".into(), format!("x; rm -f {d}/keep")),
        ("QUOTE".into(), format!("'; rm -f {d}/keep; echo '")),
    ]);
    l.command = vec!["sh".into(), "-c".into(), format!("touch {d}/pwned3")];
    // A careful hook: it quotes its variables and hands the JSON on as data.
    let script = format!(
        r#"printf '%s' "$GPUX_ENV_JSON" > '{d}/env.json'
printf '%s' "$GPUX_COMMAND_JSON" > '{d}/command.json'
echo $GPUX_ENV_JSON $GPUX_COMMAND_JSON >/dev/null
echo '{{"ssh_host":"h"}}'"#
    );
    let outcome = run_hook(&sh(&script, 5_000, 1_000), &l.env_vars(Phase::Provision)).await;
    assert!(provision_result(&outcome).is_ok(), "{outcome:?}");
    for name in ["pwned", "pwned2", "pwned3"] {
        assert!(!dir.path().join(name).exists(), "{name} was created");
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep")).unwrap(),
        "precious"
    );
    // The values arrived byte for byte.
    let env: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("env.json")).unwrap())
            .unwrap();
    assert_eq!(env, l.env);
    let command: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("command.json")).unwrap())
            .unwrap();
    assert_eq!(command, l.command);
}

#[tokio::test]
async fn output_over_the_cap_keeps_only_the_tail() {
    // 200,000 bytes of 'a', then a last line; the same on stderr.
    let script = "head -c 200000 /dev/zero | tr '\\0' a; echo; echo END; \
                  head -c 200000 /dev/zero | tr '\\0' b >&2; echo ERR-END >&2";
    let outcome = run_hook(&sh(script, 10_000, 1_000), &[]).await;
    let HookOutcome::Exited {
        code: 0,
        stdout_tail,
        stderr_tail,
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(stdout_tail.len(), MAX_HOOK_OUTPUT_BYTES);
    assert!(stdout_tail.ends_with("aaa\nEND\n"));
    assert!(
        stdout_tail
            .bytes()
            .take(MAX_HOOK_OUTPUT_BYTES - 5)
            .all(|b| b == b'a' || b == b'\n')
    );
    assert_eq!(stderr_tail.len(), MAX_HOOK_OUTPUT_BYTES);
    assert!(stderr_tail.ends_with("bbbERR-END\n"));
    assert_eq!(teardown_result(&outcome).unwrap(), "END");
}

#[tokio::test]
async fn a_hook_that_cannot_start_is_a_spawn_failure() {
    let hook = HookConfig {
        argv: vec!["/nonexistent/gpux-hook".into()],
        timeout_ms: 1_000,
        grace_ms: 0,
    };
    let outcome = run_hook(&hook, &[]).await;
    let HookOutcome::SpawnFailed(why) = &outcome else {
        panic!("{outcome:?}");
    };
    assert!(why.starts_with("/nonexistent/gpux-hook: "), "{why}");
    let reason = provision_result(&outcome).unwrap_err().reason;
    assert!(
        reason.starts_with("provision hook could not start: /nonexistent/gpux-hook"),
        "{reason}"
    );
    let empty = HookConfig {
        argv: vec![],
        ..hook
    };
    assert!(matches!(
        run_hook(&empty, &[]).await,
        HookOutcome::SpawnFailed(_)
    ));
}

#[tokio::test]
async fn teardown_reports_its_last_line_as_the_wipe_method() {
    let cases: &[(&str, Result<&str, &str>)] = &[
        (
            "echo 'stopping'; echo 'container removed; nvme format --ses=1'",
            Ok("container removed; nvme format --ses=1"),
        ),
        ("echo '   '", Ok(DEFAULT_WIPE_METHOD)),
        ("true", Ok(DEFAULT_WIPE_METHOD)),
        (
            "echo 'userdel: user gpux-1 is logged in' >&2; exit 8",
            Err("teardown hook exited with code 8: userdel: user gpux-1 is logged in"),
        ),
    ];
    for &(script, want) in cases {
        let outcome = run_hook(
            &sh(script, 5_000, 1_000),
            &lease().env_vars(Phase::Teardown),
        )
        .await;
        let got = teardown_result(&outcome);
        assert_eq!(got.as_deref().map_err(String::as_str), want, "{script}");
    }
    // A long method is cut to the exchange's limit.
    let long = format!("echo '{}'", "w".repeat(3_000));
    let method = teardown_result(&run_hook(&sh(&long, 5_000, 1_000), &[]).await).unwrap();
    assert_eq!(method.len(), MAX_REPORT_TEXT_BYTES);
}
