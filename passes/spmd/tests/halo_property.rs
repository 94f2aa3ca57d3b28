//! The halo-exchange property test: random windowed ops (reduce-window with random windows,
//! strides, paddings, base and window dilations; pad with low, high, interior and negative
//! padding; strided slices; reverse; concatenate; dynamic-slice and dynamic-update-slice with
//! run-time starts; select-and-scatter with GE and LE selects) on random, often uneven,
//! shapes, with random operand and result shardings on 2, 4 and 8 devices. Many cases go into one module, which is partitioned and
//! executed on PJRT against the original on one device; every case must be equal (s32, so
//! exactly).
//!
//! `HALO_CASES=N` changes the number of cases (default 600, about a minute here;
//! `HALO_CASES=3000` gives the count).

use tessera_runtime::harness;

mod common;
use common::{
    assert_batch_equal, batch_module, case_count, defaulted_with_prefix, partition_batch, Gen,
};

/// A random sharding of a rank-`rank` array on `n` devices: the devices split over the
/// dimensions (the first dimension favoured) and replication, in iota or shuffled order;
/// now and then replicated.
fn sharding(g: &mut Gen, rank: usize, n: i64) -> String {
    common::favoured_sharding(g, rank, &[0], 8, n)
}

fn shape(dims: &[i64]) -> String {
    let d: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("s32[{}]", d.join(","))
}

/// One case: parameters (shape, sharding), the instructions, and the result.
struct Case {
    params: Vec<(String, String)>,
    body: String,
    result: String,
    result_shape: String,
    result_sharding: String,
    what: String,
}

fn random_dims(g: &mut Gen) -> Vec<i64> {
    let rank = 1 + g.below(2) as usize;
    (0..rank).map(|_| g.range(1, 19)).collect()
}

