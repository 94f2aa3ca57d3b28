//! The fast search must make exactly the scan's choices (recompute candidates, single items and
//! blocks): every recompute-mode filetest, and a few hundred random graphs under random limits
//! and block settings, give
//! byte-identical modules and the same summaries with `remat.search=fast` and
//! `remat.search=faithful` (and the filetests also with `remat.mode=recompute-and-compress` and
//! the identity compact shape, which must choose the same); and in the compressing modes,
//! the filetests that set a mode and random graphs whose values compress (XLA's test size
//! and compact-shape functions), with and without the peak guard.

use tessera_hlo::text::{parse_module, print_module, PrintOptions};
use tessera_hlo::Module;
use tessera_pass::driver::{default_hooks, run_opt, OptSpec};
use tessera_pass::Registry;
use tessera_remat::remat::{CompactShape, SizeFunction};
use tessera_remat::{RematMode, RematOptions, Rematerialization, SearchKind};

fn testdata() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/remat")
}

#[test]
fn filetests_give_the_same_result_with_both_searches() {
    let mut r = Registry::with_generic_passes();
    tessera_remat::register(&mut r);
    let hooks = default_hooks();
    let mut compared = 0;
    let mut compressing = 0;
    let mut entries: Vec<_> = std::fs::read_dir(testdata())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("remat-")
        })
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).unwrap();
        let run = text.lines().next().unwrap();
        if run.contains("remat.mode=") {
            // A compressing mode of its own: both searches with it.
            let outs: Vec<String> = ["fast", "faithful"]
                .iter()
                .map(|search| {
                    let mut spec = OptSpec::from_run_line(run).unwrap();
                    spec.pass_options.push(format!("remat.search={search}"));
                    spec.pass_options.push("remat.check_invariants=true".into());
                    run_opt(&text, &spec, &r, &hooks)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                        .text
                })
                .collect();
            assert_eq!(outs[0], outs[1], "{} (its own mode)", path.display());
            compressing += 1;
            continue;
        }
        let mut outs = Vec::new();
        // With the identity compact shape compression never saves anything, so
        // recompute-and-compress (which always scans) must choose as recompute does.
        for (search, mode) in [
            ("fast", "recompute"),
            ("faithful", "recompute"),
            ("fast", "recompute-and-compress"),
        ] {
            let mut spec = OptSpec::from_run_line(run).unwrap();
            spec.pass_options.push(format!("remat.search={search}"));
            spec.pass_options.push(format!("remat.mode={mode}"));
            spec.pass_options.push("remat.check_invariants=true".into());
            let out = run_opt(&text, &spec, &r, &hooks)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            outs.push(out.text);
        }
        assert_eq!(outs[0], outs[1], "{}", path.display());
        // The floor differs by mode (a held value may be compact when compressing, so only
        // *local* bounds it there), and so may the verdict that quotes it; the choices may not.
        let choices = |s: &str| -> String {
            s.lines()
                .filter(|l| {
                    !l.starts_with("// floor:")
                        && !l.starts_with("// below the floor")
                        && !l.starts_with("// BUG")
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            choices(&outs[0]),
            choices(&outs[2]),
            "{} (recompute-and-compress)",
            path.display()
        );
        compared += 1;
    }
    assert!(compared >= 20, "only {compared} files compared");
    assert!(
        compressing >= 3,
        "only {compressing} compressing files compared"
    );
}

