//! The optimal rematerialization over a fixed schedule as a MILP (Checkmate's formulation,
//! Jain et al., MLSys 2020), solved with HiGHS: the exact yardstick for graphs too large for
//! `tessera_remat::optimal` (32 values). A test oracle, so it lives here and HiGHS is a
//! dev-dependency only.
//!
//! Values are the entry's non-parameter instructions in schedule order, `0..n`. Stage `t`
//! computes value `t` (its original, fixed) after any recomputations of earlier values, in
//! index order; so the free choices are
//!
//! - `R[t][i]` (binary, `i < t`, recomputable `i`): recompute `i` in stage `t`;
//! - `S[t][i]` (binary, `i < t`): hold `i` from stage `t - 1` into stage `t`;
//! - `F[t][i][k]` (`[0, 1]`, `i` an operand of `k` or `k` itself): `i` is freed right after
//!   `k` is computed in stage `t` (`k` is its last reader there, and it is not held into
//!   stage `t + 1`);
//! - `U[t][k]` (continuous, at most the limit): bytes held while `k` is computed in stage `t`
//!   (its operands and result included), before the frees after it.
//!
//! Constraints: a computation's operands are held or recomputed in its stage
//! (`R[t][k] <= R[t][j] + S[t][j]`); only what was available is held on
//! (`S[t+1][i] <= R[t][i] + S[t][i]`); a free needs its computation, no later reader in the
//! stage and no hold into the next (`F <= R[t][k]`, `F <= 1 - R[t][j]`, `F <= 1 - S[t+1][i]`);
//! `U[t][first] = sum S[t][i] b_i + b_first R[t][first]` and
//! `U[t][k] = U[t][prev] - sum F[t][i][prev] b_i + b_k R[t][k]`. The objective is the flops of
//! the recomputations (`tessera_remat::cost::instruction_flops`, the pass's model).
//!
//! Memory is counted as the pass and `tessera_remat::optimal` count it: the root is live-out
//! (0 bytes inside, the output's bytes added to the module figure).

#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use tessera_hlo::{InstrId, Module, Opcode, Shape};
use tessera_milp::{Options, Program, Status};
use tessera_remat::cost::instruction_flops;
use tessera_remat::remat::search::is_rematerializable;

/// The entry computation of a scheduled module, as the MILP sees it.
pub struct Graph {
    pub sizes: Vec<i64>,
    pub flops: Vec<i64>,
    pub operands: Vec<Vec<usize>>,
    pub recomputable: Vec<bool>,
    pub output_bytes: i64,
}

impl Graph {
    /// `None` if the entry has called computations, tuples or control edges, or the root
    /// is not last in the schedule.
    pub fn from_module(m: &Module, size: &dyn Fn(&Shape) -> i64) -> Option<Graph> {
        let entry = m.entry()?;
        let root = m.comp(entry).root()?;
        let seq = m.schedule.as_ref()?.sequences.get(&entry)?;
        if seq.last() != Some(&root) {
            return None;
        }
        let mut index: HashMap<InstrId, usize> = HashMap::new();
        let mut g = Graph {
            sizes: Vec::new(),
            flops: Vec::new(),
            operands: Vec::new(),
            recomputable: Vec::new(),
            output_bytes: size(&m.instr(root).shape),
        };
        for &i in seq {
            let ins = m.instr(i);
            if ins.opcode() == Opcode::Parameter {
                continue;
            }
            if !ins.called.is_empty()
                || !ins.shape.is_array()
                || !ins.control_predecessors().is_empty()
                || !ins.control_successors().is_empty()
            {
                return None;
            }
            let mut ops: Vec<usize> = m
                .operands(i)
                .iter()
                .filter_map(|o| index.get(o).copied())
                .collect();
            ops.sort_unstable();
            ops.dedup();
            index.insert(i, g.sizes.len());
            g.sizes.push(if i == root { 0 } else { size(&ins.shape) });
            g.flops.push(instruction_flops(m, i));
            g.operands.push(ops);
            g.recomputable.push(is_rematerializable(m, i));
        }
        Some(g)
    }

    pub fn len(&self) -> usize {
        self.sizes.len()
    }
}

/// What HiGHS found for one limit.
#[derive(Clone, Debug, PartialEq)]
pub enum Milp {
    /// Proven optimal: the least recompute flops.
    Optimal { flops: i64 },
    /// Proven infeasible.
    Infeasible,
    /// Stopped at the time limit: the best solution found, if any, and the proven bound.
    TimedOut { best: Option<i64>, bound: f64 },
}

/// A 0/1 quantity: a column, or a constant.
#[derive(Clone, Copy, PartialEq)]
enum Var {
    Col(usize),
    Zero,
    One,
}

