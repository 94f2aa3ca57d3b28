//! The convolution property test: random convolutions (dimension numbers in any order, one or
//! two spatial dimensions, random and often uneven sizes, windows with stride, padding
//! (negative too), lhs and rhs dilation and reversal, feature or batch group counts) with
//! random lhs, kernel and result shardings (spatial dimensions favoured, partial replication,
//! shuffled devices) on 2, 4 and 8 devices. Many cases go into one module, which is
//! partitioned and executed on PJRT against the original on one device (f32, the harness's
//! tolerance); every case must be equal and none may take the default path. Every other
//! module runs with `conv_halo_exchange_always_on_lhs=false` (XLA's option), where the
//! handler may also exchange halos of the kernel (the rounds cycle through 2, 4 and 8
//! devices with the option true and false).
//!
//! `CONV_CASES=N` changes the number of cases (default 300 to keep CI short; 1,500 or more
//! for a full run).

use tessera_hlo::text::parse_module;
use tessera_runtime::harness;

mod common;
use common::{
    assert_batch_equal, batch_module, case_count, defaulted_with_prefix, numbered_results,
    partition_batch_with, Gen,
};

/// A random sharding with the spatial dimensions `favour` split more often.
fn sharding(g: &mut Gen, rank: usize, favour: &[usize], n: i64) -> String {
    common::favoured_sharding(g, rank, favour, 10, n)
}

fn shape(dims: &[i64]) -> String {
    let d: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("f32[{}]", d.join(","))
}

/// A random order of `labels`.
fn shuffled(g: &mut Gen, labels: &[char]) -> Vec<char> {
    let mut l = labels.to_vec();
    for i in (1..l.len()).rev() {
        let j = g.below(i as u64 + 1) as usize;
        l.swap(i, j);
    }
    l
}

/// The sizes of an array whose dimension `p` is labelled `labels[p]`.
fn sized(labels: &[char], size: impl Fn(char) -> i64) -> Vec<i64> {
    labels.iter().map(|&c| size(c)).collect()
}

/// Positions of the spatial labels ('0', '1') in `labels`.
fn spatial(labels: &[char]) -> Vec<usize> {
    (0..labels.len())
        .filter(|&p| labels[p].is_ascii_digit())
        .collect()
}

/// One spatial dimension's window as drawn: size, stride, padding low and high, lhs (base)
/// dilation, rhs (window) dilation, reversal.
type WinDraw = (i64, i64, i64, i64, i64, i64, bool);

struct Case {
    text: String,
    /// The same convolution for the one-device reference run: with negative padding, the
    /// lhs padded (and base-dilated) by an explicit `pad` and the window without padding or
    /// lhs dilation (the PJRT CPU plugin's own convolution with negative padding reads out of
    /// bounds: see docs/spmd-convolution.md).
    reference: String,
    params: [String; 2],
    result_shape: String,
    result_sharding: String,
    what: String,
}

