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
//! Reductions that keep the optimum (every one holds for some optimal solution, so none cuts
//! it off; `milp_matches_the_exhaustive_optimum` checks the optimum against the exhaustive
//! search):
//!
//! - *Windows.* Drop every recomputation nobody in its stage reads and that is not held on,
//!   and every hold not read later: this never raises memory or cost, and afterwards a copy
//!   of `i` exists in stage `t` only if `t <= last[i]`, where `last[i]` is the latest stage
//!   in which a reader of `i` can be computed (`u` for a reader `u` that cannot be
//!   recomputed, `last[u]` for one that can). So `R[t][i] = S[t][i] = 0` past `last[i]`.
//! - *Forced holds.* A value that cannot be recomputed is held from its stage through the
//!   stage of its last original reader: `S[t][i] = 1` there.
//! - *One copy.* Holding `i` and recomputing it in the same stage is never better than
//!   reading the held copy (the model frees one copy per stage): `R[t][i] + S[t][i] <= 1`.
//! - *Slack stages.* A stage whose every possible copy fits in the budget at once needs no
//!   memory rows: its `F` and `U` are left out.
//! - *Forced frees.* A value with no possible later reader in the stage and no possible hold
//!   into the next is freed exactly when its last reader is computed: `F = R[t][k]`
//!   (a constant when `k` is the stage's original), not a column.
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
    pub names: Vec<String>,
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
            names: Vec::new(),
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
            g.names.push(ins.name().to_string());
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

    /// The readers of each value, ascending.
    fn users(&self) -> Vec<Vec<usize>> {
        let mut users = vec![Vec::new(); self.len()];
        for (k, ops) in self.operands.iter().enumerate() {
            for &j in ops {
                users[j].push(k);
            }
        }
        users
    }

    /// `last[i]`: the latest stage in which a reader of `i` can be computed (`i` itself
    /// when nothing reads it).
    fn last_useful(&self, users: &[Vec<usize>]) -> Vec<usize> {
        let mut last: Vec<usize> = (0..self.len()).collect();
        for i in (0..self.len()).rev() {
            for &u in &users[i] {
                let l = if self.recomputable[u] { last[u] } else { u };
                last[i] = last[i].max(l);
            }
        }
        last
    }

    /// The recomputations of a rematerialized copy of the module this graph was made from,
    /// as stages: `r[t][i]` when a clone of value `i` runs after original `t - 1` and before
    /// original `t`. `None` when the originals are not all there in their order (the pass
    /// rescheduled, or dropped dead originals) or a clone's name does not lead back to one.
    pub fn recomputations(&self, out: &Module) -> Option<Vec<Vec<bool>>> {
        let n = self.len();
        let entry = out.entry()?;
        let seq = out.schedule.as_ref()?.sequences.get(&entry)?;
        let index: HashMap<&str, usize> = self
            .names
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i))
            .collect();
        let mut r = vec![vec![false; n]; n];
        let mut pending = Vec::new();
        let mut next = 0;
        for &id in seq {
            let ins = out.instr(id);
            if ins.opcode() == Opcode::Parameter {
                continue;
            }
            let name = ins.name();
            if let Some(&i) = index.get(name) {
                if i != next {
                    return None;
                }
                for p in pending.drain(..) {
                    r[i][p] = true;
                }
                r[i][i] = true;
                next += 1;
            } else {
                let base = &name[..name.find(".remat")?];
                let &i = index.get(base)?;
                if i >= next {
                    return None;
                }
                pending.push(i);
            }
        }
        (next == n && pending.is_empty()).then_some(r)
    }
}

/// A solution of the model given by its recomputations: `r[t][i]` (with `r[t][t]`), and the
/// holds that follow (`s[t][i]`: the first stage at or after `t` that touches `i` reads it
/// without recomputing it), after dropping recomputations nobody uses.
#[derive(Clone, Debug)]
pub struct Plan {
    r: Vec<Vec<bool>>,
    s: Vec<Vec<bool>>,
}

