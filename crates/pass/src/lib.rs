//! The pass framework of Tessera.
//!
//! - [`Pass`]: a named transformation `run(&mut Module) -> Result<bool>` (changed or not), with
//!   its options as a plain struct with defaults ([`PassOptions`]).
//! - [`Pipeline`]: runs passes in order, runs invariant checkers (the verifier) on the input and
//!   after every pass that changed the module, times each pass, records changed/unchanged, and
//!   can dump the module after each pass (`NNNN.<pass>.hlo`). [`FixedPoint`] repeats a group of
//!   passes until none changes anything, up to an iteration limit.
//! - [`Registry`]: pass names to constructors and one-line docs, so drivers name passes by
//!   string (`--passes dce,fix(tuple-simplify,dce)` and `--pass-option dce.key=value`).
//! - [`driver`]: the text-to-text entry point shared by `tessera opt` and the filetests.
//! - [`passes`]: generic passes later passes rely on: DCE, call inlining, call-graph
//!   flattening, tuple simplification.
//!
//! See docs/passes.md.

pub mod driver;
pub mod options;
pub mod passes;
pub mod pipeline;
pub mod registry;
pub mod stats;
pub mod util;

pub use options::{OptionDoc, PassOptions};
pub use pipeline::{Checker, FixedPoint, PassStats, Pipeline, RunReport};
pub use registry::{PassInfo, Registry};

use tessera_hlo::{BuildError, Module, MutationError};

/// Errors of passes, pipelines and the driver. Each names the pass or the option at fault.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Mutation(#[from] MutationError),
    /// An instruction the pass built did not fit (shape inference or the module refused it).
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A pass found the module in a state it cannot handle.
    #[error("{0}")]
    Failed(String),
    /// The inner error is part of the message and deliberately not a `source()`: a chain
    /// printer (anyhow's `{:#}`) would otherwise print it twice.
    #[error("pass `{pass}` failed: {error}")]
    InPass { pass: String, error: Box<PassError> },
    #[error("invariant checker `{checker}` failed {when}: {message}")]
    Invariant {
        checker: String,
        /// "on the input" or "after pass `x`".
        when: String,
        message: String,
    },
    #[error("unknown pass `{name}`; `tessera passes` lists the known ones")]
    UnknownPass { name: String },
    #[error("--passes: {0}")]
    PassList(String),
    #[error("--pass-option `{option}`: {message}")]
    BadOption { option: String, message: String },
    #[error("fixed point `{name}` did not converge within {limit} iterations")]
    NoFixedPoint { name: String, limit: usize },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Parse(String),
}

pub type Result<T, E = PassError> = std::result::Result<T, E>;

/// A transformation of a module.
pub trait Pass {
    /// The registry name (`dce`, `flatten-call-graph`, ...).
    fn name(&self) -> &str;

    /// Transforms `module`; returns whether anything changed. A pass that returns `Ok(false)`
    /// must have left the module as it found it.
    fn run(&mut self, module: &mut Module) -> Result<bool>;

    /// Text the last run wants shown to the user (analysis printers use it); the pipeline
    /// collects it into [`RunReport::remarks`] and `tessera opt` prints it after the module
    /// as `//` comments.
    fn remarks(&mut self) -> Option<String> {
        None
    }
}

impl<P: Pass + ?Sized> Pass for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn run(&mut self, module: &mut Module) -> Result<bool> {
        (**self).run(module)
    }
    fn remarks(&mut self) -> Option<String> {
        (**self).remarks()
    }
}
