//! The printer: XLA's canonical text (`HloModule::ToString()`), long form by default.

use std::fmt::Write;

use super::float::format_float;
use super::PrintOptions;
use crate::analysis::order::PostOrders;
use crate::attr_table::{self, Codec, DimsField, Print, Value};
use crate::attrs::*;
use crate::instruction::{InstrId, Instruction};
use crate::literal::{Literal, LiteralData};
use crate::metadata::{FrontendAttributes, OpMetadata};
use crate::module::{AliasKind, Module};
use crate::opcode::Opcode;
use crate::shape::{checked_product, DimLevelType, Layout, Shape, TILE_COMBINE_DIM, UNBOUNDED_DIM};
use crate::sharding::{
    AxisRef, Mesh, MeshDevices, NamedSharding, ReductionOp, Sharding, ShardingKind, SubgroupType,
    TileAssignment,
};
use crate::tiling::iota_normal_form;
use crate::types::ElementType;

/// A shape as the text writes it, layout included.
pub fn shape_string(s: &Shape) -> String {
    let mut out = String::new();
    write_shape(&mut out, s, true);
    out
}

pub(super) fn print_module(m: &Module, opts: &PrintOptions) -> String {
    let mut out = String::with_capacity(m.instr_capacity() * 96 + 256);
    write_module(&mut out, m, opts, 0);
    out
}

/// The module at nesting `level` (0 at the top; a recovery module of `origin_recovery_table`
/// one deeper than its module): its header, computations and instructions are indented by four
/// spaces per level, as XLA indents them.
fn write_module(out: &mut String, m: &Module, opts: &PrintOptions, level: usize) {
    let ind_owned = "    ".repeat(level);
    let ind = ind_owned.as_str();
    out.push_str(ind);
    out.push_str("HloModule ");
    out.push_str(&m.name);
    let cfg = &m.config;
    if m.schedule.is_some() {
        out.push_str(", is_scheduled=true");
    }
    if let Some(l) = &cfg.entry_computation_layout {
        out.push_str(", entry_computation_layout={(");
        for (i, p) in l.parameters.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            write_shape(out, p, true);
        }
        out.push_str(")->");
        write_shape(out, &l.result, true);
        out.push('}');
    }
    if !cfg.input_output_alias.is_empty() {
        out.push_str(", input_output_alias={ ");
        for (i, a) in cfg.input_output_alias.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            write_index(out, &a.output_index);
            let _ = write!(out, ": ({}, ", a.parameter_number);
            write_index(out, &a.parameter_index);
            out.push_str(match a.kind {
                AliasKind::MayAlias => ", may-alias)",
                AliasKind::MustAlias => ", must-alias)",
            });
        }
        out.push_str(" }");
    }
    if !cfg.buffer_donor.is_empty() {
        out.push_str(", buffer_donor={ ");
        for (i, d) in cfg.buffer_donor.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "({}, ", d.parameter_number);
            write_index(out, &d.parameter_index);
            out.push(')');
        }
        out.push_str(" }");
    }
    if cfg.alias_passthrough_params {
        out.push_str(", alias_passthrough_params=true");
    }
    if let Some(v) = &cfg.allow_spmd_sharding_propagation_to_parameters {
        out.push_str(", allow_spmd_sharding_propagation_to_parameters=");
        write_bools(out, v);
    }
    if let Some(v) = &cfg.allow_spmd_sharding_propagation_to_output {
        out.push_str(", allow_spmd_sharding_propagation_to_output=");
        write_bools(out, v);
    }
    if cfg.replica_count != 1 {
        let _ = write!(out, ", replica_count={}", cfg.replica_count);
    }
    if cfg.num_partitions != 1 {
        let _ = write!(out, ", num_partitions={}", cfg.num_partitions);
    }
    if !cfg.frontend_attributes.is_empty() {
        out.push_str(", frontend_attributes=");
        write_frontend_attributes(out, &cfg.frontend_attributes);
    }
    if !cfg.origin_recovery_table.is_empty() {
        // As XLA: entries indented two more spaces than the module, a recovery module as an
        // escaped string one level deeper, the closing brace at the start of its line.
        out.push_str(", origin_recovery_table={\n");
        for (replaced, e) in &cfg.origin_recovery_table {
            out.push_str(ind);
            out.push_str("  ");
            write_original_array(out, replaced);
            out.push_str(" : ");
            write_original_array(out, &e.replacing);
            match &e.module {
                None => out.push('\n'),
                Some(rm) => {
                    out.push_str(",\n");
                    out.push_str(ind);
                    out.push_str("  \"\n");
                    let mut inner = String::new();
                    write_module(&mut inner, rm, opts, level + 1);
                    for b in inner.chars() {
                        match b {
                            '"' => out.push_str("\\\""),
                            '\\' => out.push_str("\\\\"),
                            c => out.push(c),
                        }
                    }
                    out.push('\n');
                    out.push_str(ind);
                    out.push_str("  \"\n");
                }
            }
        }
        out.push_str("}\n");
    }
    if !cfg.debug_attributes.is_empty() {
        // As XLA: on a line of its own after every other header attribute, not indented
        // (nor is its closing brace); the entries indented two more spaces than the module.
        out.push_str(",\ndebug_attributes={\n");
        for (i, (array, list)) in cfg.debug_attributes.iter().enumerate() {
            if i > 0 {
                out.push_str(",\n");
            }
            out.push_str(ind);
            out.push_str("  ");
            write_original_array(out, array);
            out.push_str(":(");
            for (j, a) in list.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                write_debug_attributes(out, a);
            }
            out.push(')');
        }
        out.push_str("\n}");
    }
    out.push_str("\n\n");
    let sf = &m.stack_frames;
    if !sf.is_empty() {
        out.push_str("FileNames\n");
        for (i, f) in sf.file_names.iter().enumerate() {
            let _ = write!(out, "{} ", i + 1);
            write_string(out, f);
            out.push('\n');
        }
        out.push_str("\nFunctionNames\n");
        for (i, f) in sf.function_names.iter().enumerate() {
            let _ = write!(out, "{} ", i + 1);
            write_string(out, f);
            out.push('\n');
        }
        out.push_str("\nFileLocations\n");
        for (i, l) in sf.file_locations.iter().enumerate() {
            let _ = writeln!(
                out,
                "{} {{file_name_id={} function_name_id={} line={} end_line={} column={} end_column={}}}",
                i + 1,
                l.file_name_id,
                l.function_name_id,
                l.line,
                l.end_line,
                l.column,
                l.end_column
            );
        }
        out.push_str("\nStackFrames\n");
        for (i, s) in sf.stack_frames.iter().enumerate() {
            let _ = writeln!(
                out,
                "{} {{file_location_id={} parent_frame_id={}}}",
                i + 1,
                s.file_location_id,
                s.parent_frame_id
            );
        }
        out.push('\n');
    }
    let pct = if opts.short_form { "" } else { "%" };
    let mut shapes = ShapeSpans::new(m.instr_capacity());
    // Made only for a computation stored out of order (never for a parsed module).
    let mut walker: Option<PostOrders> = None;
    let mut unscheduled = Vec::new();
    for &c in m.computations() {
        let comp = m.comp(c);
        out.push_str(ind);
        if comp.is_entry {
            out.push_str("ENTRY ");
        }
        out.push_str(pct);
        out.push_str(&comp.name);
        if !opts.short_form {
            out.push_str(" (");
            let mut first = true;
            for p in comp.parameters() {
                if !first {
                    out.push_str(", ");
                }
                first = false;
                let pi = m.instr(p);
                out.push_str(&pi.name);
                out.push_str(": ");
                write_shape(out, &pi.shape, false);
            }
            out.push_str(") -> ");
            match comp.root() {
                Some(r) => write_shape(out, &m.instr(r).shape, false),
                None => out.push_str("()"),
            }
        }
        out.push_str(" {\n");
        let sequence = m
            .schedule
            .as_ref()
            .and_then(|s| s.sequences.get(&c))
            .filter(|seq| seq.len() == comp.instructions().len());
        let body = out.len();
        let mut order: &[InstrId] = sequence.map_or(comp.instructions(), Vec::as_slice);
        // The stored order may use a name before defining it (a proto read as given,
        // `set_instruction_order`), which the parser refuses. Print it while it defines each
        // operand first; at the first use before a definition, print the computation again in
        // the def-before-use order. Checking as we print costs nothing extra on the orders every
        // parsed module has.
        let mut check = sequence.is_none();
        'print: loop {
            for &id in order {
                if check && !shapes.dependencies_printed(m.instr(id)) {
                    out.truncate(body);
                    for &done in comp.instructions() {
                        shapes.forget(done);
                    }
                    walker
                        .get_or_insert_with(|| PostOrders::new(m))
                        .def_before_use_into(m, c, &mut unscheduled);
                    order = &unscheduled;
                    check = false;
                    continue 'print;
                }
                let is_root = comp.root() == Some(id);
                out.push_str(ind);
                out.push_str(if is_root { "  ROOT " } else { "  " });
                write_instruction(out, m, id, opts, &mut shapes);
                out.push('\n');
            }
            break;
        }
        out.push_str(ind);
        out.push('}');
        if let Some(t) = &comp.execution_thread {
            out.push_str(", execution_thread=");
            write_string(out, t);
        }
        out.push_str("\n\n");
    }
}