/// A random convolution named `c{k}` on parameters `p{2k}`, `p{2k+1}`, or `None` when the
/// draw has no output.
fn case(g: &mut Gen, k: usize, n: i64) -> Option<Case> {
    let nsp = 1 + g.below(2) as usize;
    let digits: Vec<char> = (0..nsp).map(|s| char::from(b'0' + s as u8)).collect();
    let (fg, bg) = match g.below(6) {
        0 | 1 => (g.range(2, 4), 1),
        2 => (1, g.range(2, 4)),
        _ => (1, 1),
    };
    let batch = bg * g.range(1, 3);
    let feat = fg * g.range(1, 3);
    let out_feat = fg.max(bg) * g.range(1, 3);
    let mut window = Vec::new();
    let mut in_sp = Vec::new();
    let mut out_sp = Vec::new();
    for _ in 0..nsp {
        let size = g.range(1, if nsp == 1 { 12 } else { 8 });
        let win = g.range(1, 4);
        let stride = g.range(1, 3);
        let (lo, hi) = (g.range(-2, 3), g.range(-2, 3));
        let bd = if g.below(4) == 0 { g.range(2, 3) } else { 1 };
        let wd = if g.below(4) == 0 { 2 } else { 1 };
        let rev = g.below(5) == 0;
        let padded = (size - 1) * bd + 1 + lo + hi;
        let span = (win - 1) * wd + 1;
        if padded < span {
            return None;
        }
        in_sp.push(size);
        out_sp.push((padded - span) / stride + 1);
        window.push((win, stride, lo, hi, bd, wd, rev));
    }
    let mut lhs_l = vec!['b', 'f'];
    lhs_l.extend(&digits);
    let mut rhs_l = vec!['o', 'i'];
    rhs_l.extend(&digits);
    let mut out_l = vec!['b', 'f'];
    out_l.extend(&digits);
    let (lhs_l, rhs_l, out_l) = (
        shuffled(g, &lhs_l),
        shuffled(g, &rhs_l),
        shuffled(g, &out_l),
    );
    let digit = |c: char| c as usize - '0' as usize;
    let lhs = sized(&lhs_l, |c| match c {
        'b' => batch,
        'f' => feat,
        d => in_sp[digit(d)],
    });
    let rhs = sized(&rhs_l, |c| match c {
        'o' => out_feat,
        'i' => feat / fg,
        d => window[digit(d)].0,
    });
    let out = sized(&out_l, |c| match c {
        'b' => batch / bg,
        'f' => out_feat,
        d => out_sp[digit(d)],
    });
    let x = |f: &dyn Fn(&WinDraw) -> String| window.iter().map(f).collect::<Vec<_>>().join("x");
    let win_text = format!(
        "size={} stride={} pad={} lhs_dilate={} rhs_dilate={} rhs_reversal={}",
        x(&|w| w.0.to_string()),
        x(&|w| w.1.to_string()),
        x(&|w| format!("{}_{}", w.2, w.3)),
        x(&|w| w.4.to_string()),
        x(&|w| w.5.to_string()),
        x(&|w| (w.6 as i32).to_string()),
    );
    let labels = |l: &[char]| l.iter().collect::<String>();
    let dim_labels = format!("{}_{}->{}", labels(&lhs_l), labels(&rhs_l), labels(&out_l));
    let ls = sharding(g, lhs.len(), &spatial(&lhs_l), n);
    let rs = sharding(g, rhs.len(), &spatial(&rhs_l), n);
    let os = sharding(g, out.len(), &spatial(&out_l), n);
    let text = format!(
        "  %p{a} = {} parameter({a}), sharding={ls}\n  %p{b} = {} parameter({b}), sharding={rs}\n  %c{k} = {} convolution(%p{a}, %p{b}), window={{{win_text}}}, dim_labels={dim_labels}, feature_group_count={fg}, batch_group_count={bg}, sharding={os}\n",
        shape(&lhs),
        shape(&rhs),
        shape(&out),
        a = 2 * k,
        b = 2 * k + 1,
    );
    let reference = if window.iter().any(|w| w.2 < 0 || w.3 < 0) {
        let pads: Vec<String> = lhs_l
            .iter()
            .map(|&l| match l {
                'b' | 'f' => "0_0_0".to_string(),
                d => {
                    let w = &window[digit(d)];
                    format!("{}_{}_{}", w.2, w.3, w.4 - 1)
                }
            })
            .collect();
        let padded: Vec<i64> = lhs_l
            .iter()
            .zip(&lhs)
            .map(|(&l, &size)| match l {
                'b' | 'f' => size,
                d => {
                    let w = &window[digit(d)];
                    (size - 1) * w.4 + 1 + w.2 + w.3
                }
            })
            .collect();
        let plain = format!(
            "size={} stride={} rhs_dilate={} rhs_reversal={}",
            x(&|w| w.0.to_string()),
            x(&|w| w.1.to_string()),
            x(&|w| w.5.to_string()),
            x(&|w| (w.6 as i32).to_string()),
        );
        format!(
            "  %p{a} = {} parameter({a}), sharding={ls}\n  %p{b} = {} parameter({b}), sharding={rs}\n  %z{k} = f32[] constant(0)\n  %x{k} = {} pad(%p{a}, %z{k}), padding={}\n  %c{k} = {} convolution(%x{k}, %p{b}), window={{{plain}}}, dim_labels={dim_labels}, feature_group_count={fg}, batch_group_count={bg}\n",
            shape(&lhs),
            shape(&rhs),
            shape(&padded),
            pads.join("x"),
            shape(&out),
            a = 2 * k,
            b = 2 * k + 1,
        )
    } else {
        text.clone()
    };
    Some(Case {
        reference,
        params: [shape(&lhs), shape(&rhs)],
        what: format!(
            "conv {dim_labels} {lhs:?} x {rhs:?} window {{{win_text}}} fg={fg} bg={bg}: {ls} x {rs} -> {os}"
        ),
        text,
        result_shape: shape(&out),
        result_sharding: os,
    })
}