impl Plan {
    pub fn new(g: &Graph, mut r: Vec<Vec<bool>>) -> Plan {
        let n = g.len();
        let users = g.users();
        loop {
            let s = Plan::holds(n, &users, &r);
            let mut changed = false;
            for t in 0..n {
                for i in 0..t {
                    if !r[t][i] {
                        continue;
                    }
                    let read = users[i].iter().any(|&k| k <= t && r[t][k]);
                    if !read && !s[t + 1][i] {
                        r[t][i] = false;
                        changed = true;
                    }
                }
            }
            if !changed {
                return Plan { r, s };
            }
        }
    }

    /// Every recomputable value recomputed in each stage that reads it, from the values that
    /// cannot be recomputed (held throughout): little held, many flops. A start for HiGHS
    /// where the pass's own walk over the schedule goes over the limit.
    pub fn recompute_all(g: &Graph) -> Plan {
        let n = g.len();
        let mut r = vec![vec![false; n]; n];
        for (t, row) in r.iter_mut().enumerate() {
            row[t] = true;
            let mut need: Vec<usize> = g.operands[t].clone();
            while let Some(j) = need.pop() {
                if g.recomputable[j] && !row[j] {
                    row[j] = true;
                    need.extend(g.operands[j].iter().copied());
                }
            }
        }
        Plan::new(g, r)
    }

    /// A greedy walk in the model's own terms, for a start: while some program point is over
    /// `budget`, take a value held across the worst one (into a later stage that reads it),
    /// and recompute it in that stage instead, the most bytes for the fewest flops first,
    /// as long as that lowers the total excess over the budget. Its operands are held on to
    /// the recomputation instead. Not optimal; `None` if it gets stuck over the budget.
    pub fn greedy(g: &Graph, budget: i64) -> Option<Plan> {
        let n = g.len();
        let users = g.users();
        let mut r = vec![vec![false; n]; n];
        for (t, row) in r.iter_mut().enumerate() {
            row[t] = true;
        }
        let mut plan = Plan::new(g, r);
        let mut now = plan.excess(g, &users, budget);
        while now.0 > 0 {
            let (t, k, live) = now.1.clone()?;
            let mut candidates: Vec<(usize, usize)> = live
                .into_iter()
                .filter(|&i| {
                    g.recomputable[i]
                        && i != k
                        && !g.operands[k].contains(&i)
                        && plan.s[t + 1][i]
                        && !users[i].iter().any(|&j| j > k && j <= t && plan.r[t][j])
                })
                .filter_map(|i| {
                    let next =
                        (t + 1..n).find(|&u| users[i].iter().any(|&j| j <= u && plan.r[u][j]))?;
                    Some((i, next))
                })
                .collect();
            candidates
                .sort_by_key(|&(i, _)| std::cmp::Reverse(g.sizes[i] * 1024 / (g.flops[i] + 1)));
            let mut better = None;
            for (i, next) in candidates {
                let mut r = plan.r.clone();
                r[next][i] = true;
                let tried = Plan::new(g, r);
                let e = tried.excess(g, &users, budget);
                if e.0 < now.0 {
                    better = Some((tried, e));
                    break;
                }
            }
            (plan, now) = better?;
        }
        Some(plan)
    }

    /// The model's memory along this plan (frees as early as it allows): the total bytes over
    /// `budget` summed over program points, and the worst point (stage, value computed, the
    /// values live there).
    fn excess(
        &self,
        g: &Graph,
        users: &[Vec<usize>],
        budget: i64,
    ) -> (i64, Option<(usize, usize, Vec<usize>)>) {
        let n = g.len();
        let (mut total, mut worst, mut worst_bytes) = (0, None, budget);
        for t in 0..n {
            let mut live = vec![false; n];
            let mut bytes = 0;
            for (i, &held) in self.s[t].iter().enumerate().take(t) {
                if held {
                    live[i] = true;
                    bytes += g.sizes[i];
                }
            }
            for k in (0..=t).filter(|&k| self.r[t][k]) {
                live[k] = true;
                bytes += g.sizes[k];
                if bytes > budget {
                    total += bytes - budget;
                    if bytes > worst_bytes {
                        worst_bytes = bytes;
                        worst = Some((t, k, (0..n).filter(|&i| live[i]).collect()));
                    }
                }
                for i in g.operands[k].iter().copied().chain([k]) {
                    let read_later = users[i].iter().any(|&j| j > k && j <= t && self.r[t][j]);
                    if live[i] && !read_later && !self.s[t + 1][i] {
                        live[i] = false;
                        bytes -= g.sizes[i];
                    }
                }
            }
        }
        (total, worst)
    }

