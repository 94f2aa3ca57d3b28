//! A solver for IOPDDL problems: Lagrangian relaxation of the memory limit, an exact min-sum
//! solve of the relaxed cost function network by variable elimination, and local search that
//! keeps every step within the limit.
//!
//! - **Reduction.** Forbidden node strategies are dropped, and so are strategies that every
//!   strategy of some neighbour forbids (repeated until nothing changes). Parallel edges merge.
//! - **Relaxation.** For multipliers `λ_t >= 0` per time step, the memory rows move into the node
//!   costs: `c_i(s) + usage_i(s) * Σ_{t live} λ_t`, and `L(λ) = min_x cost_λ(x) - limit * Σ λ_t`
//!   is a lower bound on the optimum. The inner minimum is exact by variable elimination along a
//!   min-weight order when its tables stay small (computation graphs are thin); otherwise the
//!   edges outside a spanning forest are replaced by their smallest entry, which keeps the bound
//!   valid. The multipliers follow projected subgradient steps (Polyak step to the best cost).
//! - **Primal.** Each relaxed solution is repaired (at the worst time step, the move that frees
//!   the most memory per unit of cost) and improved by single-node and edge moves that keep every
//!   time step within the limit.
//! - **Exact.** Problems of up to a few thousand nodes also go to HiGHS as a mixed-integer
//!   program ([`mip`]), started from the first local search's solution; a finished solve proves
//!   its solution optimal.
//!
//! Costs are integers, so a lower bound above `best - 1` proves `best` optimal.

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use crate::iopddl::{Problem, FORBIDDEN};

mod mip;

/// A forbidden cost inside the solver.
const BIG: f64 = 1e18;

#[derive(Debug, Clone)]
pub struct SolveOptions {
    /// Wall-clock limit; the solver returns its best by then.
    pub time_limit: Duration,
    /// Subgradient iterations at most (a bound that does not depend on the clock).
    pub max_iterations: usize,
    /// Largest table (entries) the exact elimination may build before it falls back to a
    /// spanning forest.
    pub max_table: usize,
    /// Total entries over all elimination tables.
    pub max_total: usize,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            time_limit: Duration::from_secs(60),
            max_iterations: 2000,
            max_table: 1 << 24,
            max_total: 1 << 26,
        }
    }
}

#[derive(Debug, Clone)]
pub struct SolveResult {
    /// The best feasible solution found (original strategy indices), if any.
    pub solution: Option<Vec<usize>>,
    /// Its cost.
    pub cost: Option<u128>,
    /// A proven lower bound on the optimal cost (0 when nothing better is known).
    pub lower_bound: u128,
    /// The solution is proven optimal.
    pub optimal: bool,
    /// The problem is proven infeasible (even the least-memory strategies exceed the limit, or
    /// every choice is forbidden).
    pub infeasible: bool,
    /// The lowest peak usage found when infeasible.
    pub min_peak: u128,
    /// Subgradient iterations run.
    pub iterations: usize,
    /// The relaxation was solved exactly (not on a spanning forest).
    pub exact_relaxation: bool,
}

/// Solves `problem`; never panics on a well-formed problem ([`Problem::read`] checks the shape).
pub fn solve(problem: &Problem, options: &SolveOptions) -> SolveResult {
    let start = Instant::now();
    let Some(model) = Model::build(problem) else {
        return SolveResult {
            solution: None,
            cost: None,
            lower_bound: 0,
            optimal: false,
            infeasible: true,
            min_peak: 0,
            iterations: 0,
            exact_relaxation: false,
        };
    };
    let mut search = Search::new(&model, options, start);
    search.run();
    search.result(problem)
}

/// The reduced problem: strategies over reduced domains, time compressed into segments.
struct Model {
    n: usize,
    /// Original strategy index of each reduced strategy.
    dom: Vec<Vec<usize>>,
    cost: Vec<Vec<f64>>,
    usage: Vec<Vec<i64>>,
    /// Segment range `[a, b)` of each node.
    span: Vec<(usize, usize)>,
    nseg: usize,
    /// Merged edges: ends (a < b) and costs row-major over reduced (a, b).
    ends: Vec<(usize, usize)>,
    emat: Vec<Vec<f64>>,
    /// Per node: (neighbour, edge, this node is the edge's first end).
    adj: Vec<Vec<(usize, usize, bool)>>,
    limit: i64,
    /// Strategies before the reduction.
    orig_strategies: usize,
}

