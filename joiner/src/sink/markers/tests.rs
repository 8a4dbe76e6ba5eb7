//! Tests of the `_SUCCESS` markers: which hours get one and when, with and without rows, per model,
//! and what is listed or checked again.

use super::*;
use crate::sink::SinkOptions;
use crate::sink::fixtures::*;
use std::sync::Arc;

#[test]
fn hours_days_and_checkpoints_once_seen_are_not_listed_or_checked_again() {
    use std::sync::atomic::Ordering::Relaxed;
    const HOUR: i64 = 3_600_000_000;
    let store = memory();
    let mut ds = on_memory(&store, SinkOptions::default());
    let counting = Arc::new(Watched::new(ds.storage.clone(), Creates::AsStored));
    ds.storage = counting.clone();
    let tasks = vec!["t-0".to_string()];
    // Rows in hours 00 and 01 of day one and hour 00 of day two.
    let mut all = rows(0);
    all.extend(rows(24));
    let staged = ds.stage("t-0", 1, &all, i64::MIN).unwrap();
    let mut cp = committed("t-0", 1, &staged);
    cp.watermark_us = 2 * HOUR;
    ds.commit(&cp).unwrap();
    ds.roll_forward(&cp).unwrap();
    assert_eq!(
        ds.mark_complete(&tasks, 0).unwrap(),
        ["dt=1970-01-01/hr=00", "dt=1970-01-01/hr=01"]
    );
    let (lists, checks) = (counting.lists.load(Relaxed), counting.checks.load(Relaxed));
    // Nothing new: the marked hours are not checked again.
    assert!(ds.mark_complete(&tasks, 0).unwrap().is_empty());
    assert_eq!(counting.checks.load(Relaxed), checks);
    assert_eq!(
        counting.lists.load(Relaxed),
        lists + 2,
        "both days still listed"
    );
    // Day one ends: it is listed one last time, then never again.
    let mut cp2 = checkpoint("t-0", 2, vec![]);
    cp2.watermark_us = 25 * HOUR;
    ds.commit(&cp2).unwrap();
    // Day one's hours without rows (02 to 23) get their markers too.
    let expected: Vec<String> = ["dt=1970-01-02/hr=00".to_string()]
        .into_iter()
        .chain((2..24).map(|h| format!("dt=1970-01-01/hr={h:02}")))
        .collect();
    assert_eq!(ds.mark_complete(&tasks, 0).unwrap(), expected);
    let lists = counting.lists.load(Relaxed);
    assert!(ds.mark_complete(&tasks, 0).unwrap().is_empty());
    assert_eq!(counting.lists.load(Relaxed), lists + 1, "only day two");
    // The task's checkpoints were listed once; later epochs are found by probing.
    assert_eq!(counting.checkpoint_lists.load(Relaxed), 1);
    // A fresh process (another Dataset) finds the markers and marks nothing twice.
    let again = on_memory(&store, SinkOptions::default());
    assert!(again.mark_complete(&tasks, 0).unwrap().is_empty());
}

#[test]
fn an_hour_is_marked_complete_only_once_every_committed_file_of_it_is_visible() {
    const HOUR: i64 = 3_600_000_000;
    let store = memory();
    let writer = on_memory(&store, SinkOptions::default());
    let tasks = vec!["t-0".to_string()];
    let first = writer.stage("t-0", 1, &rows(0), i64::MIN).unwrap();
    let cp1 = committed("t-0", 1, &first);
    writer.commit(&cp1).unwrap();
    writer.roll_forward(&cp1).unwrap();
    // The writer commits more rows of the same hours and dies before its roll forward.
    let second = writer.stage("t-0", 2, &rows(0), i64::MIN).unwrap();
    let mut cp2 = committed("t-0", 2, &second);
    cp2.watermark_us = 2 * HOUR;
    writer.commit(&cp2).unwrap();
    let observer = on_memory(&store, SinkOptions::default());
    assert_eq!(
        observer.mark_complete(&tasks, 0).unwrap(),
        ["dt=1970-01-01/hr=00", "dt=1970-01-01/hr=01"]
    );
    for file in &cp2.files {
        assert!(observer.storage.exists(file).unwrap(), "{file} not visible");
    }
}

