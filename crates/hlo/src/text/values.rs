//! Values inside instructions: shapes and layouts, literals, shardings, metadata, windows,
//! convolution dimension labels, slices, paddings, replica groups.

use smallvec::SmallVec;

use super::float::{bits_to_f64, f64_to_bits, FloatFormat};
use super::parser::{PResult, Parser};
use crate::attrs::*;
use crate::literal::{Literal, LiteralData};
use crate::metadata::{FrontendAttributes, OpMetadata};
use crate::shape::{
    checked_product, ArrayShape, DimLevel, DimLevelType, Layout, Shape, SplitConfig, Tile,
    TILE_COMBINE_DIM, UNBOUNDED_DIM,
};
use crate::sharding::{
    AxisRef, DimSharding, Mesh, MeshAxis, MeshDevices, NamedSharding, ReductionOp, ShardGroup,
    Sharding, ShardingKind, SubgroupType, TileAssignment, TiledSharding,
};
use crate::tiling::iota_normal_form;
use crate::types::ElementType;

/// The largest literal, in bytes, that the parser builds from `{...}` or from a single value
/// standing for a whole array (`f32[1000,1000] constant(0)`). Larger ones are refused with
/// the shape named; a literal written out in full is bounded by the text itself.
pub const MAX_EXPANDED_LITERAL_BYTES: usize = 1 << 28;

/// The most devices a tile assignment, an iota device list or an iota replica-group list may
/// stand for (2^20). A few characters (`<=[4294967296]`) could otherwise ask for lists of
/// billions of device ids.
pub const MAX_DEVICES: i64 = 1 << 20;

impl<'a> Parser<'a> {
    // ----- shapes -----

    pub fn parse_shape(&mut self) -> PResult<Shape> {
        self.enter()?;
        let s = self.parse_shape_inner();
        self.leave();
        s
    }

    fn parse_shape_inner(&mut self) -> PResult<Shape> {
        if self.c.eat(b'(')? {
            let mut elems = Vec::new();
            if self.c.eat(b')')? {
                return Ok(Shape::Tuple(elems));
            }
            loop {
                elems.push(self.parse_shape()?);
                if self.c.eat(b')')? {
                    return Ok(Shape::Tuple(elems));
                }
                self.c.expect(b',', "or ')' in the tuple shape")?;
            }
        }
        self.c.skip_ws()?;
        let at = self.c.pos;
        let word = self.c.ident("a shape")?;
        if word == "b" && self.c.peek()? == Some(b'(') {
            self.c.expect(b'(', "")?;
            let inner = self.parse_shape()?;
            self.c.expect(b')', "to end the buffer shape")?;
            return Ok(Shape::Buffer(Box::new(inner)));
        }
        let ty = match ElementType::from_name(word) {
            Some(t) if !matches!(t, ElementType::Tuple | ElementType::Buffer) => t,
            _ => {
                return Err(self
                    .c
                    .error_at(at, format!("expected a shape, found '{word}'")))
            }
        };
        self.c.expect(b'[', "to start the dimensions")?;
        let mut dims: SmallVec<[i64; 4]> = SmallVec::new();
        let mut dynamic: SmallVec<[bool; 4]> = SmallVec::new();
        if !self.static_dims(&mut dims) && !self.c.eat(b']')? {
            loop {
                if self.c.eat_str("<=")? {
                    dims.push(self.c.int("a dimension bound")?);
                    dynamic.push(true);
                } else if self.c.eat(b'?')? {
                    dims.push(UNBOUNDED_DIM);
                    dynamic.push(true);
                } else {
                    let at = self.c.pos;
                    let d = self.c.int("a dimension size")?;
                    if d < 0 {
                        return Err(self.c.error_at(at, "dimension sizes must be >= 0"));
                    }
                    dims.push(d);
                    dynamic.push(false);
                }
                if self.c.eat(b']')? {
                    break;
                }
                self.c.expect(b',', "or ']' in the dimensions")?;
            }
        }
        if !dynamic.iter().any(|&d| d) {
            dynamic.clear();
        }
        match ty {
            ElementType::Token | ElementType::Opaque => {
                if !dims.is_empty() {
                    return Err(self.c.error_at(at, format!("{word} takes no dimensions")));
                }
                return Ok(if ty == ElementType::Token {
                    Shape::Token
                } else {
                    Shape::Opaque
                });
            }
            _ => {}
        }
        let layout = if self.layout_follows()? {
            let l = self.parse_layout(dims.len())?;
            // `f32[]{}` is a scalar's default layout, which XLA never prints: keep it absent so
            // that printing and parsing agree.
            (!(dims.is_empty() && l.minor_to_major.is_empty() && l.is_plain())).then_some(l)
        } else {
            None
        };
        let a = ArrayShape {
            ty,
            dims,
            dynamic,
            layout,
        };
        if a.checked_byte_size().is_none() {
            let shown = super::printer::shape_string(&Shape::Array(a));
            return Err(self.c.error_at(
                at,
                format!("shape {shown} has more elements or bytes than an i64 can count"),
            ));
        }
        Ok(Shape::Array(a))
    }

    /// Fast path for the dimensions after `[` in their common spelling (`2,8,4096]`: sizes
    /// and commas only, no spaces, bounds or comments); consumes them and the `]` and returns
    /// true, or leaves the cursor alone and returns false for the general loop to handle.
    #[inline]
    fn static_dims(&mut self, dims: &mut SmallVec<[i64; 4]>) -> bool {
        let b = self.c.b;
        let mut p = self.c.pos;
        if b.get(p) == Some(&b']') {
            self.c.pos = p + 1;
            return true;
        }
        loop {
            let Some((v, end)) = small_uint(b, p) else {
                dims.clear();
                return false;
            };
            dims.push(v);
            match b.get(end) {
                Some(b',') => p = end + 1,
                Some(b']') => {
                    self.c.pos = end + 1;
                    return true;
                }
                _ => {
                    dims.clear();
                    return false;
                }
            }
        }
    }

    /// Fast path for a layout that is only a minor-to-major list (`{2,1,0}`, no spaces): the
    /// layout, with the cursor after it, or `None` with the cursor unmoved.
    #[inline]
    fn plain_layout(&mut self) -> Option<Layout> {
        let b = self.c.b;
        let mut p = self.c.pos;
        if b.get(p) != Some(&b'{') {
            return None;
        }
        p += 1;
        let mut l = Layout::default();
        if b.get(p) == Some(&b'}') {
            self.c.pos = p + 1;
            return Some(l);
        }
        loop {
            let (v, end) = small_uint(b, p)?;
            l.minor_to_major.push(v);
            match b.get(end) {
                Some(b',') => p = end + 1,
                Some(b'}') => {
                    self.c.pos = end + 1;
                    return Some(l);
                }
                _ => return None,
            }
        }
    }

    /// A `{` that opens a layout (followed by a digit or `:`), not an instruction list.
    fn layout_follows(&mut self) -> PResult<bool> {
        if self.c.peek()? != Some(b'{') {
            return Ok(false);
        }
        let mut p = self.c.pos + 1;
        while p < self.c.b.len() && matches!(self.c.b[p], b' ' | b'\t' | b'\n' | b'\r') {
            p += 1;
        }
        Ok(matches!(self.c.b.get(p), Some(b'0'..=b'9' | b':'))
            || (self.c.b.get(p) == Some(&b'}') && self.brace_is_empty_layout(p)))
    }

    /// `{}` after a shape is an empty layout unless it would be an (invalid) empty body.
    fn brace_is_empty_layout(&self, close: usize) -> bool {
        // `-> f32[] {}` never is a valid computation; treat `{}` as a layout only when what
        // follows cannot start an instruction list's content, i.e. always.
        let _ = close;
        true
    }