/// A small deterministic generator (no dependency needed).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random scheduled DAG of elementwise ops on f32[256] (equal sizes make many cost ties,
/// which is where the two searches could disagree), with a few rng ops (not
/// rematerializable) and control edges.
fn random_module(seed: u64) -> String {
    let mut g = Lcg(seed);
    let n = 8 + g.below(28) as usize;
    let mut s = String::from("HloModule random, is_scheduled=true\n\nENTRY %main (p: f32[256], q: f32[256]) -> f32[256] {\n");
    s.push_str("  %p = f32[256]{0} parameter(0)\n  %q = f32[256]{0} parameter(1)\n");
    let mut names = vec!["p".to_string(), "q".to_string()];
    let mut uses = vec![0usize; n + 2];
    for k in 0..n {
        let name = format!("v{k}");
        let a = g.below(names.len() as u64) as usize;
        let kind = g.below(10);
        let line = if kind == 0 {
            format!(
                "  %{name} = f32[256]{{0}} rng(f32[] %c0, f32[] %c1), distribution=rng_uniform\n"
            )
        } else if kind < 4 {
            uses[a] += 1;
            format!(
                "  %{name} = f32[256]{{0}} negate(f32[256]{{0}} %{})\n",
                names[a]
            )
        } else {
            // Prefer recent operands and one old one, to make long live ranges.
            let b = names.len() - 1 - g.below(names.len().min(3) as u64) as usize;
            uses[a] += 1;
            uses[b] += 1;
            // Now and then a control edge from an earlier value.
            let ctrl = if kind == 9 && k > 1 {
                format!(", control-predecessors={{%v{}}}", g.below(k as u64 - 1))
            } else {
                String::new()
            };
            format!(
                "  %{name} = f32[256]{{0}} add(f32[256]{{0}} %{}, f32[256]{{0}} %{}){ctrl}\n",
                names[a], names[b]
            )
        };
        if kind == 0 && !s.contains("%c0 =") {
            s.push_str("  %c0 = f32[] constant(0)\n  %c1 = f32[] constant(1)\n");
        }
        s.push_str(&line);
        names.push(name);
    }
    // Sum everything nobody uses into the root so nothing is dead.
    let mut acc = names.last().unwrap().clone();
    let last = names.len() - 1;
    for (i, name) in names.iter().enumerate().take(last).skip(2) {
        if uses[i] == 0 {
            let next = format!("s{i}");
            s.push_str(&format!(
                "  %{next} = f32[256]{{0}} add(f32[256]{{0}} %{acc}, f32[256]{{0}} %{name})\n"
            ));
            acc = next;
        }
    }
    s.push_str(&format!(
        "  ROOT %out = f32[256]{{0}} negate(f32[256]{{0}} %{acc})\n}}\n"
    ));
    s
}

fn run(m: &mut Module, limit: i64, search: SearchKind, blocks: usize) -> String {
    run_with(
        m,
        RematOptions {
            memory_limit: Some(limit),
            search,
            block_size_limit: blocks,
            block_rematerialization_factor: 2,
            ..RematOptions::default()
        },
    )
}

#[test]
fn random_graphs_give_the_same_result_with_both_searches() {
    let mut changed = 0;
    let mut with_blocks = 0;
    for seed in 0..300u64 {
        let text = random_module(seed);
        let base = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        tessera_hlo::verify::verify(&base, &Default::default())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut g = Lcg(seed ^ 0x5eed);
        let limit = 1024 * (1 + g.below(12) as i64);
        // Single instructions, and blocks of up to 4 (the block phase's budget depends on the
        // single-instruction effort, which the fast search reports as the scan would).
        let blocks = if seed % 2 == 0 { 1 } else { 4 };
        let fast = run(&mut base.clone(), limit, SearchKind::Fast, blocks);
        let faithful = run(&mut base.clone(), limit, SearchKind::Faithful, blocks);
        assert_eq!(
            fast, faithful,
            "seed {seed}, limit {limit}, blocks {blocks}\n{text}"
        );
        if fast.contains(".remat") {
            changed += 1;
        }
        // The summary tuple ends with the largest block rematerialized.
        if !fast.ends_with(", 1)") && !fast.ends_with(", 0)") {
            with_blocks += 1;
        }
    }
    assert!(changed > 100, "only {changed} graphs were rematerialized");
    assert!(with_blocks > 10, "only {with_blocks} graphs used blocks");
    eprintln!("{changed} of 300 random graphs rematerialized, {with_blocks} with blocks");
}

