//! Analysis printers: passes that change nothing and report an analysis of the module as
//! remarks (printed after the module by `tessera opt`), so analyses have filetests too.

use std::fmt::Write;

use tessera_hlo::analysis::{
    computation_post_order, shape_size, CallGraph, Liveness, TuplePointsTo,
};
use tessera_hlo::Module;

use crate::options::NoOptions;
use crate::registry::RegisteredPass;
use crate::{Pass, Result};

macro_rules! printer {
    ($ty:ident, $name:literal, $doc:literal, $f:path) => {
        #[derive(Clone, Debug, Default)]
        pub struct $ty {
            out: Option<String>,
        }

        impl RegisteredPass for $ty {
            type Options = NoOptions;
            const NAME: &'static str = $name;
            const DOC: &'static str = $doc;
            fn with_options(_: NoOptions) -> $ty {
                $ty::default()
            }
        }

        impl Pass for $ty {
            fn name(&self) -> &str {
                Self::NAME
            }
            fn run(&mut self, module: &mut Module) -> Result<bool> {
                self.out = Some($f(module));
                Ok(false)
            }
            fn remarks(&mut self) -> Option<String> {
                self.out.take()
            }
        }
    };
}

printer!(
    PrintPointsTo,
    "print-points-to",
    "report tuple points-to sets of every instruction (changes nothing)",
    points_to_report
);
printer!(
    PrintCallGraph,
    "print-call-graph",
    "report call sites, callers and call contexts of every computation (changes nothing)",
    call_graph_report
);
printer!(
    PrintLiveness,
    "print-liveness",
    "report buffer live ranges and peak memory per computation along its schedule (changes nothing)",
    liveness_report
);

/// `computation NAME:` blocks with `{index}: %buffer[index], ...` per instruction.
pub fn points_to_report(m: &Module) -> String {
    TuplePointsTo::new(m).dump(m)
}

pub fn call_graph_report(m: &Module) -> String {
    let cg = CallGraph::new(m);
    let mut o = String::new();
    for c in computation_post_order(m, true) {
        let callers: Vec<&str> = cg.callers(c).iter().map(|&x| m.comp(x).name()).collect();
        let _ = writeln!(
            o,
            "{}: context={} depth={} callers=[{}]",
            m.comp(c).name(),
            cg.context(c).name(),
            cg.depth(c),
            callers.join(", ")
        );
        for s in cg.callsites(c) {
            let callees: Vec<&str> = s.callees.iter().map(|&x| m.comp(x).name()).collect();
            let _ = writeln!(
                o,
                "  %{} ({}) -> {} [{}]",
                m.instr(s.instruction).name(),
                m.instr(s.instruction).opcode(),
                callees.join(", "),
                s.context.name()
            );
        }
    }
    let _ = writeln!(o, "flattened: {}", cg.is_flattened(m));
    o
}

pub fn liveness_report(m: &Module) -> String {
    let pt = TuplePointsTo::new(m);
    let mut o = String::new();
    for c in computation_post_order(m, true) {
        let scheduled = m
            .schedule
            .as_ref()
            .is_some_and(|s| s.sequences.contains_key(&c));
        let lv = Liveness::for_schedule(m, &pt, c, &shape_size);
        let at = lv
            .peak_position()
            .map(|p| format!(" at %{}", m.instr(lv.sequence[p]).name()))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "{} ({}): peak {} bytes{at}",
            m.comp(c).name(),
            if scheduled { "schedule" } else { "post-order" },
            lv.peak_memory()
        );
        let profile: Vec<String> = lv.memory_profile().iter().map(|b| b.to_string()).collect();
        let _ = writeln!(o, "  memory: {}", profile.join(" "));
        for r in lv.ranges() {
            let _ = writeln!(
                o,
                "  {}: {}..{} {} bytes",
                pt.buffer_name(m, r.buffer),
                r.start,
                r.end,
                r.size
            );
        }
    }
    o
}