    fn holds(n: usize, users: &[Vec<usize>], r: &[Vec<bool>]) -> Vec<Vec<bool>> {
        let mut s = vec![vec![false; n]; n + 1];
        for i in 0..n {
            let mut need = false;
            for t in (i + 1..n).rev() {
                if r[t][i] {
                    need = false;
                } else if users[i].iter().any(|&k| k <= t && r[t][k]) {
                    need = true;
                }
                s[t][i] = need;
            }
        }
        s
    }

    /// Recompute flops.
    pub fn flops(&self, g: &Graph) -> i64 {
        let mut f = 0;
        for (t, row) in self.r.iter().enumerate() {
            for (i, &x) in row.iter().enumerate().take(t) {
                if x {
                    f += g.flops[i];
                }
            }
        }
        f
    }
}

/// What HiGHS found for one limit.
#[derive(Clone, Debug, PartialEq)]
pub enum Milp {
    /// Proven optimal: the least recompute flops.
    Optimal { flops: i64 },
    /// Proven infeasible.
    Infeasible,
    /// Stopped at the time limit or the gap: the best solution found, if any, and the proven
    /// bound.
    TimedOut { best: Option<i64>, bound: f64 },
}

impl Milp {
    /// The least recompute flops proven necessary (`None`: infeasible or nothing proven).
    pub fn lower_bound(&self) -> Option<i64> {
        match *self {
            Milp::Optimal { flops } => Some(flops),
            Milp::Infeasible => None,
            // Flops are whole numbers: round the bound up, less HiGHS's tolerance.
            Milp::TimedOut { bound, .. } => bound
                .is_finite()
                .then(|| (bound - 1e-6).ceil().max(0.0) as i64),
        }
    }

    /// The best feasible solution's flops, if one is known.
    pub fn best(&self) -> Option<i64> {
        match *self {
            Milp::Optimal { flops } => Some(flops),
            Milp::Infeasible => None,
            Milp::TimedOut { best, .. } => best,
        }
    }
}

/// A 0/1 quantity: a column, or a constant.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Var {
    Col(usize),
    Zero,
    One,
}

/// The program, and a start's value for each column when a plan was given (`None` once the
/// plan turned out not to fit the model or the budget).
struct Builder {
    p: Program,
    start: Option<Vec<f64>>,
}

impl Builder {
    fn column(&mut self, cost: f64, upper: f64, integer: bool, value: f64) -> usize {
        if let Some(s) = &mut self.start {
            s.push(value);
        }
        self.p.column(cost, 0.0, upper, integer)
    }

    fn value(&self, v: Var) -> f64 {
        match v {
            Var::Zero => 0.0,
            Var::One => 1.0,
            Var::Col(c) => self.start.as_ref().map_or(0.0, |s| s[c]),
        }
    }

    /// A row, its terms on the same column merged (HiGHS refuses repeated columns).
    fn row(&mut self, mut terms: Vec<(usize, f64)>, lower: f64, upper: f64) {
        terms.sort_by_key(|&(c, _)| c);
        let mut merged: Vec<(usize, f64)> = Vec::with_capacity(terms.len());
        for (c, v) in terms {
            match merged.last_mut() {
                Some((lc, lv)) if *lc == c => *lv += v,
                _ => merged.push((c, v)),
            }
        }
        merged.retain(|&(_, v)| v != 0.0);
        self.p.row(merged, lower, upper);
    }