impl Model {
    fn build(p: &Problem) -> Option<Model> {
        let n = p.num_nodes();
        // Merge edges (original strategy indices); self-loops fold into the node.
        let mut self_cost: Vec<Vec<u64>> = p.node_costs.clone();
        let mut merged: HashMap<(usize, usize), Vec<u64>> = HashMap::new();
        let mut order: Vec<(usize, usize)> = Vec::new();
        for (k, &(a, b)) in p.edges.iter().enumerate() {
            let (ka, kb) = (p.node_costs[a].len(), p.node_costs[b].len());
            let c = &p.edge_costs[k];
            if a == b {
                for s in 0..ka {
                    self_cost[a][s] = self_cost[a][s].saturating_add(c[s * kb + s]).min(FORBIDDEN);
                }
                continue;
            }
            let (x, y) = (a.min(b), a.max(b));
            let (kx, ky) = (p.node_costs[x].len(), p.node_costs[y].len());
            let m = merged.entry((x, y)).or_insert_with(|| {
                order.push((x, y));
                vec![0; kx * ky]
            });
            for sx in 0..kx {
                for sy in 0..ky {
                    let v = if a == x {
                        c[sx * ky + sy]
                    } else {
                        c[sy * kx + sx]
                    };
                    let e = &mut m[sx * ky + sy];
                    *e = e.saturating_add(v).min(FORBIDDEN);
                }
            }
        }
        // Domain reduction: forbidden node strategies, then strategies a neighbour forbids.
        let mut alive: Vec<Vec<bool>> = self_cost
            .iter()
            .map(|c| c.iter().map(|&v| v < FORBIDDEN).collect())
            .collect();
        let mut nbrs: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (e, &(x, y)) in order.iter().enumerate() {
            nbrs[x].push(e);
            nbrs[y].push(e);
        }
        let mut changed = true;
        while changed {
            changed = false;
            loop {
                let mut arc = false;
                for (e, &(x, y)) in order.iter().enumerate() {
                    let m = &merged[&(x, y)];
                    let ky = p.node_costs[y].len();
                    let kx = p.node_costs[x].len();
                    for sx in 0..kx {
                        if alive[x][sx]
                            && !(0..ky).any(|sy| alive[y][sy] && m[sx * ky + sy] < FORBIDDEN)
                        {
                            alive[x][sx] = false;
                            arc = true;
                        }
                    }
                    for sy in 0..ky {
                        if alive[y][sy]
                            && !(0..kx).any(|sx| alive[x][sx] && m[sx * ky + sy] < FORBIDDEN)
                        {
                            alive[y][sy] = false;
                            arc = true;
                        }
                    }
                    let _ = e;
                }
                if !arc {
                    break;
                }
            }
            changed |= dominate(p, &order, &merged, &nbrs, &self_cost, &mut alive);
        }
        let dom: Vec<Vec<usize>> = alive
            .iter()
            .map(|a| {
                a.iter()
                    .enumerate()
                    .filter(|(_, &ok)| ok)
                    .map(|(s, _)| s)
                    .collect()
            })
            .collect();
        if dom.iter().any(Vec::is_empty) {
            return None;
        }
        let cost: Vec<Vec<f64>> = (0..n)
            .map(|i| dom[i].iter().map(|&s| self_cost[i][s] as f64).collect())
            .collect();
        let usage: Vec<Vec<i64>> = (0..n)
            .map(|i| {
                dom[i]
                    .iter()
                    .map(|&s| p.node_usages[i][s].min(i64::MAX as u64 / 4) as i64)
                    .collect()
            })
            .collect();
        // Time segments between consecutive interval ends.
        let mut points: Vec<u64> = Vec::with_capacity(2 * n);
        for &(a, b) in &p.intervals {
            if a < b {
                points.push(a);
                points.push(b);
            }
        }
        points.sort_unstable();
        points.dedup();
        let seg_of = |t: u64| points.binary_search(&t).unwrap_or(0);
        let span: Vec<(usize, usize)> = p
            .intervals
            .iter()
            .map(|&(a, b)| {
                if a < b {
                    (seg_of(a), seg_of(b))
                } else {
                    (0, 0)
                }
            })
            .collect();
        let nseg = points.len().saturating_sub(1).max(1);
        let mut ends = Vec::with_capacity(order.len());
        let mut emat = Vec::with_capacity(order.len());
        let mut adj: Vec<Vec<(usize, usize, bool)>> = vec![Vec::new(); n];
        for &(x, y) in &order {
            let m = &merged[&(x, y)];
            let ky = p.node_costs[y].len();
            let mut t = Vec::with_capacity(dom[x].len() * dom[y].len());
            for &sx in &dom[x] {
                for &sy in &dom[y] {
                    let v = m[sx * ky + sy];
                    t.push(if v >= FORBIDDEN { BIG } else { v as f64 });
                }
            }
            let e = ends.len();
            ends.push((x, y));
            emat.push(t);
            adj[x].push((y, e, true));
            adj[y].push((x, e, false));
        }
        let limit = p
            .usage_limit
            .map_or(i64::MAX / 2, |l| l.min(i64::MAX as u64 / 2) as i64);
        Some(Model {
            n,
            dom,
            cost,
            usage,
            span,
            nseg,
            ends,
            emat,
            adj,
            limit,
            orig_strategies: p.node_costs.iter().map(Vec::len).sum(),
        })
    }

    fn k(&self, i: usize) -> usize {
        self.dom[i].len()
    }

    fn edge_cost(&self, e: usize, xa: usize, xb: usize) -> f64 {
        let (_, b) = self.ends[e];
        self.emat[e][xa * self.k(b) + xb]
    }

    /// Cost of edge `e` seen from one end, listed in an adjacency with `first` (whether it is
    /// the edge's first end): this end at strategy `here`, the other at `there`.
    fn edge_cost_at(&self, e: usize, first: bool, here: usize, there: usize) -> f64 {
        if first {
            self.edge_cost(e, here, there)
        } else {
            self.edge_cost(e, there, here)
        }
    }

    /// Cost of node `i` at strategy `s` with its neighbours as in `x` (node + incident edges).
    fn local(&self, x: &[usize], i: usize, s: usize) -> f64 {
        let mut c = self.cost[i][s];
        for &(j, e, first) in &self.adj[i] {
            c += self.edge_cost_at(e, first, s, x[j]);
        }
        c
    }

    /// Like [`Model::local`], with forbidden terms counted apart so that comparisons between
    /// forbidden states stay exact.
    fn local_lex(&self, x: &[usize], i: usize, s: usize) -> Lex {
        let mut c = Lex::of(self.cost[i][s]);
        for &(j, e, first) in &self.adj[i] {
            c = c.add(Lex::of(self.edge_cost_at(e, first, s, x[j])));
        }
        c
    }

    fn total(&self, x: &[usize]) -> f64 {
        let mut c: f64 = (0..self.n).map(|i| self.cost[i][x[i]]).sum();
        for (e, &(a, b)) in self.ends.iter().enumerate() {
            c += self.edge_cost(e, x[a], x[b]);
        }
        c
    }

    fn profile(&self, x: &[usize]) -> Vec<i64> {
        let mut diff = vec![0i64; self.nseg + 1];
        for (i, (&(a, b), &s)) in self.span.iter().zip(x).enumerate() {
            if a < b {
                diff[a] += self.usage[i][s];
                diff[b] -= self.usage[i][s];
            }
        }
        let mut run = 0;
        diff.iter()
            .take(self.nseg)
            .map(|d| {
                run += d;
                run
            })
            .collect()
    }
}

