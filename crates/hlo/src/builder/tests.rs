use super::*;
use crate::attrs::ComparisonDirection::Lt;
use crate::metadata::OpMetadata;
use crate::verify::{verify, VerifyOptions};
use ElementType::{F32, S32};

fn f32a(dims: &[i64]) -> Shape {
    Shape::array(F32, dims)
}

/// A module with `ENTRY main (p: f32[8,4])` whose one other instruction `%orig = negate(p)`
/// carries metadata and a frontend attribute.
fn base() -> (Module, CompId, InstrId, InstrId) {
    let mut m = Module::new("m");
    m.config.num_partitions = 4;
    let c = m.add_computation("main").unwrap();
    m.set_entry(c);
    let mut p = Instruction::new("p", Opcode::Parameter, f32a(&[8, 4]));
    p.attrs.parameter_number = 0;
    let p = m.add_instruction(c, p).unwrap();
    let mut o = Instruction::new("orig", Opcode::Negate, f32a(&[8, 4])).with_operands(&[p]);
    o.metadata = Some(OpMetadata {
        op_name: "jit(f)/neg".into(),
        ..OpMetadata::default()
    });
    o.frontend_attributes.insert("k".into(), "v".into());
    let o = m.add_instruction(c, o).unwrap();
    m.set_root(c, o);
    (m, c, p, o)
}

fn check(m: &Module) {
    if let Err(e) = verify(m, &VerifyOptions::default()) {
        panic!("{e}\n{}", m.to_text());
    }
}

#[test]
fn names_metadata_and_the_record_of_derived_instructions() {
    let (mut m, c, p, o) = base();
    let mut b = Builder::new(&mut m, c);
    let plain = b.unary(Opcode::Negate, p).unwrap();
    b.set_origin(Some(o));
    let a = b.binary(Opcode::Add, p, p).unwrap();
    let a2 = b.binary(Opcode::Add, a, p).unwrap();
    b.set_origin(Some(p));
    let t = b.tuple(&[a2]).unwrap();
    b.set_origin(None);
    let named = b
        .add(Instruction::new("orig", Opcode::Copy, f32a(&[8, 4])).with_operands(&[a2]))
        .unwrap();
    assert_eq!(b.derived(o), &[a, a2]);
    assert_eq!(b.derived(p), &[t]);
    assert!(b.derived(plain).is_empty());
    assert_eq!(
        b.derived_map().keys().copied().collect::<Vec<_>>(),
        vec![o, p]
    );
    let derived = b.into_derived();
    assert_eq!(derived.len(), 2);
    // Names from the opcode (XLA's spelling), unique with `.N`; a given name is made unique.
    let names: Vec<&str> = [plain, a, a2, t, named]
        .iter()
        .map(|&i| m.instr(i).name.as_str())
        .collect();
    assert_eq!(names, ["negate", "add", "add.1", "tuple", "orig.1"]);
    // Metadata and frontend attributes come from the origin only.
    assert_eq!(m.instr(a).metadata, m.instr(o).metadata);
    assert_eq!(m.instr(a2).frontend_attributes["k"], "v");
    assert!(m.instr(plain).metadata.is_none());
    assert!(m.instr(t).metadata.is_none());
    assert!(m.instr(named).frontend_attributes.is_empty());
}

