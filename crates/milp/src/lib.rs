//! Mixed-integer linear programs, built column by column and row by row, and solved by HiGHS
//! (`highs-sys`, built from its vendored source).
//!
//! This crate is the only place that calls the solver's C API: callers describe a program in
//! plain Rust values and get back a [`Solution`]. Every solve is deterministic (one thread, a
//! fixed seed) and silent, and stops at the given time limit with the best solution found and
//! the proven bound.
//!
//! ```
//! use std::time::Duration;
//! use tessera_milp::{Options, Program, Status};
//!
//! // Minimize x + 2y over binaries with x + y >= 1.
//! let mut p = Program::new();
//! let x = p.column(1.0, 0.0, 1.0, true);
//! let y = p.column(2.0, 0.0, 1.0, true);
//! p.row([(x, 1.0), (y, 1.0)], 1.0, f64::INFINITY);
//! let s = p.solve(&Options::new(Duration::from_secs(5)), None).unwrap();
//! assert_eq!(s.status, Status::Optimal);
//! assert_eq!(s.objective, Some(1.0));
//! assert_eq!(s.values.unwrap(), vec![1.0, 0.0]);
//! ```

use std::ffi::{c_void, CString};
use std::time::Duration;

use highs_sys as ffi;

/// Why a program could not be solved at all.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MilpError {
    /// HiGHS could not make an instance.
    #[error("HiGHS could not create a solver instance")]
    Create,
    /// HiGHS refused the program when it was passed.
    #[error("HiGHS refused the program ({columns} columns, {rows} rows)")]
    Refused { columns: usize, rows: usize },
    /// The solve itself failed.
    #[error("HiGHS failed while solving")]
    Run,
    /// The program is larger than the solver's 32-bit indices.
    #[error("the program has {0} nonzeros, more than HiGHS's indices hold")]
    TooLarge(usize),
    /// A row names a column that does not exist.
    #[error("a row names column {index}, but the program has {columns} columns")]
    Column { index: usize, columns: usize },
    /// A cost, bound or coefficient is NaN.
    #[error("the program has a NaN {0}")]
    NotANumber(&'static str),
    /// The start has the wrong number of values.
    #[error("the start has {got} values for {columns} columns")]
    Start { got: usize, columns: usize },
}

/// How to solve.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Wall-clock limit for the whole solve.
    pub time_limit: Duration,
    /// Stop once the incumbent is within this absolute distance of the bound. With integer
    /// costs, just under 1 means "proven optimal".
    pub absolute_gap: f64,
}

impl Options {
    /// Proven optimal (no gap) within `time_limit`.
    pub fn new(time_limit: Duration) -> Options {
        Options {
            time_limit,
            absolute_gap: 1e-6,
        }
    }

    /// The same, but stop within `gap` of the bound.
    pub fn with_absolute_gap(mut self, gap: f64) -> Options {
        self.absolute_gap = gap;
        self
    }
}

/// How the solve ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The solution is proven optimal (within the gap).
    Optimal,
    /// No solution exists.
    Infeasible,
    /// Stopped (the time limit, or a limit of the solver's own) before a proof.
    Stopped,
}

/// What a solve found.
#[derive(Clone, Debug, PartialEq)]
pub struct Solution {
    pub status: Status,
    /// The best feasible solution's objective, if one was found.
    pub objective: Option<f64>,
    /// The best feasible solution, one value per column, if one was found.
    pub values: Option<Vec<f64>>,
    /// A proven lower bound on the optimum (`-inf` when none was proven, `+inf` when
    /// infeasible).
    pub bound: f64,
}

/// A program to minimize: columns with costs, bounds and integrality, rows as sparse sums with
/// bounds. Infinite bounds are `f64::INFINITY` and `f64::NEG_INFINITY`.
#[derive(Clone, Debug, Default)]
pub struct Program {
    cost: Vec<f64>,
    lower: Vec<f64>,
    upper: Vec<f64>,
    integer: Vec<ffi::HighsInt>,
    row_lower: Vec<f64>,
    row_upper: Vec<f64>,
    start: Vec<usize>,
    index: Vec<usize>,
    value: Vec<f64>,
}

impl Program {
    pub fn new() -> Program {
        Program {
            start: vec![0],
            ..Program::default()
        }
    }

    /// Adds a column and returns its index.
    pub fn column(&mut self, cost: f64, lower: f64, upper: f64, integer: bool) -> usize {
        self.cost.push(cost);
        self.lower.push(lower);
        self.upper.push(upper);
        self.integer.push(if integer {
            ffi::kHighsVarTypeInteger
        } else {
            ffi::kHighsVarTypeContinuous
        });
        self.cost.len() - 1
    }

