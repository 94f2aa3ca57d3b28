//! The dot property test: random dot dimension numbers (0-2 batch, 0-2 contracting and 0-2
//! free dimensions per side, in random operand positions), random and often uneven sizes, and
//! random operand and result shardings (tiled, partially replicated, shuffled devices,
//! replicated, maximal) on 2, 4 and 8 devices. Many dots go into one module, which is
//! partitioned and executed on PJRT against the original on one device; every case must be
//! equal (s32, so exactly: integer sums do not depend on their order).
//!
//! `DOT_CASES=N` changes the number of cases (default 300 for CI; `DOT_CASES=1500` gives the
//! issue's count for the dot).

use tessera_runtime::harness;

mod common;
use common::{
    assert_batch_equal, batch_module, case_count, defaulted_with_prefix, numbered_results,
    partition_batch, random_sharding, Gen,
};

fn shape(dims: &[i64]) -> String {
    let d: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("s32[{}]", d.join(","))
}

fn list(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// A random permutation of `0..k`.
fn shuffled(g: &mut Gen, k: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..k).collect();
    for i in (1..k).rev() {
        let j = g.below(i as u64 + 1) as usize;
        p.swap(i, j);
    }
    p
}

/// One dot: its text (two parameters and the dot), result shape and sharding, description.
struct Case {
    body: String,
    params: [String; 2],
    result_shape: String,
    result_sharding: String,
    what: String,
}

fn case(g: &mut Gen, k: usize, n: i64) -> Case {
    let (nb, nc, nl, nr) = (
        g.below(3) as usize,
        g.below(3) as usize,
        g.below(3) as usize,
        g.below(3) as usize,
    );
    // Sizes: small, often not a multiple of the device count.
    let size = |g: &mut Gen| {
        if g.below(3) == 0 {
            g.range(1, 9)
        } else {
            [2, 4, 8][g.below(3) as usize]
        }
    };
    let batch: Vec<i64> = (0..nb).map(|_| size(g)).collect();
    let contracting: Vec<i64> = (0..nc).map(|_| size(g)).collect();
    let lfree: Vec<i64> = (0..nl).map(|_| size(g)).collect();
    let rfree: Vec<i64> = (0..nr).map(|_| size(g)).collect();
    // Operand dimension order: batch, contracting, free, permuted.
    let lperm = shuffled(g, nb + nc + nl);
    let rperm = shuffled(g, nb + nc + nr);
    let mut ldims = vec![0; nb + nc + nl];
    let mut rdims = vec![0; nb + nc + nr];
    for (logical, &pos) in lperm.iter().enumerate() {
        ldims[pos] = batch
            .iter()
            .chain(&contracting)
            .chain(&lfree)
            .copied()
            .nth(logical)
            .unwrap();
    }
    for (logical, &pos) in rperm.iter().enumerate() {
        rdims[pos] = batch
            .iter()
            .chain(&contracting)
            .chain(&rfree)
            .copied()
            .nth(logical)
            .unwrap();
    }
    let (lb, lc) = (&lperm[..nb], &lperm[nb..nb + nc]);
    let (rb, rc) = (&rperm[..nb], &rperm[nb..nb + nc]);
    // The result: batch, then each side's free dimensions in their operand order.
    let free = |dims: &[i64], b: &[usize], c: &[usize]| -> Vec<i64> {
        (0..dims.len())
            .filter(|d| !b.contains(d) && !c.contains(d))
            .map(|d| dims[d])
            .collect()
    };
    let out: Vec<i64> = batch
        .iter()
        .copied()
        .chain(free(&ldims, lb, lc))
        .chain(free(&rdims, rb, rc))
        .collect();
    let mut attrs = String::new();
    if nb > 0 {
        attrs += &format!(
            ", lhs_batch_dims={{{}}}, rhs_batch_dims={{{}}}",
            list(lb),
            list(rb)
        );
    }
    if nc > 0 {
        attrs += &format!(
            ", lhs_contracting_dims={{{}}}, rhs_contracting_dims={{{}}}",
            list(lc),
            list(rc)
        );
    }
    let (sl, sr, so) = (
        random_sharding(g, ldims.len(), n),
        random_sharding(g, rdims.len(), n),
        random_sharding(g, out.len(), n),
    );
    let body = format!(
        "  %l{k} = {} parameter({}), sharding={sl}\n  %r{k} = {} parameter({}), sharding={sr}\n  %c{k} = {} dot(%l{k}, %r{k}){attrs}, sharding={so}\n",
        shape(&ldims),
        2 * k,
        shape(&rdims),
        2 * k + 1,
        shape(&out),
    );
    Case {
        body,
        params: [shape(&ldims), shape(&rdims)],
        result_shape: shape(&out),
        what: format!(
            "{} {sl} x {} {sr}{attrs} -> {} {so}",
            shape(&ldims),
            shape(&rdims),
            shape(&out)
        ),
        result_sharding: so,
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
    batch_module("dot_cases", n, "", &params, &body, &results)
}

#[test]
fn random_dots_run_equal() {
    let total = case_count("DOT_CASES", 300);
    let per_module = 100;
    let mut g = Gen(harness::Rng::new(14));
    let mut done = 0;
    let mut defaulted = 0;
    let mut sums = 0;
    let mut round = 0;
    while done < total {
        let n = [2i64, 4, 8][round % 3];
        round += 1;
        let want = per_module.min(total - done);
        let cases: Vec<Case> = (0..want).map(|k| case(&mut g, k, n)).collect();
        let text = module_text(n, &cases);
        let (original, part, report) = partition_batch(&text);
        defaulted += defaulted_with_prefix(&report, 'c');
        sums += report
            .collectives
            .iter()
            .filter(|c| c.reason.starts_with("partial sums of a dot"))
            .count();
        assert_batch_equal(&original, &part, n as usize, round as u64, |k| {
            format!("c{k} {}", cases[k].what)
        });
        done += want;
    }
    eprintln!(
        "{done} dots executed and equal; {sums} partial-sum collectives; {defaulted} took the default path"
    );
    assert!(sums > done / 20, "too few split contractions: {sums}");
}
