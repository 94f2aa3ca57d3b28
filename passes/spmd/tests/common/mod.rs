//! Shared by the executed property tests: the PJRT client, a deterministic generator,
//! random shardings as text, and the check of one executed batch of cases.

use std::sync::OnceLock;

use tessera_hlo::text::parse_module;
use tessera_hlo::Module;
use tessera_pass::Pass;
use tessera_runtime::harness::{self, check_equivalence, CompareOptions};
use tessera_runtime::Client;
use tessera_spmd::{SpmdPartitioning, SpmdReport};

pub fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::cpu(8).unwrap_or_else(|e| panic!("cannot create the PJRT CPU client: {e}"))
    })
}

/// The number of random cases to run: the environment variable `var` when set (e.g. 3,000
/// for a full run), else `default` (kept small for CI).
#[allow(dead_code)] // the reshard test runs a fixed count
pub fn case_count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The harness's deterministic generator, drawing below a bound.
pub struct Gen(pub harness::Rng);
impl Gen {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }
    /// In `[lo, hi]`.
    #[allow(dead_code)] // not every test binary draws ranges
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
}

/// Runs `original` on one device and `part` on `n` with random inputs drawn from `seed`, and
/// panics listing every output (one per case of the batch) that differs, each named by
/// `describe(output index)`.
#[allow(dead_code)] // not every test binary compares with one device
pub fn assert_batch_equal(
    original: &Module,
    part: &Module,
    n: usize,
    seed: u64,
    describe: impl Fn(usize) -> String,
) {
    let inputs = harness::random_inputs(original, seed).unwrap();
    let report = check_equivalence(
        client(),
        original,
        part,
        n,
        &inputs,
        CompareOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    if !report.passed() {
        let bad: Vec<String> = report
            .outputs
            .iter()
            .filter(|o| !o.passed())
            .map(|o| format!("{} on {n} devices: {o}", describe(o.index)))
            .collect();
        panic!("{} cases differ:\n{}", bad.len(), bad.join("\n"));
    }
}

/// A random sharding of a rank-`rank` array on `n` devices, as text.
#[allow(dead_code)] // the halo test draws its own (windowed dims favoured)
pub fn random_sharding(g: &mut Gen, rank: usize, n: i64) -> String {
    match g.below(14) {
        0 => return format!("{{maximal device={}}}", g.below(n as u64)),
        1 => return "{replicated}".to_string(),
        _ => {}
    }
    let (tiles, repl) = split_devices(g, rank, &[], n);
    let devices = match g.below(3) {
        0 => format!("<=[{n}]"),
        // A device mesh read in transposed order: [a, n/a] T(1,0).
        1 if n >= 4 => format!("<=[2,{}]T(1,0)", n / 2),
        _ => {
            let mut d: Vec<i64> = (0..n).collect();
            for i in (1..d.len()).rev() {
                let j = g.below(i as u64 + 1) as usize;
                d.swap(i, j);
            }
            d.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
        }
    };
    tiled_text(&tiles, repl, &devices)
}

/// `n` devices split in halves over the `rank` dimensions and replication, each halving
/// landing on a dimension, on replication, or on a dimension of `favour` (offered once more
/// each): the tiles per dimension and the replication factor.
fn split_devices(g: &mut Gen, rank: usize, favour: &[usize], n: i64) -> (Vec<i64>, i64) {
    let mut tiles = vec![1i64; rank];
    let mut repl = 1;
    let mut left = n;
    let slots = rank + 1 + favour.len();
    while left > 1 {
        let slot = g.below(slots as u64) as usize;
        if slot > rank {
            tiles[favour[slot - rank - 1]] *= 2;
        } else if slot == rank {
            repl *= 2;
        } else {
            tiles[slot] *= 2;
        }
        left /= 2;
    }
    (tiles, repl)
}

/// The text of a tiled sharding (replication as the last tile dimension) over `devices`.
fn tiled_text(tiles: &[i64], repl: i64, devices: &str) -> String {
    let mut dims: Vec<String> = tiles.iter().map(i64::to_string).collect();
    if repl > 1 {
        dims.push(repl.to_string());
    }
    let suffix = if repl > 1 {
        " last_tile_dim_replicate"
    } else {
        ""
    };
    format!("{{devices=[{}]{devices}{suffix}}}", dims.join(","))
}

/// The text of one executed batch: module `name` on `n` devices with the computations
/// `prelude` (reducers the cases call), an entry taking `params` (`p<k>: shape`, in order),
/// running `body`, and returning the tuple of `results` (shape, `%name`, sharding), each
/// output keeping its sharding.
#[allow(dead_code)] // not every test binary builds batches this way
pub fn batch_module(
    name: &str,
    n: i64,
    prelude: &str,
    params: &[String],
    body: &str,
    results: &[(String, String, String)],
) -> String {
    let shapes: Vec<&str> = results.iter().map(|r| r.0.as_str()).collect();
    let outs: Vec<String> = results.iter().map(|r| format!("{} {}", r.0, r.1)).collect();
    let shardings: Vec<&str> = results.iter().map(|r| r.2.as_str()).collect();
    let params: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(k, s)| format!("p{k}: {s}"))
        .collect();
    format!(
        "HloModule {name}, num_partitions={n}\n\n{prelude}ENTRY %main ({}) -> ({}) {{\n{body}  ROOT %t = ({}) tuple({}), sharding={{{}}}\n}}\n",
        params.join(", "),
        shapes.join(", "),
        shapes.join(", "),
        outs.join(", "),
        shardings.join(", ")
    )
}