/// `{log_mode=default,callback_id=5,partitioned=true,op_id=7}`: XLA's order, fields at
/// their defaults left out (so all of them at their defaults print as `{}`).
fn write_debug_attributes(out: &mut String, a: &crate::module::DebugAttributes) {
    use crate::module::DebugLogMode;
    let mut parts: Vec<String> = Vec::new();
    match a.log_mode {
        DebugLogMode::None => {}
        DebugLogMode::Default => parts.push("log_mode=default".into()),
        DebugLogMode::FusionDebugger => parts.push("log_mode=fusion_debugger".into()),
    }
    if a.callback_id != 0 {
        parts.push(format!("callback_id={}", a.callback_id));
    }
    if a.partitioned {
        parts.push("partitioned=true".into());
    }
    if a.op_id != 0 {
        parts.push(format!("op_id={}", a.op_id));
    }
    out.push('{');
    out.push_str(&parts.join(","));
    out.push('}');
}

/// `{"name" {1,0}}`, or `{""}` without a name (as XLA prints it).
fn write_original_array(out: &mut String, a: &crate::module::OriginalArray) {
    out.push('{');
    write_string(out, &a.instruction_name);
    if !a.shape_index.is_empty() {
        out.push(' ');
        write_index(out, &a.shape_index);
    }
    out.push('}');
}

fn write_index(out: &mut String, idx: &[i64]) {
    out.push('{');
    write_ints(out, idx, ",");
    out.push('}');
}

fn write_bools(out: &mut String, v: &[bool]) {
    out.push('{');
    for (i, b) in v.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(if *b { "true" } else { "false" });
    }
    out.push('}');
}

fn write_ints(out: &mut String, v: &[i64], sep: &str) {
    for (i, &x) in v.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        write_i64(out, x);
    }
}

/// `x` in decimal, without going through `core::fmt` (shapes and dimension lists are most of
/// what a large module prints, so this is the printer's hottest path).
#[inline]
pub(super) fn write_i64(out: &mut String, x: i64) {
    if (0..10).contains(&x) {
        out.push((b'0' + x as u8) as char);
        return;
    }
    let mut buf = [0u8; 20];
    let mut n = x.unsigned_abs();
    let mut k = buf.len();
    loop {
        k -= 1;
        buf[k] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if x < 0 {
        out.push('-');
    }
    // A few ASCII digits: pushed one by one, which costs less than validating them as UTF-8 for
    // one `push_str`.
    out.reserve(buf.len() - k);
    for &b in &buf[k..] {
        out.push(char::from(b));
    }
}

fn write_int_list(out: &mut String, v: &[i64]) {
    out.push('{');
    write_ints(out, v, ",");
    out.push('}');
}

/// Bytes `write_string` escapes: control characters, `"`, `'`, `\\`, DEL and every non-ASCII
/// byte (XLA's `CEscape` writes those in octal).
static NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = b < 0x20
            || b >= 0x7f
            || b == b'"' as usize
            || b == b'\\' as usize
            || b == b'\'' as usize;
        b += 1;
    }
    t
};

/// A string in double quotes with C escapes, as XLA's `CEscape`. Runs of bytes that need no
/// escape are copied as one slice.
pub(super) fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !NEEDS_ESCAPE[b as usize] {
            continue;
        }
        // Bytes in `start..i` are ASCII (anything else is escaped), so both ends are char
        // boundaries; `get` keeps that from ever being a panic.
        out.push_str(s.get(start..i).unwrap_or(""));
        start = i + 1;
        match b {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'"' => out.push_str("\\\""),
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            _ => {
                out.push('\\');
                out.push((b'0' + (b >> 6)) as char);
                out.push((b'0' + ((b >> 3) & 7)) as char);
                out.push((b'0' + (b & 7)) as char);
            }
        }
    }
    out.push_str(s.get(start..).unwrap_or(""));
    out.push('"');
}

pub(super) fn write_shape(out: &mut String, s: &Shape, layout: bool) {
    match s {
        Shape::Tuple(e) => {
            out.push('(');
            for (i, x) in e.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_shape(out, x, layout);
            }
            out.push(')');
        }
        Shape::Token => out.push_str("token[]"),
        Shape::Opaque => out.push_str("opaque[]"),
        Shape::Buffer(b) => {
            out.push_str("b(");
            write_shape(out, b, layout);
            out.push(')');
        }
        Shape::Array(a) => {
            out.push_str(a.ty.name());
            out.push('[');
            for (i, &d) in a.dims.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if d == UNBOUNDED_DIM {
                    out.push('?');
                } else {
                    if a.is_dynamic_dim(i) {
                        out.push_str("<=");
                    }
                    write_i64(out, d);
                }
            }
            out.push(']');
            if layout {
                if let Some(l) = &a.layout {
                    if !(a.dims.is_empty() && l.minor_to_major.is_empty() && l.is_plain()) {
                        write_layout(out, l);
                    }
                }
            }
        }
    }
}

