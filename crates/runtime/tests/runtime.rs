//! The execution layer (seed 002 over PJRT) on the real CPU plugin:
//! compilation cache, buffer store and tuples, execute with shape checks,
//! aliasing and input release, chained plans, and the memory manager. Every
//! expected value is computed here on the host.

mod common;

use common::{all_devices_group, manual_module};
use std::sync::OnceLock;
use tessera_runtime::{
    BufferHandle, Client, CompileOptions, CompileRequest, Error, ExecutableHandle, ExecuteConfig,
    Plan, PlanInput, PlanStep, Program, Runtime,
};

/// One runtime per test: the store and memory counters are per runtime, so
/// tests do not see each other's buffers. They share one client.
fn runtime() -> Runtime {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    let c = CLIENT.get_or_init(|| {
        Client::cpu(8).unwrap_or_else(|e| panic!("cannot create the PJRT CPU client: {e}"))
    });
    Runtime::new(c.clone())
}

fn binary(op: &str, n: usize) -> Program {
    Program::mlir(format!(
        "func.func @main(%a: tensor<{n}xf32>, %b: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n  %0 = stablehlo.{op} %a, %b : tensor<{n}xf32>\n  return %0 : tensor<{n}xf32>\n}}"
    ))
}

fn add_request(n: usize) -> CompileRequest {
    CompileRequest::new(binary("add", n), CompileOptions::default())
}

/// A plan on one device whose steps each take two arguments; it keeps `outputs`.
fn binary_plan(steps: &[(ExecutableHandle, [PlanInput; 2])], outputs: &[(usize, usize)]) -> Plan {
    Plan {
        steps: steps
            .iter()
            .map(|&(executable, args)| PlanStep {
                executable,
                args: vec![args.to_vec()],
            })
            .collect(),
        outputs: outputs.to_vec(),
    }
}

const SINGLE: ExecuteConfig = ExecuteConfig {
    release_inputs: false,
    explode_tuple: true,
    release_executable: false,
};

/// [`SINGLE`], releasing its inputs (an input aliased to an output may be donated).
const RELEASING: ExecuteConfig = ExecuteConfig {
    release_inputs: true,
    ..SINGLE
};

#[test]
fn compilation_cache_compiles_once_per_program_and_options() {
    let rt = runtime();
    assert_eq!(rt.lookup(&add_request(4)).unwrap(), None);
    let a = rt.compile(&add_request(4)).unwrap();
    assert_eq!(rt.lookup(&add_request(4)).unwrap(), Some(a));
    let b = rt.compile(&add_request(4)).unwrap();
    assert_eq!(a, b);
    assert_eq!(rt.compilations(), 1);
    // Different options or aliases are different entries.
    let c = rt
        .compile(&CompileRequest::new(
            binary("add", 4),
            CompileOptions::replicated(2),
        ))
        .unwrap();
    let d = rt.compile(&add_request(4).with_aliases(&[(0, 1)])).unwrap();
    assert!(c != a && d != a && c != d);
    assert_eq!(rt.compilations(), 3);
    assert_eq!(rt.executable_info(c).unwrap().devices, vec![0, 1]);
    // Two references on `a`: still there after one release.
    rt.release_executable(a).unwrap();
    let x = rt.upload(0, &[1f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    let out = rt.execute(a, &[vec![x, x]], SINGLE).unwrap();
    assert_eq!(
        rt.download::<f32>(out[0][0]).unwrap(),
        vec![2.0, 4.0, 6.0, 8.0]
    );
    rt.release_executable(a).unwrap();
    let err = rt.execute(a, &[vec![x, x]], SINGLE).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidHandle {
                kind: "executable",
                ..
            }
        ),
        "{err}"
    );
    assert!(rt.release_executable(a).is_err());
    // Released, so compiling again really compiles.
    let e = rt.compile(&add_request(4)).unwrap();
    assert_ne!(e, a);
    assert_eq!(rt.compilations(), 4);
    // release_executable in the config drops the caller's reference.
    rt.execute(
        e,
        &[vec![x, x]],
        ExecuteConfig {
            release_executable: true,
            ..SINGLE
        },
    )
    .unwrap();
    assert!(rt.executable_info(e).is_err());
}

