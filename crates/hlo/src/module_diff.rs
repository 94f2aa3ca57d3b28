//! Structural comparison of two modules, for round-trip checks: same computations in the same
//! order, same instructions (names, opcodes, shapes, operands and callees by name, attributes,
//! shardings, metadata, frontend attributes, backend config, control edges), same config, stack
//! frames and schedule.

use crate::instruction::InstrId;
use crate::module::Module;

/// `None` if the modules are structurally equal, otherwise a description of the first difference.
pub fn module_diff(a: &Module, b: &Module) -> Option<String> {
    if a.name != b.name {
        return Some(format!("module name {:?} vs {:?}", a.name, b.name));
    }
    if a.config != b.config {
        return Some(format!("config {:?}\n vs {:?}", a.config, b.config));
    }
    if a.stack_frames != b.stack_frames {
        return Some("stack frame tables differ".to_string());
    }
    let (ca, cb) = (a.computations(), b.computations());
    if ca.len() != cb.len() {
        return Some(format!("{} computations vs {}", ca.len(), cb.len()));
    }
    let iname = |m: &Module, i: InstrId| m.instr(i).name.clone();
    for (&x, &y) in ca.iter().zip(cb) {
        let (cx, cy) = (a.comp(x), b.comp(y));
        if cx.name != cy.name
            || cx.is_entry != cy.is_entry
            || cx.execution_thread != cy.execution_thread
        {
            return Some(format!("computation {} vs {}", cx.name, cy.name));
        }
        if cx.instructions().len() != cy.instructions().len() {
            return Some(format!(
                "computation {}: instruction counts differ",
                cx.name
            ));
        }
        if cx.root().map(|r| iname(a, r)) != cy.root().map(|r| iname(b, r)) {
            return Some(format!("computation {}: roots differ", cx.name));
        }
        let px: Vec<String> = cx.parameters().map(|p| iname(a, p)).collect();
        let py: Vec<String> = cy.parameters().map(|p| iname(b, p)).collect();
        if px != py {
            return Some(format!("computation {}: parameters differ", cx.name));
        }
        for (&i, &j) in cx.instructions().iter().zip(cy.instructions()) {
            let (ix, iy) = (a.instr(i), b.instr(j));
            let here = || format!("{} / %{}", cx.name, ix.name);
            if ix.name != iy.name {
                return Some(format!("{}: name vs %{}", here(), iy.name));
            }
            if ix.opcode != iy.opcode {
                return Some(format!("{}: opcode {} vs {}", here(), ix.opcode, iy.opcode));
            }
            if ix.shape != iy.shape {
                return Some(format!(
                    "{}: shape {:?} vs {:?}",
                    here(),
                    ix.shape,
                    iy.shape
                ));
            }
            let ox: Vec<String> = ix.operands().iter().map(|&o| iname(a, o)).collect();
            let oy: Vec<String> = iy.operands().iter().map(|&o| iname(b, o)).collect();
            if ox != oy {
                return Some(format!("{}: operands {ox:?} vs {oy:?}", here()));
            }
            let kx: Vec<&str> = ix.called.iter().map(|&c| a.comp(c).name.as_str()).collect();
            let ky: Vec<&str> = iy.called.iter().map(|&c| b.comp(c).name.as_str()).collect();
            if kx != ky {
                return Some(format!("{}: called {kx:?} vs {ky:?}", here()));
            }
            if ix.attrs != iy.attrs {
                return Some(format!(
                    "{}: attributes\n {:?}\n vs {:?}",
                    here(),
                    ix.attrs,
                    iy.attrs
                ));
            }
            if ix.sharding != iy.sharding {
                return Some(format!(
                    "{}: sharding {:?} vs {:?}",
                    here(),
                    ix.sharding,
                    iy.sharding
                ));
            }
            if ix.metadata != iy.metadata {
                return Some(format!("{}: metadata differs", here()));
            }
            if ix.frontend_attributes != iy.frontend_attributes {
                return Some(format!("{}: frontend attributes differ", here()));
            }
            if ix.backend_config != iy.backend_config {
                return Some(format!("{}: backend config differs", here()));
            }
            if ix.predicated_conditional != iy.predicated_conditional {
                return Some(format!("{}: conditional form differs", here()));
            }
            let px: Vec<String> = ix
                .control_predecessors()
                .iter()
                .map(|&o| iname(a, o))
                .collect();
            let py: Vec<String> = iy
                .control_predecessors()
                .iter()
                .map(|&o| iname(b, o))
                .collect();
            if px != py {
                return Some(format!("{}: control predecessors {px:?} vs {py:?}", here()));
            }
        }
    }
    match (&a.schedule, &b.schedule) {
        (None, None) => {}
        (Some(x), Some(y)) => {
            let names = |m: &Module, s: &crate::module::Schedule| -> Vec<(String, Vec<String>)> {
                s.sequences
                    .iter()
                    .map(|(c, seq)| {
                        (
                            m.comp(*c).name.clone(),
                            seq.iter().map(|&i| m.instr(i).name.clone()).collect(),
                        )
                    })
                    .collect()
            };
            if names(a, x) != names(b, y) {
                return Some("schedules differ".to_string());
            }
        }
        _ => return Some("one module is scheduled, the other not".to_string()),
    }
    if a.entry().map(|c| a.comp(c).name.clone()) != b.entry().map(|c| b.comp(c).name.clone()) {
        return Some("entry computations differ".to_string());
    }
    None
}
