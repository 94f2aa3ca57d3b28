//! The CLI's file formats (docs/embedding.md):
//!
//! - BATCH.npz, per feature: `<feature>` (dense ids `[batch, k]`), or `<feature>.values` +
//!   `<feature>.row_splits` (ragged), or `<feature>.indices` `[nnz, 2]` + `<feature>.values` +
//!   `<feature>.dense_shape` (sparse COO); optional `<feature>.weights` (same shape as the ids).
//!   Ids and splits may be any integer type, weights f32 or f64.
//! - CSR.npz, per stack: `<stack>.row_pointers`, `<stack>.embedding_ids`, `<stack>.sample_ids`,
//!   `<stack>.gains` (flattened over devices, as jax-tpu-embedding returns them without a
//!   leading dimension), and the statistics `<stack>.max_ids_per_partition`,
//!   `<stack>.max_unique_ids_per_partition`, `<stack>.required_buffer_sizes`,
//!   `<stack>.dropped_id_count`; plus `num_minibatches`.

use indexmap::IndexMap;
use tessera_hlo::ElementType;
use tessera_runtime::{npz, HostArray};

use crate::config::EmbeddingConfig;
use crate::error::{EmbeddingError, Result};
use crate::preprocess::{FeatureBatch, Preprocessed};

fn ints(a: &HostArray, feature: &str, what: &str) -> Result<Vec<i64>> {
    let err = || EmbeddingError::Input {
        feature: feature.into(),
        message: format!("{what}: expected an integer array, found {}", a.ty),
    };
    let b = &a.data;
    Ok(match a.ty {
        ElementType::S32 => b
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
            .collect(),
        ElementType::S64 => b
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect(),
        ElementType::U32 => b
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
            .collect(),
        ElementType::S16 => b
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]) as i64)
            .collect(),
        ElementType::U16 => b
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as i64)
            .collect(),
        ElementType::S8 => b.iter().map(|&x| x as i8 as i64).collect(),
        ElementType::U8 => b.iter().map(|&x| x as i64).collect(),
        _ => return Err(err()),
    })
}

fn floats(a: &HostArray, feature: &str) -> Result<Vec<f32>> {
    match a.ty {
        ElementType::F32 | ElementType::F64 => a.to_f32().ok_or_else(|| EmbeddingError::Input {
            feature: feature.into(),
            message: "weights: could not read".into(),
        }),
        t => Err(EmbeddingError::Input {
            feature: feature.into(),
            message: format!("weights: expected f32 or f64, found {t}"),
        }),
    }
}

fn ids32(v: Vec<i64>, feature: &str) -> Result<Vec<i32>> {
    v.into_iter()
        .enumerate()
        .map(|(k, x)| {
            i32::try_from(x).map_err(|_| EmbeddingError::Input {
                feature: feature.into(),
                message: format!("id {k} ({x}) does not fit in 32 bits"),
            })
        })
        .collect()
}

/// Reads one batch per feature of `config` from an `.npz` archive's bytes.
pub fn read_batch(config: &EmbeddingConfig, bytes: &[u8], path: &str) -> Result<Vec<FeatureBatch>> {
    let arrays = npz::read(bytes).map_err(|e| EmbeddingError::Io {
        path: path.into(),
        message: e.to_string(),
    })?;
    batch_from_arrays(config, &arrays, "", path).map_err(|e| e.in_file(path))
}

