//! The command line as a user meets it: the subcommands are listed, and the ones that are not
//! built yet say so and exit 2 instead of pretending to work.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::process::Command;

fn featurelog(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_lists_every_subcommand() {
    let out = featurelog(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for sub in ["sidecar", "join", "diff", "demo", "dev-broker", "inspect"] {
        assert!(help.contains(sub), "--help lists {sub}:\n{help}");
    }
}

#[test]
fn dev_broker_help_warns_it_is_not_for_production() {
    let out = featurelog(&["dev-broker", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("not for production"), "{help}");
}

#[test]
fn the_sample_sidecar_config_passes_check_config() {
    let sample = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/services/sidecar/sidecar.example.toml"
    );
    let out = featurelog(&["sidecar", "--check-config", sample]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("valid"), "{stdout}");
}

#[test]
fn an_invalid_config_is_refused_with_exit_code_2_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sidecar.toml");
    std::fs::write(
        &path,
        "upstream = \"http://127.0.0.1:1\"\nallow-list = \"a.toml\"\nlisten = 5\n",
    )
    .unwrap();
    let out = featurelog(&["sidecar", "--check-config", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sidecar.toml") && stderr.contains("listen"),
        "{stderr}"
    );
}

#[test]
fn tls_files_that_do_not_load_fail_check_config_and_the_start_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sidecar.toml");
    std::fs::write(dir.path().join("a.toml"), "").unwrap();
    std::fs::write(dir.path().join("tls.crt"), "not a certificate").unwrap();
    std::fs::write(dir.path().join("tls.key"), "not a key").unwrap();
    std::fs::write(
        &path,
        "upstream = \"http://127.0.0.1:1\"\nallow-list = \"a.toml\"\nmode = \"pass-through\"\n\
         listen = \"127.0.0.1:0\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n\
         [tls]\ncert = \"tls.crt\"\nkey = \"tls.key\"\n",
    )
    .unwrap();
    for mode in ["--check-config", "--config"] {
        let out = featurelog(&["sidecar", mode, path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{mode}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("tls.crt") && stderr.contains("no PEM certificate"),
            "{mode}: {stderr}"
        );
    }
}

#[test]
fn a_sidecar_whose_allow_list_is_missing_does_not_start_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sidecar.toml");
    std::fs::write(
        &path,
        "upstream = \"http://127.0.0.1:1\"\nallow-list = \"missing.toml\"\n[kafka]\nbootstrap-servers = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let out = featurelog(&["sidecar", "--config", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("missing.toml"), "{stderr}");
}

#[test]
fn configs_load_beside_an_environment_variable_that_is_not_text() {
    use std::os::unix::ffi::OsStrExt;
    // Another program's variable with a Latin-1 value: reading the environment panicked.
    let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9");
    for (command, sample) in [
        ("sidecar", "/services/sidecar/sidecar.example.toml"),
        ("join", "/joiner/join.example.toml"),
    ] {
        let sample = format!("{}{sample}", env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(env!("CARGO_BIN_EXE_featurelog"))
            .args([command, "--check-config", &sample])
            .env("LEGACY_GREETING", latin1)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // One of ours that cannot be read is named, not skipped.
    let out = Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args([
            "join",
            "--check-config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/joiner/join.example.toml"),
        ])
        .env("FEATURELOG_JOIN__GROUP", latin1)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("FEATURELOG_JOIN__GROUP"), "{stderr}");
}
