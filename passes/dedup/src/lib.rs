//! Variable deduplication (seed 000): one entry parameter per resource.
//!
//! When several entry parameters are backed by the same variable (the same
//! `tessera.resource="<container>/<name>"`, compared by fingerprint, see
//! [`tessera_hlo::resource`]), the `variable-dedup` pass keeps the first of them, rewires the
//! users of the others to it, removes them and renumbers the parameters, and updates every
//! module table that names parameters: entry_computation_layout, input_output_alias,
//! buffer_donor, the SPMD parameter tables and the schedule. It records the caller's
//! argument -> parameter map in the module (`tessera.argument_map`) and returns it
//! ([`DedupReport::argument_map`]), so that a caller can keep passing the original arguments.
//!
//! Refused, each with a message naming both parameters: duplicates that differ in element
//! type, dimensions or layout; a resource written through two different outputs; explicit,
//! different shardings (under one core per replica); two different resources with one
//! fingerprint. With `auto_input_sharding` the pass refuses to run with seed 000's exact
//! message. With more than one core per replica, duplicates are merged only where every
//! duplicate's placement (sharding) agrees; the others are kept apart, as the seed keeps one
//! device variable per argument there. See docs/dedup.md.

use std::collections::HashMap;

use tessera_hlo::resource::{self, ResourceError, ResourceId};
use tessera_hlo::text::{shape_to_string, sharding_to_string};
use tessera_hlo::{InstrId, Module, Shape, Sharding};
use tessera_pass::options::{parse_bool, parse_int, unknown_key, OptionDoc, PassOptions};
use tessera_pass::registry::RegisteredPass;
use tessera_pass::{Pass, PassError, Registry};

/// Seed 000's refusal, word for word.
pub const INCOMPATIBLE_FLAGS: &str = "The following flags are incompatible: \
enable_auto_xla_input_sharding and enable_variable_deduplication. Only enable one of the flags.";

/// Options of `variable-dedup`. The pass itself is the seed's `enable_variable_deduplication`:
/// it runs only where a pipeline names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DedupOptions {
    /// The seed's `enable_auto_xla_input_sharding`: set, the pass refuses to run (seed 000's
    /// message, [`INCOMPATIBLE_FLAGS`]).
    pub auto_input_sharding: bool,
    /// Cores per replica. 1 (default): duplicates are merged whatever their placement (equal
    /// or absent shardings; different explicit ones are refused). More: only duplicates whose
    /// placements all agree are merged, the others kept apart.
    pub num_cores_per_replica: i64,
}

impl Default for DedupOptions {
    fn default() -> Self {
        DedupOptions {
            auto_input_sharding: false,
            num_cores_per_replica: 1,
        }
    }
}

impl PassOptions for DedupOptions {
    const DOCS: &'static [OptionDoc] = &[
        OptionDoc {
            key: "auto_input_sharding",
            default: "false",
            doc: "the seed's enable_auto_xla_input_sharding: refused together with deduplication",
        },
        OptionDoc {
            key: "num_cores_per_replica",
            default: "1",
            doc: "above 1, only duplicates whose placements (shardings) agree are merged",
        },
    ];

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "auto_input_sharding" => self.auto_input_sharding = parse_bool(value)?,
            "num_cores_per_replica" => {
                let n = parse_int(value)?;
                if n < 1 {
                    return Err(format!("expected a positive integer, found `{value}`"));
                }
                self.num_cores_per_replica = n;
            }
            _ => return Err(unknown_key(key, Self::DOCS)),
        }
        Ok(())
    }
}

/// Why the pass refused a module.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DedupError {
    #[error("{INCOMPATIBLE_FLAGS}")]
    IncompatibleFlags,
    #[error(transparent)]
    Resource(#[from] ResourceError),
    #[error("the module has no entry computation")]
    NoEntry,
    /// Two parameters of one resource that cannot be one: the message names both.
    #[error("{0}")]
    Refused(String),
}