fn write_layout(out: &mut String, l: &Layout) {
    out.push('{');
    write_ints(out, &l.minor_to_major, ",");
    if !l.is_plain() {
        out.push(':');
        if !l.dim_levels.is_empty() {
            out.push_str("D(");
            for (i, d) in l.dim_levels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push(match d.ty {
                    DimLevelType::Dense => 'D',
                    DimLevelType::Compressed => 'C',
                    DimLevelType::Singleton => 'S',
                    DimLevelType::LooseCompressed => 'H',
                });
                if !d.unique {
                    out.push('+');
                }
                if !d.ordered {
                    out.push('~');
                }
            }
            out.push(')');
        }
        if !l.tiles.is_empty() {
            out.push('T');
            for t in &l.tiles {
                out.push('(');
                for (i, &d) in t.dims.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    if d == TILE_COMBINE_DIM {
                        out.push('*');
                    } else {
                        let _ = write!(out, "{d}");
                    }
                }
                out.push(')');
            }
        }
        if l.tail_padding_alignment_in_elements > 1 {
            let _ = write!(out, "L({})", l.tail_padding_alignment_in_elements);
        }
        if let Some(t) = l.index_primitive_type {
            let _ = write!(out, "#({t})");
        }
        if let Some(t) = l.pointer_primitive_type {
            let _ = write!(out, "*({t})");
        }
        if l.element_size_in_bits != 0 {
            let _ = write!(out, "E({})", l.element_size_in_bits);
        }
        if l.memory_space != 0 {
            let _ = write!(out, "S({})", l.memory_space);
        }
        if !l.split_configs.is_empty() {
            out.push_str("SC");
            for s in &l.split_configs {
                let _ = write!(out, "({}:", s.dimension);
                write_ints(out, &s.split_indices, ",");
                out.push(')');
            }
        }
        if let Some(p) = &l.physical_shape {
            out.push_str("P(");
            write_shape(out, p, true);
            out.push(')');
        }
        if l.dynamic_shape_metadata_prefix_bytes != 0 {
            let _ = write!(out, "M({})", l.dynamic_shape_metadata_prefix_bytes);
        }
    }
    out.push('}');
}

/// Where in the output each instruction's shape (with its layout) was printed, so that printing
/// it again as an operand is a copy of those bytes instead of a walk over the shape. Large tuple
/// shapes repeated on every operand that uses them are most of what a tuple-heavy module prints.
struct ShapeSpans {
    /// Byte range in the output per instruction id; an empty range is "not printed yet".
    spans: Vec<(usize, usize)>,
}

impl ShapeSpans {
    fn new(n: usize) -> ShapeSpans {
        ShapeSpans {
            spans: vec![(0, 0); n],
        }
    }

    /// Whether every operand and control predecessor of `i` is printed already.
    fn dependencies_printed(&self, i: &Instruction) -> bool {
        let printed = |d: &InstrId| self.spans.get(d.index()).is_some_and(|&(s, e)| s < e);
        i.operands().iter().all(printed) && i.control_predecessors().iter().all(printed)
    }

    /// Forgets the printing of `id` (its text was taken back).
    fn forget(&mut self, id: InstrId) {
        if let Some(span) = self.spans.get_mut(id.index()) {
            *span = (0, 0);
        }
    }

    /// Prints the shape of `id` (layout included), copying an earlier printing when there is one.
    #[inline]
    fn write(&mut self, out: &mut String, id: InstrId, shape: &Shape) {
        let (start, end) = self.spans[id.index()];
        if start < end {
            out.extend_from_within(start..end);
        } else {
            let start = out.len();
            write_shape(out, shape, true);
            self.spans[id.index()] = (start, out.len());
        }
    }
}

fn write_instruction(
    out: &mut String,
    m: &Module,
    id: InstrId,
    opts: &PrintOptions,
    shapes: &mut ShapeSpans,
) {
    let i = m.instr(id);
    let pct = if opts.short_form { "" } else { "%" };
    out.push_str(pct);
    out.push_str(&i.name);
    out.push_str(" = ");
    shapes.write(out, id, &i.shape);
    out.push(' ');
    out.push_str(i.opcode.name());
    out.push('(');
    match i.opcode {
        Opcode::Parameter => {
            write_i64(out, i.attrs.parameter_number);
        }
        Opcode::Constant => {
            if let Some(l) = &i.attrs.literal {
                write_literal_value(out, l);
            }
        }
        _ => {
            for (k, &o) in i.operands().iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                let oi = m.instr(o);
                if !opts.short_form {
                    shapes.write(out, o, &oi.shape);
                    out.push(' ');
                }
                out.push_str(pct);
                out.push_str(&oi.name);
            }
        }
    }
    out.push(')');
    write_attributes(out, m, i, opts);
}

