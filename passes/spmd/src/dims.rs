//! Dimension mappings of dots and convolutions, as XLA's `dot_as_convolution_util` reads
//! them: every dimension of the two operands and the output is a batch dimension (in all
//! three), a contracting dimension (both operands, and an output spatial dimension when a
//! convolution reduces it to size 1), a non-contracting dimension of one operand (and the
//! output), or a convolution spatial dimension (windowed: no simple mapping).

use tessera_hlo::attrs::{ConvDimensionNumbers, DotDimensionNumbers, Window, WindowDim};

/// One dimension's position in lhs, rhs and output; -1 where it has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DimTriple {
    pub lhs: i64,
    pub rhs: i64,
    pub out: i64,
}

impl DimTriple {
    fn new(lhs: i64, rhs: i64, out: i64) -> DimTriple {
        DimTriple { lhs, rhs, out }
    }

    /// The position in operand 0 (lhs) or 1 (rhs).
    pub fn operand(&self, index: usize) -> i64 {
        if index == 0 {
            self.lhs
        } else {
            self.rhs
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DotDims {
    pub batch: Vec<DimTriple>,
    pub contracting: Vec<DimTriple>,
    pub lhs_non_contracting: Vec<DimTriple>,
    pub rhs_non_contracting: Vec<DimTriple>,
    pub conv_spatial: Vec<DimTriple>,
}

impl DotDims {
    /// Non-contracting dimensions of operand `index` (0 = lhs).
    pub fn non_contracting(&self, index: usize) -> &[DimTriple] {
        if index == 0 {
            &self.lhs_non_contracting
        } else {
            &self.rhs_non_contracting
        }
    }
}

/// The mapping of a `dot`: output dimensions are the batch dimensions, then lhs
/// non-contracting, then rhs non-contracting ones, each in operand order.
pub fn dot_dims(d: &DotDimensionNumbers, lhs_rank: usize, rhs_rank: usize) -> DotDims {
    let mut out = DotDims::default();
    let mut o = 0i64;
    for (&l, &r) in d.lhs_batch_dimensions.iter().zip(&d.rhs_batch_dimensions) {
        out.batch.push(DimTriple::new(l, r, o));
        o += 1;
    }
    for (&l, &r) in d
        .lhs_contracting_dimensions
        .iter()
        .zip(&d.rhs_contracting_dimensions)
    {
        out.contracting.push(DimTriple::new(l, r, -1));
    }
    for l in 0..lhs_rank as i64 {
        if !d.lhs_batch_dimensions.contains(&l) && !d.lhs_contracting_dimensions.contains(&l) {
            out.lhs_non_contracting.push(DimTriple::new(l, -1, o));
            o += 1;
        }
    }
    for r in 0..rhs_rank as i64 {
        if !d.rhs_batch_dimensions.contains(&r) && !d.rhs_contracting_dimensions.contains(&r) {
            out.rhs_non_contracting.push(DimTriple::new(-1, r, o));
            o += 1;
        }
    }
    out
}

/// The mapping of a `convolution` read as a dot where it can be, as XLA's
/// `ParseConvolutionDimsInfo` reads it: the input batch is lhs non-contracting, the input feature
/// contracts with the kernel input feature, the kernel output feature is rhs non-contracting
/// (grouped convolutions make the feature or batch dimensions batch dimensions, which XLA does
/// not; see docs/sharding-propagation.md). Each spatial dimension is then, in this order:
/// - a batch dimension when the window walks the input one element at a time without mixing
///   them (window = input size, base dilation = input size, and stride or window dilation =
///   input size - 1; or the padded, reversed spelling of the same),
/// - contracting when the window covers the whole input without padding, dilation or reversal,
/// - lhs non-contracting for a 1-wide kernel window (stride 1, no padding, no reversal),
/// - rhs non-contracting for a size-1 input that a reversed, fully padded window slides over,
/// - else a convolution spatial dimension.
pub fn conv_dims(
    d: &ConvDimensionNumbers,
    window: Option<&Window>,
    lhs_dims: &[i64],
    rhs_dims: &[i64],
    _out_dims: &[i64],
    feature_group_count: i64,
    batch_group_count: i64,
) -> DotDims {
    let mut out = DotDims::default();
    if batch_group_count > 1 {
        out.batch.push(DimTriple::new(
            d.input_batch_dimension,
            d.kernel_output_feature_dimension,
            d.output_feature_dimension,
        ));
        out.contracting.push(DimTriple::new(
            d.input_feature_dimension,
            d.kernel_input_feature_dimension,
            -1,
        ));
    } else {
        out.lhs_non_contracting.push(DimTriple::new(
            d.input_batch_dimension,
            -1,
            d.output_batch_dimension,
        ));
        if feature_group_count > 1 {
            out.batch.push(DimTriple::new(
                d.input_feature_dimension,
                d.kernel_output_feature_dimension,
                d.output_feature_dimension,
            ));
        } else {
            out.contracting.push(DimTriple::new(
                d.input_feature_dimension,
                d.kernel_input_feature_dimension,
                -1,
            ));
            out.rhs_non_contracting.push(DimTriple::new(
                -1,
                d.kernel_output_feature_dimension,
                d.output_feature_dimension,
            ));
        }
    }
    for i in 0..d.input_spatial_dimensions.len() {
        let l = d.input_spatial_dimensions[i];
        let r = d.kernel_spatial_dimensions[i];
        let o = d.output_spatial_dimensions[i];
        let ls = lhs_dims.get(l as usize).copied().unwrap_or(1);
        let rs = rhs_dims.get(r as usize).copied().unwrap_or(1);
        let w = window
            .and_then(|w| w.dims.get(i))
            .copied()
            .unwrap_or_default();
        let t = DimTriple::new(l, r, o);
        let no_pad = w.padding_low == 0 && w.padding_high == 0;
        let undilated = w.window_dilation == 1 && w.base_dilation == 1;
        if spatial_is_batch(ls, &w) {
            out.batch.push(t);
        } else if ls == w.size && undilated && no_pad && !w.window_reversal {
            // One window over the whole input (any stride): a contraction.
            out.contracting.push(t);
        } else if w.stride == 1 && undilated {
            if rs == 1 && w.size == 1 && no_pad && !w.window_reversal {
                out.lhs_non_contracting.push(t);
            } else if ls == 1
                && w.size == rs
                && w.padding_low == rs - 1
                && w.padding_high == rs - 1
                && w.window_reversal
            {
                out.rhs_non_contracting.push(t);
            } else {
                out.conv_spatial.push(t);
            }
        } else {
            out.conv_spatial.push(t);
        }
    }
    out
}

/// A spatial dimension that a dot's batch dimension was written as: each output element sees
/// exactly one input element of it (XLA's `SpatialIsBatch`, both spellings).
fn spatial_is_batch(size: i64, w: &WindowDim) -> bool {
    let step = (size - 1).max(1);
    let unpadded = size == w.size
        && size == w.base_dilation
        && ((step == w.stride && w.window_dilation == 1)
            || (step == w.window_dilation && w.stride == 1))
        && w.padding_low == 0
        && w.padding_high == 0
        && !w.window_reversal;
    let padded = size == w.size
        && w.padding_low == size - 1
        && w.padding_high == size - 1
        && w.window_reversal
        && w.window_dilation == 1
        && w.stride == size
        && w.base_dilation == size - 1;
    unpadded || padded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dnums(lb: &[i64], lc: &[i64], rb: &[i64], rc: &[i64]) -> DotDimensionNumbers {
        DotDimensionNumbers {
            lhs_batch_dimensions: lb.to_vec(),
            lhs_contracting_dimensions: lc.to_vec(),
            rhs_batch_dimensions: rb.to_vec(),
            rhs_contracting_dimensions: rc.to_vec(),
        }
    }

    #[test]
    fn matmul_dims() {
        // [m,k] x [k,n] -> [m,n]
        let d = dot_dims(&dnums(&[], &[1], &[], &[0]), 2, 2);
        assert!(d.batch.is_empty());
        assert_eq!(d.contracting, vec![DimTriple::new(1, 0, -1)]);
        assert_eq!(d.lhs_non_contracting, vec![DimTriple::new(0, -1, 0)]);
        assert_eq!(d.rhs_non_contracting, vec![DimTriple::new(-1, 1, 1)]);
    }

    #[test]
    fn batched_dims_come_first_in_the_output() {
        // [b,m,k] x [b,n,k] -> [b,m,n] with rhs contracting dim 2.
        let d = dot_dims(&dnums(&[0], &[2], &[0], &[2]), 3, 3);
        assert_eq!(d.batch, vec![DimTriple::new(0, 0, 0)]);
        assert_eq!(d.lhs_non_contracting, vec![DimTriple::new(1, -1, 1)]);
        assert_eq!(d.rhs_non_contracting, vec![DimTriple::new(-1, 1, 2)]);
        assert_eq!(d.non_contracting(1)[0].operand(1), 1);
    }

    fn conv_nums() -> ConvDimensionNumbers {
        // b01f_01io->b01f
        ConvDimensionNumbers {
            input_batch_dimension: 0,
            input_feature_dimension: 3,
            input_spatial_dimensions: vec![1, 2],
            kernel_input_feature_dimension: 2,
            kernel_output_feature_dimension: 3,
            kernel_spatial_dimensions: vec![0, 1],
            output_batch_dimension: 0,
            output_feature_dimension: 3,
            output_spatial_dimensions: vec![1, 2],
        }
    }

    #[test]
    fn conv_with_a_3x3_window_has_spatial_dims() {
        let w = Window {
            dims: vec![
                WindowDim {
                    size: 3,
                    padding_low: 1,
                    padding_high: 1,
                    ..WindowDim::default()
                };
                2
            ],
        };
        let d = conv_dims(
            &conv_nums(),
            Some(&w),
            &[8, 32, 32, 16],
            &[3, 3, 16, 64],
            &[8, 32, 32, 64],
            1,
            1,
        );
        assert_eq!(d.conv_spatial.len(), 2);
        assert_eq!(d.lhs_non_contracting, vec![DimTriple::new(0, -1, 0)]);
        assert_eq!(d.contracting, vec![DimTriple::new(3, 2, -1)]);
        assert_eq!(d.rhs_non_contracting, vec![DimTriple::new(-1, 3, 3)]);
    }

    #[test]
    fn conv_with_a_1x1_kernel_is_a_dot() {
        let w = Window {
            dims: vec![WindowDim::default(); 2],
        };
        let d = conv_dims(
            &conv_nums(),
            Some(&w),
            &[8, 32, 32, 16],
            &[1, 1, 16, 64],
            &[8, 32, 32, 64],
            1,
            1,
        );
        assert!(d.conv_spatial.is_empty());
        assert_eq!(d.lhs_non_contracting.len(), 3);
        assert_eq!(d.lhs_non_contracting[1], DimTriple::new(1, 0, 1));
        // A window that covers the input and leaves size 1 contracts.
        let w = Window {
            dims: vec![
                WindowDim {
                    size: 32,
                    ..WindowDim::default()
                };
                2
            ],
        };
        let d = conv_dims(
            &conv_nums(),
            Some(&w),
            &[8, 32, 32, 16],
            &[32, 32, 16, 64],
            &[8, 1, 1, 64],
            1,
            1,
        );
        assert_eq!(d.contracting.len(), 3);
        assert!(d.conv_spatial.is_empty());
    }
}