/// Drops strategies that another strategy of the same node dominates: no more cost, no more
/// usage, and no more cost on every edge whatever the neighbour picks (equal ones: the later
/// goes). Nodes with more than 64 strategies are left alone. True when something went.
fn dominate(
    p: &Problem,
    order: &[(usize, usize)],
    merged: &HashMap<(usize, usize), Vec<u64>>,
    nbrs: &[Vec<usize>],
    self_cost: &[Vec<u64>],
    alive: &mut [Vec<bool>],
) -> bool {
    let mut any = false;
    for i in 0..alive.len() {
        let k = alive[i].len();
        let rows: usize = nbrs[i]
            .iter()
            .map(|&e| {
                let (x, y) = order[e];
                p.node_costs[if x == i { y } else { x }].len()
            })
            .sum();
        if k > 64 || k * k * rows > 200_000 {
            continue;
        }
        let edge_le = |a: usize, b: usize, alive: &[Vec<bool>]| {
            nbrs[i].iter().all(|&e| {
                let (x, y) = order[e];
                let m = &merged[&(x, y)];
                let ky = p.node_costs[y].len();
                if x == i {
                    (0..ky).all(|t| !alive[y][t] || m[a * ky + t] <= m[b * ky + t])
                } else {
                    (0..p.node_costs[x].len())
                        .all(|t| !alive[x][t] || m[t * ky + a] <= m[t * ky + b])
                }
            })
        };
        for b in 0..k {
            if !alive[i][b] {
                continue;
            }
            for a in 0..k {
                if a == b || !alive[i][a] {
                    continue;
                }
                let (ca, cb) = (self_cost[i][a], self_cost[i][b]);
                let (ua, ub) = (p.node_usages[i][a], p.node_usages[i][b]);
                if ca > cb || ua > ub {
                    continue;
                }
                // Equal in cost and usage: only the earlier one may remove the later.
                if ca == cb && ua == ub && a > b && edge_le(b, a, alive) {
                    continue;
                }
                if edge_le(a, b, alive) {
                    alive[i][b] = false;
                    any = true;
                    break;
                }
            }
        }
    }
    any
}

/// A cost as (forbidden terms, sum of the others).
#[derive(Debug, Clone, Copy)]
struct Lex {
    bad: i64,
    fin: f64,
}

impl Lex {
    fn of(v: f64) -> Lex {
        if v >= BIG {
            Lex { bad: 1, fin: 0.0 }
        } else {
            Lex { bad: 0, fin: v }
        }
    }

    fn add(self, o: Lex) -> Lex {
        Lex {
            bad: self.bad + o.bad,
            fin: self.fin + o.fin,
        }
    }

    fn sub(self, o: Lex) -> Lex {
        Lex {
            bad: self.bad - o.bad,
            fin: self.fin - o.fin,
        }
    }

    /// Strictly better, beyond rounding.
    fn better(self, o: Lex) -> bool {
        self.bad < o.bad || (self.bad == o.bad && self.fin < o.fin - 1e-9 * o.fin.abs() - 1e-9)
    }
}

/// Range add, range max over time segments.
struct SegTree {
    size: usize,
    max: Vec<i64>,
    add: Vec<i64>,
}

impl SegTree {
    fn new(values: &[i64]) -> SegTree {
        let size = values.len().next_power_of_two().max(1);
        let mut max = vec![i64::MIN / 4; 2 * size];
        max[size..size + values.len()].copy_from_slice(values);
        for v in (1..size).rev() {
            max[v] = max[2 * v].max(max[2 * v + 1]);
        }
        SegTree {
            size,
            max,
            add: vec![0; 2 * size],
        }
    }

    fn update(&mut self, v: usize, lo: usize, hi: usize, a: usize, b: usize, d: i64) {
        if b <= lo || hi <= a {
            return;
        }
        if a <= lo && hi <= b {
            self.max[v] += d;
            self.add[v] += d;
            return;
        }
        let mid = (lo + hi) / 2;
        self.update(2 * v, lo, mid, a, b, d);
        self.update(2 * v + 1, mid, hi, a, b, d);
        self.max[v] = self.max[2 * v].max(self.max[2 * v + 1]) + self.add[v];
    }

    fn query(&self, v: usize, lo: usize, hi: usize, a: usize, b: usize) -> i64 {
        if b <= lo || hi <= a {
            return i64::MIN / 4;
        }
        if a <= lo && hi <= b {
            return self.max[v];
        }
        let mid = (lo + hi) / 2;
        self.query(2 * v, lo, mid, a, b)
            .max(self.query(2 * v + 1, mid, hi, a, b))
            + self.add[v]
    }

    fn range_add(&mut self, a: usize, b: usize, d: i64) {
        if a < b && d != 0 {
            self.update(1, 0, self.size, a, b, d);
        }
    }

    fn range_max(&self, a: usize, b: usize) -> i64 {
        if a >= b {
            return i64::MIN / 4;
        }
        self.query(1, 0, self.size, a, b)
    }

    fn top(&self) -> i64 {
        self.max[1]
    }

    /// Index of a segment holding the maximum.
    fn argmax(&self) -> usize {
        let mut v = 1;
        let mut want = self.max[1];
        while v < self.size {
            want -= self.add[v];
            v = if self.max[2 * v] == want {
                2 * v
            } else {
                2 * v + 1
            };
        }
        v - self.size
    }
}

/// One step of the elimination plan: the variable and the scope of the table it leaves.
struct Step {
    var: usize,
    scope: Vec<usize>,
}

