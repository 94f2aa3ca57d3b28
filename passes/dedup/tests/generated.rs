//! Generated modules with duplicated resources, executed on the PJRT CPU plugin.
//!
//! 208 generated cases, each a small module of element-wise work and a reduction over 1-3
//! resources read through 2-8 duplicate arguments in all (plus 1-2 plain arguments), with
//! shardings per device count (none, replicated or tiled on dimension 0; the duplicates of one
//! resource share a sharding or have none). Each case is deduplicated on its own; for execution
//! the cases are batched, 52 to a module, so that a batch compiles once per device count: the
//! batch is deduplicated as a whole and its argument map must agree with the cases' own maps.
//! The deduplicated batch, fed the original arguments through its map, runs on 1, 2, 4 and 8
//! devices and must give the outputs of the original on one device given the same array in
//! every duplicated slot. Execution follows `tessera compile --dedup`: Tessera's sharding
//! propagation, then deduplication, then Tessera's SPMD partitioner (the per-device program
//! runs as is; XLA's partitioner is not involved).

use tessera_dedup::{deduplicate, DedupOptions};
use tessera_hlo::text::parse_module;
use tessera_pass::Pass;
use tessera_runtime::harness::{self, compare_arrays, Rng, Tolerance};
use tessera_runtime::{Client, HostValue};
use tessera_spmd::{ShardingPropagation, SpmdPartitioning};

const CASES: usize = 208;
const BATCH: usize = 52;
const DEVICES: [usize; 4] = [1, 2, 4, 8];

/// One generated case: HLO instruction lines for the entry computation (parameter numbers from
/// `offset`), its output names, and the number of duplicate slots.
struct Case {
    params: Vec<String>,
    body: Vec<String>,
    outputs: Vec<(String, String)>,
    duplicates: usize,
}

fn pick(rng: &mut Rng, n: usize) -> usize {
    (rng.next_u64() % n as u64) as usize
}

/// Case `c` for `n` devices. The same `c` gives the same structure for every `n`; only the
/// shardings change.
fn case(c: usize, n: usize, offset: usize) -> Case {
    let mut rng = Rng::new(0x5eed_0000 + c as u64);
    let rank2 = pick(&mut rng, 2) == 0;
    let ty = if rank2 { "f32[8,4]" } else { "f32[16]" };
    let lay = if rank2 { "{1,0}" } else { "{0}" };
    let tiled = |n: usize| {
        if rank2 {
            format!("{{devices=[{n},1]<=[{n}]}}")
        } else {
            format!("{{devices=[{n}]<=[{n}]}}")
        }
    };
    // 1-3 resources, 2-8 duplicate slots beyond the first argument of each.
    let resources = 1 + pick(&mut rng, 3);
    let duplicates = 2 + pick(&mut rng, 7);
    let plain = 1 + pick(&mut rng, 2);
    let mut slots: Vec<Option<usize>> = (0..resources).map(Some).collect();
    for _ in 0..duplicates {
        slots.push(Some(pick(&mut rng, resources)));
    }
    for _ in 0..plain {
        slots.push(None);
    }
    // Shuffle the argument order.
    for k in (1..slots.len()).rev() {
        let j = pick(&mut rng, k + 1);
        slots.swap(k, j);
    }
    // Each resource's sharding; each duplicate has it or none.
    let res_sharding: Vec<Option<String>> = (0..resources)
        .map(|_| match (n, pick(&mut rng, 3)) {
            (1, _) | (_, 0) => None,
            (_, 1) => Some("{replicated}".to_string()),
            _ => Some(tiled(n)),
        })
        .collect();
    let mut params = Vec::new();
    let mut names = Vec::new();
    for (k, slot) in slots.iter().enumerate() {
        let name = format!("c{c}.a{k}");
        let mut line = format!("%{name} = {ty}{lay} parameter({})", offset + k);
        // Draw the same numbers for every `n`, so that only the shardings differ.
        let keep_sharding = pick(&mut rng, 3) != 0;
        let tile_plain = pick(&mut rng, 2) == 0;
        let sharding = match slot {
            Some(r) if keep_sharding => res_sharding[*r].clone(),
            Some(_) => None,
            None if n > 1 && tile_plain => Some(tiled(n)),
            None => None,
        };
        if let Some(s) = sharding {
            line.push_str(&format!(", sharding={s}"));
        }
        if let Some(r) = slot {
            line.push_str(&format!(
                ", frontend_attributes={{tessera.resource=\"case{c}/v{r}\"}}"
            ));
        }
        params.push(line);
        names.push(name);
    }
    // A chain of element-wise ops over random pairs, every argument used at least once.
    let ops = ["add", "multiply", "subtract", "maximum"];
    let mut body = Vec::new();
    let mut acc = names[0].clone();
    for (k, name) in names.iter().enumerate().skip(1) {
        let op = ops[pick(&mut rng, ops.len())];
        let out = format!("c{c}.t{k}");
        body.push(format!(
            "%{out} = {ty}{lay} {op}({ty}{lay} %{acc}, {ty}{lay} %{name})"
        ));
        acc = out;
        if pick(&mut rng, 3) == 0 {
            let out = format!("c{c}.h{k}");
            body.push(format!("%{out} = {ty}{lay} tanh({ty}{lay} %{acc})"));
            acc = out;
        }
    }
    let zero = format!("c{c}.zero");
    let sum = format!("c{c}.sum");
    body.push(format!("%{zero} = f32[] constant(0)"));
    let dims = if rank2 { "{0,1}" } else { "{0}" };
    body.push(format!(
        "%{sum} = f32[] reduce({ty}{lay} %{acc}, f32[] %{zero}), dimensions={dims}, to_apply=%add"
    ));
    Case {
        params,
        body,
        outputs: vec![(acc, format!("{ty}{lay}")), (sum, "f32[]".to_string())],
        duplicates,
    }
}