    fn parse_layout(&mut self, rank: usize) -> PResult<Layout> {
        if let Some(l) = self.plain_layout() {
            return Ok(l);
        }
        self.c.expect(b'{', "to start the layout")?;
        let mut l = Layout::default();
        let _ = rank;
        while let Some(b'0'..=b'9') = self.c.peek()? {
            l.minor_to_major.push(self.c.int("a dimension")?);
            if !self.c.eat(b',')? {
                break;
            }
        }
        if self.c.eat(b':')? {
            loop {
                self.c.skip_ws()?;
                let at = self.c.pos;
                match self.c.byte_at(0) {
                    Some(b'D') => {
                        self.c.pos += 1;
                        self.c.expect(b'(', "after D")?;
                        loop {
                            let (lat, w) = {
                                self.c.skip_ws()?;
                                (self.c.pos, self.c.ident("a dimension level type")?)
                            };
                            let ty = match w {
                                "D" => DimLevelType::Dense,
                                "C" => DimLevelType::Compressed,
                                "S" => DimLevelType::Singleton,
                                "H" => DimLevelType::LooseCompressed,
                                _ => {
                                    return Err(self.c.error_at(
                                        lat,
                                        format!("expected D, C, S or H, found '{w}'"),
                                    ))
                                }
                            };
                            let mut level = DimLevel {
                                ty,
                                unique: true,
                                ordered: true,
                            };
                            loop {
                                if self.c.eat(b'+')? {
                                    level.unique = false;
                                } else if self.c.eat(b'~')? {
                                    level.ordered = false;
                                } else {
                                    break;
                                }
                            }
                            l.dim_levels.push(level);
                            if self.c.eat(b')')? {
                                break;
                            }
                            self.c.expect(b',', "or ')' in the dimension level types")?;
                        }
                    }
                    Some(b'T') => {
                        self.c.pos += 1;
                        if self.c.peek()? != Some(b'(') {
                            return Err(self.c.expected("'(' to start a tile"));
                        }
                        while self.c.eat(b'(')? {
                            let mut dims = SmallVec::new();
                            if !self.c.eat(b')')? {
                                loop {
                                    if self.c.eat(b'*')? {
                                        dims.push(TILE_COMBINE_DIM);
                                    } else {
                                        dims.push(self.c.int("a tile dimension")?);
                                    }
                                    if self.c.eat(b')')? {
                                        break;
                                    }
                                    self.c.expect(b',', "or ')' in the tile")?;
                                }
                            }
                            l.tiles.push(Tile { dims });
                        }
                    }
                    Some(b'L') => {
                        self.c.pos += 1;
                        l.tail_padding_alignment_in_elements = self.paren_int("L")?;
                    }
                    Some(b'#') => {
                        self.c.pos += 1;
                        l.index_primitive_type = Some(self.paren_type("#")?);
                    }
                    Some(b'*') => {
                        self.c.pos += 1;
                        l.pointer_primitive_type = Some(self.paren_type("*")?);
                    }
                    Some(b'E') => {
                        self.c.pos += 1;
                        l.element_size_in_bits = self.paren_int("E")?;
                    }
                    Some(b'S') if self.c.byte_at(1) == Some(b'C') => {
                        self.c.pos += 2;
                        if self.c.peek()? != Some(b'(') {
                            return Err(self.c.expected("'(' after SC"));
                        }
                        while self.c.eat(b'(')? {
                            let dimension = self.c.int("a dimension")?;
                            self.c.expect(b':', "after the split dimension")?;
                            let mut split_indices = Vec::new();
                            loop {
                                split_indices.push(self.c.int("a split index")?);
                                if self.c.eat(b')')? {
                                    break;
                                }
                                self.c.expect(b',', "or ')' in the split config")?;
                            }
                            l.split_configs.push(SplitConfig {
                                dimension,
                                split_indices,
                            });
                        }
                    }
                    Some(b'S') => {
                        self.c.pos += 1;
                        l.memory_space = self.paren_int("S")?;
                    }
                    Some(b'P') => {
                        self.c.pos += 1;
                        self.c.expect(b'(', "after P")?;
                        l.physical_shape = Some(Box::new(self.parse_shape()?));
                        self.c.expect(b')', "to end the physical shape")?;
                    }
                    Some(b'M') => {
                        self.c.pos += 1;
                        l.dynamic_shape_metadata_prefix_bytes = self.paren_int("M")?;
                    }
                    Some(b'}') => break,
                    _ => {
                        let found = self.c.describe_here();
                        return Err(self.c.error_at(
                            at,
                            format!(
                                "expected a layout item (D, T, L, #, *, E, S, SC, P, M) or '}}', found {found}"
                            ),
                        ));
                    }
                }
            }
        }
        self.c.expect(b'}', "to end the layout")?;
        Ok(l)
    }

    fn paren_int(&mut self, what: &str) -> PResult<i64> {
        self.c.expect_parts(b'(', &["after ", what])?;
        let v = self.c.int("an integer")?;
        self.c.expect_parts(b')', &["to end ", what, "(...)"])?;
        Ok(v)
    }

    fn paren_type(&mut self, what: &str) -> PResult<ElementType> {
        self.c.expect_parts(b'(', &["after ", what])?;
        self.c.skip_ws()?;
        let at = self.c.pos;
        let w = self.c.ident("a primitive type")?;
        let t = ElementType::from_name(w)
            .filter(|t| t.is_integral())
            .ok_or_else(|| {
                self.c
                    .error_at(at, format!("expected an integer type, found '{w}'"))
            })?;
        self.c.expect_parts(b')', &["to end ", what, "(...)"])?;
        Ok(t)
    }

    // ----- literals -----

    /// A literal of the given shape: a scalar, nested `{...}` for arrays, `(...)` for tuples.
    pub fn parse_literal(&mut self, shape: &Shape) -> PResult<Literal> {
        self.enter()?;
        let r = self.parse_literal_inner(shape);
        self.leave();
        r
    }

    fn parse_literal_inner(&mut self, shape: &Shape) -> PResult<Literal> {
        match shape {
            Shape::Tuple(elems) => {
                // XLA's parser refuses an elided tuple (`{...}`); each element may be elided.
                self.c.expect(b'(', "to start the tuple literal")?;
                let mut parts = Vec::with_capacity(elems.len());
                for (i, e) in elems.iter().enumerate() {
                    if i > 0 {
                        self.c.expect(b',', "between tuple literal elements")?;
                    }
                    parts.push(self.parse_literal(e)?);
                }
                self.c.expect(b')', "to end the tuple literal")?;
                Ok(Literal {
                    shape: shape.clone(),
                    data: LiteralData::Tuple(parts),
                })
            }
            Shape::Token | Shape::Opaque | Shape::Buffer(_) => Err(self.c.error_at(
                self.c.pos,
                "literals of token, opaque or buffer shapes are not supported",
            )),
            Shape::Array(a) => {
                let count = a.element_count();
                let width = a.ty.byte_size();
                // The parsed shape's byte size fits in an i64 (checked when it was read).
                let total = usize::try_from(count)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(width);
                // A literal written out has at most one element per byte of the text left.
                let room = (self.c.b.len() - self.c.pos).saturating_mul(width);
                let mut bytes: Vec<u8> = Vec::with_capacity(total.min(room));
                // `{...}` and a single value stand for the whole array: refuse to build one
                // past the documented size instead of trying to allocate it.
                let check_expand = |p: &Self, at: usize| {
                    if total > MAX_EXPANDED_LITERAL_BYTES {
                        return Err(p.c.error_at(
                            at,
                            format!(
                                "the literal of {} would take {total} bytes; a literal written \
                                 as {{...}} or as one value may take at most \
                                 {MAX_EXPANDED_LITERAL_BYTES} bytes",
                                super::printer::shape_string(shape)
                            ),
                        ));
                    }
                    Ok(())
                };
                if a.rank() == 0 {
                    // XLA also accepts `{v}` around a scalar.
                    let braced = self.c.eat(b'{')?;
                    self.literal_element(a.ty, &mut bytes)?;
                    if braced {
                        self.c.expect(b'}', "to end the scalar literal")?;
                    }
                } else {
                    self.c.skip_ws()?;
                    let start = self.c.pos;
                    if self.eat_elided_literal()? {
                        // XLA leaves the values unset (whatever the memory held); zeros keep
                        // our output deterministic.
                        check_expand(self, start)?;
                        bytes.resize(total, 0);
                    } else if self.c.peek()? != Some(b'{') {
                        // One value without braces (`f32[3,3] constant(1)`): XLA's parser
                        // writes it to the first element and leaves the others zero.
                        if count == 0 {
                            return Err(self.c.error_at(
                                start,
                                "a value for an array without elements (write {})",
                            ));
                        }
                        check_expand(self, start)?;
                        self.literal_element(a.ty, &mut bytes)?;
                        bytes.resize(total, 0);
                    } else {
                        self.literal_nested(a, 0, &mut bytes)?;
                        if bytes.len() != total {
                            return Err(self.c.error_at(
                                start,
                                format!(
                                    "literal has {} elements but its shape has {count}",
                                    bytes.len() / width.max(1)
                                ),
                            ));
                        }
                    }
                }
                Ok(Literal {
                    shape: shape.clone(),
                    data: LiteralData::Array(bytes),
                })
            }
        }
    }