#[test]
fn every_helper_builds_a_verified_instruction() {
    let (mut m, c, p, o) = base();
    let mut b = Builder::new(&mut m, c);
    b.set_origin(Some(o));
    let pid = b.partition_id().unwrap();
    let rid = b.replica_id().unwrap();
    let four = b.scalar(S32, 4.0).unwrap();
    let pid_s = b.convert(pid, S32).unwrap();
    let off = b.binary(Opcode::Multiply, pid_s, four).unwrap();
    let zero_i = b.scalar(S32, 0.0).unwrap();
    let ds = b.dynamic_slice(p, &[off, zero_i], &[2, 4]).unwrap();
    let sl = b.slice(p, &[0, 1], &[8, 4], &[2, 1]).unwrap();
    let zero = b.scalar(F32, 0.0).unwrap();
    let pd = b
        .pad(
            sl,
            zero,
            &[
                PaddingDim {
                    low: 1,
                    high: 1,
                    interior: 0,
                },
                PaddingDim {
                    low: 0,
                    high: 1,
                    interior: 0,
                },
            ],
        )
        .unwrap();
    let cat = b.concatenate(&[ds, pd], 0).unwrap();
    let rs = b.reshape(cat, &[32]).unwrap();
    let tr = b.transpose(p, &[1, 0]).unwrap();
    let bc = b.broadcast(zero, &[4, 8], &[]).unwrap();
    let io = b.iota(Shape::array(S32, &[4, 8]), 1).unwrap();
    let lim = b.scalar(S32, 5.0).unwrap();
    let lim_b = b.broadcast(lim, &[4, 8], &[]).unwrap();
    let cmp = b.compare(io, lim_b, Lt).unwrap();
    let sel = b.select(cmp, tr, bc).unwrap();
    let dus = b.dynamic_update_slice(p, ds, &[zero_i, zero_i]).unwrap();
    let add = b.reducer(F32, Opcode::Add).unwrap();
    let red = b.reduce(sel, zero, &[1], add).unwrap();
    let groups = ReplicaGroups::iota(1, 4);
    let ar = b.all_reduce(red, Opcode::Add, groups.clone()).unwrap();
    let ag = b.all_gather(ds, 0, groups.clone()).unwrap();
    let rsc = b
        .reduce_scatter(p, 0, Opcode::Maximum, ReplicaGroups::iota(2, 2))
        .unwrap();
    let a2a = b.all_to_all(p, 0, groups).unwrap();
    let cp = b
        .collective_permute(ds, &[(0, 1), (1, 2), (2, 3), (3, 0)])
        .unwrap();
    let t = b.tuple(&[rs, sel, dus, ar, ag, rsc, a2a, cp, rid]).unwrap();
    let gte = b.get_tuple_element(t, 3).unwrap();
    b.module_mut().set_root(c, t);
    let shapes = [
        (ds, f32a(&[2, 4])),
        (sl, f32a(&[4, 3])),
        (pd, f32a(&[6, 4])),
        (cat, f32a(&[8, 4])),
        (rs, f32a(&[32])),
        (tr, f32a(&[4, 8])),
        (cmp, Shape::array(ElementType::Pred, &[4, 8])),
        (red, f32a(&[4])),
        (ag, f32a(&[8, 4])),
        (rsc, f32a(&[4, 4])),
        (a2a, f32a(&[8, 4])),
        (gte, f32a(&[4])),
    ];
    for (id, want) in shapes {
        assert_eq!(m.instr(id).shape, want, "%{}", m.instr(id).name);
    }
    // Collectives as the plugin runs them: fresh channels, flattened ids (not for all-to-all
    // and collective-permute, which have no such flag).
    let chans: Vec<i64> = [ar, ag, rsc, a2a, cp]
        .iter()
        .map(|&i| m.instr(i).attrs.channel_id.unwrap())
        .collect();
    assert_eq!(chans, [1, 2, 3, 4, 5]);
    for i in [ar, ag, rsc] {
        assert!(m.instr(i).attrs.use_global_device_ids);
    }
    assert!(!m.instr(a2a).attrs.use_global_device_ids);
    // One reduction computation per (type, op), before its callers.
    assert_eq!(m.instr(ar).called.as_slice(), &[add]);
    assert_ne!(m.instr(rsc).called[0], add);
    assert_eq!(m.computations()[..2].len(), 2);
    assert!(
        m.computations().iter().position(|&x| x == add)
            < m.computations().iter().position(|&x| x == c)
    );
    check(&m);
    assert_eq!(m.next_channel_id(), 6);
}

#[test]
fn reducers_are_cached_per_type_and_op_and_rebuilt_when_removed() {
    let (mut m, c, _, _) = base();
    let mut b = Builder::new(&mut m, c);
    let add = b.reducer(F32, Opcode::Add).unwrap();
    assert_eq!(b.reducer(F32, Opcode::Add).unwrap(), add);
    let add_s32 = b.reducer(S32, Opcode::Add).unwrap();
    let max = b.reducer(F32, Opcode::Maximum).unwrap();
    assert_ne!(add, add_s32);
    assert_ne!(add, max);
    let err = b.reducer(F32, Opcode::Negate).unwrap_err();
    assert!(
        err.to_string()
            .contains("negate is not an element-wise binary"),
        "{err}"
    );
    assert_eq!(b.module().comp(add).name, "add_f32");
    assert_eq!(b.module().comp(max).name, "maximum_f32");
    // A later builder reuses the module's cache.
    drop(b);
    let mut b = Builder::new(&mut m, c);
    assert_eq!(b.reducer(F32, Opcode::Add).unwrap(), add);
    b.module_mut().remove_computation(add);
    let again = b.reducer(F32, Opcode::Add).unwrap();
    assert_ne!(again, add);
    assert_eq!(b.module().comp(again).name, "add_f32");
    check(&m);
}