#[test]
fn execute_checks_argument_shapes_before_running() {
    let rt = runtime();
    let text = "func.func @main(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %c: tensor<4x8xf32>) -> tensor<4x8xf32> {\n  %0 = stablehlo.add %a, %b : tensor<4x8xf32>\n  %1 = stablehlo.add %0, %c : tensor<4x8xf32>\n  return %1 : tensor<4x8xf32>\n}";
    let exe = rt
        .compile(&CompileRequest::new(
            Program::mlir(text),
            CompileOptions::default(),
        ))
        .unwrap();
    let good = rt.upload(0, &[1f32; 32], &[4, 8]).unwrap();
    let transposed = rt.upload(0, &[1f32; 32], &[8, 4]).unwrap();
    let ints = rt.upload(0, &[1i32; 32], &[4, 8]).unwrap();
    let err = rt
        .execute(exe, &[vec![good, good, transposed]], SINGLE)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "argument 2: expected f32[4,8], got f32[8,4]"
    );
    let err = rt
        .execute(exe, &[vec![ints, good, good]], SINGLE)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "argument 0: expected f32[4,8], got s32[4,8]"
    );
    let err = rt.execute(exe, &[vec![good, good]], SINGLE).unwrap_err();
    assert!(
        err.to_string().contains("takes 3 arguments, got 2"),
        "{err}"
    );
    let tuple = rt.make_tuple(&[good, good]).unwrap();
    let err = rt
        .execute(exe, &[vec![good, tuple, good]], SINGLE)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "argument 1: expected f32[4,8], got a tuple of 2 elements"
    );
    let on_other_device = rt.upload(1, &[1f32; 32], &[4, 8]).unwrap();
    assert!(rt
        .execute(exe, &[vec![good, good, on_other_device]], SINGLE)
        .is_err());
    // Nothing was consumed by the failed calls.
    let out = rt.execute(exe, &[vec![good, good, good]], SINGLE).unwrap();
    assert_eq!(rt.download::<f32>(out[0][0]).unwrap(), vec![3.0; 32]);
}

#[test]
fn aliased_input_is_donated_only_when_released_and_unshared() {
    let rt = runtime();
    // out0 = a + b, aliased with parameter 0.
    let exe = rt.compile(&add_request(3).with_aliases(&[(0, 0)])).unwrap();
    let a_vals = [1f32, 2.0, 3.0];
    let b_vals = [10f32, 20.0, 30.0];
    let sum: Vec<f32> = a_vals.iter().zip(&b_vals).map(|(a, b)| a + b).collect();

    // Kept inputs: no donation, both handles unchanged.
    let a = rt.upload(0, &a_vals, &[3]).unwrap();
    let b = rt.upload(0, &b_vals, &[3]).unwrap();
    let out = rt.execute(exe, &[vec![a, b]], SINGLE).unwrap();
    assert_eq!(rt.download::<f32>(out[0][0]).unwrap(), sum);
    assert_eq!(rt.download::<f32>(a).unwrap(), a_vals);

    // Released, sole reference: donated; the handle is gone, b is released.
    let resident_before = rt.memory_stats(0).unwrap().resident_bytes;
    let out2 = rt.execute(exe, &[vec![a, b]], RELEASING).unwrap();
    assert_eq!(rt.download::<f32>(out2[0][0]).unwrap(), sum);
    assert!(!rt.is_live(a));
    assert!(!rt.is_live(b));
    let err = rt.download::<f32>(a).unwrap_err();
    assert!(matches!(err, Error::InvalidHandle { .. }), "{err}");
    assert_eq!(
        rt.memory_stats(0).unwrap().donated,
        1,
        "the plugin took a's buffer"
    );
    // a (12 bytes) became the output, b (12 bytes) was freed.
    assert_eq!(
        rt.memory_stats(0).unwrap().resident_bytes,
        resident_before - 12
    );

    // Released but shared (a second reference): copied, not donated.
    let a = rt.upload(0, &a_vals, &[3]).unwrap();
    let b = rt.upload(0, &b_vals, &[3]).unwrap();
    rt.retain(a).unwrap();
    let out3 = rt.execute(exe, &[vec![a, b]], RELEASING).unwrap();
    assert_eq!(rt.download::<f32>(out3[0][0]).unwrap(), sum);
    assert_eq!(rt.ref_count(a).unwrap(), 1);
    assert_eq!(rt.download::<f32>(a).unwrap(), a_vals);
    assert_eq!(rt.memory_stats(0).unwrap().donated, 1);

    // The same handle twice: never donated (the plugin would refuse).
    let out4 = rt.execute(exe, &[vec![a, a]], RELEASING).unwrap();
    assert_eq!(rt.download::<f32>(out4[0][0]).unwrap(), vec![2.0, 4.0, 6.0]);
    assert!(!rt.is_live(a));

    // Bad alias declarations are refused at compile time.
    let err = rt
        .compile(&add_request(3).with_aliases(&[(0, 2)]))
        .unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    // An output index past the end is refused by the plugin itself.
    assert!(rt.compile(&add_request(3).with_aliases(&[(1, 0)])).is_err());
}

