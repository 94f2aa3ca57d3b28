use prost::Message;
use smallvec::SmallVec;

use super::messages as pb;
use super::*;
use crate::attrs::*;
use crate::instruction::{CompId, InstrId, Instruction};
use crate::literal::{Literal, LiteralData};
use crate::metadata::{FileLocation, OpMetadata, StackFrame, StackFrameIndex};
use crate::module::{AliasKind, BufferDonor, InputOutputAlias, ProgramShape, Schedule};
use crate::opcode::Opcode;
use crate::rare::Rare;
use crate::shape::{DimLevel, DimLevelType, Layout, LayoutExtras, Shape, SplitConfig, Tile};
use crate::sharding::{
    ShardGroup, Sharding, ShardingKind, SubgroupType, TileAssignment, TiledSharding,
};
use crate::types::ElementType::{self, *};

/// A structural description of a module that ignores arena ids: every computation by name and
/// every instruction by name with everything it holds. Two modules describe equal iff they are
/// the same module.
fn describe(m: &Module) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let iname = |i: InstrId| m.instr(i).name.clone();
    let cname = |c: CompId| m.comp(c).name.clone();
    writeln!(
        s,
        "module {} config={:?} frames={:?}",
        m.name, m.config, m.stack_frames
    )
    .unwrap();
    writeln!(s, "entry={:?}", m.entry().map(cname)).unwrap();
    if let Some(sched) = &m.schedule {
        for (c, seq) in &sched.sequences {
            let names: Vec<String> = seq.iter().map(|&i| iname(i)).collect();
            writeln!(s, "schedule {} {:?}", cname(*c), names).unwrap();
        }
    }
    for &c in m.computations() {
        let comp = m.comp(c);
        let params: Vec<Option<String>> = (0..comp.num_parameters())
            .map(|n| comp.parameter(n).map(iname))
            .collect();
        writeln!(
            s,
            "comp {} thread={:?} entry={} root={:?} params={:?}",
            comp.name,
            comp.execution_thread,
            comp.is_entry,
            comp.root().map(iname),
            params
        )
        .unwrap();
        for &i in comp.instructions() {
            let ins = m.instr(i);
            let ops: Vec<String> = ins.operands().iter().map(|&o| iname(o)).collect();
            let users: Vec<String> = ins.users().iter().map(|&o| iname(o)).collect();
            let preds: Vec<String> = ins
                .control_predecessors()
                .iter()
                .map(|&o| iname(o))
                .collect();
            let called: Vec<String> = ins.called.iter().map(|&o| cname(o)).collect();
            writeln!(
                s,
                "  {} = {} {:?} ops={:?} users={:?} ctrl={:?} called={:?} attrs={:?} sharding={:?} \
                 md={:?} fa={:?} bc={:?} pred={}",
                ins.name,
                ins.opcode,
                ins.shape,
                ops,
                users,
                preds,
                called,
                ins.attrs,
                ins.sharding,
                ins.metadata,
                ins.frontend_attributes,
                ins.backend_config,
                ins.predicated_conditional
            )
            .unwrap();
        }
    }
    s
}

fn assert_same(a: &Module, b: &Module) {
    let (da, db) = (describe(a), describe(b));
    if da != db {
        for (la, lb) in da.lines().zip(db.lines()) {
            if la != lb {
                panic!("modules differ:\n  before: {la}\n  after:  {lb}");
            }
        }
        panic!("modules differ in length:\n{da}\n---\n{db}");
    }
}

/// module -> proto -> bytes -> proto -> module, checked equal; returns the proto.
fn round_trip(m: &Module) -> HloModuleProto {
    let p = m.to_proto();
    let bytes = p.encode_to_vec();
    let p2 = HloModuleProto::decode(bytes.as_slice()).unwrap();
    assert_eq!(p, p2, "prost encoding is not faithful");
    let back = module_from_proto(&p2).unwrap();
    assert_same(m, &back);
    // And again with the configuration carried alongside.
    let wc = from_proto_with_config_bytes(&to_proto_with_config_bytes(m)).unwrap();
    assert_same(m, &wc);
    // Deterministic bytes.
    assert_eq!(to_proto_bytes(&back), bytes);
    p
}

fn param(m: &mut Module, c: CompId, n: i64, name: &str, shape: Shape) -> InstrId {
    let mut i = Instruction::new(name, Opcode::Parameter, shape);
    i.attrs.parameter_number = n;
    m.add_instruction(c, i).unwrap()
}

fn f32v(dims: &[i64]) -> Shape {
    Shape::array(F32, dims)
}

