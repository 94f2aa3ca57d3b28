//! The `"hlo"` program format end to end: a minimal `xla.HloModuleProto`
//! (the fields ORACLE.md lists as sufficient) built here with prost, compiled,
//! run, and used through the execution layer with an alias that the runtime
//! writes into the proto.

mod common;

use prost::Message;
use tessera_runtime::{CompileOptions, CompileRequest, ExecuteConfig, Program, Runtime};

#[derive(Clone, PartialEq, Message)]
struct ShapeProto {
    #[prost(int32, tag = "2")]
    element_type: i32,
    #[prost(int64, repeated, tag = "3")]
    dimensions: Vec<i64>,
    #[prost(message, repeated, tag = "4")]
    tuple_shapes: Vec<ShapeProto>,
}

#[derive(Clone, PartialEq, Message)]
struct ProgramShapeProto {
    #[prost(message, repeated, tag = "1")]
    parameters: Vec<ShapeProto>,
    #[prost(message, optional, tag = "2")]
    result: Option<ShapeProto>,
    #[prost(string, repeated, tag = "3")]
    parameter_names: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct InstructionProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    opcode: String,
    #[prost(message, optional, tag = "3")]
    shape: Option<ShapeProto>,
    #[prost(int64, tag = "9")]
    parameter_number: i64,
    #[prost(int64, tag = "35")]
    id: i64,
    #[prost(int64, repeated, tag = "36")]
    operand_ids: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct ComputationProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, repeated, tag = "2")]
    instructions: Vec<InstructionProto>,
    #[prost(int64, tag = "5")]
    id: i64,
    #[prost(int64, tag = "6")]
    root_id: i64,
}

#[derive(Clone, PartialEq, Message)]
struct ModuleProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    entry_computation_name: String,
    #[prost(message, repeated, tag = "3")]
    computations: Vec<ComputationProto>,
    #[prost(message, optional, tag = "4")]
    host_program_shape: Option<ProgramShapeProto>,
    #[prost(int64, tag = "6")]
    entry_computation_id: i64,
}

const F32: i32 = 11;

fn f32s(n: i64) -> ShapeProto {
    ShapeProto {
        element_type: F32,
        dimensions: vec![n],
        tuple_shapes: vec![],
    }
}

/// `c = a * b` over f32[n].
fn multiply_module(n: i64) -> Vec<u8> {
    let param = |i: i64| InstructionProto {
        name: format!("p{i}"),
        opcode: "parameter".into(),
        shape: Some(f32s(n)),
        parameter_number: i,
        id: i + 1,
        operand_ids: vec![],
    };
    let mul = InstructionProto {
        name: "mul".into(),
        opcode: "multiply".into(),
        shape: Some(f32s(n)),
        parameter_number: 0,
        id: 3,
        operand_ids: vec![1, 2],
    };
    ModuleProto {
        name: "mul_module".into(),
        entry_computation_name: "main".into(),
        computations: vec![ComputationProto {
            name: "main".into(),
            instructions: vec![param(0), param(1), mul],
            id: 7,
            root_id: 3,
        }],
        host_program_shape: Some(ProgramShapeProto {
            parameters: vec![f32s(n), f32s(n)],
            result: Some(f32s(n)),
            parameter_names: vec![String::new(), String::new()],
        }),
        entry_computation_id: 7,
    }
    .encode_to_vec()
}

#[test]
fn hlo_module_proto_compiles_runs_and_takes_aliases() {
    let client = common::client();
    let program = Program::HloProto(multiply_module(3));
    let exe = client
        .compile(&program, &CompileOptions::default())
        .unwrap();
    let dev = &client.devices()[0];
    let a = client
        .buffer_from_host(&[1f32, 2.0, 3.0], &[3], dev)
        .unwrap();
    let b = client
        .buffer_from_host(&[4f32, 5.0, 6.0], &[3], dev)
        .unwrap();
    let out = exe.execute(&[vec![&a, &b]], &Default::default()).unwrap();
    assert_eq!(out[0][0].to_vec::<f32>().unwrap(), vec![4.0, 10.0, 18.0]);

    // Through the runtime: shapes come from host_program_shape, the alias is
    // appended to the proto, and the plugin really donates parameter 1.
    let rt = Runtime::new(client.clone());
    let h = rt
        .compile(&CompileRequest::new(program, CompileOptions::default()).with_aliases(&[(0, 1)]))
        .unwrap();
    assert_eq!(
        rt.executable_info(h).unwrap().parameter_shapes[1].to_string(),
        "f32[3]"
    );
    let x = rt.upload(0, &[1f32, 2.0, 3.0], &[3]).unwrap();
    let y = rt.upload(0, &[-1f32, 0.5, 2.0], &[3]).unwrap();
    let bad = rt.upload(0, &[1f32; 4], &[4]).unwrap();
    let err = rt
        .execute(h, &[vec![x, bad]], ExecuteConfig::default())
        .unwrap_err();
    assert_eq!(err.to_string(), "argument 1: expected f32[3], got f32[4]");
    let out = rt
        .execute(
            h,
            &[vec![x, y]],
            ExecuteConfig {
                release_inputs: true,
                explode_tuple: true,
                release_executable: false,
            },
        )
        .unwrap();
    assert_eq!(rt.download::<f32>(out[0][0]).unwrap(), vec![-1.0, 1.0, 6.0]);
    assert!(!rt.is_live(y) && !rt.is_live(x));
    assert_eq!(rt.memory_stats(0).unwrap().donated, 1);
}
