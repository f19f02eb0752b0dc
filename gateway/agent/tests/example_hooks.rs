//! The example Docker hooks (`examples/hooks/docker-*.sh`) run through the agent's hook runner
//! against a fake `docker` that records its arguments: the lease's GPUs, ports, keys, command
//! and environment reach `docker run` as separate arguments (a buyer's `$(…)` stays text), the
//! access line is what the ready report expects, and teardown removes the container and the
//! scratch directory; a missing image or command exits 65 (the launch spec's fault), a
//! registry out of reach does not. Needs bash and jq (skipped, saying so, when jq is missing).

use gpux_agent::config::HookConfig;
use gpux_agent::hooks::{
    AccessDetails, LeaseContext, Phase, provision_result, run_hook, teardown_result,
};
use gpux_client::wire::FailureCauseDto;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const FAKE_DOCKER: &str = r#"#!/bin/bash
# A stand-in for the docker CLI: records `run`, answers `port`, `inspect` and `ps`.
dir="$(dirname "$0")"
case "$1" in
  run) printf '%s\0' "$@" >"$dir/run.args"; touch "$dir/running"; echo 0123456789ab ;;
  pull) echo "${@: -1}" >>"$dir/pulled" ;;
  rm) echo "$*" >>"$dir/removed"; rm -f "$dir/running" ;;
  inspect) echo true ;;
  port)
    case "$3" in
      22/tcp) echo 0.0.0.0:32768 ;;
      8888/tcp) echo 0.0.0.0:32769 ;;
      *) echo "no port $3" >&2; exit 1 ;;
    esac ;;
  ps) if [ -e "$dir/running" ]; then echo 0123456789ab; fi ;;
  *) echo "fake docker: $*" >&2 ;;
esac
"#;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hooks")
}

