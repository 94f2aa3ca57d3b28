//! Generated module families for evaluating schedulers and rematerialization: valid,
//! runnable HLO (element-wise f32 ops only) whose size and shape of liveness are known.
//!
//! - [`chain`]: a forward chain and a backward chain that reads the forward values in reverse
//!   order, as a training step does: value `a_i` of the forward chain stays live until the
//!   backward chain reaches it, so the peak grows with the length, and recomputing `a_i` from
//!   `a_{i-1}` right before its backward use frees it in between.
//! - [`ladder`]: a chain with skip connections: `a_i = tanh(a_{i-1} + a_{i-skip})`, and a
//!   backward chain as in [`chain`] that reads every `rung`-th forward value: values live across
//!   many skip edges at once, and a recomputation needs operands that may be dead already.
//! - [`random_dag`]: small random DAGs for the exhaustive comparison.
//!
//! [`growth_exponent`] fits how a measured time grows with the size of these (and the
//! workspace benches' scaling families).
//!
//! Every generated module carries a schedule (its entry computation in construction order), so
//! it is `is_scheduled=true` and ready for rematerialization without a scheduler. Names are
//! deterministic; the same arguments give the same module.

use tessera_hlo::rng::Rng;
use tessera_hlo::{CompId, ElementType, InstrId, Instruction, Module, Opcode, Schedule, Shape};

struct Gen {
    m: Module,
    c: CompId,
    seq: Vec<InstrId>,
    next: usize,
}

impl Gen {
    fn new(name: &str) -> Gen {
        let mut m = Module::new(name);
        let c = m
            .add_computation("main")
            .expect("a fresh module has no computations");
        m.set_entry(c);
        Gen {
            m,
            c,
            seq: Vec::new(),
            next: 0,
        }
    }

    fn param(&mut self, n: i64, shape: Shape) -> InstrId {
        let mut i = Instruction::new(format!("p{n}"), Opcode::Parameter, shape);
        i.attrs.parameter_number = n;
        self.push(i)
    }

    fn op(&mut self, opcode: Opcode, operands: &[InstrId]) -> InstrId {
        let shape = self.m.instr(operands[0]).shape.clone();
        let name = format!("{}.{}", opcode_stem(opcode), self.next);
        self.next += 1;
        self.push(Instruction::new(name, opcode, shape).with_operands(operands))
    }

    fn push(&mut self, i: Instruction) -> InstrId {
        let id = self
            .m
            .add_instruction(self.c, i)
            .expect("generated names are unique and operands local");
        self.seq.push(id);
        id
    }

    fn finish(mut self, root: InstrId) -> Module {
        self.m.set_root(self.c, root);
        let mut s = Schedule::default();
        s.sequences.insert(self.c, self.seq);
        self.m.schedule = Some(s);
        self.m
    }
}

fn opcode_stem(op: Opcode) -> &'static str {
    match op {
        Opcode::Tanh => "tanh",
        Opcode::Sin => "sine",
        Opcode::Negate => "negate",
        Opcode::Add => "add",
        Opcode::Multiply => "multiply",
        Opcode::Maximum => "maximum",
        Opcode::Subtract => "subtract",
        _ => "op",
    }
}

/// The element type and shape every generated value has: `f32[width]`.
pub fn value_shape(width: i64) -> Shape {
    Shape::array(ElementType::F32, &[width])
}

const UNARY: [Opcode; 3] = [Opcode::Tanh, Opcode::Sin, Opcode::Negate];

/// A forward chain of `k` unary ops on `f32[width]` and a backward chain of `k` steps
/// `g_i = tanh(g_{i+1} + a_i)`: `3k + 1` instructions, chosen so that the total is close to
/// `instructions` (at least 4). Root: the last backward value.
pub fn chain(instructions: usize, width: i64) -> Module {
    forward_backward("chain", instructions, width, |g, i, x, _| {
        g.op(UNARY[i % UNARY.len()], &[x])
    })
}