/// The batch of every feature from arrays named `<prefix><feature>[.suffix]`; other arrays
/// under `prefix` are an error (a misspelt feature must not be ignored).
pub fn batch_from_arrays(
    config: &EmbeddingConfig,
    arrays: &IndexMap<String, HostArray>,
    prefix: &str,
    path: &str,
) -> Result<Vec<FeatureBatch>> {
    let mut used = std::collections::HashSet::new();
    let mut out = Vec::new();
    for f in &config.features {
        let name = f.name.as_str();
        let mut get = |suffix: &str| {
            let key = if suffix.is_empty() {
                format!("{prefix}{name}")
            } else {
                format!("{prefix}{name}.{suffix}")
            };
            let a = arrays.get(&key);
            if a.is_some() {
                used.insert(key);
            }
            a
        };
        let input = |m: String| EmbeddingError::Input {
            feature: name.into(),
            message: m,
        };
        let dense = get("");
        let values = get("values");
        let splits = get("row_splits");
        let indices = get("indices");
        let dense_shape = get("dense_shape");
        let weights = get("weights");
        let weights = weights.map(|w| floats(w, name)).transpose()?;
        let batch = match (dense, values, splits, indices) {
            (Some(d), None, None, None) => {
                if d.dims.len() != 2 {
                    return Err(input(format!("dense ids must be [batch, k], found shape {:?}", d.dims)));
                }
                let (rows, cols) = (d.dims[0] as usize, d.dims[1] as usize);
                FeatureBatch::dense(rows, cols, ids32(ints(d, name, "ids")?, name)?, weights)
            }
            (None, Some(v), Some(s), None) => {
                if v.dims.len() != 1 || s.dims.len() != 1 {
                    return Err(input("ragged values and row_splits must be 1-D".into()));
                }
                let splits = ints(s, name, "row_splits")?
                    .into_iter()
                    .map(|x| usize::try_from(x).map_err(|_| input(format!("negative row split {x}"))))
                    .collect::<Result<Vec<_>>>()?;
                FeatureBatch::ragged(ids32(ints(v, name, "values")?, name)?, splits, weights)
            }
            (None, Some(v), None, Some(ix)) => {
                let shape = dense_shape.ok_or_else(|| input("sparse input needs `.dense_shape`".into()))?;
                let shape = ints(shape, name, "dense_shape")?;
                if ix.dims.len() != 2 || ix.dims[1] != 2 || shape.len() != 2 || shape[0] < 0 {
                    return Err(input("sparse input: indices must be [nnz, 2] and dense_shape [2]".into()));
                }
                // The dense shape sizes the rows; it must be the batch the config says, checked
                // before anything is sized by it.
                let batch = f.input_shape.first().copied().map(i64::from).unwrap_or(0);
                if shape[0] != batch {
                    return Err(input(format!(
                        "{path}: dense_shape {shape:?} has {} rows, the config's input_shape {:?} a batch of {batch}",
                        shape[0], f.input_shape
                    )));
                }
                let ix = ints(ix, name, "indices")?;
                let pairs: Vec<(i64, i64)> = ix.chunks_exact(2).map(|p| (p[0], p[1])).collect();
                let vals = ids32(ints(v, name, "values")?, name)?;
                FeatureBatch::sparse_coo(shape[0] as usize, &pairs, &vals, weights.as_deref()).map_err(input)?
            }
            (None, None, None, None) => return Err(input(format!("{path} has no input for this feature"))),
            _ => {
                return Err(input(
                    "Input of unknown type: give `<feature>` (dense), `<feature>.values` + `.row_splits` (ragged) or `.indices` + `.values` + `.dense_shape` (sparse)".into(),
                ))
            }
        };
        out.push(batch);
    }
    if let Some(extra) = arrays
        .keys()
        .find(|k| k.starts_with(prefix) && !used.contains(*k))
    {
        return Err(EmbeddingError::Input {
            feature: extra.clone(),
            message: format!("{path}: array '{extra}' belongs to no feature of the config"),
        });
    }
    Ok(out)
}

/// The CSR buffers and statistics as `.npz` bytes.
pub fn write_csr(p: &Preprocessed) -> Vec<u8> {
    let mut arrays: IndexMap<String, HostArray> = IndexMap::new();
    let s32 = |v: &[i32]| HostArray {
        ty: ElementType::S32,
        dims: vec![v.len() as i64],
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    for s in &p.stacks {
        let n = &s.name;
        arrays.insert(format!("{n}.row_pointers"), s32(&s.row_pointers));
        arrays.insert(format!("{n}.embedding_ids"), s32(&s.embedding_ids));
        arrays.insert(format!("{n}.sample_ids"), s32(&s.sample_ids));
        arrays.insert(
            format!("{n}.gains"),
            HostArray {
                ty: ElementType::F32,
                dims: vec![s.gains.len() as i64],
                data: s.gains.iter().flat_map(|x| x.to_le_bytes()).collect(),
            },
        );
        arrays.insert(
            format!("{n}.max_ids_per_partition"),
            s32(&s.stats.max_ids_per_partition),
        );
        arrays.insert(
            format!("{n}.max_unique_ids_per_partition"),
            s32(&s.stats.max_unique_ids_per_partition),
        );
        arrays.insert(
            format!("{n}.required_buffer_sizes"),
            s32(&s.stats.required_buffer_sizes),
        );
        arrays.insert(
            format!("{n}.dropped_id_count"),
            HostArray {
                ty: ElementType::S64,
                dims: vec![],
                data: (s.stats.dropped_id_count as i64).to_le_bytes().to_vec(),
            },
        );
    }
    arrays.insert(
        "num_minibatches".into(),
        HostArray {
            ty: ElementType::S32,
            dims: vec![],
            data: (p.num_minibatches as i32).to_le_bytes().to_vec(),
        },
    );
    npz::write(arrays.iter().map(|(k, v)| (k.as_str(), v)))
}
