//! A structured mutator over HLO text, deterministic from a seed.
//!
//! Byte-level fuzzing rarely gets past the parser; these mutations keep most of a real module
//! intact and change one thing that the parser, verifier or a pass must then cope with: a
//! number (parameter numbers, dimensions, indices, device ids), a shape (element type, rank,
//! dimensions), a sharding, a replica-group list, an operand (which may now be defined later:
//! a use before definition, or a cycle), a called computation (which may now be the caller: a
//! call cycle), an attribute's dimension list, or raw bytes.

/// A small deterministic generator (xorshift64*), so a failing mutant is reproduced by its seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The kinds of mutation, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Number,
    Shape,
    Sharding,
    ReplicaGroups,
    Operand,
    Callee,
    Dimensions,
    Bytes,
}

pub const KINDS: [Kind; 8] = [
    Kind::Number,
    Kind::Shape,
    Kind::Sharding,
    Kind::ReplicaGroups,
    Kind::Operand,
    Kind::Callee,
    Kind::Dimensions,
    Kind::Bytes,
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "7",
    "8",
    "-1",
    "255",
    "65536",
    "2147483647",
    "2147483648",
    "4294967296",
    "100000000000",
    "4611686018427387904",
    "9223372036854775807",
    "18446744073709551616",
];

const TYPES: &[&str] = &[
    "pred", "s8", "s32", "s64", "u8", "u32", "f16", "bf16", "f32", "f64", "c64", "token", "s4",
    "f8e4m3fn",
];

const SHARDINGS: &[&str] = &[
    "{replicated}",
    "{manual}",
    "{maximal device=0}",
    "{maximal device=7}",
    "{devices=[1]0}",
    "{devices=[2]0,1}",
    "{devices=[2,1]0,1}",
    "{devices=[1,2]1,0}",
    "{devices=[2,2]<=[4]}",
    "{devices=[4]<=[2,2]T(1,0)}",
    "{devices=[2,1,2]<=[4] last_tile_dim_replicate}",
    "{devices=[1,1,2]0,1 last_tile_dims={manual}}",
    "{devices=[3]0,1,2}",
    "{devices=[2]0,0}",
    "{devices=[8]<=[8]}",
    "{devices=[2,2,2]<=[8]}",
    "{devices=[0]}",
    "{{replicated}, {devices=[2]0,1}}",
    "{{manual}}",
    "{unknown}",
];

const REPLICA_GROUPS: &[&str] = &[
    "{}",
    "{{0}}",
    "{{0,1}}",
    "{{0},{1}}",
    "{{0,1},{2,3}}",
    "{{0,0}}",
    "{{1,0}}",
    "{{-1}}",
    "{{0,1,2,3,4,5,6,7}}",
    "[2,2]<=[4]",
    "[1,2]<=[2]",
    "[2]<=[4]",
];

const DIMENSION_LISTS: &[&str] = &["{}", "{0}", "{1}", "{0,1}", "{1,0}", "{0,0}", "{5}", "{-1}"];

/// The mutant of `text` numbered `seed`: one or two mutations (what the mutant test runs;
/// `cargo run -p tessera-robust --example check -- mutant FILE SEED` prints it).
pub fn mutant(text: &str, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let count = 1 + rng.below(2);
    mutate(text, &mut rng, count)
}

/// Applies `count` mutations chosen by `rng` to `text`. The result may not be UTF-8 (a byte
/// mutation may cut a character); callers that need text use `String::from_utf8_lossy`.
pub fn mutate(text: &str, rng: &mut Rng, count: usize) -> Vec<u8> {
    let mut cur = text.as_bytes().to_vec();
    for _ in 0..count {
        let kind = *rng.pick(&KINDS);
        cur = mutate_once(&cur, kind, rng);
    }
    cur
}