fn write_attributes(out: &mut String, m: &Module, i: &Instruction, opts: &PrintOptions) {
    use Opcode::*;
    let a = &i.attrs;
    // Opcode-specific attributes, in the order XLA prints them.
    if let Some(cid) = a.channel_id {
        out.push_str(", channel_id=");
        write_i64(out, cid);
    }
    match i.opcode {
        Iota => {
            out.push_str(", iota_dimension=");
            write_i64(out, a.iota_dimension);
        }
        Compare => {
            if let Some(c) = a.comparison {
                out.push_str(", direction=");
                out.push_str(c.direction.name());
                if let Some(t) = c.ty {
                    out.push_str(", type=");
                    out.push_str(t.name());
                }
            }
        }
        TopK => {
            let _ = write!(
                out,
                ", k={}, largest={}, is_stable={}",
                a.k, a.largest, a.is_stable
            );
        }
        _ => {}
    }
    // XLA always prints a collective's groups and a broadcast's dimensions, and the parser
    // gives them their empty defaults when absent; printing those defaults for an absent value
    // (from a proto or the builder) keeps print(parse(print(m))) == print(m).
    match &a.replica_groups {
        Some(rg) => {
            out.push_str(", replica_groups=");
            write_replica_groups(out, rg);
        }
        None if i.opcode.takes_replica_groups() => out.push_str(", replica_groups={}"),
        None => {}
    }
    if a.constrain_layout {
        out.push_str(", constrain_layout=true");
    }
    // reduce-scatter prints use_global_device_ids before dimensions, all-gather after.
    if a.use_global_device_ids && i.opcode == ReduceScatter {
        out.push_str(", use_global_device_ids=true");
    }
    match &a.dimensions {
        Some(d) => {
            out.push_str(", dimensions=");
            write_int_list(out, d);
        }
        None if i.opcode == Broadcast => out.push_str(", dimensions={}"),
        None => {}
    }
    if a.use_global_device_ids && i.opcode != ReduceScatter {
        out.push_str(", use_global_device_ids=true");
    }
    if a.has_dynamic_root {
        out.push_str(", has_dynamic_root=true");
    }
    if let Some(mode) = &a.collective_mode {
        let _ = write!(out, ", mode={mode}");
    }
    if let Some(p) = &a.source_target_pairs {
        out.push_str(", source_target_pairs={");
        for (k, (s, t)) in p.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            let _ = write!(out, "{{{s},{t}}}");
        }
        out.push('}');
    }
    if let Some(ss) = &a.permute_slice_sizes {
        out.push_str(", slice_sizes={");
        for (k, s) in ss.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            write_int_list(out, s);
        }
        out.push('}');
    }
    if let Some(s) = &a.slice {
        out.push_str(", slice={");
        for (k, d) in s.iter().enumerate() {
            if k > 0 {
                out.push_str(", ");
            }
            out.push('[');
            write_i64(out, d.start);
            out.push(':');
            write_i64(out, d.limit);
            if d.stride != 1 {
                out.push(':');
                write_i64(out, d.stride);
            }
            out.push(']');
        }
        out.push('}');
    }
    if let Some(p) = &a.padding {
        out.push_str(", padding=");
        let interior = p.iter().any(|d| d.interior != 0);
        for (k, d) in p.iter().enumerate() {
            if k > 0 {
                out.push('x');
            }
            write_i64(out, d.low);
            out.push('_');
            write_i64(out, d.high);
            if interior {
                out.push('_');
                write_i64(out, d.interior);
            }
        }
    }
    write_layout_and_dims_attrs(out, i);
    write_opcode_attrs(out, m, i);
    write_plain_attrs(out, i);
    write_custom_call_options(out, i);
    write_called_and_trailing_attrs(out, m, i, opts);
}

/// `write_attributes`: custom-call's target, windows, dimension numbers, precision.
fn write_layout_and_dims_attrs(out: &mut String, i: &Instruction) {
    use Opcode::*;
    let a = &i.attrs;
    if let Some(cc) = &a.custom_call {
        out.push_str(", custom_call_target=");
        write_string(out, &cc.target);
    }
    if let Some(w) = &a.window {
        out.push_str(", window=");
        write_window(out, w);
    }
    if let Some(d) = &a.conv_dims {
        out.push_str(", dim_labels=");
        write_dim_labels(out, d);
    }
    if matches!(i.opcode, Convolution | CustomCall) {
        if a.feature_group_count != 1 {
            let _ = write!(out, ", feature_group_count={}", a.feature_group_count);
        }
        if a.batch_group_count != 1 {
            let _ = write!(out, ", batch_group_count={}", a.batch_group_count);
        }
    }
    if let Some(k) = &a.conv_kind {
        let _ = write!(out, ", conv_kind={k}");
    }
    if let Some(d) = &a.dot_dims {
        write_dims(out, attr_table::DOT_DIMS, d);
    }
    if let Some(r) = &a.ragged_dot_dims {
        write_dims(out, attr_table::RAGGED_DOT_DIMS, r);
    }
    if let Some(g) = &a.gather_dims {
        write_dims(out, attr_table::GATHER_DIMS, g);
    }
    if let Some(s) = &a.scatter_dims {
        write_dims(out, attr_table::SCATTER_DIMS, s);
    }
    if let Some(p) = &a.precision {
        if !p.operand_precision.is_empty() {
            out.push_str(", operand_precision={");
            for (k, x) in p.operand_precision.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                out.push_str(x.name());
            }
            out.push('}');
        }
        if p.algorithm != 0 {
            let name = DOT_ALGORITHMS
                .iter()
                .find(|(_, v)| *v == p.algorithm)
                .map_or("unset", |(n, _)| n);
            let _ = write!(out, ", algorithm={name}");
        }
    }
}

/// `write_attributes`: the attributes of single opcodes, in the order XLA prints them.
fn write_opcode_attrs(out: &mut String, m: &Module, i: &Instruction) {
    use Opcode::*;
    let a = &i.attrs;
    match i.opcode {
        Sort if a.is_stable => out.push_str(", is_stable=true"),
        Rng => {
            if let Some(d) = a.distribution {
                out.push_str(match d {
                    RandomDistribution::Uniform => ", distribution=rng_uniform",
                    RandomDistribution::Normal => ", distribution=rng_normal",
                });
            }
        }
        RngBitGenerator => {
            if let Some(r) = a.rng_algorithm {
                out.push_str(match r {
                    RandomAlgorithm::Default => ", algorithm=rng_default",
                    RandomAlgorithm::ThreeFry => ", algorithm=rng_three_fry",
                    RandomAlgorithm::Philox => ", algorithm=rng_philox",
                });
            }
        }
        Fft => {
            if let Some(t) = a.fft_type {
                out.push_str(match t {
                    FftType::Fft => ", fft_type=FFT",
                    FftType::Ifft => ", fft_type=IFFT",
                    FftType::Rfft => ", fft_type=RFFT",
                    FftType::Irfft => ", fft_type=IRFFT",
                });
            }
        }
        TriangularSolve => {
            if let Some(t) = a.triangular_solve {
                if t.left_side {
                    out.push_str(", left_side=true");
                }
                if t.lower {
                    out.push_str(", lower=true");
                }
                if t.unit_diagonal {
                    out.push_str(", unit_diagonal=true");
                }
                out.push_str(match t.transpose_a {
                    TransposeKind::NoTranspose => ", transpose_a=NO_TRANSPOSE",
                    TransposeKind::Transpose => ", transpose_a=TRANSPOSE",
                    TransposeKind::Adjoint => ", transpose_a=ADJOINT",
                });
            }
        }
        Cholesky if a.lower => out.push_str(", lower=true"),
        Reshape => {
            if let Some(d) = a.inferred_dimension {
                let _ = write!(out, ", inferred_dimension={d}");
            }
        }
        Outfeed => {
            // Absent, the parser takes the data operand's shape; print that.
            let data = i.operands.first().map(|&o| &m.instr(o).shape);
            if let Some(s) = a.outfeed_shape.as_deref().or(data) {
                out.push_str(", outfeed_shape=");
                write_shape(out, s, true);
            }
        }
        Fusion => {
            if let Some(k) = a.fusion_kind {
                out.push_str(", kind=");
                out.push_str(k.name());
            }
        }
        Scan => {
            if let Some(s) = &a.scan {
                let _ = write!(out, ", num_carries={}", s.num_carries);
                if s.is_reverse {
                    out.push_str(", is_reverse=true");
                }
                if let Some(x) = s.is_associative {
                    let _ = write!(out, ", is_associative={x}");
                }
            }
        }
        Domain => {
            if let Some(d) = &a.domain {
                out.push_str(", domain={kind=");
                write_string(out, &d.kind);
                if let Some(e) = &d.entry {
                    out.push_str(", entry=");
                    write_sharding(out, e);
                }
                if let Some(e) = &d.exit {
                    out.push_str(", exit=");
                    write_sharding(out, e);
                }
                out.push('}');
            }
        }
        _ => {}
    }
}

