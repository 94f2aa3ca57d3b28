//! The exact solve: the reduced problem as a mixed-integer program, handed to HiGHS.
//!
//! One binary `x[i][s]` per node strategy (exactly one per node) and, per merged edge, one
//! continuous `y[e][a][b]` per allowed strategy pair, tied to both ends by the marginal rows
//! `Σ_b y[e][a][b] = x[i][a]` and `Σ_a y[e][a][b] = x[j][b]`: with integral `x` each edge's `y`
//! is the one pair chosen, and the LP relaxation is the local polytope of the cost network,
//! which is tight on trees. A forbidden pair has no column. Memory rows are written only at the
//! segments where the live set is maximal (an interval starts there and one ends after it) and
//! only when the row can be violated, each usage less the node's least usage.
//!
//! Costs are integers, so the absolute gap is set just under 1: HiGHS stops when the incumbent
//! is proven optimal. Used for problems within [`MAX_NODES`] and [`MAX_COLUMNS`]; the contest's
//! large instances do not (their LP relaxation alone runs past the time limits).

use std::time::Duration;

use tessera_milp::{Options, Status};

use super::{Model, BIG};

/// Largest number of columns handed to HiGHS.
pub(super) const MAX_COLUMNS: usize = 1_500_000;

/// Largest number of nodes handed to HiGHS.
pub(super) const MAX_NODES: usize = 5_000;

/// What HiGHS found within its time.
pub(super) struct MipOutcome {
    /// Its best solution (reduced strategy per node), already checked against the limit.
    pub solution: Option<Vec<usize>>,
    /// Its proven lower bound on the optimum (the MIP dual bound).
    pub bound: f64,
}

/// The columns the program would have, or `None` when over [`MAX_COLUMNS`] or the nodes over
/// [`MAX_NODES`].
pub(super) fn columns(model: &Model) -> Option<usize> {
    if model.n > MAX_NODES {
        return None;
    }
    let mut n: usize = model.dom.iter().map(Vec::len).sum();
    for e in 0..model.ends.len() {
        if !free_edge(model, e) {
            n += model.emat[e].iter().filter(|&&c| c < BIG).count();
        }
        if n > MAX_COLUMNS {
            return None;
        }
    }
    Some(n)
}

/// An edge whose every pair costs nothing constrains nothing.
fn free_edge(model: &Model, e: usize) -> bool {
    model.emat[e].iter().all(|&c| c == 0.0)
}

/// The program, with where each node's and edge's columns start.
struct Program {
    mip: tessera_milp::Program,
    /// First column of each node's strategies.
    node_col: Vec<usize>,
    /// Per edge in the program: its index and first column (pairs row-major over the
    /// allowed entries of `emat`).
    edge_cols: Vec<(usize, usize)>,
}

impl Program {
    fn row(&mut self, entries: impl IntoIterator<Item = (usize, f64)>, lower: f64, upper: f64) {
        self.mip.row(entries, lower, upper);
    }

    fn build(m: &Model) -> Program {
        let mut p = Program {
            mip: tessera_milp::Program::new(),
            node_col: Vec::with_capacity(m.n),
            edge_cols: Vec::new(),
        };
        for i in 0..m.n {
            p.node_col.push(p.mip.columns());
            for &c in &m.cost[i] {
                p.mip.column(c, 0.0, 1.0, true);
            }
        }
        for e in 0..m.ends.len() {
            if free_edge(m, e) {
                continue;
            }
            p.edge_cols.push((e, p.mip.columns()));
            for &c in m.emat[e].iter().filter(|&&c| c < BIG) {
                p.mip.column(c, 0.0, 1.0, false);
            }
        }
        for i in 0..m.n {
            let base = p.node_col[i];
            p.row((0..m.k(i)).map(|s| (base + s, 1.0)), 1.0, 1.0);
        }
        for k in 0..p.edge_cols.len() {
            let (e, first) = p.edge_cols[k];
            let (a, b) = m.ends[e];
            let (ka, kb) = (m.k(a), m.k(b));
            // Column of each allowed pair, row-major.
            let mut col = vec![usize::MAX; ka * kb];
            let mut next = first;
            for (slot, &c) in col.iter_mut().zip(&m.emat[e]) {
                if c < BIG {
                    *slot = next;
                    next += 1;
                }
            }
            for sa in 0..ka {
                let pairs = (0..kb)
                    .map(|sb| col[sa * kb + sb])
                    .filter(|&c| c != usize::MAX);
                let row: Vec<(usize, f64)> = pairs
                    .map(|c| (c, 1.0))
                    .chain([(p.node_col[a] + sa, -1.0)])
                    .collect();
                p.row(row, 0.0, 0.0);
            }
            for sb in 0..kb {
                let pairs = (0..ka)
                    .map(|sa| col[sa * kb + sb])
                    .filter(|&c| c != usize::MAX);
                let row: Vec<(usize, f64)> = pairs
                    .map(|c| (c, 1.0))
                    .chain([(p.node_col[b] + sb, -1.0)])
                    .collect();
                p.row(row, 0.0, 0.0);
            }
        }
        if m.limit < i64::MAX / 2 {
            p.memory_rows(m);
        }
        p
    }

