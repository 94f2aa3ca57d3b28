//! Resource identity of entry parameters, and the argument map of a deduplicated module.
//!
//! A frontend says that an entry parameter is backed by a variable with the frontend attribute
//! `tessera.resource="<container>/<name>"` (the text up to the first `/` is the container, the
//! rest the name; the container may be empty, the name may not). Several parameters that name
//! the same resource receive the same array from a caller, as they would from one real
//! variable. The identity of a resource is a stable 64-bit fingerprint of its container and
//! name, computed as TensorFlow's `TPUPartitionedCall` computes it (seed 000):
//! `Fingerprint64(container + name)` with FarmHash's `Fingerprint64`, the concatenation taken
//! without a separator, so that `("a", "bc")` and `("ab", "c")` share one fingerprint as they
//! do there.
//!
//! The `variable-dedup` pass records, in the module-level frontend attribute
//! `tessera.argument_map="0,1,0,2"`, for every argument of the original parameter list the
//! parameter of the deduplicated module that receives it; drivers and the runtime feed a
//! deduplicated module the original arguments through it ([`argument_map`]).

use crate::instruction::InstrId;
use crate::module::Module;

/// The parameter frontend attribute that names a resource.
pub const RESOURCE_ATTR: &str = "tessera.resource";
/// The module frontend attribute holding a deduplicated module's argument -> parameter map.
pub const ARGUMENT_MAP_ATTR: &str = "tessera.argument_map";

/// Errors of resource attributes and argument maps; each names the parameter or attribute.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResourceError {
    #[error("parameter {number} (%{name}): {RESOURCE_ATTR}=\"{value}\": {message}")]
    BadResource {
        number: usize,
        name: String,
        value: String,
        message: String,
    },
    #[error("{ARGUMENT_MAP_ATTR}=\"{value}\": {message}")]
    BadArgumentMap { value: String, message: String },
    #[error("the module has no entry computation")]
    NoEntry,
    #[error("the entry computation has no parameter {0}")]
    NoParameter(usize),
}

/// A resource named by container and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId {
    pub container: String,
    pub name: String,
}

impl ResourceId {
    pub fn new(container: impl Into<String>, name: impl Into<String>) -> ResourceId {
        ResourceId {
            container: container.into(),
            name: name.into(),
        }
    }

    /// Reads `<container>/<name>`; the error text says what was expected.
    pub fn parse(value: &str) -> Result<ResourceId, String> {
        let (container, name) = value
            .split_once('/')
            .ok_or_else(|| "expected `<container>/<name>` (no `/` found)".to_string())?;
        if name.is_empty() {
            return Err("expected `<container>/<name>`: the name is empty".into());
        }
        Ok(ResourceId::new(container, name))
    }

    /// The identity: FarmHash `Fingerprint64(container + name)`, as seed 000 computes it.
    pub fn fingerprint(&self) -> u64 {
        let mut bytes = Vec::with_capacity(self.container.len() + self.name.len());
        bytes.extend_from_slice(self.container.as_bytes());
        bytes.extend_from_slice(self.name.as_bytes());
        fingerprint64(&bytes)
    }

    /// The attribute value, `<container>/<name>`.
    pub fn to_attr(&self) -> String {
        format!("{}/{}", self.container, self.name)
    }
}

impl std::fmt::Display for ResourceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.container, self.name)
    }
}

/// The resource a parameter instruction names, if any.
pub fn parameter_resource(m: &Module, param: InstrId) -> Result<Option<ResourceId>, ResourceError> {
    let i = m.instr(param);
    let Some(value) = i.frontend_attributes.get(RESOURCE_ATTR) else {
        return Ok(None);
    };
    ResourceId::parse(value)
        .map(Some)
        .map_err(|message| ResourceError::BadResource {
            number: i.attrs.parameter_number.max(0) as usize,
            name: i.name.clone(),
            value: value.clone(),
            message,
        })
}

/// The resource of every entry parameter, by parameter number.
pub fn entry_resources(m: &Module) -> Result<Vec<Option<ResourceId>>, ResourceError> {
    let e = m.entry().ok_or(ResourceError::NoEntry)?;
    let c = m.comp(e);
    (0..c.num_parameters())
        .map(|k| {
            let p = c.parameter(k).ok_or(ResourceError::NoParameter(k))?;
            parameter_resource(m, p)
        })
        .collect()
}

