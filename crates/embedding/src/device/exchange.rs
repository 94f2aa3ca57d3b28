//! CSR entries of one stack laid out for the device exchange.
//!
//! Each entry of device `d`'s CSR buffers names a partition (the shard that holds the row), a
//! row in that shard, a sample of one of `d`'s SparseCores and a gain. The device programs send
//! entries to the device that owns the partition with one all-to-all, so on every source device
//! the entries are grouped by destination into `[devices, capacity]` buffers: the row as the
//! destination's local row (`core * rows_per_shard + row`), the source's local sample
//! (`core * samples_per_core + sample`) and the gain. Unused slots hold row and sample -1 and
//! gain 0; the programs skip them. Minibatches are only a way to cut the same entries: they are
//! all exchanged at once.

use crate::error::{EmbeddingError, Result};
use crate::layout::Layout;
use crate::preprocess::CsrEntry;

/// The smallest exchange capacity: small batches share one compiled program.
pub const MIN_CAPACITY: usize = 256;

/// One stack's exchange buffers for every device (each flattened `[devices, capacity]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Exchange {
    /// Slots per (source, destination) pair: a power of two, at least [`MIN_CAPACITY`].
    pub capacity: usize,
    pub rows: Vec<Vec<i32>>,
    pub samples: Vec<Vec<i32>>,
    pub gains: Vec<Vec<f32>>,
    /// Real entries (not padding) over all devices.
    pub entries: usize,
}

/// Groups `entries` (decoded CSR of `stack`) by source and destination device.
pub fn pack(layout: &Layout, stack: usize, entries: &[CsrEntry]) -> Result<Exchange> {
    let n = layout.global_device_count as usize;
    let nsc = layout.num_sc_per_device;
    let num_shards = layout.num_shards();
    let rows_per_shard = layout.rows_per_shard(stack);
    let spc = layout.stacks[stack].total_sample_count / num_shards as u64;
    let bad = |e: &CsrEntry, what: &str| EmbeddingError::Shape {
        at: format!("stack '{}'", layout.stacks[stack].name),
        message: format!(
            "CSR entry (device {}, core {}, partition {}, id {}, sample {}): {what}",
            e.device, e.core, e.partition, e.id, e.sample
        ),
    };
    let mut count = vec![0usize; n * n];
    for e in entries {
        if e.device as usize >= n || e.core >= nsc || e.partition >= num_shards {
            return Err(bad(e, "device, core or partition out of range"));
        }
        if e.id < 0 || e.id as u32 >= rows_per_shard {
            return Err(bad(
                e,
                &format!("row outside the shard's {rows_per_shard} rows"),
            ));
        }
        if e.sample < 0 || e.sample as u64 >= spc {
            return Err(bad(e, &format!("sample outside the core's {spc} samples")));
        }
        count[e.device as usize * n + (e.partition / nsc) as usize] += 1;
    }
    let capacity = count
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(8)
        .next_power_of_two();
    let mut ex = Exchange {
        capacity,
        rows: vec![vec![-1; n * capacity]; n],
        samples: vec![vec![-1; n * capacity]; n],
        gains: vec![vec![0.0; n * capacity]; n],
        entries: entries.len(),
    };
    let mut fill = vec![0usize; n * n];
    for e in entries {
        let (src, dst) = (e.device as usize, (e.partition / nsc) as usize);
        let at = dst * capacity + fill[src * n + dst];
        fill[src * n + dst] += 1;
        ex.rows[src][at] = ((e.partition % nsc) * rows_per_shard) as i32 + e.id;
        ex.samples[src][at] = (e.core as u64 * spc) as i32 + e.sample;
        ex.gains[src][at] = e.gain;
    }
    Ok(ex)
}

impl Exchange {
    /// The same entries in `capacity` slots per pair (at least the current capacity), so that a
    /// program compiled for a larger capacity can run them.
    pub fn widened(&self, capacity: usize) -> Exchange {
        let k = self.capacity;
        if capacity <= k {
            return self.clone();
        }
        let n = self.rows.len();
        let widen = |v: &Vec<i32>| -> Vec<i32> {
            let mut out = vec![-1; n * capacity];
            for d in 0..n {
                out[d * capacity..d * capacity + k].copy_from_slice(&v[d * k..(d + 1) * k]);
            }
            out
        };
        Exchange {
            capacity,
            rows: self.rows.iter().map(widen).collect(),
            samples: self.samples.iter().map(widen).collect(),
            gains: self
                .gains
                .iter()
                .map(|v| {
                    let mut out = vec![0.0; n * capacity];
                    for d in 0..n {
                        out[d * capacity..d * capacity + k].copy_from_slice(&v[d * k..(d + 1) * k]);
                    }
                    out
                })
                .collect(),
            entries: self.entries,
        }
    }
}