/// A random scheduled graph with values of two sizes: f32[256] element-wise ops and
/// f32[] scalar ops broadcast into them, so that `min_remat_size` leaves the scalars off the
/// express lane and blocks start only at the large values but run through small ones.
fn random_mixed_module(seed: u64) -> String {
    let mut g = Lcg(seed);
    let n = 10 + g.below(30) as usize;
    let mut s = String::from(
        "HloModule mixed, is_scheduled=true\n\nENTRY %main (p: f32[256], q: f32[]) -> f32[256] {\n",
    );
    s.push_str("  %p = f32[256]{0} parameter(0)\n  %q = f32[] parameter(1)\n");
    let mut big = vec!["p".to_string()];
    let mut small = vec!["q".to_string()];
    let mut used = std::collections::BTreeSet::new();
    for k in 0..n {
        let kind = g.below(10);
        let recent = |g: &mut Lcg, v: &[String]| -> String {
            if g.below(3) == 0 {
                v[g.below(v.len() as u64) as usize].clone()
            } else {
                v[v.len() - 1 - g.below(v.len().min(3) as u64) as usize].clone()
            }
        };
        if kind < 3 {
            let a = recent(&mut g, &small);
            let b = recent(&mut g, &small);
            used.insert(a.clone());
            used.insert(b.clone());
            let name = format!("s{k}");
            s.push_str(&format!(
                "  %{name} = f32[] multiply(f32[] %{a}, f32[] %{b})\n"
            ));
            small.push(name);
        } else if kind < 5 {
            let a = recent(&mut g, &small);
            used.insert(a.clone());
            let name = format!("v{k}");
            s.push_str(&format!(
                "  %{name} = f32[256]{{0}} broadcast(f32[] %{a}), dimensions={{}}\n"
            ));
            big.push(name);
        } else {
            let a = recent(&mut g, &big);
            let b = recent(&mut g, &big);
            used.insert(a.clone());
            used.insert(b.clone());
            let name = format!("v{k}");
            let ctrl = if kind == 9 && big.len() > 2 {
                format!(
                    ", control-predecessors={{%{}}}",
                    big[1 + g.below(big.len() as u64 - 1) as usize]
                )
            } else {
                String::new()
            };
            let op = if kind < 8 { "add" } else { "maximum" };
            s.push_str(&format!(
                "  %{name} = f32[256]{{0}} {op}(f32[256]{{0}} %{a}, f32[256]{{0}} %{b}){ctrl}\n"
            ));
            big.push(name);
        }
    }
    // Everything nobody uses goes into the root.
    let mut acc = big.last().unwrap().clone();
    let mut k = 0;
    for name in small.iter().skip(1) {
        if !used.contains(name) {
            let b = format!("bs{k}");
            let t = format!("ts{k}");
            k += 1;
            s.push_str(&format!(
                "  %{b} = f32[256]{{0}} broadcast(f32[] %{name}), dimensions={{}}\n  %{t} = f32[256]{{0}} add(f32[256]{{0}} %{acc}, f32[256]{{0}} %{b})\n"
            ));
            acc = t;
        }
    }
    for name in big.iter().skip(1) {
        if !used.contains(name) && *name != acc && big.last() != Some(name) {
            let t = format!("tb{k}");
            k += 1;
            s.push_str(&format!(
                "  %{t} = f32[256]{{0}} add(f32[256]{{0}} %{acc}, f32[256]{{0}} %{name})\n"
            ));
            acc = t;
        }
    }
    s.push_str(&format!(
        "  ROOT %out = f32[256]{{0}} negate(f32[256]{{0}} %{acc})\n}}\n"
    ));
    s
}

/// Runs the pass with `opts` (invariants checked), verifies the result, and gives the printed
/// module with the summary's figures, for comparing two searches.
fn run_with(m: &mut Module, opts: RematOptions) -> String {
    let mut p = Rematerialization::new(RematOptions {
        check_invariants: true,
        ..opts
    });
    let s = p.run_with_summary(m).unwrap();
    tessera_hlo::verify::verify(m, &Default::default()).unwrap();
    format!(
        "{}\n{:?}",
        print_module(m, &PrintOptions::default()),
        (
            s.peak_after,
            s.instructions_rematerialized,
            s.net_instructions_added,
            s.effort,
            s.max_block_size
        )
    )
}

