//! Shapes and layouts.
//!
//! A [`Shape`] is an array (element type, dimensions, optional layout), a tuple of shapes, a
//! token or an opaque value. Dimensions may be dynamic: `<=8` is a dynamic dimension bounded by
//! 8 and `?` an unbounded one (stored as [`UNBOUNDED_DIM`]).

use std::ops::{Deref, DerefMut};

use smallvec::SmallVec;

use crate::rare::{Empty, Rare};

use crate::types::ElementType;

/// The stored size of an unbounded dynamic dimension (`?` in text), as in XLA.
pub const UNBOUNDED_DIM: i64 = i64::MIN;

/// The value of a tile dimension printed as `*` (a combined dimension), as in XLA.
pub const TILE_COMBINE_DIM: i64 = i64::MIN;

pub type Dims = SmallVec<[i64; 4]>;

// Arrays are by far the most common shape, so they stay inline rather than boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    Array(ArrayShape),
    Tuple(Vec<Shape>),
    Token,
    Opaque,
    /// `b(f32[8])`: a buffer of an array shape (XLA's BUFFER primitive type).
    Buffer(Box<Shape>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArrayShape {
    pub ty: ElementType,
    /// Sizes, or upper bounds for dynamic dimensions; [`UNBOUNDED_DIM`] for `?`.
    pub dims: Dims,
    /// One flag per dimension; empty means every dimension is static.
    pub dynamic: SmallVec<[bool; 4]>,
    pub layout: Option<Layout>,
}

/// Encoding of a dimension in a sparse layout (`D(D,C,S,H)` in text).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DimLevelType {
    Dense,
    Compressed,
    Singleton,
    LooseCompressed,
}

/// A layout dimension's level type with its unique/ordered properties (`C+~` in text: `+` is
/// non-unique, `~` non-ordered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DimLevel {
    pub ty: DimLevelType,
    pub unique: bool,
    pub ordered: bool,
}

/// `T(8,128)`: a tile, dimensions from most major to most minor; [`TILE_COMBINE_DIM`] is `*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tile {
    pub dims: SmallVec<[i64; 2]>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SplitConfig {
    pub dimension: i64,
    pub split_indices: Vec<i64>,
}

/// How an array is placed in memory: `{1,0:T(8,128)E(4)S(1)}`.
///
/// Almost every layout is only a minor-to-major order; the other parts live in [`LayoutExtras`],
/// allocated when one is set. `Layout` dereferences to it, so they read and write as fields
/// (`layout.tiles`, `layout.memory_space = 1`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Layout {
    pub minor_to_major: Dims,
    /// Everything besides the order; reached through `Deref` (`layout.tiles`).
    pub extras: Rare<LayoutExtras>,
}

/// The parts of a [`Layout`] besides its minor-to-major order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LayoutExtras {
    /// Empty for dense layouts.
    pub dim_levels: Vec<DimLevel>,
    pub tiles: Vec<Tile>,
    /// 0 or 1 means no tail padding.
    pub tail_padding_alignment_in_elements: i64,
    pub index_primitive_type: Option<ElementType>,
    pub pointer_primitive_type: Option<ElementType>,
    /// 0 means the element type's natural size.
    pub element_size_in_bits: i64,
    pub memory_space: i64,
    pub split_configs: Vec<SplitConfig>,
    pub physical_shape: Option<Box<Shape>>,
    pub dynamic_shape_metadata_prefix_bytes: i64,
}

static EMPTY_LAYOUT_EXTRAS: LayoutExtras = LayoutExtras {
    dim_levels: Vec::new(),
    tiles: Vec::new(),
    tail_padding_alignment_in_elements: 0,
    index_primitive_type: None,
    pointer_primitive_type: None,
    element_size_in_bits: 0,
    memory_space: 0,
    split_configs: Vec::new(),
    physical_shape: None,
    dynamic_shape_metadata_prefix_bytes: 0,
};

impl Empty for LayoutExtras {
    fn empty() -> &'static LayoutExtras {
        &EMPTY_LAYOUT_EXTRAS
    }
}

impl Default for LayoutExtras {
    fn default() -> Self {
        EMPTY_LAYOUT_EXTRAS.clone()
    }
}

impl Deref for Layout {
    type Target = LayoutExtras;

    fn deref(&self) -> &LayoutExtras {
        &self.extras
    }
}

impl DerefMut for Layout {
    fn deref_mut(&mut self) -> &mut LayoutExtras {
        &mut self.extras
    }
}

impl Layout {
    /// The default (descending) layout of a rank-`rank` array: `{rank-1,...,1,0}`.
    pub fn descending(rank: usize) -> Layout {
        Layout {
            minor_to_major: (0..rank as i64).rev().collect(),
            ..Layout::default()
        }
    }