/// Names the resource behind entry parameter `number` (the library form of writing the
/// attribute in text); `None` removes it.
pub fn set_parameter_resource(
    m: &mut Module,
    number: usize,
    resource: Option<&ResourceId>,
) -> Result<(), ResourceError> {
    let e = m.entry().ok_or(ResourceError::NoEntry)?;
    let p = m
        .comp(e)
        .parameter(number)
        .ok_or(ResourceError::NoParameter(number))?;
    if let Some(r) = resource {
        ResourceId::parse(&r.to_attr()).map_err(|message| ResourceError::BadResource {
            number,
            name: m.instr(p).name.clone(),
            value: r.to_attr(),
            message,
        })?;
    }
    let i = m.instr_mut(p);
    match resource {
        Some(r) => {
            i.frontend_attributes
                .insert(RESOURCE_ATTR.to_string(), r.to_attr());
        }
        None => {
            if i.frontend_attributes.contains_key(RESOURCE_ATTR) {
                i.frontend_attributes.remove(RESOURCE_ATTR);
            }
        }
    }
    Ok(())
}

/// Argument slots grouped by resource: for each slot, the first slot with the same
/// fingerprint (a slot without a resource is its own group).
pub fn first_slot_of_resource(resources: &[Option<ResourceId>]) -> Vec<usize> {
    let mut first: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    resources
        .iter()
        .enumerate()
        .map(|(k, r)| match r {
            Some(r) => *first.entry(r.fingerprint()).or_insert(k),
            None => k,
        })
        .collect()
}

/// The argument -> parameter map a deduplicated module carries, checked against its entry
/// parameters: every entry is a parameter number, and every parameter receives an argument.
pub fn argument_map(m: &Module) -> Result<Option<Vec<usize>>, ResourceError> {
    let Some(value) = m.config.frontend_attributes.get(ARGUMENT_MAP_ATTR) else {
        return Ok(None);
    };
    let bad = |message: String| ResourceError::BadArgumentMap {
        value: value.clone(),
        message,
    };
    let e = m.entry().ok_or(ResourceError::NoEntry)?;
    let n = m.comp(e).num_parameters();
    let mut map = Vec::new();
    if !value.is_empty() {
        for (k, w) in value.split(',').enumerate() {
            let p: usize = w.trim().parse().map_err(|_| {
                bad(format!(
                    "argument {k}: expected a parameter number, found `{w}`"
                ))
            })?;
            if p >= n {
                return Err(bad(format!(
                    "argument {k} goes to parameter {p}, but the entry computation has {n} parameters"
                )));
            }
            map.push(p);
        }
    }
    let mut covered = vec![false; n];
    for &p in &map {
        covered[p] = true;
    }
    if let Some(p) = covered.iter().position(|c| !c) {
        return Err(bad(format!("no argument goes to parameter {p}")));
    }
    Ok(Some(map))
}

/// Records an argument -> parameter map in the module (see [`argument_map`]).
pub fn set_argument_map(m: &mut Module, map: &[usize]) {
    let text: Vec<String> = map.iter().map(usize::to_string).collect();
    m.config
        .frontend_attributes
        .insert(ARGUMENT_MAP_ATTR.to_string(), text.join(","));
}

/// The arguments a module takes from its caller, as parameter numbers: the recorded argument
/// map, or each parameter once when there is none.
pub fn arguments_to_parameters(m: &Module) -> Result<Vec<usize>, ResourceError> {
    match argument_map(m)? {
        Some(map) => Ok(map),
        None => {
            let e = m.entry().ok_or(ResourceError::NoEntry)?;
            Ok((0..m.comp(e).num_parameters()).collect())
        }
    }
}

// ----------------------------------------------------------------------------------------
// FarmHash Fingerprint64 (farmhashna's 64-bit hash), the fingerprint TensorFlow uses.

const K0: u64 = 0xc3a5_c85c_97cb_3127;
const K1: u64 = 0xb492_b66f_be98_f273;
const K2: u64 = 0x9ae1_6a3b_2f90_404f;

fn read64(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"))
}

fn read32(s: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes(
        s[at..at + 4].try_into().expect("4 bytes"),
    ))
}

fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

/// Murmur-style mix of two words.
fn mix16(u: u64, v: u64, mul: u64) -> u64 {
    let a = shift_mix((u ^ v).wrapping_mul(mul));
    let b = shift_mix((v ^ a).wrapping_mul(mul));
    b.wrapping_mul(mul)
}