/// The module of `cases`: the convolutions as drawn, or (`reference`) their one-device
/// reference forms.
fn module_text(n: i64, cases: &[Case], reference: bool) -> String {
    let params: Vec<String> = cases.iter().flat_map(|c| c.params.clone()).collect();
    let body: String = cases
        .iter()
        .map(|c| {
            if reference {
                c.reference.as_str()
            } else {
                c.text.as_str()
            }
        })
        .collect();
    let results = numbered_results(
        cases
            .iter()
            .map(|c| (c.result_shape.as_str(), c.result_sharding.as_str())),
    );
    batch_module("conv_cases", n, "", &params, &body, &results)
}

#[test]
fn random_convolutions_run_equal() {
    let total = case_count("CONV_CASES", 300);
    let per_module = 100;
    let mut g = Gen(harness::Rng::new(14));
    let (mut done, mut round) = (0, 0);
    let (mut halos, mut partial_sums, mut defaulted) = (0, 0, 0);
    let (mut rhs_halo_sums, mut with_option_false) = (0, 0);
    while done < total {
        // (devices, conv_halo_exchange_always_on_lhs) per round.
        let (n, on_lhs) = [
            (2i64, true),
            (4, false),
            (8, true),
            (2, false),
            (4, true),
            (8, false),
        ][round % 6];
        round += 1;
        let want = per_module.min(total - done);
        let mut cases = Vec::with_capacity(want);
        while cases.len() < want {
            if let Some(c) = case(&mut g, cases.len(), n) {
                cases.push(c);
            }
        }
        let text = module_text(n, &cases, false);
        let ref_text = module_text(n, &cases, true);
        let reference = parse_module(&ref_text).unwrap_or_else(|e| panic!("{e}\n{ref_text}"));
        let (_, part, report) = partition_batch_with(&text, |p| {
            p.options.conv_halo_exchange_always_on_lhs = on_lhs;
        });
        if !on_lhs {
            with_option_false += want;
        }
        let notes = &report.collectives;
        halos += notes
            .iter()
            .filter(|c| c.reason.starts_with("halo"))
            .count();
        partial_sums += notes
            .iter()
            .filter(|c| c.reason.contains("convolution over a split kernel"))
            .count();
        rhs_halo_sums += notes
            .iter()
            .filter(|c| c.reason.contains("(kernel halo)"))
            .count();
        defaulted += defaulted_with_prefix(&report, 'c');
        assert_batch_equal(&reference, &part, n as usize, round as u64, |k| {
            format!("c{k} {}", cases[k].what)
        });
        done += want;
    }
    eprintln!(
        "{done} convolutions executed and equal; {halos} halo collectives; \
         {partial_sums} split-kernel all-reduces; {defaulted} took the default path; \
         {with_option_false} with conv_halo_exchange_always_on_lhs=false, \
         {rhs_halo_sums} of them summed after a kernel halo"
    );
    if with_option_false > 0 {
        assert!(rhs_halo_sums > 0, "no convolution took the halo on the rhs");
    }
    assert!(halos > done / 10, "too few halo exchanges: {halos}");
    assert!(partial_sums > 0, "no split-kernel convolution");
    assert_eq!(defaulted, 0, "convolutions took the default path");
}