    /// `a <= sum(bs)`; constants folded.
    fn at_most_sum(&mut self, a: Var, bs: &[Var]) {
        let mut row = Vec::new();
        let mut rhs = 0.0; // row: a - sum(bs) <= rhs
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
        self.p.row(row, f64::NEG_INFINITY, rhs);
    }
}

/// Sizes of the program built for a limit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Size {
    pub columns: usize,
    pub rows: usize,
    pub nonzeros: usize,
    /// Stages with memory rows, of all stages.
    pub stages_with_memory: usize,
    pub stages: usize,
}

fn build(g: &Graph, budget: i64, plan: Option<&Plan>) -> (Program, Option<Vec<f64>>, Size) {
    let n = g.len();
    let users = g.users();
    let last = g.last_useful(&users);
    let last_original_reader: Vec<Option<usize>> =
        users.iter().map(|u| u.last().copied()).collect();
    let mut b = Builder {
        p: Program::new(),
        start: plan.map(|_| Vec::new()),
    };
    let planned = |t: usize, i: usize, s: bool| -> f64 {
        plan.map_or(0.0, |p| {
            let x = if s { p.s[t][i] } else { p.r[t][i] };
            if x {
                1.0
            } else {
                0.0
            }
        })
    };
    // A plan's copy where the model fixes none: the plan is not a start.
    let mut plan_fits = true;
    let mut r = vec![vec![Var::Zero; n]; n];
    let mut s = vec![vec![Var::Zero; n]; n + 1];
    for t in 0..n {
        r[t][t] = Var::One;
        for i in 0..t {
            if t <= last[i] {
                if g.recomputable[i] {
                    r[t][i] =
                        Var::Col(b.column(g.flops[i] as f64, 1.0, true, planned(t, i, false)));
                }
                s[t][i] = if !g.recomputable[i] && last_original_reader[i].is_some_and(|u| t <= u) {
                    Var::One
                } else {
                    Var::Col(b.column(0.0, 1.0, true, planned(t, i, true)))
                };
            }
            for (v, is_s) in [(r[t][i], false), (s[t][i], true)] {
                let want = planned(t, i, is_s);
                if (v == Var::Zero && want > 0.5) || (v == Var::One && want < 0.5) {
                    plan_fits = false;
                }
            }
        }
    }
    let mut size = Size {
        stages: n,
        ..Size::default()
    };
    for t in 0..n {
        // Operands available.
        for k in 0..=t {
            for &j in &g.operands[k] {
                b.at_most_sum(r[t][k], &[r[t][j], s[t][j]]);
            }
        }
        // Holds into the next stage, and one copy at a time.
        for i in 0..t {
            if let (Var::Col(a), Var::Col(c)) = (r[t][i], s[t][i]) {
                b.p.row([(a, 1.0), (c, 1.0)], f64::NEG_INFINITY, 1.0);
            }
        }
        if t + 1 < n {
            for i in 0..=t {
                b.at_most_sum(s[t + 1][i], &[r[t][i], s[t][i]]);
            }
        }
        // Memory along the stage, unless every copy it can hold fits at once.
        let most: i64 = (0..=t)
            .filter(|&i| r[t][i] != Var::Zero || s[t][i] != Var::Zero)
            .map(|i| g.sizes[i])
            .sum();
        if most <= budget {
            continue;
        }
        size.stages_with_memory += 1;
        let computed: Vec<usize> = (0..=t).filter(|&k| r[t][k] != Var::Zero).collect();
        let mut prev: Option<(usize, usize)> = None; // (k, U column)
        let mut u_value = 0.0;
        for &k in &computed {
            // terms + constant = 0 defines U.
            let mut terms: Vec<(usize, f64)> = Vec::new();
            let mut constant = 0.0;
            let mut add = |terms: &mut Vec<(usize, f64)>, v: Var, coef: f64| match v {
                Var::Col(c) => terms.push((c, coef)),
                Var::One => constant += coef,
                Var::Zero => {}
            };
            match prev {
                None => {
                    u_value = 0.0;
                    for (i, &held) in s[t].iter().enumerate().take(t) {
                        add(&mut terms, held, -(g.sizes[i] as f64));
                        u_value += b.value(held) * g.sizes[i] as f64;
                    }
                }
                Some((pk, pu)) => {
                    terms.push((pu, -1.0));
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
                            .filter(|&v| v != Var::Zero)
                            .collect();
                        if later.contains(&Var::One) || s[t + 1][i] == Var::One {
                            continue;
                        }
                        let f = if later.is_empty() && s[t + 1][i] == Var::Zero {
                            r[t][pk]
                        } else {
                            let mut value = b.value(r[t][pk]) * (1.0 - b.value(s[t + 1][i]));
                            for &v in &later {
                                value *= 1.0 - b.value(v);
                            }
                            let f = b.column(0.0, 1.0, false, value);
                            b.at_most_sum(Var::Col(f), &[r[t][pk]]);
                            for &v in later.iter().chain([&s[t + 1][i]]) {
                                if let Var::Col(c) = v {
                                    b.p.row([(f, 1.0), (c, 1.0)], f64::NEG_INFINITY, 1.0);
                                }
                            }
                            Var::Col(f)
                        };
                        u_value -= b.value(f) * g.sizes[i] as f64;
                        add(&mut terms, f, g.sizes[i] as f64);
                    }
                }
            }
            add(&mut terms, r[t][k], -(g.sizes[k] as f64));
            u_value += b.value(r[t][k]) * g.sizes[k] as f64;
            if b.start.is_some() && u_value > budget as f64 + 0.5 {
                plan_fits = false;
            }
            let u = b.column(0.0, budget as f64, false, u_value.min(budget as f64));
            terms.push((u, 1.0));
            b.row(terms, -constant, -constant);
            prev = Some((k, u));
        }
    }
    size.columns = b.p.columns();
    size.rows = b.p.rows();
    size.nonzeros = b.p.nonzeros();
    let start = if plan_fits { b.start } else { None };
    (b.p, start, size)
}

