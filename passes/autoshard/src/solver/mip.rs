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

use std::ffi::CString;
use std::os::raw::c_void;
use std::time::Duration;

use highs_sys as ffi;

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

/// The program in HiGHS's row-wise form.
struct Program {
    cost: Vec<f64>,
    upper: Vec<f64>,
    integer: Vec<ffi::HighsInt>,
    row_lower: Vec<f64>,
    row_upper: Vec<f64>,
    start: Vec<ffi::HighsInt>,
    index: Vec<ffi::HighsInt>,
    value: Vec<f64>,
    /// First column of each node's strategies.
    node_col: Vec<usize>,
    /// Per edge in the program: its index and first column (pairs row-major over the
    /// allowed entries of `emat`).
    edge_cols: Vec<(usize, usize)>,
}

impl Program {
    fn row(&mut self, entries: impl IntoIterator<Item = (usize, f64)>, lower: f64, upper: f64) {
        for (c, v) in entries {
            self.index.push(c as ffi::HighsInt);
            self.value.push(v);
        }
        self.start.push(self.index.len() as ffi::HighsInt);
        self.row_lower.push(lower);
        self.row_upper.push(upper);
    }

    fn build(m: &Model, inf: f64) -> Program {
        let mut p = Program {
            cost: Vec::new(),
            upper: Vec::new(),
            integer: Vec::new(),
            row_lower: Vec::new(),
            row_upper: Vec::new(),
            start: vec![0],
            index: Vec::new(),
            value: Vec::new(),
            node_col: Vec::with_capacity(m.n),
            edge_cols: Vec::new(),
        };
        for i in 0..m.n {
            p.node_col.push(p.cost.len());
            for &c in &m.cost[i] {
                p.cost.push(c);
                p.upper.push(1.0);
                p.integer.push(ffi::kHighsVarTypeInteger);
            }
        }
        for e in 0..m.ends.len() {
            if free_edge(m, e) {
                continue;
            }
            p.edge_cols.push((e, p.cost.len()));
            for &c in m.emat[e].iter().filter(|&&c| c < BIG) {
                p.cost.push(c);
                p.upper.push(1.0);
                p.integer.push(ffi::kHighsVarTypeContinuous);
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
            p.memory_rows(m, inf);
        }
        p
    }

    /// One row per segment whose live set no other segment's contains, when it can bind.
    fn memory_rows(&mut self, m: &Model, inf: f64) {
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
            self.row(row, -inf, (m.limit - floor) as f64);
        }
    }