    /// One row per segment whose live set no other segment's contains, when it can bind.
    fn memory_rows(&mut self, m: &Model) {
        let mut starts = vec![false; m.nseg + 1];
        let mut ends = vec![false; m.nseg + 1];
        let mut live: Vec<Vec<usize>> = vec![Vec::new(); m.nseg];
        for (i, &(a, b)) in m.span.iter().enumerate() {
            if a < b {
                starts[a] = true;
                ends[b] = true;
                for seg in &mut live[a..b.min(m.nseg)] {
                    seg.push(i);
                }
            }
        }
        for (t, nodes) in live.iter().enumerate() {
            let maximal = (t == 0 || starts[t]) && (t + 1 == m.nseg || ends[t + 1]);
            if !maximal || nodes.is_empty() {
                continue;
            }
            let least = |i: usize| m.usage[i].iter().copied().min().unwrap_or(0);
            let floor: i64 = nodes.iter().map(|&i| least(i)).sum();
            let most: i64 = nodes
                .iter()
                .map(|&i| m.usage[i].iter().copied().max().unwrap_or(0))
                .sum();
            if most <= m.limit {
                continue;
            }
            let row: Vec<(usize, f64)> = nodes
                .iter()
                .flat_map(|&i| {
                    let (base, l) = (self.node_col[i], least(i));
                    m.usage[i]
                        .iter()
                        .enumerate()
                        .filter(move |&(_, &u)| u > l)
                        .map(move |(s, &u)| (base + s, (u - l) as f64))
                })
                .collect();
            self.row(row, f64::NEG_INFINITY, (m.limit - floor) as f64);
        }
    }

    /// A full column vector for the solution `x` (reduced strategies).
    fn columns_of(&self, m: &Model, x: &[usize]) -> Vec<f64> {
        let mut v = vec![0.0; self.mip.columns()];
        for (i, &s) in x.iter().enumerate() {
            v[self.node_col[i] + s] = 1.0;
        }
        for &(e, first) in &self.edge_cols {
            let (a, b) = m.ends[e];
            let want = x[a] * m.k(b) + x[b];
            let mut col = first;
            for (k, &c) in m.emat[e].iter().enumerate() {
                if c < BIG {
                    if k == want {
                        v[col] = 1.0;
                    }
                    col += 1;
                }
            }
        }
        v
    }
}

/// Solves `model` exactly within `time`, starting from `start` (a feasible solution, reduced
/// strategies) when given. `None` when HiGHS refuses the program.
pub(super) fn solve(model: &Model, start: Option<&[usize]>, time: Duration) -> Option<MipOutcome> {
    let p = Program::build(model);
    let start = start.map(|x| p.columns_of(model, x));
    let options = Options::new(time).with_absolute_gap(1.0 - 1e-6);
    let solved = p.mip.solve(&options, start.as_deref()).ok()?;
    if solved.status == Status::Infeasible {
        return Some(MipOutcome {
            solution: None,
            bound: f64::INFINITY,
        });
    }
    let solution = solved.values.map(|cv| {
        (0..model.n)
            .map(|i| {
                let base = p.node_col[i];
                (0..model.k(i))
                    .max_by(|&a, &b| cv[base + a].total_cmp(&cv[base + b]))
                    .unwrap_or(0)
            })
            .collect::<Vec<usize>>()
    });
    let solution = solution
        .filter(|x| model.profile(x).into_iter().all(|u| u <= model.limit) && model.total(x) < BIG);
    Some(MipOutcome {
        solution,
        bound: solved.bound,
    })
}