#[test]
fn donation_works_on_several_devices() {
    let rt = runtime();
    let n = 4;
    let text = manual_module(
        &["tensor<2xf32>", "tensor<2xf32>"],
        &["tensor<2xf32>"],
        "    %0 = stablehlo.multiply %arg0, %arg1 : tensor<2xf32>\n    return %0 : tensor<2xf32>",
    );
    let exe = rt
        .compile(
            &CompileRequest::new(Program::mlir(text), CompileOptions::partitioned(n))
                .with_aliases(&[(0, 0)]),
        )
        .unwrap();
    let args: Vec<Vec<BufferHandle>> = (0..n)
        .map(|k| {
            vec![
                rt.upload(k, &[k as f32, 1.0], &[2]).unwrap(),
                rt.upload(k, &[3f32, k as f32], &[2]).unwrap(),
            ]
        })
        .collect();
    let out = rt.execute(exe, &args, RELEASING).unwrap();
    for (k, o) in out.iter().enumerate() {
        assert_eq!(rt.device_of(o[0]).unwrap(), k);
        assert_eq!(
            rt.download::<f32>(o[0]).unwrap(),
            vec![3.0 * k as f32, k as f32]
        );
    }
    assert!(args.iter().flatten().all(|&h| !rt.is_live(h)));
    for k in 0..n {
        assert_eq!(rt.memory_stats(k).unwrap().donated, 1, "device {k}");
    }
    assert_eq!(rt.live_buffers(), n);
}

#[test]
fn tuples_sub_buffers_and_reference_counts() {
    let rt = runtime();
    let text = "func.func @main(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<i32>) {\n  %n = stablehlo.negate %a : tensor<2xf32>\n  %m = stablehlo.multiply %a, %a : tensor<2xf32>\n  %c = stablehlo.constant dense<5> : tensor<i32>\n  return %n, %m, %c : tensor<2xf32>, tensor<2xf32>, tensor<i32>\n}";
    let exe = rt
        .compile(&CompileRequest::new(
            Program::mlir(text),
            CompileOptions::default(),
        ))
        .unwrap();
    let x = rt.upload(0, &[3f32, -4.0], &[2]).unwrap();
    let out = rt
        .execute(exe, &[vec![x]], ExecuteConfig::default())
        .unwrap();
    assert_eq!(out[0].len(), 1, "one tuple handle per device");
    let t = out[0][0];
    assert_eq!(rt.tuple_len(t).unwrap(), 3);
    assert!(rt.array_shape(t).is_err());
    let neg = rt.tuple_element(t, 0).unwrap();
    let sq = rt.tuple_element(t, 1).unwrap();
    assert!(rt.tuple_element(t, 3).is_err());
    assert_eq!(rt.download::<f32>(neg).unwrap(), vec![-3.0, 4.0]);
    assert_eq!(rt.download::<f32>(sq).unwrap(), vec![9.0, 16.0]);
    assert_eq!(rt.ref_count(neg).unwrap(), 2);
    // Releasing the tuple frees the element nobody else holds.
    let live = rt.live_buffers();
    rt.release(t).unwrap();
    assert_eq!(rt.live_buffers(), live - 2, "tuple and the s32[] element");
    assert_eq!(rt.ref_count(neg).unwrap(), 1);
    assert_eq!(rt.download::<f32>(sq).unwrap(), vec![9.0, 16.0]);
    // A tuple built by hand, used as a source of sub-buffers.
    let made = rt.make_tuple(&[sq, x]).unwrap();
    let back = rt.tuple_element(made, 1).unwrap();
    assert_eq!(back, x);
    assert_eq!(rt.ref_count(x).unwrap(), 3);
    for h in [made, back, neg, sq, x] {
        rt.release(h).unwrap();
    }
    assert_eq!(rt.live_buffers(), 0);
    assert!(rt.release(x).is_err());
    assert_eq!(rt.memory_stats(0).unwrap().resident_bytes, 0);
}

