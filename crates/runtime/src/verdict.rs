//! The verdict of a comparison: *equivalent*, *NOT equivalent* or *not comparable*, and the
//! pieces it is decided from (docs/runtime.md, *The verdict*).
//!
//! A partitioned program sums in another order than its original. Over a long or deep
//! reduction that rounding exceeds any fixed per-element tolerance of the program's own types,
//! while the program is right. So the verdict is decided in a wider precision: both programs
//! run again with every floating-point type narrower than `f64` promoted to `f64` (complex64
//! to complex128), on the same inputs ([`widen_module`]). The same reordering shrinks there by
//! the ratio of the unit roundoffs (2^-29 for f32, 2^-45 for bf16); a wrong program does not.
//!
//! How far apart may the two wide results be? Per output, as far as the computation's own
//! rounding, measured: `own` is the largest difference between the reference run as given and
//! the reference run wide (the native program's own error, at every depth this program has),
//! scaled by the ratio of unit roundoffs and a margin of [`MARGIN`]; plus [`MARGIN`] units of
//! `f64` roundoff of the output's largest magnitude (a floor for programs computed exactly).
//! The bound applies to every element against the output's norm, not the element's own size:
//! an element near zero that came out of cancellation carries the rounding of the large terms
//! that cancelled.
//!
//! Integers and predicates compare exactly (in the wide run, where one is made). Outputs that
//! depend on a stateful `rng` are *not comparable*, as are programs with a custom-call the
//! plugin cannot run on the host.

use std::fmt;

use tessera_hlo::{ElementType, Literal, LiteralData, Module, Opcode, Shape};

use crate::host::{decode, HostArray, HostValue, Scalar};

/// Margin of the wide bound over the measured rounding (a power of two, 4096).
pub const MARGIN: f64 = 4096.0;

/// Unit roundoff of a floating-point (or complex) type: 2^-p for `p` significand bits.
pub fn unit_roundoff(ty: ElementType) -> f64 {
    use ElementType::*;
    let p = match ty {
        F64 | C128 => 53,
        F32 | C64 => 24,
        F16 => 11,
        BF16 => 8,
        F8E3M4 => 5,
        F8E4M3 | F8E4M3FN | F8E4M3FNUZ | F8E4M3B11FNUZ => 4,
        F8E5M2 | F8E5M2FNUZ => 3,
        F4E2M1FN => 2,
        F8E8M0FNU => 1,
        _ => return 0.0,
    };
    (-(p as f64)).exp2()
}

/// The type `ty` becomes in the wide run: `f64` for every narrower real float, `c128` for
/// `c64`; others unchanged.
pub fn wide_type(ty: ElementType) -> ElementType {
    if ty.is_float() {
        ElementType::F64
    } else if ty == ElementType::C64 {
        ElementType::C128
    } else {
        ty
    }
}

fn widens(ty: ElementType) -> bool {
    wide_type(ty) != ty
}

/// Why `m` has no wide counterpart, if it has none: an instruction whose meaning is the bits
/// of a narrow float (`bitcast-convert` from or to one).
pub fn not_widenable(m: &Module) -> Option<String> {
    ids(m).into_iter().find_map(|id| {
        let i = m.instr(id);
        if i.opcode() != Opcode::BitcastConvert {
            return None;
        }
        let operand = m.instr(*m.operands(id).first()?);
        (has_narrow_float(&i.shape) || has_narrow_float(&operand.shape)).then(|| {
            format!(
                "%{} reinterprets the bits of a float narrower than f64, which has no f64 \
                 counterpart",
                i.name()
            )
        })
    })
}

/// `m` with every float type narrower than `f64` made `f64` (and `c64` made `c128`): shapes of
/// every instruction, constants, the entry layout. Values are unchanged (f64 holds each of
/// them exactly); only rounding differs. A dot's `algorithm=` names input types and is a
/// precision choice, so it is dropped. Callers check [`not_widenable`] first.
pub fn widen_module(m: &Module) -> Module {
    let mut out = m.clone();
    for id in ids(m) {
        let i = out.instr_mut(id);
        widen_shape(&mut i.shape);
        if let Some(l) = i.attrs.literal.as_deref_mut() {
            widen_literal(l);
        }
        if let Some(p) = i.attrs.precision.as_deref_mut() {
            p.algorithm = 0;
        }
    }
    if let Some(p) = out.config.entry_computation_layout.as_mut() {
        p.parameters.iter_mut().for_each(widen_shape);
        widen_shape(&mut p.result);
    }
    out
}

fn has_narrow_float(s: &Shape) -> bool {
    match s {
        Shape::Array(a) => widens(a.ty),
        Shape::Tuple(e) => e.iter().any(has_narrow_float),
        Shape::Buffer(b) => has_narrow_float(b),
        Shape::Token | Shape::Opaque => false,
    }
}

fn ids(m: &Module) -> Vec<tessera_hlo::InstrId> {
    m.computations()
        .iter()
        .flat_map(|&c| m.comp(c).instructions().to_vec())
        .collect()
}