/// A module of `cases`: their parameters in order, then their bodies, and a tuple of all
/// their outputs.
fn module_text(name: &str, cases: &[Case]) -> String {
    let mut t = format!(
        "HloModule {name}\n\n%add (x: f32[], y: f32[]) -> f32[] {{\n  %x = f32[] parameter(0)\n  \
         %y = f32[] parameter(1)\n  ROOT %s = f32[] add(f32[] %x, f32[] %y)\n}}\n\nENTRY %main {{\n"
    );
    for c in cases {
        for p in &c.params {
            t.push_str(&format!("  {p}\n"));
        }
    }
    for c in cases {
        for b in &c.body {
            t.push_str(&format!("  {b}\n"));
        }
    }
    let outs: Vec<&(String, String)> = cases.iter().flat_map(|c| &c.outputs).collect();
    let shapes: Vec<&str> = outs.iter().map(|(_, s)| s.as_str()).collect();
    let ops: Vec<String> = outs.iter().map(|(n, s)| format!("{s} %{n}")).collect();
    t.push_str(&format!(
        "  ROOT %out = ({}) tuple({})\n}}\n",
        shapes.join(", "),
        ops.join(", ")
    ));
    t
}

fn batch(first: usize, n: usize) -> Vec<Case> {
    let mut offset = 0;
    (first..first + BATCH)
        .map(|c| {
            let k = case(c, n, offset);
            offset += k.params.len();
            k
        })
        .collect()
}