#[test]
fn chained_plan_keeps_only_requested_outputs() {
    let rt = runtime();
    let add = rt.compile(&add_request(3)).unwrap();
    let mul = rt
        .compile(&CompileRequest::new(
            binary("multiply", 3),
            CompileOptions::default(),
        ))
        .unwrap();
    let x = rt.upload(0, &[1f32, 2.0, 3.0], &[3]).unwrap();
    let y = rt.upload(0, &[4f32, 5.0, 6.0], &[3]).unwrap();
    let live = rt.live_buffers();
    // s0 = x + y; s1 = s0 * x; s2 = s1 + s0; keep s2 and s0.
    let out = |step, index| PlanInput::Output { step, index };
    let plan = binary_plan(
        &[
            (add, [PlanInput::Handle(x), PlanInput::Handle(y)]),
            (mul, [out(0, 0), PlanInput::Handle(x)]),
            (add, [out(1, 0), out(0, 0)]),
        ],
        &[(2, 0), (0, 0)],
    );
    let kept = rt.execute_plan(&plan).unwrap();
    let (xs, ys) = ([1f32, 2.0, 3.0], [4f32, 5.0, 6.0]);
    let s0: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| a + b).collect();
    let s1: Vec<f32> = s0.iter().zip(&xs).map(|(a, b)| a * b).collect();
    let s2: Vec<f32> = s1.iter().zip(&s0).map(|(a, b)| a + b).collect();
    assert_eq!(rt.download::<f32>(kept[0][0]).unwrap(), s2);
    assert_eq!(rt.download::<f32>(kept[1][0]).unwrap(), s0);
    assert_eq!(
        rt.live_buffers(),
        live + 2,
        "only the two kept outputs survive"
    );
    assert_eq!(rt.ref_count(kept[0][0]).unwrap(), 1);
    // Inputs given as handles are not consumed.
    assert_eq!(rt.download::<f32>(x).unwrap(), xs);

    // A failing step reports its index and leaks nothing.
    let z = rt.upload(0, &[1f32; 4], &[4]).unwrap();
    let live = rt.live_buffers();
    let bad = binary_plan(
        &[
            (add, [PlanInput::Handle(x), PlanInput::Handle(y)]),
            (add, [out(0, 0), PlanInput::Handle(z)]),
        ],
        &[(1, 0)],
    );
    let err = rt.execute_plan(&bad).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plan step 1: argument 1: expected f32[3], got f32[4]"
    );
    assert_eq!(rt.live_buffers(), live);
    // Forward references are refused.
    let fwd = binary_plan(&[(add, [out(0, 0), PlanInput::Handle(x)])], &[]);
    assert!(matches!(
        rt.execute_plan(&fwd),
        Err(Error::Plan { step: 0, .. })
    ));
    assert_eq!(rt.live_buffers(), live);
}

