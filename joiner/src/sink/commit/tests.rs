//! Tests of the commit protocol: two owners of a task, recoveries beside a live writer, lost
//! answers, and checkpoints of datasets written before staging was per writer.

use super::*;
use crate::sink::fixtures::*;
use crate::sink::{SinkOptions, Staged};
use crate::state::{JoinConfig, JoinState, Row};
use featurelog_schemas::featurelog::v1::FeatureLog;
use std::sync::Arc;

#[test]
fn recovery_rolls_committed_files_forward_and_drops_uncommitted_ones() {
    let dir = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    // Epoch 1 committed but the process died before renaming.
    let staged1 = ds.stage("t-0", 1, &rows(1), i64::MIN).unwrap();
    let files1 = staged1.files.clone();
    ds.commit(&committed("t-0", 1, &staged1)).unwrap();
    // Epoch 1 staged by a writer that lost it: never committed.
    let lost = Dataset::open(dir.path(), SinkOptions::default())
        .unwrap()
        .stage("t-0", 1, &rows(3), i64::MIN)
        .unwrap();
    // Another task's staged files are not touched.
    let other = ds.stage("t-1", 1, &rows(7), i64::MIN).unwrap();

    let cp = ds.recover("t-0").unwrap().unwrap();
    assert_eq!(cp.epoch, 1);
    assert_eq!(cp.offsets["features"], 10);
    assert_eq!(visible_files(dir.path()), files1);
    let staged = |s: &Staged| dir.path().join(&s.staging);
    assert!(!staged(&lost).exists(), "a lost epoch's staging is deleted");
    assert!(
        dir.path()
            .join(staged_name(&other.staging, &other.files[0]))
            .exists()
    );
    // Recovering again changes nothing.
    assert_eq!(ds.recover("t-0").unwrap(), Some(cp));
    assert_eq!(visible_files(dir.path()), files1);
    assert_eq!(ds.recover("never").unwrap(), None);
}

/// A restore of a task's state from `checkpoint`, as the runtime does.
fn restore(ds: &Dataset, checkpoint: &Checkpoint) -> Result<JoinState, String> {
    let bytes = ds
        .read_state(checkpoint.state.as_deref().ok_or("no state")?)
        .map_err(|e| e.to_string())?;
    JoinState::restore(
        join_config(),
        &bytes,
        |file: &str| ds.read_state(file).map_err(|e| e.to_string()),
        |_| Err("no log is held by offset".into()),
    )
}

fn join_config() -> JoinConfig {
    JoinConfig {
        features_wait_us: i64::MAX / 4,
        impressions_wait_us: i64::MAX / 4,
        label_window_us: None,
        max_out_of_orderness_us: 0,
        negatives_rate: 0.0,
        max_bytes: usize::MAX,
        event_sources: 1,
    }
}

fn feature_log(request: &str) -> FeatureLog {
    FeatureLog {
        request_id: request.into(),
        row_count: 1,
        candidate_ids: vec!["a".into()],
        ..Default::default()
    }
}

/// Whether `state` holds the features of `request` (its impression makes a row at once).
fn holds(state: &mut JoinState, request: &str) -> bool {
    !state
        .add_event(crate::event::Event {
            request_id: request.into(),
            item_id: "a".into(),
            time_us: 0,
            kind: crate::event::EventKind::Impression,
            labels: BTreeMap::new(),
            event_id: None,
        })
        .is_empty()
}

/// Stages `state`'s snapshot and `rows` as `ds`'s epoch `epoch` of `task`: the checkpoint
/// to commit, and the bytes of its staged files.
fn stage_epoch(
    ds: &Dataset,
    task: &str,
    epoch: u64,
    state: &mut JoinState,
    rows: &[Row],
) -> (Checkpoint, Vec<Vec<u8>>) {
    let staged = ds.stage(task, epoch, rows, i64::MIN).unwrap();
    let snapshot = state.snapshot(epoch, &ds.state_name(task, epoch));
    let name = ds.stage_state(task, epoch, snapshot.bytes).unwrap();
    let bytes = staged
        .files
        .iter()
        .map(|f| ds.storage.get(&staged_name(&staged.staging, f)).unwrap())
        .collect();
    let cp = Checkpoint {
        state: Some(name),
        ..committed(task, epoch, &staged)
    };
    (cp, bytes)
}

