//! Stacking and mod-sharding of table values (and optimizer slots, which share the layout), the
//! inverse, and checkpoints of one `.npy` per table and slot that restore onto any layout.
//!
//! A stack's sharded value is `[num_shards * rows_per_shard, dim]` row-major: shard `s` (held by
//! device `s / nsc`, SparseCore `s % nsc`) is rows `[s * rows_per_shard, (s + 1) * rows_per_shard)`.
//! Row `i` of table `t` goes to shard `(i % num_shards + rotation_t) % num_shards`, row
//! `row_offset_in_shard_t + i / num_shards`; rows past the vocabulary and columns past the dim
//! hold the padding value.

use std::path::Path;

use tessera_hlo::ElementType;
use tessera_runtime::{npy, HostArray};

use crate::config::EmbeddingConfig;
use crate::error::{EmbeddingError, Result};
use crate::layout::Layout;

/// A dense row-major f32 matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl Matrix {
    pub fn new(rows: usize, cols: usize, fill: f32) -> Matrix {
        Matrix {
            rows,
            cols,
            data: vec![fill; rows * cols],
        }
    }
    /// Bitwise equality (NaN padding compares equal to itself).
    pub fn bits_eq(&self, other: &Matrix) -> bool {
        self.rows == other.rows
            && self.cols == other.cols
            && self
                .data
                .iter()
                .zip(&other.data)
                .all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

/// Stacks and shards the values of every table (`tables[t]` is `[vocabulary_size, dim]` of
/// `config.tables[t]`). Returns one matrix per stack, in the layout's order.
pub fn stack_and_shard(
    config: &EmbeddingConfig,
    layout: &Layout,
    tables: &[Matrix],
    pad: f32,
) -> Result<Vec<Matrix>> {
    if tables.len() != config.tables.len() {
        return Err(EmbeddingError::Shape {
            at: "tables".into(),
            message: format!("{} arrays for {} tables", tables.len(), config.tables.len()),
        });
    }
    let ns = layout.num_shards() as usize;
    let mut out = Vec::new();
    for (si, s) in layout.stacks.iter().enumerate() {
        let rps = layout.rows_per_shard(si) as usize;
        let dim = s.embedding_dim as usize;
        let mut m = Matrix::new(ns * rps, dim, pad);
        for &t in &s.tables {
            let tc = &config.tables[t];
            let v = &tables[t];
            if v.rows != tc.vocabulary_size as usize || v.cols != tc.embedding_dim as usize {
                return Err(EmbeddingError::Shape {
                    at: format!("table '{}'", tc.name),
                    message: format!(
                        "expected [{}, {}], got [{}, {}]",
                        tc.vocabulary_size, tc.embedding_dim, v.rows, v.cols
                    ),
                });
            }
            let tl = &layout.tables[t];
            for i in 0..v.rows {
                let shard = (i % ns + tl.shard_rotation as usize) % ns;
                let row = shard * rps + tl.row_offset_in_shard as usize + i / ns;
                m.data[row * dim..row * dim + v.cols]
                    .copy_from_slice(&v.data[i * v.cols..(i + 1) * v.cols]);
            }
        }
        out.push(m);
    }
    Ok(out)
}

/// The inverse of [`stack_and_shard`]: every table's `[vocabulary_size, dim]` values.
pub fn unshard_and_unstack(
    config: &EmbeddingConfig,
    layout: &Layout,
    stacks: &[Matrix],
) -> Result<Vec<Matrix>> {
    let ns = layout.num_shards() as usize;
    if stacks.len() != layout.stacks.len() {
        return Err(EmbeddingError::Shape {
            at: "stacks".into(),
            message: format!("{} arrays for {} stacks", stacks.len(), layout.stacks.len()),
        });
    }
    for (si, s) in layout.stacks.iter().enumerate() {
        let want = (
            ns * layout.rows_per_shard(si) as usize,
            s.embedding_dim as usize,
        );
        if (stacks[si].rows, stacks[si].cols) != want {
            return Err(EmbeddingError::Shape {
                at: format!("stack '{}'", s.name),
                message: format!(
                    "expected [{}, {}], got [{}, {}]",
                    want.0, want.1, stacks[si].rows, stacks[si].cols
                ),
            });
        }
    }
    let mut out = Vec::new();
    for (t, tc) in config.tables.iter().enumerate() {
        let tl = &layout.tables[t];
        let si = tl.stack;
        let rps = layout.rows_per_shard(si) as usize;
        let m = &stacks[si];
        let (rows, cols) = (tc.vocabulary_size as usize, tc.embedding_dim as usize);
        let mut v = Matrix::new(rows, cols, 0.0);
        for i in 0..rows {
            let shard = (i % ns + tl.shard_rotation as usize) % ns;
            let row = shard * rps + tl.row_offset_in_shard as usize + i / ns;
            v.data[i * cols..(i + 1) * cols]
                .copy_from_slice(&m.data[row * m.cols..row * m.cols + cols]);
        }
        out.push(v);
    }
    Ok(out)
}

/// One device's part of a sharded stack (`nsc` consecutive shards).
pub fn device_shard(layout: &Layout, stack: usize, m: &Matrix, device: u32) -> Matrix {
    let rows = layout.rows_per_shard(stack) as usize * layout.num_sc_per_device as usize;
    let d = device as usize;
    Matrix {
        rows,
        cols: m.cols,
        data: m.data[d * rows * m.cols..(d + 1) * rows * m.cols].to_vec(),
    }
}

/// Values of the tables and of their optimizer slots, unstacked: `tables[t]` and
/// `slots[t][k]` (slot `k` of `config.tables[t].optimizer.slots()`).
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub tables: Vec<Matrix>,
    pub slots: Vec<Vec<Matrix>>,
}

