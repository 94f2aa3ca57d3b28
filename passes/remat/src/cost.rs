//! What recomputing an instruction costs, in floating-point operations: the figure the
//! rematerialization pass minimizes among results that meet a limit, and reports
//! (`RematSummary::recompute_flops`).
//!
//! The model counts the arithmetic, not the memory traffic: a dot is 2 flops per output
//! element per contracted element, a convolution 2 per output element per kernel element
//! that feeds it, a reduction one per input element, an elementwise or data-movement op one
//! per output element, a fusion the sum of its body. Instructions that only name or reshape a
//! buffer (parameters, constants, tuples, get-tuple-element, bitcasts) cost nothing.

use tessera_hlo::{CompId, InstrId, Module, Opcode, Shape};

fn elements(s: &Shape) -> i64 {
    let mut n = 0i64;
    s.for_each_subshape(|_, sub| {
        if let Some(a) = sub.as_array() {
            n = n.saturating_add(a.element_count());
        }
    });
    n
}

/// Flops of one execution of `id` (see the module docs).
pub fn instruction_flops(module: &Module, id: InstrId) -> i64 {
    let ins = module.instr(id);
    let out = elements(&ins.shape);
    let operand_elements = |k: usize| {
        ins.operands()
            .get(k)
            .map(|&o| elements(&module.instr(o).shape))
            .unwrap_or(0)
    };
    match ins.opcode() {
        Opcode::Parameter
        | Opcode::Constant
        | Opcode::Tuple
        | Opcode::GetTupleElement
        | Opcode::Bitcast
        | Opcode::AfterAll => 0,
        Opcode::Dot => {
            let lhs = ins
                .operands()
                .first()
                .and_then(|&o| module.instr(o).shape.as_array());
            let k: i64 = match (&ins.attrs.dot_dims, lhs) {
                (Some(d), Some(a)) => d
                    .lhs_contracting_dimensions
                    .iter()
                    .map(|&c| a.dims.get(c as usize).copied().unwrap_or(1).max(1))
                    .product(),
                _ => 1,
            };
            out.saturating_mul(k).saturating_mul(2)
        }
        Opcode::Convolution => {
            let rhs = ins
                .operands()
                .get(1)
                .and_then(|&o| module.instr(o).shape.as_array());
            let per_output = match (&ins.attrs.conv_dims, rhs) {
                (Some(d), Some(a)) => {
                    let of = a
                        .dims
                        .get(d.kernel_output_feature_dimension as usize)
                        .copied()
                        .unwrap_or(1)
                        .max(1);
                    a.element_count() / of
                }
                _ => 1,
            };
            out.saturating_mul(per_output).saturating_mul(2)
        }
        Opcode::Reduce | Opcode::ReduceWindow => operand_elements(0).max(out),
        Opcode::Fusion => ins
            .called
            .iter()
            .map(|&c| computation_flops(module, c))
            .fold(0i64, i64::saturating_add),
        _ => out,
    }
}

/// Flops of every instruction of `c` (fusion bodies included once per fusion).
pub fn computation_flops(module: &Module, c: CompId) -> i64 {
    module
        .comp(c)
        .instructions()
        .iter()
        .map(|&i| instruction_flops(module, i))
        .fold(0i64, i64::saturating_add)
}

/// Flops of one run of `module` along its schedule: every scheduled instruction of every
/// scheduled computation once (loop bodies once, not per trip). Without a schedule, every
/// non-fusion computation's instructions.
pub fn module_flops(module: &Module) -> i64 {
    match &module.schedule {
        Some(s) => s
            .sequences
            .values()
            .flat_map(|seq| seq.iter())
            .map(|&i| instruction_flops(module, i))
            .fold(0i64, i64::saturating_add),
        None => module
            .computations()
            .iter()
            .map(|&c| computation_flops(module, c))
            .fold(0i64, i64::saturating_add),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_reduce_and_elementwise() {
        let m = tessera_hlo::text::parse_module(
            "HloModule m\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\nENTRY e {\n  a = f32[4,8] parameter(0)\n  b = f32[8,16] parameter(1)\n  d = f32[4,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  n = f32[4,16] negate(d)\n  z = f32[] constant(0)\n  ROOT r = f32[4] reduce(n, z), dimensions={1}, to_apply=add\n}\n",
        )
        .unwrap();
        let e = m.entry().unwrap();
        let by_name = |n: &str| {
            *m.comp(e)
                .instructions()
                .iter()
                .find(|&&i| m.instr(i).name() == n)
                .unwrap()
        };
        assert_eq!(instruction_flops(&m, by_name("d")), 2 * 64 * 8);
        assert_eq!(instruction_flops(&m, by_name("n")), 64);
        assert_eq!(instruction_flops(&m, by_name("r")), 64);
        assert_eq!(instruction_flops(&m, by_name("z")), 0);
    }
}