#[test]
fn deduplicated_modules_compute_what_the_originals_compute() {
    let clients: Vec<Client> = DEVICES.iter().map(|&n| Client::cpu(n).unwrap()).collect();
    let mut executed = 0;
    let mut duplicate_counts = [0usize; 9];
    for b in 0..CASES / BATCH {
        let first = b * BATCH;
        // Each case deduplicated on its own: its map is the batch's, shifted.
        let mut case_maps = Vec::new();
        for c in first..first + BATCH {
            let k = case(c, 1, 0);
            duplicate_counts[k.duplicates] += 1;
            let mut m = parse_module(&module_text(&format!("case{c}"), &[k])).unwrap();
            let r = deduplicate(&mut m, &DedupOptions::default()).unwrap();
            let removed: usize = r.merged.iter().map(|x| x.removed.len()).sum();
            assert_eq!(removed, case(c, 1, 0).duplicates, "case {c}");
            case_maps.push(r.argument_map);
        }
        let original = parse_module(&module_text("batch", &batch(first, 1))).unwrap();
        let mut inputs = harness::random_inputs(&original, 1000 + b as u64).unwrap();
        // The same array in every duplicated slot.
        let resources = tessera_hlo::resource::entry_resources(&original).unwrap();
        let firsts = tessera_hlo::resource::first_slot_of_resource(&resources);
        for (k, &j) in firsts.iter().enumerate() {
            assert_eq!(inputs[k], inputs[j]);
        }
        let expected = harness::run_original(&clients[0], &original, &inputs).unwrap();
        for (i, &n) in DEVICES.iter().enumerate() {
            let mut m = parse_module(&module_text("batch", &batch(first, n))).unwrap();
            let before = m.comp(m.entry().unwrap()).num_parameters();
            let r = deduplicate(&mut m, &DedupOptions::default()).unwrap();
            assert_eq!(r.argument_map.len(), before);
            if n == 1 {
                // The batch's map is the cases' maps side by side.
                let mut joined = Vec::new();
                let mut base = 0;
                for cm in &case_maps {
                    joined.extend(cm.iter().map(|p| p + base));
                    base += cm.iter().max().unwrap() + 1;
                }
                assert_eq!(r.argument_map, joined, "batch {b}");
            }
            tessera_hlo::verify::verify(&m, &Default::default()).unwrap();
            // As `tessera compile --dedup` runs it: propagation, dedup, partitioning.
            let mut sharded = parse_module(&module_text("batch", &batch(first, n))).unwrap();
            ShardingPropagation::default().run(&mut sharded).unwrap();
            let mut part = sharded.clone();
            let r2 = deduplicate(&mut part, &DedupOptions::default()).unwrap();
            assert_eq!(r2.argument_map, r.argument_map, "batch {b}, {n} devices");
            let mut spmd = SpmdPartitioning::default();
            spmd.options.num_partitions = n as i64;
            spmd.run(&mut part).unwrap();
            tessera_hlo::verify::verify(&part, &Default::default()).unwrap();
            let actual = harness::run_partitioned(&clients[i], &sharded, &part, n, &inputs)
                .unwrap_or_else(|e| panic!("batch {b}, {n} devices: {e}"));
            assert_eq!(actual.len(), expected.len());
            for (k, (e, a)) in expected.iter().zip(&actual).enumerate() {
                assert_eq!(a.mismatch_count, 0, "batch {b}, {n} devices, output {k}");
                let HostValue::Array(a) = &a.value else {
                    panic!("tuple output")
                };
                let rep = compare_arrays(k, e, a, Tolerance::for_type(e.ty)).unwrap();
                assert!(rep.passed(), "batch {b}, {n} devices: {rep}");
            }
            executed += BATCH;
        }
        if b == 0 {
            // The test can fail: different arrays in two slots of one variable are refused,
            // and a wrong map gives other numbers.
            let mut m = original.clone();
            let r = deduplicate(&mut m, &DedupOptions::default()).unwrap();
            let (j, k) = firsts
                .iter()
                .enumerate()
                .find(|(k, &j)| *k != j)
                .map(|(k, &j)| (j, k))
                .unwrap();
            inputs.swap(k, k + 1);
            if inputs[k] != inputs[j] {
                let e = harness::run_original(&clients[0], &m, &inputs).unwrap_err();
                assert!(e.to_string().contains("both go to parameter"), "{e}");
            }
            inputs.swap(k, k + 1);
            let mut wrong = r.argument_map.clone();
            let plain = (0..wrong.len())
                .filter(|&a| resources[a].is_none())
                .take(2)
                .collect::<Vec<_>>();
            wrong.swap(plain[0], plain[1]);
            tessera_hlo::resource::set_argument_map(&mut m, &wrong);
            let got = harness::run_original(&clients[0], &m, &inputs).unwrap();
            assert_ne!(got, expected, "a wrong argument map went unnoticed");
        }
    }
    assert_eq!(executed, CASES * DEVICES.len());
    for (d, count) in duplicate_counts.iter().enumerate().skip(2) {
        assert!(*count > 0, "no case with {d} duplicates");
    }
}
