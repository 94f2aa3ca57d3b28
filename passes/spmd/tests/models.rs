//! Sharding propagation on real models against XLA's answer.
//!
//! testdata/models/<model>.before-propagation.hlo is the module XLA's own `sharding-propagation`
//! pass received when jax compiled the model on a 2x4 mesh, and <model>.after-propagation.hlo
//! what that pass returned (both written by scripts/fixtures/make_spmd_models.py). This test runs our
//! pass on the first and compares, instruction by instruction (matched by name), our sharding
//! with XLA's. A difference must be listed, with an argument, in
//! testdata/models/propagation_differences.md.
//!
//! `cargo test -p tessera-spmd --test models -- --nocapture` prints the counts per model.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use tessera_hlo::module::Module;
use tessera_hlo::opcode::Opcode;
use tessera_hlo::sharding::{Sharding, ShardingKind, SubgroupType};
use tessera_hlo::text::{parse_module, sharding_to_string};
use tessera_pass::Registry;

const MODELS: &[&str] = &[
    "mlp",
    "transformer_block",
    "convnet",
    "embedding",
    "transformer48",
];

fn models_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models")
}

fn read(name: &str) -> Module {
    let path = models_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_module(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A sharding reduced to what it means, so that two spellings of the same layout compare equal:
/// device lists expanded, `last_tile_dims={replicated}` read as `last_tile_dim_replicate`, a
/// tiling that splits nothing read as replicated, metadata and shard groups dropped.
#[derive(Debug, PartialEq, Eq)]
enum Meaning {
    Replicated,
    Manual,
    Unknown,
    Unreduced,
    Maximal(i64),
    Tiled {
        dims: Vec<i64>,
        devices: Vec<i64>,
        subgroups: Vec<SubgroupType>,
    },
    Tuple(Vec<Meaning>),
}

fn meaning(s: &Sharding) -> Meaning {
    match &s.kind {
        ShardingKind::Replicated => Meaning::Replicated,
        ShardingKind::Manual => Meaning::Manual,
        ShardingKind::Unknown => Meaning::Unknown,
        ShardingKind::Unreduced => Meaning::Unreduced,
        ShardingKind::Maximal(d) => Meaning::Maximal(*d),
        ShardingKind::Tuple(elements) => Meaning::Tuple(elements.iter().map(meaning).collect()),
        // A named sharding means what its tiled equivalent means.
        ShardingKind::Named(n) => match n.to_tiled(None) {
            Ok(t) => meaning(&t),
            Err(e) => panic!("invalid named sharding in a model: {e}"),
        },
        ShardingKind::Tiled(t) => {
            let dims = t.tile_assignment.dims().to_vec();
            let mut subgroups = t.last_tile_dims.clone();
            if t.replicate_on_last_tile_dim {
                subgroups = vec![SubgroupType::Replicated];
            }
            let data_rank = dims.len() - subgroups.len();
            let splits_data = dims[..data_rank].iter().any(|&d| d > 1);
            let all_replicated = subgroups.iter().all(|&g| g == SubgroupType::Replicated);
            if !splits_data && all_replicated {
                return Meaning::Replicated;
            }
            Meaning::Tiled {
                dims,
                devices: t.tile_assignment.devices(),
                subgroups,
            }
        }
    }
}

/// name -> (opcode, first operand's name, sharding) of every instruction.
type Table = BTreeMap<String, (Opcode, Option<String>, Option<Sharding>)>;

fn table(m: &Module) -> Table {
    let mut t = Table::new();
    for &c in m.computations() {
        for &i in m.comp(c).instructions() {
            let ins = m.instr(i);
            let first = ins
                .operands()
                .first()
                .map(|&o| m.instr(o).name().to_string());
            t.insert(
                ins.name().to_string(),
                (ins.opcode(), first, ins.sharding.clone()),
            );
        }
    }
    t
}

/// The instruction of `after` that stands for `name` of `before`: the same name, or, for a
/// `custom-call` "Sharding" that a propagation pass replaced by a copy (XLA does), the copy
/// of the same operand that `before` does not have.
fn counterpart<'a>(
    name: &str,
    before: &Table,
    after: &'a Table,
) -> Option<&'a (Opcode, Option<String>, Option<Sharding>)> {
    if let Some(x) = after.get(name) {
        return Some(x);
    }
    let (_, operand, _) = before.get(name)?;
    after
        .iter()
        .find(|(n, (op, o, _))| *op == Opcode::Copy && o == operand && !before.contains_key(*n))
        .map(|(_, x)| x)
}

fn show(s: &Option<Sharding>) -> String {
    s.as_ref().map_or("(none)".to_string(), sharding_to_string)
}