    /// `{...}`, also spaced out (`{ ... }`): an elided array literal, consumed if it comes next.
    fn eat_elided_literal(&mut self) -> PResult<bool> {
        let b = self.c.b;
        let skip = |mut p: usize| {
            while p < b.len() && matches!(b[p], b' ' | b'\t' | b'\n' | b'\r') {
                p += 1;
            }
            p
        };
        let p = self.c.pos;
        if b.get(p) != Some(&b'{') {
            return Ok(false);
        }
        let q = skip(p + 1);
        if !b[q..].starts_with(b"...") {
            return Ok(false);
        }
        let r = skip(q + 3);
        if b.get(r) != Some(&b'}') {
            return Ok(false);
        }
        self.c.pos = r + 1;
        Ok(true)
    }

    fn literal_nested(&mut self, a: &ArrayShape, dim: usize, out: &mut Vec<u8>) -> PResult<()> {
        if dim > 64 {
            return Err(self.c.error_at(self.c.pos, "literal nesting is too deep"));
        }
        self.c.expect(b'{', "to start a literal dimension")?;
        let want = a.dims[dim];
        let mut n = 0i64;
        if self.c.eat(b'}')? {
            if want != 0 && want != UNBOUNDED_DIM {
                return Err(self.c.error_at(
                    self.c.pos - 1,
                    format!("literal dimension {dim} has 0 elements but the shape says {want}"),
                ));
            }
            return Ok(());
        }
        loop {
            if dim + 1 < a.rank() {
                self.literal_nested(a, dim + 1, out)?;
            } else {
                self.literal_element(a.ty, out)?;
            }
            n += 1;
            if self.c.eat(b'}')? {
                break;
            }
            self.c.expect(b',', "or '}' between literal elements")?;
        }
        if n != want {
            return Err(self.c.error_at(
                self.c.pos - 1,
                format!("literal dimension {dim} has {n} elements but the shape says {want}"),
            ));
        }
        Ok(())
    }

    fn literal_element(&mut self, ty: ElementType, out: &mut Vec<u8>) -> PResult<()> {
        use ElementType::*;
        match ty {
            Pred => {
                let v = if self.c.eat_keyword("true")? {
                    1
                } else if self.c.eat_keyword("false")? {
                    0
                } else {
                    let at = self.c.pos;
                    match self.c.int("true, false, 0 or 1")? {
                        0 => 0,
                        1 => 1,
                        v => {
                            return Err(self
                                .c
                                .error_at(at, format!("value {v} is out of range for pred")))
                        }
                    }
                };
                out.push(v);
            }
            C64 | C128 => {
                self.c.expect(b'(', "to start a complex value")?;
                let re = self.float_value()?;
                self.c
                    .expect(b',', "between the real and imaginary parts")?;
                let im = self.float_value()?;
                self.c.expect(b')', "to end the complex value")?;
                if ty == C64 {
                    out.extend_from_slice(&(re.0 as f32).to_le_bytes());
                    out.extend_from_slice(&(im.0 as f32).to_le_bytes());
                } else {
                    out.extend_from_slice(&re.0.to_le_bytes());
                    out.extend_from_slice(&im.0.to_le_bytes());
                }
            }
            _ if ty.is_integral() => {
                let (at, text) = self.c.number_text()?;
                let bits = ty.bit_width();
                let (neg, digits) = match text.strip_prefix('-') {
                    Some(d) => (true, d),
                    None => (false, text.strip_prefix('+').unwrap_or(text)),
                };
                let mag = if let Some(h) = digits.strip_prefix("0x") {
                    u64::from_str_radix(h, 16)
                } else {
                    digits.parse::<u64>()
                }
                .map_err(|_| {
                    self.c
                        .error_at(at, format!("expected an integer, found '{text}'"))
                })?;
                let out_of_range = || {
                    self.c.error_at(
                        at,
                        format!("value {text} is out of range for literal's primitive type {ty}"),
                    )
                };
                let value: u64 = if ty.is_signed_int() {
                    let max = if bits == 64 {
                        i64::MAX as u64
                    } else {
                        (1u64 << (bits - 1)) - 1
                    };
                    if neg {
                        if mag > max + 1 {
                            return Err(out_of_range());
                        }
                        (mag as i64).wrapping_neg() as u64
                    } else {
                        if mag > max {
                            return Err(out_of_range());
                        }
                        mag
                    }
                } else {
                    let max = if bits == 64 {
                        u64::MAX
                    } else {
                        (1u64 << bits) - 1
                    };
                    if (neg && mag != 0) || mag > max {
                        return Err(out_of_range());
                    }
                    mag
                };
                let width = ty.byte_size();
                out.extend_from_slice(&value.to_le_bytes()[..width]);
            }
            _ if ty.is_float() => {
                let (v, payload) = self.float_value()?;
                let bits = match (ty, payload) {
                    (F32, Some(p)) => {
                        let sign = if v.is_sign_negative() { 1u64 << 31 } else { 0 };
                        sign | 0x7f80_0000 | (p & 0x7f_ffff)
                    }
                    (F64, Some(p)) => {
                        let sign = if v.is_sign_negative() { 1u64 << 63 } else { 0 };
                        sign | 0x7ff0_0000_0000_0000 | (p & ((1u64 << 52) - 1))
                    }
                    (_, Some(p)) => FloatFormat::of(ty)
                        .map_or(0, |f| f.nan_with_payload(v.is_sign_negative(), p) as u64),
                    _ => {
                        let bits = f64_to_bits(ty, v).unwrap_or(0);
                        if v.is_finite() && !bits_to_f64(ty, bits).is_finite() {
                            return Err(self.c.error_at(
                                self.c.pos,
                                format!(
                                    "value {v} is out of range for literal's primitive type {ty} (largest finite value {})",
                                    max_finite(ty)
                                ),
                            ));
                        }
                        bits
                    }
                };
                out.extend_from_slice(&bits.to_le_bytes()[..ty.byte_size()]);
            }
            _ => {
                return Err(self
                    .c
                    .error_at(self.c.pos, format!("no literal values of type {ty}")))
            }
        }
        Ok(())
    }

