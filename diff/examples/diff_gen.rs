//! bench/diff.sh's generator (an example of this crate so that the benchmark builds without the
//! rest of the workspace): generates the `featurelog diff` benchmark's inputs: a served side laid out like the joiner's
//! output (hive partitions, one file per hour) and an offline side in one file, N rows x 20
//! features each, with a few skews injected so that the comparison has work to report.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, Float64Array, Int64Array, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// `--out DIR [--rows N] [--files N]`: served/ (N rows in `files` hourly partitions) and
/// offline.parquet under DIR.
struct Args {
    out: PathBuf,
    rows: usize,
    files: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        out: PathBuf::new(),
        rows: 10_000_000,
        files: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--out" => a.out = value.into(),
            "--rows" => a.rows = value.parse()?,
            "--files" => a.files = value.parse()?,
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    if a.out.as_os_str().is_empty() {
        return Err("--out DIR is required".into());
    }
    Ok(a)
}

const LOCALES: [&str; 8] = [
    "en-US", "de-DE", "fr-FR", "pt-BR", "es-MX", "jp-JA", "en-GB", "it-IT",
];
const SWAPPED: [&str; 8] = [
    "en_US", "de_DE", "fr_FR", "pt_BR", "es_MX", "jp_JA", "en_GB", "it_IT",
];
const CHUNK: usize = 250_000;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn unit(i: usize, salt: u64) -> f64 {
    (mix(i as u64 ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 11) as f64 / (1u64 << 53) as f64
}

/// Rows `range` of one side; `offline` injects the skews.
fn batch(range: std::ops::Range<usize>, offline: bool) -> Result<RecordBatch> {
    // Offline drops 1% of the keys; both sides keep their rows otherwise aligned by key.
    let rows: Vec<usize> = range.filter(|&i| !(offline && i % 100 == 7)).collect();
    let mut cols: Vec<(String, ArrayRef)> = vec![
        (
            "request_id".into(),
            Arc::new(StringArray::from_iter_values(
                rows.iter()
                    .map(|&i| format!("{:016x}", mix((i / 10) as u64))),
            )),
        ),
        (
            "item_id".into(),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|&i| {
                (mix(i as u64) % 1_000_000) as i64 * 10 + (i % 10) as i64
            }))),
        ),
    ];
    for f in 0..8 {
        let name = format!("f32_{f}");
        cols.push((
            name,
            Arc::new(Float32Array::from_iter_values(rows.iter().map(|&i| {
                let v = (unit(i, f) * 100.0) as f32;
                // Noise beyond tolerance on 2% of rows of one feature.
                if offline && f == 3 && i % 50 == 1 {
                    v + 0.5
                } else {
                    v
                }
            }))),
        ));
    }
    for f in 0..4 {
        cols.push((
            format!("f64_{f}"),
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|&i| {
                let v = unit(i, 100 + f);
                if offline { v * (1.0 + 1e-9) } else { v }
            }))),
        ));
    }
    for f in 0..4 {
        cols.push((
            format!("i64_{f}"),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|&i| {
                let v = (mix(i as u64 ^ (200 + f)) % 1000) as i64;
                // A stale column: a third of the rows one behind.
                if offline && f == 2 && i % 3 == 0 {
                    v - 1
                } else {
                    v
                }
            }))),
        ));
    }
    for f in 0..4 {
        cols.push((
            format!("str_{f}"),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|&i| {
                let k = (mix(i as u64 ^ (300 + f)) % LOCALES.len() as u64) as usize;
                let v = LOCALES[k];
                if offline && f == 0 && i % 20 == 3 {
                    &v[..2] // locale truncation
                } else if offline && f == 1 && i % 25 == 4 {
                    SWAPPED[k] // separator swap
                } else {
                    v
                }
            }))),
        ));
    }
    Ok(RecordBatch::try_from_iter(cols)?)
}

fn write(path: &Path, range: std::ops::Range<usize>, offline: bool) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
        .set_max_row_group_row_count(Some(1 << 20))
        .build();
    let first = batch(range.start..range.start.min(range.end), offline)?;
    let file = File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    let mut w = ArrowWriter::try_new(file, first.schema(), Some(props))?;
    let mut start = range.start;
    while start < range.end {
        let end = (start + CHUNK).min(range.end);
        w.write(&batch(start..end, offline)?)?;
        start = end;
    }
    w.close()?;
    Ok(())
}

fn main() -> Result<()> {
    let args = args()?;
    let per = args.rows.div_ceil(args.files.max(1));
    std::thread::scope(|s| -> Result<()> {
        let served = s.spawn(|| -> Result<()> {
            for h in 0..args.files {
                let range = (h * per).min(args.rows)..((h + 1) * per).min(args.rows);
                let path = args
                    .out
                    .join(format!("served/dt=2025-11-29/hr={h:02}/part-0.parquet"));
                write(&path, range, false)?;
            }
            Ok(())
        });
        write(&args.out.join("offline.parquet"), 0..args.rows, true)?;
        served.join().map_err(|_| "generator thread panicked")??;
        Ok(())
    })?;
    println!(
        "wrote {} rows per side under {}",
        args.rows,
        args.out.display()
    );
    Ok(())
}