fn have_jq() -> bool {
    std::process::Command::new("jq")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A temp dir with the fake docker and a hooks.env pointing at it.
fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let docker = dir.path().join("docker");
    std::fs::write(&docker, FAKE_DOCKER).unwrap();
    std::fs::set_permissions(&docker, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let env = dir.path().join("hooks.env");
    std::fs::write(
        &env,
        format!(
            "PUBLIC_HOST=203.0.113.7\nDOCKER={}\nSCRATCH_ROOT={}\nSTART_WAIT_S=0\n",
            docker.display(),
            dir.path().join("scratch").display()
        ),
    )
    .unwrap();
    (dir, env)
}

fn hook(script: &str, env: &Path) -> HookConfig {
    HookConfig {
        argv: vec![
            "/bin/bash".into(),
            examples().join(script).display().to_string(),
            env.display().to_string(),
        ],
        timeout_ms: 20_000,
        grace_ms: 1_000,
    }
}

fn lease(pwned: &Path) -> LeaseContext {
    LeaseContext {
        lease_id: "2317352961".into(),
        node_id: "1932525568".into(),
        gpu_indexes: vec![0, 1],
        gpu_uuids: vec!["GPU-aaaa".into(), "GPU-bbbb".into()],
        image: Some("nvcr.io/nvidia/pytorch:24.05-py3".into()),
        command: vec!["python".into(), "-c".into(), "print('a b')".into()],
        ssh_keys: vec!["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv buyer@laptop".into()],
        ports: vec![8888],
        disk_gb: 0,
        env: BTreeMap::from([
            ("EPOCHS".into(), "3".into()),
            ("EVIL".into(), format!("$(touch {})", pwned.display())),
            ("LINES".into(), "one\ntwo".into()),
        ]),
        lease_end_ms: Some(1_778_576_400_000),
        gang: None,
    }
}

#[tokio::test]
async fn the_docker_hooks_provision_and_tear_down_a_lease() {
    if !have_jq() {
        eprintln!("SKIPPED: the example hooks need jq, which is not installed");
        return;
    }
    let (dir, env) = setup();
    let pwned = dir.path().join("pwned");
    let l = lease(&pwned);
    let outcome = run_hook(
        &hook("docker-provision.sh", &env),
        &l.env_vars(Phase::Provision),
    )
    .await;
    let access = provision_result(&outcome).unwrap_or_else(|e| panic!("{e}\n{outcome:?}"));
    assert_eq!(
        access,
        AccessDetails {
            ssh_host: Some("203.0.113.7".into()),
            ssh_port: Some(32768),
            ssh_user: Some("root".into()),
            urls: BTreeMap::from([(8888, "http://203.0.113.7:32769".into())]),
        }
    );
    assert!(!pwned.exists(), "a buyer's $(…) ran");

    let args: Vec<String> = std::fs::read_to_string(dir.path().join("run.args"))
        .unwrap()
        .split_terminator('\0')
        .map(String::from)
        .collect();
    let after = |flag: &str| -> Vec<&str> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    };
    assert_eq!(after("--gpus"), ["\"device=GPU-aaaa,GPU-bbbb\""]);
    assert_eq!(after("--name"), ["gpux-lease-2317352961"]);
    assert_eq!(
        after("--env"),
        [
            "CUDA_DEVICE_ORDER=PCI_BUS_ID",
            "EPOCHS=3",
            &format!("EVIL=$(touch {})", pwned.display()),
            "LINES=one\ntwo",
        ]
    );
    assert_eq!(after("--publish"), ["8888", "22"]);
    // The image, then the fixed entry script, then the buyer's command as its arguments.
    let image_at = args
        .iter()
        .position(|a| a == "nvcr.io/nvidia/pytorch:24.05-py3")
        .unwrap();
    assert_eq!(args[image_at - 1], "/bin/sh"); // --entrypoint /bin/sh
    assert_eq!(args[image_at + 1], "-c");
    assert_eq!(
        &args[image_at + 3..],
        ["gpux-entry", "python", "-c", "print('a b')"]
    );
    let scratch = dir.path().join("scratch/gpux-lease-2317352961");
    assert_eq!(
        std::fs::read_to_string(scratch.join(".authorized_keys")).unwrap(),
        format!("{}\n", l.ssh_keys[0])
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("pulled")).unwrap(),
        "nvcr.io/nvidia/pytorch:24.05-py3\n"
    );

    let outcome = run_hook(
        &hook("docker-teardown.sh", &env),
        &l.env_vars(Phase::Teardown),
    )
    .await;
    let method = teardown_result(&outcome).unwrap_or_else(|e| panic!("{e}\n{outcome:?}"));
    assert!(
        method.starts_with(
            "container gpux-lease-2317352961 removed with its volumes (docker rm --force --volumes)"
        ),
        "{method}"
    );
    assert!(!scratch.exists());
    assert!(!dir.path().join("running").exists());
    // Again (the agent restarted): nothing left to remove, still a clean record.
    let again = run_hook(
        &hook("docker-teardown.sh", &env),
        &l.env_vars(Phase::Teardown),
    )
    .await;
    assert_eq!(teardown_result(&again).unwrap(), method);
}

#[tokio::test]
async fn a_failing_docker_run_is_reported_with_its_error_and_cleaned_up() {
    if !have_jq() {
        eprintln!("SKIPPED: the example hooks need jq, which is not installed");
        return;
    }
    let (dir, env) = setup();
    // docker run fails the way a missing NVIDIA runtime does.
    let failing = FAKE_DOCKER.replace(
        "run) printf",
        "run) echo 'docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].' >&2; exit 125; printf",
    );
    std::fs::write(dir.path().join("docker"), failing).unwrap();
    let l = lease(&dir.path().join("pwned"));
    let outcome = run_hook(
        &hook("docker-provision.sh", &env),
        &l.env_vars(Phase::Provision),
    )
    .await;
    let reason = provision_result(&outcome).unwrap_err().reason;
    assert!(
        reason.starts_with("provision hook exited with code 125: "),
        "{reason}"
    );
    assert!(
        reason.ends_with("could not select device driver \"\" with capabilities: [[gpu]]."),
        "{reason}"
    );
    // The EXIT trap removed whatever was half made.
    assert!(
        std::fs::read_to_string(dir.path().join("removed"))
            .unwrap()
            .lines()
            .count()
            >= 2
    );
}