/// A module with a reduction computation and an entry with many kinds of attributes.
fn rich_module() -> Module {
    let mut m = Module::new("rich");
    let add = m.add_computation("add_f32").unwrap();
    let a = param(&mut m, add, 0, "a", Shape::scalar(F32));
    let b = param(&mut m, add, 1, "b", Shape::scalar(F32));
    m.add_instruction(
        add,
        Instruction::new("sum", Opcode::Add, Shape::scalar(F32)).with_operands(&[a, b]),
    )
    .unwrap();

    let e = m.add_computation("main").unwrap();
    let mut p0 = Instruction::new("p0", Opcode::Parameter, f32v(&[8, 16]));
    p0.sharding = Some(Sharding::iota_tiled(&[2, 4]));
    p0.attrs.parameter_replication = Some(vec![false]);
    let p0 = m.add_instruction(e, p0).unwrap();
    let mut p1s = Shape::array(S32, &[8]);
    p1s.as_array_mut().unwrap().layout = Some(Layout::descending(1));
    let p1 = param(&mut m, e, 1, "p1", p1s);
    let mut zero = Instruction::new("zero", Opcode::Constant, Shape::scalar(F32));
    zero.attrs.literal = Some(Box::new(Literal::f32(0.0)));
    zero.metadata = Some(OpMetadata {
        op_type: "Const".into(),
        op_name: "jit(f)/zero".into(),
        source_file: "f.py".into(),
        source_line: 3,
        source_end_line: 4,
        source_column: 5,
        source_end_column: 9,
        stack_frame_id: 1,
        ..OpMetadata::default()
    });
    let zero = m.add_instruction(e, zero).unwrap();
    let mut red = Instruction::new("red", Opcode::Reduce, f32v(&[8]))
        .with_operands(&[p0, zero])
        .with_called(&[add]);
    red.attrs.dimensions = Some(vec![1]);
    red.frontend_attributes
        .insert("_xla_stream".into(), "1".into());
    red.frontend_attributes.insert("a".into(), "b".into());
    red.backend_config = Some("{\"x\":1}".into());
    let red = m.add_instruction(e, red).unwrap();
    let mut bc = Instruction::new("bc", Opcode::Broadcast, f32v(&[8, 16])).with_operands(&[red]);
    bc.attrs.dimensions = Some(vec![0]);
    let bc = m.add_instruction(e, bc).unwrap();
    let mut dot = Instruction::new("dot", Opcode::Dot, f32v(&[8, 8])).with_operands(&[p0, bc]);
    dot.attrs.dot_dims = Some(Box::new(DotDimensionNumbers {
        lhs_contracting_dimensions: vec![1],
        rhs_contracting_dimensions: vec![1],
        ..Default::default()
    }));
    dot.attrs.precision = Some(Box::new(PrecisionConfig {
        operand_precision: vec![Precision::High, Precision::Highest],
        algorithm: 6,
    }));
    let dot = m.add_instruction(e, dot).unwrap();
    let mut ar = Instruction::new("ar", Opcode::AllReduce, f32v(&[8, 8]))
        .with_operands(&[dot])
        .with_called(&[add]);
    ar.attrs.channel_id = Some(3);
    ar.attrs.use_global_device_ids = true;
    ar.attrs.replica_groups = Some(Box::new(ReplicaGroups::Iota {
        num_groups: 2,
        group_size: 4,
        reshape_dims: vec![4, 2],
        transpose_perm: vec![1, 0],
    }));
    ar.sharding = Some(Sharding::manual());
    let ar = m.add_instruction(e, ar).unwrap();
    let mut ag = Instruction::new("ag", Opcode::AllGather, f32v(&[16, 8])).with_operands(&[ar]);
    ag.attrs.dimensions = Some(vec![0]);
    ag.attrs.channel_id = Some(4);
    ag.attrs.replica_groups = Some(Box::new(ReplicaGroups::Explicit(vec![
        vec![0, 1],
        vec![2, 3],
    ])));
    let ag = m.add_instruction(e, ag).unwrap();
    let mut ar2 = Instruction::new("ar2", Opcode::AllReduce, f32v(&[16, 8]))
        .with_operands(&[ag])
        .with_called(&[add]);
    ar2.attrs.replica_groups = Some(Box::new(ReplicaGroups::Explicit(vec![])));
    let ar2 = m.add_instruction(e, ar2).unwrap();
    let mut cp =
        Instruction::new("cp", Opcode::CollectivePermute, f32v(&[16, 8])).with_operands(&[ar2]);
    cp.attrs.channel_id = Some(5);
    cp.attrs.source_target_pairs = Some(vec![(0, 1), (1, 0)]);
    let cp = m.add_instruction(e, cp).unwrap();
    let mut sl = Instruction::new("sl", Opcode::Slice, f32v(&[8, 4])).with_operands(&[cp]);
    sl.attrs.slice = Some(vec![
        SliceDim {
            start: 0,
            limit: 16,
            stride: 2,
        },
        SliceDim {
            start: 4,
            limit: 8,
            stride: 1,
        },
    ]);
    let sl = m.add_instruction(e, sl).unwrap();
    let mut cmp = Instruction::new("cmp", Opcode::Compare, Shape::array(Pred, &[8, 4]))
        .with_operands(&[sl, sl]);
    cmp.attrs.comparison = Some(Comparison {
        direction: ComparisonDirection::Lt,
        ty: Some(ComparisonType::TotalOrder),
    });
    let cmp = m.add_instruction(e, cmp).unwrap();
    let mut cmp2 = Instruction::new("cmp2", Opcode::Compare, Shape::array(Pred, &[8, 4]))
        .with_operands(&[sl, sl]);
    cmp2.attrs.comparison = Some(Comparison {
        direction: ComparisonDirection::Eq,
        ty: None,
    });
    let cmp2 = m.add_instruction(e, cmp2).unwrap();
    let mut io = Instruction::new("io", Opcode::Iota, Shape::array(S32, &[8, 4]));
    io.attrs.iota_dimension = 1;
    let io = m.add_instruction(e, io).unwrap();
    let mut pad = Instruction::new("pad", Opcode::Pad, f32v(&[10, 7])).with_operands(&[sl, zero]);
    pad.attrs.padding = Some(vec![
        PaddingDim {
            low: 1,
            high: 1,
            interior: 0,
        },
        PaddingDim {
            low: 0,
            high: 0,
            interior: 1,
        },
    ]);
    let pad = m.add_instruction(e, pad).unwrap();
    let mut cc =
        Instruction::new("cc", Opcode::CustomCall, f32v(&[10, 7])).with_operands(&[pad, p1]);
    cc.attrs.custom_call = Some(Box::new(CustomCallAttrs {
        target: "Sharding".into(),
        api_version: CustomCallApiVersion::TypedFfi,
        has_side_effect: true,
        operand_layout_constraints: Some(vec![f32v(&[10, 7]), Shape::array(S32, &[8])]),
        output_to_operand_aliasing: vec![OutputOperandAlias {
            output_index: vec![],
            operand: 0,
            operand_index: vec![],
        }],
        schedule: CustomCallSchedule::Latest,
        padding_type: 0,
    }));
    cc.sharding = Some(Sharding {
        kind: ShardingKind::Tiled(TiledSharding {
            tile_assignment: TileAssignment::Explicit {
                dims: SmallVec::from_slice(&[2, 1, 2]),
                devices: vec![0, 2, 1, 3],
            },
            replicate_on_last_tile_dim: true,
            last_tile_dims: vec![],
        }),
        metadata: vec![OpMetadata {
            op_name: "sharding".into(),
            ..Default::default()
        }],
        shard_group: Some(ShardGroup {
            id: 7,
            shard_as: false,
        }),
    });
    let cc = m.add_instruction(e, cc).unwrap();
    let mut tup = Instruction::new(
        "tup",
        Opcode::Tuple,
        Shape::tuple(vec![
            f32v(&[10, 7]),
            Shape::array(Pred, &[8, 4]),
            Shape::array(Pred, &[8, 4]),
            Shape::array(S32, &[8, 4]),
        ]),
    )
    .with_operands(&[cc, cmp, cmp2, io]);
    tup.sharding = Some(Sharding::tuple(vec![
        Sharding::new(ShardingKind::Tiled(TiledSharding {
            tile_assignment: TileAssignment::Iota {
                dims: SmallVec::from_slice(&[2, 2, 2]),
                reshape_dims: SmallVec::from_slice(&[2, 4]),
                transpose_perm: SmallVec::from_slice(&[1, 0]),
            },
            replicate_on_last_tile_dim: false,
            last_tile_dims: vec![SubgroupType::Manual],
        })),
        Sharding::maximal(3),
        Sharding::new(ShardingKind::Unknown),
        Sharding::new(ShardingKind::Unreduced),
    ]));
    let tup = m.add_instruction(e, tup).unwrap();
    m.add_control_dependency(cmp, cmp2);
    m.set_root(e, tup);
    m.set_entry(e);
    m
}