/// [`chain`] whose forward steps all read the parameter too, `x_i = op_i(x_{i-1}, p)`: the
/// clones of forward values share an operand with hundreds of users (the case that made
/// placing each clone a scan of them all). `3k + 1` instructions, as in [`chain`].
pub fn shared_operand_chain(instructions: usize, width: i64) -> Module {
    const BINARY: [Opcode; 4] = [
        Opcode::Add,
        Opcode::Multiply,
        Opcode::Subtract,
        Opcode::Maximum,
    ];
    forward_backward("shared_operand_chain", instructions, width, |g, i, x, p| {
        g.op(BINARY[i % BINARY.len()], &[x, p])
    })
}

/// `k` forward values `x_i = step(i, x_{i-1}, p)` from the parameter `p`, then the backward
/// chain `g = tanh(g + x_i)` over them in reverse; `k` so that the total is close to
/// `instructions` for a one-instruction step.
fn forward_backward(
    name: &str,
    instructions: usize,
    width: i64,
    step: impl Fn(&mut Gen, usize, InstrId, InstrId) -> InstrId,
) -> Module {
    let k = (instructions.saturating_sub(1) / 3).max(1);
    let mut g = Gen::new(&format!("{name}_{instructions}"));
    let p = g.param(0, value_shape(width));
    let mut fwd = Vec::with_capacity(k);
    let mut x = p;
    for i in 0..k {
        x = step(&mut g, i, x, p);
        fwd.push(x);
    }
    let mut acc = x;
    for &a in fwd.iter().rev() {
        let s = g.op(Opcode::Add, &[acc, a]);
        acc = g.op(Opcode::Tanh, &[s]);
    }
    g.finish(acc)
}

/// A forward chain with skip connections, `a_i = tanh(a_{i-1} + a_{i-skip})` (2 instructions
/// per step), then a backward chain `g = tanh(g * a_j)` over every `rung`-th forward value in
/// reverse. Sized so that the total is close to `instructions`.
pub fn ladder(instructions: usize, width: i64, skip: usize, rung: usize) -> Module {
    let skip = skip.max(2);
    let rung = rung.max(1);
    // 2 per forward step, 2 per rung: 2k + 2k/rung = instructions.
    let k = ((instructions.saturating_sub(1) * rung) / (2 * rung + 2)).max(skip + 1);
    let mut g = Gen::new(&format!("ladder_{instructions}"));
    let p = g.param(0, value_shape(width));
    let mut fwd: Vec<InstrId> = Vec::with_capacity(k);
    let mut x = g.op(Opcode::Sin, &[p]);
    fwd.push(x);
    for i in 1..k {
        x = if i >= skip {
            let s = g.op(Opcode::Add, &[x, fwd[i - skip]]);
            g.op(Opcode::Tanh, &[s])
        } else {
            g.op(UNARY[i % UNARY.len()], &[x])
        };
        fwd.push(x);
    }
    let mut acc = x;
    for j in (0..k).rev().step_by(rung) {
        let s = g.op(Opcode::Multiply, &[acc, fwd[j]]);
        acc = g.op(Opcode::Tanh, &[s]);
    }
    g.finish(acc)
}