/// An elimination order over a subset of the edges; `None` when its tables grow too large.
fn plan(model: &Model, edges: &[usize], max_table: usize, max_total: usize) -> Option<Vec<Step>> {
    let n = model.n;
    let mut g: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for &e in edges {
        let (a, b) = model.ends[e];
        g[a].insert(b);
        g[b].insert(a);
    }
    let weight = |g: &Vec<BTreeSet<usize>>, v: usize| -> f64 {
        g[v].iter().map(|&u| model.k(u) as f64).product::<f64>() * model.k(v) as f64
    };
    #[derive(PartialEq)]
    struct Key(f64, usize);
    impl Eq for Key {}
    impl PartialOrd for Key {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Key {
        fn cmp(&self, o: &Self) -> Ordering {
            // Min-heap on weight, then on index for determinism.
            o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
        }
    }
    let mut current: Vec<f64> = (0..n).map(|v| weight(&g, v)).collect();
    let mut heap: BinaryHeap<Key> = (0..n).map(|v| Key(current[v], v)).collect();
    let mut done = vec![false; n];
    let mut steps = Vec::with_capacity(n);
    let mut total = 0f64;
    while let Some(Key(w, v)) = heap.pop() {
        if done[v] || w != current[v] {
            continue;
        }
        if w > max_table as f64 {
            if std::env::var_os("TESSERA_SOLVER_TRACE").is_some() {
                eprintln!("plan: table of {w} entries after {} steps", steps.len());
            }
            return None;
        }
        total += w;
        if total > max_total as f64 {
            return None;
        }
        done[v] = true;
        let scope: Vec<usize> = g[v].iter().copied().collect();
        for &a in &scope {
            g[a].remove(&v);
            for &b in &scope {
                if a != b {
                    g[a].insert(b);
                }
            }
        }
        g[v].clear();
        for &a in &scope {
            current[a] = weight(&g, a);
            heap.push(Key(current[a], a));
        }
        steps.push(Step { var: v, scope });
    }
    Some(steps)
}

/// The elimination order of a forest: leaves first, each step's scope at most its parent.
/// Linear time (a min-weight order recomputes a hub's weight per eliminated leaf).
fn peel(model: &Model, edges: &[usize]) -> Vec<Step> {
    let n = model.n;
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &e in edges {
        let (a, b) = model.ends[e];
        adj[a].push(b);
        adj[b].push(a);
    }
    let mut degree: Vec<usize> = adj.iter().map(Vec::len).collect();
    let mut done = vec![false; n];
    let mut queue: Vec<usize> = (0..n).rev().filter(|&v| degree[v] <= 1).collect();
    let mut steps = Vec::with_capacity(n);
    while let Some(v) = queue.pop() {
        if done[v] {
            continue;
        }
        done[v] = true;
        let scope: Vec<usize> = adj[v].iter().copied().filter(|&u| !done[u]).collect();
        for &u in &scope {
            degree[u] -= 1;
            if degree[u] <= 1 {
                queue.push(u);
            }
        }
        steps.push(Step { var: v, scope });
    }
    steps
}

struct Factor {
    vars: Vec<usize>,
    table: Vec<f64>,
}

impl Factor {
    fn strides(&self, model: &Model) -> Vec<usize> {
        let mut s = vec![0; self.vars.len()];
        let mut acc = 1;
        for p in (0..self.vars.len()).rev() {
            s[p] = acc;
            acc *= model.k(self.vars[p]);
        }
        s
    }
}

/// Exact minimum of unary + the given edges by variable elimination along `steps`.
/// Returns the minimum and an argmin.
fn eliminate(
    model: &Model,
    steps: &[Step],
    unary: &[Vec<f64>],
    edges: &[usize],
) -> (f64, Vec<usize>) {
    let n = model.n;
    let mut factors: Vec<Factor> = Vec::with_capacity(n + edges.len() + steps.len());
    let mut by_var: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, u) in unary.iter().enumerate() {
        by_var[i].push(factors.len());
        factors.push(Factor {
            vars: vec![i],
            table: u.clone(),
        });
    }
    for &e in edges {
        let (a, b) = model.ends[e];
        by_var[a].push(factors.len());
        by_var[b].push(factors.len());
        factors.push(Factor {
            vars: vec![a, b],
            table: model.emat[e].clone(),
        });
    }
    let mut alive = vec![true; factors.len()];
    let mut buckets: Vec<Vec<usize>> = Vec::with_capacity(steps.len());
    let mut constant = 0.0;
    for step in steps {
        let v = step.var;
        let bucket: Vec<usize> = by_var[v].iter().copied().filter(|&f| alive[f]).collect();
        for &f in &bucket {
            alive[f] = false;
        }
        // Combined scope: scope then v (v innermost).
        let scope = &step.scope;
        let kv = model.k(v);
        let dims: Vec<usize> = scope.iter().map(|&u| model.k(u)).collect();
        let size: usize = dims.iter().product();
        // Per factor: stride per scope position, stride of v.
        let layout: Vec<(Vec<usize>, usize)> = bucket
            .iter()
            .map(|&f| {
                let fs = factors[f].strides(model);
                let mut per = vec![0; scope.len()];
                let mut sv = 0;
                for (p, &u) in factors[f].vars.iter().enumerate() {
                    if u == v {
                        sv = fs[p];
                    } else if let Ok(q) = scope.binary_search(&u) {
                        per[q] = fs[p];
                    }
                }
                (per, sv)
            })
            .collect();
        let mut table = vec![0.0; size];
        let mut assign = vec![0usize; scope.len()];
        let mut base = vec![0usize; bucket.len()];
        for cell in table.iter_mut() {
            let mut best = f64::INFINITY;
            for s in 0..kv {
                let mut sum = 0.0;
                for (fi, &f) in bucket.iter().enumerate() {
                    sum += factors[f].table[base[fi] + s * layout[fi].1];
                }
                if sum < best {
                    best = sum;
                }
            }
            *cell = best.min(BIG * 4.0);
            // Advance the odometer (last scope position fastest).
            let mut p = scope.len();
            while p > 0 {
                p -= 1;
                assign[p] += 1;
                for (fi, l) in layout.iter().enumerate() {
                    base[fi] += l.0[p];
                }
                if assign[p] < dims[p] {
                    break;
                }
                for (fi, l) in layout.iter().enumerate() {
                    base[fi] -= l.0[p] * dims[p];
                }
                assign[p] = 0;
            }
        }
        if scope.is_empty() {
            constant += table[0];
        } else {
            let id = factors.len();
            for &u in scope {
                by_var[u].push(id);
            }
            factors.push(Factor {
                vars: scope.clone(),
                table,
            });
            alive.push(true);
        }
        buckets.push(bucket);
    }
    // Back-substitution in reverse elimination order.
    let mut x = vec![0usize; n];
    for (step, bucket) in steps.iter().zip(&buckets).rev() {
        let v = step.var;
        let mut best = (f64::INFINITY, 0);
        for s in 0..model.k(v) {
            let mut sum = 0.0;
            for &f in bucket {
                let fac = &factors[f];
                let fs = fac.strides(model);
                let mut idx = 0;
                for (p, &u) in fac.vars.iter().enumerate() {
                    idx += fs[p] * if u == v { s } else { x[u] };
                }
                sum += fac.table[idx];
            }
            if sum < best.0 {
                best = (sum, s);
            }
        }
        x[v] = best.1;
    }
    (constant, x)
}

/// Spanning forest over the edges, the widest-spread edges first (Kruskal).
fn forest(model: &Model) -> (Vec<usize>, Vec<usize>) {
    let spread = |e: usize| {
        let m = &model.emat[e];
        let lo = m.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = m.iter().copied().filter(|&v| v < BIG).fold(lo, f64::max);
        hi - lo
    };
    let mut order: Vec<(f64, usize)> = (0..model.ends.len()).map(|e| (spread(e), e)).collect();
    order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut parent: Vec<usize> = (0..model.n).collect();
    fn find(p: &mut [usize], mut v: usize) -> usize {
        while p[v] != v {
            p[v] = p[p[v]];
            v = p[v];
        }
        v
    }
    let (mut tree, mut rest) = (Vec::new(), Vec::new());
    for (_, e) in order {
        let (a, b) = model.ends[e];
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
        if ra != rb {
            parent[ra] = rb;
            tree.push(e);
        } else {
            rest.push(e);
        }
    }
    tree.sort_unstable();
    rest.sort_unstable();
    (tree, rest)
}