/// `model/instruction` keys listed in the allowlist, each with its argument.
fn allowlist() -> BTreeMap<String, String> {
    let path = models_dir().join("propagation_differences.md");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        // - `mlp/dot.3`: argument
        let Some(rest) = line.strip_prefix("- `") else {
            continue;
        };
        let Some((key, arg)) = rest.split_once("`:") else {
            panic!("{}: entry without `: argument`: {line}", path.display());
        };
        let arg = arg.trim();
        assert!(
            arg.len() >= 20,
            "{}: entry `{key}` needs an argument (a sentence), found {arg:?}",
            path.display()
        );
        out.insert(key.to_string(), arg.to_string());
    }
    out
}

/// Runs our pass on `model`'s before-module; returns one line per instruction whose sharding
/// differs from XLA's, keyed `model/name`, and the number of instructions compared.
fn differences(registry: &Registry, model: &str) -> (BTreeMap<String, String>, usize) {
    let mut ours = read(&format!("{model}.before-propagation.hlo"));
    let before = table(&ours);
    let xla = table(&read(&format!("{model}.after-propagation.hlo")));
    let info = registry
        .get("sharding-propagation")
        .expect("sharding-propagation is not registered");
    let mut pass = (info.make)(&[]).expect("default options");
    pass.run(&mut ours)
        .unwrap_or_else(|e| panic!("{model}: sharding-propagation failed: {e}"));
    let ours = table(&ours);
    let mut diffs = BTreeMap::new();
    let mut compared = 0;
    for name in before.keys() {
        let (Some(x), Some(o)) = (
            counterpart(name, &before, &xla),
            counterpart(name, &before, &ours),
        ) else {
            diffs.insert(
                format!("{model}/{name}"),
                "missing after propagation (in XLA's module or ours)".to_string(),
            );
            continue;
        };
        compared += 1;
        let same = match (&x.2, &o.2) {
            (None, None) => true,
            (Some(a), Some(b)) => meaning(a) == meaning(b),
            _ => false,
        };
        if !same {
            diffs.insert(
                format!("{model}/{name}"),
                format!("ours {} vs XLA {}", show(&o.2), show(&x.2)),
            );
        }
    }
    (diffs, compared)
}

#[test]
fn shardings_agree_with_xla() {
    let mut registry = Registry::with_generic_passes();
    tessera_spmd::register(&mut registry);
    let allowed = allowlist();
    let mut unexplained = Vec::new();
    let mut seen = BTreeSet::new();
    for model in MODELS {
        let (diffs, compared) = differences(&registry, model);
        eprintln!(
            "{model}: {compared} instructions compared, {} differ from XLA ({} allowlisted)",
            diffs.len(),
            diffs.keys().filter(|k| allowed.contains_key(*k)).count()
        );
        for (k, d) in diffs {
            seen.insert(k.clone());
            if !allowed.contains_key(&k) {
                unexplained.push(format!("  {k}: {d}"));
            }
        }
    }
    for k in allowed.keys().filter(|k| !seen.contains(*k)) {
        eprintln!("allowlisted but agreeing now (remove it): {k}");
    }
    assert!(
        unexplained.is_empty(),
        "{} shardings differ from XLA's and are not in testdata/models/propagation_differences.md:\n{}",
        unexplained.len(),
        unexplained.join("\n")
    );
}

#[test]
fn meaning_ignores_spelling() {
    let p = |s: &str| tessera_hlo::text::parse_sharding(s).unwrap();
    assert_eq!(
        meaning(&p("{devices=[2,2]0,2,1,3}")),
        meaning(&p("{devices=[2,2]<=[2,2]T(1,0)}"))
    );
    assert_eq!(
        meaning(&p("{devices=[2,1,2]0,1,2,3 last_tile_dims={replicated}}")),
        meaning(&p("{devices=[2,1,2]<=[4] last_tile_dim_replicate}"))
    );
    assert_eq!(
        meaning(&p("{devices=[1,1,4]0,1,2,3 last_tile_dim_replicate}")),
        Meaning::Replicated
    );
    assert_ne!(
        meaning(&p("{devices=[2,2]0,1,2,3}")),
        meaning(&p("{devices=[2,2]0,2,1,3}"))
    );
    assert_ne!(
        meaning(&p("{devices=[2,1,2]0,1,2,3 last_tile_dims={manual}}")),
        meaning(&p("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"))
    );
}

/// The fixtures are XLA's: each pair holds the same instructions (up to the Sharding
/// custom-calls XLA turns into copies), and XLA's after-module gives a sharding to every
/// instruction whose shape is an array or a tuple in the entry.
#[test]
fn fixtures_are_consistent() {
    for model in MODELS {
        let before = table(&read(&format!("{model}.before-propagation.hlo")));
        let after = table(&read(&format!("{model}.after-propagation.hlo")));
        for name in before.keys() {
            assert!(
                counterpart(name, &before, &after).is_some(),
                "{model}: {name} has no counterpart in XLA's after-module"
            );
        }
        let sharded = after.values().filter(|x| x.2.is_some()).count();
        assert!(
            sharded * 2 > after.len(),
            "{model}: only {sharded} of {} instructions sharded after XLA's propagation",
            after.len()
        );
    }
}
