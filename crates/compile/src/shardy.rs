//! jax's Shardy mode, as `lower().as_text()` and the dumps before XLA's `shardy-xla` pass
//! give it: a `shard_map` is a `call` of its body between two Shardy custom-calls,
//!
//! ```text
//! %g = (f32[8,8], f32[8,8]) custom-call(%x, %w), custom_call_target="xla.sdy.GlobalToLocalShape",
//!        sharding={{mesh[...], manual}, {mesh[...], manual}}
//! %c = f32[8,8] call(%g#0, %g#1), to_apply=%xla.sdy.manual_computation_body, sharding={... manual}
//! %l = f32[16,8] custom-call(%c), custom_call_target="xla.sdy.LocalToGlobalShape", sharding={...}
//! ```
//!
//! and the module's result goes through `xla.sdy.FuncResultSharding`. XLA's dumps carry the
//! shardings as HLO `sharding={...}` attributes (`{mesh[...], manual}` for the local side);
//! jax's `lower().as_text()` leaves them in Shardy's own syntax in frontend attributes
//! (`xla.sdy.in_shardings`, `xla.sdy.out_shardings`, `xla.sdy.manual_axes`, `xla.sdy.sharding`,
//! with the mesh in the module's `xla.sdy.meshes`), which [`sdy_sharding`] translates.
//!
//! [`import_shardy`] rewrites each shape call into one `SPMDFullToShardShape` (global to
//! local) or `SPMDShardToFullShape` (local to global) per operand, with that operand's
//! sharding (a `Sharding` custom-call first, with the global sharding, where only the
//! frontend attributes gave it), which is what XLA's `shardy-xla` pass leaves for its SPMD
//! partitioner (compare testdata/dumps/shard_map.shardy.before-spmd.txt) and what ours reads;
//! and `FuncResultSharding` into a `Sharding` custom-call. The `call` and its body stay as
//! they are; the `xla.sdy.*` frontend attributes go. Other `xla.sdy.*` custom-calls are not
//! rewritten (the pipeline refuses them, naming them), nor are shard_maps manual over only
//! some mesh axes (refused, named).

use std::collections::BTreeMap;

use tessera_hlo::attrs::CustomCallAttrs;
use tessera_hlo::{
    Builder, CompId, InstrId, Instruction, Module, Opcode, Shape, Sharding, ShardingKind,
};

use crate::{CompileError, Result};

const GLOBAL_TO_LOCAL: &str = "xla.sdy.GlobalToLocalShape";
const LOCAL_TO_GLOBAL: &str = "xla.sdy.LocalToGlobalShape";
const FUNC_RESULT: &str = "xla.sdy.FuncResultSharding";

/// `module` in the form the plugin's XLA runs outside jax: with Shardy's shape custom-calls
/// imported ([`import_shardy`]), since XLA reads them only in its Shardy pipeline. The
/// verification's references and candidates (`compare`, `--verify`, Python's `compare`) go
/// through it. A module without them is returned as it is.
pub fn runnable_form(module: &Module) -> Result<std::borrow::Cow<'_, Module>> {
    if !has_shardy_shape_calls(module) {
        return Ok(std::borrow::Cow::Borrowed(module));
    }
    let mut m = module.clone();
    import_shardy(&mut m)?;
    Ok(std::borrow::Cow::Owned(m))
}

/// True if `module` has a Shardy custom-call [`import_shardy`] rewrites.
pub fn has_shardy_shape_calls(module: &Module) -> bool {
    module.computations().iter().any(|&c| {
        module
            .comp(c)
            .instructions()
            .iter()
            .any(|&id| shape_call_target(module, id).is_some())
    })
}

/// What [`import_shardy`] turns the custom-call `id` into, if it rewrites it.
pub(crate) fn shape_call_target(module: &Module, id: InstrId) -> Option<&'static str> {
    let cc = module.instr(id).attrs.custom_call.as_ref()?;
    match cc.target.as_str() {
        GLOBAL_TO_LOCAL => Some("SPMDFullToShardShape"),
        LOCAL_TO_GLOBAL => Some("SPMDShardToFullShape"),
        FUNC_RESULT => Some("Sharding"),
        _ => None,
    }
}