/// Two owners of one task (a zombie `a` stalled on storage, and `b`, which took the task
/// over) both stage epoch 2: the one that commits keeps every file its checkpoint names,
/// whatever the other writes late and whatever a recovery deletes.
fn two_writers_of_one_epoch(a: &Dataset, b: &Dataset, observer: &Dataset) {
    let task = "t-0";
    // Epoch 1: committed by a, with r0's log in its state.
    let mut zombie = JoinState::new(join_config());
    zombie.add_features(feature_log("r0"));
    let (cp1, _) = stage_epoch(a, task, 1, &mut zombie, &rows(0));
    a.commit(&cp1).unwrap();
    a.roll_forward(&cp1).unwrap();
    // b takes the task over from checkpoint 1; a goes on, not knowing.
    let mut owner = restore(b, &cp1).unwrap();
    owner.add_features(feature_log("owner"));
    zombie.add_features(feature_log("zombie"));
    // Both stage epoch 2 in the same hour (the same visible names), b commits first.
    let (cp2, owner_bytes) = stage_epoch(b, task, 2, &mut owner, &rows_of("owner", 3));
    b.commit(&cp2).unwrap();
    let owner_state = b.read_state(cp2.state.as_deref().unwrap()).unwrap();
    // a, late, stages its own epoch 2 (rows and state), then finds it fenced.
    let (lost, zombie_bytes) = stage_epoch(a, task, 2, &mut zombie, &rows_of("zombie", 3));
    assert_eq!(lost.files, cp2.files, "the same visible names");
    assert_ne!(zombie_bytes, owner_bytes);
    let err = a.commit(&lost).unwrap_err();
    assert!(matches!(err, SinkError::Fenced { epoch: 2, .. }), "{err}");
    assert_eq!(
        b.read_state(cp2.state.as_deref().unwrap()).unwrap(),
        owner_state,
        "the committed state file is unchanged"
    );
    // Someone recovers the task (a after a restart, or another process): it finishes b's
    // roll forward and deletes what a staged.
    assert_eq!(observer.recover(task).unwrap(), Some(cp2.clone()));
    b.roll_forward(&cp2).unwrap();
    let visible: Vec<Vec<u8>> = cp2
        .files
        .iter()
        .map(|f| observer.storage.get(f).unwrap())
        .collect();
    assert_eq!(visible, owner_bytes, "exactly b's rows are visible");
    assert!(
        !observer
            .storage
            .exists(&staged_name(&lost.staging, &lost.files[0]))
            .unwrap(),
        "the loser's staging of a committed epoch is deleted"
    );
    // A restore from b's checkpoint is b's state.
    let mut restored = restore(observer, &cp2).unwrap();
    assert!(holds(&mut restored, "owner"));
    assert!(!holds(&mut restored, "zombie"));
    // b goes on: epoch 3 refers to b's file of epoch 2 for the owner's log.
    owner.add_features(feature_log("r3"));
    let (cp3, _) = stage_epoch(b, task, 3, &mut owner, &[]);
    b.commit(&cp3).unwrap();
    b.roll_forward(&cp3).unwrap();
    let snapshot_files = |cp: &Checkpoint| {
        let mut files = restore(b, cp).unwrap().segment_files();
        files.extend(cp.state.clone());
        files
    };
    let keep = [snapshot_files(&cp3), snapshot_files(&cp2)].concat();
    b.prune_state(task, &keep, 3).unwrap();
    assert!(
        !observer
            .storage
            .exists(lost.state.as_deref().unwrap())
            .unwrap(),
        "the loser's state file of a committed epoch is pruned"
    );
    let latest = observer.recover(task).unwrap().unwrap();
    assert_eq!(latest, cp3);
    let mut restored = restore(observer, &latest).unwrap();
    assert_eq!(restored.requests(), 3);
    for request in ["r0", "owner", "r3"] {
        assert!(holds(&mut restored, request), "{request}");
    }
    assert!(!holds(&mut restored, "zombie"));
}

#[test]
fn a_zombie_never_changes_or_deletes_what_the_owner_committed() {
    let dir = tempfile::tempdir().unwrap();
    let open = || Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    two_writers_of_one_epoch(&open(), &open(), &open());
}

#[test]
fn on_an_object_store_a_zombie_never_changes_or_deletes_what_the_owner_committed() {
    let (store, a) = in_memory();
    let open = || {
        Dataset::open_object_store(store.clone(), "memory://b", "ds", SinkOptions::default())
            .unwrap()
    };
    two_writers_of_one_epoch(&a, &open(), &open());
}