struct Search<'a> {
    model: &'a Model,
    options: &'a SolveOptions,
    start: Instant,
    best: Option<(f64, Vec<usize>)>,
    lower: f64,
    iterations: usize,
    exact: bool,
    min_peak: i64,
    /// A per-node flag buffer for [`Search::chain_move`], all false between calls.
    scratch: std::cell::RefCell<Vec<bool>>,
    /// Time the current phase may run to (the first local search gets part of the limit).
    phase_limit: std::cell::Cell<Duration>,
    /// Per node: the summed multipliers over its interval at the best bound (memory prices).
    weights: Vec<f64>,
    /// The local-search start, forbidden choices and all, until a solution without any exists.
    current: Vec<usize>,
}

impl<'a> Search<'a> {
    fn new(model: &'a Model, options: &'a SolveOptions, start: Instant) -> Self {
        Search {
            model,
            options,
            start,
            best: None,
            lower: f64::NEG_INFINITY,
            iterations: 0,
            exact: false,
            min_peak: i64::MAX,
            scratch: std::cell::RefCell::new(Vec::new()),
            phase_limit: std::cell::Cell::new(options.time_limit),
            weights: vec![0.0; model.n],
            current: Vec::new(),
        }
    }

    fn trace(&self, what: &str) {
        if std::env::var_os("TESSERA_SOLVER_TRACE").is_some() {
            eprintln!(
                "{:8.3}s {what}: best {:?} lower {}",
                self.start.elapsed().as_secs_f64(),
                self.best.as_ref().map(|b| b.0),
                self.lower
            );
        }
    }

    fn out_of_time(&self) -> bool {
        self.start.elapsed() >= self.phase_limit.get()
    }

    fn proven(&self) -> bool {
        match &self.best {
            Some((c, _)) => self.lower > c - 1.0 + 1e-9 * c.abs().max(1.0),
            None => false,
        }
    }

    fn offer(&mut self, x: Vec<usize>) {
        let c = self.model.total(&x);
        if c >= BIG {
            return;
        }
        if self.best.as_ref().is_none_or(|(b, _)| c < *b) {
            self.best = Some((c, x));
        }
    }

    fn run(&mut self) {
        let m = self.model;
        // Least memory everywhere: the lowest usage profile there is.
        let least: Vec<usize> = (0..m.n)
            .map(|i| {
                (0..m.k(i))
                    .min_by(|&a, &b| {
                        m.usage[i][a]
                            .cmp(&m.usage[i][b])
                            .then(m.cost[i][a].total_cmp(&m.cost[i][b]))
                    })
                    .unwrap_or(0)
            })
            .collect();
        let least_peak = m.profile(&least).into_iter().max().unwrap_or(0);
        self.min_peak = least_peak;
        if least_peak > m.limit {
            return; // infeasible
        }
        let mut x = least.clone();
        self.phase_limit.set(self.options.time_limit.mul_f64(0.3));
        self.unforbid(&mut x, m.limit);
        self.trace("unforbid");
        self.improve(&mut x, m.limit);
        self.phase_limit.set(self.options.time_limit);
        self.offer(x.clone());
        self.current = x;
        self.trace("least-memory start");
        self.exact_solve();
        if self.proven() {
            return;
        }

        let all: Vec<usize> = (0..m.ends.len()).collect();
        let tried = if m.n <= 5000 {
            plan(m, &all, self.options.max_table, self.options.max_total)
        } else {
            None // the clique bookkeeping alone takes seconds on large graphs
        };
        let (edges, dropped, steps) = match tried {
            Some(steps) => (all, Vec::new(), steps),
            None => {
                let (tree, rest) = forest(m);
                let steps = peel(m, &tree);
                (tree, rest, steps)
            }
        };
        self.exact = dropped.is_empty();
        self.trace(&format!(
            "strategies {} of {}",
            m.dom.iter().map(Vec::len).sum::<usize>(),
            m.orig_strategies
        ));
        self.trace(&format!(
            "plan: {} steps, exact {}",
            steps.len(),
            self.exact
        ));
        let dropped_min: f64 = dropped
            .iter()
            .map(|&e| m.emat[e].iter().copied().fold(f64::INFINITY, f64::min))
            .sum();
        let mut lambda = vec![0.0f64; m.nseg];
        // The bound gets the time up to 60% of the limit; local search the rest.
        self.phase_limit.set(self.options.time_limit.mul_f64(0.5));
        let mut theta = 1.0;
        let mut stall = 0;
        let mut last_best_lower = f64::NEG_INFINITY;
        while self.iterations < self.options.max_iterations && !self.out_of_time() && !self.proven()
        {
            self.iterations += 1;
            let mut prefix = vec![0.0f64; m.nseg + 1];
            for t in 0..m.nseg {
                prefix[t + 1] = prefix[t] + lambda[t];
            }
            let unary: Vec<Vec<f64>> = (0..m.n)
                .map(|i| {
                    let (a, b) = m.span[i];
                    let w = prefix[b] - prefix[a];
                    m.cost[i]
                        .iter()
                        .zip(&m.usage[i])
                        .map(|(&c, &u)| c + w * u as f64)
                        .collect()
                })
                .collect();
            let (value, y) = eliminate(m, &steps, &unary, &edges);
            self.trace("eliminate");
            let bound = value + dropped_min - m.limit as f64 * prefix[m.nseg];
            if bound > self.lower {
                self.lower = bound;
                self.weights = (0..m.n)
                    .map(|i| prefix[m.span[i].1] - prefix[m.span[i].0])
                    .collect();
            }
            let profile = m.profile(&y);
            if self.exact || m.n <= 5000 {
                // The relaxed solution as a start: its cost first, then the limit.
                let mut z = y.clone();
                self.improve(&mut z, i64::MAX / 4);
                if self.repair(&mut z) {
                    self.improve(&mut z, m.limit);
                    self.offer(z);
                }
            }
            if m.limit >= i64::MAX / 2 || self.proven() {
                // No memory rows: one exact solve is all there is.
                if self.exact || m.limit >= i64::MAX / 2 {
                    break;
                }
            }
            // Projected subgradient step towards the best cost.
            let mut norm = 0.0;
            let g: Vec<f64> = profile
                .iter()
                .zip(&lambda)
                .map(|(&u, &l)| {
                    let g = (u - m.limit) as f64;
                    if l <= 0.0 && g < 0.0 {
                        0.0
                    } else {
                        g
                    }
                })
                .collect();
            for v in &g {
                norm += v * v;
            }
            if norm == 0.0 {
                break; // complementary slackness: the relaxed solution is optimal
            }
            let target = self.best.as_ref().map_or(bound.abs() * 1.05 + 1.0, |b| b.0);
            let step = theta * (target - bound).max(1e-9 * target.abs().max(1.0)) / norm;
            for (l, gv) in lambda.iter_mut().zip(&g) {
                *l = (*l + step * gv).max(0.0);
            }
            if self.lower > last_best_lower + 1e-9 * self.lower.abs().max(1.0) {
                last_best_lower = self.lower;
                stall = 0;
            } else {
                stall += 1;
                if stall >= 5 {
                    theta *= 0.5;
                    stall = 0;
                    if theta < 1e-4 {
                        break;
                    }
                }
            }
        }
        self.phase_limit.set(self.options.time_limit);
        self.perturb();
    }