/// One resource whose duplicates were merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedResource {
    pub resource: ResourceId,
    /// The parameter kept (number in the input module).
    pub kept: usize,
    /// The parameters removed (numbers in the input module).
    pub removed: Vec<usize>,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DedupReport {
    /// For every argument of the caller (the original parameter list), the parameter of the
    /// output module that receives it. Composed with a map the input already carried.
    pub argument_map: Vec<usize>,
    pub merged: Vec<MergedResource>,
    /// Resources with duplicates left apart (more than one core per replica and placements
    /// that disagree), with the reason.
    pub kept_apart: Vec<(ResourceId, String)>,
    /// Bytes of the removed parameters (array leaves, by their shapes).
    pub removed_bytes: u64,
}

impl DedupReport {
    pub fn changed(&self) -> bool {
        !self.merged.is_empty()
    }

    /// The remark `tessera opt` prints after the module.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let removed: usize = self.merged.iter().map(|m| m.removed.len()).sum();
        out.push_str(&format!(
            "{removed} duplicate parameters of {} resources removed ({} bytes)\n",
            self.merged.len(),
            self.removed_bytes
        ));
        for m in &self.merged {
            let r: Vec<String> = m.removed.iter().map(usize::to_string).collect();
            out.push_str(&format!(
                "  {}: kept parameter {}, removed {}\n",
                m.resource,
                m.kept,
                r.join(", ")
            ));
        }
        for (r, why) in &self.kept_apart {
            out.push_str(&format!("  {r}: kept apart: {why}\n"));
        }
        let map: Vec<String> = self.argument_map.iter().map(usize::to_string).collect();
        out.push_str(&format!("  argument map: {}\n", map.join(",")));
        out
    }
}

fn describe(m: &Module, number: usize, id: InstrId) -> String {
    format!("parameter {number} (%{})", m.instr(id).name())
}

fn array_bytes(s: &Shape) -> u64 {
    match s {
        Shape::Array(a) => {
            let n: i64 = a.dims.iter().product();
            n.max(0) as u64 * a.ty.byte_size() as u64
        }
        Shape::Tuple(e) => e.iter().map(array_bytes).sum(),
        _ => 0,
    }
}

/// Why two shapes of one resource differ, or `None` when they are the same.
fn shape_difference(a: &Shape, b: &Shape) -> Option<&'static str> {
    match (a, b) {
        (Shape::Array(x), Shape::Array(y)) => {
            if x.ty != y.ty {
                Some("element type")
            } else if x.dims != y.dims || x.dynamic != y.dynamic {
                Some("shape")
            } else if !same_layout(x, y) {
                Some("layout")
            } else {
                None
            }
        }
        (Shape::Tuple(x), Shape::Tuple(y)) if x.len() == y.len() => {
            x.iter().zip(y).find_map(|(p, q)| shape_difference(p, q))
        }
        _ if a == b => None,
        _ => Some("shape"),
    }
}

/// A missing layout is the default (descending) one.
fn same_layout(x: &tessera_hlo::ArrayShape, y: &tessera_hlo::ArrayShape) -> bool {
    let default = tessera_hlo::Layout::descending(x.dims.len());
    let lx = x.layout.as_ref().unwrap_or(&default);
    let ly = y.layout.as_ref().unwrap_or(&default);
    lx == ly
}

