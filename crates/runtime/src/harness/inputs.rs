//! Inputs for the equivalence harness: the workspace's deterministic generator ([`Rng`]), random
//! arrays by element type, random values for a module's entry parameters, parameters of one
//! resource fed one value, and a deduplicated module's per-parameter values from the caller's
//! per-argument values (`tessera.argument_map`).

use super::*;

/// The harness's generator is the workspace's one (splitmix64).
pub use tessera_hlo::rng::Rng;

/// A random array: floats uniform in [-1, 1) (finite fp8/fp4 values drawn from their bit
/// patterns), integers small (in [-8, 8) for signed, [0, 16) for unsigned, narrower for
/// sub-byte types), pred 0 or 1.
pub fn random_array(ty: HloElementType, dims: &[i64], rng: &mut Rng) -> HostArray {
    use HloElementType::*;
    let mut a = HostArray::zeros(ty, dims);
    let n = a.element_count();
    let w = ty.byte_size();
    for k in 0..n {
        let out = &mut a.data[k * w..(k + 1) * w];
        match ty {
            Pred => out[0] = (rng.next_u64() & 1) as u8,
            F32 => out.copy_from_slice(&(rng.unit() as f32).to_le_bytes()),
            F64 => out.copy_from_slice(&rng.unit().to_le_bytes()),
            F16 => out.copy_from_slice(&F16Bits::from_f32(rng.unit() as f32).0.to_le_bytes()),
            BF16 => out.copy_from_slice(&Bf16Bits::from_f32(rng.unit() as f32).0.to_le_bytes()),
            C64 => {
                out[..4].copy_from_slice(&(rng.unit() as f32).to_le_bytes());
                out[4..].copy_from_slice(&(rng.unit() as f32).to_le_bytes());
            }
            C128 => {
                out[..8].copy_from_slice(&rng.unit().to_le_bytes());
                out[8..].copy_from_slice(&rng.unit().to_le_bytes());
            }
            t if t.is_float() => loop {
                let b = (rng.next_u64() & 0xff) as u8;
                let bits = t.bit_width();
                let b = if bits < 8 { b & ((1 << bits) - 1) } else { b };
                let v = crate::host::decode_minifloat(t, b);
                if v.is_finite() && v.abs() <= 4.0 {
                    out[0] = b;
                    break;
                }
            },
            t if t.is_integral() => {
                let bits = t.bit_width().min(4);
                let range = 1u64 << (bits - 1).max(1);
                let v: i64 = if t.is_signed_int() {
                    (rng.next_u64() % (2 * range)) as i64 - range as i64
                } else {
                    (rng.next_u64() % (2 * range)) as i64
                };
                let v = if t.bit_width() <= 2 {
                    // s1/s2/u1/u2: stay within the type.
                    let m = (1i64 << t.bit_width()) - 1;
                    v & m
                } else {
                    v
                };
                let bytes = v.to_le_bytes();
                out.copy_from_slice(&bytes[..w]);
            }
            _ => {}
        }
    }
    a
}

/// Random global inputs for the entry parameters of `m`.
pub fn random_inputs(m: &Module, seed: u64) -> Result<Vec<HostValue>> {
    let mut rng = Rng::new(seed);
    fn value(s: &Shape, rng: &mut Rng) -> Result<HostValue> {
        match s {
            Shape::Array(a) => {
                if !a.is_static() {
                    return Err(Error::InvalidArgument(format!(
                        "dynamic shape {:?} has no random input",
                        a.dims
                    )));
                }
                Ok(HostValue::Array(random_array(a.ty, &a.dims, rng)))
            }
            Shape::Tuple(e) => Ok(HostValue::Tuple(
                e.iter().map(|c| value(c, rng)).collect::<Result<_>>()?,
            )),
            other => Err(Error::UnsupportedType(format!(
                "{:?} has no host value",
                other.element_type()
            ))),
        }
    }
    let shardings = entry_parameter_shardings(m)?;
    let mut values = entry_parameter_shapes(m)?
        .iter()
        .zip(&shardings)
        .map(|(s, sh)| {
            // A manual parameter takes one piece per device: not meaningful for an original.
            if matches!(sh.kind, ShardingKind::Manual) {
                return Err(module_error(
                    m,
                    "an entry parameter of the original has a MANUAL sharding",
                ));
            }
            value(s, &mut rng)
        })
        .collect::<Result<Vec<_>>>()?;
    share_resource_inputs(m, &mut values)?;
    Ok(values)
}

/// Gives every entry parameter that names a resource (`tessera.resource`) the value of the
/// first parameter of the same resource, as one variable would feed them all. Parameters of
/// one resource with different shapes keep their own values (the dedup pass refuses them).
pub fn share_resource_inputs(m: &Module, inputs: &mut [HostValue]) -> Result<()> {
    let resources =
        tessera_hlo::resource::entry_resources(m).map_err(|e| module_error(m, e.to_string()))?;
    let first = tessera_hlo::resource::first_slot_of_resource(&resources);
    let shapes = entry_parameter_shapes(m)?;
    for (k, &j) in first.iter().enumerate() {
        if j != k && k < inputs.len() && shapes[j] == shapes[k] {
            inputs[k] = inputs[j].clone();
        }
    }
    Ok(())
}

/// Per-parameter values for `m` from the caller's per-argument values: a deduplicated module
/// (with a `tessera.argument_map`) takes the original argument list, and argument `k` goes to
/// parameter `map[k]`. Arguments that go to one parameter must be equal (they are one
/// variable). Without a map, or when `args` already has one value per parameter, `args` is
/// returned as is.
pub fn feed_through_map<T: Clone + PartialEq>(m: &Module, args: &[T]) -> Result<Vec<T>> {
    let map = tessera_hlo::resource::argument_map(m).map_err(|e| module_error(m, e.to_string()))?;
    let n = entry_parameter_shapes(m)?.len();
    let Some(map) = map else {
        return Ok(args.to_vec());
    };
    if args.len() == n && map.len() != n {
        return Ok(args.to_vec());
    }
    if args.len() != map.len() {
        return Err(module_error(
            m,
            format!(
                "takes {} arguments through its argument map ({n} parameters), got {}",
                map.len(),
                args.len()
            ),
        ));
    }
    let mut first: Vec<Option<usize>> = vec![None; n];
    for (k, &p) in map.iter().enumerate() {
        match first[p] {
            None => first[p] = Some(k),
            Some(j) if args[j] != args[k] => {
                return Err(module_error(
                    m,
                    format!(
                        "arguments {j} and {k} both go to parameter {p} (one variable) but \
                         differ; a deduplicated module needs the same array in every slot of \
                         one resource"
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(first
        .into_iter()
        .map(|k| args[k.expect("the map covers every parameter")].clone())
        .collect())
}