#[test]
fn rich_module_round_trips() {
    let m = rich_module();
    let p = round_trip(&m);
    // What PJRT needs (ORACLE.md): callees first, ids, entry id, host program shape with names.
    assert_eq!(p.computations.len(), 2);
    assert_eq!(p.computations[0].name, "add_f32");
    assert_eq!(p.computations[1].name, "main");
    assert_eq!(p.entry_computation_id, p.computations[1].id);
    assert_eq!(p.entry_computation_name, "main");
    let hps = p.host_program_shape.as_ref().unwrap();
    assert_eq!(hps.parameter_names, vec!["p0", "p1"]);
    assert_eq!(hps.parameters.len(), 2);
    let main = &p.computations[1];
    let ids: Vec<i64> = main.instructions.iter().map(|i| i.id).collect();
    assert_eq!(ids[0], 1 << 32);
    let red = main.instructions.iter().find(|i| i.name == "red").unwrap();
    assert_eq!(red.called_computation_ids, vec![p.computations[0].id]);
    assert_eq!(red.dimensions, vec![1]);
    let ar = main.instructions.iter().find(|i| i.name == "ar").unwrap();
    let iota = ar.iota_collective_device_list.as_ref().unwrap();
    assert_eq!(
        (iota.num_replica_groups, iota.num_devices_per_group),
        (2, 4)
    );
    assert_eq!(iota.iota_transpose_perm, vec![1, 0]);
    let p0 = &main.instructions[0];
    let sh = p0.sharding.as_ref().unwrap();
    assert_eq!(sh.r#type, 3);
    assert_eq!(sh.tile_assignment_dimensions, vec![2, 4]);
    assert_eq!(sh.iota_reshape_dims, vec![8]);
    assert_eq!(sh.iota_transpose_perm, vec![0]);
    // Instructions are written operands-first and ids are unique.
    let mut seen = std::collections::HashSet::new();
    for c in &p.computations {
        for i in &c.instructions {
            assert!(i.operand_ids.iter().all(|o| seen.contains(o)), "{}", i.name);
            assert!(seen.insert(i.id));
        }
    }
}

#[test]
fn config_round_trips() {
    let mut m = rich_module();
    let e = m.entry().unwrap();
    let main_params: Vec<InstrId> = m.comp(e).parameters().collect();
    m.config.input_output_alias = vec![InputOutputAlias {
        output_index: vec![0],
        parameter_number: 0,
        parameter_index: vec![],
        kind: AliasKind::MustAlias,
    }];
    m.config.buffer_donor = vec![BufferDonor {
        parameter_number: 1,
        parameter_index: vec![],
    }];
    m.config.spmd_output_sharding = Some(Sharding::replicated());
    m.config.spmd_parameters_shardings = Some(vec![Sharding::replicated(), Sharding::manual()]);
    m.config
        .frontend_attributes
        .insert("xla.sdy.meshes".into(), "{}".into());
    m.stack_frames = StackFrameIndex {
        file_names: vec!["f.py".into()],
        function_names: vec!["f".into()],
        file_locations: vec![FileLocation {
            file_name_id: 1,
            function_name_id: 1,
            line: 3,
            end_line: 4,
            column: 5,
            end_column: 9,
        }],
        // Text numbering: parent_frame_id 1 is "no parent", 2 is frame 1.
        stack_frames: vec![
            StackFrame {
                file_location_id: 1,
                parent_frame_id: 1,
            },
            StackFrame {
                file_location_id: 1,
                parent_frame_id: 2,
            },
        ],
    };
    // A layout that says more than the instructions: must be kept.
    let mut ps = ProgramShape {
        parameters: main_params
            .iter()
            .map(|&p| m.instr(p).shape.clone())
            .collect(),
        result: m.instr(m.comp(e).root().unwrap()).shape.clone(),
    };
    ps.parameters[0].as_array_mut().unwrap().layout = Some(Layout::descending(2));
    m.config.entry_computation_layout = Some(ps);
    // Schedule: every computation in instruction order.
    let mut sched = Schedule::default();
    for &c in m.computations() {
        sched.sequences.insert(c, m.comp(c).instructions().to_vec());
    }
    m.schedule = Some(sched);
    let p = round_trip(&m);
    let frames = &p.stack_frame_index.as_ref().unwrap().stack_frames;
    assert_eq!(
        frames.iter().map(|f| f.parent_frame_id).collect::<Vec<_>>(),
        vec![0, 1]
    );

    // Header settings HloModuleProto has no field for travel with the config form only.
    m.config.replica_count = 2;
    m.config.num_partitions = 4;
    m.config.use_spmd_partitioning = true;
    m.config.alias_passthrough_params = true;
    m.config.allow_spmd_sharding_propagation_to_output = Some(vec![true]);
    m.config.allow_spmd_sharding_propagation_to_parameters = Some(vec![false, true]);
    let back = from_proto_with_config_bytes(&to_proto_with_config_bytes(&m)).unwrap();
    assert_same(&m, &back);
    // The plain form carries them in Tessera's extension field.
    let plain = from_proto_bytes(&to_proto_bytes(&m)).unwrap();
    assert_same(&m, &plain);
    // Without the extension (as XLA writes protos) they fall back to the defaults.
    let mut bare = m.to_proto();
    bare.tessera = None;
    let xla_like = module_from_proto(&bare).unwrap();
    assert_eq!(xla_like.config.num_partitions, 1);
    assert!(xla_like.config.entry_computation_layout.is_some());
}

#[test]
fn presence_the_xla_fields_cannot_tell_survives() {
    let mut m = Module::new("presence");
    let br = m.add_computation("br").unwrap();
    param(&mut m, br, 0, "bp", f32v(&[4]));
    let e = m.add_computation("main").unwrap();
    let p = param(&mut m, e, 0, "p", f32v(&[4]));
    let pr = param(&mut m, e, 1, "pr", Shape::scalar(Pred));
    let mut n = Instruction::new("n", Opcode::Negate, f32v(&[4])).with_operands(&[p]);
    n.metadata = Some(OpMetadata::default());
    n.backend_config = Some(String::new());
    n.attrs.statistics_viz = Some("{visualizing_index=1,stat-0=5e-1}".into());
    n.attrs.original_value = Some("{\"p\" {}}".into());
    let n = m.add_instruction(e, n).unwrap();
    // An empty dimensions list and channel id 0 on an all-to-all, an empty thread name on an
    // async-start: each opcode can carry the field (`attr_table.rs`).
    let mut a2a = Instruction::new("a2a", Opcode::AllToAll, f32v(&[4])).with_operands(&[n]);
    a2a.attrs.dimensions = Some(vec![]);
    a2a.attrs.channel_id = Some(0);
    let a2a = m.add_instruction(e, a2a).unwrap();
    let mut start = Instruction::new("start", Opcode::AsyncStart, f32v(&[4]))
        .with_operands(&[a2a])
        .with_called(&[br]);
    start.attrs.async_execution_thread = Some(String::new());
    m.add_instruction(e, start).unwrap();
    // A broadcast without dimensions and a domain of another kind.
    let b = m
        .add_instruction(
            e,
            Instruction::new("b", Opcode::Broadcast, f32v(&[4])).with_operands(&[n]),
        )
        .unwrap();
    let mut d = Instruction::new("d", Opcode::Domain, f32v(&[4])).with_operands(&[b]);
    d.attrs.domain = Some(Box::new(DomainAttrs {
        kind: "my_domain".into(),
        entry: None,
        exit: None,
    }));
    let d = m.add_instruction(e, d).unwrap();
    let mut cc = Instruction::new("cc", Opcode::CustomCall, f32v(&[4])).with_operands(&[d]);
    cc.attrs.custom_call = Some(Box::new(CustomCallAttrs {
        target: "foo".into(),
        ..Default::default()
    }));
    let cc = m.add_instruction(e, cc).unwrap();
    // A conditional written with branch_computations although its selector is a pred.
    let mut cond = Instruction::new("cond", Opcode::Conditional, f32v(&[4]))
        .with_operands(&[pr, cc, cc])
        .with_called(&[br, br]);
    cond.predicated_conditional = false;
    m.add_instruction(e, cond).unwrap();
    m.set_entry(e);
    // An entry layout equal to what the instructions say is still "given".
    let ps = ProgramShape {
        parameters: vec![f32v(&[4]), Shape::scalar(Pred)],
        result: f32v(&[4]),
    };
    m.config.entry_computation_layout = Some(ps);
    m.config.spmd_parameters_shardings = Some(vec![]);
    let proto = round_trip(&m);
    let present = |k: usize| {
        let i = &proto.computations[1].instructions[k];
        i.tessera.as_ref().unwrap().present.clone()
    };
    assert_eq!(present(2), vec!["metadata", "backend_config"]);
    assert_eq!(present(3), vec!["dimensions", "channel_id"]);
    assert_eq!(present(4), vec!["async_execution_thread"]);
}

#[test]
fn callees_are_written_first_whatever_the_stored_order() {
    let mut m = Module::new("order");
    let e = m.add_computation("main").unwrap();
    let body = m.add_computation("body").unwrap();
    let cond = m.add_computation("cond").unwrap();
    let inner = m.add_computation("inner").unwrap();
    let t = Shape::scalar(S32);
    let x = param(&mut m, inner, 0, "ix", t.clone());
    let _ = x;
    let bx = param(&mut m, body, 0, "bx", t.clone());
    m.add_instruction(
        body,
        Instruction::new("bcall", Opcode::Call, t.clone())
            .with_operands(&[bx])
            .with_called(&[inner]),
    )
    .unwrap();
    let cx = param(&mut m, cond, 0, "cx", t.clone());
    let mut c =
        Instruction::new("cmp", Opcode::Compare, Shape::scalar(Pred)).with_operands(&[cx, cx]);
    c.attrs.comparison = Some(Comparison {
        direction: ComparisonDirection::Lt,
        ty: None,
    });
    m.add_instruction(cond, c).unwrap();
    let p = param(&mut m, e, 0, "p", t.clone());
    m.add_instruction(
        e,
        Instruction::new("w", Opcode::While, t)
            .with_operands(&[p])
            .with_called(&[cond, body]),
    )
    .unwrap();
    m.set_entry(e);
    let proto = m.to_proto();
    let names: Vec<&str> = proto.computations.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["cond", "inner", "body", "main"]);
    // XLA keeps a while's computations as [body, condition] (measured with jaxlib).
    let w = &proto.computations[3].instructions[1];
    assert_eq!(w.called_computation_ids, vec![2, 0]);
    let back = module_from_proto(&proto).unwrap();
    let back_names: Vec<String> = back
        .computations()
        .iter()
        .map(|&c| back.comp(c).name.clone())
        .collect();
    assert_eq!(back_names, names);
    assert_eq!(back.comp(back.entry().unwrap()).name, "main");
}

