//! The IOPDDL problem format and the contest's evaluator.
//!
//! A problem (`{"problem": {...}}`) has nodes, each with a half-open live interval
//! `[start, end)` and a list of strategies (a cost and a memory usage each), edges between two
//! nodes with one cost per pair of their strategies (row-major: `first * k_second + second`),
//! and a usage limit. A solution picks one strategy per node: `{"solution": [...]}`. Its cost is
//! the sum of the chosen node and edge costs; it is feasible when every chosen cost is below
//! [`FORBIDDEN`] and, at every time step, the usage of the nodes live then is at most the limit.

use std::path::Path;

use serde_json::Value;
use thiserror::Error;

/// A cost at or above this marks a forbidden choice.
pub const FORBIDDEN: u64 = 1_000_000_000_000_000_000;

/// An IOPDDL problem.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problem {
    pub name: String,
    /// Half-open live interval `[start, end)` of each node.
    pub intervals: Vec<(u64, u64)>,
    /// Cost of each strategy of each node.
    pub node_costs: Vec<Vec<u64>>,
    /// Memory usage of each strategy of each node.
    pub node_usages: Vec<Vec<u64>>,
    /// The two nodes of each edge.
    pub edges: Vec<(usize, usize)>,
    /// Cost of each strategy pair of each edge, row-major over (first, second).
    pub edge_costs: Vec<Vec<u64>>,
    /// `None`: no limit.
    pub usage_limit: Option<u64>,
}

#[derive(Debug, Error)]
pub enum IopddlError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}: not gzip data that inflates")]
    Gzip(String),
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("problem format: {0}")]
    Format(String),
    #[error("solution: {0}")]
    Solution(String),
}

fn format_err(msg: impl Into<String>) -> IopddlError {
    IopddlError::Format(msg.into())
}

impl Problem {
    pub fn num_nodes(&self) -> usize {
        self.intervals.len()
    }