#[test]
fn errors_name_the_instruction_being_built_and_its_origin() {
    let (mut m, c, p, o) = base();
    let mut b = Builder::new(&mut m, c);
    let err = b.reshape(p, &[5]).unwrap_err();
    assert!(matches!(err, BuildError::Shape { .. }));
    assert!(
        err.to_string()
            .starts_with("building reshape in computation main: reshape changes the element count"),
        "{err}"
    );
    b.set_origin(Some(o));
    let err = b.slice(p, &[0], &[9], &[1]).unwrap_err();
    assert!(
        err.to_string().starts_with("building slice for %orig: "),
        "{err}"
    );
    let err = b.slice(p, &[0, 0], &[1], &[1, 1]).unwrap_err();
    assert!(matches!(err, BuildError::Invalid { .. }), "{err}");
    let other = b.module_mut().add_computation("other").unwrap();
    b.set_computation(other);
    let err = b.unary(Opcode::Negate, p).unwrap_err();
    assert!(matches!(err, BuildError::Mutation { .. }), "{err}");
    // Nothing was added by the failed builds.
    assert_eq!(m.comp(c).instructions().len(), 2);
    assert!(m.comp(other).instructions().is_empty());
}

#[test]
fn channels_continue_after_the_modules_largest() {
    let (mut m, c, p, _) = base();
    let mut ar = Instruction::new("ar", Opcode::AllReduce, f32a(&[8, 4])).with_operands(&[p]);
    ar.attrs.channel_id = Some(41);
    let mut b = Builder::new(&mut m, c);
    let add = b.reducer(F32, Opcode::Add).unwrap();
    b.add(ar.with_called(&[add])).unwrap();
    assert_eq!(b.next_channel_id(), 42);
    assert_eq!(b.next_channel_id(), 43);
    let cp = b.collective_permute(p, &[(0, 1)]).unwrap();
    assert_eq!(m.instr(cp).attrs.channel_id, Some(44));
}

#[test]
fn program_shapes_and_scalars() {
    let (mut m, c, _, o) = base();
    let ps = m.program_shape(c);
    assert_eq!(ps.parameters, vec![f32a(&[8, 4])]);
    assert_eq!(ps.result, m.instr(o).shape);
    let mut b = Builder::new(&mut m, c);
    for (ty, v, bytes) in [
        (ElementType::Pred, 1.0, vec![1u8]),
        (S32, -2.0, (-2i32).to_le_bytes().to_vec()),
        (ElementType::U8, 300.0, vec![44]), // wraps: 300 mod 256
        (ElementType::BF16, 1.0, vec![0x80, 0x3f]),
        (ElementType::F16, -2.0, vec![0x00, 0xc0]),
        (ElementType::F64, 0.5, 0.5f64.to_le_bytes().to_vec()),
    ] {
        let k = b.scalar(ty, v).unwrap();
        let lit = b.module().instr(k).attrs.literal.as_deref().unwrap();
        assert_eq!(lit.bytes().unwrap(), bytes.as_slice(), "{ty}");
    }
    assert!(b.scalar(ElementType::Token, 0.0).is_err());
}

#[test]
fn pad_dim_pads_one_dimension_and_refuses_one_past_the_rank() {
    let (mut m, c, p, _) = base();
    let mut b = Builder::new(&mut m, c);
    let zero = b.scalar(F32, 0.0).unwrap();
    let side = PaddingDim {
        low: 1,
        high: 2,
        interior: 0,
    };
    let x = b.pad_dim(p, zero, 1, side).unwrap();
    let i = b.module().instr(x);
    assert_eq!(i.shape, f32a(&[8, 7]));
    assert_eq!(
        i.attrs.padding.as_deref(),
        Some(&[PaddingDim::default(), side][..])
    );
    assert!(b.pad_dim(p, zero, 2, side).is_err());
    check(&m);
}
