//! The gather/scatter property test: random dimension numbers (collapsed / inserted dimensions,
//! index maps, slice and window sizes, explicit batching dimensions, the index vector
//! dimension anywhere), random shardings of the operand, the indices, the updates and the
//! result (tiled, partially replicated, replicated, maximal; 2, 4 and 8 devices) and random
//! scatter combiners (add, max, min on s32, so that comparisons are exact). The random
//! indices lie in [-8, 8) and the operand dimensions in 1..=6, so indices out of range on
//! both sides are common. In about one case in six one collapsed index component is an iota
//! along an indices dimension of its operand dimension's size, concatenated with the rest of
//! the indices (an implicit parallel dimension: the index-parallel route). Many cases go into
//! one module, which is partitioned and executed on PJRT against the original on one device.
//!
//! `GATHER_SCATTER_CASES=N` changes the number of cases (default 600, four executed modules,
//! to keep CI short; `GATHER_SCATTER_CASES=3000` is the full run).

use tessera_runtime::harness;

mod common;
use common::{
    assert_batch_equal, case_count, defaulted_with_prefix, partition_batch, random_sharding, Gen,
};

fn list(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

fn shape(dims: &[i64]) -> String {
    format!(
        "s32[{}]",
        dims.iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// One random gather or scatter, as instructions over parameters `first..`.
struct Case {
    params: Vec<String>,
    body: String,
    out_shape: String,
    out_sharding: String,
    about: String,
    /// One index component is an iota (an implicit parallel dimension).
    iota: bool,
}

fn pick_distinct(g: &mut Gen, from: &[usize], k: usize) -> Vec<usize> {
    let mut pool = from.to_vec();
    let mut out = Vec::new();
    for _ in 0..k.min(pool.len()) {
        let j = g.below(pool.len() as u64) as usize;
        out.push(pool.remove(j));
    }
    out
}

/// Dimension numbers shared by both ops: operand dims, index map, collapsed dims, batching
/// dims, slice sizes, indices dims, index vector dim, the indices' batch dims, offset dims and
/// the output (updates) dims.
struct Dn {
    operand: Vec<i64>,
    index_map: Vec<usize>,
    collapsed: Vec<usize>,
    operand_batching: Vec<usize>,
    indices_batching: Vec<usize>,
    slice: Vec<i64>,
    indices: Vec<i64>,
    ivd: usize,
    offset: Vec<usize>,
    output: Vec<i64>,
    /// An index component made an iota along an indices dimension of its operand dimension's
    /// size (an implicit parallel dimension): (component, indices dimension).
    iota: Option<(usize, usize)>,
}

fn random_dn(g: &mut Gen) -> Dn {
    let r = 1 + g.below(3) as usize;
    let operand: Vec<i64> = (0..r).map(|_| 1 + g.below(6) as i64).collect();
    let batching = r >= 2 && g.below(4) == 0;
    let ob = if batching {
        vec![g.below(r as u64) as usize]
    } else {
        Vec::new()
    };
    let avail: Vec<usize> = (0..r).filter(|d| !ob.contains(d)).collect();
    let c = 1 + g.below(avail.len() as u64) as usize;
    let index_map = pick_distinct(g, &avail, c);
    let mut collapsed: Vec<usize> = index_map
        .iter()
        .copied()
        .filter(|_| g.below(2) == 0)
        .collect();
    collapsed.sort_unstable();
    let slice: Vec<i64> = (0..r)
        .map(|d| {
            if ob.contains(&d) || collapsed.contains(&d) {
                1
            } else {
                match g.below(3) {
                    0 => 1,
                    1 => operand[d],
                    _ => 1 + g.below(operand[d] as u64) as i64,
                }
            }
        })
        .collect();
    let b = (g.below(3) as usize).max(usize::from(batching));
    let mut batch: Vec<i64> = (0..b).map(|_| 1 + g.below(4) as i64).collect();
    let mut batch_pos = None;
    if batching {
        let p = g.below(b as u64) as usize;
        batch[p] = operand[ob[0]];
        batch_pos = Some(p);
    }
    // Sometimes one collapsed index component becomes an iota along a batch dimension of its
    // operand dimension's size: the partitioner's index-parallel route.
    let mut iota_at = None;
    let free: Vec<usize> = (0..b).filter(|&p| Some(p) != batch_pos).collect();
    if !free.is_empty() && g.below(3) == 0 {
        let comps: Vec<usize> = (0..index_map.len())
            .filter(|&c| collapsed.contains(&index_map[c]))
            .collect();
        if !comps.is_empty() {
            let c = comps[g.below(comps.len() as u64) as usize];
            let p = free[g.below(free.len() as u64) as usize];
            batch[p] = operand[index_map[c]];
            iota_at = Some((c, p));
        }
    }
    let ivd = g.below(b as u64 + 1) as usize;
    let mut indices = batch.clone();
    indices.insert(ivd, index_map.len() as i64);
    let ib: Vec<usize> = batch_pos
        .map(|p| vec![if p < ivd { p } else { p + 1 }])
        .unwrap_or_default();
    let windows: Vec<usize> = (0..r)
        .filter(|d| !collapsed.contains(d) && !ob.contains(d))
        .collect();
    let out_rank = b + windows.len();
    let mut offset = pick_distinct(g, &(0..out_rank).collect::<Vec<_>>(), windows.len());
    offset.sort_unstable();
    let mut output = Vec::with_capacity(out_rank);
    let (mut w, mut k) = (0, 0);
    for o in 0..out_rank {
        if offset.contains(&o) {
            output.push(slice[windows[w]]);
            w += 1;
        } else {
            output.push(batch[k]);
            k += 1;
        }
    }
    let iota = iota_at.map(|(c, p)| (c, if p < ivd { p } else { p + 1 }));
    Dn {
        iota,
        operand,
        index_map,
        collapsed,
        operand_batching: ob,
        indices_batching: ib,
        slice,
        indices,
        ivd,
        offset,
        output,
    }
}

/// The indices `%i{k}` as the op reads them: the parameter `%p{k}` itself, or with component
/// `c` replaced by an iota along indices dimension `d` (a concatenate along the index vector).
fn indices_text(d: &Dn, k: usize, si: &str) -> String {
    let pi = shape(&d.indices);
    let Some((c, dim)) = d.iota else {
        return format!("  %i{k} = {pi} copy(%p{k}), sharding={si}\n");
    };
    let len = d.indices[d.ivd] as usize;
    let piece = |from: usize, to: usize| {
        let mut dims = d.indices.clone();
        dims[d.ivd] = (to - from) as i64;
        let ranges: Vec<String> = d
            .indices
            .iter()
            .enumerate()
            .map(|(e, &size)| {
                if e == d.ivd {
                    format!("[{from}:{to}]")
                } else {
                    format!("[0:{size}]")
                }
            })
            .collect();
        (shape(&dims), ranges.join(", "))
    };
    let mut text = String::new();
    let mut parts = Vec::new();
    if c > 0 {
        let (sh, r) = piece(0, c);
        text += &format!("  %lo{k} = {sh} slice(%p{k}), slice={{{r}}}, sharding={si}\n");
        parts.push(format!("%lo{k}"));
    }
    let (sh, _) = piece(c, c + 1);
    text += &format!("  %io{k} = {sh} iota(), iota_dimension={dim}, sharding={si}\n");
    parts.push(format!("%io{k}"));
    if c + 1 < len {
        let (sh, r) = piece(c + 1, len);
        text += &format!("  %hi{k} = {sh} slice(%p{k}), slice={{{r}}}, sharding={si}\n");
        parts.push(format!("%hi{k}"));
    }
    text += &format!(
        "  %i{k} = {pi} concatenate({}), dimensions={{{}}}, sharding={si}\n",
        parts.join(", "),
        d.ivd
    );
    text
}

fn gather_case(g: &mut Gen, k: usize, first: usize, n: i64) -> Case {
    let d = random_dn(g);
    let (so, si, sr) = (
        random_sharding(g, d.operand.len(), n),
        random_sharding(g, d.indices.len(), n),
        random_sharding(g, d.output.len(), n),
    );
    let (po, pi) = (shape(&d.operand), shape(&d.indices));
    let batching = if d.operand_batching.is_empty() {
        String::new()
    } else {
        format!(
            ", operand_batching_dims={{{}}}, start_indices_batching_dims={{{}}}",
            list(&d.operand_batching),
            list(&d.indices_batching)
        )
    };
    let out = shape(&d.output);
    let body = format!(
        "  %o{k} = {po} parameter({first}), sharding={so}\n  %p{k} = {pi} parameter({}), sharding={si}\n{}  %r{k} = {out} gather(%o{k}, %i{k}), offset_dims={{{}}}, collapsed_slice_dims={{{}}}, start_index_map={{{}}}{batching}, index_vector_dim={}, slice_sizes={{{}}}, sharding={sr}\n",
        first + 1,
        indices_text(&d, k, &si),
        list(&d.offset),
        list(&d.collapsed),
        list(&d.index_map),
        d.ivd,
        d.slice.iter().map(i64::to_string).collect::<Vec<_>>().join(","),
    );
    Case {
        params: vec![format!("o{k}: {po}"), format!("p{k}: {pi}")],
        about: format!("gather {body}"),
        iota: d.iota.is_some(),
        body,
        out_shape: out,
        out_sharding: sr,
    }
}

fn scatter_case(g: &mut Gen, k: usize, first: usize, n: i64) -> Case {
    let d = random_dn(g);
    let comb = ["add", "max", "min"][g.below(3) as usize];
    let (so, si, su, sr) = (
        random_sharding(g, d.operand.len(), n),
        random_sharding(g, d.indices.len(), n),
        random_sharding(g, d.output.len(), n),
        random_sharding(g, d.operand.len(), n),
    );
    let (po, pi, pu) = (shape(&d.operand), shape(&d.indices), shape(&d.output));
    let batching = if d.operand_batching.is_empty() {
        String::new()
    } else {
        format!(
            ", input_batching_dims={{{}}}, scatter_indices_batching_dims={{{}}}",
            list(&d.operand_batching),
            list(&d.indices_batching)
        )
    };
    let body = format!(
        "  %o{k} = {po} parameter({first}), sharding={so}\n  %p{k} = {pi} parameter({}), sharding={si}\n{}  %u{k} = {pu} parameter({}), sharding={su}\n  %r{k} = {po} scatter(%o{k}, %i{k}, %u{k}), update_window_dims={{{}}}, inserted_window_dims={{{}}}, scatter_dims_to_operand_dims={{{}}}{batching}, index_vector_dim={}, to_apply=%{comb}, sharding={sr}\n",
        first + 1,
        indices_text(&d, k, &si),
        first + 2,
        list(&d.offset),
        list(&d.collapsed),
        list(&d.index_map),
        d.ivd,
    );
    Case {
        params: vec![
            format!("o{k}: {po}"),
            format!("p{k}: {pi}"),
            format!("u{k}: {pu}"),
        ],
        about: format!("scatter {body}"),
        iota: d.iota.is_some(),
        body,
        out_shape: po,
        out_sharding: sr,
    }
}

fn module_text(n: i64, cases: &[Case]) -> String {
    let mut text = format!("HloModule gather_scatter_cases, num_partitions={n}\n\n");
    for op in ["add", "max", "min"] {
        let opcode = match op {
            "add" => "add",
            "max" => "maximum",
            _ => "minimum",
        };
        text += &format!(
            "%{op} (a: s32[], b: s32[]) -> s32[] {{\n  %a = s32[] parameter(0)\n  %b = s32[] parameter(1)\n  ROOT %c = s32[] {opcode}(%a, %b)\n}}\n\n"
        );
    }
    let params: Vec<String> = cases.iter().flat_map(|c| c.params.clone()).collect();
    let shapes: Vec<&str> = cases.iter().map(|c| c.out_shape.as_str()).collect();
    let outs: Vec<String> = (0..cases.len()).map(|k| format!("%r{k}")).collect();
    let shardings: Vec<&str> = cases.iter().map(|c| c.out_sharding.as_str()).collect();
    text += &format!(
        "ENTRY %main ({}) -> ({}) {{\n",
        params.join(", "),
        shapes.join(", ")
    );
    for c in cases {
        text += &c.body;
    }
    text += &format!(
        "  ROOT %t = ({}) tuple({}), sharding={{{}}}\n}}\n",
        shapes.join(", "),
        outs.join(", "),
        shardings.join(", ")
    );
    text
}

#[test]
fn random_gathers_and_scatters_run_equal() {
    let total = case_count("GATHER_SCATTER_CASES", 600);
    let per_module = 150;
    let mut g = Gen(harness::Rng::new(15));
    let mut done = 0;
    let mut strategies = 0;
    let mut iotas = 0;
    while done < total {
        let n = [2i64, 4, 8][(done / per_module) % 3];
        let count = per_module.min(total - done);
        let mut cases = Vec::with_capacity(count);
        let mut next_param = 0;
        for k in 0..count {
            let c = if g.below(2) == 0 {
                gather_case(&mut g, k, next_param, n)
            } else {
                scatter_case(&mut g, k, next_param, n)
            };
            next_param += c.params.len();
            cases.push(c);
        }
        iotas += cases.iter().filter(|c| c.iota).count();
        let text = module_text(n, &cases);
        let (original, part, report) = partition_batch(&text);
        strategies += count - defaulted_with_prefix(&report, 'r');
        assert_batch_equal(&original, &part, n as usize, done as u64, |k| {
            cases[k].about.to_string()
        });
        done += count;
    }
    eprintln!(
        "{done} gather/scatter cases executed and equal ({iotas} with an iota index component); {strategies} partitioned by a strategy, the rest (maximal shardings) by the default"
    );
}