/// `write_attributes`: custom-call's options after its target.
fn write_custom_call_options(out: &mut String, i: &Instruction) {
    let a = &i.attrs;
    if let Some(cc) = &a.custom_call {
        if let Some(l) = &a.literal {
            out.push_str(", literal=");
            write_shape(out, &l.shape, true);
            out.push(' ');
            write_literal_value(out, l);
        }
        if let Some(c) = &cc.operand_layout_constraints {
            out.push_str(", operand_layout_constraints={");
            for (k, s) in c.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                write_shape(out, s, true);
            }
            out.push('}');
        }
        if cc.has_side_effect {
            out.push_str(", custom_call_has_side_effect=true");
        }
        if !cc.output_to_operand_aliasing.is_empty() {
            out.push_str(", output_to_operand_aliasing=");
            write_aliasing(out, &cc.output_to_operand_aliasing);
        }
        match cc.padding_type {
            1 => out.push_str(", padding_type=PADDING_VALID"),
            2 => out.push_str(", padding_type=PADDING_SAME"),
            _ => {}
        }
        match cc.schedule {
            CustomCallSchedule::None => {}
            s => {
                out.push_str(", schedule=");
                out.push_str(s.name());
            }
        }
        match cc.api_version {
            CustomCallApiVersion::Original | CustomCallApiVersion::Unspecified => {}
            CustomCallApiVersion::StatusReturning => {
                out.push_str(", api_version=API_VERSION_STATUS_RETURNING")
            }
            CustomCallApiVersion::StatusReturningUnified => {
                out.push_str(", api_version=API_VERSION_STATUS_RETURNING_UNIFIED")
            }
            CustomCallApiVersion::TypedFfi => out.push_str(", api_version=API_VERSION_TYPED_FFI"),
        }
    }
}

/// `write_attributes`: aliasing, called computations, then what any instruction carries.
fn write_called_and_trailing_attrs(
    out: &mut String,
    m: &Module,
    i: &Instruction,
    opts: &PrintOptions,
) {
    use Opcode::*;
    let a = &i.attrs;
    let pct = if opts.short_form { "" } else { "%" };
    let comp_name = |k: usize| -> &str { &m.comp(i.called[k]).name };
    if !a.output_to_operand_aliasing.is_empty() {
        out.push_str(", output_to_operand_aliasing=");
        write_aliasing(out, &a.output_to_operand_aliasing);
    }
    // Called computations.
    let n = i.called.len();
    match i.opcode {
        While if n == 2 => {
            let _ = write!(
                out,
                ", condition={pct}{}, body={pct}{}",
                comp_name(0),
                comp_name(1)
            );
        }
        SelectAndScatter if n == 2 => {
            let _ = write!(
                out,
                ", select={pct}{}, scatter={pct}{}",
                comp_name(0),
                comp_name(1)
            );
        }
        Conditional if i.predicated_conditional && n == 2 => {
            let _ = write!(
                out,
                ", true_computation={pct}{}, false_computation={pct}{}",
                comp_name(0),
                comp_name(1)
            );
        }
        Conditional => {
            out.push_str(", branch_computations={");
            for k in 0..n {
                if k > 0 {
                    out.push_str(", ");
                }
                out.push_str(pct);
                out.push_str(comp_name(k));
            }
            out.push('}');
        }
        Fusion | AsyncStart | AsyncUpdate | AsyncDone if n == 1 => {
            out.push_str(", calls=");
            out.push_str(pct);
            out.push_str(comp_name(0));
        }
        CustomCall => {
            let uses_to_apply = a.custom_call_uses_to_apply;
            if uses_to_apply && n == 1 {
                out.push_str(", to_apply=");
                out.push_str(pct);
                out.push_str(comp_name(0));
            } else if n > 0 {
                out.push_str(", called_computations={");
                for k in 0..n {
                    if k > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(pct);
                    out.push_str(comp_name(k));
                }
                out.push('}');
            }
        }
        _ if n == 1 => {
            out.push_str(", to_apply=");
            out.push_str(pct);
            out.push_str(comp_name(0));
        }
        _ => {}
    }
    if i.opcode == Call && a.is_composite {
        out.push_str(", is_composite=true");
    }
    if let Some(r) = &a.result_accuracy {
        out.push_str(", result_accuracy=");
        match r {
            ResultAccuracy::Mode(m) => out.push_str(if *m == 1 {
                "{mode=HIGHEST}"
            } else {
                "{mode=DEFAULT}"
            }),
            ResultAccuracy::Tolerance { atol, rtol, ulps } => {
                out.push_str("{tolerance={atol=");
                format_float(ElementType::F64, atol.to_bits(), out);
                out.push_str(",rtol=");
                format_float(ElementType::F64, rtol.to_bits(), out);
                let _ = write!(out, ",ulps={ulps}}}}}");
            }
        }
    }
    if let Some(p) = &a.parameter_replication {
        out.push_str(", parameter_replication=");
        write_bools(out, p);
    }
    if let Some(s) = &i.sharding {
        out.push_str(", sharding=");
        write_sharding(out, s);
    }
    if !i.frontend_attributes.is_empty() {
        out.push_str(", frontend_attributes=");
        write_frontend_attributes(out, &i.frontend_attributes);
    }
    if let Some(s) = &a.statistics_viz {
        out.push_str(", statistics=");
        out.push_str(s);
    }
    if !i.control_predecessors().is_empty() {
        out.push_str(", control-predecessors={");
        for (k, &p) in i.control_predecessors().iter().enumerate() {
            if k > 0 {
                out.push_str(", ");
            }
            out.push_str(pct);
            out.push_str(&m.instr(p).name);
        }
        out.push('}');
    }
    if let Some(o) = &a.original_value {
        out.push_str(", origin=");
        out.push_str(o);
    }
    if opts.print_metadata {
        if let Some(md) = &i.metadata {
            out.push_str(", metadata=");
            write_metadata(out, md);
        }
    }
    if opts.print_backend_config {
        if let Some(b) = &i.backend_config {
            out.push_str(", backend_config=");
            if is_braced_block(b) {
                out.push_str(b);
            } else {
                write_string(out, b);
            }
        }
    }
}

/// The plain attributes of the table (`attr_table`) that `i`'s opcode carries, in table order.
fn write_plain_attrs(out: &mut String, i: &Instruction) {
    for row in attr_table::plain_rows() {
        let Codec::Plain { print, get, .. } = row.codec else {
            continue;
        };
        if !(row.on)(i.opcode) || (print == Print::IfSet && !(row.is_set)(i)) {
            continue;
        }
        write_table_value(out, row.key, get(&i.attrs));
    }
}