    /// A floating-point value as XLA's parser reads it, with its NaN payload if one is written.
    fn float_value(&mut self) -> PResult<(f64, Option<u64>)> {
        let (at, text) = self.c.number_text()?;
        let (neg, body) = match text.strip_prefix('-') {
            Some(b) => (true, b),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let sign = |v: f64| if neg { -v } else { v };
        if body == "inf" {
            return Ok((sign(f64::INFINITY), None));
        }
        if body == "nan" {
            return Ok((sign(f64::NAN), None));
        }
        if let Some(p) = body.strip_prefix("nan(") {
            let hex = p.strip_suffix(')').unwrap_or(p);
            let hex = hex.strip_prefix("0x").unwrap_or(hex);
            let payload = u64::from_str_radix(hex, 16).map_err(|_| {
                self.c.error_at(
                    at,
                    format!("expected a NaN payload such as nan(0x1), found '{text}'"),
                )
            })?;
            if payload == 0 {
                return Err(self.c.error_at(at, "a NaN payload must not be zero"));
            }
            return Ok((sign(f64::NAN), Some(payload)));
        }
        let v = if let Some(h) = body.strip_prefix("0x") {
            u64::from_str_radix(h, 16).map(|u| u as f64).ok()
        } else if body.bytes().all(|b| b.is_ascii_digit()) {
            // An integer token, as XLA lexes it: `-0` is plain zero.
            return match body.parse::<u64>() {
                Ok(0) => Ok((0.0, None)),
                Ok(u) => Ok((sign(u as f64), None)),
                Err(_) => body.parse::<f64>().map(|f| (sign(f), None)).map_err(|_| {
                    self.c
                        .error_at(at, format!("expected a number, found '{text}'"))
                }),
            };
        } else {
            body.parse::<f64>().ok()
        };
        match v {
            Some(v) => Ok((sign(v), None)),
            None => Err(self
                .c
                .error_at(at, format!("expected a number, found '{text}'"))),
        }
    }

    // ----- shardings -----

    pub fn parse_sharding(&mut self) -> PResult<Sharding> {
        self.enter()?;
        let r = self.parse_sharding_inner();
        self.leave();
        r
    }

    fn parse_sharding_inner(&mut self) -> PResult<Sharding> {
        self.c.expect(b'{', "to start the sharding")?;
        match self.c.peek()? {
            Some(b'{') => {
                let mut elems = Vec::new();
                loop {
                    self.c.expect(b'{', "to start a tuple element sharding")?;
                    elems.push(self.single_sharding()?);
                    if self.c.eat(b'}')? {
                        break;
                    }
                    self.c
                        .expect(b',', "or '}' between tuple element shardings")?;
                }
                Ok(Sharding::tuple(elems))
            }
            Some(b'}') => {
                self.c.pos += 1;
                Ok(Sharding::tuple(Vec::new()))
            }
            _ => self.single_sharding(),
        }
    }

    /// The inside of `{...}` for one sharding, after the `{`; consumes the `}`.
    fn single_sharding(&mut self) -> PResult<Sharding> {
        if matches!(
            self.c.peek_word()?,
            "mesh" | "maximal_mesh" | "single_device"
        ) {
            return self.named_sharding();
        }
        let start = self.c.pos;
        let mut kind: Option<ShardingKind> = None;
        let mut device: Option<i64> = None;
        let mut maximal = false;
        let mut tile: Option<TileAssignment> = None;
        let mut replicate_last = false;
        let mut last_tile_dims = Vec::new();
        let mut metadata = Vec::new();
        let mut shard_group = None;
        loop {
            if self.c.eat(b'}')? {
                break;
            }
            self.c.skip_ws()?;
            let at = self.c.pos;
            let w = self.c.name("a sharding item or '}'")?;
            match w {
                "replicated" => kind = Some(ShardingKind::Replicated),
                "manual" => kind = Some(ShardingKind::Manual),
                "unknown" => kind = Some(ShardingKind::Unknown),
                "unreduced" => kind = Some(ShardingKind::Unreduced),
                "maximal" => maximal = true,
                "last_tile_dim_replicate" => replicate_last = true,
                "shard_as" | "shard_like" => {
                    let id = self.c.int("a shard group id")?;
                    shard_group = Some(ShardGroup {
                        id,
                        shard_as: w == "shard_as",
                    });
                }
                "mesh" | "maximal_mesh" | "single_device" => {
                    return Err(self.c.error_at(
                        at,
                        "the mesh of a named sharding must come first in the sharding",
                    ))
                }
                "device" => {
                    self.c.expect(b'=', "after device")?;
                    self.c.skip_ws()?;
                    let at = self.c.pos;
                    let d = self.c.int("a device id")?;
                    if !(0..MAX_DEVICES).contains(&d) {
                        return Err(self.c.error_at(
                            at,
                            format!(
                                "device id {d}: expected 0 to {} (a sharding names at most \
                                 {MAX_DEVICES} devices)",
                                MAX_DEVICES - 1
                            ),
                        ));
                    }
                    device = Some(d);
                }
                "devices" => {
                    self.c.expect(b'=', "after devices")?;
                    tile = Some(self.tile_assignment()?);
                }
                "metadata" => {
                    self.c.expect(b'=', "after metadata")?;
                    metadata = self.single_or_list_metadata()?;
                }
                "last_tile_dims" => {
                    self.c.expect(b'=', "after last_tile_dims")?;
                    self.c.expect(b'{', "to start last_tile_dims")?;
                    loop {
                        self.c.skip_ws()?;
                        let tat = self.c.pos;
                        let t = self.c.name("a sharding type")?;
                        last_tile_dims.push(match t {
                            "replicated" => SubgroupType::Replicated,
                            "manual" => SubgroupType::Manual,
                            "maximal" => SubgroupType::Maximal,
                            "unreduced" => SubgroupType::Unreduced,
                            _ => {
                                return Err(self.c.error_at(
                                    tat,
                                    format!("expected replicated, manual, maximal or unreduced, found '{t}'"),
                                ))
                            }
                        });
                        if self.c.eat(b'}')? {
                            break;
                        }
                        self.c.expect(b',', "or '}' in last_tile_dims")?;
                    }
                }
                _ => {
                    return Err(self.c.error_at(
                        at,
                        format!("unexpected '{w}' in a sharding (expected replicated, manual, maximal, unknown, unreduced, device=, devices=, last_tile_dim_replicate, last_tile_dims=, shard_as, shard_like or metadata=)"),
                    ))
                }
            }
        }
        let kind = if let Some(k) = kind {
            if device.is_some() || tile.is_some() {
                return Err(self
                    .c
                    .error_at(start, "this sharding should not have devices assigned"));
            }
            k
        } else if maximal {
            match device {
                Some(d) if tile.is_none() => ShardingKind::Maximal(d),
                _ => {
                    return Err(self.c.error_at(
                        start,
                        "maximal shardings should have exactly one device assigned",
                    ))
                }
            }
        } else {
            let Some(ta) = tile else {
                return Err(self.c.error_at(
                    start,
                    "non-maximal shardings must have a tile assignment list including dimensions",
                ));
            };
            if replicate_last && !last_tile_dims.is_empty() {
                return Err(self.c.error_at(
                    start,
                    "last_tile_dim_replicate and last_tile_dims= can't be combined",
                ));
            }
            ShardingKind::Tiled(TiledSharding {
                tile_assignment: ta,
                replicate_on_last_tile_dim: replicate_last,
                last_tile_dims,
            })
        };
        Ok(Sharding {
            kind,
            metadata,
            shard_group,
        })
    }

    /// A named (mesh) sharding after its `{`, up to and including the `}`:
    /// `mesh['x'=2,'y'=4], [{'x'}, {}], replicated={'y'}, metadata={...}`, the forms
    /// `mesh[...], replicated` / `manual` / `unreduced[=op][{axes}]`, and
    /// `single_device[device_id=N]` (or the older `maximal_mesh[...]`). Axis names may be quoted
    /// (`'x'`, `"x"`: jaxlib 0.12) or bare (`x`: the older spelling).
    fn named_sharding(&mut self) -> PResult<Sharding> {
        self.c.skip_ws()?;
        let start = self.c.pos;
        let mesh = self.mesh()?;
        let mut n = NamedSharding::replicated_on(mesh);
        let mut metadata = Vec::new();
        if n.mesh.is_single_device() {
            if self.c.eat(b',')? {
                self.key("metadata", "after a single-device mesh")?;
                metadata = self.single_or_list_metadata()?;
            }
            self.c.expect(b'}', "to end the sharding")?;
            return self.finish_named(start, n, metadata);
        }
        self.c.eat(b',')?;
        let word = self.c.peek_word()?;
        let keyword = self.c.b.get(self.c.pos + word.len()) != Some(&b'=');
        match word {
            "replicated" if keyword => self.c.pos += word.len(),
            "manual" if keyword => {
                self.c.pos += word.len();
                n.manual = NamedSharding::all_axes(&n.mesh);
            }
            "unreduced" => {
                self.c.pos += word.len();
                if self.c.eat(b'=')? {
                    n.reduction = self.reduction_op()?;
                }
                n.unreduced = if self.c.peek()? == Some(b'{') {
                    self.axis_ref_list(&n.mesh)?
                } else {
                    NamedSharding::all_axes(&n.mesh)
                };
            }
            _ => {
                n.dims = self.dim_shardings(&n.mesh)?;
                let mut seen: Vec<&str> = Vec::new();
                loop {
                    if self.c.eat(b'}')? {
                        return self.finish_named(start, n, metadata);
                    }
                    self.c
                        .expect(b',', "or '}' after the dimensions of a named sharding")?;
                    self.c.skip_ws()?;
                    let at = self.c.pos;
                    let key = self.attr_name()?;
                    if seen.contains(&key) {
                        return Err(self
                            .c
                            .error_at(at, format!("'{key}=' is repeated in the sharding")));
                    }
                    seen.push(key);
                    match key {
                        "replicated" => n.replicated = self.axis_ref_list(&n.mesh)?,
                        "manual" => n.manual = self.axis_ref_list(&n.mesh)?,
                        "unreduced" => {
                            if self.c.peek()? != Some(b'{') {
                                n.reduction = self.reduction_op()?;
                            }
                            n.unreduced = self.axis_ref_list(&n.mesh)?;
                        }
                        "metadata" => metadata = self.single_or_list_metadata()?,
                        _ => {
                            return Err(self.c.error_at(
                                at,
                                format!("unexpected '{key}=' in a named sharding (expected replicated=, unreduced=, manual= or metadata=)"),
                            ))
                        }
                    }
                }
            }
        }
        if self.c.eat(b',')? {
            self.key("metadata", "or '}' after the sharding")?;
            metadata = self.single_or_list_metadata()?;
        }
        self.c.expect(b'}', "to end the sharding")?;
        self.finish_named(start, n, metadata)
    }

    /// Consumes `key=` or fails naming what was expected.
    fn key(&mut self, key: &str, context: &str) -> PResult<()> {
        self.c.skip_ws()?;
        let at = self.c.pos;
        let k = self.attr_name()?;
        if k != key {
            return Err(self
                .c
                .error_at(at, format!("expected '{key}=' {context}, found '{k}='")));
        }
        Ok(())
    }

    fn finish_named(
        &mut self,
        start: usize,
        mut n: NamedSharding,
        metadata: Vec<OpMetadata>,
    ) -> PResult<Sharding> {
        if n.unreduced.is_empty() {
            // `unreduced=max{}`: nothing is unreduced, so nothing is left to reduce.
            n.reduction = ReductionOp::Sum;
        }
        if let Err(e) = n.validate() {
            return Err(self
                .c
                .error_at(start, format!("invalid named sharding: {e}")));
        }
        Ok(Sharding {
            kind: ShardingKind::Named(Box::new(n)),
            metadata,
            shard_group: None,
        })
    }

    /// `mesh['x'=2,'y'=4]` with an optional `, device_ids=(...)`, or
    /// `single_device[device_id=N]` / `maximal_mesh[device_id=N]`.
    fn mesh(&mut self) -> PResult<Mesh> {
        let w = self.c.ident("a mesh")?;
        if w != "mesh" {
            self.c.expect(b'[', "after the single-device mesh")?;
            self.key("device_id", "in a single-device mesh")?;
            let d = self.c.int("a device id")?;
            self.c.expect(b']', "to end the single-device mesh")?;
            return Ok(Mesh::single_device(d));
        }
        self.c.expect(b'[', "after mesh")?;
        let mut axes: Vec<MeshAxis> = Vec::new();
        if !self.c.eat(b']')? {
            loop {
                let name = self.axis_name()?;
                self.c.expect(b'=', "after the mesh axis name")?;
                self.c.skip_ws()?;
                let at = self.c.pos;
                let size = self.c.int("a mesh axis size")?;
                if size < 1 {
                    return Err(self.c.error_at(
                        at,
                        format!("mesh axis sizes must be positive, found {size}"),
                    ));
                }
                let devices = axes
                    .iter()
                    .map(|a| a.size)
                    .try_fold(size, i64::checked_mul)
                    .filter(|&n| n <= MAX_DEVICES);
                if devices.is_none() {
                    return Err(self.c.error_at(
                        at,
                        format!(
                            "mesh axis '{name}' of size {size}: the mesh would stand for more \
                             than {MAX_DEVICES} devices"
                        ),
                    ));
                }
                axes.push(MeshAxis { name, size });
                if self.c.eat(b']')? {
                    break;
                }
                self.c.expect(b',', "or ']' in the mesh axes")?;
            }
        }
        let mut mesh = Mesh {
            axes,
            devices: MeshDevices::Iota,
        };
        let save = self.c.pos;
        if self.c.eat(b',')? {
            let word = self.c.peek_word()?;
            if word != "device_ids" || self.c.b.get(self.c.pos + word.len()) != Some(&b'=') {
                // The comma separates the mesh from what follows.
                self.c.pos = save;
                return Ok(mesh);
            }
            self.attr_name()?;
            self.c.expect(b'(', "to start device_ids")?;
            let n = mesh.num_devices();
            let at = self.c.pos;
            if self.c.peek()? == Some(b'[') {
                let (reshape, perm) = self.iota_reshape()?;
                self.c.expect(b')', "to end device_ids")?;
                if reshape.iter().product::<i64>() != n || reshape.iter().any(|&r| r < 1) {
                    return Err(self.c.error_at(
                        at,
                        format!(
                            "the device_ids iota {reshape:?} does not hold the mesh's {n} devices"
                        ),
                    ));
                }
                let sizes: Vec<i64> = mesh.axes.iter().map(|a| a.size).collect();
                mesh.devices = Mesh::canonical_iota(&sizes, &reshape, &perm);
            } else {
                let ids = self.device_ids_rest()?;
                if ids.len() as i64 != n {
                    return Err(self.c.error_at(
                        at,
                        format!(
                            "expected {n} device_ids for the mesh axes, found {}",
                            ids.len()
                        ),
                    ));
                }
                mesh.devices = MeshDevices::Explicit(ids);
            }
        }
        Ok(mesh)
    }

    /// A mesh axis name: quoted (`'x'`, `"x"`) or a bare identifier.
    /// The rest of `device_ids=(...)` after its `(`: integers separated by `,`, then `)`.
    fn device_ids_rest(&mut self) -> PResult<Vec<i64>> {
        let mut ids = Vec::new();
        if !self.c.eat(b')')? {
            loop {
                ids.push(self.c.int("a device id")?);
                if self.c.eat(b')')? {
                    break;
                }
                self.c.expect(b',', "or ')' in device_ids")?;
            }
        }
        Ok(ids)
    }

    fn axis_name(&mut self) -> PResult<String> {
        match self.c.peek()? {
            Some(b'\'' | b'"') => self.c.any_quoted("an axis name"),
            _ => Ok(self.c.ident("an axis name")?.to_string()),
        }
    }

    /// `sum`, `max` or `min` after `unreduced=`.
    fn reduction_op(&mut self) -> PResult<ReductionOp> {
        self.c.skip_ws()?;
        let at = self.c.pos;
        let w = self.c.ident("sum, max or min")?;
        Ok(match w {
            "sum" => ReductionOp::Sum,
            "max" => ReductionOp::Max,
            "min" => ReductionOp::Min,
            _ => {
                return Err(self.c.error_at(
                    at,
                    format!("expected sum, max or min for the unreduced reduction, found '{w}'"),
                ))
            }
        })
    }

    /// `'x'` or `'x':(2)2`: an axis of `mesh` by name (or by index, as XLA also accepts).
    fn axis_ref(&mut self, mesh: &Mesh) -> PResult<AxisRef> {
        self.c.skip_ws()?;
        let at = self.c.pos;
        let name = self.axis_name()?;
        let axis = match mesh.axis_index(&name) {
            Some(k) => k,
            None => match name.parse::<usize>() {
                Ok(k) if k < mesh.axes.len() => k,
                _ => {
                    return Err(self
                        .c
                        .error_at(at, format!("'{name}' is not an axis of the mesh")))
                }
            },
        };
        if !self.c.eat(b':')? {
            return Ok(AxisRef::full(axis));
        }
        self.c.expect(b'(', "to start the sub-axis pre-size")?;
        let pre = self.c.int("a sub-axis pre-size")?;
        self.c.expect(b')', "after the sub-axis pre-size")?;
        let size = self.c.int("a sub-axis size")?;
        Ok(AxisRef::sub_axis(axis, pre, size))
    }

    /// `{'x', 'y':(1)2}`.
    fn axis_ref_list(&mut self, mesh: &Mesh) -> PResult<Vec<AxisRef>> {
        self.c.expect(b'{', "to start a list of axes")?;
        let mut v = Vec::new();
        if self.c.eat(b'}')? {
            return Ok(v);
        }
        loop {
            v.push(self.axis_ref(mesh)?);
            if self.c.eat(b'}')? {
                return Ok(v);
            }
            self.c.expect(b',', "or '}' in the list of axes")?;
        }
    }

    /// `[{'x'}, {'y', ?}, {?}, {}]`: the axes of each dimension, `?` marking an open one.
    fn dim_shardings(&mut self, mesh: &Mesh) -> PResult<Vec<DimSharding>> {
        self.c.expect(
            b'[',
            "to start the dimensions of a named sharding (or replicated, manual, unreduced)",
        )?;
        let mut dims = Vec::new();
        if self.c.eat(b']')? {
            return Ok(dims);
        }
        loop {
            self.c.expect(b'{', "to start the axes of a dimension")?;
            let mut d = DimSharding {
                axes: Vec::new(),
                closed: true,
            };
            if !self.c.eat(b'}')? {
                loop {
                    if self.c.eat(b'?')? {
                        d.closed = false;
                        self.c
                            .expect(b'}', "after '?' (it comes last in a dimension)")?;
                        break;
                    }
                    d.axes.push(self.axis_ref(mesh)?);
                    if self.c.eat(b'}')? {
                        break;
                    }
                    self.c.expect(b',', "or '}' in the axes of a dimension")?;
                }
            }
            dims.push(d);
            if self.c.eat(b']')? {
                return Ok(dims);
            }
            self.c.expect(b',', "or ']' between dimensions")?;
        }
    }

    /// `[2,2]0,1,2,3` or `[2,2]<=[4]` or `[2,2]<=[2,2]T(1,0)`.
    fn tile_assignment(&mut self) -> PResult<TileAssignment> {
        let at = self.c.pos;
        let dims = self.bracket_dims("the tile assignment dimensions")?;
        let n = self.device_count(&dims, at)?;
        if self.c.eat_str("<=")? {
            let (reshape_dims, transpose_perm) = self.iota_reshape()?;
            let m: i64 = reshape_dims.iter().product();
            if n != m {
                return Err(self.c.error_at(
                    self.c.pos,
                    format!("tile assignment has {n} devices but the iota has {m}"),
                ));
            }
            return Ok(TileAssignment::Iota {
                dims: dims.into_iter().collect(),
                reshape_dims: reshape_dims.into_iter().collect(),
                transpose_perm: transpose_perm.into_iter().collect(),
            });
        }
        let start = self.c.pos;
        let mut devices = Vec::new();
        loop {
            devices.push(self.c.int("a device id")?);
            if !self.c.eat(b',')? {
                break;
            }
        }
        if devices.len() as i64 != n {
            return Err(self.c.error_at(
                start,
                format!(
                    "tile assignment dimensions need {n} devices but {} are listed",
                    devices.len()
                ),
            ));
        }
        Ok(TileAssignment::Explicit {
            dims: dims.into_iter().collect(),
            devices,
        })
    }

    /// The number of devices that dimensions `[a,b,...]` (read at `at`) stand for: every
    /// dimension at least 1 and the product at most [`MAX_DEVICES`].
    fn device_count(&self, dims: &[i64], at: usize) -> PResult<i64> {
        if let Some(d) = dims.iter().find(|&&d| d < 1) {
            return Err(self
                .c
                .error_at(at, format!("device dimensions must be >= 1, found {d}")));
        }
        checked_product(dims)
            .filter(|&n| n <= MAX_DEVICES)
            .ok_or_else(|| {
                self.c.error_at(
                    at,
                    format!("dimensions {dims:?} stand for more than {MAX_DEVICES} devices"),
                )
            })
    }

    fn bracket_dims(&mut self, what: &str) -> PResult<Vec<i64>> {
        self.c.expect_parts(b'[', &["to start ", what])?;
        let mut v = Vec::new();
        loop {
            let at = self.c.pos;
            let d = self.c.int("a dimension")?;
            if d < 0 {
                return Err(self.c.error_at(at, "dimensions must be >= 0"));
            }
            v.push(d);
            if self.c.eat(b']')? {
                return Ok(v);
            }
            self.c.expect_parts(b',', &["or ']' to close ", what])?;
        }
    }

    /// `[4]` or `[2,2]T(1,0)` after `<=`.
    fn iota_reshape(&mut self) -> PResult<(Vec<i64>, Vec<i64>)> {
        let at = self.c.pos;
        let reshape = self.bracket_dims("the iota reshape dimensions")?;
        let devices = self.device_count(&reshape, at)?;
        let mut perm = Vec::new();
        if reshape.len() > 1 {
            if !(self.c.peek()? == Some(b'T') && self.c.byte_at(1) == Some(b'(')) {
                return Err(self
                    .c
                    .expected("'T(' to start the iota transpose permutation"));
            }
            self.c.pos += 2;
            loop {
                let at = self.c.pos;
                let d = self.c.int("a dimension")?;
                if d < 0 || d as usize >= reshape.len() {
                    return Err(self.c.error_at(
                        at,
                        format!(
                            "out of range iota transpose value {d}, expecting a value in [0, {})",
                            reshape.len()
                        ),
                    ));
                }
                perm.push(d);
                if self.c.eat(b')')? {
                    break;
                }
                self.c.expect(b',', "or ')' in the transpose permutation")?;
            }
            if perm.len() != reshape.len() {
                return Err(self.c.error_at(
                    self.c.pos,
                    "the transpose permutation must have one entry per reshape dimension",
                ));
            }
        }
        // In its normal form, as XLA keeps it: `<=[2,4]T(0,1)` and `<=[1,8]T(1,0)` are `<=[8]`.
        Ok(iota_normal_form(devices, &reshape, &perm)
            .map_or((reshape, perm), |(r, p)| (r.to_vec(), p.to_vec())))
    }

    // ----- replica groups -----

    pub fn parse_replica_groups(&mut self) -> PResult<ReplicaGroups> {
        match self.c.peek()? {
            Some(b'{') => Ok(ReplicaGroups::Explicit(
                self.int_list_list("replica groups")?,
            )),
            Some(b'[') => {
                let at = self.c.pos;
                let dims = self.bracket_dims("the replica group dimensions")?;
                if dims.len() != 2 {
                    return Err(self.c.error_at(
                        at,
                        "iota replica groups need two dimensions: [num_groups,group_size]",
                    ));
                }
                if !self.c.eat_str("<=")? {
                    return Err(self.c.expected("'<=' in iota replica groups"));
                }
                let (reshape_dims, transpose_perm) = self.iota_reshape()?;
                Ok(ReplicaGroups::Iota {
                    num_groups: dims[0],
                    group_size: dims[1],
                    reshape_dims,
                    transpose_perm,
                })
            }
            _ if self.c.peek_word()? == "mesh" => {
                // The mesh as a named sharding spells it, device order included
                // (`device_ids=(...)` or `device_ids=([2,2,2]T(0,2,1))`).
                let mesh = self.mesh()?;
                let mut g = MeshReplicaGroups {
                    mesh,
                    group_axes: Vec::new(),
                };
                self.c.expect(b'{', "to start the group axes")?;
                if !self.c.eat(b'}')? {
                    loop {
                        self.c.skip_ws()?;
                        let s = self.c.pos;
                        let mut p = s;
                        let b = self.c.b;
                        let mut in_quote = false;
                        while p < b.len() {
                            match b[p] {
                                b'\'' => in_quote = !in_quote,
                                b',' | b'}' if !in_quote => break,
                                _ => {}
                            }
                            p += 1;
                        }
                        let text = self.c.src[s..p].trim_end();
                        if text.is_empty() {
                            return Err(self.c.expected("an axis"));
                        }
                        g.group_axes.push(text.to_string());
                        self.c.pos = p;
                        if self.c.eat(b'}')? {
                            break;
                        }
                        self.c.expect(b',', "or '}' in the group axes")?;
                    }
                }
                Ok(ReplicaGroups::Mesh(g))
            }
            _ => Err(self
                .c
                .expected("replica groups ({{...}}, [n,m]<=[...] or mesh[...] {...})")),
        }
    }

    // ----- metadata and attribute maps -----

    pub fn parse_metadata(&mut self) -> PResult<OpMetadata> {
        let mut md = OpMetadata::default();
        self.sub_attributes(|p, key, at| {
            match key {
                "op_type" => md.op_type = p.c.string("a string")?,
                "op_name" => md.op_name = p.c.string("a string")?,
                "source_file" => md.source_file = p.c.string("a string")?,
                "source_line" => md.source_line = p.c.int32("a line")?,
                "source_end_line" => md.source_end_line = p.c.int32("a line")?,
                "source_column" => md.source_column = p.c.int32("a column")?,
                "source_end_column" => md.source_end_column = p.c.int32("a column")?,
                "deduplicated_name" => md.deduplicated_name = p.c.string("a string")?,
                "scheduling_name" => md.scheduling_name = p.c.string("a string")?,
                "preserve_layout" => md.preserve_layout = p.bool_value()?,
                "stack_frame_id" => md.stack_frame_id = p.c.int32("an id")?,
                "size_of_generated_code_in_bytes" => {
                    md.size_of_generated_code_in_bytes = p.c.int("a size")?
                }
                "size_of_memory_working_set_in_bytes" => {
                    md.size_of_memory_working_set_in_bytes = p.c.int("a size")?
                }
                "profile_type" => {
                    p.c.expect(b'{', "to start profile_type")?;
                    if !p.c.eat(b'}')? {
                        loop {
                            p.c.skip_ws()?;
                            let wat = p.c.pos;
                            let w = p.c.name("a profile type")?;
                            md.profile_type.push(match w {
                                "INVALID" => 0,
                                "WINDOW" => 1,
                                "FLAG" => 2,
                                "INTEGER" => 3,
                                _ => w.parse().map_err(|_| {
                                    p.c.error_at(
                                        wat,
                                        format!("expected a profile type, found '{w}'"),
                                    )
                                })?,
                            });
                            if p.c.eat(b'}')? {
                                break;
                            }
                            p.c.expect(b',', "or '}' in profile_type")?;
                        }
                    }
                }
                _ => {
                    return Err(p
                        .c
                        .error_at(at, format!("unexpected metadata field '{key}'")))
                }
            }
            Ok(())
        })?;
        Ok(md)
    }

    fn single_or_list_metadata(&mut self) -> PResult<Vec<OpMetadata>> {
        let save = self.c.pos;
        self.c.expect(b'{', "to start metadata")?;
        if self.c.peek()? == Some(b'{') {
            let mut v = Vec::new();
            loop {
                v.push(self.parse_metadata()?);
                if self.c.eat(b'}')? {
                    return Ok(v);
                }
                self.c.expect(b',', "or '}' in the metadata list")?;
            }
        }
        if self.c.eat(b'}')? {
            return Ok(Vec::new());
        }
        self.c.pos = save;
        Ok(vec![self.parse_metadata()?])
    }

    pub fn parse_frontend_attributes(&mut self) -> PResult<FrontendAttributes> {
        let mut map = FrontendAttributes::new();
        self.c.expect(b'{', "to start frontend attributes")?;
        if self.c.eat(b'}')? {
            return Ok(map);
        }
        loop {
            let key = if self.c.peek()? == Some(b'"') {
                let k = self.c.string("an attribute name")?;
                self.c.expect(b'=', "after the attribute name")?;
                k
            } else {
                self.attr_name()?.to_string()
            };
            let value = if self.c.peek()? == Some(b'{') {
                self.c.braced_raw("a {...} value")?.to_string()
            } else {
                self.c.string("a string or {...} value")?
            };
            map.insert(key, value);
            if self.c.eat(b'}')? {
                return Ok(map);
            }
            self.c.expect(b',', "or '}' in frontend attributes")?;
        }
    }

    // ----- windows, labels, slices, paddings -----

    pub fn parse_window(&mut self) -> PResult<Window> {
        let mut size = Vec::new();
        let mut stride = Vec::new();
        let mut pad: Vec<(i64, i64)> = Vec::new();
        let mut lhs = Vec::new();
        let mut rhs = Vec::new();
        let mut rev = Vec::new();
        self.sub_attributes(|p, key, at| {
            match key {
                "size" => size = p.x_list(|p| p.c.int("a size"))?,
                "stride" => stride = p.x_list(|p| p.c.int("a stride"))?,
                "pad" => {
                    pad = p.x_list(|p| {
                        let lo = p.c.int("low padding")?;
                        p.c.expect(b'_', "between low and high padding")?;
                        let hi = p.c.int("high padding")?;
                        Ok((lo, hi))
                    })?
                }
                "lhs_dilate" => lhs = p.x_list(|p| p.c.int("a dilation"))?,
                "rhs_dilate" => rhs = p.x_list(|p| p.c.int("a dilation"))?,
                "rhs_reversal" => rev = p.x_list(|p| p.c.int("0 or 1"))?,
                _ => return Err(p.c.error_at(at, format!("unexpected window field '{key}'"))),
            }
            Ok(())
        })?;
        let n = size.len();
        let check = |p: &Self, len: usize, what: &str| -> PResult<()> {
            if len != 0 && len != n {
                return Err(p.c.error_at(
                    p.c.pos,
                    format!("window {what} has {len} dimensions but size has {n}"),
                ));
            }
            Ok(())
        };
        check(self, stride.len(), "stride")?;
        check(self, pad.len(), "pad")?;
        check(self, lhs.len(), "lhs_dilate")?;
        check(self, rhs.len(), "rhs_dilate")?;
        check(self, rev.len(), "rhs_reversal")?;
        let dims = (0..n)
            .map(|i| WindowDim {
                size: size[i],
                stride: stride.get(i).copied().unwrap_or(1),
                padding_low: pad.get(i).map_or(0, |p| p.0),
                padding_high: pad.get(i).map_or(0, |p| p.1),
                window_dilation: rhs.get(i).copied().unwrap_or(1),
                base_dilation: lhs.get(i).copied().unwrap_or(1),
                window_reversal: rev.get(i).copied().unwrap_or(0) != 0,
            })
            .collect();
        Ok(Window { dims })
    }

    /// `a x b x c` items separated by `x`.
    fn x_list<T>(&mut self, mut item: impl FnMut(&mut Self) -> PResult<T>) -> PResult<Vec<T>> {
        let mut v = vec![item(self)?];
        while self.c.b.get(self.c.pos) == Some(&b'x') {
            self.c.pos += 1;
            v.push(item(self)?);
        }
        Ok(v)
    }

    pub fn parse_dim_labels(&mut self) -> PResult<ConvDimensionNumbers> {
        self.c.skip_ws()?;
        let start = self.c.pos;
        let b = self.c.b;
        let mut p = start;
        while p < b.len()
            && (b[p].is_ascii_alphanumeric()
                || b[p] == b'_'
                || b[p] == b'-'
                || b[p] == b'>'
                || b[p] == b'?')
        {
            p += 1;
        }
        let text = &self.c.src[start..p];
        let bad = |msg: &str| {
            self.c
                .error_at(start, format!("{msg} in dim_labels '{text}'"))
        };
        let (lhs, out) = text.split_once("->").ok_or_else(|| bad("expected '->'"))?;
        let (input, kernel) = lhs.split_once('_').ok_or_else(|| bad("expected '_'"))?;
        if input.len() != kernel.len() || input.len() != out.len() || input.len() < 2 {
            return Err(bad(
                "input, kernel and output must have the same rank (at least 2)",
            ));
        }
        let rank = input.len();
        let spatial = rank - 2;
        let mut d = ConvDimensionNumbers {
            input_spatial_dimensions: vec![-1; spatial],
            kernel_spatial_dimensions: vec![-1; spatial],
            output_spatial_dimensions: vec![-1; spatial],
            input_batch_dimension: -1,
            input_feature_dimension: -1,
            kernel_input_feature_dimension: -1,
            kernel_output_feature_dimension: -1,
            output_batch_dimension: -1,
            output_feature_dimension: -1,
        };
        fn spatial_index(c: u8) -> Option<usize> {
            match c {
                b'0'..=b'9' => Some((c - b'0') as usize),
                _ => None,
            }
        }
        for (i, c) in input.bytes().enumerate() {
            let i = i as i64;
            match c {
                b'b' => d.input_batch_dimension = i,
                b'f' => d.input_feature_dimension = i,
                _ => match spatial_index(c) {
                    Some(s) if s < spatial => d.input_spatial_dimensions[s] = i,
                    _ => return Err(bad("unexpected input label")),
                },
            }
        }
        for (i, c) in kernel.bytes().enumerate() {
            let i = i as i64;
            match c {
                b'i' => d.kernel_input_feature_dimension = i,
                b'o' => d.kernel_output_feature_dimension = i,
                _ => match spatial_index(c) {
                    Some(s) if s < spatial => d.kernel_spatial_dimensions[s] = i,
                    _ => return Err(bad("unexpected kernel label")),
                },
            }
        }
        for (i, c) in out.bytes().enumerate() {
            let i = i as i64;
            match c {
                b'b' => d.output_batch_dimension = i,
                b'f' => d.output_feature_dimension = i,
                _ => match spatial_index(c) {
                    Some(s) if s < spatial => d.output_spatial_dimensions[s] = i,
                    _ => return Err(bad("unexpected output label")),
                },
            }
        }
        let all = [
            d.input_batch_dimension,
            d.input_feature_dimension,
            d.kernel_input_feature_dimension,
            d.kernel_output_feature_dimension,
            d.output_batch_dimension,
            d.output_feature_dimension,
        ];
        if all.contains(&-1)
            || d.input_spatial_dimensions.contains(&-1)
            || d.kernel_spatial_dimensions.contains(&-1)
            || d.output_spatial_dimensions.contains(&-1)
        {
            return Err(bad("a dimension is missing or repeated"));
        }
        self.c.pos = p;
        Ok(d)
    }

    pub fn parse_slice(&mut self) -> PResult<Vec<SliceDim>> {
        self.c.expect(b'{', "to start the slice ranges")?;
        let mut v = Vec::new();
        if self.c.eat(b'}')? {
            return Ok(v);
        }
        loop {
            self.c.expect(b'[', "to start a slice range")?;
            let start = self.c.int("a start index")?;
            self.c.expect(b':', "after the start index")?;
            let limit = self.c.int("a limit index")?;
            let stride = if self.c.eat(b':')? {
                self.c.int("a stride")?
            } else {
                1
            };
            self.c.expect(b']', "to end the slice range")?;
            v.push(SliceDim {
                start,
                limit,
                stride,
            });
            if self.c.eat(b'}')? {
                return Ok(v);
            }
            self.c.expect(b',', "or '}' between slice ranges")?;
        }
    }

    pub fn parse_padding(&mut self) -> PResult<Vec<PaddingDim>> {
        self.x_list(|p| {
            let low = p.c.int("low padding")?;
            p.c.expect(b'_', "between low and high padding")?;
            let high = p.c.int("high padding")?;
            let interior = if p.c.b.get(p.c.pos) == Some(&b'_') {
                p.c.pos += 1;
                p.c.int("interior padding")?
            } else {
                0
            };
            Ok(PaddingDim {
                low,
                high,
                interior,
            })
        })
    }

    pub fn parse_precision_list(&mut self) -> PResult<Vec<Precision>> {
        self.c.expect(b'{', "to start operand_precision")?;
        let mut v = Vec::new();
        if self.c.eat(b'}')? {
            return Ok(v);
        }
        loop {
            self.c.skip_ws()?;
            let at = self.c.pos;
            let w = self.c.name("a precision")?;
            v.push(match Precision::from_name(&w.to_ascii_lowercase()) {
                Some(p) => p,
                None => {
                    return Err(self.c.error_at(
                        at,
                        format!("expected {}, found '{w}'", Precision::expected()),
                    ))
                }
            });
            if self.c.eat(b'}')? {
                return Ok(v);
            }
            self.c.expect(b',', "or '}' in operand_precision")?;
        }
    }

    pub fn parse_result_accuracy(&mut self) -> PResult<ResultAccuracy> {
        let mut result = None;
        self.sub_attributes(|p, key, at| {
            match key {
                "mode" => {
                    p.c.skip_ws()?;
                    let wat = p.c.pos;
                    let w = p.c.name("a result accuracy mode")?;
                    result = Some(ResultAccuracy::Mode(
                        match w.to_ascii_uppercase().as_str() {
                            "DEFAULT" => 0,
                            "HIGHEST" => 1,
                            _ => {
                                return Err(p.c.error_at(
                                    wat,
                                    format!("expected DEFAULT or HIGHEST, found '{w}'"),
                                ))
                            }
                        },
                    ));
                }
                "tolerance" => {
                    let (mut atol, mut rtol, mut ulps) = (0.0, 0.0, 0);
                    p.sub_attributes(|p, key, at| {
                        match key {
                            "atol" => atol = p.float_value()?.0,
                            "rtol" => rtol = p.float_value()?.0,
                            "ulps" => ulps = p.c.int("ulps")?,
                            _ => {
                                return Err(p
                                    .c
                                    .error_at(at, format!("unexpected tolerance field '{key}'")))
                            }
                        }
                        Ok(())
                    })?;
                    result = Some(ResultAccuracy::Tolerance { atol, rtol, ulps });
                }
                _ => {
                    return Err(p
                        .c
                        .error_at(at, format!("unexpected result_accuracy field '{key}'")))
                }
            }
            Ok(())
        })?;
        result.ok_or_else(|| {
            self.c
                .error_at(self.c.pos, "result_accuracy needs mode= or tolerance=")
        })
    }

    pub fn parse_domain(&mut self) -> PResult<DomainAttrs> {
        let mut kind = None;
        let mut entry = None;
        let mut exit = None;
        self.sub_attributes(|p, key, at| {
            match key {
                "kind" => kind = Some(p.c.string("a domain kind")?),
                "entry" => entry = Some(p.parse_sharding()?),
                "exit" => exit = Some(p.parse_sharding()?),
                _ => return Err(p.c.error_at(at, format!("unexpected domain field '{key}'"))),
            }
            Ok(())
        })?;
        let Some(kind) = kind else {
            return Err(self.c.error_at(self.c.pos, "domain needs kind="));
        };
        if kind != "sharding" {
            return Err(self
                .c
                .error_at(self.c.pos, format!("unsupported domain kind: {kind}")));
        }
        if entry.is_none() || exit.is_none() {
            return Err(self.c.error_at(self.c.pos, "domain needs entry= and exit="));
        }
        Ok(DomainAttrs { kind, entry, exit })
    }
}

/// Largest finite value of a float type (for range checks).
/// An unsigned decimal of 1 to 18 digits at `p` (so it cannot overflow) and the position after
/// it, if one is there and is not followed by a further digit.
#[inline(always)]
fn small_uint(b: &[u8], p: usize) -> Option<(i64, usize)> {
    let mut q = p;
    let mut v: i64 = 0;
    while q < b.len() && b[q].is_ascii_digit() && q - p < 18 {
        v = v * 10 + (b[q] - b'0') as i64;
        q += 1;
    }
    (q > p && !b.get(q).is_some_and(|c| c.is_ascii_digit())).then_some((v, q))
}

pub(super) fn max_finite(ty: ElementType) -> f64 {
    match ty {
        ElementType::F32 => f32::MAX as f64,
        ElementType::F64 => f64::MAX,
        _ => FloatFormat::of(ty).map_or(f64::MAX, |f| f.max_finite()),
    }
}