/// One mutation of `kind`; when the text has nothing of that kind, bytes are mutated instead.
pub fn mutate_once(bytes: &[u8], kind: Kind, rng: &mut Rng) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes);
    let out = match kind {
        Kind::Number => replace_token(&text, rng, number_spans(&text), NUMBERS),
        Kind::Shape => mutate_shape(&text, rng),
        Kind::Sharding => mutate_braced_attr(&text, rng, "sharding=", SHARDINGS)
            .or_else(|| add_sharding(&text, rng)),
        Kind::ReplicaGroups => mutate_braced_attr(&text, rng, "replica_groups=", REPLICA_GROUPS),
        Kind::Operand => mutate_operand(&text, rng),
        Kind::Callee => mutate_callee(&text, rng),
        Kind::Dimensions => mutate_braced_attr(&text, rng, "dimensions=", DIMENSION_LISTS),
        Kind::Bytes => None,
    };
    out.map(String::into_bytes)
        .unwrap_or_else(|| mutate_bytes(bytes, rng))
}

fn mutate_bytes(bytes: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if b.is_empty() {
        return vec![rng.next_u64() as u8];
    }
    let at = rng.below(b.len());
    match rng.below(5) {
        0 => b[at] ^= 1 << rng.below(8),
        1 => b[at] = *rng.pick(b"{}[](),=%:0123456789-\n\xff\x00 "),
        2 => {
            let end = (at + 1 + rng.below(16)).min(b.len());
            b.drain(at..end);
        }
        3 => {
            let end = (at + 1 + rng.below(32)).min(b.len());
            let piece = b[at..end].to_vec();
            let to = rng.below(b.len());
            b.splice(to..to, piece);
        }
        _ => b.insert(at, rng.next_u64() as u8),
    }
    b
}