/// The block phase of the fast search (one queue per block size, run lengths for the
/// effort) must choose as the scan does: blocks of up to 2, 3, 4 or 8, budgets of 1 to 4
/// times the single-instruction effort, and a sparse express lane (`min_remat_size` above
/// the scalars' 4 bytes).
#[test]
fn random_graphs_with_blocks_give_the_same_result_with_both_searches() {
    let mut with_blocks = 0;
    let mut changed = 0;
    for seed in 0..240u64 {
        let text = random_mixed_module(seed);
        let base = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        tessera_hlo::verify::verify(&base, &Default::default())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut g = Lcg(seed ^ 0xb10c);
        let opts = RematOptions {
            memory_limit: Some(1024 * (1 + g.below(10) as i64)),
            block_size_limit: [2, 3, 4, 8][g.below(4) as usize],
            block_rematerialization_factor: 1 + g.below(4) as i64,
            min_remat_size: if g.below(2) == 0 { 0 } else { 16 },
            ..RematOptions::default()
        };
        let fast = run_with(
            &mut base.clone(),
            RematOptions {
                search: SearchKind::Fast,
                ..opts.clone()
            },
        );
        let faithful = run_with(
            &mut base.clone(),
            RematOptions {
                search: SearchKind::Faithful,
                ..opts.clone()
            },
        );
        assert_eq!(fast, faithful, "seed {seed}, {opts:?}\n{text}");
        if fast.contains(".remat") {
            changed += 1;
        }
        if !fast.ends_with(", 1)") && !fast.ends_with(", 0)") {
            with_blocks += 1;
        }
    }
    eprintln!("{changed} of 240 mixed graphs rematerialized, {with_blocks} with blocks");
    assert!(changed > 80, "only {changed} graphs were rematerialized");
    assert!(with_blocks > 20, "only {with_blocks} graphs used blocks");
}

/// The compressing modes: the fast search's compression index and its recompute queue
/// together must choose as the scan does, compressions included. Values are f32[64,2]
/// (16 KiB under XLA's test size function, 512 bytes compact), so compressions save bytes.
#[test]
fn random_graphs_compress_the_same_with_both_searches() {
    let mut compressed = 0;
    let mut recomputed = 0;
    for seed in 0..240u64 {
        let text = random_module(seed)
            .replace("f32[256]{0}", "f32[64,2]{1,0}")
            .replace("f32[256]", "f32[64,2]");
        let base = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut g = Lcg(seed ^ 0xc0de);
        let limit = 16384 * (1 + g.below(12) as i64);
        let mode = if seed % 2 == 0 {
            RematMode::RecomputeAndCompress
        } else {
            RematMode::Compress
        };
        let opts = |search| RematOptions {
            memory_limit: Some(limit),
            search,
            mode,
            size_function: SizeFunction::PadMinorTo64,
            compact_shape: CompactShape::SwapMinor,
            peak_guard: seed % 3 != 0,
            block_size_limit: if seed % 4 < 2 { 1 } else { 4 },
            block_rematerialization_factor: 2,
            ..RematOptions::default()
        };
        let fast = run_with(&mut base.clone(), opts(SearchKind::Fast));
        let faithful = run_with(&mut base.clone(), opts(SearchKind::Faithful));
        assert_eq!(
            fast, faithful,
            "seed {seed}, limit {limit}, {mode:?}\n{text}"
        );
        compressed += fast.contains(".remat_compressed") as usize;
        recomputed += fast.contains(".remat =") as usize;
    }
    assert!(compressed > 40, "only {compressed} graphs compressed");
    eprintln!("{compressed} of 240 random graphs compressed, {recomputed} recomputed");
}

