//! The resharding property test: random shapes (uneven ones included) and random source and
//! target shardings (tiled on 1-3 dimensional meshes in iota, transposed and shuffled device
//! orders, partially replicated, replicated, maximal) on 2, 4 and 8 devices. Each case is a
//! parameter with the source sharding copied to a result with the target sharding; many cases
//! go into one module, which is partitioned and executed on PJRT against the original on one
//! device. Every case must give the global array back, and no reshard may move more bytes
//! than gathering the whole array and slicing it.
//!
//! `RESHARD_CASES=N` changes the number of cases (default 5,040).

use std::collections::HashMap;

use tessera_hlo::text::{parse_module, parse_sharding};
use tessera_pass::Pass;
use tessera_runtime::harness;
use tessera_spmd::partition::plan::replicate_then_slice_bytes;
use tessera_spmd::partition::spec::Spec;
use tessera_spmd::SpmdPartitioning;

mod common;
use common::{assert_batch_equal, random_sharding, Gen};

struct Case {
    dims: Vec<i64>,
    src: String,
    dst: String,
}

fn module_text(n: i64, cases: &[Case]) -> String {
    let mut params = Vec::new();
    let mut body = String::new();
    let mut outs = Vec::new();
    let mut out_shardings = Vec::new();
    for (k, c) in cases.iter().enumerate() {
        let dims: Vec<String> = c.dims.iter().map(i64::to_string).collect();
        let shape = format!("s32[{}]", dims.join(","));
        params.push(format!("p{k}: {shape}"));
        body += &format!("  %p{k} = {shape} parameter({k}), sharding={}\n", c.src);
        body += &format!("  %c{k} = {shape} copy(%p{k}), sharding={}\n", c.dst);
        outs.push(format!("{shape} %c{k}"));
        out_shardings.push(c.dst.trim_matches(|ch| ch == '{' || ch == '}').to_string());
    }
    let shapes: Vec<String> = outs
        .iter()
        .map(|o| o.split(' ').next().unwrap().to_string())
        .collect();
    format!(
        "HloModule reshard_cases, num_partitions={n}\n\nENTRY %main ({}) -> ({}) {{\n{body}  ROOT %t = ({}) tuple({}), sharding={{{}}}\n}}\n",
        params.join(", "),
        shapes.join(", "),
        shapes.join(", "),
        outs.join(", "),
        out_shardings
            .iter()
            .map(|s| format!("{{{s}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[test]
fn random_reshards_give_the_global_array_back() {
    let total: usize = std::env::var("RESHARD_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5040);
    let per_module = 420;
    let mut g = Gen(harness::Rng::new(2026));
    let mut done = 0;
    let mut collectives: HashMap<&'static str, usize> = HashMap::new();
    let mut last_resorts = 0;
    while done < total {
        let n = [2i64, 4, 8][(done / per_module) % 3];
        let k = per_module.min(total - done);
        let cases: Vec<Case> = (0..k)
            .map(|_| {
                let rank = 1 + g.below(3) as usize;
                let dims = (0..rank).map(|_| 1 + g.below(11) as i64).collect();
                Case {
                    dims,
                    src: random_sharding(&mut g, rank, n),
                    dst: random_sharding(&mut g, rank, n),
                }
            })
            .collect();
        let text = module_text(n, &cases);
        let original = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut part = original.clone();
        let mut pass = SpmdPartitioning::default();
        pass.run(&mut part)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        // Bytes per case never above gathering everything and slicing.
        let mut bytes: HashMap<&str, i64> = HashMap::new();
        for c in &pass.report.collectives {
            *bytes.entry(c.original.as_str()).or_default() += c.bytes;
            *collectives.entry(c.collective).or_default() += 1;
        }
        last_resorts += pass.report.last_resorts.len();
        for (j, c) in cases.iter().enumerate() {
            let src =
                Spec::from_sharding(&parse_sharding(&c.src).unwrap(), c.dims.len(), n).unwrap();
            let moved = bytes.get(format!("c{j}").as_str()).copied().unwrap_or(0);
            if !matches!(src, Spec::Maximal(_)) {
                let bound = replicate_then_slice_bytes(&src, &c.dims, 4);
                assert!(
                    moved <= bound,
                    "case c{j} {:?} {} -> {}: {moved} bytes, replicate-then-slice {bound}",
                    c.dims,
                    c.src,
                    c.dst
                );
            }
        }
        assert_batch_equal(&original, &part, n as usize, done as u64, |k| {
            let c = &cases[k];
            format!("c{k} {:?} {} -> {}", c.dims, c.src, c.dst)
        });
        done += k;
    }
    let mut kinds: Vec<_> = collectives.into_iter().collect();
    kinds.sort();
    eprintln!(
        "{done} reshard cases executed and equal; collectives {kinds:?}; {last_resorts} last resorts"
    );
}