    /// True if the layout has nothing but a minor-to-major order.
    pub fn is_plain(&self) -> bool {
        self.dim_levels.is_empty()
            && self.tiles.is_empty()
            && self.tail_padding_alignment_in_elements <= 1
            && self.index_primitive_type.is_none()
            && self.pointer_primitive_type.is_none()
            && self.element_size_in_bits == 0
            && self.memory_space == 0
            && self.split_configs.is_empty()
            && self.physical_shape.is_none()
            && self.dynamic_shape_metadata_prefix_bytes == 0
    }
}

/// The most bytes the buffers of all instructions of one module may add up to (1 EiB). The
/// text parser and the proto reader refuse a module past it, naming the instruction where the
/// sum crosses it. Under this bound every sum of a module's buffer sizes (peak memory, live
/// sets, a rematerialized copy of every buffer several times over) fits in an `i64`, so memory
/// accounting needs no overflow checks of its own.
pub const MAX_MODULE_BUFFER_BYTES: i64 = 1 << 60;

impl ArrayShape {
    pub fn new(ty: ElementType, dims: &[i64]) -> ArrayShape {
        ArrayShape {
            ty,
            dims: dims.iter().copied().collect(),
            dynamic: SmallVec::new(),
            layout: None,
        }
    }

    #[inline]
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    pub fn is_dynamic_dim(&self, d: usize) -> bool {
        self.dynamic.get(d).copied().unwrap_or(false)
    }

    pub fn is_static(&self) -> bool {
        !self.dynamic.iter().any(|&d| d)
    }

    /// Number of elements (bounds for dynamic dimensions; 0 when a dimension is unbounded).
    ///
    /// Saturates at `i64::MAX`: the text parser, the proto reader and the verifier refuse a
    /// shape whose [`ArrayShape::checked_byte_size`] is `None`, so for a module read from
    /// input this is exact.
    pub fn element_count(&self) -> i64 {
        self.checked_element_count().unwrap_or(i64::MAX)
    }

    /// Number of elements, or `None` when the product does not fit in an `i64` (or a
    /// dimension is negative).
    pub fn checked_element_count(&self) -> Option<i64> {
        self.dims.iter().try_fold(1i64, |n, &d| {
            let d = if d == UNBOUNDED_DIM { 0 } else { d };
            if d < 0 {
                return None;
            }
            n.checked_mul(d)
        })
    }

    /// Bytes of a dense buffer of this shape (sub-byte types packed when the layout says so
    /// through `element_size_in_bits`, otherwise one byte each). Saturates at `i64::MAX`, as
    /// [`ArrayShape::element_count`] does.
    pub fn byte_size(&self) -> i64 {
        self.checked_byte_size().unwrap_or(i64::MAX)
    }

    /// Bytes of a dense buffer of this shape, or `None` when the element count or the number
    /// of bits does not fit in an `i64`. A shape for which this is `None` is refused wherever
    /// a module is read (text, proto) and by the verifier.
    pub fn checked_byte_size(&self) -> Option<i64> {
        let bits = match &self.layout {
            Some(l) if l.element_size_in_bits > 0 => l.element_size_in_bits,
            _ => (self.ty.byte_size() * 8) as i64,
        };
        let total = self.checked_element_count()?.checked_mul(bits)?;
        Some(total / 8 + i64::from(total % 8 != 0))
    }

    /// Same type and dimensions (dynamic flags included), layouts ignored.
    pub fn same_dims_and_type(&self, other: &ArrayShape) -> bool {
        self.ty == other.ty && self.dims == other.dims && self.dynamic_eq(other)
    }

    fn dynamic_eq(&self, other: &ArrayShape) -> bool {
        (0..self.rank().max(other.rank()))
            .all(|d| self.is_dynamic_dim(d) == other.is_dynamic_dim(d))
    }
}

impl Shape {
    pub fn array(ty: ElementType, dims: &[i64]) -> Shape {
        Shape::Array(ArrayShape::new(ty, dims))
    }

    pub fn scalar(ty: ElementType) -> Shape {
        Shape::array(ty, &[])
    }

    pub fn tuple(elements: Vec<Shape>) -> Shape {
        Shape::Tuple(elements)
    }