/// A random DAG of `ops` element-wise instructions on `f32[width]` over `params` parameters:
/// each instruction is unary (tanh, sine, negate) or binary (add, multiply, maximum) on
/// earlier values, with operands drawn either from the last few values or from anywhere before
/// (long-lived values). Values nobody reads are summed into the root by a final chain of adds
/// (part of the `ops` count when possible), so nothing is dead. Deterministic in `seed`.
pub fn random_dag(ops: usize, params: usize, width: i64, seed: u64) -> Module {
    let mut rng = Rng::new(seed);
    let mut g = Gen::new(&format!("dag_{ops}_{seed}"));
    let mut values: Vec<InstrId> = (0..params.max(1))
        .map(|n| g.param(n as i64, value_shape(width)))
        .collect();
    let mut used = vec![false; values.len()];
    let pick = |rng: &mut Rng, values: &[InstrId]| -> usize {
        let n = values.len();
        if rng.below(3) == 0 {
            rng.below(n)
        } else {
            n - 1 - rng.below(n.min(3))
        }
    };
    let body = ops.saturating_sub(ops / 5).max(1);
    for _ in 0..body {
        let a = pick(&mut rng, &values);
        let id = if rng.below(5) < 2 {
            g.op(UNARY[rng.below(UNARY.len())], &[values[a]])
        } else {
            let mut b = pick(&mut rng, &values);
            if b == a && values.len() > 1 {
                b = rng.below(values.len());
            }
            used[b] = true;
            let op = [Opcode::Add, Opcode::Multiply, Opcode::Maximum][rng.below(3)];
            g.op(op, &[values[a], values[b]])
        };
        used[a] = true;
        values.push(id);
        used.push(false);
    }
    let sinks: Vec<InstrId> = values
        .iter()
        .zip(&used)
        .skip(params.max(1))
        .filter(|(_, &u)| !u)
        .map(|(&v, _)| v)
        .collect();
    let mut acc = sinks[0];
    for &s in &sinks[1..] {
        acc = g.op(Opcode::Add, &[acc, s]);
    }
    g.finish(acc)
}

/// Number of instructions of the entry computation.
pub fn entry_size(m: &Module) -> usize {
    m.entry()
        .map(|c| m.comp(c).instructions().len())
        .unwrap_or(0)
}

/// Least-squares slope of log(time) against log(size) over `(size, time)` points: 1 for a
/// linear cost, 2 for a quadratic one.
pub fn growth_exponent(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x.ln(), b + y.ln()));
    let (mx, my) = (sx / n, sy / n);
    let (mut num, mut den) = (0.0, 0.0);
    for (x, y) in points {
        num += (x.ln() - mx) * (y.ln() - my);
        den += (x.ln() - mx).powi(2);
    }
    num / den
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::analysis::{shape_size, Liveness, TuplePointsTo};

    fn peak(m: &Module) -> i64 {
        let pt = TuplePointsTo::new(m);
        Liveness::for_schedule(m, &pt, m.entry().unwrap(), &shape_size).peak_memory()
    }

    #[test]
    fn chain_size_and_peak() {
        let m = chain(301, 16);
        assert_eq!(entry_size(&m), 301);
        tessera_hlo::verify::verify(&m, &Default::default()).unwrap();
        // 100 forward values, all live when the backward chain starts (plus the parameter and
        // the first backward add): 102 buffers of 64 bytes.
        assert_eq!(peak(&m), 102 * 64);
    }

    #[test]
    fn ladder_and_dag_verify_and_are_deterministic() {
        for n in [1000, 3000] {
            let m = ladder(n, 8, 10, 4);
            tessera_hlo::verify::verify(&m, &Default::default()).unwrap();
            let size = entry_size(&m);
            assert!(size.abs_diff(n) * 10 <= n, "{size} vs {n}");
        }
        for seed in 0..20 {
            let a = random_dag(25, 2, 16, seed);
            tessera_hlo::verify::verify(&a, &Default::default()).unwrap();
            let text = tessera_hlo::text::print_module(&a, &Default::default());
            assert_eq!(
                text,
                tessera_hlo::text::print_module(&random_dag(25, 2, 16, seed), &Default::default())
            );
            let c = a.entry().unwrap();
            // Nothing dead: every instruction but the root (and parameters) has a user.
            for &i in a.comp(c).instructions() {
                let live = Some(i) == a.comp(c).root() || !a.users(i).is_empty();
                assert!(live || a.instr(i).opcode() == Opcode::Parameter);
            }
        }
    }
}