fn short_hash(s: &[u8]) -> u64 {
    let len = s.len() as u64;
    if s.len() >= 8 {
        let mul = K2.wrapping_add(len * 2);
        let a = read64(s, 0).wrapping_add(K2);
        let b = read64(s, s.len() - 8);
        let c = b.rotate_right(37).wrapping_mul(mul).wrapping_add(a);
        let d = a.rotate_right(25).wrapping_add(b).wrapping_mul(mul);
        return mix16(c, d, mul);
    }
    if s.len() >= 4 {
        let mul = K2.wrapping_add(len * 2);
        let a = read32(s, 0);
        return mix16(len.wrapping_add(a << 3), read32(s, s.len() - 4), mul);
    }
    if s.is_empty() {
        return K2;
    }
    let (a, b, c) = (
        u64::from(s[0]),
        u64::from(s[s.len() >> 1]),
        u64::from(s[s.len() - 1]),
    );
    // The C++ computes y and z in 32 bits; they fit there for these inputs.
    let y = (a + (b << 8)) as u32 as u64;
    let z = (len + (c << 2)) as u32 as u64;
    shift_mix(y.wrapping_mul(K2) ^ z.wrapping_mul(K0)).wrapping_mul(K2)
}

fn medium_hash(s: &[u8]) -> u64 {
    let len = s.len();
    let mul = K2.wrapping_add(len as u64 * 2);
    let a = read64(s, 0).wrapping_mul(K1);
    let b = read64(s, 8);
    let c = read64(s, len - 8).wrapping_mul(mul);
    let d = read64(s, len - 16).wrapping_mul(K2);
    mix16(
        a.wrapping_add(b)
            .rotate_right(43)
            .wrapping_add(c.rotate_right(30))
            .wrapping_add(d),
        a.wrapping_add(b.wrapping_add(K2).rotate_right(18))
            .wrapping_add(c),
        mul,
    )
}

fn long_hash_33_64(s: &[u8]) -> u64 {
    let len = s.len();
    let mul = K2.wrapping_add(len as u64 * 2);
    let a = read64(s, 0).wrapping_mul(K2);
    let b = read64(s, 8);
    let c = read64(s, len - 8).wrapping_mul(mul);
    let d = read64(s, len - 16).wrapping_mul(K2);
    let y = a
        .wrapping_add(b)
        .rotate_right(43)
        .wrapping_add(c.rotate_right(30))
        .wrapping_add(d);
    let z = mix16(
        y,
        a.wrapping_add(b.wrapping_add(K2).rotate_right(18))
            .wrapping_add(c),
        mul,
    );
    let e = read64(s, 16).wrapping_mul(mul);
    let f = read64(s, 24);
    let g = y.wrapping_add(read64(s, len - 32)).wrapping_mul(mul);
    let h = z.wrapping_add(read64(s, len - 24)).wrapping_mul(mul);
    mix16(
        e.wrapping_add(f)
            .rotate_right(43)
            .wrapping_add(g.rotate_right(30))
            .wrapping_add(h),
        e.wrapping_add(f.wrapping_add(a).rotate_right(18))
            .wrapping_add(g),
        mul,
    )
}

/// Two words from 32 bytes and two seeds.
fn weak32(s: &[u8], at: usize, a: u64, b: u64) -> (u64, u64) {
    let (w, x, y, z) = (
        read64(s, at),
        read64(s, at + 8),
        read64(s, at + 16),
        read64(s, at + 24),
    );
    let a = a.wrapping_add(w);
    let b = b.wrapping_add(a).wrapping_add(z).rotate_right(21);
    let c = a;
    let a = a.wrapping_add(x).wrapping_add(y);
    let b = b.wrapping_add(a.rotate_right(44));
    (a.wrapping_add(z), b.wrapping_add(c))
}