/// Rewrites every Shardy custom-call of the module docs; returns how many. A call whose
/// operands do not match its result's tuple elements, whose sharding does not give one
/// element per operand, or whose Shardy attributes do not translate is an error naming it.
pub fn import_shardy(module: &mut Module) -> Result<usize> {
    let meshes = meshes(module)?;
    let mut found = Vec::new();
    for &c in module.computations() {
        for &id in module.comp(c).instructions() {
            if let Some(t) = shape_call_target(module, id) {
                found.push((c, id, t));
            }
        }
    }
    for &(comp, id, target) in &found {
        rewrite(module, &meshes, comp, id, target)?;
    }
    module
        .config
        .frontend_attributes
        .retain(|k, _| !k.starts_with("xla.sdy."));
    if !found.is_empty() {
        // Read once; left on an instruction they would say what no longer holds.
        for c in module.computations().to_vec() {
            for id in module.comp(c).instructions().to_vec() {
                if module
                    .instr(id)
                    .frontend_attributes
                    .keys()
                    .any(|k| k.starts_with("xla.sdy."))
                {
                    module
                        .instr_mut(id)
                        .frontend_attributes
                        .retain(|k, _| !k.starts_with("xla.sdy."));
                }
            }
        }
    }
    Ok(found.len())
}

fn bad(module: &Module, id: InstrId, what: &str) -> CompileError {
    CompileError::InvalidInput(format!("%{}: {what}", module.instr(id).name()))
}

/// The module's `xla.sdy.meshes` (`{mesh = #sdy.mesh<["data"=2, "model"=4]>, ...}`), each as
/// the HLO text of the mesh (`mesh['data'=2,'model'=4]`), by name.
fn meshes(module: &Module) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let Some(text) = module.config.frontend_attributes.get("xla.sdy.meshes") else {
        return Ok(out);
    };
    let text = text.replace("\\\"", "\"");
    let bad = |what: &str| {
        CompileError::InvalidInput(format!("the module's xla.sdy.meshes `{text}`: {what}"))
    };
    let mut rest = text.as_str();
    while let Some(k) = rest.find("#sdy.mesh<") {
        let name = rest[..k]
            .trim_end()
            .strip_suffix('=')
            .map(|n| n.trim().trim_start_matches(['{', ',']).trim())
            .ok_or_else(|| bad("expected `NAME = #sdy.mesh<...>`"))?
            .to_string();
        let body = &rest[k + "#sdy.mesh<".len()..];
        let end = body
            .find('>')
            .ok_or_else(|| bad("expected `>` to close the mesh"))?;
        let inner = body[..end].trim();
        let axes = inner
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .ok_or_else(|| {
                bad("expected a list of axes `[\"x\"=2, ...]` (meshes with device_ids are not read)")
            })?;
        let mut hlo = Vec::new();
        for a in axes.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            let (n, size) = a
                .split_once('=')
                .ok_or_else(|| bad(&format!("expected `\"axis\"=size`, found `{a}`")))?;
            hlo.push(format!("'{}'={}", n.trim().trim_matches('"'), size.trim()));
        }
        out.insert(name, format!("mesh[{}]", hlo.join(",")));
        rest = &body[end + 1..];
    }
    Ok(out)
}

