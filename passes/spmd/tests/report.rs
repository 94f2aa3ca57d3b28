//! The pass leaves no instruction without a sharding silently: `PropagationReport::undecided`
//! names each one with the reason, and `replicate_undecided` gives them `{replicated}`.

use tessera_hlo::text::parse_module;
use tessera_spmd::{propagate, PropagationOptions};

const MODULE: &str = r#"HloModule module

%cond {
  %vars.cond = (u32[], f32[8,4]) parameter(0)
  %count.cond = u32[] get-tuple-element(%vars.cond), index=0
  %limit = u32[] constant(10)
  ROOT %lt = pred[] compare(%count.cond, %limit), direction=LT
}

%body {
  %vars = (u32[], f32[8,4]) parameter(0)
  %count = u32[] get-tuple-element(%vars), index=0
  %acc = f32[8,4] get-tuple-element(%vars), index=1
  %one = u32[] constant(1)
  %count.1 = u32[] add(%count, %one)
  %acc.1 = f32[8,4] add(%acc, %acc)
  ROOT %tuple = (u32[], f32[8,4]) tuple(%count.1, %acc.1)
}

ENTRY %entry {
  %p0 = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  %p1 = f32[8,4] parameter(1)
  %zero = u32[] constant(0)
  %init = (u32[], f32[8,4]) tuple(%zero, %p0)
  %while = (u32[], f32[8,4]) while(%init), body=%body, condition=%cond
  %res = f32[8,4] get-tuple-element(%while), index=1
  %lonely = f32[8,4] negate(%p1)
  ROOT %out = f32[8,4] add(%res, %lonely)
}
"#;

fn reasons(options: &PropagationOptions) -> Vec<(String, String)> {
    let mut module = parse_module(MODULE).expect("the module parses");
    let (_, report) = propagate(&mut module, options).expect("propagation runs");
    report
        .undecided
        .into_iter()
        .map(|u| (u.name, u.reason))
        .collect()
}

#[test]
fn undecided_instructions_are_named_with_a_reason() {
    let r = reasons(&PropagationOptions::default());
    let reason = |name: &str| {
        r.iter()
            .find(|(n, _)| n == name)
            .map(|(_, why)| why.clone())
            .unwrap_or_else(|| panic!("{name} is not reported: {r:?}"))
    };
    assert!(reason("out").contains("entry output"), "{r:?}");
    assert!(reason("p1").contains("entry parameter 1"), "{r:?}");
    assert!(reason("lt").contains("loop condition"), "{r:?}");
    // Nothing reaches the negate (its operand is an unsharded parameter, its user the output)
    // nor the loop limit (its only user is the condition's root).
    assert!(reason("lonely").contains("no sharding reaches it"), "{r:?}");
    assert!(reason("limit").contains("no sharding reaches it"), "{r:?}");
    // Everything else, the loop state included, got a sharding.
    assert_eq!(r.len(), 5, "{r:?}");
}

#[test]
fn replicate_undecided_fills_them_in() {
    let options = PropagationOptions {
        replicate_undecided: true,
        ..PropagationOptions::default()
    };
    let mut module = parse_module(MODULE).expect("the module parses");
    let (_, report) = propagate(&mut module, &options).expect("propagation runs");
    assert_eq!(report.undecided.len(), 5);
    for u in &report.undecided {
        let s = module.instr(u.instr).sharding.as_ref();
        assert!(s.is_some_and(|s| s.is_replicated()), "{}: {s:?}", u.name);
    }
}