/// Issue 25: the buyer's launch spec at fault makes the Docker hook exit 65, which the agent
/// reports with cause `launch_spec` and docker's message; the registry out of reach is this
/// host's failure (cause `node`).
#[tokio::test]
async fn a_missing_image_or_command_is_the_launch_specs_fault_a_registry_outage_is_not() {
    if !have_jq() {
        eprintln!("SKIPPED: the example hooks need jq, which is not installed");
        return;
    }
    let cases = [
        (
            "pull) echo 'Error response from daemon: manifest for nvcr.io/nvidia/pytorch:24.05-py3 not found: manifest unknown: manifest unknown' >&2; exit 1 ;;\n  pull-unused)",
            FailureCauseDto::LaunchSpec,
            "the image nvcr.io/nvidia/pytorch:24.05-py3 cannot be pulled",
        ),
        (
            "pull) echo 'Error response from daemon: pull access denied for nvcr.io/nvidia/pytorch, repository does not exist or may require docker login' >&2; exit 1 ;;\n  pull-unused)",
            FailureCauseDto::LaunchSpec,
            "cannot be pulled",
        ),
        (
            "run) echo 'docker: Error response from daemon: failed to create task: exec: \"python\": executable file not found in $PATH' >&2; exit 127 ;;\n  run-unused)",
            FailureCauseDto::LaunchSpec,
            "the launch command cannot run in nvcr.io/nvidia/pytorch:24.05-py3 (docker run exited 127)",
        ),
        (
            "pull) echo 'Error response from daemon: Get \"https://nvcr.io/v2/\": dial tcp: connection refused' >&2; exit 1 ;;\n  pull-unused)",
            FailureCauseDto::Node,
            "connection refused",
        ),
    ];
    for (replacement, cause, tail) in cases {
        let (dir, env) = setup();
        let verb = &replacement[..replacement.find(')').unwrap() + 1];
        let fake = FAKE_DOCKER.replacen(verb, replacement, 1);
        assert_ne!(fake, FAKE_DOCKER);
        std::fs::write(dir.path().join("docker"), fake).unwrap();
        let l = lease(&dir.path().join("pwned"));
        let outcome = run_hook(
            &hook("docker-provision.sh", &env),
            &l.env_vars(Phase::Provision),
        )
        .await;
        let failure = provision_result(&outcome).unwrap_err();
        assert_eq!(failure.cause, cause, "{failure:?}\n{outcome:?}");
        assert!(failure.reason.ends_with(tail), "{failure:?}");
    }
}

/// Issue 26: the example verify hook against a fake docker (its containers answer as the
/// PyTorch measurement and `all_reduce_perf` would, the latter with a recorded real output)
/// and a fake `dcgmi` (a recorded real `dcgmi diag -r 1`): one container per GPU pinned to its
/// UUID, the all-reduce over all of them, `dcgmi diag -r 1` on the lease's indexes; its last
/// stdout line is the figures the agent reads, the raw outputs parsed by the agent. The
/// script has not met hardware (its header says so).
#[tokio::test]
async fn the_verify_hook_measures_each_gpu_and_leaves_the_raw_outputs_to_the_agent() {
    if !have_jq() {
        eprintln!("skipped: jq is not installed");
        return;
    }
    const FAKE_VERIFY_DOCKER: &str = r#"#!/bin/bash
dir="$(dirname "$0")"
case "$1" in
  image) exit 0 ;;
  run)
    n=$(find "$dir" -maxdepth 1 -name 'run.*.args' | wc -l)
    printf '%s\0' "$@" >"$dir/run.$n.args"
    args=("$@")
    if [[ " $* " == *" python "* ]]; then
      idx="${args[-4]}"
      echo "=== NVIDIA PyTorch banner ==="
      echo "{\"index\": $idx, \"bf16_tflops\": 70$idx.5, \"mem_bw_gbps\": 2900.0}"
    elif [[ "$*" == *all_reduce_perf* ]]; then
      cat "$dir/nccl.txt"
    fi ;;
  rm) ;;
  *) echo "fake docker: $*" >&2 ;;
