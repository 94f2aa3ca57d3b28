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

/// FarmHash's Fingerprint64, the fingerprint TensorFlow (and seed 000) uses for resource names.
pub fn fingerprint64(s: &[u8]) -> u64 {
    farmhash::fingerprint64(s)
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