    /// The exact solve ([`mip`]) on problems small enough for it, from the best solution so far,
    /// with most of the time left; its bound and solution join the search's.
    fn exact_solve(&mut self) {
        let m = self.model;
        let Some(columns) = mip::columns(m) else {
            return;
        };
        let left = self.options.time_limit.saturating_sub(self.start.elapsed());
        let start = self.best.as_ref().map(|(_, x)| x.clone());
        let Some(outcome) = mip::solve(m, start.as_deref(), left.mul_f64(0.9)) else {
            return;
        };
        self.trace(&format!("exact solve ({columns} columns)"));
        if outcome.bound.is_finite() && outcome.bound > self.lower {
            self.lower = outcome.bound;
        }
        if let Some(x) = outcome.solution {
            self.offer(x);
        }
    }

    /// Iterated local search from the best solution: kick a few nodes (chain moves regardless
    /// of cost), repair, improve; keep what is cheaper. Deterministic (a fixed xorshift seed).
    fn perturb(&mut self) {
        let m = self.model;
        let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut rounds = 0usize;
        while !self.out_of_time() && !self.proven() && rounds < self.options.max_iterations {
            rounds += 1;
            let have = self.best.is_some();
            let mut x = match &self.best {
                Some((_, b)) => b.clone(),
                None if self.current.len() == m.n => self.current.clone(),
                None => return,
            };
            if !rounds.is_multiple_of(4) || !have {
                let mut tree = SegTree::new(&m.profile(&x));
                let seed = next();
                let scale = [1.0, 0.5, 2.0, 0.0, 1.5][rounds % 5];
                if self.block_move(&mut x, &mut tree, seed, scale) {
                    // A full pass costs hundreds of block moves on large graphs.
                    if have && m.n <= 5000 {
                        self.improve(&mut x, m.limit);
                    }
                    self.current.clone_from(&x);
                    self.offer(x);
                }
                continue;
            }
            let kicks = 1 + (next() % (1 + (m.n as u64 / 100).min(20))) as usize;
            let mut free = SegTree::new(&[0]);
            for _ in 0..kicks {
                let i = (next() % m.n as u64) as usize;
                if m.k(i) < 2 {
                    continue;
                }
                let s = (next() % m.k(i) as u64) as usize;
                if s != x[i] {
                    self.force(&mut x, &mut free, i, s);
                }
            }
            if self.repair(&mut x) {
                self.improve(&mut x, m.limit);
                self.offer(x);
            }
        }
        self.trace(&format!("perturb: {rounds} rounds"));
    }