#[test]
fn instructions_are_written_operands_first() {
    let mut m = Module::new("topo");
    let e = m.add_computation("main").unwrap();
    let p = param(&mut m, e, 0, "p", Shape::scalar(F32));
    let n = m
        .add_instruction(
            e,
            Instruction::new("n", Opcode::Negate, Shape::scalar(F32)).with_operands(&[p]),
        )
        .unwrap();
    let a = m
        .add_instruction(
            e,
            Instruction::new("a", Opcode::Add, Shape::scalar(F32)).with_operands(&[n, p]),
        )
        .unwrap();
    // Stored order puts the user first.
    m.set_instruction_order(e, vec![a, n, p]);
    m.set_entry(e);
    let proto = m.to_proto();
    let names: Vec<&str> = proto.computations[0]
        .instructions
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(names, vec!["p", "n", "a"]);
    // And a proto with users first is still read (XLA's own are never so).
    let mut rev = proto.clone();
    rev.computations[0].instructions.reverse();
    let back = module_from_proto(&rev).unwrap();
    let order: Vec<&str> = back
        .comp(back.entry().unwrap())
        .instructions()
        .iter()
        .map(|&i| back.instr(i).name.as_str())
        .collect();
    assert_eq!(order, vec!["a", "n", "p"]);
    let p_back = back.find_instruction("p").unwrap();
    let users: Vec<&str> = back
        .users(p_back)
        .iter()
        .map(|&u| back.instr(u).name.as_str())
        .collect();
    assert_eq!(users, vec!["a", "n"]);
}

#[test]
fn many_attributes_round_trip() {
    let mut m = Module::new("attrs");
    let e = m.add_computation("main").unwrap();
    let s4 = f32v(&[1, 8, 8, 4]);
    let x = param(&mut m, e, 0, "x", s4.clone());
    let k = param(&mut m, e, 1, "k", f32v(&[3, 3, 4, 4]));
    let idx = param(&mut m, e, 2, "idx", Shape::array(S32, &[5, 1]));
    let tok = param(&mut m, e, 3, "tok", Shape::Token);
    let mut conv = Instruction::new("conv", Opcode::Convolution, s4.clone()).with_operands(&[x, k]);
    conv.attrs.window = Some(Box::new(Window {
        dims: vec![
            WindowDim {
                size: 3,
                padding_low: 1,
                padding_high: 1,
                ..WindowDim::default()
            },
            WindowDim {
                size: 3,
                stride: 1,
                padding_low: 1,
                padding_high: 1,
                window_dilation: 2,
                base_dilation: 1,
                window_reversal: true,
            },
        ],
    }));
    conv.attrs.conv_dims = Some(Box::new(ConvDimensionNumbers {
        input_batch_dimension: 0,
        input_feature_dimension: 3,
        input_spatial_dimensions: vec![1, 2],
        kernel_input_feature_dimension: 2,
        kernel_output_feature_dimension: 3,
        kernel_spatial_dimensions: vec![0, 1],
        output_batch_dimension: 0,
        output_feature_dimension: 3,
        output_spatial_dimensions: vec![1, 2],
    }));
    conv.attrs.feature_group_count = 2;
    conv.attrs.batch_group_count = 1;
    let conv = m.add_instruction(e, conv).unwrap();
    let mut g = Instruction::new("g", Opcode::Gather, f32v(&[5, 8, 4])).with_operands(&[conv, idx]);
    g.attrs.gather_dims = Some(Box::new(GatherDimensionNumbers {
        offset_dims: vec![1, 2],
        collapsed_slice_dims: vec![0, 1],
        start_index_map: vec![1],
        index_vector_dim: 1,
        operand_batching_dims: vec![],
        start_indices_batching_dims: vec![],
    }));
    g.attrs.gather_slice_sizes = Some(vec![1, 1, 8, 4]);
    g.attrs.indices_are_sorted = true;
    let g = m.add_instruction(e, g).unwrap();
    let mut ds = Instruction::new("ds", Opcode::DynamicSlice, f32v(&[1, 8, 4])).with_operands(&[g]);
    ds.attrs.dynamic_slice_sizes = Some(vec![1, 8, 4]);
    let ds = m.add_instruction(e, ds).unwrap();
    let mut rp =
        Instruction::new("rp", Opcode::ReducePrecision, f32v(&[1, 8, 4])).with_operands(&[ds]);
    rp.attrs.exponent_bits = 5;
    rp.attrs.mantissa_bits = 10;
    let rp = m.add_instruction(e, rp).unwrap();
    let mut srt = Instruction::new("srt", Opcode::Sort, f32v(&[1, 8, 4])).with_operands(&[rp]);
    srt.attrs.dimensions = Some(vec![1]);
    srt.attrs.is_stable = true;
    let srt = m.add_instruction(e, srt).unwrap();
    let mut tk = Instruction::new(
        "tk",
        Opcode::TopK,
        Shape::tuple(vec![f32v(&[1, 8, 2]), Shape::array(S32, &[1, 8, 2])]),
    )
    .with_operands(&[srt]);
    tk.attrs.k = 2;
    tk.attrs.largest = true;
    let tk = m.add_instruction(e, tk).unwrap();
    let mut gte =
        Instruction::new("gte", Opcode::GetTupleElement, f32v(&[1, 8, 2])).with_operands(&[tk]);
    gte.attrs.tuple_index = 0;
    let gte = m.add_instruction(e, gte).unwrap();
    let mut tr = Instruction::new("tr", Opcode::Transpose, f32v(&[2, 8, 1])).with_operands(&[gte]);
    tr.attrs.dimensions = Some(vec![2, 1, 0]);
    let tr = m.add_instruction(e, tr).unwrap();
    let mut rv = Instruction::new("rv", Opcode::Reverse, f32v(&[2, 8, 1])).with_operands(&[tr]);
    rv.attrs.dimensions = Some(vec![]);
    let rv = m.add_instruction(e, rv).unwrap();
    let mut rng = Instruction::new(
        "rbg",
        Opcode::RngBitGenerator,
        Shape::tuple(vec![Shape::array(U64, &[2]), Shape::array(U32, &[4])]),
    );
    let st = param(&mut m, e, 4, "st", Shape::array(U64, &[2]));
    rng = rng.with_operands(&[st]);
    rng.attrs.rng_algorithm = Some(RandomAlgorithm::Philox);
    let rng = m.add_instruction(e, rng).unwrap();
    let mut inf = Instruction::new(
        "inf",
        Opcode::Infeed,
        Shape::tuple(vec![f32v(&[2]), Shape::Token]),
    )
    .with_operands(&[tok]);
    inf.attrs.infeed_config = Some("cfg".into());
    let inf = m.add_instruction(e, inf).unwrap();
    let mut fft = Instruction::new("fft", Opcode::Fft, Shape::array(C64, &[8]))
        .with_operands(&[param(&mut m, e, 5, "cx", Shape::array(C64, &[8]))]);
    fft.attrs.fft_type = Some(FftType::Ifft);
    fft.attrs.fft_length = Some(vec![8]);
    let fft = m.add_instruction(e, fft).unwrap();
    let a = param(&mut m, e, 6, "amat", f32v(&[4, 4]));
    let mut ch = Instruction::new("ch", Opcode::Cholesky, f32v(&[4, 4])).with_operands(&[a]);
    ch.attrs.lower = true;
    let ch = m.add_instruction(e, ch).unwrap();
    let mut ts =
        Instruction::new("ts", Opcode::TriangularSolve, f32v(&[4, 4])).with_operands(&[ch, a]);
    ts.attrs.triangular_solve = Some(TriangularSolveOptions {
        left_side: true,
        lower: false,
        unit_diagonal: true,
        transpose_a: TransposeKind::Adjoint,
    });
    let ts = m.add_instruction(e, ts).unwrap();
    let mut ex = Instruction::new("ex", Opcode::Exp, f32v(&[4, 4])).with_operands(&[ts]);
    ex.attrs.result_accuracy = Some(ResultAccuracy::Tolerance {
        atol: 0.5,
        rtol: 0.25,
        ulps: 2,
    });
    let ex = m.add_instruction(e, ex).unwrap();
    let mut lg = Instruction::new("lg", Opcode::Log, f32v(&[4, 4])).with_operands(&[ex]);
    lg.attrs.result_accuracy = Some(ResultAccuracy::Mode(1));
    let lg = m.add_instruction(e, lg).unwrap();
    let mut cs = Instruction::new(
        "cs",
        Opcode::CopyStart,
        Shape::tuple(vec![f32v(&[4, 4]), f32v(&[4, 4]), Shape::scalar(U32)]),
    )
    .with_operands(&[lg]);
    cs.attrs.cross_program_prefetch_index = Some(0);
    let cs = m.add_instruction(e, cs).unwrap();
    let mut dom = Instruction::new("dom", Opcode::Domain, f32v(&[4, 4])).with_operands(&[a]);
    dom.attrs.domain = Some(Box::new(DomainAttrs {
        kind: "sharding".into(),
        entry: Some(Sharding::maximal(0)),
        exit: Some(Sharding::replicated()),
    }));
    let dom = m.add_instruction(e, dom).unwrap();
    let mut bn = Instruction::new(
        "bn",
        Opcode::BatchNormTraining,
        Shape::tuple(vec![s4.clone(), f32v(&[4]), f32v(&[4])]),
    )
    .with_operands(&[
        x,
        param(&mut m, e, 7, "scale", f32v(&[4])),
        param(&mut m, e, 8, "off", f32v(&[4])),
    ]);
    bn.attrs.epsilon = 0.001;
    bn.attrs.feature_index = 3;
    let bn = m.add_instruction(e, bn).unwrap();
    let mut send = Instruction::new(
        "send",
        Opcode::Send,
        Shape::tuple(vec![f32v(&[4, 4]), Shape::scalar(U32), Shape::Token]),
    )
    .with_operands(&[dom, tok]);
    send.attrs.channel_id = Some(9);
    send.attrs.is_host_transfer = true;
    send.frontend_attributes
        .insert("_xla_host_transfer_handler_name".into(), "h".into());
    let send = m.add_instruction(e, send).unwrap();
    let t = m
        .add_instruction(
            e,
            Instruction::new(
                "t",
                Opcode::Tuple,
                Shape::tuple(vec![
                    f32v(&[2, 8, 1]),
                    Shape::tuple(vec![Shape::array(U64, &[2]), Shape::array(U32, &[4])]),
                    Shape::tuple(vec![f32v(&[2]), Shape::Token]),
                    Shape::array(C64, &[8]),
                    Shape::tuple(vec![f32v(&[4, 4]), f32v(&[4, 4]), Shape::scalar(U32)]),
                    Shape::tuple(vec![s4.clone(), f32v(&[4]), f32v(&[4])]),
                    Shape::tuple(vec![f32v(&[4, 4]), Shape::scalar(U32), Shape::Token]),
                ]),
            )
            .with_operands(&[rv, rng, inf, fft, cs, bn, send]),
        )
        .unwrap();
    m.set_root(e, t);
    m.set_entry(e);
    round_trip(&m);
}