/// Writes a dimension-numbers family's keys, in the family's order; `IfSet` ones only when not
/// empty.
fn write_dims<T, P>(out: &mut String, family: &[DimsField<T, P>], d: &T) {
    for f in family {
        let v = (f.get)(d);
        if f.print == Print::IfSet && matches!(&v, Value::Ints(x) if x.is_empty()) {
            continue;
        }
        write_table_value(out, f.key, v);
    }
}

/// `, key=value` for a value of the attribute table.
fn write_table_value(out: &mut String, key: &str, v: Value) {
    out.push_str(", ");
    out.push_str(key);
    out.push('=');
    match v {
        Value::Absent => {}
        Value::Int(x) => write_i64(out, x),
        Value::F32(x) => format_float(ElementType::F32, u64::from(x.to_bits()), out),
        Value::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        Value::Ints(v) => write_int_list(out, &v),
        Value::Str(s) => write_string(out, &s),
        Value::Bytes(b) => write_string(out, &String::from_utf8_lossy(&b)),
    }
}

fn write_aliasing(out: &mut String, v: &[OutputOperandAlias]) {
    out.push('{');
    for (k, x) in v.iter().enumerate() {
        if k > 0 {
            out.push_str(", ");
        }
        write_index(out, &x.output_index);
        let _ = write!(out, ": ({}, ", x.operand);
        write_index(out, &x.operand_index);
        out.push(')');
    }
    out.push('}');
}

/// `<=[8]` or `<=[2,4]T(1,0)`: an iota of `n` devices reshaped and transposed, in its normal
/// form, as XLA writes it (`<=[2,4]` with no transpose is `<=[8]`, `<=[1,8]T(1,0)` too) and as
/// the parser reads it back. An iota that does not describe `n` devices prints as stored.
fn write_iota(out: &mut String, n: i64, reshape_dims: &[i64], transpose_perm: &[i64]) {
    let normal = iota_normal_form(n, reshape_dims, transpose_perm);
    let (reshape_dims, transpose_perm) = normal
        .as_ref()
        .map_or((reshape_dims, transpose_perm), |(r, p)| (r, p));
    out.push_str("<=[");
    write_ints(out, reshape_dims, ",");
    out.push(']');
    if !transpose_perm.is_empty() {
        out.push_str("T(");
        write_ints(out, transpose_perm, ",");
        out.push(')');
    }
}

pub(super) fn write_replica_groups(out: &mut String, rg: &ReplicaGroups) {
    match rg {
        ReplicaGroups::Explicit(groups) => {
            out.push('{');
            for (k, g) in groups.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                write_int_list(out, g);
            }
            out.push('}');
        }
        ReplicaGroups::Iota {
            num_groups,
            group_size,
            reshape_dims,
            transpose_perm,
        } => {
            let _ = write!(out, "[{num_groups},{group_size}]");
            // No reshape dims stand for one dimension of all the devices.
            let n = num_groups.saturating_mul(*group_size);
            let all = [n];
            let dims = if reshape_dims.is_empty() {
                &all[..]
            } else {
                reshape_dims
            };
            write_iota(out, n, dims, transpose_perm);
        }
        ReplicaGroups::Mesh(g) => {
            write_mesh(out, &g.mesh);
            out.push_str(" {");
            for (k, a) in g.group_axes.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                out.push_str(a);
            }
            out.push('}');
        }
    }
}

fn write_window(out: &mut String, w: &Window) {
    out.push('{');
    if !w.dims.is_empty() {
        out.push_str("size=");
        x_join(out, w.dims.iter().map(|d| d.size));
        if w.dims.iter().any(|d| d.stride != 1) {
            out.push_str(" stride=");
            x_join(out, w.dims.iter().map(|d| d.stride));
        }
        if w.dims
            .iter()
            .any(|d| d.padding_low != 0 || d.padding_high != 0)
        {
            out.push_str(" pad=");
            for (k, d) in w.dims.iter().enumerate() {
                if k > 0 {
                    out.push('x');
                }
                let _ = write!(out, "{}_{}", d.padding_low, d.padding_high);
            }
        }
        if w.dims.iter().any(|d| d.base_dilation != 1) {
            out.push_str(" lhs_dilate=");
            x_join(out, w.dims.iter().map(|d| d.base_dilation));
        }
        if w.dims.iter().any(|d| d.window_dilation != 1) {
            out.push_str(" rhs_dilate=");
            x_join(out, w.dims.iter().map(|d| d.window_dilation));
        }
        if w.dims.iter().any(|d| d.window_reversal) {
            out.push_str(" rhs_reversal=");
            x_join(out, w.dims.iter().map(|d| d.window_reversal as i64));
        }
    }
    out.push('}');
}

fn x_join(out: &mut String, it: impl Iterator<Item = i64>) {
    for (k, v) in it.enumerate() {
        if k > 0 {
            out.push('x');
        }
        write_i64(out, v);
    }
}

fn write_dim_labels(out: &mut String, d: &ConvDimensionNumbers) {
    fn labels(out: &mut String, rank: usize, a: (i64, char), b: (i64, char), spatial: &[i64]) {
        for p in 0..rank as i64 {
            if p == a.0 {
                out.push(a.1);
            } else if p == b.0 {
                out.push(b.1);
            } else if let Some(s) = spatial.iter().position(|&x| x == p) {
                let _ = write!(out, "{s}");
            } else {
                out.push('?');
            }
        }
    }
    let rank = d.input_spatial_dimensions.len() + 2;
    labels(
        out,
        rank,
        (d.input_batch_dimension, 'b'),
        (d.input_feature_dimension, 'f'),
        &d.input_spatial_dimensions,
    );
    out.push('_');
    labels(
        out,
        d.kernel_spatial_dimensions.len() + 2,
        (d.kernel_input_feature_dimension, 'i'),
        (d.kernel_output_feature_dimension, 'o'),
        &d.kernel_spatial_dimensions,
    );
    out.push_str("->");
    labels(
        out,
        d.output_spatial_dimensions.len() + 2,
        (d.output_batch_dimension, 'b'),
        (d.output_feature_dimension, 'f'),
        &d.output_spatial_dimensions,
    );
}

