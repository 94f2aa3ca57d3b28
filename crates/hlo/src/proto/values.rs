//! Conversions of the value-like parts (shapes, layouts, literals, shardings, metadata, replica
//! groups) between the IR and their `xla.*` messages, both ways.

use smallvec::SmallVec;

use super::messages as pb;
use crate::attrs::{MeshReplicaGroups, ReplicaGroups};
use crate::literal::{Literal, LiteralData};
use crate::metadata::{FrontendAttributes, OpMetadata};
use crate::rare::Rare;
use crate::shape::{
    checked_product, ArrayShape, DimLevel, DimLevelType, Layout, LayoutExtras, Shape, SplitConfig,
    Tile,
};
use crate::sharding::{
    AxisRef, DimSharding, Mesh, MeshAxis, MeshDevices, NamedSharding, ReductionOp, ShardGroup,
    Sharding, ShardingKind, SubAxis, SubgroupType, TileAssignment, TiledSharding,
};
use crate::types::ElementType;

/// A conversion failure inside one value; the caller adds the instruction or place.
pub(crate) type VResult<T> = Result<T, String>;

// ---------------------------------------------------------------- shapes

pub(crate) fn shape_to_proto(s: &Shape) -> pb::ShapeProto {
    match s {
        Shape::Array(a) => pb::ShapeProto {
            element_type: a.ty.proto_value(),
            dimensions: a.dims.to_vec(),
            is_dynamic_dimension: (0..a.rank()).map(|d| a.is_dynamic_dim(d)).collect(),
            tuple_shapes: Vec::new(),
            // XLA wants a layout on every array shape (a constant's must equal its literal's).
            layout: Some(match &a.layout {
                Some(l) => layout_to_proto(l),
                None => pb::LayoutProto {
                    tessera_default_filled: true,
                    ..layout_to_proto(&Layout::descending(a.rank()))
                },
            }),
        },
        Shape::Tuple(e) => pb::ShapeProto {
            element_type: ElementType::Tuple.proto_value(),
            tuple_shapes: e.iter().map(shape_to_proto).collect(),
            ..Default::default()
        },
        Shape::Token => pb::ShapeProto {
            element_type: ElementType::Token.proto_value(),
            ..Default::default()
        },
        Shape::Opaque => pb::ShapeProto {
            element_type: ElementType::Opaque.proto_value(),
            ..Default::default()
        },
        // XLA stores a buffer's array shape as the single tuple element of a BUFFER shape.
        Shape::Buffer(inner) => pb::ShapeProto {
            element_type: ElementType::Buffer.proto_value(),
            tuple_shapes: vec![shape_to_proto(inner)],
            ..Default::default()
        },
    }
}

pub(crate) fn shape_from_proto(p: &pb::ShapeProto) -> VResult<Shape> {
    let ty = ElementType::from_proto_value(p.element_type)
        .ok_or_else(|| format!("unknown element type {} in a shape", p.element_type))?;
    Ok(match ty {
        ElementType::Tuple => Shape::Tuple(
            p.tuple_shapes
                .iter()
                .map(shape_from_proto)
                .collect::<VResult<_>>()?,
        ),
        ElementType::Token => Shape::Token,
        ElementType::Opaque => Shape::Opaque,
        ElementType::Buffer => {
            let [inner] = p.tuple_shapes.as_slice() else {
                return Err(format!(
                    "a buffer shape needs exactly one inner shape, found {}",
                    p.tuple_shapes.len()
                ));
            };
            Shape::Buffer(Box::new(shape_from_proto(inner)?))
        }
        _ => {
            let rank = p.dimensions.len();
            if !p.is_dynamic_dimension.is_empty() && p.is_dynamic_dimension.len() != rank {
                return Err(format!(
                    "is_dynamic_dimension has {} entries for a rank-{rank} shape",
                    p.is_dynamic_dimension.len()
                ));
            }
            if let Some(d) = p
                .dimensions
                .iter()
                .find(|&&d| d < 0 && d != crate::shape::UNBOUNDED_DIM)
            {
                return Err(format!("negative dimension {d} in a shape"));
            }
            let dynamic: SmallVec<[bool; 4]> = if p.is_dynamic_dimension.iter().any(|&d| d) {
                p.is_dynamic_dimension.iter().copied().collect()
            } else {
                SmallVec::new()
            };
            let a = ArrayShape {
                ty,
                dims: p.dimensions.iter().copied().collect(),
                dynamic,
                layout: p
                    .layout
                    .as_ref()
                    .filter(|l| !l.tessera_default_filled)
                    .map(layout_from_proto)
                    .transpose()?,
            };
            if a.checked_byte_size().is_none() {
                return Err(format!(
                    "shape {} has more elements or bytes than an i64 can count",
                    crate::text::shape_to_string(&Shape::Array(a))
                ));
            }
            Shape::Array(a)
        }
    })
}

fn dim_level_to_proto(t: DimLevelType) -> i32 {
    match t {
        DimLevelType::Dense => 0,
        DimLevelType::Compressed => 1,
        DimLevelType::Singleton => 2,
        DimLevelType::LooseCompressed => 3,
    }
}

fn dim_level_from_proto(v: i32) -> VResult<DimLevelType> {
    Ok(match v {
        0 => DimLevelType::Dense,
        1 => DimLevelType::Compressed,
        2 => DimLevelType::Singleton,
        3 => DimLevelType::LooseCompressed,
        _ => return Err(format!("unknown dim level type {v} in a layout")),
    })
}