/// Runs deduplication on `m`. Returns the report (`changed()` false: `m` is untouched).
pub fn deduplicate(m: &mut Module, options: &DedupOptions) -> Result<DedupReport, DedupError> {
    if options.auto_input_sharding {
        return Err(DedupError::IncompatibleFlags);
    }
    let entry = m.entry().ok_or(DedupError::NoEntry)?;
    let resources = resource::entry_resources(m)?;
    let prior_map = resource::arguments_to_parameters(m)?;
    let params: Vec<InstrId> = m.comp(entry).parameters().collect();
    let n = params.len();

    // Groups of parameters by fingerprint, in parameter order.
    let mut by_fp: HashMap<u64, usize> = HashMap::new();
    let mut groups: Vec<(ResourceId, Vec<usize>)> = Vec::new();
    for (k, r) in resources.iter().enumerate() {
        let Some(r) = r else { continue };
        let fp = r.fingerprint();
        match by_fp.get(&fp) {
            Some(&g) => {
                let (first, members) = &mut groups[g];
                if first != r {
                    return Err(DedupError::Refused(format!(
                        "{} names resource {first} and {} names resource {r}: different \
                         resources with one fingerprint ({fp:#018x}); rename one of them",
                        describe(m, members[0], params[members[0]]),
                        describe(m, k, params[k])
                    )));
                }
                members.push(k);
            }
            None => {
                by_fp.insert(fp, groups.len());
                groups.push((r.clone(), vec![k]));
            }
        }
    }

    let layout = m.config.entry_computation_layout.clone();
    let param_shape = |m: &Module, k: usize| -> Shape {
        layout
            .as_ref()
            .and_then(|l| l.parameters.get(k).cloned())
            .unwrap_or_else(|| m.instr(params[k]).shape.clone())
    };

    let mut report = DedupReport::default();
    // keep[k]: the parameter (input numbering) that parameter k becomes.
    let mut keep: Vec<usize> = (0..n).collect();
    let mut new_sharding: Vec<(usize, Sharding)> = Vec::new();
    for (r, members) in &groups {
        if members.len() < 2 {
            continue;
        }
        let first = members[0];
        // Types, shapes, layouts.
        for &d in &members[1..] {
            let (a, b) = (param_shape(m, first), param_shape(m, d));
            if let Some(what) = shape_difference(&a, &b) {
                return Err(DedupError::Refused(format!(
                    "{} and {} are both resource {r} but differ in {what}: {} vs {}",
                    describe(m, first, params[first]),
                    describe(m, d, params[d]),
                    shape_to_string(&a),
                    shape_to_string(&b)
                )));
            }
        }
        // Writes: one output per written leaf of the resource.
        let mut written: Vec<(&Vec<i64>, &Vec<i64>, usize)> = Vec::new();
        for a in &m.config.input_output_alias {
            let p = a.parameter_number as usize;
            if !members.contains(&p) {
                continue;
            }
            if let Some(&(out, _, q)) = written
                .iter()
                .find(|(_, idx, _)| **idx == a.parameter_index)
            {
                if *out != a.output_index {
                    return Err(DedupError::Refused(format!(
                        "{} and {} are both resource {r} but are written through two different \
                         outputs: output {{{}}} and output {{{}}}",
                        describe(m, q, params[q]),
                        describe(m, p, params[p]),
                        join(out),
                        join(&a.output_index)
                    )));
                }
            } else {
                written.push((&a.output_index, &a.parameter_index, p));
            }
        }
        // Placements.
        let shardings: Vec<(usize, Option<&Sharding>)> = members
            .iter()
            .map(|&k| (k, m.instr(params[k]).sharding.as_ref()))
            .collect();
        let mut explicit: Option<(usize, &Sharding)> = None;
        let mut disagreement: Option<String> = None;
        for &(k, s) in &shardings {
            let Some(s) = s else { continue };
            match explicit {
                None => explicit = Some((k, s)),
                Some((j, t)) if !t.same_as(s) => {
                    disagreement = Some(format!(
                        "{} and {} are both resource {r} but have different shardings: {} vs {}",
                        describe(m, j, params[j]),
                        describe(m, k, params[k]),
                        sharding_to_string(t),
                        sharding_to_string(s)
                    ));
                    break;
                }
                _ => {}
            }
        }
        if options.num_cores_per_replica > 1 {
            // Placements must agree: all absent, or all the same.
            let absent = shardings.iter().filter(|(_, s)| s.is_none()).count();
            if disagreement.is_none() && absent != 0 && absent != shardings.len() {
                let (j, _) = shardings.iter().find(|(_, s)| s.is_some()).unwrap();
                let (k, _) = shardings.iter().find(|(_, s)| s.is_none()).unwrap();
                disagreement = Some(format!(
                    "{} has a placement and {} has none",
                    describe(m, *j, params[*j]),
                    describe(m, *k, params[*k])
                ));
            }
            if let Some(why) = disagreement {
                report.kept_apart.push((r.clone(), why));
                continue;
            }
        } else if let Some(msg) = disagreement {
            return Err(DedupError::Refused(format!(
                "{msg}; give them the same sharding or none"
            )));
        }
        if let Some((_, s)) = explicit {
            if m.instr(params[first]).sharding.is_none() {
                new_sharding.push((first, s.clone()));
            }
        }
        for &d in &members[1..] {
            keep[d] = first;
            report.removed_bytes += array_bytes(&param_shape(m, d));
        }
        report.merged.push(MergedResource {
            resource: r.clone(),
            kept: first,
            removed: members[1..].to_vec(),
        });
    }
    if report.merged.is_empty() {
        report.argument_map = prior_map;
        return Ok(report);
    }

    // Rewrite: users of the removed parameters read the kept one.
    for (k, s) in new_sharding {
        m.instr_mut(params[k]).sharding = Some(s);
    }
    let removed: Vec<InstrId> = (0..n)
        .filter(|&k| keep[k] != k)
        .map(|k| params[k])
        .collect();
    for k in (0..n).filter(|&k| keep[k] != k) {
        let (dup, kept) = (params[k], params[keep[k]]);
        m.replace_all_uses_with(dup, kept)
            .map_err(|e| DedupError::Refused(e.to_string()))?;
        let preds = m.instr(dup).control_predecessors().to_vec();
        let succs = m.instr(dup).control_successors().to_vec();
        for p in preds.into_iter().filter(|&p| p != kept) {
            if !m.instr(p).control_successors().contains(&kept) {
                m.add_control_dependency(p, kept);
            }
        }
        for s in succs.into_iter().filter(|&s| s != kept) {
            if !m.instr(kept).control_successors().contains(&s) {
                m.add_control_dependency(kept, s);
            }
        }
    }
    m.remove_instructions(&removed)
        .map_err(|e| DedupError::Refused(e.to_string()))?;
    let renumbered = m.renumber_parameters(entry);
    let new_number = |k: usize| renumbered[keep[k]].expect("a kept parameter has a number");

    // Tables that name parameters.
    let cfg = &mut m.config;
    if let Some(l) = cfg.entry_computation_layout.as_mut() {
        l.parameters = std::mem::take(&mut l.parameters)
            .into_iter()
            .enumerate()
            .filter(|(k, _)| *k >= n || keep[*k] == *k)
            .map(|(_, s)| s)
            .collect();
    }
    for a in cfg.input_output_alias.iter_mut() {
        let p = a.parameter_number as usize;
        if p < n {
            a.parameter_number = new_number(p) as i64;
        }
    }
    // Two aliases of duplicates through one output became the same alias.
    drop_repeats(&mut cfg.input_output_alias);
    for d in cfg.buffer_donor.iter_mut() {
        let p = d.parameter_number as usize;
        if p < n {
            d.parameter_number = new_number(p) as i64;
        }
    }
    drop_repeats(&mut cfg.buffer_donor);
    if let Some(v) = cfg.allow_spmd_sharding_propagation_to_parameters.as_mut() {
        if v.len() == n {
            // A merged parameter may take a sharding only if every duplicate could.
            let mut merged = vec![true; n];
            for k in 0..n {
                merged[keep[k]] &= v[k];
            }
            *v = (0..n)
                .filter(|&k| keep[k] == k)
                .map(|k| merged[k])
                .collect();
        }
    }
    if let Some(v) = cfg.spmd_parameters_shardings.as_mut() {
        if v.len() == n {
            *v = std::mem::take(v)
                .into_iter()
                .enumerate()
                .filter(|(k, _)| keep[*k] == *k)
                .map(|(_, s)| s)
                .collect();
        }
    }
    report.argument_map = prior_map.iter().map(|&p| new_number(p)).collect();
    resource::set_argument_map(m, &report.argument_map);
    Ok(report)
}