pub(super) fn write_sharding(out: &mut String, s: &Sharding) {
    if let ShardingKind::Tuple(elems) = &s.kind {
        out.push('{');
        for (k, e) in elems.iter().enumerate() {
            if k > 0 {
                out.push_str(", ");
            }
            write_sharding(out, e);
        }
        out.push('}');
        return;
    }
    if let ShardingKind::Named(n) = &s.kind {
        write_named_sharding(out, n, &s.metadata);
        return;
    }
    out.push('{');
    match &s.kind {
        ShardingKind::Replicated => out.push_str("replicated"),
        ShardingKind::Manual => out.push_str("manual"),
        ShardingKind::Unknown => out.push_str("unknown"),
        ShardingKind::Unreduced => out.push_str("unreduced"),
        ShardingKind::Maximal(d) => {
            let _ = write!(out, "maximal device={d}");
        }
        ShardingKind::Tiled(t) => {
            out.push_str("devices=[");
            write_ints(out, t.tile_assignment.dims(), ",");
            out.push(']');
            match &t.tile_assignment {
                TileAssignment::Explicit { devices, .. } => write_ints(out, devices, ","),
                TileAssignment::Iota {
                    dims,
                    reshape_dims,
                    transpose_perm,
                } => {
                    let n = checked_product(dims).unwrap_or(i64::MAX);
                    write_iota(out, n, reshape_dims, transpose_perm);
                }
            }
            if t.replicate_on_last_tile_dim {
                out.push_str(" last_tile_dim_replicate");
            }
            if !t.last_tile_dims.is_empty() {
                out.push_str(" last_tile_dims={");
                for (k, d) in t.last_tile_dims.iter().enumerate() {
                    if k > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(match d {
                        SubgroupType::Replicated => "replicated",
                        SubgroupType::Manual => "manual",
                        SubgroupType::Maximal => "maximal",
                        SubgroupType::Unreduced => "unreduced",
                    });
                }
                out.push('}');
            }
        }
        ShardingKind::Tuple(_) | ShardingKind::Named(_) => {}
    }
    if let Some(g) = s.shard_group {
        let _ = write!(
            out,
            " {} {}",
            if g.shard_as { "shard_as" } else { "shard_like" },
            g.id
        );
    }
    if !s.metadata.is_empty() {
        out.push_str(" metadata=");
        if s.metadata.len() == 1 {
            write_metadata(out, &s.metadata[0]);
        } else {
            out.push('{');
            for (k, md) in s.metadata.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                write_metadata(out, md);
            }
            out.push('}');
        }
    }
    out.push('}');
}

/// A named sharding as jaxlib 0.12 prints it: quoted axis names, `single_device[...]`, the
/// `replicated` / `unreduced` / `manual` forms, metadata always as a list. One exception: XLA
/// also prints `manual` when the manual axes leave out only axes of size 1, which reads back
/// as a different list; we print the list then (`[], manual={...}`), so the text reads back
/// as the same sharding. (A shard group cannot be written on a named sharding; the verifier
/// refuses one.)
fn write_named_sharding(out: &mut String, n: &NamedSharding, metadata: &[OpMetadata]) {
    out.push('{');
    let mesh = &n.mesh;
    if let Some(d) = mesh.single_device_id() {
        out.push_str("single_device[device_id=");
        write_i64(out, d);
        out.push(']');
    } else {
        write_mesh(out, mesh);
        let nothing_else = |a: &[AxisRef], b: &[AxisRef]| a.is_empty() && b.is_empty();
        if n.dims.is_empty() && nothing_else(&n.replicated, &n.manual) && n.unreduced.is_empty() {
            out.push_str(", replicated");
        } else if n.dims.is_empty() && nothing_else(&n.replicated, &n.manual) && n.is_unreduced() {
            out.push_str(", unreduced");
            write_reduction(out, n.reduction);
            if !n.is_every_axis(&n.unreduced) {
                write_axis_list(out, mesh, &n.unreduced);
            }
        } else if n.dims.is_empty()
            && nothing_else(&n.replicated, &n.unreduced)
            && n.is_every_axis(&n.manual)
        {
            out.push_str(", manual");
        } else {
            out.push_str(", [");
            for (k, d) in n.dims.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                out.push('{');
                for (j, a) in d.axes.iter().enumerate() {
                    if j > 0 {
                        out.push_str(", ");
                    }
                    write_axis_ref(out, mesh, a);
                }
                if !d.closed {
                    out.push_str(if d.axes.is_empty() { "?" } else { ", ?" });
                }
                out.push('}');
            }
            out.push(']');
            if !n.replicated.is_empty() {
                out.push_str(", replicated=");
                write_axis_list(out, mesh, &n.replicated);
            }
            if !n.unreduced.is_empty() {
                out.push_str(", unreduced");
                if n.reduction == ReductionOp::Sum {
                    out.push('=');
                } else {
                    write_reduction(out, n.reduction);
                }
                write_axis_list(out, mesh, &n.unreduced);
            }
            if !n.manual.is_empty() {
                out.push_str(", manual=");
                write_axis_list(out, mesh, &n.manual);
            }
        }
    }
    if !metadata.is_empty() {
        out.push_str(", metadata={");
        for (k, md) in metadata.iter().enumerate() {
            if k > 0 {
                out.push_str(", ");
            }
            write_metadata(out, md);
        }
        out.push('}');
    }
    out.push('}');
}

fn write_reduction(out: &mut String, r: ReductionOp) {
    out.push_str(match r {
        ReductionOp::Sum => "",
        ReductionOp::Max => "=max",
        ReductionOp::Min => "=min",
    });
}

/// `mesh['x'=2,'y'=4]`, with `, device_ids=(...)` unless the devices are in plain order.
fn write_mesh(out: &mut String, mesh: &Mesh) {
    out.push_str("mesh[");
    for (k, a) in mesh.axes.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        write_axis_name(out, &a.name);
        out.push('=');
        write_i64(out, a.size);
    }
    out.push(']');
    match &mesh.devices {
        MeshDevices::Iota => {}
        MeshDevices::Transposed {
            reshape_dims,
            transpose_perm,
        } => {
            out.push_str(", device_ids=([");
            write_ints(out, reshape_dims, ",");
            out.push_str("]T(");
            write_ints(out, transpose_perm, ",");
            out.push_str("))");
        }
        MeshDevices::Explicit(d) => {
            out.push_str(", device_ids=(");
            write_ints(out, d, ",");
            out.push(')');
        }
    }
}

/// `'name'` with C escapes where needed (XLA writes the name raw, which its own lexer cannot
/// read back when the name holds a quote).
fn write_axis_name(out: &mut String, name: &str) {
    out.push('\'');
    if name
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'\'' && b != b'\\')
    {
        out.push_str(name);
    } else {
        for b in name.bytes() {
            match b {
                b'\n' => out.push_str("\\n"),
                b'\t' => out.push_str("\\t"),
                b'\'' => out.push_str("\\'"),
                b'\\' => out.push_str("\\\\"),
                0x20..=0x7e => out.push(b as char),
                _ => {
                    let _ = write!(out, "\\{:03o}", b);
                }
            }
        }
    }
    out.push('\'');
}

fn write_axis_ref(out: &mut String, mesh: &Mesh, a: &AxisRef) {
    match mesh.axes.get(a.axis) {
        Some(axis) => write_axis_name(out, &axis.name),
        // Not a valid sharding (the verifier says so); printed as XLA's index form.
        None => write_axis_name(out, &a.axis.to_string()),
    }
    if let Some(s) = a.sub {
        out.push_str(":(");
        write_i64(out, s.pre_size);
        out.push(')');
        write_i64(out, s.size);
    }
}

fn write_axis_list(out: &mut String, mesh: &Mesh, axes: &[AxisRef]) {
    out.push('{');
    for (k, a) in axes.iter().enumerate() {
        if k > 0 {
            out.push_str(", ");
        }
        write_axis_ref(out, mesh, a);
    }
    out.push('}');
}