#[test]
fn chained_plan_on_four_devices_with_a_collective() {
    let rt = runtime();
    let n = 4;
    let sum = manual_module(
        &["tensor<2xf32>"],
        &["tensor<2xf32>"],
        &format!(
            "    %0 = \"stablehlo.all_reduce\"(%arg0) ({{\n      ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n        %s = stablehlo.add %x, %y : tensor<f32>\n        stablehlo.return %s : tensor<f32>\n    }}) {{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = {}, use_global_device_ids}} : (tensor<2xf32>) -> tensor<2xf32>\n    return %0 : tensor<2xf32>",
            all_devices_group(n)
        ),
    );
    let scale = manual_module(
        &["tensor<2xf32>", "tensor<2xf32>"],
        &["tensor<2xf32>"],
        "    %0 = stablehlo.multiply %arg0, %arg1 : tensor<2xf32>\n    return %0 : tensor<2xf32>",
    );
    let sum = rt
        .compile(&CompileRequest::new(
            Program::mlir(sum),
            CompileOptions::partitioned(n),
        ))
        .unwrap();
    let scale = rt
        .compile(&CompileRequest::new(
            Program::mlir(scale),
            CompileOptions::partitioned(n),
        ))
        .unwrap();
    let xs: Vec<BufferHandle> = (0..n)
        .map(|k| rt.upload(k, &[k as f32, 1.0], &[2]).unwrap())
        .collect();
    // s0 = all_reduce(x); s1 = s0 * x.
    let plan = Plan {
        steps: vec![
            PlanStep {
                executable: sum,
                args: xs.iter().map(|&h| vec![PlanInput::Handle(h)]).collect(),
            },
            PlanStep {
                executable: scale,
                args: xs
                    .iter()
                    .map(|&h| {
                        vec![
                            PlanInput::Output { step: 0, index: 0 },
                            PlanInput::Handle(h),
                        ]
                    })
                    .collect(),
            },
        ],
        outputs: vec![(1, 0)],
    };
    let kept = rt.execute_plan(&plan).unwrap();
    let total = [(0..n).map(|k| k as f32).sum::<f32>(), n as f32];
    for (k, &h) in kept[0].iter().enumerate() {
        assert_eq!(
            rt.download::<f32>(h).unwrap(),
            vec![total[0] * k as f32, total[1]]
        );
    }
}

#[test]
fn memory_manager_evicts_lru_to_host_and_restores_on_use() {
    let rt = runtime();
    let n = 256; // 1 KiB per f32 array
    let kib = 1024u64;
    rt.set_memory_budget(0, Some(3 * kib)).unwrap();
    let data = |i: usize| -> Vec<f32> { (0..n).map(|j| (i * 1000 + j) as f32).collect() };
    let hs: Vec<BufferHandle> = (0..5)
        .map(|i| rt.upload(0, &data(i), &[n as i64]).unwrap())
        .collect();
    let st = rt.memory_stats(0).unwrap();
    assert_eq!(st.resident_bytes, 3 * kib);
    assert_eq!(st.host_bytes, 2 * kib);
    assert_eq!(st.evictions, 2);
    // The two least recently used went to host.
    let resident: Vec<bool> = hs.iter().map(|&h| rt.is_resident(h).unwrap()).collect();
    assert_eq!(resident, vec![false, false, true, true, true]);
    // Reading an evicted array does not need the device.
    assert_eq!(rt.download::<f32>(hs[0]).unwrap(), data(0));

    // Executing on evicted inputs brings them back transparently; the output
    // needs room too, so older buffers go out.
    let exe = rt.compile(&add_request(n)).unwrap();
    let out = rt.execute(exe, &[vec![hs[0], hs[1]]], SINGLE).unwrap();
    let want: Vec<f32> = data(0).iter().zip(data(1)).map(|(a, b)| a + b).collect();
    assert_eq!(rt.download::<f32>(out[0][0]).unwrap(), want);
    let st = rt.memory_stats(0).unwrap();
    assert!(st.resident_bytes <= 3 * kib, "{st:?}");
    assert_eq!(st.restores, 2);
    assert!(rt.is_resident(hs[0]).unwrap() && rt.is_resident(hs[1]).unwrap());
    assert!(rt.is_resident(out[0][0]).unwrap());

    // Pinned arrays stay; nothing is ever lost.
    rt.pin(hs[4]).unwrap();
    for i in 0..3 {
        let extra = rt.upload(0, &data(10 + i), &[n as i64]).unwrap();
        assert_eq!(rt.download::<f32>(extra).unwrap(), data(10 + i));
    }
    assert!(rt.is_resident(hs[4]).unwrap());
    for (i, &h) in hs.iter().enumerate() {
        assert_eq!(rt.download::<f32>(h).unwrap(), data(i), "array {i}");
    }
    assert!(rt.memory_stats(0).unwrap().resident_bytes <= 3 * kib);

    // An execution that cannot fit even after evicting everything fails
    // cleanly: 2 pinned inputs + 1 output > 2 KiB.
    rt.set_memory_budget(0, Some(2 * kib)).unwrap();
    let err = rt.execute(exe, &[vec![hs[2], hs[3]]], SINGLE).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { device: 0, .. }), "{err}");
    for (i, &h) in hs.iter().enumerate() {
        assert_eq!(
            rt.download::<f32>(h).unwrap(),
            data(i),
            "array {i} after OOM"
        );
    }
    rt.unpin(hs[4]).unwrap();
    assert!(rt.unpin(hs[4]).is_err());
    // With room again, the same execution succeeds.
    rt.set_memory_budget(0, Some(3 * kib)).unwrap();
    let out = rt.execute(exe, &[vec![hs[2], hs[3]]], SINGLE).unwrap();
    let want: Vec<f32> = data(2).iter().zip(data(3)).map(|(a, b)| a + b).collect();
    assert_eq!(rt.download::<f32>(out[0][0]).unwrap(), want);
    // Other devices have no budget and never evict.
    assert_eq!(rt.memory_stats(1).unwrap().evictions, 0);
    rt.set_memory_budget(0, None).unwrap();
}