pub(crate) fn layout_to_proto(l: &Layout) -> pb::LayoutProto {
    pb::LayoutProto {
        minor_to_major: l.minor_to_major.to_vec(),
        dim_level_types: l
            .dim_levels
            .iter()
            .map(|d| dim_level_to_proto(d.ty))
            .collect(),
        dim_unique: l.dim_levels.iter().map(|d| d.unique).collect(),
        dim_ordered: l.dim_levels.iter().map(|d| d.ordered).collect(),
        tiles: l
            .tiles
            .iter()
            .map(|t| pb::TileProto {
                dimensions: t.dims.to_vec(),
            })
            .collect(),
        // XLA's "no tail padding" is 1; the IR's canonical value is 0.
        tail_padding_alignment_in_elements: l.tail_padding_alignment_in_elements.max(1),
        element_size_in_bits: l.element_size_in_bits,
        memory_space: l.memory_space,
        index_primitive_type: l.index_primitive_type.map_or(0, ElementType::proto_value),
        pointer_primitive_type: l.pointer_primitive_type.map_or(0, ElementType::proto_value),
        physical_shape: l
            .physical_shape
            .as_ref()
            .map(|s| Box::new(shape_to_proto(s))),
        dynamic_shape_metadata_prefix_bytes: l.dynamic_shape_metadata_prefix_bytes,
        split_configs: l
            .split_configs
            .iter()
            .map(|s| pb::SplitConfigProto {
                dimension: s.dimension,
                split_indices: s.split_indices.clone(),
            })
            .collect(),
        tessera_default_filled: false,
    }
}

fn opt_type(v: i32, what: &str) -> VResult<Option<ElementType>> {
    if v == 0 {
        return Ok(None);
    }
    let t = ElementType::from_proto_value(v)
        .ok_or_else(|| format!("unknown {what} {v} in a layout"))?;
    // The text form takes only integer types here (`#(s32)`).
    if !t.is_integral() {
        return Err(format!(
            "{what} {} in a layout is not an integer type",
            t.name()
        ));
    }
    Ok(Some(t))
}

pub(crate) fn layout_from_proto(p: &pb::LayoutProto) -> VResult<Layout> {
    let n = p.dim_level_types.len();
    let mut dim_levels = Vec::with_capacity(n);
    for (i, &t) in p.dim_level_types.iter().enumerate() {
        dim_levels.push(DimLevel {
            ty: dim_level_from_proto(t)?,
            unique: p.dim_unique.get(i).copied().unwrap_or(true),
            ordered: p.dim_ordered.get(i).copied().unwrap_or(true),
        });
    }
    let extras = LayoutExtras {
        dim_levels,
        tiles: p
            .tiles
            .iter()
            .map(|t| Tile {
                dims: t.dimensions.iter().copied().collect(),
            })
            .collect(),
        tail_padding_alignment_in_elements: if p.tail_padding_alignment_in_elements == 1 {
            0
        } else {
            p.tail_padding_alignment_in_elements
        },
        index_primitive_type: opt_type(p.index_primitive_type, "index primitive type")?,
        pointer_primitive_type: opt_type(p.pointer_primitive_type, "pointer primitive type")?,
        element_size_in_bits: p.element_size_in_bits,
        memory_space: p.memory_space,
        split_configs: p
            .split_configs
            .iter()
            .map(|s| SplitConfig {
                dimension: s.dimension,
                split_indices: s.split_indices.clone(),
            })
            .collect(),
        physical_shape: p
            .physical_shape
            .as_deref()
            .map(shape_from_proto)
            .transpose()?
            .map(Box::new),
        dynamic_shape_metadata_prefix_bytes: p.dynamic_shape_metadata_prefix_bytes,
    };
    Ok(Layout {
        minor_to_major: p.minor_to_major.iter().copied().collect(),
        extras: Rare::from_value(extras),
    })
}

// ---------------------------------------------------------------- literals

/// Which field of `LiteralProto` holds the elements of a type, and how.
enum LiteralField {
    Preds,
    Bytes(fn(&mut pb::LiteralProto) -> &mut Vec<u8>),
    S32,
    S64,
    U32,
    U64,
    F32,
    F64,
    C64,
    C128,
}

fn literal_field(ty: ElementType) -> Option<LiteralField> {
    use ElementType::*;
    use LiteralField as L;
    Some(match ty {
        Pred => L::Preds,
        S1 => L::Bytes(|p| &mut p.s1s),
        S2 => L::Bytes(|p| &mut p.s2s),
        S4 => L::Bytes(|p| &mut p.s4s),
        S8 => L::Bytes(|p| &mut p.s8s),
        U1 => L::Bytes(|p| &mut p.u1s),
        U2 => L::Bytes(|p| &mut p.u2s),
        U4 => L::Bytes(|p| &mut p.u4s),
        U8 => L::Bytes(|p| &mut p.u8s),
        S16 => L::Bytes(|p| &mut p.s16s),
        U16 => L::Bytes(|p| &mut p.u16s),
        F16 => L::Bytes(|p| &mut p.f16s),
        BF16 => L::Bytes(|p| &mut p.bf16s),
        F8E5M2 => L::Bytes(|p| &mut p.f8e5m2s),
        F8E4M3 => L::Bytes(|p| &mut p.f8e4m3s),
        F8E4M3FN => L::Bytes(|p| &mut p.f8e4m3fns),
        F8E4M3B11FNUZ => L::Bytes(|p| &mut p.f8e4m3b11fnuzs),
        F8E3M4 => L::Bytes(|p| &mut p.f8e3m4s),
        F8E5M2FNUZ => L::Bytes(|p| &mut p.f8e5m2fnuzs),
        F8E4M3FNUZ => L::Bytes(|p| &mut p.f8e4m3fnuzs),
        F4E2M1FN => L::Bytes(|p| &mut p.f4e2m1fns),
        F8E8M0FNU => L::Bytes(|p| &mut p.f8e8m0fnus),
        S32 => L::S32,
        S64 => L::S64,
        U32 => L::U32,
        U64 => L::U64,
        F32 => L::F32,
        F64 => L::F64,
        C64 => L::C64,
        C128 => L::C128,
        Token | Opaque | Tuple | Buffer => return None,
    })
}

