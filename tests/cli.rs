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

/// `featurelog join --check-config` prints where the run will write, resolved as the run
/// resolves it: a relative `output.path` against the config file's directory (and that against
/// the working directory), environment overrides applied, `s3://` URLs as they are; and a path
/// under a regular file is refused, naming the file.
#[test]
fn join_check_config_prints_the_paths_the_run_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    std::fs::write(
        conf.join("join.toml"),
        "[kafka]\nbootstrap-servers = \"127.0.0.1:9092\"\n[input]\nfeatures-topic = \"fl.logs\"\n\
         events-topic = \"app.events\"\n[output]\npath = \"data\"\n",
    )
    .unwrap();
    let check = |env: &[(&str, &str)]| {
        // The config named by a relative path, from the directory above it.
        let out = Command::new(env!("CARGO_BIN_EXE_featurelog"))
            .args(["join", "--check-config", "conf/join.toml"])
            .current_dir(dir.path())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let root = std::fs::canonicalize(dir.path()).unwrap().join("conf/data");
    let (code, stdout, stderr) = check(&[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let line = |what: &str| {
        stdout
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(what).map(str::trim))
            .unwrap_or_else(|| panic!("no {what} in {stdout}"))
            .to_owned()
    };
    assert_eq!(line("dataset"), root.display().to_string(), "{stdout}");
    assert_eq!(
        line("checkpoints"),
        format!(
            "{}/_featurelog/checkpoints/fl_logs-<partition>/",
            root.display()
        )
    );
    assert_eq!(
        line("state"),
        format!("{}/_featurelog/state/fl_logs-<partition>/", root.display())
    );
    assert_eq!(
        line("staging"),
        format!(
            "{}/_featurelog/staging/fl_logs-<partition>/",
            root.display()
        )
    );
    assert_eq!(
        line("late rows"),
        format!("{}/late/dt=YYYY-MM-DD/hr=HH/", root.display())
    );

    // The environment overrides the file, and the override is resolved the same way.
    let (code, stdout, stderr) = check(&[("FEATURELOG_JOIN__OUTPUT__PATH", "elsewhere")]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let elsewhere = std::fs::canonicalize(dir.path())
        .unwrap()
        .join("conf/elsewhere");
    assert!(
        stdout.contains(&format!("dataset      {}\n", elsewhere.display())),
        "{stdout}"
    );

    let (code, stdout, stderr) = check(&[
        ("FEATURELOG_JOIN__OUTPUT__PATH", "s3://training/joined/"),
        ("AWS_REGION", "us-east-1"),
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("dataset      s3://training/joined\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("s3://training/joined/_featurelog/checkpoints/fl_logs-<partition>/"),
        "{stdout}"
    );

    // A dataset that cannot be created is refused before the run finds out.
    std::fs::write(conf.join("file.txt"), "not a directory").unwrap();
    let (code, stdout, stderr) = check(&[("FEATURELOG_JOIN__OUTPUT__PATH", "file.txt/dataset")]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    let file = std::fs::canonicalize(conf.join("file.txt")).unwrap();
    assert!(
        stderr.contains(&format!("{} is a regular file", file.display())),
        "{stderr}"
    );
}