#[test]
fn runtime_is_shared_between_threads() {
    let rt = runtime();
    let exe = rt.compile(&add_request(2)).unwrap();
    std::thread::scope(|s| {
        for t in 0..2 {
            let rt = &rt;
            s.spawn(move || {
                for i in 0..20 {
                    let v = (t * 100 + i) as f32;
                    let a = rt.upload(t, &[v, 1.0], &[2]).unwrap();
                    let b = rt.upload(t, &[1f32, v], &[2]).unwrap();
                    let exe_t = if t == 0 {
                        exe
                    } else {
                        rt.compile(&add_request(2)).unwrap()
                    };
                    // Device 1 cannot run the device-0 executable: checked.
                    if t == 1 {
                        assert!(rt.execute(exe_t, &[vec![a, b]], SINGLE).is_err());
                        rt.release_executable(exe_t).unwrap();
                        rt.release(a).unwrap();
                        rt.release(b).unwrap();
                        continue;
                    }
                    let out = rt.execute(exe_t, &[vec![a, b]], RELEASING).unwrap();
                    assert_eq!(
                        rt.download::<f32>(out[0][0]).unwrap(),
                        vec![v + 1.0, v + 1.0]
                    );
                    rt.release(out[0][0]).unwrap();
                }
            });
        }
    });
    assert_eq!(rt.live_buffers(), 0);
    assert_eq!(rt.compilations(), 1);
}

#[test]
fn plan_donates_intermediates_at_their_last_use() {
    let rt = runtime();
    let add = rt.compile(&add_request(3)).unwrap();
    // mul aliases its output with parameter 0.
    let mul = rt
        .compile(
            &CompileRequest::new(binary("multiply", 3), CompileOptions::default())
                .with_aliases(&[(0, 0)]),
        )
        .unwrap();
    let x = rt.upload(0, &[1f32, 2.0, 3.0], &[3]).unwrap();
    let y = rt.upload(0, &[4f32, 5.0, 6.0], &[3]).unwrap();
    let out = |step, index| PlanInput::Output { step, index };
    // s0 = x + y; s1 = s0 * y (s0's last use: donated); s2 = s1 * x (s1 is
    // requested, so it is kept and copied, not donated).
    let plan = binary_plan(
        &[
            (add, [PlanInput::Handle(x), PlanInput::Handle(y)]),
            (mul, [out(0, 0), PlanInput::Handle(y)]),
            (mul, [out(1, 0), PlanInput::Handle(x)]),
        ],
        &[(1, 0), (2, 0)],
    );
    let kept = rt.execute_plan(&plan).unwrap();
    let (xs, ys) = ([1f32, 2.0, 3.0], [4f32, 5.0, 6.0]);
    let s1: Vec<f32> = (0..3).map(|i| (xs[i] + ys[i]) * ys[i]).collect();
    let s2: Vec<f32> = (0..3).map(|i| s1[i] * xs[i]).collect();
    assert_eq!(rt.download::<f32>(kept[0][0]).unwrap(), s1);
    assert_eq!(rt.download::<f32>(kept[1][0]).unwrap(), s2);
    assert_eq!(rt.memory_stats(0).unwrap().donated, 1, "only s0 is donated");
    // Plan inputs given as handles are never consumed.
    assert_eq!(rt.download::<f32>(x).unwrap(), xs);
    assert_eq!(rt.download::<f32>(y).unwrap(), ys);
    assert_eq!(rt.live_buffers(), 4);
}