/// A random case named `c{k}`, its parameters numbered from `first`.
fn case(g: &mut Gen, k: usize, first: usize, n: i64) -> Option<Case> {
    let dims = random_dims(g);
    let rank = dims.len();
    let p = format!("%p{first}");
    let mut params = vec![(shape(&dims), sharding(g, rank, n))];
    let out_sharding = sharding(g, rank, n);
    let name = format!("%c{k}");
    let (body, out_dims, what) = match g.below(8) {
        7 => {
            // select-and-scatter with window dilation (XLA's HLO has it; StableHLO and so jax
            // do not) and windows that may lie wholly in the padding, in f32 (a padded integer
            // one stays whole). The operand is made tie-free (p * 512 + its linear position,
            // exact in f32): with equal values in a window, XLA:CPU picks by an order that
            // depends on the padding (docs/spmd-windowed.md).
            let (mut size, mut stride, mut pad, mut dil) = (vec![], vec![], vec![], vec![]);
            let mut src = vec![];
            for &d in &dims {
                let s = g.range(1, 4);
                let st = g.range(1, 4);
                let wd = if g.below(3) == 0 { g.range(2, 4) } else { 1 };
                let (lo, hi) = (g.range(0, 3), g.range(0, 3));
                let padded = d + lo + hi;
                let span = (s - 1) * wd + 1;
                if padded < span {
                    return None;
                }
                src.push((padded - span) / st + 1);
                size.push(s.to_string());
                stride.push(st.to_string());
                pad.push(format!("{lo}_{hi}"));
                dil.push(wd.to_string());
            }
            params.push((shape(&src), sharding(g, rank, n)));
            let sel = if g.below(2) == 0 { "ge" } else { "le" };
            let window = format!(
                "size={} stride={} pad={} rhs_dilate={}",
                size.join("x"),
                stride.join("x"),
                pad.join("x"),
                dil.join("x")
            );
            let count: i64 = dims.iter().product();
            let (sh, fsh) = (shape(&dims), shape(&dims).replacen("s32", "f32", 1));
            let fsrc = shape(&src).replacen("s32", "f32", 1);
            let body = format!(
                "  %l{k} = s32[{count}] iota(), iota_dimension=0\n  %r{k} = {sh} reshape(%l{k})\n  \
                 %m{k} = s32[] constant(512)\n  %mb{k} = {sh} broadcast(%m{k}), dimensions={{}}\n  \
                 %s{k} = {sh} multiply({p}, %mb{k}), sharding={ps}\n  %u{k} = {sh} add(%s{k}, %r{k}), sharding={ps}\n  \
                 %f{k} = {fsh} convert(%u{k}), sharding={ps}\n  %g{k} = {fsrc} convert(%p{}), sharding={}\n  \
                 %i{k} = f32[] constant(3)\n  {name}.sas = {fsh} select-and-scatter(%f{k}, %g{k}, %i{k}), window={{{window}}}, select=%{sel}f, scatter=%addf, sharding={out_sharding}\n  \
                 {name} = {sh} convert({name}.sas), sharding={out_sharding}\n",
                first + 1,
                params[1].1,
                ps = params[0].1,
            );
            (
                body,
                dims.clone(),
                format!("select-and-scatter {window} {sel}"),
            )
        }
        0 | 1 => {
            // reduce-window
            let (mut size, mut stride, mut pad, mut bd, mut wd) =
                (vec![], vec![], vec![], vec![], vec![]);
            let mut out = vec![];
            for &d in &dims {
                let s = g.range(1, 5);
                let st = g.range(1, 4);
                let (lo, hi) = (g.range(0, 4), g.range(0, 4));
                let b = if g.below(4) == 0 { g.range(2, 3) } else { 1 };
                let w = if g.below(4) == 0 { g.range(2, 3) } else { 1 };
                let padded = (d - 1) * b + 1 + lo + hi;
                let span = (s - 1) * w + 1;
                if padded < span {
                    return None;
                }
                out.push((padded - span) / st + 1);
                size.push(s.to_string());
                stride.push(st.to_string());
                pad.push(format!("{lo}_{hi}"));
                bd.push(b.to_string());
                wd.push(w.to_string());
            }
            let (red, init) = if g.below(2) == 0 {
                ("add", "0")
            } else {
                ("max", "-2147483648")
            };
            let window = format!(
                "size={} stride={} pad={} lhs_dilate={} rhs_dilate={}",
                size.join("x"),
                stride.join("x"),
                pad.join("x"),
                bd.join("x"),
                wd.join("x")
            );
            let body = format!(
                "  %i{k} = s32[] constant({init})\n  {name} = {} reduce-window({p}, %i{k}), window={{{window}}}, to_apply=%{red}, sharding={out_sharding}\n",
                shape(&out)
            );
            (body, out, format!("reduce-window {window} {red}"))
        }
        2 => {
            let mut pads = vec![];
            let mut out = vec![];
            for &d in &dims {
                let (lo, hi, int) = (g.range(-3, 5), g.range(-3, 5), g.range(0, 2));
                let o = lo + hi + d + (d - 1) * int;
                if o <= 0 {
                    return None;
                }
                out.push(o);
                pads.push(format!("{lo}_{hi}_{int}"));
            }
            let body = format!(
                "  %v{k} = s32[] constant(-7)\n  {name} = {} pad({p}, %v{k}), padding={}, sharding={out_sharding}\n",
                shape(&out),
                pads.join("x")
            );
            (body, out, format!("pad {}", pads.join("x")))
        }
        3 => {
            let mut sl = vec![];
            let mut out = vec![];
            for &d in &dims {
                let start = g.range(0, d - 1);
                let limit = g.range(start + 1, d);
                let stride = g.range(1, 3);
                out.push((limit - start + stride - 1) / stride);
                sl.push(format!("[{start}:{limit}:{stride}]"));
            }
            let body = format!(
                "  {name} = {} slice({p}), slice={{{}}}, sharding={out_sharding}\n",
                shape(&out),
                sl.join(", ")
            );
            (body, out, format!("slice {}", sl.join(",")))
        }
        4 => {
            let r: Vec<String> = (0..rank)
                .filter(|_| g.below(2) == 0)
                .map(|d| d.to_string())
                .collect();
            let r = if r.is_empty() {
                vec!["0".to_string()]
            } else {
                r
            };
            let body = format!(
                "  {name} = {} reverse({p}), dimensions={{{}}}, sharding={out_sharding}\n",
                shape(&dims),
                r.join(",")
            );
            (body, dims.clone(), format!("reverse {}", r.join(",")))
        }
        5 => {
            let along = g.below(rank as u64) as usize;
            let mut out = dims.clone();
            let mut ops = vec![p.clone()];
            for j in 1..=g.range(1, 2) as usize {
                let mut d2 = dims.clone();
                d2[along] = g.range(1, 9);
                out[along] += d2[along];
                params.push((shape(&d2), sharding(g, rank, n)));
                ops.push(format!("%p{}", first + j));
            }
            let body = format!(
                "  {name} = {} concatenate({}), dimensions={{{along}}}, sharding={out_sharding}\n",
                shape(&out),
                ops.join(", ")
            );
            (body, out, format!("concatenate along {along}"))
        }
        _ => {
            let sizes: Vec<i64> = dims.iter().map(|&d| g.range(1, d)).collect();
            let mut idx = vec![];
            for _ in 0..rank {
                params.push(("s32[]".to_string(), "{replicated}".to_string()));
                idx.push(format!("%p{}", first + params.len() - 1));
            }
            if g.below(2) == 0 {
                let body = format!(
                    "  {name} = {} dynamic-slice({p}, {}), dynamic_slice_sizes={{{}}}, sharding={out_sharding}\n",
                    shape(&sizes),
                    idx.join(", "),
                    sizes.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
                );
                (body, sizes, "dynamic-slice".to_string())
            } else {
                params.push((shape(&sizes), sharding(g, rank, n)));
                let u = format!("%p{}", first + params.len() - 1);
                let body = format!(
                    "  {name} = {} dynamic-update-slice({p}, {u}, {}), sharding={out_sharding}\n",
                    shape(&dims),
                    idx.join(", ")
                );
                (body, dims.clone(), "dynamic-update-slice".to_string())
            }
        }
    };
    let mut text = String::new();
    for (j, (s, sh)) in params.iter().enumerate() {
        text += &format!(
            "  %p{} = {s} parameter({}), sharding={sh}\n",
            first + j,
            first + j
        );
    }
    text += &body;
    Some(Case {
        what: format!("{what} of {:?} {} -> {out_sharding}", dims, params[0].1),
        params,
        body: text,
        result: name,
        result_shape: shape(&out_dims),
        result_sharding: out_sharding,
    })
}