/// A random sharding of a rank-`rank` array on `n` devices, now and then (one in
/// `replicated_one_in`) replicated: the devices split over the dimensions and replication, the
/// dimensions in `favour` offered once more each (so windowed or spatial dimensions are split
/// more often), in iota or shuffled order.
#[allow(dead_code)] // not every test binary favours dimensions
pub fn favoured_sharding(
    g: &mut Gen,
    rank: usize,
    favour: &[usize],
    replicated_one_in: u64,
    n: i64,
) -> String {
    if g.below(replicated_one_in) == 0 {
        return "{replicated}".to_string();
    }
    let (tiles, repl) = split_devices(g, rank, favour, n);
    let devices = if g.below(3) == 0 {
        let mut d: Vec<i64> = (0..n).collect();
        for i in (1..d.len()).rev() {
            let j = g.below(i as u64 + 1) as usize;
            d.swap(i, j);
        }
        d.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
    } else {
        format!("<=[{n}]")
    };
    tiled_text(&tiles, repl, &devices)
}

/// Parses one batch's text and partitions it with the default options (either failure panics
/// with the text): the original, the partitioned module and the pass's report.
#[allow(dead_code)] // the reshard test partitions per case
pub fn partition_batch(text: &str) -> (Module, Module, SpmdReport) {
    partition_batch_with(text, |_| {})
}

/// [`partition_batch`] with the pass's options changed by `set` first.
#[allow(dead_code)] // not every test binary changes options
pub fn partition_batch_with(
    text: &str,
    set: impl FnOnce(&mut SpmdPartitioning),
) -> (Module, Module, SpmdReport) {
    let original = parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut part = original.clone();
    let mut pass = SpmdPartitioning::default();
    set(&mut pass);
    pass.run(&mut part)
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    (original, part, pass.report)
}

/// How many instructions whose names start with `prefix` (a batch's cases) took the default
/// path.
#[allow(dead_code)] // not every test binary counts them
pub fn defaulted_with_prefix(report: &SpmdReport, prefix: char) -> usize {
    report
        .defaulted
        .iter()
        .filter(|d| d.starts_with(prefix))
        .count()
}

/// A batch's results when case `k`'s result is `%c<k>`: (shape, name, sharding) per case, for
/// [`batch_module`].
#[allow(dead_code)] // not every test binary numbers its results
pub fn numbered_results<'a>(
    cases: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<(String, String, String)> {
    cases
        .into_iter()
        .enumerate()
        .map(|(k, (shape, sharding))| (shape.to_string(), format!("%c{k}"), sharding.to_string()))
        .collect()
}