/// FarmHash's `Fingerprint64` of a byte string (stable across platforms and versions).
pub fn fingerprint64(s: &[u8]) -> u64 {
    let len = s.len();
    if len <= 16 {
        return short_hash(s);
    }
    if len <= 32 {
        return medium_hash(s);
    }
    if len <= 64 {
        return long_hash_33_64(s);
    }
    const SEED: u64 = 81;
    let y = SEED.wrapping_mul(K1).wrapping_add(113);
    let mut st = LongState {
        x: SEED.wrapping_mul(K2).wrapping_add(read64(s, 0)),
        y,
        z: shift_mix(y.wrapping_mul(K2).wrapping_add(113)).wrapping_mul(K2),
        v: (0, 0),
        w: (0, 0),
    };
    // Whole 64-byte blocks, leaving 1 to 64 bytes; then the last 64 bytes once more, with
    // a multiplier taken from the state and the two words of the tail weighted by 9.
    let blocks_end = ((len - 1) / 64) * 64;
    let mut at = 0;
    while at != blocks_end {
        st.block(s, at, K1, 1);
        at += 64;
    }
    let mul = K1.wrapping_add((st.z & 0xff) << 1);
    st.w.0 = st.w.0.wrapping_add(((len - 1) & 63) as u64);
    st.v.0 = st.v.0.wrapping_add(st.w.0);
    st.w.0 = st.w.0.wrapping_add(st.v.0);
    st.block(s, len - 64, mul, 9);
    let LongState { x, y, z, v, w } = st;
    mix16(
        mix16(v.0, w.0, mul)
            .wrapping_add(shift_mix(y).wrapping_mul(K0))
            .wrapping_add(z),
        mix16(v.1, w.1, mul).wrapping_add(x),
        mul,
    )
}

/// The 56 bytes of state of the long-input loop.
struct LongState {
    x: u64,
    y: u64,
    z: u64,
    v: (u64, u64),
    w: (u64, u64),
}

impl LongState {
    /// Mixes in the 64 bytes at `at`.
    fn block(&mut self, s: &[u8], at: usize, mul: u64, tail: u64) {
        let (v, w) = (self.v, self.w);
        let mut x = self
            .x
            .wrapping_add(self.y)
            .wrapping_add(v.0)
            .wrapping_add(read64(s, at + 8))
            .rotate_right(37)
            .wrapping_mul(mul);
        let mut y = self
            .y
            .wrapping_add(v.1)
            .wrapping_add(read64(s, at + 48))
            .rotate_right(42)
            .wrapping_mul(mul);
        x ^= w.1.wrapping_mul(tail);
        y = y
            .wrapping_add(v.0.wrapping_mul(tail))
            .wrapping_add(read64(s, at + 40));
        let z = self.z.wrapping_add(w.0).rotate_right(33).wrapping_mul(mul);
        self.v = weak32(s, at, v.1.wrapping_mul(mul), x.wrapping_add(w.0));
        self.w = weak32(
            s,
            at + 32,
            z.wrapping_add(w.1),
            y.wrapping_add(read64(s, at + 16)),
        );
        // x and z trade places.
        self.x = z;
        self.z = x;
        self.y = y;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from FarmHash itself (`farmhash.fingerprint64` of PyPI's pyfarmhash 0.5.1),
    /// covering every length class: 0, 1-3, 4-7, 8-16, 17-32, 33-64 and the 64-byte loop.
    #[test]
    fn fingerprint64_matches_farmhash() {
        let long: String = "0123456789".repeat(30);
        let cases: &[(&str, u64)] = &[
            ("", 11160318154034397263),
            ("a", 12917804110809363939),
            ("ab", 12289600257749001502),
            ("abcd", 1897425971756105985),
            ("abcdefgh", 18368443631171807497),
            ("/w", 4354777437882719021),
            ("opt/dense/kernel", 552648242281073086),
            (&"x".repeat(17), 11306081951414300581),
            (&"y".repeat(33), 8610735037765521150),
            (&"z".repeat(64), 294799756062990872),
            (&"q".repeat(65), 7692644312256273193),
            (&long, 13765960673534097603),
        ];
        for (s, want) in cases {
            assert_eq!(fingerprint64(s.as_bytes()), *want, "len {}", s.len());
        }
    }

    #[test]
    fn resource_ids() {
        let r = ResourceId::parse("vars/dense/kernel").unwrap();
        assert_eq!(r, ResourceId::new("vars", "dense/kernel"));
        assert_eq!(r.to_attr(), "vars/dense/kernel");
        assert_eq!(ResourceId::parse("/w").unwrap(), ResourceId::new("", "w"));
        assert!(ResourceId::parse("w").unwrap_err().contains("no `/`"));
        assert!(ResourceId::parse("c/")
            .unwrap_err()
            .contains("name is empty"));
        // As in seed 000, the fingerprint is of the concatenation.
        assert_eq!(
            ResourceId::new("a", "bc").fingerprint(),
            ResourceId::new("ab", "c").fingerprint()
        );
        assert_eq!(
            ResourceId::new("", "opt/dense/kernel").fingerprint(),
            552648242281073086
        );
    }
}