impl Checkpoint {
    /// The tables of `config` filled with `value()`, table after table in row-major order, and
    /// every optimizer slot at its initial value: a start for tests and benchmarks.
    pub fn filled(config: &EmbeddingConfig, mut value: impl FnMut() -> f32) -> Checkpoint {
        let mut ckpt = Checkpoint {
            tables: vec![],
            slots: vec![],
        };
        for t in &config.tables {
            let (v, d) = (t.vocabulary_size as usize, t.embedding_dim as usize);
            let mut m = Matrix::new(v, d, 0.0);
            m.data.iter_mut().for_each(|x| *x = value());
            ckpt.tables.push(m);
            ckpt.slots.push(
                t.optimizer
                    .slots()
                    .iter()
                    .map(|&(_, init)| Matrix::new(v, d, init))
                    .collect(),
            );
        }
        ckpt
    }
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> EmbeddingError {
    EmbeddingError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn file_name(table: &str, slot: Option<&str>) -> String {
    match slot {
        None => format!("{table}.npy"),
        Some(s) => format!("{table}.{s}.npy"),
    }
}

fn to_array(m: &Matrix) -> HostArray {
    HostArray {
        ty: ElementType::F32,
        dims: vec![m.rows as i64, m.cols as i64],
        data: m.data.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// Writes `<dir>/<table>.npy` and `<dir>/<table>.<slot>.npy`, unpadded and unsharded, so that
/// any layout (device count, SparseCores, stacking mode) can restore them.
pub fn save_checkpoint(config: &EmbeddingConfig, ckpt: &Checkpoint, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    for (t, tc) in config.tables.iter().enumerate() {
        let p = dir.join(file_name(&tc.name, None));
        std::fs::write(&p, npy::write(&to_array(&ckpt.tables[t]))).map_err(|e| io_err(&p, e))?;
        for (k, (slot, _)) in tc.optimizer.slots().iter().enumerate() {
            let p = dir.join(file_name(&tc.name, Some(slot)));
            let m =
                ckpt.slots
                    .get(t)
                    .and_then(|s| s.get(k))
                    .ok_or_else(|| EmbeddingError::Shape {
                        at: format!("table '{}'", tc.name),
                        message: format!("slot '{slot}' is missing"),
                    })?;
            std::fs::write(&p, npy::write(&to_array(m))).map_err(|e| io_err(&p, e))?;
        }
    }
    Ok(())
}

/// Reads what [`save_checkpoint`] wrote, checking every shape against `config`.
pub fn load_checkpoint(config: &EmbeddingConfig, dir: &Path) -> Result<Checkpoint> {
    read_checkpoint(config, dir, false)
}

/// [`load_checkpoint`], except that a slot file that does not exist starts at the slot's
/// initial value (table files are required).
pub fn load_tables(config: &EmbeddingConfig, dir: &Path) -> Result<Checkpoint> {
    read_checkpoint(config, dir, true)
}

fn read_checkpoint(config: &EmbeddingConfig, dir: &Path, init_missing: bool) -> Result<Checkpoint> {
    let read = |name: String, rows: u32, cols: u32, init: Option<f32>| -> Result<Matrix> {
        let p = dir.join(name);
        let bytes = match (std::fs::read(&p), init) {
            (Ok(b), _) => b,
            (Err(e), Some(v)) if init_missing && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Matrix::new(rows as usize, cols as usize, v));
            }
            (Err(e), _) => return Err(io_err(&p, e)),
        };
        let a = npy::read(&bytes, Some(ElementType::F32)).map_err(|e| io_err(&p, e))?;
        if a.ty != ElementType::F32 || a.dims != [rows as i64, cols as i64] {
            return Err(EmbeddingError::Shape {
                at: p.display().to_string(),
                message: format!("expected f32[{rows}, {cols}], found {}{:?}", a.ty, a.dims),
            });
        }
        Ok(Matrix {
            rows: rows as usize,
            cols: cols as usize,
            data: a
                .data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        })
    };
    let mut ckpt = Checkpoint {
        tables: vec![],
        slots: vec![],
    };
    for tc in &config.tables {
        ckpt.tables.push(read(
            file_name(&tc.name, None),
            tc.vocabulary_size,
            tc.embedding_dim,
            None,
        )?);
        let mut slots = Vec::new();
        for (slot, init) in tc.optimizer.slots() {
            slots.push(read(
                file_name(&tc.name, Some(slot)),
                tc.vocabulary_size,
                tc.embedding_dim,
                Some(init),
            )?);
        }
        ckpt.slots.push(slots);
    }
    Ok(ckpt)
}

/// Stacked and sharded values of the tables and of each slot: `(tables, slots)` where
/// `slots[k]` stacks slot `k` of every table (padded with the slot's initial value).
pub fn shard_checkpoint(
    config: &EmbeddingConfig,
    layout: &Layout,
    ckpt: &Checkpoint,
    pad: f32,
) -> Result<(Vec<Matrix>, Vec<Vec<Matrix>>)> {
    let tables = stack_and_shard(config, layout, &ckpt.tables, pad)?;
    let mut slots = Vec::new();
    let max_slots = config
        .tables
        .iter()
        .map(|t| t.optimizer.slots().len())
        .max()
        .unwrap_or(0);
    for k in 0..max_slots {
        // Slots exist per stack only when its optimizer has them; tables of other stacks get
        // empty placeholders that stack_and_shard never reads.
        let per_table: Vec<Matrix> = config
            .tables
            .iter()
            .enumerate()
            .map(|(t, tc)| {
                ckpt.slots
                    .get(t)
                    .and_then(|s| s.get(k))
                    .cloned()
                    .unwrap_or_else(|| {
                        Matrix::new(tc.vocabulary_size as usize, tc.embedding_dim as usize, 0.0)
                    })
            })
            .collect();
        let init = config
            .tables
            .iter()
            .find_map(|t| t.optimizer.slots().get(k).map(|s| s.1))
            .unwrap_or(0.0);
        slots.push(stack_and_shard(config, layout, &per_table, init)?);
    }
    Ok((tables, slots))
}

/// The inverse of [`shard_checkpoint`].
pub fn unshard_checkpoint(
    config: &EmbeddingConfig,
    layout: &Layout,
    tables: &[Matrix],
    slots: &[Vec<Matrix>],
) -> Result<Checkpoint> {
    let t = unshard_and_unstack(config, layout, tables)?;
    let mut per_slot = Vec::new();
    for s in slots {
        per_slot.push(unshard_and_unstack(config, layout, s)?);
    }
    let slots = config
        .tables
        .iter()
        .enumerate()
        .map(|(ti, tc)| {
            (0..tc.optimizer.slots().len())
                .map(|k| per_slot[k][ti].clone())
                .collect()
        })
        .collect();
    Ok(Checkpoint { tables: t, slots })
}