#[test]
fn partitioned_by_model_each_model_has_its_own_hours_markers_and_late_area() {
    const HOUR: i64 = 3_600_000_000;
    let options = SinkOptions {
        partition_by_model: true,
        ..SinkOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let local = Dataset::open(dir.path(), options.clone()).unwrap();
    let (store, mut remote) = in_memory();
    remote.options = options.clone();
    for ds in [local, remote] {
        let tasks = vec!["t-0".to_string()];
        // The ranker has rows in hours 0-3, a model with a name no path takes as it is
        // in hours 0-1, all in one commit.
        let odd = "a/b c%";
        let mut all = model_rows("ranker", "r1", 0);
        all.extend(model_rows(odd, "r2", 0));
        all.extend(model_rows("ranker", "r3", 2));
        let staged = ds.stage("t-0", 1, &all, i64::MIN).unwrap();
        assert_eq!(staged.late_rows, 0);
        let mut dirs: Vec<&str> = staged
            .files
            .iter()
            .map(|f| f.rsplit_once('/').unwrap().0)
            .collect();
        dirs.dedup();
        assert_eq!(
            dirs,
            [
                "model=a%2Fb%20c%25/dt=1970-01-01/hr=00",
                "model=a%2Fb%20c%25/dt=1970-01-01/hr=01",
                "model=ranker/dt=1970-01-01/hr=00",
                "model=ranker/dt=1970-01-01/hr=01",
                "model=ranker/dt=1970-01-01/hr=02",
                "model=ranker/dt=1970-01-01/hr=03",
            ]
        );
        let mut cp = committed("t-0", 1, &staged);
        cp.watermark_us = 5 * HOUR;
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
        for file in &cp.files {
            assert!(ds.storage.exists(file).unwrap(), "{file} not visible");
        }
        // Each model's complete hours, and the other model's hour 2 without rows (the
        // dataset has rows in a later hour); hour 3 waits for a later hour with rows.
        let mut marked = ds.mark_complete(&tasks, 0).unwrap();
        marked.sort();
        assert_eq!(
            marked,
            [
                "model=a%2Fb%20c%25/dt=1970-01-01/hr=00",
                "model=a%2Fb%20c%25/dt=1970-01-01/hr=01",
                "model=a%2Fb%20c%25/dt=1970-01-01/hr=02",
                "model=ranker/dt=1970-01-01/hr=00",
                "model=ranker/dt=1970-01-01/hr=01",
                "model=ranker/dt=1970-01-01/hr=02",
                "model=ranker/dt=1970-01-01/hr=03",
            ]
        );
        assert!(ds.mark_complete(&tasks, 0).unwrap().is_empty());
        // Rows of a complete hour go to the late area, under their model.
        let late = ds
            .stage("t-0", 2, &model_rows(odd, "r4", 0), cp.watermark_us)
            .unwrap();
        assert_eq!(late.late_rows, 2);
        assert!(
            late.files
                .iter()
                .all(|f| f.starts_with("late/model=a%2Fb%20c%25/dt=1970-01-01/hr=0")),
            "{:?}",
            late.files
        );
    }
    // On the object store the escapes are the keys' own, as hive readers decode them.
    assert!(
        keys(&store)
            .iter()
            .any(|k| k.starts_with("ds/model=a%2Fb%20c%25/dt=1970-01-01/hr=00/part-")),
        "{:?}",
        keys(&store)
    );
}

#[test]
fn completeness_finds_the_newest_checkpoint_after_the_one_it_knew_was_pruned() {
    const HOUR: i64 = 3_600_000_000;
    let store = memory();
    let options = SinkOptions {
        checkpoints_kept: 2,
        ..SinkOptions::default()
    };
    let owner = on_memory(&store, options.clone());
    let observer = on_memory(&store, options);
    let tasks = vec!["t-0".to_string()];
    let staged = owner.stage("t-0", 1, &rows(0), i64::MIN).unwrap();
    let cp = committed("t-0", 1, &staged);
    owner.commit(&cp).unwrap();
    owner.roll_forward(&cp).unwrap();
    // The observer sees epoch 1, whose watermark completes nothing.
    assert!(observer.mark_complete(&tasks, 0).unwrap().is_empty());
    for epoch in 2..=6 {
        let mut cp = checkpoint("t-0", epoch, vec![]);
        cp.watermark_us = 3 * HOUR;
        owner.commit(&cp).unwrap();
        owner.prune_checkpoints("t-0", epoch).unwrap();
    }
    assert_eq!(checkpoint_epochs_on_disk(&owner, "t-0"), [5, 6]);
    // Epochs 1 and 2 are gone: the observer looks again and finds epoch 6's watermark.
    assert_eq!(
        observer.mark_complete(&tasks, 0).unwrap(),
        ["dt=1970-01-01/hr=00", "dt=1970-01-01/hr=01"]
    );
}

#[test]
fn hours_without_rows_are_marked_between_the_first_and_newest_hours_with_rows() {
    let dir = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    let tasks = vec!["t-0".to_string()];
    let marker = |hour: u32| {
        dir.path()
            .join(format!("dt=1970-01-01/hr={hour:02}/_SUCCESS"))
    };
    // Rows at 00, 01 and at 05, 06; nothing in between.
    let staged = ds
        .stage("t-0", 1, &[rows(0), rows(5)].concat(), i64::MIN)
        .unwrap();
    let mut cp = committed("t-0", 1, &staged);
    cp.watermark_us = 10 * HOUR_US;
    ds.commit(&cp).unwrap();
    ds.roll_forward(&cp).unwrap();
    let mut marked = ds.mark_complete(&tasks, 0).unwrap();
    marked.sort();
    let expected: Vec<String> = (0..=6)
        .map(|h| format!("dt=1970-01-01/hr={h:02}"))
        .collect();
    assert_eq!(marked, expected);
    for hour in 0..=6 {
        assert!(marker(hour).exists(), "hour {hour}");
    }
    // Hours after the newest with rows wait for later rows, however far the watermark.
    assert!(!marker(7).exists());
    assert!(ds.mark_complete(&tasks, 0).unwrap().is_empty());
    // A restarted joiner finds them marked.
    let again = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    assert!(again.mark_complete(&tasks, 0).unwrap().is_empty());
    // Rows at 10 and 11 (the task's committed watermark is 10:00): hours 07 to 09 have
    // none and are complete now.
    let staged = again.stage("t-0", 2, &rows(10), 10 * HOUR_US).unwrap();
    assert_eq!(staged.late_rows, 0);
    let mut cp = committed("t-0", 2, &staged);
    cp.watermark_us = 20 * HOUR_US;
    again.commit(&cp).unwrap();
    again.roll_forward(&cp).unwrap();
    let mut marked = again.mark_complete(&tasks, 0).unwrap();
    marked.sort();
    let expected: Vec<String> = (7..=11)
        .map(|h| format!("dt=1970-01-01/hr={h:02}"))
        .collect();
    assert_eq!(marked, expected);
    // Readers see only the rows: marker-only hours hold no data file.
    let data: Vec<String> = visible_files(dir.path())
        .into_iter()
        .filter(|f| f.ends_with(".parquet"))
        .collect();
    assert_eq!(data.len(), 6, "{data:?}");
}

#[test]
fn hours_are_marked_complete_by_the_slowest_task_and_late_rows_go_aside() {
    let ds = on_memory(&memory(), SinkOptions::default());
    let tasks = vec!["t-0".to_string(), "t-1".to_string()];
    let staged = ds.stage("t-0", 1, &rows(1), i64::MIN).unwrap();
    let mut cp = committed("t-0", 1, &staged);
    cp.watermark_us = 10 * 3_600_000_000;
    ds.commit(&cp).unwrap();
    ds.roll_forward(&cp).unwrap();
    assert!(
        ds.mark_complete(&tasks, 0).unwrap().is_empty(),
        "t-1 has no checkpoint yet"
    );
    let mut cp1 = checkpoint("t-1", 1, vec![]);
    cp1.watermark_us = 2 * 3_600_000_000 + 1;
    ds.commit(&cp1).unwrap();
    // The slower task's watermark (02:00) minus a 1 h lag: only hour 00 is complete.
    assert!(ds.mark_complete(&tasks, 3_600_000_000).unwrap().is_empty());
    assert_eq!(
        ds.mark_complete(&tasks, 0).unwrap(),
        ["dt=1970-01-01/hr=01"]
    );
    assert!(ds.storage.exists("dt=1970-01-01/hr=01/_SUCCESS").unwrap());
    assert!(!ds.storage.exists("dt=1970-01-01/hr=02/_SUCCESS").unwrap());
    // A row for the finished hour arrives later: it goes to late/, counted.
    let late = ds.stage("t-0", 2, &rows(1)[..1], i64::MIN).unwrap();
    assert_eq!(late.late_rows, 1);
    assert!(
        late.files[0].starts_with("late/dt=1970-01-01/hr=01/"),
        "{:?}",
        late.files
    );
}