/// How a solve went, beyond its result.
#[derive(Clone, Debug)]
pub struct Solved {
    pub milp: Milp,
    pub size: Size,
    /// Whether the plan given was a feasible start (fits the budget and the model).
    pub started: bool,
}

/// The least recompute flops that keep `g` at or under the module-level `limit` (outputs
/// included) over its fixed schedule, within `time`.
pub fn solve(g: &Graph, limit: i64, time: Duration) -> Milp {
    solve_from(g, limit, time, &[], 0.5).milp
}

/// [`solve`], starting from the first of `plans` that fits the budget, stopping once the best
/// solution is within `gap` flops of the proven bound.
pub fn solve_from(g: &Graph, limit: i64, time: Duration, plans: &[Plan], gap: f64) -> Solved {
    let budget = limit - g.output_bytes;
    if budget < 0 {
        return Solved {
            milp: Milp::Infeasible,
            size: Size::default(),
            started: false,
        };
    }
    let mut built = None;
    for plan in plans {
        let b = build(g, budget, Some(plan));
        if b.1.is_some() {
            built = Some(b);
            break;
        }
    }
    let (p, start, size) = built.unwrap_or_else(|| build(g, budget, None));
    let options = Options::new(time).with_absolute_gap(gap);
    let solved = p
        .solve(&options, start.as_deref())
        .expect("HiGHS solves the yardstick's programs");
    let flops = solved.objective.map(|o| o.round() as i64);
    let milp = match solved.status {
        // With a gap of a flop or more, "optimal" is only "within the gap".
        Status::Optimal if gap >= 1.0 => Milp::TimedOut {
            best: flops,
            bound: solved.bound,
        },
        Status::Optimal => Milp::Optimal {
            flops: flops.expect("an optimal solve has a solution"),
        },
        Status::Infeasible => Milp::Infeasible,
        Status::Stopped => Milp::TimedOut {
            best: flops,
            bound: solved.bound,
        },
    };
    Solved {
        milp,
        size,
        started: start.is_some(),
    }
}