fn widen_shape(s: &mut Shape) {
    match s {
        Shape::Array(a) => a.ty = wide_type(a.ty),
        Shape::Tuple(e) => e.iter_mut().for_each(widen_shape),
        Shape::Buffer(b) => widen_shape(b),
        Shape::Token | Shape::Opaque => {}
    }
}

fn widen_literal(l: &mut Literal) {
    match &mut l.data {
        LiteralData::Array(bytes) => {
            if let Some(ty) = l.shape.as_array().map(|a| a.ty).filter(|&t| widens(t)) {
                *bytes = widen_bytes(ty, bytes);
            }
        }
        LiteralData::Tuple(e) => e.iter_mut().for_each(widen_literal),
        _ => {}
    }
    widen_shape(&mut l.shape);
}

/// Little-endian elements of `ty` as the same values in `wide_type(ty)`.
fn widen_bytes(ty: ElementType, bytes: &[u8]) -> Vec<u8> {
    let w = ty.byte_size();
    let mut out = Vec::with_capacity(bytes.len() / w.max(1) * 16);
    for b in bytes.chunks_exact(w) {
        match decode(ty, b) {
            Scalar::Complex(re, im) => {
                out.extend_from_slice(&re.to_le_bytes());
                out.extend_from_slice(&im.to_le_bytes());
            }
            s => out.extend_from_slice(&s.as_f64().to_le_bytes()),
        }
    }
    out
}

/// An input of the wide programs: the same values in the wide type.
pub fn widen_value(v: &HostValue) -> HostValue {
    match v {
        HostValue::Array(a) if widens(a.ty) => HostValue::Array(HostArray {
            ty: wide_type(a.ty),
            dims: a.dims.clone(),
            data: widen_bytes(a.ty, &a.data),
        }),
        HostValue::Array(a) => HostValue::Array(a.clone()),
        HostValue::Tuple(e) => HostValue::Tuple(e.iter().map(widen_value).collect()),
    }
}

/// The flattened outputs of `m`'s entry (tuple leaves in pre-order) that depend on a stateful
/// random number generator (`rng`, `rng-get-and-update-state`): by output index, the
/// instruction they depend on. An instruction that calls a computation holding one depends on
/// it; a tuple root is followed operand by operand, any other root taints every leaf.
pub fn stateful_random_outputs(m: &Module) -> Vec<(usize, String)> {
    let Some(entry) = m.entry() else {
        return Vec::new();
    };
    // The stateful generator each computation holds, if any (callees before callers).
    let mut inside: indexmap::IndexMap<tessera_hlo::CompId, Option<String>> =
        indexmap::IndexMap::new();
    fn holds(
        m: &Module,
        c: tessera_hlo::CompId,
        inside: &mut indexmap::IndexMap<tessera_hlo::CompId, Option<String>>,
        depth: usize,
    ) -> Option<String> {
        if let Some(found) = inside.get(&c) {
            return found.clone();
        }
        // A cycle or an absurd depth is the verifier's to refuse; here it only ends the walk.
        inside.insert(c, None);
        if depth > 256 {
            return None;
        }
        let mut found = None;
        for &id in m.comp(c).instructions() {
            let i = m.instr(id);
            if matches!(i.opcode(), Opcode::Rng | Opcode::RngGetAndUpdateState) {
                found = Some(i.name().to_string());
                break;
            }
            if let Some(f) = i
                .called
                .iter()
                .find_map(|&k| holds(m, k, inside, depth + 1))
            {
                found = Some(f);
                break;
            }
        }
        inside.insert(c, found.clone());
        found
    }
    // Per entry instruction: the generator it depends on (operands first: the order is a
    // topological one).
    let comp = m.comp(entry);
    let mut taint: std::collections::HashMap<tessera_hlo::InstrId, String> =
        std::collections::HashMap::new();
    for &id in comp.instructions() {
        let i = m.instr(id);
        let own = if matches!(i.opcode(), Opcode::Rng | Opcode::RngGetAndUpdateState) {
            Some(i.name().to_string())
        } else {
            i.called
                .iter()
                .find_map(|&k| holds(m, k, &mut inside, 0))
                .map(|inner| format!("{inner} (called by %{})", i.name()))
        };
        let from = own.or_else(|| m.operands(id).iter().find_map(|o| taint.get(o).cloned()));
        if let Some(f) = from {
            taint.insert(id, f);
        }
    }
    let Some(root) = comp.root() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut next = 0usize;
    fn walk(
        m: &Module,
        id: tessera_hlo::InstrId,
        taint: &std::collections::HashMap<tessera_hlo::InstrId, String>,
        next: &mut usize,
        out: &mut Vec<(usize, String)>,
    ) {
        let i = m.instr(id);
        if i.opcode() == Opcode::Tuple && taint.contains_key(&id) {
            for &o in m.operands(id) {
                walk(m, o, taint, next, out);
            }
            return;
        }
        let leaves = i.shape.leaf_count();
        if let Some(f) = taint.get(&id) {
            out.extend((*next..*next + leaves).map(|k| (k, f.clone())));
        }
        *next += leaves;
    }
    walk(m, root, &taint, &mut next, &mut out);
    out
}

