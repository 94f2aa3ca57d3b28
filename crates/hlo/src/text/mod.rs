//! XLA's HLO text format: a parser and a printer.
//!
//! [`parse_module`] reads everything XLA's `HloModule::ToString()` prints (long form with `%`
//! names, signatures and operand shapes, and the short form without them), plus the header
//! attributes, JAX's stack-frame tables, and every attribute of every opcode that XLA's parser
//! accepts. Errors carry the line and column and say what was expected and what was found; the
//! parser never panics on any input.
//!
//! [`print_module`] prints XLA's canonical long form, which XLA's parser reads back; printing a
//! parsed module and parsing it again gives an equal module, and printing that again gives the
//! same bytes. See `docs/text-format.md`.

mod cursor;
pub(crate) mod float;
mod parser;
mod printer;
mod values;

#[cfg(test)]
mod tests;

pub use crate::module_diff::module_diff;
pub use values::MAX_DEVICES;

use crate::module::Module;
use crate::shape::Shape;

/// A syntax or consistency error in HLO text, with its 1-based position.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// How [`print_module`] prints.
#[derive(Clone, Debug)]
pub struct PrintOptions {
    /// Names without `%`, no operand shapes, no computation signatures.
    pub short_form: bool,
    pub print_metadata: bool,
    pub print_backend_config: bool,
}

impl Default for PrintOptions {
    fn default() -> Self {
        PrintOptions {
            short_form: false,
            print_metadata: true,
            print_backend_config: true,
        }
    }
}

impl PrintOptions {
    /// The short form: no `%` sigils, no operand shapes, no signatures.
    pub fn short() -> PrintOptions {
        PrintOptions {
            short_form: true,
            ..PrintOptions::default()
        }
    }
}

/// Parses one HLO module.
pub fn parse_module(text: &str) -> Result<Module, ParseError> {
    parser::Parser::new(text).parse_module()
}

/// Parses a shape such as `f32[2,<=3]{1,0:T(8,128)}` or `(s32[], token[])`.
pub fn parse_shape(text: &str) -> Result<Shape, ParseError> {
    let mut p = parser::Parser::new(text);
    let s = p.parse_shape()?;
    if !p.c.at_end()? {
        return Err(p.c.expected("end of input after the shape"));
    }
    Ok(s)
}

/// Parses a sharding such as `{devices=[2,2]<=[4] last_tile_dim_replicate}`.
pub fn parse_sharding(text: &str) -> Result<crate::sharding::Sharding, ParseError> {
    let mut p = parser::Parser::new(text);
    let s = p.parse_sharding()?;
    if !p.c.at_end()? {
        return Err(p.c.expected("end of input after the sharding"));
    }
    Ok(s)
}

/// Parses replica groups in any of their three spellings.
pub fn parse_replica_groups(text: &str) -> Result<crate::attrs::ReplicaGroups, ParseError> {
    let mut p = parser::Parser::new(text);
    let s = p.parse_replica_groups()?;
    if !p.c.at_end()? {
        return Err(p.c.expected("end of input after the replica groups"));
    }
    Ok(s)
}

/// Parses a literal of the given shape, e.g. `{ {1, 2}, {3, 4} }` for `f32[2,2]`.
pub fn parse_literal(shape: &Shape, text: &str) -> Result<crate::literal::Literal, ParseError> {
    let mut p = parser::Parser::new(text);
    let l = p.parse_literal(shape)?;
    if !p.c.at_end()? {
        return Err(p.c.expected("end of input after the literal"));
    }
    Ok(l)
}

/// True when `name` can stand as a module, computation or instruction name in the text: one
/// or more letters, digits, `_`, `.` or `-` (what the parser reads as a name).
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(cursor::is_name_byte)
}

/// Checks that `module` prints as text that parses again; the error names the instruction (or
/// the line) and the parser's complaint. The proto reader refuses fields on opcodes that
/// cannot carry them (`attr_table.rs`), and a module the verifier accepts prints as text
/// that parses; what is left is a module read from a proto that the verifier has not
/// accepted (`tessera from-proto --no-verify`: an operand or callee count the text cannot
/// spell), which is what this is for.
pub fn check_reparses(module: &Module) -> Result<(), String> {
    let printed = print_module(module, &PrintOptions::default());
    let Err(e) = parse_module(&printed) else {
        return Ok(());
    };
    let line = printed.lines().nth(e.line.saturating_sub(1)).unwrap_or("");
    let name = line
        .trim_start()
        .trim_start_matches("ROOT ")
        .split_once(" = ")
        .map(|(n, _)| n.trim_start_matches('%'));
    Err(match name {
        Some(n) if !n.contains(' ') => {
            format!("instruction %{n} cannot be written as text: {}", e.message)
        }
        _ => format!(
            "the module cannot be written as text: line {} of its text: {}",
            e.line, e.message
        ),
    })
}

/// Prints a module in XLA's canonical text form.
pub fn print_module(module: &Module, options: &PrintOptions) -> String {
    printer::print_module(module, options)
}

/// A shape as the text format writes it.
pub fn shape_to_string(shape: &Shape) -> String {
    printer::shape_string(shape)
}

/// A shape as the text format writes it but without layout (`f32[128,64]`, `(f32[2], s32[])`,
/// `s32[<=8]`), as messages name shapes.
pub(crate) fn shape_to_string_without_layout(shape: &Shape) -> String {
    let mut out = String::new();
    printer::write_shape(&mut out, shape, false);
    out
}

/// A sharding as the text format writes it (`{devices=[2]0,1}`).
pub fn sharding_to_string(s: &crate::sharding::Sharding) -> String {
    let mut out = String::new();
    printer::write_sharding(&mut out, s);
    out
}

/// The value part of a literal as the text format writes it (`{1, 2}`).
pub fn literal_to_string(l: &crate::literal::Literal) -> String {
    let mut out = String::new();
    printer::write_literal_value(&mut out, l);
    out
}

impl Module {
    /// The module in XLA's canonical long text form.
    pub fn to_text(&self) -> String {
        print_module(self, &PrintOptions::default())
    }
}

impl std::fmt::Display for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_text())
    }
}