fn chunks<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    b.chunks_exact(N).map(|c| c.try_into().unwrap())
}

pub(crate) fn literal_to_proto(l: &Literal) -> pb::LiteralProto {
    let mut p = pb::LiteralProto {
        shape: Some(shape_to_proto(&l.shape)),
        ..Default::default()
    };
    match &l.data {
        LiteralData::Tuple(t) => p.tuple_literals = t.iter().map(literal_to_proto).collect(),
        LiteralData::None => {}
        LiteralData::Array(b) => {
            let Some(field) = literal_field(l.shape.element_type()) else {
                return p;
            };
            match field {
                LiteralField::Preds => p.preds = b.iter().map(|&x| x != 0).collect(),
                LiteralField::Bytes(f) => *f(&mut p) = b.clone(),
                LiteralField::S32 => p.s32s = chunks::<4>(b).map(i32::from_le_bytes).collect(),
                LiteralField::S64 => p.s64s = chunks::<8>(b).map(i64::from_le_bytes).collect(),
                LiteralField::U32 => p.u32s = chunks::<4>(b).map(u32::from_le_bytes).collect(),
                LiteralField::U64 => p.u64s = chunks::<8>(b).map(u64::from_le_bytes).collect(),
                LiteralField::F32 | LiteralField::C64 => {
                    let v = chunks::<4>(b).map(f32::from_le_bytes).collect();
                    if matches!(field, LiteralField::F32) {
                        p.f32s = v;
                    } else {
                        p.c64s = v;
                    }
                }
                LiteralField::F64 | LiteralField::C128 => {
                    let v = chunks::<8>(b).map(f64::from_le_bytes).collect();
                    if matches!(field, LiteralField::F64) {
                        p.f64s = v;
                    } else {
                        p.c128s = v;
                    }
                }
            }
        }
    }
    p
}

pub(crate) fn literal_from_proto(p: &pb::LiteralProto) -> VResult<Literal> {
    let shape = shape_from_proto(
        p.shape
            .as_ref()
            .ok_or_else(|| "literal without a shape".to_string())?,
    )?;
    literal_from_proto_with_shape(p, shape)
}

fn literal_from_proto_with_shape(p: &pb::LiteralProto, shape: Shape) -> VResult<Literal> {
    let data = match &shape {
        Shape::Tuple(elems) => {
            if elems.len() != p.tuple_literals.len() {
                return Err(format!(
                    "tuple literal has {} elements, its shape {}",
                    p.tuple_literals.len(),
                    elems.len()
                ));
            }
            LiteralData::Tuple(
                p.tuple_literals
                    .iter()
                    .zip(elems)
                    .map(|(t, s)| {
                        let own = t.shape.as_ref().map(shape_from_proto).transpose()?;
                        literal_from_proto_with_shape(t, own.unwrap_or_else(|| s.clone()))
                    })
                    .collect::<VResult<_>>()?,
            )
        }
        Shape::Array(a) => {
            let count = a
                .dims
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
                .ok_or_else(|| format!("literal shape {:?} has no element count", a.dims))?;
            let field = literal_field(a.ty).expect("array types have a literal field");
            let mut q = p.clone();
            let bytes: Vec<u8> = match field {
                LiteralField::Preds => p.preds.iter().map(|&x| x as u8).collect(),
                LiteralField::Bytes(f) => std::mem::take(f(&mut q)),
                LiteralField::S32 => p.s32s.iter().flat_map(|x| x.to_le_bytes()).collect(),
                LiteralField::S64 => p.s64s.iter().flat_map(|x| x.to_le_bytes()).collect(),
                LiteralField::U32 => p.u32s.iter().flat_map(|x| x.to_le_bytes()).collect(),
                LiteralField::U64 => p.u64s.iter().flat_map(|x| x.to_le_bytes()).collect(),
                LiteralField::F32 => p.f32s.iter().flat_map(|x| x.to_le_bytes()).collect(),
                LiteralField::F64 => p.f64s.iter().flat_map(|x| x.to_le_bytes()).collect(),
                LiteralField::C64 => p.c64s.iter().flat_map(|x| x.to_le_bytes()).collect(),
                LiteralField::C128 => p.c128s.iter().flat_map(|x| x.to_le_bytes()).collect(),
            };
            let want = count * a.ty.byte_size();
            if bytes.len() != want {
                return Err(format!(
                    "literal of type {} has {} bytes of data, its shape needs {want}",
                    a.ty,
                    bytes.len()
                ));
            }
            LiteralData::Array(bytes)
        }
        Shape::Token | Shape::Opaque | Shape::Buffer(_) => LiteralData::None,
    };
    Ok(Literal { shape, data })
}

// ---------------------------------------------------------------- metadata

pub(crate) fn metadata_to_proto(m: &OpMetadata) -> pb::OpMetadata {
    pb::OpMetadata {
        op_type: m.op_type.clone(),
        op_name: m.op_name.clone(),
        source_file: m.source_file.clone(),
        source_line: m.source_line,
        source_end_line: m.source_end_line,
        source_column: m.source_column,
        source_end_column: m.source_end_column,
        profile_type: m.profile_type.clone(),
        size_of_generated_code_in_bytes: m.size_of_generated_code_in_bytes,
        size_of_memory_working_set_in_bytes: m.size_of_memory_working_set_in_bytes,
        deduplicated_name: m.deduplicated_name.clone(),
        preserve_layout: m.preserve_layout,
        stack_frame_id: m.stack_frame_id,
        scheduling_name: m.scheduling_name.clone(),
    }
}