#[test]
fn layouts_and_dynamic_shapes_round_trip() {
    let mut m = Module::new("layouts");
    let e = m.add_computation("main").unwrap();
    let mut s = Shape::array(BF16, &[8, 128, 4]);
    {
        let a = s.as_array_mut().unwrap();
        a.dynamic = SmallVec::from_slice(&[true, false, false]);
        a.layout = Some(Layout {
            minor_to_major: SmallVec::from_slice(&[1, 2, 0]),
            extras: Rare::from_value(LayoutExtras {
                dim_levels: vec![
                    DimLevel {
                        ty: DimLevelType::Dense,
                        unique: true,
                        ordered: true,
                    },
                    DimLevel {
                        ty: DimLevelType::Compressed,
                        unique: false,
                        ordered: true,
                    },
                    DimLevel {
                        ty: DimLevelType::Singleton,
                        unique: true,
                        ordered: false,
                    },
                ],
                tiles: vec![
                    Tile {
                        dims: SmallVec::from_slice(&[8, 128]),
                    },
                    Tile {
                        dims: SmallVec::from_slice(&[2, crate::shape::TILE_COMBINE_DIM]),
                    },
                ],
                tail_padding_alignment_in_elements: 4,
                index_primitive_type: Some(S32),
                pointer_primitive_type: Some(U16),
                element_size_in_bits: 16,
                memory_space: 1,
                split_configs: vec![SplitConfig {
                    dimension: 0,
                    split_indices: vec![4],
                }],
                physical_shape: Some(Box::new(Shape::array(U8, &[4096]))),
                dynamic_shape_metadata_prefix_bytes: 8,
            }),
        });
    }
    let mut u = Shape::array(F32, &[crate::shape::UNBOUNDED_DIM, 3]);
    u.as_array_mut().unwrap().dynamic = SmallVec::from_slice(&[true, false]);
    let p = param(&mut m, e, 0, "p", s.clone());
    let q = param(&mut m, e, 1, "q", u.clone());
    let b = param(&mut m, e, 2, "b", Shape::Buffer(Box::new(f32v(&[4]))));
    let o = param(&mut m, e, 3, "o", Shape::Opaque);
    m.add_instruction(
        e,
        Instruction::new(
            "t",
            Opcode::Tuple,
            Shape::tuple(vec![
                s,
                u,
                Shape::Buffer(Box::new(f32v(&[4]))),
                Shape::Opaque,
            ]),
        )
        .with_operands(&[p, q, b, o]),
    )
    .unwrap();
    m.set_entry(e);
    round_trip(&m);
}

fn sample_bytes(ty: ElementType, n: usize) -> Vec<u8> {
    // Distinct, type-valid bytes: sub-byte types keep their values in range.
    let bits = ty.bit_width();
    (0..n * ty.byte_size())
        .map(|k| {
            let v = (k as u32).wrapping_mul(37).wrapping_add(11) as u8;
            match ty {
                Pred => (k % 2) as u8,
                _ if bits < 8 => v & ((1u8 << bits) - 1),
                _ => v,
            }
        })
        .collect()
}

#[test]
fn literals_of_every_element_type_round_trip() {
    for &ty in ElementType::ALL.iter().filter(|t| t.is_array_type()) {
        let shape = Shape::array(ty, &[2, 3]);
        let lit = Literal::from_bytes(shape.clone(), sample_bytes(ty, 6)).unwrap();
        let p = values::literal_to_proto(&lit);
        let bytes = p.encode_to_vec();
        let back = values::literal_from_proto(&pb::LiteralProto::decode(bytes.as_slice()).unwrap())
            .unwrap();
        assert_eq!(back, lit, "{ty}");
        // And inside a module, as a constant.
        let mut m = Module::new("lit");
        let e = m.add_computation("main").unwrap();
        let mut c = Instruction::new("c", Opcode::Constant, shape);
        c.attrs.literal = Some(Box::new(lit));
        m.add_instruction(e, c).unwrap();
        m.set_entry(e);
        round_trip(&m);
    }
    // Tuples, tokens, scalars, empty arrays.
    let t = Literal {
        shape: Shape::tuple(vec![
            Shape::scalar(F32),
            Shape::tuple(vec![Shape::scalar(Pred)]),
            Shape::Token,
        ]),
        data: LiteralData::Tuple(vec![
            Literal::f32(1.5),
            Literal {
                shape: Shape::tuple(vec![Shape::scalar(Pred)]),
                data: LiteralData::Tuple(vec![Literal::pred(true)]),
            },
            Literal {
                shape: Shape::Token,
                data: LiteralData::None,
            },
        ]),
    };
    let back = values::literal_from_proto(&values::literal_to_proto(&t)).unwrap();
    assert_eq!(back, t);
    let empty = Literal::zeros(Shape::array(F32, &[0, 4]));
    assert_eq!(
        values::literal_from_proto(&values::literal_to_proto(&empty)).unwrap(),
        empty
    );
}

