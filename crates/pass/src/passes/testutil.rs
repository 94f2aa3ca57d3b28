//! Hand-built modules for pass unit tests (the filetests cover the text form): the IR crate's
//! builders plus name listings.

pub use tessera_hlo::analysis::testutil::*;
use tessera_hlo::{CompId, Module};

/// Instruction names of `c` in stored order.
pub fn names(m: &Module, c: CompId) -> Vec<String> {
    m.comp(c)
        .instructions()
        .iter()
        .map(|&i| m.instr(i).name().to_string())
        .collect()
}

/// Computation names in stored order.
pub fn comp_names(m: &Module) -> Vec<String> {
    m.computations()
        .iter()
        .map(|&c| m.comp(c).name().to_string())
        .collect()
}