/// `a <= sum(bs)` as a row; constants folded.
fn at_most_sum(p: &mut Program, a: Var, bs: &[Var]) {
    let mut row = Vec::new();
    let mut rhs = 0.0; // row: a - sum(bs) <= 0
    match a {
        Var::Col(c) => row.push((c, 1.0)),
        Var::One => rhs -= 1.0,
        Var::Zero => return,
    }
    for &b in bs {
        match b {
            Var::Col(c) => row.push((c, -1.0)),
            Var::One => return, // always satisfied
            Var::Zero => {}
        }
    }
    p.row(row, f64::NEG_INFINITY, rhs);
}

fn build(g: &Graph, budget: i64) -> Program {
    let n = g.len();
    let mut p = Program::new();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (k, ops) in g.operands.iter().enumerate() {
        for &j in ops {
            users[j].push(k);
        }
    }
    // R[t][i], S[t][i] as `Var`s.
    let mut r = vec![vec![Var::Zero; n]; n];
    let mut s = vec![vec![Var::Zero; n]; n + 1];
    for t in 0..n {
        r[t][t] = Var::One;
        for i in 0..t {
            if g.recomputable[i] && !users[i].is_empty() {
                r[t][i] = Var::Col(p.column(g.flops[i] as f64, 0.0, 1.0, true));
            }
        }
        for i in 0..t {
            // Worth holding only if some original at or after `t` reads it.
            if users[i].iter().any(|&u| u >= t) || users[i].iter().any(|&u| g.recomputable[u]) {
                s[t][i] = Var::Col(p.column(0.0, 0.0, 1.0, true));
            }
        }
    }
    for t in 0..n {
        // Operands available.
        for k in 0..=t {
            for &j in &g.operands[k] {
                at_most_sum(&mut p, r[t][k], &[r[t][j], s[t][j]]);
            }
        }
        // Holds into the next stage.
        if t + 1 < n {
            for i in 0..=t {
                at_most_sum(&mut p, s[t + 1][i], &[r[t][i], s[t][i]]);
            }
        }
        // Memory along the stage.
        let computed: Vec<usize> = (0..=t).filter(|&k| r[t][k] != Var::Zero).collect();
        let mut prev: Option<(usize, usize)> = None; // (k, U column)
        for &k in &computed {
            let u = p.column(0.0, 0.0, budget as f64, false);
            let mut row = vec![(u, 1.0)];
            let mut rhs = 0.0; // U - ... = rhs
            match prev {
                None => {
                    for (i, &held) in s[t].iter().enumerate().take(t) {
                        if let Var::Col(c) = held {
                            row.push((c, -(g.sizes[i] as f64)));
                        }
                    }
                }
                Some((pk, pu)) => {
                    row.push((pu, -1.0));
                    for i in g.operands[pk].iter().copied().chain([pk]) {
                        if g.sizes[i] == 0 {
                            continue;
                        }
                        // F[t][i][pk]: no later reader of `i` computed in this stage, not
                        // held into the next.
                        let later: Vec<Var> = users[i]
                            .iter()
                            .filter(|&&j| j > pk && j <= t)
                            .map(|&j| r[t][j])
                            .collect();
                        if later.contains(&Var::One) {
                            continue;
                        }
                        let f = p.column(0.0, 0.0, 1.0, false);
                        at_most_sum(&mut p, Var::Col(f), &[r[t][pk]]);
                        for v in later {
                            if let Var::Col(c) = v {
                                p.row([(f, 1.0), (c, 1.0)], f64::NEG_INFINITY, 1.0);
                            }
                        }
                        if let Var::Col(c) = s[t + 1][i] {
                            p.row([(f, 1.0), (c, 1.0)], f64::NEG_INFINITY, 1.0);
                        }
                        row.push((f, g.sizes[i] as f64));
                    }
                }
            }
            match r[t][k] {
                Var::Col(c) => row.push((c, -(g.sizes[k] as f64))),
                Var::One => rhs += g.sizes[k] as f64,
                Var::Zero => unreachable!(),
            }
            p.row(row, rhs, rhs);
            prev = Some((k, u));
        }
    }
    p
}

/// The least recompute flops that keep `g` at or under the module-level `limit` (outputs
/// included) over its fixed schedule, within `time`.
pub fn solve(g: &Graph, limit: i64, time: Duration) -> Milp {
    let budget = limit - g.output_bytes;
    if budget < 0 {
        return Milp::Infeasible;
    }
    let p = build(g, budget);
    let options = Options::new(time).with_absolute_gap(0.5);
    let solved = p
        .solve(&options, None)
        .expect("HiGHS solves the yardstick's programs");
    let flops = solved.objective.map(|o| o.round() as i64);
    match solved.status {
        Status::Optimal => Milp::Optimal {
            flops: flops.expect("an optimal solve has a solution"),
        },
        Status::Infeasible => Milp::Infeasible,
        Status::Stopped => Milp::TimedOut {
            best: flops,
            bound: solved.bound,
        },
    }
}