#[test]
fn literal_fields_follow_xla() {
    // Where each type's elements go, as xla/literal.cc writes them.
    let p = values::literal_to_proto(&Literal::s32(-2));
    assert_eq!(p.s32s, vec![-2]);
    let p = values::literal_to_proto(&Literal::pred(true));
    assert_eq!(p.preds, vec![true]);
    let c = Literal::from_bytes(
        Shape::array(C64, &[1]),
        [1.0f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat(),
    )
    .unwrap();
    assert_eq!(values::literal_to_proto(&c).c64s, vec![1.0, -2.0]);
    let h = Literal::from_bytes(Shape::array(BF16, &[2]), vec![0x80, 0x3f, 0x00, 0x40]).unwrap();
    assert_eq!(
        values::literal_to_proto(&h).bf16s,
        vec![0x80, 0x3f, 0x00, 0x40]
    );
    let s4 = Literal::from_bytes(Shape::array(S4, &[3]), vec![1, 15, 7]).unwrap();
    assert_eq!(values::literal_to_proto(&s4).s4s, vec![1, 15, 7]);
    let u64l =
        Literal::from_bytes(Shape::array(U64, &[1]), u64::MAX.to_le_bytes().to_vec()).unwrap();
    assert_eq!(values::literal_to_proto(&u64l).u64s, vec![u64::MAX]);
}

// ---------------------------------------------------------------- malformed protos

fn small_proto() -> HloModuleProto {
    let mut m = Module::new("small");
    let e = m.add_computation("main").unwrap();
    let p = param(&mut m, e, 0, "p", Shape::scalar(F32));
    m.add_instruction(
        e,
        Instruction::new("n", Opcode::Negate, Shape::scalar(F32)).with_operands(&[p]),
    )
    .unwrap();
    m.set_entry(e);
    m.to_proto()
}

fn expect_error(p: &HloModuleProto, needle: &str) {
    match module_from_proto(p) {
        Ok(_) => panic!("accepted a malformed proto (expected `{needle}`)"),
        Err(e) => {
            let s = e.to_string();
            assert!(
                s.contains(needle),
                "error `{s}` does not mention `{needle}`"
            );
        }
    }
}

#[test]
fn malformed_protos_are_refused_by_name() {
    let mut p = small_proto();
    p.computations[0].instructions[1].operand_ids = vec![12345];
    expect_error(&p, "%n (id 1): operand id 12345 does not exist");

    let mut p = small_proto();
    p.computations[0].instructions[1].opcode = "frobnicate".into();
    expect_error(&p, "%n (id 1): unknown opcode `frobnicate`");

    let mut p = small_proto();
    p.computations[0].instructions[1].shape = None;
    expect_error(&p, "%n (id 1): no shape");

    let mut p = small_proto();
    p.computations[0].instructions[1]
        .shape
        .as_mut()
        .unwrap()
        .element_type = 99;
    expect_error(&p, "%n (id 1): unknown element type 99");

    let mut p = small_proto();
    p.computations[0].instructions[1].called_computation_ids = vec![7];
    expect_error(&p, "%n (id 1): called computation id 7 does not exist");

    let mut p = small_proto();
    p.computations[0].instructions[1].sharding = Some(Box::new(pb::OpSharding {
        r#type: 3,
        tile_assignment_dimensions: vec![2, 2],
        tile_assignment_devices: vec![0, 1, 2],
        ..Default::default()
    }));
    expect_error(&p, "%n (id 1): sharding: tile assignment lists 3 devices");

    let mut p = small_proto();
    p.computations[0].instructions[1].sharding = Some(Box::new(pb::OpSharding {
        r#type: 42,
        ..Default::default()
    }));
    expect_error(&p, "unknown sharding type 42");

    let mut p = small_proto();
    p.computations[0].instructions[0].parameter_number = 1 << 40;
    expect_error(
        &p,
        "%p (id 0): parameter number 1099511627776 is out of range",
    );

    let mut p = small_proto();
    p.computations[0].instructions[1].id = p.computations[0].instructions[0].id;
    expect_error(&p, "instruction id used twice");

    let mut p = small_proto();
    p.computations[0].root_id = 77;
    expect_error(&p, "computation `main` (id 0): root id 77");

    let mut p = small_proto();
    p.entry_computation_id = 5;
    p.entry_computation_name = "nope".into();
    expect_error(&p, "entry computation (id 5, name `nope`)");

    let mut p = small_proto();
    let cyc = p.computations[0].instructions[1].id;
    p.computations[0].instructions[1].operand_ids = vec![cyc];
    expect_error(&p, "forms a cycle");

    let mut p = small_proto();
    p.computations[0].instructions[1].name = "p".into();
    expect_error(&p, "already used");

    let mut p = small_proto();
    p.computations[0].instructions[1].opcode = "constant".into();
    p.computations[0].instructions[1].operand_ids.clear();
    p.computations[0].instructions[1].literal = Some(Box::new(pb::LiteralProto {
        shape: Some(values::shape_to_proto(&Shape::array(F32, &[2]))),
        f32s: vec![1.0],
        ..Default::default()
    }));
    expect_error(
        &p,
        "literal: literal of type f32 has 4 bytes of data, its shape needs 8",
    );

    let mut p = small_proto();
    p.computations[0].instructions[1]
        .shape
        .as_mut()
        .unwrap()
        .dimensions = vec![-3];
    expect_error(&p, "negative dimension -3");

    // An algorithm value the text form has no name for (fuzz finding `unknown-dot-algorithm`).
    let mut p = small_proto();
    p.computations[0].instructions[1].precision_config = Some(pb::PrecisionConfig {
        operand_precision: vec![],
        algorithm: 65,
    });
    expect_error(&p, "%n (id 1): unknown dot algorithm 65");

    // Iota replica groups that hold no device count, or whose reshape does not hold it.
    for (groups, size, reshape) in [(-2, -4, vec![]), (-2, -4, vec![8]), (2, 4, vec![-2, -4])] {
        let mut p = small_proto();
        p.computations[0].instructions[1].iota_collective_device_list =
            Some(pb::IotaReplicaGroupListProto {
                num_replica_groups: groups,
                num_devices_per_group: size,
                iota_reshape_dims: reshape,
                iota_transpose_perm: vec![],
            });
        expect_error(&p, "do not match reshape dims");
    }

    // Garbage bytes: a decode error, not a panic.
    assert!(matches!(
        from_proto_bytes(&[0xff, 0xff, 0xff]),
        Err(ProtoError::Decode { .. })
    ));
    // The first malformed top-level field is located.
    assert_eq!(
        from_proto_bytes(&[0x08, 0x01, 0x0f])
            .unwrap_err()
            .to_string(),
        "cannot decode the protobuf bytes: byte 2: invalid wire type 7 (field 1)"
    );
}

/// Fields set on an opcode that cannot carry them (the text has no place for them there) are
/// refused by the reader, naming the instruction and the field (`attr_table.rs`).
#[test]
fn misplaced_fields_are_refused_by_name() {
    type Set = fn(&mut pb::HloInstructionProto);
    let cases: &[(&str, Set)] = &[
        ("gather_slice_sizes", |i| i.gather_slice_sizes = vec![1]),
        ("channel_id", |i| i.channel_id = 3),
        ("constrain_layout", |i| i.constrain_layout = true),
        ("use_global_device_ids", |i| i.use_global_device_ids = true),
        ("dimensions", |i| i.dimensions = vec![0]),
        ("slice_dimensions", |i| {
            i.slice_dimensions = vec![pb::SliceDimensions {
                start: 0,
                limit: 1,
                stride: 1,
            }]
        }),
        ("window", |i| i.window = Some(pb::Window::default())),
        ("dot_dimension_numbers", |i| {
            i.dot_dimension_numbers = Some(pb::DotDimensionNumbers::default())
        }),
        ("precision_config.operand_precision", |i| {
            i.precision_config = Some(pb::PrecisionConfig {
                operand_precision: vec![1],
                ..Default::default()
            })
        }),
        ("tuple_index", |i| i.tuple_index = 2),
        ("comparison_direction", |i| {
            i.comparison_direction = "LT".into()
        }),
        ("fusion_kind", |i| i.fusion_kind = "kLoop".into()),
        ("is_stable", |i| i.is_stable = true),
        ("epsilon", |i| i.epsilon = 0.5),
        ("fft_length", |i| i.fft_length = vec![4]),
        ("is_host_transfer", |i| i.is_host_transfer = true),
        ("cross_program_prefetch_index", |i| {
            i.cross_program_prefetch_index = Some(1)
        }),
        ("called_computation_ids", |i| {
            i.called_computation_ids = vec![0]
        }),
        ("literal", |i| {
            i.literal = Some(Box::new(pb::LiteralProto {
                shape: Some(values::shape_to_proto(&Shape::scalar(F32))),
                f32s: vec![1.0],
                ..Default::default()
            }))
        }),
    ];
    for (field, set) in cases {
        let mut p = small_proto();
        set(&mut p.computations[0].instructions[1]);
        expect_error(
            &p,
            &format!("%n (id 1): the field `{field}` is set, but a negate cannot carry it"),
        );
    }
    // The same fields where they belong are read (the round-trip tests above cover them);
    // a parameter may still carry its number, and a default value is never misplaced.
    let mut p = small_proto();
    p.computations[0].instructions[1].is_stable = false;
    p.computations[0].instructions[1].channel_id = 0;
    module_from_proto(&p).unwrap();
    assert!(crate::attr_table::ATTR_TABLE.len() > 50);
}

/// XLA's HloModuleProto lists a while's called computations as `[body, condition]`.
#[test]
fn while_called_computations_follow_xla_order() {
    let text = "HloModule w\n\ncond {\n  p = s32[] parameter(0)\n  c = s32[] constant(3)\n  ROOT lt = pred[] compare(p, c), direction=LT\n}\n\nbody {\n  p = s32[] parameter(0)\n  one = s32[] constant(1)\n  ROOT n = s32[] add(p, one)\n}\n\nENTRY e {\n  i = s32[] constant(0)\n  ROOT w = s32[] while(i), condition=cond, body=body\n}\n";
    let m = crate::text::parse_module(text).unwrap();
    let p = crate::proto::module_to_proto(&m);
    let id_of = |name: &str| p.computations.iter().find(|c| c.name == name).unwrap().id;
    let entry = p.computations.iter().find(|c| c.name == "e").unwrap();
    let w = entry
        .instructions
        .iter()
        .find(|i| i.opcode == "while")
        .unwrap();
    assert_eq!(w.called_computation_ids, vec![id_of("body"), id_of("cond")]);
    let back = crate::proto::module_from_proto(&p).unwrap();
    let wi = back.find_instruction("w").unwrap();
    assert_eq!(back.comp(back.instr(wi).while_body().unwrap()).name, "body");
    assert_eq!(
        back.comp(back.instr(wi).while_condition().unwrap()).name,
        "cond"
    );
}

#[test]
fn corrupted_bytes_never_panic() {
    // Deterministic corruption of a rich module's bytes: flipped bytes, truncations, splices.
    // Every outcome must be Ok or a ProtoError, never a panic.
    let mut m = rich_module();
    m.config.input_output_alias = vec![InputOutputAlias {
        output_index: vec![0],
        parameter_number: 0,
        parameter_index: vec![],
        kind: AliasKind::MayAlias,
    }];
    let good = to_proto_bytes(&m);
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut ok, mut err) = (0, 0);
    for round in 0..3000 {
        let mut b = good.clone();
        match round % 3 {
            0 => {
                for _ in 0..1 + next() % 4 {
                    let i = (next() as usize) % b.len();
                    b[i] ^= 1 << (next() % 8);
                }
            }
            1 => b.truncate((next() as usize) % b.len()),
            _ => {
                let i = (next() as usize) % b.len();
                let j = (next() as usize) % b.len();
                let chunk: Vec<u8> = b[i..(i + 16).min(b.len())].to_vec();
                b.splice(j..j, chunk);
            }
        }
        match std::panic::catch_unwind(|| from_proto_bytes(&b)) {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(_)) => err += 1,
            Err(_) => panic!("round {round}: decoding corrupted bytes panicked"),
        }
    }
    assert!(
        err > 1000,
        "only {err} of 3000 corruptions were refused ({ok} accepted)"
    );
}