/// Translates Shardy shardings (`#sdy.sharding<@mesh, [{"data"}, {}]>` or
/// `#sdy.sharding_per_value<[<@mesh, ...>, ...]>`) into HLO shardings, one per value.
/// Open dimensions (`?`) and priorities (`p0`) are dropped: propagation may refine any
/// dimension of an HLO sharding that the annotation leaves unsplit anyway.
pub fn sdy_sharding(
    text: &str,
    meshes: &BTreeMap<String, String>,
) -> Result<Vec<Sharding>, String> {
    let text = text.replace("\\\"", "\"");
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(k) = rest.find("<@") {
        let body = &rest[k + 2..];
        let comma = body.find(',').ok_or("expected `<@mesh, [dimensions]>`")?;
        let mesh_name = body[..comma].trim();
        let mesh = meshes
            .get(mesh_name)
            .ok_or_else(|| format!("mesh @{mesh_name} is not in the module's xla.sdy.meshes"))?;
        // The value's part ends at the `>` that closes `<@`.
        let mut depth = 0i32;
        let mut end = None;
        for (j, ch) in body.char_indices() {
            match ch {
                '[' | '{' | '(' => depth += 1,
                ']' | '}' | ')' => depth -= 1,
                '>' if depth == 0 => {
                    end = Some(j);
                    break;
                }
                _ => {}
            }
        }
        let end = end.ok_or("expected `>` to close the sharding")?;
        let mut spec = String::new();
        let mut chars = body[comma + 1..end].trim().chars().peekable();
        while let Some(ch) = chars.next() {
            match ch {
                '"' => spec.push('\''),
                '?' => {}
                'p' if chars.peek().is_some_and(|c| c.is_ascii_digit()) => {
                    while chars.peek().is_some_and(|c| c.is_ascii_digit()) {
                        chars.next();
                    }
                }
                c => spec.push(c),
            }
        }
        // `{"x", ?}` became `{'x', }`: drop the dangling separators.
        let spec = spec.replace(", }", "}").replace(",}", "}");
        let hlo = format!("{{{mesh}, {spec}}}");
        out.push(
            tessera_hlo::text::parse_sharding(&hlo)
                .map_err(|e| format!("`{hlo}` (from `{text}`): {e}"))?,
        );
        rest = &body[end + 1..];
    }
    if out.is_empty() {
        return Err(format!(
            "expected `<@mesh, [...]>` shardings, found `{text}`"
        ));
    }
    Ok(out)
}

/// The shardings of `id`'s values: its HLO sharding (one element per value), or else the
/// Shardy frontend attribute `key` translated.
fn shardings_of(
    module: &Module,
    meshes: &BTreeMap<String, String>,
    id: InstrId,
    count: usize,
    key: &str,
) -> Result<Vec<Option<Sharding>>> {
    let ins = module.instr(id);
    match ins.sharding.as_ref().map(|s| &s.kind) {
        Some(ShardingKind::Tuple(e)) if e.len() == count => {
            return Ok(e.iter().cloned().map(Some).collect())
        }
        Some(ShardingKind::Tuple(e)) => {
            return Err(bad(
                module,
                id,
                &format!(
                    "a tuple sharding of {} elements for {count} values",
                    e.len()
                ),
            ))
        }
        Some(_) if count == 1 => return Ok(vec![ins.sharding.clone()]),
        Some(_) => {
            return Err(bad(
                module,
                id,
                "one sharding for several values: expected a tuple sharding",
            ))
        }
        None => {}
    }
    match ins.frontend_attributes.get(key) {
        Some(t) => {
            let v = sdy_sharding(t, meshes).map_err(|e| bad(module, id, &format!("{key}: {e}")))?;
            if v.len() != count {
                return Err(bad(
                    module,
                    id,
                    &format!("{key} gives {} shardings for {count} values", v.len()),
                ));
            }
            Ok(v.into_iter().map(Some).collect())
        }
        None => Ok(vec![None; count]),
    }
}

/// The manual sharding of the local side of a shard_map: manual over the whole mesh of
/// `global`. A shard_map manual over only some axes (`xla.sdy.manual_axes`) is refused.
fn manual_of(
    module: &Module,
    meshes: &BTreeMap<String, String>,
    id: InstrId,
    manual_axes_of: InstrId,
) -> Result<Sharding> {
    let ins = module.instr(manual_axes_of);
    if let Some(axes) = ins.frontend_attributes.get("xla.sdy.manual_axes") {
        let named: Vec<String> = axes
            .replace("\\\"", "\"")
            .split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        for (name, mesh) in meshes {
            let all: Vec<String> = mesh
                .split('\'')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            if !all.iter().all(|a| named.contains(a)) {
                return Err(bad(
                    module,
                    id,
                    &format!(
                        "a shard_map manual over {named:?} of mesh {name}'s axes {all:?}: \
                         only shard_maps manual over the whole mesh are read (yet); hand over \
                         XLA's dump before spmd-partitioning instead"
                    ),
                ));
            }
        }
    }
    Ok(Sharding::manual())
}