/// Keeps the first of equal entries, in order.
fn drop_repeats<T: PartialEq>(v: &mut Vec<T>) {
    let mut k = 0;
    while k < v.len() {
        if v[..k].contains(&v[k]) {
            v.remove(k);
        } else {
            k += 1;
        }
    }
}

fn join(v: &[i64]) -> String {
    v.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// `variable-dedup`: see the crate docs.
#[derive(Clone, Debug, Default)]
pub struct VariableDedup {
    pub options: DedupOptions,
    /// The report of the last run.
    pub report: Option<DedupReport>,
}

impl RegisteredPass for VariableDedup {
    type Options = DedupOptions;
    const NAME: &'static str = "variable-dedup";
    const DOC: &'static str =
        "one entry parameter per tessera.resource; records tessera.argument_map (seed 000)";
    fn with_options(options: DedupOptions) -> VariableDedup {
        VariableDedup {
            options,
            report: None,
        }
    }
}

impl Pass for VariableDedup {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> tessera_pass::Result<bool> {
        let report =
            deduplicate(module, &self.options).map_err(|e| PassError::Failed(e.to_string()))?;
        let changed = report.changed();
        self.report = Some(report);
        Ok(changed)
    }

    fn remarks(&mut self) -> Option<String> {
        let r = self.report.as_ref()?;
        (r.changed() || !r.kept_apart.is_empty()).then(|| r.render())
    }
}

/// Registers `variable-dedup` (also reachable as `dedup`).
pub fn register(r: &mut Registry) {
    r.add::<VariableDedup>();
    r.add_alias("dedup", <VariableDedup as RegisteredPass>::NAME);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::resource::{argument_map, set_parameter_resource, ARGUMENT_MAP_ATTR};
    use tessera_hlo::text::parse_module;

    const THREE: &str = "HloModule m\n\nENTRY %main (a: f32[2], b: f32[2], c: f32[2]) -> f32[2] {\n  \
        %a = f32[2]{0} parameter(0)\n  %b = f32[2]{0} parameter(1)\n  %c = f32[2]{0} parameter(2)\n  \
        %s = f32[2]{0} add(f32[2]{0} %a, f32[2]{0} %b)\n  ROOT %t = f32[2]{0} add(f32[2]{0} %s, f32[2]{0} %c)\n}\n";

    /// Resources named through the library API; the map is returned, recorded, survives the
    /// proto, and a second run composes with it.
    #[test]
    fn library_api_and_maps() {
        let mut m = parse_module(THREE).unwrap();
        let w = ResourceId::new("vars", "w");
        set_parameter_resource(&mut m, 0, Some(&w)).unwrap();
        set_parameter_resource(&mut m, 2, Some(&w)).unwrap();
        assert!(set_parameter_resource(&mut m, 3, Some(&w)).is_err());
        let r = deduplicate(&mut m, &DedupOptions::default()).unwrap();
        assert_eq!(r.argument_map, vec![0, 1, 0]);
        assert_eq!(r.removed_bytes, 8);
        let back =
            tessera_hlo::proto::from_proto_bytes(&tessera_hlo::proto::to_proto_bytes(&m)).unwrap();
        assert_eq!(argument_map(&back).unwrap(), Some(vec![0, 1, 0]));
        // b becomes w too: the second run maps the caller's three arguments to one parameter.
        set_parameter_resource(&mut m, 1, Some(&w)).unwrap();
        let r = deduplicate(&mut m, &DedupOptions::default()).unwrap();
        assert_eq!(r.argument_map, vec![0, 0, 0]);
        assert_eq!(argument_map(&m).unwrap(), Some(vec![0, 0, 0]));
        // Removing a resource attribute through the API.
        set_parameter_resource(&mut m, 0, None).unwrap();
        assert_eq!(
            tessera_hlo::resource::entry_resources(&m).unwrap(),
            vec![None]
        );
    }

    #[test]
    fn bad_argument_maps_are_errors() {
        let mut m = parse_module(THREE).unwrap();
        for (value, want) in [
            ("0,1", "no argument goes to parameter 2"),
            (
                "0,1,3",
                "argument 2 goes to parameter 3, but the entry computation has 3",
            ),
            (
                "0,x,2",
                "argument 1: expected a parameter number, found `x`",
            ),
        ] {
            m.config
                .frontend_attributes
                .insert(ARGUMENT_MAP_ATTR.into(), value.into());
            let e = argument_map(&m).unwrap_err().to_string();
            assert!(e.contains(want), "{value}: {e}");
            // The pass refuses such a module too, with the same message.
            let e = deduplicate(&mut m.clone(), &DedupOptions::default()).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn options() {
        let mut o = DedupOptions::default();
        o.set("num_cores_per_replica", "4").unwrap();
        assert_eq!(o.num_cores_per_replica, 4);
        assert!(o.set("num_cores_per_replica", "0").is_err());
        assert!(o.set("auto_input_sharding", "maybe").is_err());
        assert!(o.set("enable", "true").unwrap_err().contains("known:"));
    }
}