#[test]
fn named_shardings_round_trip_through_the_proto() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/text/xla_printed/named_shardings.hlo"
    ))
    .unwrap();
    let m = crate::text::parse_module(&text).unwrap();
    let p = round_trip(&m);
    let named = |name: &str| {
        let i = p.computations[0]
            .instructions
            .iter()
            .find(|i| i.name == name)
            .unwrap();
        let s = i.sharding.as_ref().unwrap();
        assert_eq!(s.r#type, 0, "XLA leaves the type unset on a named sharding");
        assert!(
            s.metadata.is_empty(),
            "metadata goes inside the named sharding"
        );
        (**s.named_sharding.as_ref().unwrap()).clone()
    };
    // `device_ids=([2,2,2]T(1,0,2))`, `[{'x'}, {'y':(1)2, ?}]`, `replicated={'y':(2)2}`.
    let p0 = named("p0");
    let mesh = p0.mesh.as_ref().unwrap();
    assert_eq!(mesh.axes.len(), 2);
    assert_eq!((mesh.axes[1].name.as_str(), mesh.axes[1].size), ("y", 4));
    assert!(mesh.device_ids.is_empty());
    let t = mesh.iota_transform.as_ref().unwrap();
    assert_eq!(
        (t.reshape_dims.clone(), t.transpose_perm.clone()),
        (vec![2, 2, 2], vec![1, 0, 2])
    );
    assert_eq!(p0.dim_shardings.len(), 2);
    assert!(p0.dim_shardings[0].is_closed && !p0.dim_shardings[1].is_closed);
    assert_eq!(p0.dim_shardings[1].axes[0].mesh_axis_index, 1);
    let sub = p0.dim_shardings[1].axes[0].sub_axis_info.as_ref().unwrap();
    assert_eq!((sub.pre_size, sub.size), (1, 2));
    assert_eq!(p0.replicated_axes.len(), 1);
    assert_eq!(p0.metadata[0].op_name, "a");
    // An explicit device list and `unreduced=max{'y'}`.
    let p1 = named("p1");
    assert_eq!(
        p1.mesh.as_ref().unwrap().device_ids,
        vec![7, 6, 5, 4, 3, 2, 1, 0]
    );
    assert_eq!(p1.reduction_op, 1);
    assert_eq!(p1.unreduced_axes.len(), 1);
    // `single_device[device_id=3]`: no axes, one device id.
    let s = named("s");
    let mesh = s.mesh.as_ref().unwrap();
    assert!(mesh.axes.is_empty());
    assert_eq!(mesh.device_ids, vec![3]);
    // `manual`: every axis listed as manual.
    assert_eq!(named("a").manual_axes.len(), 2);
}

#[test]
fn malformed_named_shardings_in_a_proto_are_errors() {
    let mesh = pb::MeshProto {
        axes: vec![
            pb::MeshAxis {
                name: "x".into(),
                size: 2,
            },
            pb::MeshAxis {
                name: "y".into(),
                size: 4,
            },
        ],
        ..Default::default()
    };
    let axis = |k: i64| pb::AxisRefProto {
        mesh_axis_index: k,
        sub_axis_info: None,
    };
    let with = |ns: pb::NamedShardingProto| {
        let mut p = small_proto();
        p.computations[0].instructions[1].sharding = Some(Box::new(pb::OpSharding {
            named_sharding: Some(Box::new(ns)),
            ..Default::default()
        }));
        p
    };
    let dims = |a: Vec<pb::AxisRefProto>| {
        vec![pb::DimensionShardingProto {
            axes: a,
            is_closed: true,
        }]
    };
    expect_error(
        &with(pb::NamedShardingProto {
            mesh: Some(mesh.clone()),
            dim_shardings: dims(vec![axis(5)]),
            ..Default::default()
        }),
        "axis #5 does not exist",
    );
    expect_error(
        &with(pb::NamedShardingProto {
            mesh: Some(mesh.clone()),
            dim_shardings: dims(vec![axis(0)]),
            replicated_axes: vec![axis(1), axis(0)],
            ..Default::default()
        }),
        "overlap",
    );
    expect_error(
        &with(pb::NamedShardingProto {
            mesh: Some(pb::MeshProto {
                device_ids: vec![0, 1, 2],
                ..mesh.clone()
            }),
            ..Default::default()
        }),
        "device_ids lists 3",
    );
    expect_error(
        &with(pb::NamedShardingProto {
            mesh: Some(pb::MeshProto {
                iota_transform: Some(pb::IotaTransform {
                    reshape_dims: vec![2, 2],
                    transpose_perm: vec![1, 0],
                }),
                ..mesh.clone()
            }),
            ..Default::default()
        }),
        "does not describe the mesh's 8 devices",
    );
    expect_error(
        &with(pb::NamedShardingProto {
            mesh: Some(mesh),
            dim_shardings: dims(vec![axis(0)]),
            unreduced_axes: vec![axis(1)],
            reduction_op: 7,
            ..Default::default()
        }),
        "unknown reduction op 7",
    );
}