    /// A full column vector for the solution `x` (reduced strategies).
    fn columns_of(&self, m: &Model, x: &[usize]) -> Vec<f64> {
        let mut v = vec![0.0; self.cost.len()];
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

/// An owned HiGHS instance, destroyed on drop.
struct Highs(*mut c_void);

impl Drop for Highs {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Highs_create` and is destroyed once.
        unsafe { ffi::Highs_destroy(self.0) }
    }
}

impl Highs {
    fn set_double(&self, name: &str, value: f64) {
        let name = CString::new(name).expect("option names have no NUL");
        // SAFETY: a live instance and a NUL-terminated name; an unknown option is only refused.
        unsafe { ffi::Highs_setDoubleOptionValue(self.0, name.as_ptr(), value) };
    }

    fn set_bool(&self, name: &str, value: bool) {
        let name = CString::new(name).expect("option names have no NUL");
        // SAFETY: as in `set_double`.
        unsafe { ffi::Highs_setBoolOptionValue(self.0, name.as_ptr(), value as ffi::HighsInt) };
    }

    fn set_int(&self, name: &str, value: ffi::HighsInt) {
        let name = CString::new(name).expect("option names have no NUL");
        // SAFETY: as in `set_double`.
        unsafe { ffi::Highs_setIntOptionValue(self.0, name.as_ptr(), value) };
    }

    fn double_info(&self, name: &str) -> Option<f64> {
        let name = CString::new(name).expect("info names have no NUL");
        let mut value = 0.0;
        // SAFETY: a live instance, a NUL-terminated name and a place for the value.
        let status = unsafe { ffi::Highs_getDoubleInfoValue(self.0, name.as_ptr(), &mut value) };
        (status == ffi::kHighsStatusOk).then_some(value)
    }

    fn int_info(&self, name: &str) -> Option<ffi::HighsInt> {
        let name = CString::new(name).expect("info names have no NUL");
        let mut value = 0;
        // SAFETY: as in `double_info`.
        let status = unsafe { ffi::Highs_getIntInfoValue(self.0, name.as_ptr(), &mut value) };
        (status == ffi::kHighsStatusOk).then_some(value)
    }
}

/// Solves `model` exactly within `time`, starting from `start` (a feasible solution, reduced
/// strategies) when given. `None` when HiGHS refuses the program.
pub(super) fn solve(model: &Model, start: Option<&[usize]>, time: Duration) -> Option<MipOutcome> {
    // SAFETY: `Highs_create` has no preconditions; the instance is owned by `Highs`.
    let highs = Highs(unsafe { ffi::Highs_create() });
    if highs.0.is_null() {
        return None;
    }
    highs.set_bool("output_flag", false);
    highs.set_double("time_limit", time.as_secs_f64().max(0.01));
    highs.set_double("mip_rel_gap", 0.0);
    highs.set_double("mip_abs_gap", 1.0 - 1e-6);
    highs.set_int("threads", 1);
    highs.set_int("random_seed", 0);
    // SAFETY: a live instance.
    let inf = unsafe { ffi::Highs_getInfinity(highs.0) };
    let p = Program::build(model, inf);
    let (cols, rows) = (p.cost.len(), p.row_lower.len());
    let lower = vec![0.0; cols];
    // SAFETY: every array has the length its count says (`cols` per column, `rows` per row,
    // `rows + 1` starts, one index and value per nonzero), and outlives the call.
    let status = unsafe {
        ffi::Highs_passMip(
            highs.0,
            cols as ffi::HighsInt,
            rows as ffi::HighsInt,
            p.index.len() as ffi::HighsInt,
            ffi::kHighsMatrixFormatRowwise,
            ffi::kHighsObjSenseMinimize,
            0.0,
            p.cost.as_ptr(),
            lower.as_ptr(),
            p.upper.as_ptr(),
            p.row_lower.as_ptr(),
            p.row_upper.as_ptr(),
            p.start.as_ptr(),
            p.index.as_ptr(),
            p.value.as_ptr(),
            p.integer.as_ptr(),
        )
    };
    if status == ffi::kHighsStatusError {
        return None;
    }
    if let Some(x) = start {
        let v = p.columns_of(model, x);
        // SAFETY: `v` has one value per column; the other vectors may be null.
        unsafe {
            ffi::Highs_setSolution(
                highs.0,
                v.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
    }
    // SAFETY: a live instance holding a passed model.
    if unsafe { ffi::Highs_run(highs.0) } == ffi::kHighsStatusError {
        return None;
    }
    let bound = highs
        .double_info("mip_dual_bound")
        .unwrap_or(f64::NEG_INFINITY);
    // SAFETY: a live instance after a run.
    let status = unsafe { ffi::Highs_getModelStatus(highs.0) };
    if status == ffi::kHighsModelStatusInfeasible {
        return Some(MipOutcome {
            solution: None,
            bound: f64::INFINITY,
        });
    }
    let has_solution =
        highs.int_info("primal_solution_status") == Some(ffi::kHighsSolutionStatusFeasible);
    let solution = has_solution.then(|| {
        let (mut cv, mut cd) = (vec![0.0; cols], vec![0.0; cols]);
        let (mut rv, mut rd) = (vec![0.0; rows], vec![0.0; rows]);
        // SAFETY: each vector has the length HiGHS writes into it.
        unsafe {
            ffi::Highs_getSolution(
                highs.0,
                cv.as_mut_ptr(),
                cd.as_mut_ptr(),
                rv.as_mut_ptr(),
                rd.as_mut_ptr(),
            )
        };
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
    Some(MipOutcome { solution, bound })
}