/// A custom-call the plugin has no host implementation of, from its error text ("No
/// registered implementation for ... custom call to GetRngSeed for Host"): the instruction of
/// `m` that calls it, described.
pub fn unrunnable_custom_call(m: &Module, error: &str) -> Option<String> {
    let rest = error.split("No registered implementation for").nth(1)?;
    let target = rest.split("custom call to ").nth(1)?;
    let target = target.split(" for ").next()?.trim();
    let name = ids(m).into_iter().find_map(|id| {
        let i = m.instr(id);
        (i.attrs.custom_call.as_ref()?.target == target).then(|| i.name().to_string())
    });
    Some(match name {
        Some(n) => format!(
            "%{n} is a custom-call to {target}, which the PJRT CPU plugin cannot run on the host"
        ),
        None => format!("a custom-call to {target} cannot run on the PJRT CPU plugin's host"),
    })
}

/// The wide bound of one float output: how far apart the wide reference `wide` and the wide
/// candidate may be, given the reference as given (`native`, of type `ty`). `None` when the
/// shapes differ (the caller reports that).
pub fn wide_bound(native: &HostArray, wide: &HostArray) -> Option<Bound> {
    if native.dims != wide.dims {
        return None;
    }
    let (n, w) = (native.ty, wide.ty);
    let (nw, ww) = (n.byte_size(), w.byte_size());
    let mut own = 0.0f64;
    let mut scale = 0.0f64;
    for k in 0..native.element_count() {
        let (a, b) = (
            decode(n, &native.data[k * nw..(k + 1) * nw]),
            decode(w, &wide.data[k * ww..(k + 1) * ww]),
        );
        for (x, y) in parts(a).into_iter().zip(parts(b)) {
            if y.is_finite() {
                scale = scale.max(y.abs());
                if x.is_finite() {
                    own = own.max((x - y).abs());
                }
            }
        }
    }
    let ratio = unit_roundoff(w) / unit_roundoff(n).max(f64::MIN_POSITIVE);
    Some(Bound {
        own,
        scale,
        abs: MARGIN * (own * ratio + unit_roundoff(w) * scale),
    })
}

fn parts(s: Scalar) -> Vec<f64> {
    match s {
        Scalar::Complex(re, im) => vec![re, im],
        s => vec![s.as_f64()],
    }
}

/// The measured quantities behind a wide bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    /// Largest difference between the reference as given and the reference wide.
    pub own: f64,
    /// Largest finite magnitude of the wide reference.
    pub scale: f64,
    /// The bound on every element's absolute difference in the wide run.
    pub abs: f64,
}

/// The three verdicts, in increasing severity of what they tell a user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Equivalent,
    /// Some output could not be compared (stateful rng, an unrunnable custom-call); every
    /// other output is equal.
    NotComparable,
    NotEquivalent,
}

impl Outcome {
    /// The exit status of `tessera compare` and `tessera compile --verify`: 0, 3, 1.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Equivalent => 0,
            Outcome::NotEquivalent => 1,
            Outcome::NotComparable => 3,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Equivalent => "equivalent",
            Outcome::NotComparable => "not comparable",
            Outcome::NotEquivalent => "NOT equivalent",
        })
    }
}

/// Bytes of host memory available to this process now (`MemAvailable`), when the system says.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundoff_by_significand() {
        assert_eq!(unit_roundoff(ElementType::F32), 2f64.powi(-24));
        assert_eq!(unit_roundoff(ElementType::BF16), 2f64.powi(-8));
        assert_eq!(unit_roundoff(ElementType::C128), 2f64.powi(-53));
        assert_eq!(unit_roundoff(ElementType::S32), 0.0);
    }

    #[test]
    fn bound_scales_the_measured_rounding() {
        let native = HostArray::f32(&[3], &[1.0, -2.0, 100.0]).unwrap();
        let wide = HostValue::Array(HostArray::f32(&[3], &[1.0, -2.0, 100.0]).unwrap());
        let HostValue::Array(mut wide) = widen_value(&wide) else {
            unreachable!()
        };
        // The native run was off by 1e-3 at one element.
        let w = 8;
        wide.data[w..2 * w].copy_from_slice(&(-2.001f64).to_le_bytes());
        let b = wide_bound(&native, &wide).unwrap();
        assert!((b.own - 1e-3).abs() < 1e-9, "{b:?}");
        assert_eq!(b.scale, 100.0);
        let expected = MARGIN * (b.own * 2f64.powi(-29) + 2f64.powi(-53) * 100.0);
        assert!((b.abs - expected).abs() < 1e-20);
    }

    #[test]
    fn widening_keeps_values() {
        let v = HostValue::Array(HostArray::f32(&[2], &[0.1, -3.5]).unwrap());
        let HostValue::Array(w) = widen_value(&v) else {
            unreachable!()
        };
        assert_eq!(w.ty, ElementType::F64);
        let x = f64::from_le_bytes(w.data[..8].try_into().unwrap());
        assert_eq!(x, f64::from(0.1f32));
    }
}