esac
"#;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = tempfile::tempdir().unwrap();
    let exe = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        p
    };
    let docker = exe("docker", FAKE_VERIFY_DOCKER);
    let dcgmi = exe(
        "dcgmi",
        "#!/bin/bash\necho \"$*\" >\"$(dirname \"$0\")/dcgmi.args\"\ncat \"$(dirname \"$0\")/dcgm.txt\"\n",
    );
    std::fs::copy(
        fixtures.join("all_reduce_perf_h100_2x8.txt"),
        dir.path().join("nccl.txt"),
    )
    .unwrap();
    std::fs::copy(
        fixtures.join("dcgmi_diag_r1_pass.txt"),
        dir.path().join("dcgm.txt"),
    )
    .unwrap();
    let env = dir.path().join("hooks.env");
    std::fs::write(
        &env,
        format!("DOCKER={}\nDCGMI={}\n", docker.display(), dcgmi.display()),
    )
    .unwrap();
    let ctx = LeaseContext {
        lease_id: "77".into(),
        node_id: "1".into(),
        gpu_indexes: vec![3, 5],
        gpu_uuids: vec!["GPU-aaa".into(), "GPU-bbb".into()],
        ..LeaseContext::default()
    };
    let outcome = run_hook(&hook("verify.sh", &env), &ctx.env_vars(Phase::Verify)).await;
    let gpux_agent::hooks::HookOutcome::Exited {
        code: 0,
        stdout_tail,
        stderr_tail,
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    let figures = gpux_agent::verify::HookFigures::from_stdout(stdout_tail)
        .unwrap()
        .resolved();
    assert_eq!(figures.gpus.len(), 2);
    assert_eq!(
        (figures.gpus[0].index, figures.gpus[0].bf16_tflops),
        (3, Some(703.5))
    );
    assert_eq!(
        (figures.gpus[1].index, figures.gpus[1].mem_bw_gbps),
        (5, Some(2900.0))
    );
    assert_eq!(figures.allreduce_busbw_gbps, Some(338.82));
    assert_eq!(
        figures.dcgm_diag,
        Some(gpux_client::wire::DcgmResultDto::Pass)
    );
    assert!(stderr_tail.contains("Avg bus bandwidth"), "{stderr_tail}");
    let runs: Vec<String> = (0..)
        .map_while(|n| std::fs::read_to_string(dir.path().join(format!("run.{n}.args"))).ok())
        .collect();
    let runs: Vec<Vec<&str>> = runs.iter().map(|r| r.split('\0').collect()).collect();
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert!(runs[0].contains(&"device=GPU-aaa"), "{:?}", runs[0]);
    assert!(runs[1].contains(&"device=GPU-bbb"), "{:?}", runs[1]);
    assert!(
        runs[2].contains(&"\"device=GPU-aaa,GPU-bbb\""),
        "{:?}",
        runs[2]
    );
    assert!(
        runs.iter().all(|r| r.contains(&"none")),
        "no network: {runs:?}"
    );
    let dcgm_args = std::fs::read_to_string(dir.path().join("dcgmi.args")).unwrap();
    assert_eq!(dcgm_args.trim(), "diag -r 1 -i 3,5");
    let header = std::fs::read_to_string(examples().join("verify.sh")).unwrap();
    assert!(header.contains("NOT YET RUN ON HARDWARE"));
    assert!(header.contains("nvcr.io/nvidia/pytorch:24.05-py3"));
}