const REDUCERS: &str = "%add (a: s32[], b: s32[]) -> s32[] {\n  %a = s32[] parameter(0)\n  %b = s32[] parameter(1)\n  ROOT %r = s32[] add(%a, %b)\n}\n\n%max (x: s32[], y: s32[]) -> s32[] {\n  %x = s32[] parameter(0)\n  %y = s32[] parameter(1)\n  ROOT %m = s32[] maximum(%x, %y)\n}\n\n%ge (g0: s32[], g1: s32[]) -> pred[] {\n  %g0 = s32[] parameter(0)\n  %g1 = s32[] parameter(1)\n  ROOT %c = pred[] compare(%g0, %g1), direction=GE\n}\n\n%le (l0: s32[], l1: s32[]) -> pred[] {\n  %l0 = s32[] parameter(0)\n  %l1 = s32[] parameter(1)\n  ROOT %c = pred[] compare(%l0, %l1), direction=LE\n}\n\n%gef (gf0: f32[], gf1: f32[]) -> pred[] {\n  %gf0 = f32[] parameter(0)\n  %gf1 = f32[] parameter(1)\n  ROOT %c = pred[] compare(%gf0, %gf1), direction=GE\n}\n\n%lef (lf0: f32[], lf1: f32[]) -> pred[] {\n  %lf0 = f32[] parameter(0)\n  %lf1 = f32[] parameter(1)\n  ROOT %c = pred[] compare(%lf0, %lf1), direction=LE\n}\n\n%addf (af0: f32[], af1: f32[]) -> f32[] {\n  %af0 = f32[] parameter(0)\n  %af1 = f32[] parameter(1)\n  ROOT %r = f32[] add(%af0, %af1)\n}\n\n";

fn module_text(n: i64, cases: &[Case]) -> String {
    let params: Vec<String> = cases
        .iter()
        .flat_map(|c| c.params.iter().map(|(s, _)| s.clone()))
        .collect();
    let body: String = cases.iter().map(|c| c.body.as_str()).collect();
    let results: Vec<(String, String, String)> = cases
        .iter()
        .map(|c| {
            (
                c.result_shape.clone(),
                c.result.clone(),
                c.result_sharding.clone(),
            )
        })
        .collect();
    batch_module("halo_cases", n, REDUCERS, &params, &body, &results)
}

#[test]
fn random_windowed_ops_run_equal() {
    let total = case_count("HALO_CASES", 600);
    let per_module = 250;
    let mut g = Gen(harness::Rng::new(15));
    let mut done = 0;
    let mut halos = 0;
    let mut defaulted = 0;
    let mut round = 0;
    while done < total {
        let n = [2i64, 4, 8][round % 3];
        round += 1;
        let want = per_module.min(total - done);
        let mut cases = Vec::with_capacity(want);
        let mut first = 0;
        while cases.len() < want {
            if let Some(c) = case(&mut g, cases.len(), first, n) {
                first += c.params.len();
                cases.push(c);
            }
        }
        let text = module_text(n, &cases);
        let (original, part, report) = partition_batch(&text);
        halos += report
            .collectives
            .iter()
            .filter(|c| c.reason.starts_with("halo"))
            .count();
        // The cases are named c<k>; their scalar constants take the default path (free).
        defaulted += defaulted_with_prefix(&report, 'c');
        assert_batch_equal(&original, &part, n as usize, round as u64, |k| {
            format!("c{k} {}", cases[k].what)
        });
        done += want;
    }
    eprintln!(
        "{done} windowed cases executed and equal; {halos} halo collectives; {defaulted} took the default path"
    );
    assert!(halos > done / 10, "too few halo exchanges: {halos}");
    assert_eq!(defaulted, 0, "windowed ops took the default path");
}
