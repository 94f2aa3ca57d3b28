//! Random windowed-einsum dots, executed: batched dots on 2, 4 and 8 devices whose operands and
//! results are split so that a windowed loop fits (gather-like: the result split like one
//! operand, the other split along its free dimension; reduce-scatter-like: both split along
//! the contracting dimension, the result along a free one), with uneven sizes, a split batch
//! dimension on some meshes, shuffled device orders, f32 and s32, and the unrolled and
//! bidirectional variants; the threshold forced to 0. Every case must equal the original on
//! one device, and at least a third must have become a loop (the loops compete with the
//! dot's other candidates by cost). `WINDOWED_CASES=N` changes the count.

mod common;

use tessera_hlo::text::parse_module;
use tessera_pass::Pass;
use tessera_runtime::harness;
use tessera_spmd::SpmdPartitioning;

use common::{assert_batch_equal, batch_module, case_count, numbered_results, Gen};

struct Case {
    what: String,
    params: Vec<String>,
    body: String,
    result_shape: String,
    result_sharding: String,
}

fn tiled(tiles: &[i64], devices: &[i64]) -> String {
    let t: Vec<String> = tiles.iter().map(|x| x.to_string()).collect();
    let d: Vec<String> = devices.iter().map(|x| x.to_string()).collect();
    format!("{{devices=[{}]{}}}", t.join(","), d.join(","))
}

fn shape(ty: &str, dims: &[i64]) -> String {
    let d: Vec<String> = dims.iter().map(|x| x.to_string()).collect();
    format!("{ty}[{}]", d.join(","))
}

/// Case `k` (its parameters numbered from `first`) on `n` devices.
fn case(g: &mut Gen, k: usize, first: usize, n: i64) -> Case {
    let bsplit = if n >= 4 && g.below(3) == 0 { 2 } else { 1 };
    let ring = n / bsplit;
    // A device order shared by the three arrays: iota or shuffled.
    let mut devices: Vec<i64> = (0..n).collect();
    if g.below(2) == 0 {
        for i in (1..devices.len()).rev() {
            let j = g.below(i as u64 + 1) as usize;
            devices.swap(i, j);
        }
    }
    let ty = if g.below(4) == 0 { "s32" } else { "f32" };
    let b = bsplit * g.range(1, 2);
    let m = g.range(1, 3 * ring);
    let nn = g.range(1, 3 * ring);
    let kk = g.range(1, 3 * ring);
    let accumulate = g.below(2) == 0;
    let (lhs, rhs, ls, rs, out_t, dims, what);
    let out = [b, m, nn];
    if accumulate {
        // [b, m, k] x [b, k, n], contracting split over the ring.
        lhs = vec![b, m, kk.max(ring)];
        rhs = vec![b, kk.max(ring), nn];
        ls = vec![bsplit, 1, ring];
        rs = vec![bsplit, ring, 1];
        let on_lhs = g.below(2) == 0;
        out_t = if on_lhs {
            vec![bsplit, ring, 1]
        } else {
            vec![bsplit, 1, ring]
        };
        dims = "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}";
        what = format!(
            "accumulate, result split on the {} free dimension",
            if on_lhs { "lhs" } else { "rhs" }
        );
    } else {
        // [b, m, k] x [b, n, k]; the result split like `mine`, the other's free dimension
        // split over the ring (at least `ring` long).
        let mine_lhs = g.below(2) == 0;
        let (m, nn) = if mine_lhs {
            (m, nn.max(ring))
        } else {
            (m.max(ring), nn)
        };
        lhs = vec![b, m, kk];
        rhs = vec![b, nn, kk];
        ls = vec![bsplit, ring, 1];
        rs = vec![bsplit, ring, 1];
        out_t = if mine_lhs {
            vec![bsplit, ring, 1]
        } else {
            vec![bsplit, 1, ring]
        };
        dims = "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={2}";
        what = format!(
            "gather, result split like the {}",
            if mine_lhs { "lhs" } else { "rhs" }
        );
    }
    let out = [out[0], lhs[1], if accumulate { rhs[2] } else { rhs[1] }];
    let (p0, p1) = (first, first + 1);
    let (lsh, rsh, osh) = (shape(ty, &lhs), shape(ty, &rhs), shape(ty, &out));
    let (lss, rss, oss) = (
        tiled(&ls, &devices),
        tiled(&rs, &devices),
        tiled(&out_t, &devices),
    );
    let body = format!(
        "  %p{p0} = {lsh} parameter({p0}), sharding={lss}\n  %p{p1} = {rsh} parameter({p1}), sharding={rss}\n  %c{k} = {osh} dot(%p{p0}, %p{p1}), {dims}, sharding={oss}\n"
    );
    Case {
        what: format!("{what}: {lsh} {lss} x {rsh} {rss} -> {oss}"),
        params: vec![lsh, rsh],
        body,
        result_shape: osh,
        result_sharding: oss,
    }
}

fn module_text(n: i64, cases: &[Case]) -> String {
    let params: Vec<String> = cases.iter().flat_map(|c| c.params.clone()).collect();
    let body: String = cases.iter().map(|c| c.body.as_str()).collect();
    let results = numbered_results(
        cases
            .iter()
            .map(|c| (c.result_shape.as_str(), c.result_sharding.as_str())),
    );
    batch_module("windowed_cases", n, "", &params, &body, &results)
}

#[test]
fn random_windowed_dots_run_equal() {
    let total = case_count("WINDOWED_CASES", 120);
    let per_module = 40;
    let mut g = Gen(harness::Rng::new(29));
    let (mut done, mut loops, mut round) = (0, 0, 0);
    while done < total {
        let n = [2i64, 4, 8][round % 3];
        // Plain, unrolled, bidirectional in turn.
        let variant = (round / 3) % 3;
        round += 1;
        let want = per_module.min(total - done);
        let mut cases = Vec::with_capacity(want);
        let mut first = 0;
        while cases.len() < want {
            let c = case(&mut g, cases.len(), first, n);
            first += c.params.len();
            cases.push(c);
        }
        let text = module_text(n, &cases);
        let original = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut part = original.clone();
        let mut pass = SpmdPartitioning::default();
        pass.options.threshold_for_windowed_einsum_mib = 0;
        pass.options.unroll_windowed_einsum = variant == 1;
        pass.options.bidirectional_windowed_einsum = variant == 2;
        pass.run(&mut part)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        loops += pass
            .report
            .collectives
            .iter()
            .filter(|c| c.reason.starts_with("windowed einsum"))
            .count();
        assert_batch_equal(&original, &part, n as usize, round as u64, |k| {
            format!("c{k} {}", cases[k].what)
        });
        done += want;
    }
    eprintln!("{done} random windowed dots executed and equal; {loops} became windowed loops");
    // The loops are candidates of the dot's cost model: where another candidate moves fewer
    // bytes (often gathering the smaller operand and moving the result) it wins, so only a
    // share of the cases become loops (51 of the 120 CI cases on 2026-11-24); enough to keep
    // every loop shape exercised.
    assert!(
        loops * 3 >= done,
        "too few windowed loops: {loops} of {done}"
    );
}
