//! Reads a serialized `xla.HloModuleProto`, converts it to a Tessera module and writes the
//! module back as `xla.HloModuleProto` bytes. Used by `scripts/oracles/check_proto_against_xla.py` to
//! compare our encoding with XLA's own.
//!
//! Usage: `proto_roundtrip IN OUT.pb [IN OUT.pb ...]` where IN is proto bytes, or HLO text when
//! its name ends in `.hlo` (parsed by Tessera); or `proto_roundtrip --sample OUT.pb` (a
//! hand-built module that exercises shardings, collectives and literals).

use std::process::ExitCode;

use tessera_hlo::attrs::{DotDimensionNumbers, ReplicaGroups};
use tessera_hlo::proto::{from_proto_bytes, to_proto_bytes};
use tessera_hlo::{ElementType, Instruction, Literal, Module, Opcode, Shape, Sharding};

fn sample() -> Module {
    use ElementType::*;
    let mut m = Module::new("tessera_sample");
    let add = m.add_computation("add").unwrap();
    let scalar = Shape::scalar(F32);
    let mut a = Instruction::new("a", Opcode::Parameter, scalar.clone());
    a.attrs.parameter_number = 0;
    let a = m.add_instruction(add, a).unwrap();
    let mut b = Instruction::new("b", Opcode::Parameter, scalar.clone());
    b.attrs.parameter_number = 1;
    let b = m.add_instruction(add, b).unwrap();
    m.add_instruction(
        add,
        Instruction::new("s", Opcode::Add, scalar).with_operands(&[a, b]),
    )
    .unwrap();
    let e = m.add_computation("main").unwrap();
    let mut p0 = Instruction::new("p0", Opcode::Parameter, Shape::array(F32, &[4, 8]));
    p0.sharding = Some(Sharding::iota_tiled(&[2, 1]));
    let p0 = m.add_instruction(e, p0).unwrap();
    let mut c = Instruction::new("c", Opcode::Constant, Shape::array(F32, &[8, 2]));
    let data: Vec<u8> = (0..16)
        .flat_map(|k| (k as f32 * 0.5).to_le_bytes())
        .collect();
    c.attrs.literal = Some(Box::new(
        Literal::from_bytes(Shape::array(F32, &[8, 2]), data).unwrap(),
    ));
    let c = m.add_instruction(e, c).unwrap();
    let mut dot =
        Instruction::new("dot", Opcode::Dot, Shape::array(F32, &[4, 2])).with_operands(&[p0, c]);
    dot.attrs.dot_dims = Some(Box::new(DotDimensionNumbers {
        lhs_contracting_dimensions: vec![1],
        rhs_contracting_dimensions: vec![0],
        ..Default::default()
    }));
    let dot = m.add_instruction(e, dot).unwrap();
    let mut ar = Instruction::new("ar", Opcode::AllReduce, Shape::array(F32, &[4, 2]))
        .with_operands(&[dot])
        .with_called(&[add]);
    ar.attrs.channel_id = Some(1);
    ar.attrs.use_global_device_ids = true;
    ar.attrs.replica_groups = Some(Box::new(ReplicaGroups::Explicit(vec![vec![0, 1]])));
    let ar = m.add_instruction(e, ar).unwrap();
    let mut h = Instruction::new("h", Opcode::Constant, Shape::array(BF16, &[2]));
    h.attrs.literal = Some(Box::new(
        Literal::from_bytes(Shape::array(BF16, &[2]), vec![0x80, 0x3f, 0x00, 0xc0]).unwrap(),
    ));
    let h = m.add_instruction(e, h).unwrap();
    let mut s4 = Instruction::new("q", Opcode::Constant, Shape::array(S4, &[3]));
    s4.attrs.literal = Some(Box::new(
        Literal::from_bytes(Shape::array(S4, &[3]), vec![1, 0x0f, 7]).unwrap(),
    ));
    let s4 = m.add_instruction(e, s4).unwrap();
    let t = m
        .add_instruction(
            e,
            Instruction::new(
                "t",
                Opcode::Tuple,
                Shape::tuple(vec![
                    Shape::array(F32, &[4, 2]),
                    Shape::array(BF16, &[2]),
                    Shape::array(S4, &[3]),
                ]),
            )
            .with_operands(&[ar, h, s4]),
        )
        .unwrap();
    m.set_root(e, t);
    m.set_entry(e);
    m
}

fn convert(input: &str, out: &str) -> Result<Module, String> {
    let bytes = std::fs::read(input).map_err(|e| format!("{input}: {e}"))?;
    let module = if input.ends_with(".hlo") {
        // HLO text through Tessera's parser.
        let text = String::from_utf8(bytes).map_err(|_| format!("{input}: not UTF-8"))?;
        tessera_hlo::text::parse_module(&text).map_err(|e| format!("{input}:{e}"))?
    } else {
        from_proto_bytes(&bytes).map_err(|e| format!("{input}: {e}"))?
    };
    std::fs::write(out, to_proto_bytes(&module)).map_err(|e| format!("{out}: {e}"))?;
    Ok(module)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, out] = args.as_slice() {
        if flag == "--sample" {
            return match std::fs::write(out, to_proto_bytes(&sample())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{out}: {e}");
                    ExitCode::FAILURE
                }
            };
        }
    }
    if args.is_empty() || !args.len().is_multiple_of(2) {
        eprintln!("usage: proto_roundtrip IN.pb OUT.pb [IN.pb OUT.pb ...] | proto_roundtrip --sample OUT.pb");
        return ExitCode::FAILURE;
    }
    // One line per pair: `ok <instructions>` or `error <message>`; failures do not stop the rest.
    let mut failed = false;
    for pair in args.chunks(2) {
        match convert(&pair[0], &pair[1]) {
            Ok(m) => println!("ok {} {}", pair[0], m.instruction_count()),
            Err(e) => {
                failed = true;
                println!("error {e}");
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
