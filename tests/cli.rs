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
    for sub in ["sidecar", "join", "diff", "demo", "dev-broker"] {
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