#[test]
fn origin_recovery_table_round_trips_through_the_proto() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/text/xla_printed/origin_recovery_table.hlo"
    ))
    .unwrap();
    let m = crate::text::parse_module(&text).unwrap();
    let p = round_trip(&m);
    let t = p.original_value_recovery_table.as_ref().unwrap();
    assert_eq!(t.entries.len(), 4);
    let q = &t.entries[2];
    assert_eq!(q.old_original_array.as_ref().unwrap().instruction_name, "q");
    assert_eq!(
        q.new_original_array.as_ref().unwrap().shape_index,
        vec![0, 1]
    );
    let rec2 = q.recovery_module.as_ref().unwrap();
    assert_eq!(rec2.name, "rec2");
    assert_eq!(
        rec2.original_value_recovery_table
            .as_ref()
            .unwrap()
            .entries
            .len(),
        1
    );
    assert!(t.entries[3].recovery_module.is_none());
    // And back: the same module, printed the same.
    let back = module_from_proto(&p).unwrap();
    assert_eq!(crate::text::module_diff(&m, &back), None);
    assert_eq!(back.to_text(), m.to_text());
}

#[test]
fn debug_attributes_round_trip_through_the_proto() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/text/xla_printed/debug_attributes.hlo"
    ))
    .unwrap();
    let m = crate::text::parse_module(&text).unwrap();
    let p = round_trip(&m);
    assert_eq!(p.debug_attributes.len(), 4);
    let e = &p.debug_attributes[1];
    assert_eq!(e.original_array.as_ref().unwrap().instruction_name, "p");
    let modes: Vec<(i32, i64, i64, bool)> = e
        .debug_attributes
        .iter()
        .map(|d| (d.log_mode, d.callback_id, d.op_id, d.partitioned))
        .collect();
    assert_eq!(modes, [(1, 5, 7, true), (2, -3, 0, false)]);
    let rec = p.original_value_recovery_table.as_ref().unwrap().entries[0]
        .recovery_module
        .as_ref()
        .unwrap();
    assert_eq!(rec.debug_attributes[0].debug_attributes[0].callback_id, 9);
    // text -> proto -> text gives the same text.
    let back = module_from_proto(&p).unwrap();
    assert_eq!(back.to_text(), m.to_text());
}

/// The bytes of field 24 are the ones jaxlib 0.12 writes for the same table (taken from
/// `as_serialized_hlo_module_proto()` of a module XLA read with these entries).
#[test]
fn debug_attributes_encode_as_xla() {
    let m = crate::text::parse_module(
        "HloModule m, debug_attributes={\
         {\"a\"}:({log_mode=default,callback_id=5,partitioned=true,op_id=7},\
         {log_mode=fusion_debugger,callback_id=3}), \
         {\"t\" {0,1}}:({callback_id=-1},{callback_id=2})}\n\
         ENTRY e {\n  ROOT t = (f32[2], f32[2]) parameter(0)\n}\n",
    )
    .unwrap();
    let bytes = to_proto_bytes(&m);
    let xla: [&[u8]; 2] = [
        &[
            0xc2, 0x01, 0x15, 0x0a, 0x03, 0x0a, 0x01, b'a', 0x12, 0x08, 0x08, 0x01, 0x10, 0x05,
            0x18, 0x07, 0x20, 0x01, 0x12, 0x04, 0x08, 0x02, 0x10, 0x03,
        ],
        &[
            0xc2, 0x01, 0x1a, 0x0a, 0x07, 0x0a, 0x01, b't', 0x12, 0x02, 0x00, 0x01, 0x12, 0x0b,
            0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x12, 0x02, 0x10,
            0x02,
        ],
    ];
    let joined = [xla[0], xla[1]].concat();
    assert!(
        bytes.windows(joined.len()).any(|w| w == joined.as_slice()),
        "field 24 differs from XLA's bytes"
    );
}

#[test]
fn debug_attributes_from_xla_protos() {
    let entry = |name: &str, modes: &[i32]| pb::DebugAttributeTableEntryProto {
        original_array: Some(pb::OriginalArrayProto {
            instruction_name: name.into(),
            shape_index: vec![],
        }),
        debug_attributes: modes
            .iter()
            .map(|&log_mode| pb::DebugAttributesProto {
                log_mode,
                callback_id: 4,
                operands_sharding: "{replicated}".into(),
                x64_config: Some(pb::X64ConfigProto {
                    xprecision_64bit_fragment: "f".into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
    };
    let m = crate::text::parse_module("HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n")
        .unwrap();
    let mut p = m.to_proto();
    // NO_FUSION and GUARANTEED read as no log mode and the sharding and x64 config are
    // dropped, as in XLA; an entry without attributes is dropped.
    p.debug_attributes = vec![entry("a", &[3, 4, 2]), entry("b", &[])];
    let back = module_from_proto(&p).unwrap();
    let t = &back.config.debug_attributes;
    assert_eq!(t.len(), 1);
    let a = &t.values().next().unwrap();
    let modes: Vec<_> = a.iter().map(|d| (d.log_mode, d.callback_id)).collect();
    use crate::module::DebugLogMode;
    assert_eq!(
        modes,
        [
            (DebugLogMode::None, 4),
            (DebugLogMode::None, 4),
            (DebugLogMode::FusionDebugger, 4)
        ]
    );
    p.debug_attributes = vec![entry("a", &[9])];
    expect_error(&p, "unknown debug log mode 9");
    p.debug_attributes = vec![entry("a", &[1]), entry("a", &[2])];
    expect_error(&p, "listed twice");
}

#[test]
fn optional_field_enum_matches_the_names() {
    use super::import::{default_present, default_present_of, OPTIONAL_FIELDS, OPT_FIELDS};
    assert_eq!(OPT_FIELDS.len(), OPTIONAL_FIELDS.len());
    let p = pb::HloInstructionProto {
        channel_id: 3,
        ..Default::default()
    };
    for (k, f) in OPT_FIELDS.into_iter().enumerate() {
        assert_eq!(f as usize, k);
        assert_eq!(f.name(), OPTIONAL_FIELDS[k]);
        for op in [Opcode::Slice, Opcode::Fft, Opcode::Add, Opcode::Domain] {
            assert_eq!(
                default_present(f.name(), op, &p),
                default_present_of(f, op, &p)
            );
        }
    }
    assert!(default_present("channel_id", Opcode::Add, &p));
    assert!(!default_present("no_such_field", Opcode::Add, &p));
}

/// Mesh replica groups keep an iota device order through the proto (`MeshProto.iota_transform`,
/// which XLA of mid-2026 writes for its partitioner's collectives).
#[test]
fn mesh_replica_groups_keep_an_iota_device_order() {
    let text = "HloModule m, num_partitions=8\n\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT a = f32[2] all-to-all(p), channel_id=1, replica_groups=mesh['x'=2,'y'=4], device_ids=([2,2,2]T(0,2,1)) {'y':(2)2}, dimensions={0}\n}\n";
    let m = crate::text::parse_module(text).unwrap();
    let p = round_trip(&m);
    let a = p.computations[0]
        .instructions
        .iter()
        .find(|i| i.opcode == "all-to-all")
        .unwrap();
    let mesh = a
        .mesh_axes_replica_group_list
        .as_ref()
        .and_then(|g| g.mesh.as_ref())
        .unwrap();
    assert!(mesh.device_ids.is_empty());
    let t = mesh.iota_transform.as_ref().unwrap();
    assert_eq!(
        (t.reshape_dims.clone(), t.transpose_perm.clone()),
        (vec![2, 2, 2], vec![0, 2, 1])
    );
    let back = module_from_proto(&p).unwrap();
    let groups = back
        .instr(back.find_instruction("a").unwrap())
        .attrs
        .replica_groups
        .as_ref()
        .unwrap()
        .groups()
        .unwrap();
    assert_eq!(groups, vec![vec![0, 2], vec![1, 3], vec![4, 6], vec![5, 7]]);
}