    /// Adds the row `lower <= Σ value·column <= upper`.
    pub fn row(&mut self, entries: impl IntoIterator<Item = (usize, f64)>, lower: f64, upper: f64) {
        for (c, v) in entries {
            self.index.push(c);
            self.value.push(v);
        }
        self.start.push(self.index.len());
        self.row_lower.push(lower);
        self.row_upper.push(upper);
    }

    pub fn columns(&self) -> usize {
        self.cost.len()
    }

    pub fn rows(&self) -> usize {
        self.row_lower.len()
    }

    pub fn nonzeros(&self) -> usize {
        self.index.len()
    }

    /// Solves the program, starting from `start` (one value per column, a feasible solution)
    /// when given.
    pub fn solve(&self, options: &Options, start: Option<&[f64]>) -> Result<Solution, MilpError> {
        let (columns, rows) = (self.columns(), self.rows());
        if let Some(s) = start {
            if s.len() != columns {
                return Err(MilpError::Start {
                    got: s.len(),
                    columns,
                });
            }
        }
        if let Some(&index) = self.index.iter().find(|&&c| c >= columns) {
            return Err(MilpError::Column { index, columns });
        }
        for (what, values) in [
            ("cost", &self.cost),
            ("column bound", &self.lower),
            ("column bound", &self.upper),
            ("row bound", &self.row_lower),
            ("row bound", &self.row_upper),
            ("coefficient", &self.value),
        ] {
            if values.iter().any(|v| v.is_nan()) {
                return Err(MilpError::NotANumber(what));
            }
        }
        let int = |n: usize| ffi::HighsInt::try_from(n).map_err(|_| MilpError::TooLarge(n));
        let (ncol, nrow, nnz) = (int(columns)?, int(rows)?, int(self.nonzeros())?);
        let starts = self
            .start
            .iter()
            .map(|&s| int(s))
            .collect::<Result<Vec<_>, _>>()?;
        let index = self
            .index
            .iter()
            .map(|&c| int(c))
            .collect::<Result<Vec<_>, _>>()?;
        let highs = Highs::new()?;
        highs.set_bool("output_flag", false);
        highs.set_double("time_limit", options.time_limit.as_secs_f64().max(0.01));
        highs.set_double("mip_rel_gap", 0.0);
        highs.set_double("mip_abs_gap", options.absolute_gap);
        highs.set_int("threads", 1);
        highs.set_int("random_seed", 0);
        // SAFETY: every array has the length its count says (`ncol` per column, `nrow` per row,
        // `nrow + 1` starts, `nnz` indices and values), and all outlive the call.
        let status = unsafe {
            ffi::Highs_passMip(
                highs.0,
                ncol,
                nrow,
                nnz,
                ffi::kHighsMatrixFormatRowwise,
                ffi::kHighsObjSenseMinimize,
                0.0,
                self.cost.as_ptr(),
                self.lower.as_ptr(),
                self.upper.as_ptr(),
                self.row_lower.as_ptr(),
                self.row_upper.as_ptr(),
                starts.as_ptr(),
                index.as_ptr(),
                self.value.as_ptr(),
                self.integer.as_ptr(),
            )
        };
        if status == ffi::kHighsStatusError {
            return Err(MilpError::Refused { columns, rows });
        }
        if let Some(s) = start {
            // SAFETY: `s` has one value per column (checked above); the others may be null.
            unsafe {
                ffi::Highs_setSolution(
                    highs.0,
                    s.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    std::ptr::null(),
                )
            };
        }
        // SAFETY: a live instance holding a passed model.
        if unsafe { ffi::Highs_run(highs.0) } == ffi::kHighsStatusError {
            return Err(MilpError::Run);
        }
        // SAFETY: a live instance after a run.
        let model = unsafe { ffi::Highs_getModelStatus(highs.0) };
        if model == ffi::kHighsModelStatusInfeasible {
            return Ok(Solution {
                status: Status::Infeasible,
                objective: None,
                values: None,
                bound: f64::INFINITY,
            });
        }
        let status = if model == ffi::kHighsModelStatusOptimal {
            Status::Optimal
        } else {
            Status::Stopped
        };
        let bound = highs
            .double_info("mip_dual_bound")
            .unwrap_or(f64::NEG_INFINITY);
        let feasible =
            highs.int_info("primal_solution_status") == Some(ffi::kHighsSolutionStatusFeasible);
        let values = feasible.then(|| {
            let (mut cv, mut cd) = (vec![0.0; columns], vec![0.0; columns]);
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
            cv
        });
        // SAFETY: a live instance after a run.
        let objective = feasible.then(|| unsafe { ffi::Highs_getObjectiveValue(highs.0) });
        Ok(Solution {
            status,
            objective,
            values,
            bound,
        })
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
    fn new() -> Result<Highs, MilpError> {
        // SAFETY: `Highs_create` has no preconditions; the instance is owned by `Highs`.
        let ptr = unsafe { ffi::Highs_create() };
        if ptr.is_null() {
            return Err(MilpError::Create);
        }
        Ok(Highs(ptr))
    }

    /// Option and info names are this file's literals: a NUL in one is a bug here.
    fn name(name: &str) -> CString {
        CString::new(name).expect("option and info names have no NUL")
    }

    fn set_double(&self, name: &str, value: f64) {
        let name = Highs::name(name);
        // SAFETY: a live instance and a NUL-terminated name; an unknown option is only refused.
        unsafe { ffi::Highs_setDoubleOptionValue(self.0, name.as_ptr(), value) };
    }

    fn set_bool(&self, name: &str, value: bool) {
        let name = Highs::name(name);
        // SAFETY: as in `set_double`.
        unsafe { ffi::Highs_setBoolOptionValue(self.0, name.as_ptr(), ffi::HighsInt::from(value)) };
    }

    fn set_int(&self, name: &str, value: ffi::HighsInt) {
        let name = Highs::name(name);
        // SAFETY: as in `set_double`.
        unsafe { ffi::Highs_setIntOptionValue(self.0, name.as_ptr(), value) };
    }

    fn double_info(&self, name: &str) -> Option<f64> {
        let name = Highs::name(name);
        let mut value = 0.0;
        // SAFETY: a live instance, a NUL-terminated name and a place for the value.
        let status = unsafe { ffi::Highs_getDoubleInfoValue(self.0, name.as_ptr(), &mut value) };
        (status == ffi::kHighsStatusOk).then_some(value)
    }

    fn int_info(&self, name: &str) -> Option<ffi::HighsInt> {
        let name = Highs::name(name);
        let mut value = 0;
        // SAFETY: as in `double_info`.
        let status = unsafe { ffi::Highs_getIntInfoValue(self.0, name.as_ptr(), &mut value) };
        (status == ffi::kHighsStatusOk).then_some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Options {
        Options::new(Duration::from_secs(s))
    }

    #[test]
    fn a_knapsack_is_solved_and_proven() {
        // Maximize 5a + 4b + 3c (minimize the negation) with 2a + 3b + c <= 4: a and c.
        let mut p = Program::new();
        let cols: Vec<usize> = [5.0, 4.0, 3.0]
            .iter()
            .map(|&v| p.column(-v, 0.0, 1.0, true))
            .collect();
        p.row(
            cols.iter().copied().zip([2.0, 3.0, 1.0]),
            f64::NEG_INFINITY,
            4.0,
        );
        let s = p.solve(&secs(5), None).unwrap();
        assert_eq!(s.status, Status::Optimal);
        assert_eq!(s.objective, Some(-8.0));
        assert_eq!(s.values, Some(vec![1.0, 0.0, 1.0]));
        assert!(s.bound <= -8.0 + 1e-6);
    }

    #[test]
    fn an_infeasible_program_says_so() {
        let mut p = Program::new();
        let x = p.column(1.0, 0.0, 1.0, true);
        p.row([(x, 1.0)], 2.0, 3.0);
        let s = p.solve(&secs(5), None).unwrap();
        assert_eq!(s.status, Status::Infeasible);
        assert_eq!(s.values, None);
        assert_eq!(s.bound, f64::INFINITY);
    }

    #[test]
    fn a_start_is_taken_and_a_wrong_one_refused() {
        let mut p = Program::new();
        let x = p.column(1.0, 0.0, 1.0, true);
        let y = p.column(1.0, 0.0, 1.0, true);
        p.row([(x, 1.0), (y, 1.0)], 1.0, 1.0);
        let s = p.solve(&secs(5), Some(&[0.0, 1.0])).unwrap();
        assert_eq!(s.objective, Some(1.0));
        assert_eq!(
            p.solve(&secs(5), Some(&[1.0])),
            Err(MilpError::Start { got: 1, columns: 2 })
        );
    }

    #[test]
    fn a_bad_index_is_refused_not_a_crash() {
        let mut p = Program::new();
        p.column(1.0, 0.0, 1.0, true);
        p.row([(7, 1.0)], 0.0, 1.0);
        assert_eq!(
            p.solve(&secs(5), None),
            Err(MilpError::Column {
                index: 7,
                columns: 1
            })
        );
        let mut q = Program::new();
        q.column(f64::NAN, 0.0, 1.0, true);
        assert_eq!(q.solve(&secs(5), None), Err(MilpError::NotANumber("cost")));
    }
}