pub(super) fn write_metadata(out: &mut String, md: &OpMetadata) {
    out.push('{');
    let mut first = true;
    let mut sep = |out: &mut String| {
        if !first {
            out.push(' ');
        }
        first = false;
    };
    for (name, v) in [
        ("op_type", &md.op_type),
        ("op_name", &md.op_name),
        ("source_file", &md.source_file),
    ] {
        if !v.is_empty() {
            sep(out);
            out.push_str(name);
            out.push('=');
            write_string(out, v);
        }
    }
    for (name, v) in [
        ("source_line", md.source_line),
        ("source_end_line", md.source_end_line),
        ("source_column", md.source_column),
        ("source_end_column", md.source_end_column),
    ] {
        if v != 0 {
            sep(out);
            out.push_str(name);
            out.push('=');
            write_i64(out, i64::from(v));
        }
    }
    if !md.profile_type.is_empty() {
        sep(out);
        out.push_str("profile_type={");
        for (k, p) in md.profile_type.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            match p {
                0 => out.push_str("INVALID"),
                1 => out.push_str("WINDOW"),
                2 => out.push_str("FLAG"),
                3 => out.push_str("INTEGER"),
                x => {
                    let _ = write!(out, "{x}");
                }
            }
        }
        out.push('}');
    }
    if !md.deduplicated_name.is_empty() {
        sep(out);
        out.push_str("deduplicated_name=");
        write_string(out, &md.deduplicated_name);
    }
    if md.preserve_layout {
        sep(out);
        out.push_str("preserve_layout=true");
    }
    if md.size_of_generated_code_in_bytes != 0 {
        sep(out);
        let _ = write!(
            out,
            "size_of_generated_code_in_bytes={}",
            md.size_of_generated_code_in_bytes
        );
    }
    if md.size_of_memory_working_set_in_bytes != 0 {
        sep(out);
        let _ = write!(
            out,
            "size_of_memory_working_set_in_bytes={}",
            md.size_of_memory_working_set_in_bytes
        );
    }
    if md.stack_frame_id != 0 {
        sep(out);
        out.push_str("stack_frame_id=");
        write_i64(out, i64::from(md.stack_frame_id));
    }
    if !md.scheduling_name.is_empty() {
        sep(out);
        out.push_str("scheduling_name=");
        write_string(out, &md.scheduling_name);
    }
    out.push('}');
}

fn write_frontend_attributes(out: &mut String, f: &FrontendAttributes) {
    out.push('{');
    for (k, (key, v)) in f.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        let plain = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if plain {
            out.push_str(key);
        } else {
            write_string(out, key);
        }
        out.push('=');
        if is_braced_block(v) {
            out.push_str(v);
        } else {
            write_string(out, v);
        }
    }
    out.push('}');
}

/// The value part of a literal: `1.5`, `{1, 2}`, `{ {1, 2}, {3, 4} }`, `(1, {2})`.
pub(super) fn write_literal_value(out: &mut String, l: &Literal) {
    match (&l.shape, &l.data) {
        (Shape::Tuple(_), LiteralData::Tuple(parts)) => {
            out.push('(');
            for (k, p) in parts.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                write_literal_value(out, p);
            }
            out.push(')');
        }
        (Shape::Array(a), LiteralData::Array(bytes)) => {
            let w = a.ty.byte_size().max(1);
            let elem = |out: &mut String, k: usize| {
                let b = bytes.get(k * w..(k + 1) * w).unwrap_or(&[]);
                write_element(out, a.ty, b, a.rank() == 0);
            };
            if a.rank() == 0 {
                elem(out, 0);
                return;
            }
            if a.dims.contains(&UNBOUNDED_DIM) {
                out.push_str("{}");
                return;
            }
            let rank = a.rank();
            let mut idx = 0usize;
            fn rec(
                out: &mut String,
                dims: &[i64],
                d: usize,
                rank: usize,
                idx: &mut usize,
                elem: &dyn Fn(&mut String, usize),
            ) {
                let n = dims[d].max(0) as usize;
                let spaced = rank > 1 && n > 0;
                out.push_str(if spaced { "{ " } else { "{" });
                for k in 0..n {
                    if k > 0 {
                        out.push_str(", ");
                    }
                    if d + 1 < rank {
                        rec(out, dims, d + 1, rank, idx, elem);
                    } else {
                        elem(out, *idx);
                        *idx += 1;
                    }
                }
                out.push_str(if spaced { " }" } else { "}" });
            }
            rec(out, &a.dims, 0, rank, &mut idx, &elem);
        }
        _ => out.push_str("{...}"),
    }
}

fn write_element(out: &mut String, ty: ElementType, b: &[u8], scalar: bool) {
    let mut raw = [0u8; 8];
    let n = b.len().min(8);
    raw[..n].copy_from_slice(&b[..n]);
    let u = u64::from_le_bytes(raw);
    match ty {
        ElementType::Pred => {
            if scalar {
                out.push_str(if u != 0 { "true" } else { "false" });
            } else {
                out.push(if u != 0 { '1' } else { '0' });
            }
        }
        ElementType::C64 => {
            out.push('(');
            format_float(ElementType::F32, u & 0xffff_ffff, out);
            out.push_str(", ");
            format_float(ElementType::F32, u >> 32, out);
            out.push(')');
        }
        ElementType::C128 => {
            let im = b
                .get(8..16)
                .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])));
            out.push('(');
            format_float(ElementType::F64, u, out);
            out.push_str(", ");
            format_float(ElementType::F64, im, out);
            out.push(')');
        }
        _ if ty.is_signed_int() => {
            let bits = (ty.byte_size() * 8) as u32;
            let v = if bits == 64 {
                u as i64
            } else {
                ((u << (64 - bits)) as i64) >> (64 - bits)
            };
            write_i64(out, v);
        }
        _ if ty.is_unsigned_int() => match i64::try_from(u) {
            Ok(v) => write_i64(out, v),
            Err(_) => {
                let _ = write!(out, "{u}");
            }
        },
        _ if ty.is_float() => format_float(ty, u, out),
        _ => out.push('?'),
    }
}

/// True if `s` is one `{...}` block that the parser reads back as written: balanced braces
/// (strings respected, as the parser scans them) closing exactly at the end. Other strings that
/// merely start with `{` are printed quoted.
fn is_braced_block(s: &str) -> bool {
    let b = s.as_bytes();
    if b.first() != Some(&b'{') {
        return false;
    }
    let mut depth = 0usize;
    let mut p = 0;
    while p < b.len() {
        match b[p] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return p + 1 == b.len();
                }
            }
            b'"' => {
                p += 1;
                while p < b.len() && b[p] != b'"' {
                    if b[p] == b'\\' {
                        p += 1;
                    }
                    p += 1;
                }
                if p >= b.len() {
                    return false;
                }
            }
            _ => {}
        }
        p += 1;
    }
    false
}