    /// Reads a problem from a `.json` or gzip-compressed `.json.gz` file.
    pub fn read(path: &Path) -> Result<Problem, IopddlError> {
        let bytes = std::fs::read(path).map_err(|source| IopddlError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let text = if bytes.starts_with(&[0x1f, 0x8b]) {
            gunzip(&bytes).ok_or_else(|| IopddlError::Gzip(path.display().to_string()))?
        } else {
            bytes
        };
        Problem::from_json(&text)
    }

    /// Parses the JSON text of a problem.
    pub fn from_json(text: &[u8]) -> Result<Problem, IopddlError> {
        let value: Value = serde_json::from_slice(text)?;
        let problem = value
            .get("problem")
            .ok_or_else(|| format_err("no top-level \"problem\" object"))?;
        let name = problem
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let nodes = problem
            .get("nodes")
            .ok_or_else(|| format_err("no \"problem.nodes\""))?;
        let intervals = pairs(nodes.get("intervals"), "nodes.intervals")?;
        let intervals: Vec<(u64, u64)> = intervals
            .into_iter()
            .enumerate()
            .map(|(i, (a, b))| {
                if a > b {
                    Err(format_err(format!(
                        "node {i}: interval [{a}, {b}) ends before it starts"
                    )))
                } else {
                    Ok((a, b))
                }
            })
            .collect::<Result<_, _>>()?;
        let node_costs = lists(nodes.get("costs"), "nodes.costs")?;
        let node_usages = lists(nodes.get("usages"), "nodes.usages")?;
        let n = intervals.len();
        if node_costs.len() != n || node_usages.len() != n {
            return Err(format_err(format!(
                "{n} intervals but {} cost lists and {} usage lists",
                node_costs.len(),
                node_usages.len()
            )));
        }
        for (i, (c, u)) in node_costs.iter().zip(&node_usages).enumerate() {
            if c.is_empty() || c.len() != u.len() {
                return Err(format_err(format!(
                    "node {i}: {} costs and {} usages (need the same number, at least one)",
                    c.len(),
                    u.len()
                )));
            }
        }
        let (edges, edge_costs) = match problem.get("edges") {
            None => (Vec::new(), Vec::new()),
            Some(e) => {
                let ends = pairs(e.get("nodes"), "edges.nodes")?;
                let costs = lists(e.get("costs"), "edges.costs")?;
                if ends.len() != costs.len() {
                    return Err(format_err(format!(
                        "{} edges but {} edge cost lists",
                        ends.len(),
                        costs.len()
                    )));
                }
                let mut edges = Vec::with_capacity(ends.len());
                for (k, ((a, b), c)) in ends.iter().zip(&costs).enumerate() {
                    let (a, b) = (*a as usize, *b as usize);
                    if a >= n || b >= n {
                        return Err(format_err(format!(
                            "edge {k}: node {} out of range ({n} nodes)",
                            a.max(b)
                        )));
                    }
                    let want = node_costs[a].len() * node_costs[b].len();
                    if c.len() != want {
                        return Err(format_err(format!(
                            "edge {k} ({a}, {b}): {} costs, expected {want}",
                            c.len()
                        )));
                    }
                    edges.push((a, b));
                }
                (edges, costs)
            }
        };
        let usage_limit = match problem.get("usage_limit") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .ok_or_else(|| format_err("usage_limit: expected a non-negative integer"))?,
            ),
        };
        Ok(Problem {
            name,
            intervals,
            node_costs,
            node_usages,
            edges,
            edge_costs,
            usage_limit,
        })
    }

    /// The problem as JSON text.
    pub fn to_json(&self) -> String {
        let mut p = serde_json::Map::new();
        p.insert("name".into(), Value::from(self.name.clone()));
        let mut nodes = serde_json::Map::new();
        let iv: Vec<Value> = self
            .intervals
            .iter()
            .map(|&(a, b)| Value::from(vec![a, b]))
            .collect();
        nodes.insert("intervals".into(), Value::from(iv));
        nodes.insert("costs".into(), Value::from(self.node_costs.clone()));
        nodes.insert("usages".into(), Value::from(self.node_usages.clone()));
        p.insert("nodes".into(), Value::Object(nodes));
        let mut edges = serde_json::Map::new();
        let ends: Vec<Value> = self
            .edges
            .iter()
            .map(|&(a, b)| Value::from(vec![a as u64, b as u64]))
            .collect();
        edges.insert("nodes".into(), Value::from(ends));
        edges.insert("costs".into(), Value::from(self.edge_costs.clone()));
        p.insert("edges".into(), Value::Object(edges));
        if let Some(l) = self.usage_limit {
            p.insert("usage_limit".into(), Value::from(l));
        }
        let mut top = serde_json::Map::new();
        top.insert("problem".into(), Value::Object(p));
        Value::Object(top).to_string()
    }
}

fn number(v: &Value, what: &str) -> Result<u64, IopddlError> {
    if let Some(x) = v.as_u64() {
        return Ok(x);
    }
    // Forbidden costs are sometimes written as floats (1e18).
    match v.as_f64() {
        Some(f) if f >= 0.0 && f.is_finite() => Ok(if f >= FORBIDDEN as f64 {
            FORBIDDEN
        } else {
            f as u64
        }),
        _ => Err(format_err(format!(
            "{what}: expected a non-negative number, got {v}"
        ))),
    }
}

fn lists(v: Option<&Value>, what: &str) -> Result<Vec<Vec<u64>>, IopddlError> {
    let arr = v
        .and_then(Value::as_array)
        .ok_or_else(|| format_err(format!("{what}: expected an array")))?;
    arr.iter()
        .enumerate()
        .map(|(i, row)| {
            row.as_array()
                .ok_or_else(|| format_err(format!("{what}[{i}]: expected an array")))?
                .iter()
                .map(|x| number(x, what))
                .collect()
        })
        .collect()
}

fn pairs(v: Option<&Value>, what: &str) -> Result<Vec<(u64, u64)>, IopddlError> {
    lists(v, what)?
        .into_iter()
        .enumerate()
        .map(|(i, row)| match row[..] {
            [a, b] => Ok((a, b)),
            _ => Err(format_err(format!("{what}[{i}]: expected two numbers"))),
        })
        .collect()
}