/// Byte ranges of the decimal numbers in `text` (a leading `-` included).
fn number_spans(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
            let start = if i > 0 && b[i - 1] == b'-' { i - 1 } else { i };
            let mut j = i;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            // Skip parts of names (`add.3`) and floats' fractions.
            if j >= b.len() || !(b[j].is_ascii_alphabetic() || b[j] == b'_') {
                out.push((start, j));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn replace_token(
    text: &str,
    rng: &mut Rng,
    spans: Vec<(usize, usize)>,
    values: &[&str],
) -> Option<String> {
    if spans.is_empty() {
        return None;
    }
    let (s, e) = *rng.pick(&spans);
    Some(format!("{}{}{}", &text[..s], rng.pick(values), &text[e..]))
}

/// `type[dims]` spans: the type word and the bracketed dimensions.
fn shape_spans(text: &str) -> Vec<(usize, usize, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for (i, _) in text.match_indices('[') {
        let mut s = i;
        while s > 0 && b[s - 1].is_ascii_alphanumeric() {
            s -= 1;
        }
        if s == i || (s > 0 && (b[s - 1] == b'_' || b[s - 1] == b'.')) {
            continue;
        }
        let word = &text[s..i];
        if !TYPES.contains(&word) && !["u16", "u64", "s16", "f8e5m2"].contains(&word) {
            continue;
        }
        if let Some(close) = text[i..].find(']') {
            out.push((s, i, i + close + 1));
        }
    }
    out
}

fn mutate_shape(text: &str, rng: &mut Rng) -> Option<String> {
    let spans = shape_spans(text);
    if spans.is_empty() {
        return None;
    }
    let (s, open, close) = *rng.pick(&spans);
    let dims = &text[open + 1..close - 1];
    let new = match rng.below(4) {
        0 => format!("{}[{dims}]", rng.pick(TYPES)),
        1 => format!("{}[]", &text[s..open]),
        2 => format!("{}[{dims},{}]", &text[s..open], rng.pick(NUMBERS)),
        _ => {
            let mut parts: Vec<&str> = dims.split(',').filter(|d| !d.is_empty()).collect();
            if !parts.is_empty() {
                parts.remove(rng.below(parts.len()));
            }
            format!("{}[{}]", &text[s..open], parts.join(","))
        }
    };
    Some(format!("{}{new}{}", &text[..s], &text[close..]))
}

/// The end of the balanced `{...}` starting at `open` (exclusive).
fn balanced_end(b: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(k + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Replaces the value of one `key{...}` (or `key[...]<=[...]` for replica groups) attribute.
fn mutate_braced_attr(text: &str, rng: &mut Rng, key: &str, values: &[&str]) -> Option<String> {
    let starts: Vec<usize> = text
        .match_indices(key)
        .map(|(i, _)| i + key.len())
        .collect();
    if starts.is_empty() {
        return None;
    }
    let at = *rng.pick(&starts);
    let b = text.as_bytes();
    let end = match b.get(at) {
        Some(b'{') => balanced_end(b, at)?,
        // The iota form: up to the next `,` or newline.
        _ => at + text[at..].find([',', '\n']).unwrap_or(text.len() - at),
    };
    Some(format!(
        "{}{}{}",
        &text[..at],
        rng.pick(values),
        &text[end..]
    ))
}

/// Appends `, sharding={...}` to one instruction line.
fn add_sharding(text: &str, rng: &mut Rng) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let candidates: Vec<usize> = (0..lines.len())
        .filter(|&k| lines[k].contains(" = ") && lines[k].trim_end().ends_with(')'))
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let k = *rng.pick(&candidates);
    let mut out: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    out[k] = format!("{}, sharding={}", out[k].trim_end(), rng.pick(SHARDINGS));
    Some(out.join("\n") + "\n")
}

/// Names defined by `name = ...` lines (with or without `%`, `ROOT`).
fn defined_names(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| {
            let (lhs, _) = l.split_once(" = ")?;
            let name = lhs
                .trim()
                .trim_start_matches("ROOT ")
                .trim_start_matches('%');
            (!name.is_empty() && !name.contains(' ')).then_some(name)
        })
        .collect()
}

/// Replaces one operand of one instruction by another defined name (perhaps defined later,
/// in another computation, or the instruction itself).
fn mutate_operand(text: &str, rng: &mut Rng) -> Option<String> {
    let names = defined_names(text);
    if names.is_empty() {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    let with_ops: Vec<usize> = (0..lines.len())
        .filter(|&k| {
            lines[k].contains(" = ")
                && lines[k].contains('(')
                && !lines[k].contains("parameter(")
                && !lines[k].contains("constant(")
        })
        .collect();
    if with_ops.is_empty() {
        return None;
    }
    let k = *rng.pick(&with_ops);
    let line = lines[k];
    let (_, rhs) = line.split_once(" = ")?;
    let open = line.len() - rhs.len() + rhs.find('(')?;
    let close = open + line[open..].find(')')?;
    let args = &line[open + 1..close];
    if args.trim().is_empty() {
        return None;
    }
    let parts: Vec<&str> = args.split(',').collect();
    let which = rng.below(parts.len());
    let mut new_parts: Vec<String> = parts.iter().map(|s| s.to_string()).collect();
    // Keep a written operand shape (`f32[2] %x`): replace the last word only.
    let p = parts[which];
    let cut = p.rfind(' ').map_or(0, |i| i + 1);
    let sigil = if p[cut..].starts_with('%') { "%" } else { "" };
    new_parts[which] = format!("{}{sigil}{}", &p[..cut], rng.pick(&names));
    let new_line = format!(
        "{}{}{}",
        &line[..open + 1],
        new_parts.join(","),
        &line[close..]
    );
    let mut out: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    out[k] = new_line;
    Some(out.join("\n") + "\n")
}

/// Computation names: the word before ` {` or ` (` that opens a computation.
fn computation_names(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            !l.starts_with(' ') && l.trim_end().ends_with('{') && !l.starts_with("HloModule")
        })
        .filter_map(|l| {
            let l = l.trim_start_matches("ENTRY ");
            let end = l.find([' ', '('])?;
            Some(l[..end].trim_start_matches('%'))
        })
        .filter(|n| !n.is_empty())
        .collect()
}

/// Points one `to_apply=`, `calls=`, `body=`, `condition=` at another computation, perhaps
/// the caller itself or one of its callers.
fn mutate_callee(text: &str, rng: &mut Rng) -> Option<String> {
    let comps = computation_names(text);
    if comps.is_empty() {
        return None;
    }
    let mut spans = Vec::new();
    for key in [
        "to_apply=",
        "calls=",
        "body=",
        "condition=",
        "branch_computations={",
    ] {
        for (i, _) in text.match_indices(key) {
            let s = i + key.len();
            let s = s + usize::from(text.as_bytes().get(s) == Some(&b'%'));
            let e = s + text[s..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
                .unwrap_or(text.len() - s);
            spans.push((s, e));
        }
    }
    if spans.is_empty() {
        return None;
    }
    let (s, e) = *rng.pick(&spans);
    Some(format!("{}{}{}", &text[..s], rng.pick(&comps), &text[e..]))
}

const OPTIONS: &[&str] = &[
    "sharding-propagation.propagate_to_parameters",
    "sharding-propagation.propagate_to_output",
    "sharding-propagation.is_spmd",
    "sharding-propagation.cse_prevention_only",
    "remat.memory_limit",
    "remat.block_size_limit",
    "remat.mode",
    "remat.search",
    "schedule.scheduler",
    "fix.max_iterations",
    "inline.single_call_site",
    "dce.remove_dead_computations",
    "print-memory.top",
];

const OPTION_VALUES: &[&str] = &[
    "true",
    "false",
    "{true}",
    "{true,false}",
    "{true",
    "true}",
    "{{true}}",
    "{}",
    "0",
    "-1",
    "1K",
    "9223372036854775807",
    "8G",
    "99999999999G",
    "none",
    "recompute-and-compress",
    "compress",
    "exhaustive",
    "",
];

const PASS_LISTS: &[&str] = &[
    "dce",
    "fix(dce)",
    "fix(fix(inline,dce))",
    "fix()",
    "fix(",
    "schedule,remat",
    "remat",
    "schedule,schedule",
    "sharding-propagation,sharding-propagation",
    ",",
    "",
];

/// Mutates a `--passes` value and `--pass-option` values: a value swapped for an awkward one
/// (broken lists, huge sizes, unknown modes), an option added, the pass list replaced or
/// wrapped in `fix(...)`, or a byte of either changed.
pub fn mutate_options(passes: &str, options: &[String], rng: &mut Rng) -> (String, Vec<String>) {
    let mut passes = passes.to_string();
    let mut options = options.to_vec();
    match rng.below(5) {
        0 if !options.is_empty() => {
            let k = rng.below(options.len());
            let key = options[k].split('=').next().unwrap_or("").to_string();
            options[k] = format!("{key}={}", rng.pick(OPTION_VALUES));
        }
        1 => options.push(format!("{}={}", rng.pick(OPTIONS), rng.pick(OPTION_VALUES))),
        2 => passes = rng.pick(PASS_LISTS).to_string(),
        3 => passes = format!("fix({passes})"),
        _ => {
            let b = mutate_bytes(passes.as_bytes(), rng);
            passes = String::from_utf8_lossy(&b).into_owned();
        }
    }
    (passes, options)
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "HloModule m\n\nf {\n  a = f32[2] parameter(0)\n  ROOT n = f32[2] negate(a)\n}\n\nENTRY e {\n  p = f32[2] parameter(0), sharding={replicated}\n  c = f32[2] call(p), to_apply=f\n  ROOT s = f32[2] add(c, p)\n}\n";

    #[test]
    fn every_kind_changes_the_text_and_is_deterministic() {
        for kind in KINDS {
            let a = mutate_once(M.as_bytes(), kind, &mut Rng::new(7));
            let b = mutate_once(M.as_bytes(), kind, &mut Rng::new(7));
            assert_eq!(a, b, "{kind:?}");
            // Some seeds pick a value equal to the one replaced; most do not.
            let changed = (0..20)
                .filter(|&s| mutate_once(M.as_bytes(), kind, &mut Rng::new(s)) != M.as_bytes())
                .count();
            assert!(changed >= 10, "{kind:?} changed only {changed} of 20");
        }
    }

    #[test]
    fn finds_the_parts_it_mutates() {
        assert_eq!(computation_names(M), vec!["f", "e"]);
        assert_eq!(defined_names(M), vec!["a", "n", "p", "c", "s"]);
        assert_eq!(shape_spans(M).len(), 5);
    }
}