fn rewrite(
    module: &mut Module,
    meshes: &BTreeMap<String, String>,
    comp: CompId,
    id: InstrId,
    target: &str,
) -> Result<()> {
    let ins = module.instr(id);
    let operands = ins.operands().to_vec();
    let (shapes, tuple): (Vec<Shape>, bool) = match &ins.shape {
        Shape::Tuple(e) if target != "Sharding" => (e.clone(), true),
        s => (vec![s.clone()], false),
    };
    if shapes.len() != operands.len() {
        return Err(bad(
            module,
            id,
            &format!("{} operands but {} results", operands.len(), shapes.len()),
        ));
    }
    let n = operands.len();
    // Per operand: the sharding to put first (a `Sharding` custom-call), and the result's.
    let (before, after): (Vec<Option<Sharding>>, Vec<Option<Sharding>>) = match target {
        "SPMDFullToShardShape" => {
            let before = if ins.sharding.is_some() {
                vec![None; n]
            } else {
                shardings_of(module, meshes, id, n, "xla.sdy.in_shardings")?
            };
            let after = if ins.sharding.is_some() {
                shardings_of(module, meshes, id, n, "")?
            } else {
                // The manual axes are on the matching LocalToGlobalShape; the body is
                // manual over what its in_shardings split.
                let l2g = module.comp(comp).instructions().iter().copied().find(|&j| {
                    module
                        .instr(j)
                        .attrs
                        .custom_call
                        .as_ref()
                        .is_some_and(|c| c.target == LOCAL_TO_GLOBAL)
                });
                let m = manual_of(module, meshes, id, l2g.unwrap_or(id))?;
                vec![Some(m); n]
            };
            (before, after)
        }
        "SPMDShardToFullShape" => {
            if ins.sharding.is_none() {
                manual_of(module, meshes, id, id)?;
            }
            (
                vec![None; n],
                shardings_of(module, meshes, id, n, "xla.sdy.out_shardings")?,
            )
        }
        _ => (
            vec![None; n],
            shardings_of(module, meshes, id, n, "xla.sdy.sharding")?,
        ),
    };
    let ins = module.instr(id);
    let metadata = ins.metadata.clone();
    let name = ins.name().to_string();
    let users = module.users(id).to_vec();

    let mut b = Builder::new(module, comp);
    b.set_origin(Some(id));
    let built = |e: tessera_hlo::BuildError| CompileError::Pass(format!("shardy-import: {e}"));
    let custom_call = |b: &mut Builder<'_>,
                       target: &str,
                       operand: InstrId,
                       shape: Shape,
                       sharding: Option<Sharding>| {
        let mut i =
            Instruction::new(name.as_str(), Opcode::CustomCall, shape).with_operands(&[operand]);
        i.attrs.custom_call = Some(Box::new(CustomCallAttrs {
            target: target.to_string(),
            ..Default::default()
        }));
        i.sharding = sharding;
        i.metadata = metadata.clone();
        b.add(i).map_err(built)
    };
    let mut parts = Vec::with_capacity(n);
    for (k, (&o, shape)) in operands.iter().zip(shapes).enumerate() {
        let mut o = o;
        if let Some(s) = &before[k] {
            let global = b.module().instr(o).shape.clone();
            o = custom_call(&mut b, "Sharding", o, global, Some(s.clone()))?;
        }
        parts.push(custom_call(&mut b, target, o, shape, after[k].clone())?);
    }
    let mutation =
        |e: tessera_hlo::MutationError| CompileError::Pass(format!("shardy-import: {e}"));
    let mut dead = Vec::new();
    if tuple {
        // Element reads go to the parts; any other use reads a tuple of them.
        let mut whole = None;
        for u in users {
            let ui = b.module().instr(u);
            if ui.opcode() == Opcode::GetTupleElement {
                let k = ui.attrs.tuple_index as usize;
                let part = *parts
                    .get(k)
                    .ok_or_else(|| bad(b.module(), u, "tuple index out of range"))?;
                b.module_mut()
                    .replace_all_uses_with(u, part)
                    .map_err(mutation)?;
                dead.push(u);
            } else if whole.is_none() {
                whole = Some(b.tuple(&parts).map_err(built)?);
            }
        }
        if let Some(t) = whole {
            b.module_mut()
                .replace_all_uses_with(id, t)
                .map_err(mutation)?;
        }
    } else {
        b.module_mut()
            .replace_all_uses_with(id, parts[0])
            .map_err(mutation)?;
    }
    dead.push(id);
    module.remove_instructions(&dead).map_err(mutation)
}