/// Inflates a gzip member (RFC 1952), header fields skipped.
fn gunzip(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < 18 || data[2] != 8 {
        return None;
    }
    let flags = data[3];
    let mut at = 10usize;
    if flags & 4 != 0 {
        let xlen = u16::from_le_bytes([*data.get(at)?, *data.get(at + 1)?]) as usize;
        at += 2 + xlen;
    }
    for bit in [8u8, 16] {
        if flags & bit != 0 {
            at += data.get(at..)?.iter().position(|&b| b == 0)? + 1;
        }
    }
    if flags & 2 != 0 {
        at += 2;
    }
    let body = data.get(at..data.len().checked_sub(8)?)?;
    miniz_oxide::inflate::decompress_to_vec(body).ok()
}

/// The JSON text of a solution.
pub fn solution_json(solution: &[usize]) -> String {
    let mut top = serde_json::Map::new();
    top.insert("solution".into(), Value::from(solution.to_vec()));
    Value::Object(top).to_string()
}

/// Parses `{"solution": [...]}`.
pub fn parse_solution(text: &[u8]) -> Result<Vec<usize>, IopddlError> {
    let value: Value = serde_json::from_slice(text)?;
    value
        .get("solution")
        .and_then(Value::as_array)
        .ok_or_else(|| IopddlError::Solution("no \"solution\" array".into()))?
        .iter()
        .map(|v| {
            v.as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| IopddlError::Solution(format!("expected a strategy index, got {v}")))
        })
        .collect()
}

/// What the evaluator says about a solution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    /// Sum of the chosen node and edge costs.
    pub cost: u128,
    /// The highest usage over all time steps.
    pub peak_usage: u128,
    /// Why the solution is not feasible (`None`: it is).
    pub infeasible: Option<String>,
}

impl Evaluation {
    pub fn feasible(&self) -> bool {
        self.infeasible.is_none()
    }
}

/// Evaluates `solution` by the contest's rules. A malformed solution (wrong length, a strategy
/// out of range) is an error; a well-formed one that breaks a rule is reported in
/// [`Evaluation::infeasible`].
pub fn evaluate(problem: &Problem, solution: &[usize]) -> Result<Evaluation, IopddlError> {
    let n = problem.num_nodes();
    if solution.len() != n {
        return Err(IopddlError::Solution(format!(
            "{} strategies for {n} nodes",
            solution.len()
        )));
    }
    let mut cost: u128 = 0;
    let mut infeasible = None;
    for (i, &s) in solution.iter().enumerate() {
        let Some(&c) = problem.node_costs[i].get(s) else {
            return Err(IopddlError::Solution(format!(
                "node {i}: strategy {s} out of range ({} strategies)",
                problem.node_costs[i].len()
            )));
        };
        if c >= FORBIDDEN && infeasible.is_none() {
            infeasible = Some(format!("node {i}: strategy {s} is forbidden"));
        }
        cost += c as u128;
    }
    for (k, &(a, b)) in problem.edges.iter().enumerate() {
        let idx = solution[a] * problem.node_costs[b].len() + solution[b];
        let c = problem.edge_costs[k][idx];
        if c >= FORBIDDEN && infeasible.is_none() {
            infeasible = Some(format!(
                "edge {k} ({a}, {b}): strategies ({}, {}) are forbidden",
                solution[a], solution[b]
            ));
        }
        cost += c as u128;
    }
    // Usage over time: a sweep over interval ends.
    let mut events: Vec<(u64, i128)> = Vec::with_capacity(2 * n);
    for (i, &(a, b)) in problem.intervals.iter().enumerate() {
        let u = problem.node_usages[i][solution[i]] as i128;
        if a < b && u > 0 {
            events.push((a, u));
            events.push((b, -u));
        }
    }
    events.sort_unstable();
    let (mut usage, mut peak, mut peak_at) = (0i128, 0i128, 0u64);
    let mut e = 0;
    while e < events.len() {
        let t = events[e].0;
        while e < events.len() && events[e].0 == t {
            usage += events[e].1;
            e += 1;
        }
        if usage > peak {
            peak = usage;
            peak_at = t;
        }
    }
    if let Some(limit) = problem.usage_limit {
        if peak > limit as i128 && infeasible.is_none() {
            infeasible = Some(format!(
                "usage {peak} at time {peak_at} is above the limit {limit}"
            ));
        }
    }
    Ok(Evaluation {
        cost,
        peak_usage: peak as u128,
        infeasible,
    })
}