/// `faithful_effort_limit`: a faithful run that reaches its cap halfway (or at once) goes on
/// with the fast search from where it is, so it still chooses as both searches do, blocks
/// and compressions included, and says so in its summary.
#[test]
fn a_capped_faithful_search_goes_on_as_the_fast_search_would() {
    let mut degraded = 0;
    for seed in 0..120u64 {
        let mut g = Lcg(seed ^ 0xca9);
        let compressing = seed % 2 == 1;
        let text = if compressing {
            random_module(seed)
                .replace("f32[256]{0}", "f32[64,2]{1,0}")
                .replace("f32[256]", "f32[64,2]")
        } else {
            random_mixed_module(seed)
        };
        let base = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let opts = RematOptions {
            memory_limit: Some(if compressing { 16384 } else { 1024 } * (1 + g.below(10) as i64)),
            block_size_limit: [1, 2, 4][g.below(3) as usize],
            block_rematerialization_factor: 2,
            mode: if compressing {
                RematMode::RecomputeAndCompress
            } else {
                RematMode::Recompute
            },
            size_function: if compressing {
                SizeFunction::PadMinorTo64
            } else {
                SizeFunction::Default
            },
            compact_shape: if compressing {
                CompactShape::SwapMinor
            } else {
                CompactShape::Identity
            },
            search: SearchKind::Faithful,
            faithful_effort_limit: None,
            ..RematOptions::default()
        };
        let mut m = base.clone();
        let full = Rematerialization::new(opts.clone())
            .run_with_summary(&mut m)
            .unwrap();
        assert!(!full.search_degraded);
        let reference = run_with(&mut base.clone(), opts.clone());
        for cap in [0, full.scan_effort / 2] {
            let capped = RematOptions {
                faithful_effort_limit: Some(cap),
                ..opts.clone()
            };
            assert_eq!(
                run_with(&mut base.clone(), capped.clone()),
                reference,
                "seed {seed}, cap {cap}, {opts:?}\n{text}"
            );
            let s = Rematerialization::new(capped)
                .run_with_summary(&mut base.clone())
                .unwrap();
            // The cap is checked before each pick: a run degrades when it needs a pick after
            // the scan reached the cap (with a cap of 0, at its first pick).
            assert!(s.scan_effort <= full.scan_effort, "seed {seed}, cap {cap}");
            if s.search_degraded {
                assert!(s.scan_effort >= cap, "seed {seed}, cap {cap}");
                assert!(s.report().contains("reached its effort limit"));
                degraded += 1;
            } else {
                assert_eq!(s.scan_effort, full.scan_effort, "seed {seed}, cap {cap}");
                assert!(cap > 0 || full.scan_effort == 0, "seed {seed}");
            }
        }
    }
    assert!(
        degraded > 120,
        "only {degraded} of 240 capped runs degraded"
    );
}

/// A module on which the scan is quadratic: a 30,000-instruction forward/backward chain
/// under half its peak, where each of thousands of steps scans thousands of held values
/// (the scan's effort, which the summary counts, is in the tens of millions). Capped, the
/// scan evaluates at most its cap plus one step's candidates, and the result is the fast
/// search's.
#[test]
fn the_faithful_scan_is_capped_on_a_module_that_makes_it_quadratic() {
    let base = tessera_remat::gen::chain(30_000, 16);
    let mut m = base.clone();
    let peak = Rematerialization::new(RematOptions::default())
        .run_with_summary(&mut m)
        .unwrap()
        .peak_before;
    let cap = 200_000;
    let opts = |search, cap| RematOptions {
        memory_limit: Some(peak / 2),
        search,
        faithful_effort_limit: cap,
        ..RematOptions::default()
    };
    let mut fast_m = base.clone();
    let fast = Rematerialization::new(opts(SearchKind::Fast, None))
        .run_with_summary(&mut fast_m)
        .unwrap();
    let mut capped_m = base.clone();
    let capped = Rematerialization::new(opts(SearchKind::Faithful, Some(cap)))
        .run_with_summary(&mut capped_m)
        .unwrap();
    let lane = tessera_remat::gen::entry_size(&base) as i64;
    assert!(capped.search_degraded);
    assert!(
        capped.scan_effort <= cap + lane,
        "the scan evaluated {} candidates past its cap of {cap}",
        capped.scan_effort
    );
    // What the uncapped scan would have evaluated (the fast search counts it).
    assert!(
        fast.effort > 50 * cap,
        "the module is not quadratic enough: {} candidates",
        fast.effort
    );
    assert_eq!(
        print_module(&capped_m, &PrintOptions::default()),
        print_module(&fast_m, &PrintOptions::default())
    );
    assert_eq!(capped.peak_after, fast.peak_after);
    assert!(capped.instructions_rematerialized > 1000);
}