/// `b` has staged epoch 2 and not committed it yet when someone recovers the task at epoch
/// 1: that staging stays, and b's commit rolls forward.
fn recovery_beside_a_writer_about_to_commit(a: &Dataset, b: &Dataset) {
    let task = "t-0";
    let mut state = JoinState::new(join_config());
    state.add_features(feature_log("r0"));
    let (cp1, _) = stage_epoch(a, task, 1, &mut state, &rows(0));
    a.commit(&cp1).unwrap();
    a.roll_forward(&cp1).unwrap();
    let mut owner = restore(b, &cp1).unwrap();
    owner.add_features(feature_log("owner"));
    let (cp2, owner_bytes) = stage_epoch(b, task, 2, &mut owner, &rows_of("owner", 3));
    assert_eq!(a.recover(task).unwrap(), Some(cp1));
    for file in &cp2.files {
        assert!(
            a.storage.exists(&staged_name(&cp2.staging, file)).unwrap(),
            "{file} is still staged"
        );
    }
    b.commit(&cp2).unwrap();
    b.roll_forward(&cp2).unwrap();
    assert_eq!(a.recover(task).unwrap(), Some(cp2.clone()));
    let visible: Vec<Vec<u8>> = cp2
        .files
        .iter()
        .map(|f| a.storage.get(f).unwrap())
        .collect();
    assert_eq!(visible, owner_bytes);
    let mut restored = restore(a, &cp2).unwrap();
    assert!(holds(&mut restored, "owner"));
    assert!(holds(&mut restored, "r0"));
}

#[test]
fn a_recovery_keeps_the_staging_of_an_epoch_not_committed_yet() {
    let dir = tempfile::tempdir().unwrap();
    let open = || Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    recovery_beside_a_writer_about_to_commit(&open(), &open());
}

#[test]
fn on_an_object_store_a_recovery_keeps_the_staging_of_an_epoch_not_committed_yet() {
    let (store, a) = in_memory();
    let b = Dataset::open_object_store(store.clone(), "memory://b", "ds", SinkOptions::default())
        .unwrap();
    recovery_beside_a_writer_about_to_commit(&a, &b);
}

#[test]
fn a_second_owner_cannot_commit_the_same_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    for epoch in 1..=3 {
        ds.commit(&checkpoint("t-0", epoch, vec![])).unwrap();
    }
    let err = ds.commit(&checkpoint("t-0", 3, vec![])).unwrap_err();
    assert!(matches!(err, SinkError::Fenced { epoch: 3, .. }), "{err}");
}

#[test]
fn state_snapshots_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    let name = ds.stage_state("t/0", 4, b"snapshot".to_vec()).unwrap();
    assert!(name.starts_with("_featurelog/state/t_0/"));
    assert_eq!(ds.read_state(&name).unwrap(), b"snapshot");
}

#[test]
fn a_commit_whose_answer_was_lost_is_recognised_as_this_writer_s_and_another_owner_s_is_not() {
    let (store, a) = in_memory();
    let task = "t-0";
    let mut state = JoinState::new(join_config());
    state.add_features(feature_log("r0"));
    let (cp1, _) = stage_epoch(&a, task, 1, &mut state, &rows(0));
    let lossy = Dataset {
        storage: Arc::new(Watched::new(a.storage.clone(), Creates::AnswerLost)),
        ..a.clone()
    };
    // Its own checkpoint, found there on the retry: refused, but recognised as its own.
    assert!(matches!(
        lossy.commit(&cp1),
        Err(SinkError::Fenced { epoch: 1, .. })
    ));
    assert!(lossy.is_own_commit(&cp1));
    lossy.roll_forward(&cp1).unwrap();
    assert_eq!(a.recover(task).unwrap(), Some(cp1));
    // Another writer's epoch 2 is there first: this writer's epoch 2 is fenced.
    let b = Dataset::open_object_store(store.clone(), "memory://b", "ds/", SinkOptions::default())
        .unwrap();
    let (theirs, _) = stage_epoch(&b, task, 2, &mut state, &rows(2));
    b.commit(&theirs).unwrap();
    let (mine, _) = stage_epoch(&lossy, task, 2, &mut state, &rows(2));
    assert!(matches!(
        lossy.commit(&mine),
        Err(SinkError::Fenced { epoch: 2, .. })
    ));
    assert!(!lossy.is_own_commit(&mine));
    assert!(b.is_own_commit(&theirs));
    // A checkpoint that names no staging of this writer is never taken for its own.
    let legacy = checkpoint(task, 2, vec![]);
    assert!(!a.is_own_commit(&legacy));
}

#[test]
fn a_checkpoint_that_names_no_staging_is_refused_naming_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    let staged = ds.stage("t-0", 1, &rows(1), i64::MIN).unwrap();
    let cp = committed("t-0", 1, &staged);
    ds.commit(&cp).unwrap();
    let name = ds.checkpoint_name("t-0", 1);
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(&name)).unwrap()).unwrap();
    json.as_object_mut().unwrap().remove("staging");
    std::fs::write(dir.path().join(&name), json.to_string()).unwrap();
    let e = ds.recover("t-0").unwrap_err().to_string();
    assert!(e.contains(&name) && e.contains("`staging`"), "{e}");
}