pub(crate) fn metadata_from_proto(p: &pb::OpMetadata) -> OpMetadata {
    OpMetadata {
        op_type: p.op_type.clone(),
        op_name: p.op_name.clone(),
        source_file: p.source_file.clone(),
        source_line: p.source_line,
        source_end_line: p.source_end_line,
        source_column: p.source_column,
        source_end_column: p.source_end_column,
        profile_type: p.profile_type.clone(),
        size_of_generated_code_in_bytes: p.size_of_generated_code_in_bytes,
        size_of_memory_working_set_in_bytes: p.size_of_memory_working_set_in_bytes,
        deduplicated_name: p.deduplicated_name.clone(),
        preserve_layout: p.preserve_layout,
        stack_frame_id: p.stack_frame_id,
        scheduling_name: p.scheduling_name.clone(),
    }
}

pub(crate) fn frontend_attributes_to_proto(f: &FrontendAttributes) -> pb::FrontendAttributes {
    pb::FrontendAttributes {
        map: f
            .iter()
            .map(|(k, v)| pb::FrontendAttributesEntry {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
    }
}

pub(crate) fn frontend_attributes_from_proto(p: &pb::FrontendAttributes) -> FrontendAttributes {
    // Later entries win, as protobuf map semantics say.
    p.map
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect()
}

// ---------------------------------------------------------------- shardings

const SHARDING_REPLICATED: i32 = 0;
const SHARDING_MAXIMAL: i32 = 1;
const SHARDING_TUPLE: i32 = 2;
const SHARDING_OTHER: i32 = 3;
const SHARDING_MANUAL: i32 = 4;
const SHARDING_UNKNOWN: i32 = 5;
const SHARDING_UNREDUCED: i32 = 6;

fn subgroup_to_proto(t: SubgroupType) -> i32 {
    match t {
        SubgroupType::Replicated => SHARDING_REPLICATED,
        SubgroupType::Manual => SHARDING_MANUAL,
        SubgroupType::Maximal => SHARDING_MAXIMAL,
        SubgroupType::Unreduced => SHARDING_UNREDUCED,
    }
}

fn subgroup_from_proto(v: i32) -> VResult<SubgroupType> {
    Ok(match v {
        SHARDING_REPLICATED => SubgroupType::Replicated,
        SHARDING_MANUAL => SubgroupType::Manual,
        SHARDING_MAXIMAL => SubgroupType::Maximal,
        SHARDING_UNREDUCED => SubgroupType::Unreduced,
        _ => return Err(format!("sharding type {v} cannot stand in last_tile_dims")),
    })
}

pub(crate) fn sharding_to_proto(s: &Sharding) -> pb::OpSharding {
    if let ShardingKind::Named(n) = &s.kind {
        // As XLA's `HloSharding::ToProto`: only `named_sharding`, metadata inside it. A shard
        // group has no place there (the verifier refuses one on a named sharding).
        return pb::OpSharding {
            named_sharding: Some(Box::new(named_to_proto(n, &s.metadata))),
            ..Default::default()
        };
    }
    let mut p = pb::OpSharding {
        metadata: s.metadata.iter().map(metadata_to_proto).collect(),
        ..Default::default()
    };
    if let Some(g) = s.shard_group {
        p.is_shard_group = true;
        p.shard_group_id = g.id;
        p.shard_group_type = if g.shard_as { 0 } else { 1 };
    }
    match &s.kind {
        ShardingKind::Replicated => p.r#type = SHARDING_REPLICATED,
        ShardingKind::Manual => p.r#type = SHARDING_MANUAL,
        ShardingKind::Unknown => p.r#type = SHARDING_UNKNOWN,
        ShardingKind::Unreduced => p.r#type = SHARDING_UNREDUCED,
        ShardingKind::Maximal(d) => {
            p.r#type = SHARDING_MAXIMAL;
            p.tile_assignment_dimensions = vec![1];
            p.tile_assignment_devices = vec![*d];
        }
        ShardingKind::Tuple(e) => {
            p.r#type = SHARDING_TUPLE;
            p.tuple_shardings = e.iter().map(sharding_to_proto).collect();
        }
        ShardingKind::Named(_) => {}
        ShardingKind::Tiled(t) => {
            p.r#type = SHARDING_OTHER;
            p.replicate_on_last_tile_dim = t.replicate_on_last_tile_dim;
            p.last_tile_dims = t
                .last_tile_dims
                .iter()
                .map(|&x| subgroup_to_proto(x))
                .collect();
            match &t.tile_assignment {
                TileAssignment::Explicit { dims, devices } => {
                    p.tile_assignment_dimensions = dims.to_vec();
                    p.tile_assignment_devices = devices.clone();
                }
                TileAssignment::Iota {
                    dims,
                    reshape_dims,
                    transpose_perm,
                } => {
                    p.tile_assignment_dimensions = dims.to_vec();
                    p.iota_reshape_dims = reshape_dims.to_vec();
                    p.iota_transpose_perm = perm_to_proto(transpose_perm, reshape_dims.len());
                }
            }
        }
    }
    p
}

fn axis_to_proto(a: &AxisRef) -> pb::AxisRefProto {
    pb::AxisRefProto {
        mesh_axis_index: a.axis as i64,
        sub_axis_info: a.sub.map(|s| pb::SubAxis {
            pre_size: s.pre_size,
            size: s.size,
        }),
    }
}

fn axes_to_proto(v: &[AxisRef]) -> Vec<pb::AxisRefProto> {
    v.iter().map(axis_to_proto).collect()
}

/// A mesh as XLA's `MeshProto` (shared by named shardings and mesh replica groups).
fn mesh_to_proto(m: &Mesh) -> pb::MeshProto {
    let mut mesh = pb::MeshProto {
        axes: m
            .axes
            .iter()
            .map(|a| pb::MeshAxis {
                name: a.name.clone(),
                size: a.size,
            })
            .collect(),
        ..Default::default()
    };
    match &m.devices {
        MeshDevices::Iota => {}
        MeshDevices::Explicit(d) => mesh.device_ids = d.clone(),
        MeshDevices::Transposed {
            reshape_dims,
            transpose_perm,
        } => {
            mesh.iota_transform = Some(pb::IotaTransform {
                reshape_dims: reshape_dims.to_vec(),
                transpose_perm: transpose_perm.to_vec(),
            })
        }
    }
    mesh
}

fn named_to_proto(n: &NamedSharding, metadata: &[OpMetadata]) -> pb::NamedShardingProto {
    pb::NamedShardingProto {
        mesh: Some(mesh_to_proto(&n.mesh)),
        dim_shardings: n
            .dims
            .iter()
            .map(|d| pb::DimensionShardingProto {
                axes: axes_to_proto(&d.axes),
                is_closed: d.closed,
            })
            .collect(),
        replicated_axes: axes_to_proto(&n.replicated),
        unreduced_axes: axes_to_proto(&n.unreduced),
        metadata: metadata.iter().map(metadata_to_proto).collect(),
        manual_axes: axes_to_proto(&n.manual),
        reduction_op: match n.reduction {
            ReductionOp::Sum => 0,
            ReductionOp::Max => 1,
            ReductionOp::Min => 2,
        },
    }
}

fn axis_from_proto(p: &pb::AxisRefProto) -> VResult<AxisRef> {
    let axis = usize::try_from(p.mesh_axis_index)
        .map_err(|_| format!("mesh axis index {} is negative", p.mesh_axis_index))?;
    Ok(AxisRef {
        axis,
        sub: p.sub_axis_info.as_ref().map(|s| SubAxis {
            pre_size: s.pre_size,
            size: s.size,
        }),
    })
}

fn axes_from_proto(v: &[pb::AxisRefProto]) -> VResult<Vec<AxisRef>> {
    v.iter().map(axis_from_proto).collect()
}

/// A `MeshProto` read back, its device order checked (shared by named shardings and mesh
/// replica groups).
fn mesh_from_proto(pm: &pb::MeshProto) -> VResult<Mesh> {
    let axes: Vec<MeshAxis> = pm
        .axes
        .iter()
        .map(|a| MeshAxis {
            name: a.name.clone(),
            size: a.size,
        })
        .collect();
    if let Some(a) = axes.iter().find(|a| a.size < 1) {
        return Err(format!(
            "mesh axis '{}' has size {}; sizes must be positive",
            a.name, a.size
        ));
    }
    let sizes: Vec<i64> = axes.iter().map(|a| a.size).collect();
    let max = crate::text::MAX_DEVICES;
    let n = checked_product(&sizes)
        .filter(|&n| n <= max)
        .ok_or_else(|| format!("a mesh of axis sizes {sizes:?} holds more than {max} devices"))?;
    let devices = match (&pm.iota_transform, pm.device_ids.is_empty()) {
        (Some(_), false) => {
            return Err("a mesh has both device_ids and an iota_transform".into());
        }
        (Some(t), true) => {
            let k = t.reshape_dims.len();
            let perm_ok = t.transpose_perm.len() == k && {
                let mut seen = vec![false; k];
                t.transpose_perm.iter().all(|&x| {
                    usize::try_from(x)
                        .ok()
                        .filter(|&i| i < k && !std::mem::replace(&mut seen[i], true))
                        .is_some()
                })
            };
            if axes.is_empty()
                || !perm_ok
                || t.reshape_dims.iter().any(|&r| r < 1)
                || checked_product(&t.reshape_dims) != Some(n)
            {
                return Err(format!(
                    "mesh iota_transform {:?}T{:?} does not describe the mesh's {n} devices",
                    t.reshape_dims, t.transpose_perm
                ));
            }
            Mesh::canonical_iota(&sizes, &t.reshape_dims, &t.transpose_perm)
        }
        (None, false) => MeshDevices::Explicit(pm.device_ids.clone()),
        (None, true) => MeshDevices::Iota,
    };
    Ok(Mesh { axes, devices })
}

fn named_from_proto(p: &pb::NamedShardingProto) -> VResult<(NamedSharding, Vec<OpMetadata>)> {
    let named = NamedSharding {
        mesh: mesh_from_proto(&p.mesh.clone().unwrap_or_default())?,
        dims: p
            .dim_shardings
            .iter()
            .map(|d| {
                Ok(DimSharding {
                    axes: axes_from_proto(&d.axes)?,
                    closed: d.is_closed,
                })
            })
            .collect::<VResult<_>>()?,
        replicated: axes_from_proto(&p.replicated_axes)?,
        unreduced: axes_from_proto(&p.unreduced_axes)?,
        reduction: match p.reduction_op {
            _ if p.unreduced_axes.is_empty() => ReductionOp::Sum,
            0 => ReductionOp::Sum,
            1 => ReductionOp::Max,
            2 => ReductionOp::Min,
            other => return Err(format!("unknown reduction op {other}")),
        },
        manual: axes_from_proto(&p.manual_axes)?,
    };
    named
        .validate()
        .map_err(|e| format!("invalid named sharding: {e}"))?;
    Ok((named, p.metadata.iter().map(metadata_from_proto).collect()))
}

pub(crate) fn sharding_from_proto(p: &pb::OpSharding) -> VResult<Sharding> {
    if let Some(ns) = &p.named_sharding {
        if p.is_shard_group {
            return Err("a named sharding cannot be in a shard group".into());
        }
        let (named, metadata) = named_from_proto(ns)?;
        return Ok(Sharding {
            kind: ShardingKind::Named(Box::new(named)),
            metadata,
            shard_group: None,
        });
    }
    let kind = match p.r#type {
        SHARDING_REPLICATED => ShardingKind::Replicated,
        SHARDING_MANUAL => ShardingKind::Manual,
        SHARDING_UNKNOWN => ShardingKind::Unknown,
        SHARDING_UNREDUCED => ShardingKind::Unreduced,
        SHARDING_MAXIMAL => match p.tile_assignment_devices.as_slice() {
            [d] if (0..crate::text::MAX_DEVICES).contains(d) => ShardingKind::Maximal(*d),
            [d] => {
                return Err(format!(
                    "maximal device id {d}: expected 0 to {}",
                    crate::text::MAX_DEVICES - 1
                ))
            }
            other => {
                return Err(format!(
                    "a maximal sharding needs exactly one device, found {}",
                    other.len()
                ))
            }
        },
        SHARDING_TUPLE => ShardingKind::Tuple(
            p.tuple_shardings
                .iter()
                .map(sharding_from_proto)
                .collect::<VResult<_>>()?,
        ),
        SHARDING_OTHER => {
            let dims: crate::sharding::TileDims =
                p.tile_assignment_dimensions.iter().copied().collect();
            if dims.iter().any(|&d| d <= 0) {
                return Err(format!(
                    "tile assignment dimensions {:?} must be positive",
                    p.tile_assignment_dimensions
                ));
            }
            let n = checked_product(&dims).ok_or_else(|| {
                format!("tile assignment dimensions {dims:?} hold more than 2^63 devices")
            })?;
            let tile_assignment = if !p.iota_reshape_dims.is_empty() {
                if p.iota_reshape_dims.iter().any(|&d| d <= 0)
                    || checked_product(&p.iota_reshape_dims) != Some(n)
                {
                    return Err(format!(
                        "iota reshape dims {:?} do not hold the tile assignment's {n} devices",
                        p.iota_reshape_dims
                    ));
                }
                if !p.iota_transpose_perm.is_empty()
                    && !is_permutation(&p.iota_transpose_perm, p.iota_reshape_dims.len())
                {
                    return Err(format!(
                        "iota transpose {:?} is not a permutation of {} dimensions",
                        p.iota_transpose_perm,
                        p.iota_reshape_dims.len()
                    ));
                }
                TileAssignment::Iota {
                    dims,
                    reshape_dims: p.iota_reshape_dims.iter().copied().collect(),
                    transpose_perm: perm_from_proto(&p.iota_transpose_perm),
                }
            } else {
                if p.tile_assignment_devices.len() as i64 != n {
                    return Err(format!(
                        "tile assignment lists {} devices, its dimensions {:?} need {n}",
                        p.tile_assignment_devices.len(),
                        p.tile_assignment_dimensions
                    ));
                }
                TileAssignment::Explicit {
                    dims,
                    devices: p.tile_assignment_devices.clone(),
                }
            };
            ShardingKind::Tiled(TiledSharding {
                tile_assignment,
                replicate_on_last_tile_dim: p.replicate_on_last_tile_dim,
                last_tile_dims: p
                    .last_tile_dims
                    .iter()
                    .map(|&x| subgroup_from_proto(x))
                    .collect::<VResult<_>>()?,
            })
        }
        other => return Err(format!("unknown sharding type {other}")),
    };
    let shard_group = p.is_shard_group.then_some(ShardGroup {
        id: p.shard_group_id,
        shard_as: p.shard_group_type == 0,
    });
    if p.is_shard_group && !matches!(p.shard_group_type, 0 | 1) {
        return Err(format!("unknown shard group type {}", p.shard_group_type));
    }
    Ok(Sharding {
        kind,
        metadata: p.metadata.iter().map(metadata_from_proto).collect(),
        shard_group,
    })
}

/// XLA wants one transpose entry per reshape dimension (identity spelled out); the IR keeps
/// the identity as an empty list.
fn perm_to_proto(perm: &[i64], n: usize) -> Vec<i32> {
    if perm.is_empty() {
        (0..n as i32).collect()
    } else {
        perm.iter().map(|&x| x as i32).collect()
    }
}

fn perm_from_proto<T: FromIterator<i64>>(perm: &[i32]) -> T {
    if perm.iter().enumerate().all(|(k, &x)| x as usize == k) {
        std::iter::empty().collect()
    } else {
        perm.iter().map(|&x| x as i64).collect()
    }
}

fn is_permutation(perm: &[i32], n: usize) -> bool {
    let mut seen = vec![false; n];
    perm.len() == n
        && perm.iter().all(|&x| {
            usize::try_from(x)
                .ok()
                .filter(|&i| i < n && !seen[i])
                .map(|i| seen[i] = true)
                .is_some()
        })
}

// ---------------------------------------------------------------- replica groups

/// Which instruction fields a [`ReplicaGroups`] goes to.
pub(crate) fn replica_groups_to_proto(g: &ReplicaGroups, p: &mut pb::HloInstructionProto) {
    match g {
        ReplicaGroups::Explicit(groups) => {
            p.collective_device_list = Some(pb::CollectiveDeviceListProto {
                replica_groups: groups
                    .iter()
                    .map(|ids| pb::ReplicaGroup {
                        replica_ids: ids.clone(),
                    })
                    .collect(),
                iota_replica_group_list: None,
            });
        }
        ReplicaGroups::Iota {
            num_groups,
            group_size,
            reshape_dims,
            transpose_perm,
        } => {
            p.iota_collective_device_list = Some(pb::IotaReplicaGroupListProto {
                num_replica_groups: *num_groups,
                num_devices_per_group: *group_size,
                iota_reshape_dims: reshape_dims.clone(),
                iota_transpose_perm: perm_to_proto(transpose_perm, reshape_dims.len()),
            });
        }
        ReplicaGroups::Mesh(m) => {
            p.mesh_axes_replica_group_list = Some(Box::new(mesh_groups_to_proto(m)));
        }
    }
}

pub(crate) fn replica_groups_from_proto(
    p: &pb::HloInstructionProto,
) -> VResult<Option<ReplicaGroups>> {
    if let Some(m) = &p.mesh_axes_replica_group_list {
        return mesh_groups_from_proto(m).map(|m| Some(ReplicaGroups::Mesh(m)));
    }
    let iota = p.iota_collective_device_list.as_ref().or(p
        .collective_device_list
        .as_ref()
        .and_then(|c| c.iota_replica_group_list.as_ref()));
    if let Some(i) = iota {
        let devices = i
            .num_replica_groups
            .checked_mul(i.num_devices_per_group)
            .filter(|_| i.num_replica_groups >= 0 && i.num_devices_per_group >= 0);
        // No reshape dims stand for one dimension of all the devices (as in the IR).
        let fits = |n| {
            i.iota_reshape_dims.is_empty()
                || (i.iota_reshape_dims.iter().all(|&d| d >= 0)
                    && checked_product(&i.iota_reshape_dims) == Some(n))
        };
        if !devices.is_some_and(fits) {
            return Err(format!(
                "iota replica groups [{},{}] do not match reshape dims {:?}",
                i.num_replica_groups, i.num_devices_per_group, i.iota_reshape_dims
            ));
        }
        if !i.iota_transpose_perm.is_empty()
            && !is_permutation(&i.iota_transpose_perm, i.iota_reshape_dims.len())
        {
            return Err(format!(
                "iota replica group transpose {:?} is not a permutation",
                i.iota_transpose_perm
            ));
        }
        return Ok(Some(ReplicaGroups::Iota {
            num_groups: i.num_replica_groups,
            group_size: i.num_devices_per_group,
            reshape_dims: i.iota_reshape_dims.clone(),
            transpose_perm: perm_from_proto(&i.iota_transpose_perm),
        }));
    }
    if let Some(c) = &p.collective_device_list {
        return Ok(Some(ReplicaGroups::Explicit(
            c.replica_groups
                .iter()
                .map(|g| g.replica_ids.clone())
                .collect(),
        )));
    }
    if !p.replica_groups.is_empty() {
        return Ok(Some(ReplicaGroups::Explicit(
            p.replica_groups
                .iter()
                .map(|g| g.replica_ids.clone())
                .collect(),
        )));
    }
    Ok(None)
}

/// Splits a group axis as the IR keeps it (`'x'` or `'x':(1)2`) into name and sub-axis.
fn parse_group_axis(s: &str) -> VResult<(String, Option<(i64, i64)>)> {
    let bad = || format!("cannot read mesh group axis `{s}` (expected 'name' or 'name':(pre)size)");
    let s = s.trim();
    let (name, rest) = if let Some(stripped) = s.strip_prefix('\'') {
        let end = stripped.find('\'').ok_or_else(bad)?;
        (&stripped[..end], &stripped[end + 1..])
    } else {
        match s.find(':') {
            Some(i) => (&s[..i], &s[i..]),
            None => (s, ""),
        }
    };
    if rest.is_empty() {
        return Ok((name.to_string(), None));
    }
    let rest = rest.strip_prefix(":(").ok_or_else(bad)?;
    let (pre, size) = rest.split_once(')').ok_or_else(bad)?;
    let pre = pre.trim().parse().map_err(|_| bad())?;
    let size = size.trim().parse().map_err(|_| bad())?;
    Ok((name.to_string(), Some((pre, size))))
}

fn mesh_groups_to_proto(m: &MeshReplicaGroups) -> pb::MeshAxesReplicaGroupListProto {
    let mesh = &m.mesh;
    let axes = m
        .group_axes
        .iter()
        .map(|a| {
            // A name the mesh does not have cannot be expressed; the verifier reports it, and
            // the proto points at an index past the mesh so that XLA refuses it too.
            let (name, sub) = parse_group_axis(a).unwrap_or_else(|_| (a.clone(), None));
            let idx = mesh.axis_index(&name).unwrap_or(mesh.axes.len());
            pb::AxisRefProto {
                mesh_axis_index: idx as i64,
                sub_axis_info: sub.map(|(pre_size, size)| pb::SubAxis { pre_size, size }),
            }
        })
        .collect();
    pb::MeshAxesReplicaGroupListProto {
        mesh: Some(mesh_to_proto(mesh)),
        axes,
    }
}

fn mesh_groups_from_proto(p: &pb::MeshAxesReplicaGroupListProto) -> VResult<MeshReplicaGroups> {
    let mesh = mesh_from_proto(
        p.mesh
            .as_ref()
            .ok_or_else(|| "mesh replica groups without a mesh".to_string())?,
    )?;
    let group_axes = p
        .axes
        .iter()
        .map(|r| {
            let axis = usize::try_from(r.mesh_axis_index)
                .ok()
                .and_then(|i| mesh.axes.get(i))
                .ok_or_else(|| {
                    format!(
                        "mesh axis index {} out of range ({} axes)",
                        r.mesh_axis_index,
                        mesh.axes.len()
                    )
                })?;
            Ok(match &r.sub_axis_info {
                Some(s) => format!("'{}':({}){}", axis.name, s.pre_size, s.size),
                None => format!("'{}'", axis.name),
            })
        })
        .collect::<VResult<_>>()?;
    Ok(MeshReplicaGroups { mesh, group_axes })
}

// ---------------------------------------------------------------- original values

/// Reads the `origin={...}` text the IR keeps (`{({"b" {0}}, {"c"})}`: a tree shaped like the
/// instruction's shape whose leaves name an instruction and a shape index) into XLA's list of
/// leaves. `None` when the text is not of that form.
pub(crate) fn original_value_to_proto(text: &str) -> Option<pb::OriginalValueProto> {
    struct P<'a> {
        b: &'a [u8],
        i: usize,
    }
    impl P<'_> {
        fn ws(&mut self) {
            while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
                self.i += 1;
            }
        }
        fn eat(&mut self, c: u8) -> bool {
            self.ws();
            if self.b.get(self.i) == Some(&c) {
                self.i += 1;
                true
            } else {
                false
            }
        }
        fn ints(&mut self) -> Option<Vec<i64>> {
            let mut v = Vec::new();
            if self.eat(b'}') {
                return Some(v);
            }
            loop {
                self.ws();
                let s = self.i;
                while self.i < self.b.len()
                    && (self.b[self.i].is_ascii_digit() || self.b[self.i] == b'-')
                {
                    self.i += 1;
                }
                v.push(std::str::from_utf8(&self.b[s..self.i]).ok()?.parse().ok()?);
                if self.eat(b'}') {
                    return Some(v);
                }
                if !self.eat(b',') {
                    return None;
                }
            }
        }
        fn tree(
            &mut self,
            index: &mut Vec<i64>,
            out: &mut Vec<pb::OriginalValueElementProto>,
        ) -> Option<()> {
            if self.eat(b'(') {
                let mut k = 0;
                if self.eat(b')') {
                    return Some(());
                }
                loop {
                    index.push(k);
                    self.tree(index, out)?;
                    index.pop();
                    k += 1;
                    if self.eat(b')') {
                        return Some(());
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            if !self.eat(b'{') {
                return None;
            }
            if self.eat(b'}') {
                return Some(()); // a leaf with no origin
            }
            if !self.eat(b'"') {
                return None;
            }
            let s = self.i;
            while self.i < self.b.len() && self.b[self.i] != b'"' {
                if self.b[self.i] == b'\\' {
                    return None;
                }
                self.i += 1;
            }
            let name = std::str::from_utf8(&self.b[s..self.i]).ok()?.to_string();
            self.i += 1;
            let shape_index = if self.eat(b'{') {
                self.ints()?
            } else {
                Vec::new()
            };
            if !self.eat(b'}') {
                return None;
            }
            out.push(pb::OriginalValueElementProto {
                shape_index: index.clone(),
                original_array: Some(pb::OriginalArrayProto {
                    instruction_name: name,
                    shape_index,
                }),
            });
            Some(())
        }
    }
    let mut p = P {
        b: text.as_bytes(),
        i: 0,
    };
    if !p.eat(b'{') {
        return None;
    }
    let mut elements = Vec::new();
    p.tree(&mut Vec::new(), &mut elements)?;
    if !p.eat(b'}') {
        return None;
    }
    p.ws();
    (p.i == p.b.len()).then_some(pb::OriginalValueProto { elements })
}

/// The `origin={...}` text of XLA's leaves, shaped like `shape`.
pub(crate) fn original_value_from_proto(p: &pb::OriginalValueProto, shape: &Shape) -> String {
    fn walk(s: &Shape, index: &mut Vec<i64>, p: &pb::OriginalValueProto, out: &mut String) {
        if let Shape::Tuple(elems) = s {
            out.push('(');
            for (k, e) in elems.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                index.push(k as i64);
                walk(e, index, p, out);
                index.pop();
            }
            out.push(')');
            return;
        }
        out.push('{');
        if let Some(a) = p
            .elements
            .iter()
            .find(|e| e.shape_index == *index)
            .and_then(|e| e.original_array.as_ref())
        {
            out.push('"');
            out.push_str(&a.instruction_name);
            out.push('"');
            if !a.shape_index.is_empty() {
                out.push_str(" {");
                let parts: Vec<String> = a.shape_index.iter().map(i64::to_string).collect();
                out.push_str(&parts.join(","));
                out.push('}');
            }
        }
        out.push('}');
    }
    let mut out = String::from("{");
    walk(shape, &mut Vec::new(), p, &mut out);
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_axis_forms() {
        assert_eq!(parse_group_axis("'x'").unwrap(), ("x".into(), None));
        assert_eq!(
            parse_group_axis("'x':(1)2").unwrap(),
            ("x".into(), Some((1, 2)))
        );
        assert_eq!(parse_group_axis("y").unwrap(), ("y".into(), None));
        assert!(parse_group_axis("'x':(1").is_err());
    }

    #[test]
    fn original_values() {
        let s = Shape::tuple(vec![
            Shape::scalar(ElementType::F32),
            Shape::tuple(vec![
                Shape::scalar(ElementType::F32),
                Shape::scalar(ElementType::S32),
            ]),
        ]);
        let text = r#"{({"b" {0}}, ({"c"}, {"d" {1,2}}))}"#;
        let p = original_value_to_proto(text).unwrap();
        assert_eq!(p.elements.len(), 3);
        assert_eq!(p.elements[2].shape_index, vec![1, 1]);
        assert_eq!(
            p.elements[2].original_array.as_ref().unwrap().shape_index,
            vec![1, 2]
        );
        assert_eq!(original_value_from_proto(&p, &s), text);
        assert!(original_value_to_proto("{(").is_none());
    }

    #[test]
    fn permutation_check() {
        assert!(is_permutation(&[1, 0], 2));
        assert!(!is_permutation(&[1, 1], 2));
        assert!(!is_permutation(&[0, 2], 2));
        assert!(!is_permutation(&[-1, 0], 2));
    }
}