    pub fn as_array(&self) -> Option<&ArrayShape> {
        match self {
            Shape::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_array_mut(&mut self) -> Option<&mut ArrayShape> {
        match self {
            Shape::Array(a) => Some(a),
            _ => None,
        }
    }

    #[inline]
    pub fn is_array(&self) -> bool {
        matches!(self, Shape::Array(_))
    }

    #[inline]
    pub fn is_tuple(&self) -> bool {
        matches!(self, Shape::Tuple(_))
    }

    pub fn is_token(&self) -> bool {
        matches!(self, Shape::Token)
    }

    #[inline]
    pub fn tuple_elements(&self) -> &[Shape] {
        match self {
            Shape::Tuple(e) => e,
            _ => &[],
        }
    }

    /// The element type: `Tuple`, `Token`, `Opaque` or `Buffer` for non-arrays.
    pub fn element_type(&self) -> ElementType {
        match self {
            Shape::Array(a) => a.ty,
            Shape::Tuple(_) => ElementType::Tuple,
            Shape::Token => ElementType::Token,
            Shape::Opaque => ElementType::Opaque,
            Shape::Buffer(_) => ElementType::Buffer,
        }
    }

    /// Rank of an array shape, 0 otherwise.
    #[inline]
    pub fn rank(&self) -> usize {
        self.as_array().map_or(0, |a| a.rank())
    }

    /// Dimensions of an array shape, empty otherwise.
    #[inline]
    pub fn dims(&self) -> &[i64] {
        self.as_array().map_or(&[], |a| &a.dims)
    }

    /// The sub-shape at a tuple index path (`{}` is the shape itself).
    pub fn subshape(&self, index: &[usize]) -> Option<&Shape> {
        let mut s = self;
        for &i in index {
            s = s.tuple_elements().get(i)?;
        }
        Some(s)
    }

    pub fn subshape_mut(&mut self, index: &[usize]) -> Option<&mut Shape> {
        let mut s = self;
        for &i in index {
            s = match s {
                Shape::Tuple(e) => e.get_mut(i)?,
                _ => return None,
            };
        }
        Some(s)
    }

    /// Calls `f(index, subshape)` for this shape and every nested sub-shape, pre-order.
    pub fn for_each_subshape<F: FnMut(&[usize], &Shape)>(&self, mut f: F) {
        fn walk<F: FnMut(&[usize], &Shape)>(s: &Shape, idx: &mut Vec<usize>, f: &mut F) {
            f(idx, s);
            if let Shape::Tuple(e) = s {
                for (i, c) in e.iter().enumerate() {
                    idx.push(i);
                    walk(c, idx, f);
                    idx.pop();
                }
            }
        }
        walk(self, &mut Vec::new(), &mut f);
    }

    /// True when every array in the shape has an element count and a byte size that fit in
    /// an `i64` (see [`ArrayShape::checked_byte_size`]).
    pub fn sizes_fit(&self) -> bool {
        match self {
            Shape::Array(a) => a.checked_byte_size().is_some(),
            Shape::Tuple(e) => e.iter().all(Shape::sizes_fit),
            Shape::Buffer(inner) => inner.sizes_fit(),
            Shape::Token | Shape::Opaque => true,
        }
    }

    /// Bytes of every buffer of the shape (each array, each tuple's table of 8-byte
    /// pointers, nested ones too), or `None` when the sum does not fit in an `i64`.
    pub fn checked_total_bytes(&self) -> Option<i64> {
        match self {
            Shape::Array(a) => a.checked_byte_size(),
            Shape::Tuple(e) => e.iter().try_fold((e.len() as i64).checked_mul(8)?, |t, s| {
                t.checked_add(s.checked_total_bytes()?)
            }),
            Shape::Buffer(inner) => inner.checked_total_bytes(),
            Shape::Token | Shape::Opaque => Some(0),
        }
    }

    /// Number of leaf (non-tuple) sub-shapes.
    #[inline]
    pub fn leaf_count(&self) -> usize {
        match self {
            Shape::Tuple(e) => e.iter().map(Shape::leaf_count).sum(),
            _ => 1,
        }
    }

    /// Bytes of the top-level buffer: the array data, or one pointer per element of a tuple.
    pub fn byte_size(&self, pointer_size: i64) -> i64 {
        match self {
            Shape::Array(a) => a.byte_size(),
            Shape::Tuple(e) => e.len() as i64 * pointer_size,
            Shape::Token | Shape::Opaque | Shape::Buffer(_) => 0,
        }
    }

    /// Equality that ignores layouts (and the layouts of nested shapes).
    pub fn compatible(&self, other: &Shape) -> bool {
        match (self, other) {
            (Shape::Array(a), Shape::Array(b)) => a.same_dims_and_type(b),
            (Shape::Tuple(a), Shape::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.compatible(y))
            }
            (Shape::Token, Shape::Token) | (Shape::Opaque, Shape::Opaque) => true,
            (Shape::Buffer(a), Shape::Buffer(b)) => a.compatible(b),
            _ => false,
        }
    }

    /// Like [`Shape::compatible`] but also ignores element types of arrays.
    pub fn same_dimensions(&self, other: &Shape) -> bool {
        match (self, other) {
            (Shape::Array(a), Shape::Array(b)) => a.dims == b.dims,
            _ => false,
        }
    }

    /// Removes layouts from this shape and every nested shape.
    pub fn clear_layouts(&mut self) {
        match self {
            Shape::Array(a) => a.layout = None,
            Shape::Tuple(e) => e.iter_mut().for_each(Shape::clear_layouts),
            Shape::Buffer(b) => b.clear_layouts(),
            Shape::Token | Shape::Opaque => {}
        }
    }
}

/// The product of `dims`, or `None` when it does not fit in an `i64`.
pub fn checked_product(dims: &[i64]) -> Option<i64> {
    dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d))
}
