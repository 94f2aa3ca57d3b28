//! Cases of XLA's sharding_propagation_test.cc where the pass must fail, with XLA's message: an
//! instruction of a while body placed on another device than the body's channel instructions.
//! (Filetests check output only, so these live here.)

use tessera_hlo::text::parse_module;
use tessera_spmd::{propagate, PropagationOptions};

const COND: &str = r#"
%cond {
  %vars.cond = (u32[], f32[]) parameter(0)
  %count.cond = u32[] get-tuple-element(%vars.cond), index=0
  %limit = u32[] constant(10)
  ROOT %lt = pred[] compare(%count.cond, %limit), direction=LT
}
"#;

fn error_of(body: &str, while_sharding: &str) -> String {
    let text = format!(
        r#"HloModule module
{COND}
%body {{
{body}
}}

ENTRY %entry {{
  %p0 = f32[] parameter(0)
  %zero = u32[] constant(0)
  %init = (u32[], f32[]) tuple(%zero, %p0)
  %while = (u32[], f32[]) while(%init), body=%body, condition=%cond{while_sharding}
  ROOT %result = f32[] get-tuple-element(%while), index=1
}}
"#
    );
    let mut module = parse_module(&text).expect("the case parses");
    let options = PropagationOptions {
        is_spmd: false,
        ..PropagationOptions::default()
    };
    match propagate(&mut module, &options) {
        Ok(_) => panic!("propagation should fail"),
        Err(e) => e.to_string(),
    }
}

const RECV: &str = r#"  %after-all = token[] after-all()
  %recv = (f32[], u32[], token[]) recv(%after-all), channel_id=1,
    sharding={{maximal device=1 metadata={op_name="a"}}, {maximal device=1}, {maximal device=1}}
  %recv-done = (f32[], token[]) recv-done(%recv), channel_id=1"#;

/// XLA: WhileConflictingShardingInBodyBeforeRecv.
#[test]
fn while_conflicting_sharding_in_body_before_recv() {
    let body = format!(
        r#"  %param = (u32[], f32[]) parameter(0)
  %count = u32[] get-tuple-element(%param), index=0,
    sharding={{maximal device=0 metadata={{op_name="a"}}}}
{RECV}
  %data = f32[] get-tuple-element(%recv-done), index=0
  ROOT %tuple = (u32[], f32[]) tuple(%count, %data)"#
    );
    let e = error_of(&body, "");
    assert!(
        e.contains("Instruction: count is on device: 0, which conflicts with device: 1 of channel instruction: recv"),
        "{e}"
    );
}

/// XLA: WhileConflictingShardingInBodyAfterRecv.
#[test]
fn while_conflicting_sharding_in_body_after_recv() {
    let body = format!(
        r#"  %param = (u32[], f32[]) parameter(0)
  %count = u32[] get-tuple-element(%param), index=0
{RECV}
  %data = f32[] get-tuple-element(%recv-done), index=0,
    sharding={{maximal device=0 metadata={{op_name="b"}}}}
  ROOT %tuple = (u32[], f32[]) tuple(%count, %data)"#
    );
    let e = error_of(&body, "");
    assert!(
        e.contains("Instruction: data is on device: 0, which conflicts with device: 1 of channel instruction: recv"),
        "{e}"
    );
}

/// XLA: WhileConflictingShardingOnWhileInstruction.
#[test]
fn while_conflicting_sharding_on_while_instruction() {
    let body = format!(
        r#"  %param = (u32[], f32[]) parameter(0)
  %count = u32[] get-tuple-element(%param), index=0
{RECV}
  %data = f32[] get-tuple-element(%recv-done), index=0
  ROOT %tuple = (u32[], f32[]) tuple(%count, %data)"#
    );
    let e = error_of(
        &body,
        r#",
    sharding={{maximal device=0 metadata={op_name="b"}},{maximal device=0}}"#,
    );
    assert!(
        e.contains("Instruction: while is on device: 0, which conflicts with device: 1 of channel instruction: recv"),
        "{e}"
    );
}