    /// Exact block move: a random induced forest of nodes is re-optimized jointly by dynamic
    /// programming, the other nodes fixed, memory priced by the multipliers of the best bound
    /// (times `scale`). Kept when the true cost drops and every time step stays within the limit.
    fn block_move(&self, x: &mut [usize], tree: &mut SegTree, seed: u64, scale: f64) -> bool {
        let m = self.model;
        let n = m.n;
        let mut rng = seed | 1;
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            order.swap(i, (rng % (i as u64 + 1)) as usize);
        }
        let mut parent: Vec<usize> = (0..n).collect();
        fn find(p: &mut [usize], mut v: usize) -> usize {
            while p[v] != v {
                p[v] = p[p[v]];
                v = p[v];
            }
            v
        }
        let mut sel = vec![false; n];
        for &v in &order {
            let mut roots: Vec<usize> = Vec::new();
            let mut ok = true;
            for &(j, _, _) in &m.adj[v] {
                if sel[j] {
                    let r = find(&mut parent, j);
                    if roots.contains(&r) {
                        ok = false;
                        break;
                    }
                    roots.push(r);
                }
            }
            if ok {
                sel[v] = true;
                for r in roots {
                    parent[r] = v;
                }
            }
        }
        // Unary terms: node cost, memory price, edges to fixed nodes.
        let unary: Vec<Vec<f64>> = (0..n)
            .map(|i| {
                if !sel[i] {
                    return Vec::new();
                }
                (0..m.k(i))
                    .map(|s| {
                        let mut c = m.cost[i][s] + scale * self.weights[i] * m.usage[i][s] as f64;
                        for &(j, e, first) in &m.adj[i] {
                            if !sel[j] {
                                c += m.edge_cost_at(e, first, s, x[j]);
                            }
                        }
                        c
                    })
                    .collect()
            })
            .collect();
        // Tree DP per component: BFS order from a root, messages leaves-up.
        let mut seen = vec![false; n];
        let mut y = x.to_vec();
        let mut par: Vec<Option<(usize, usize, bool)>> = vec![None; n];
        let mut belief: Vec<Vec<f64>> = unary;
        let mut choice: Vec<Vec<usize>> = vec![Vec::new(); n];
        for root in 0..n {
            if !sel[root] || seen[root] {
                continue;
            }
            let mut bfs = vec![root];
            seen[root] = true;
            let mut h = 0;
            while h < bfs.len() {
                let v = bfs[h];
                h += 1;
                for &(j, e, first) in &m.adj[v] {
                    if sel[j] && !seen[j] {
                        seen[j] = true;
                        // Edge e seen from j: j is its first end when v is not.
                        par[j] = Some((v, e, !first));
                        bfs.push(j);
                    }
                }
            }
            for &v in bfs.iter().rev() {
                let Some((p, e, v_first)) = par[v] else {
                    continue;
                };
                let mut msg = vec![0.0; m.k(p)];
                let mut arg = vec![0usize; m.k(p)];
                for sp in 0..m.k(p) {
                    let mut best = (f64::INFINITY, 0);
                    for (sv, &bv) in belief[v].iter().enumerate() {
                        let ec = if v_first {
                            m.edge_cost(e, sv, sp)
                        } else {
                            m.edge_cost(e, sp, sv)
                        };
                        let c = bv + ec;
                        if c < best.0 {
                            best = (c, sv);
                        }
                    }
                    msg[sp] = best.0;
                    arg[sp] = best.1;
                }
                for (b, mv) in belief[p].iter_mut().zip(&msg) {
                    *b += mv;
                }
                choice[v] = arg;
            }
            let r = (0..m.k(root))
                .min_by(|&a, &b| belief[root][a].total_cmp(&belief[root][b]))
                .unwrap_or(0);
            y[root] = r;
            for &v in bfs.iter().skip(1) {
                let (p, _, _) = par[v].unwrap_or((v, 0, false));
                y[v] = choice[v][y[p]];
            }
        }
        // Accept on true cost and memory.
        let set: Vec<usize> = (0..n).filter(|&i| sel[i] && y[i] != x[i]).collect();
        if set.is_empty() {
            return false;
        }
        let mut inside = vec![false; n];
        for &i in &set {
            inside[i] = true;
        }
        let old = self.set_cost(x, &set, &inside);
        let new = self.set_cost(&y, &set, &inside);
        if !new.better(old) {
            return false;
        }
        for &i in &set {
            let (a, b) = m.span[i];
            tree.range_add(a, b, m.usage[i][y[i]] - m.usage[i][x[i]]);
        }
        if tree.top() > m.limit {
            let mut z = y.clone();
            if !self.repair(&mut z) || !Lex::of(m.total(&z)).better(Lex::of(m.total(x))) {
                return false;
            }
            x.copy_from_slice(&z);
            return true;
        }
        x.copy_from_slice(&y);
        true
    }

    /// Sets node `i` to `s` and lets forbidden neighbours follow (a chain move whatever its cost).
    fn force(&self, x: &mut [usize], tree: &mut SegTree, i: usize, s: usize) {
        let m = self.model;
        x[i] = s;
        let mut queue = vec![i];
        let mut seen = vec![i];
        while let Some(v) = queue.pop() {
            for &(j, e, first) in &m.adj[v] {
                if seen.contains(&j) || seen.len() >= 64 {
                    continue;
                }
                let bad = m.edge_cost_at(e, first, x[v], x[j]) >= BIG;
                if bad {
                    let t = (0..m.k(j))
                        .min_by(|&a, &b| {
                            let (ca, cb) = (m.local_lex(x, j, a), m.local_lex(x, j, b));
                            ca.bad.cmp(&cb.bad).then(ca.fin.total_cmp(&cb.fin))
                        })
                        .unwrap_or(x[j]);
                    x[j] = t;
                    seen.push(j);
                    queue.push(j);
                }
            }
        }
        let _ = tree;
    }

    /// Brings `x` within the limit; false when it cannot.
    fn repair(&self, x: &mut [usize]) -> bool {
        let m = self.model;
        let mut tree = SegTree::new(&m.profile(x));
        let mut guard = 0usize;
        while tree.top() > m.limit {
            guard += 1;
            if guard > 4 * m.n + 16 || self.out_of_time() {
                return false;
            }
            let t = tree.argmax();
            let over = tree.top() - m.limit;
            // Per live node, the move that frees memory at t for the least cost per byte; the
            // cheapest ones go first until t fits.
            let mut moves: Vec<(f64, usize, usize)> = Vec::new();
            for i in 0..m.n {
                let (a, b) = m.span[i];
                if !(a <= t && t < b) {
                    continue;
                }
                let cur = m.usage[i][x[i]];
                let here = m.local(x, i, x[i]);
                let mut best: Option<(f64, usize, usize)> = None;
                for s in 0..m.k(i) {
                    let freed = cur - m.usage[i][s];
                    if freed <= 0 {
                        continue;
                    }
                    let dc = m.local(x, i, s) - here;
                    if dc >= BIG / 2.0 {
                        continue;
                    }
                    let score = dc.max(0.0) / freed.min(over) as f64;
                    if best.is_none_or(|(b, _, _)| score < b) {
                        best = Some((score, i, s));
                    }
                }
                moves.extend(best);
            }
            if moves.is_empty() {
                return false;
            }
            moves.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for (_, i, s) in moves {
                let (a, b) = m.span[i];
                tree.range_add(a, b, m.usage[i][s] - m.usage[i][x[i]]);
                x[i] = s;
                if tree.range_max(t, t + 1) <= m.limit {
                    break;
                }
            }
        }
        true
    }

    /// Local search from a feasible `x`: single-node moves, then edge moves, within the limit.
    fn improve(&self, x: &mut [usize], limit: i64) {
        let m = self.model;
        let mut tree = SegTree::new(&m.profile(x));
        loop {
            let mut moved = false;
            for i in 0..m.n {
                if i % 256 == 0 && self.out_of_time() {
                    return;
                }
                for s in 0..m.k(i) {
                    if s != x[i] && self.chain_move(x, &mut tree, i, s, limit) {
                        moved = true;
                    }
                }
            }
            // Edge moves: both ends at once.
            for (e, &(a, b)) in m.ends.iter().enumerate() {
                if e % 256 == 0 && self.out_of_time() {
                    return;
                }
                if m.k(a) * m.k(b) > 4096 {
                    continue;
                }
                let (ca, cb) = (x[a], x[b]);
                let here = m
                    .local_lex(x, a, ca)
                    .add(m.local_lex(x, b, cb))
                    .sub(Lex::of(m.edge_cost(e, ca, cb)));
                let mut best = (here, ca, cb);
                for sa in 0..m.k(a) {
                    x[a] = sa;
                    let la = m.local_lex(x, a, sa).sub(Lex::of(m.edge_cost(e, sa, cb)));
                    for sb in 0..m.k(b) {
                        if sa == ca && sb == cb {
                            continue;
                        }
                        x[b] = sb;
                        let c = la.add(m.local_lex(x, b, sb));
                        if c.better(best.0) {
                            best = (c, sa, sb);
                        }
                    }
                    x[b] = cb;
                }
                x[a] = ca;
                if (best.1, best.2) != (ca, cb) {
                    let (aa, ab) = m.span[a];
                    let (ba, bb) = m.span[b];
                    tree.range_add(aa, ab, m.usage[a][best.1] - m.usage[a][ca]);
                    tree.range_add(ba, bb, m.usage[b][best.2] - m.usage[b][cb]);
                    let ok = tree.range_max(aa, ab).max(tree.range_max(ba, bb)) <= limit;
                    if ok {
                        x[a] = best.1;
                        x[b] = best.2;
                        moved = true;
                    } else {
                        tree.range_add(aa, ab, m.usage[a][ca] - m.usage[a][best.1]);
                        tree.range_add(ba, bb, m.usage[b][cb] - m.usage[b][best.2]);
                    }
                }
            }
            if !moved || self.out_of_time() {
                break;
            }
        }
    }

    /// Chain moves at the ends of forbidden edges only, until none is left or none helps.
    fn unforbid(&self, x: &mut [usize], limit: i64) {
        let m = self.model;
        let mut tree = SegTree::new(&m.profile(x));
        for _round in 0..16 {
            let mut work: Vec<usize> = Vec::new();
            for (e, &(a, b)) in m.ends.iter().enumerate() {
                if m.edge_cost(e, x[a], x[b]) >= BIG {
                    work.push(a);
                    work.push(b);
                }
            }
            work.sort_unstable();
            work.dedup();
            if work.is_empty() || self.out_of_time() {
                return;
            }
            let mut moved = false;
            for (w, &i) in work.iter().enumerate() {
                if w % 256 == 0 && self.out_of_time() {
                    return;
                }
                for s in 0..m.k(i) {
                    if s != x[i] && self.chain_move(x, &mut tree, i, s, limit) {
                        moved = true;
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// Cost of the nodes in `set` and of every edge that touches them (each once).
    fn set_cost(&self, x: &[usize], set: &[usize], inside: &[bool]) -> Lex {
        let m = self.model;
        let mut c = Lex { bad: 0, fin: 0.0 };
        for &i in set {
            c = c.add(Lex::of(m.cost[i][x[i]]));
            for &(j, e, first) in &m.adj[i] {
                if inside[j] && !first {
                    continue; // counted from its first end
                }
                let v = m.edge_cost_at(e, first, x[i], x[j]);
                c = c.add(Lex::of(v));
            }
        }
        c
    }

    /// Moves node `i` to `s` and lets every neighbour whose edge becomes forbidden follow (its
    /// cheapest allowed strategy), transitively, up to [`CHAIN`] nodes. Kept when the cost drops
    /// and every time step stays within `limit`.
    fn chain_move(
        &self,
        x: &mut [usize],
        tree: &mut SegTree,
        i: usize,
        s: usize,
        limit: i64,
    ) -> bool {
        const CHAIN: usize = 64;
        let m = self.model;
        let mut changed: Vec<(usize, usize)> = vec![(i, x[i])];
        let mut inside_list = vec![i];
        let old_i = x[i];
        x[i] = s;
        let mut head = 0;
        let mut ok = true;
        while head < inside_list.len() {
            let v = inside_list[head];
            head += 1;
            for &(j, e, first) in &m.adj[v] {
                if changed.iter().any(|&(c, _)| c == j) {
                    continue;
                }
                let bad = m.edge_cost_at(e, first, x[v], x[j]) >= BIG;
                if !bad {
                    continue;
                }
                if changed.len() >= CHAIN {
                    ok = false;
                    break;
                }
                let mut best: Option<(Lex, usize)> = None;
                for t in 0..m.k(j) {
                    let c = m.local_lex(x, j, t);
                    if best.is_none_or(|(b, _)| c.better(b)) {
                        best = Some((c, t));
                    }
                }
                let Some((_, t)) = best else { continue };
                changed.push((j, x[j]));
                inside_list.push(j);
                x[j] = t;
            }
            if !ok {
                break;
            }
        }
        // Compare old and new cost over the changed set.
        let mut inside = std::mem::take(&mut *self.scratch.borrow_mut());
        inside.resize(m.n, false);
        for &(v, _) in &changed {
            inside[v] = true;
        }
        let new_cost = self.set_cost(x, &inside_list, &inside);
        let new_vals: Vec<usize> = changed.iter().map(|&(v, _)| x[v]).collect();
        for &(v, old) in &changed {
            x[v] = old;
        }
        let _ = old_i;
        let old_cost = self.set_cost(x, &inside_list, &inside);
        for &(v, _) in &changed {
            inside[v] = false;
        }
        *self.scratch.borrow_mut() = inside;
        if !ok || !new_cost.better(old_cost) {
            return false;
        }
        for (&(v, old), &nv) in changed.iter().zip(&new_vals) {
            let (a, b) = m.span[v];
            tree.range_add(a, b, m.usage[v][nv] - m.usage[v][old]);
        }
        let fits = changed.iter().all(|&(v, _)| {
            let (a, b) = m.span[v];
            a >= b || tree.range_max(a, b) <= limit
        });
        if fits {
            for (&(v, _), &nv) in changed.iter().zip(&new_vals) {
                x[v] = nv;
            }
            true
        } else {
            for (&(v, old), &nv) in changed.iter().zip(&new_vals) {
                let (a, b) = m.span[v];
                tree.range_add(a, b, m.usage[v][old] - m.usage[v][nv]);
            }
            false
        }
    }

    fn result(self, problem: &Problem) -> SolveResult {
        let m = self.model;
        let infeasible = self.min_peak > m.limit;
        let lower = if self.lower.is_finite() && self.lower > 0.0 {
            // Integer costs: round up, less a margin for floating-point error.
            let l = self.lower - 1e-9 * self.lower.abs() - 1e-6;
            l.ceil().max(0.0) as u128
        } else {
            0
        };
        let (solution, cost) = match &self.best {
            Some((_, x)) => {
                let orig: Vec<usize> = (0..m.n).map(|i| m.dom[i][x[i]]).collect();
                let cost = crate::iopddl::evaluate(problem, &orig).ok().map(|e| e.cost);
                (Some(orig), cost)
            }
            None => (None, None),
        };
        let optimal = cost.is_some_and(|c| lower >= c);
        SolveResult {
            solution,
            cost,
            lower_bound: lower.min(cost.unwrap_or(u128::MAX)),
            optimal,
            infeasible,
            min_peak: self.min_peak.max(0) as u128,
            iterations: self.iterations,
            exact_relaxation: self.exact,
        }
    }
}
