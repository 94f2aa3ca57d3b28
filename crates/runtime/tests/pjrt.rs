//! The PJRT wrappers on the real CPU plugin: devices, every element type,
//! compile in both formats' error paths, and modules (add, dot, tuples,
//! collectives) on 1, 2, 4 and 8 devices, each checked against values
//! computed here independently.

mod common;

use common::{all_devices_group, client, manual_module};
use tessera_runtime::{
    Bf16, Buffer, CompileOptions, Complex, DeviceAssignment, ElementType, Error, ExecuteOptions,
    LoadedExecutable, NativeType, Program, F16,
};

fn upload<T: NativeType>(data: &[T], dims: &[i64], device: usize) -> Buffer {
    let c = client();
    c.buffer_from_host(data, dims, &c.devices()[device])
        .unwrap()
}

fn compile_partitioned(text: &str, n: usize) -> LoadedExecutable {
    client()
        .compile(&Program::mlir(text), &CompileOptions::partitioned(n))
        .unwrap_or_else(|e| panic!("compile failed: {e}\n{text}"))
}

/// Runs `exe` with one argument list per device and returns f32 outputs.
fn run_f32(exe: &LoadedExecutable, args: &[Vec<Buffer>]) -> Vec<Vec<Vec<f32>>> {
    let lists: Vec<Vec<&Buffer>> = args.iter().map(|l| l.iter().collect()).collect();
    exe.execute(&lists, &ExecuteOptions::default())
        .unwrap()
        .iter()
        .map(|outs| outs.iter().map(|b| b.to_vec::<f32>().unwrap()).collect())
        .collect()
}

/// Input of device `k`: `len` values `100 k + i`.
fn input_of(k: usize, len: usize) -> Vec<f32> {
    (0..len).map(|i| (100 * k + i) as f32).collect()
}

#[test]
fn client_has_eight_cpu_devices() {
    let c = client();
    assert_eq!(c.platform_name().unwrap(), "cpu");
    let ids: Vec<i32> = c.devices().iter().map(|d| d.id()).collect();
    assert_eq!(ids, (0..8).collect::<Vec<_>>());
    assert_eq!(c.all_devices().unwrap().len(), 8);
    assert_eq!(c.plugin().api_version().0, 0);
    assert!(c.plugin().api_version().1 >= 81);
    assert_eq!(c.default_device_assignment(2, 2).unwrap().len(), 2);
}

fn round_trip<T: NativeType + PartialEq + std::fmt::Debug>(data: &[T]) {
    let dims = [data.len() as i64];
    for device in [0, 7] {
        let b = upload(data, &dims, device);
        assert_eq!(b.element_type().unwrap(), T::TYPE);
        assert_eq!(b.dims().unwrap(), dims);
        assert_eq!(b.device_id().unwrap(), device as i32);
        assert_eq!(b.to_vec::<T>().unwrap(), data, "{}", T::TYPE);
        assert_eq!(
            b.to_host_bytes().unwrap().len(),
            data.len() * T::TYPE.byte_size()
        );
    }
}

#[test]
fn every_element_type_round_trips() {
    round_trip(&[true, false, true]);
    round_trip(&[i8::MIN, -1, 0, i8::MAX]);
    round_trip(&[i16::MIN, -1, 0, i16::MAX]);
    round_trip(&[i32::MIN, -1, 0, i32::MAX]);
    round_trip(&[i64::MIN, -1, 0, i64::MAX]);
    round_trip(&[0u8, 1, u8::MAX]);
    round_trip(&[0u16, 1, u16::MAX]);
    round_trip(&[0u32, 1, u32::MAX]);
    round_trip(&[0u64, 1, u64::MAX]);
    round_trip(&[
        F16::from_f32(1.5),
        F16::from_f32(-2.0),
        F16::from_f32(65504.0),
    ]);
    round_trip(&[Bf16::from_f32(1.5), Bf16::from_f32(-3.0e38)]);
    round_trip(&[1.5f32, -0.0, f32::INFINITY]);
    round_trip(&[1.5f64, -1e300]);
    round_trip(&[Complex::new(1.0f32, -2.0), Complex::new(0.5, 4.0)]);
    round_trip(&[Complex::new(1.0f64, -2.0)]);
    // Scalars and empty arrays.
    let s = client()
        .buffer_from_host(&[42i32], &[], &client().devices()[0])
        .unwrap();
    assert_eq!(s.shape().unwrap().to_string(), "s32[]");
    assert_eq!(s.to_vec::<i32>().unwrap(), vec![42]);
    let e = upload::<f32>(&[], &[0, 3], 0);
    assert_eq!(e.shape().unwrap().to_string(), "f32[0,3]");
    assert!(e.to_vec::<f32>().unwrap().is_empty());
}

#[test]
fn element_types_of_outputs_and_arithmetic() {
    // One program per type: x + x, checked on the host.
    fn doubled<T: NativeType + PartialEq + std::fmt::Debug>(mlir_ty: &str, data: &[T], want: &[T]) {
        let n = data.len();
        let text = format!(
            "func.func @main(%a: tensor<{n}x{mlir_ty}>) -> tensor<{n}x{mlir_ty}> {{\n  %0 = stablehlo.add %a, %a : tensor<{n}x{mlir_ty}>\n  return %0 : tensor<{n}x{mlir_ty}>\n}}"
        );
        let exe = client()
            .compile(&Program::mlir(text), &CompileOptions::default())
            .unwrap();
        let shapes = exe.output_shapes().unwrap();
        assert_eq!(shapes[0].element_type, T::TYPE);
        let a = upload(data, &[n as i64], 0);
        let out = exe
            .execute(&[vec![&a]], &ExecuteOptions::default())
            .unwrap();
        assert_eq!(out[0][0].to_vec::<T>().unwrap(), want);
    }
    doubled("i8", &[1i8, -3], &[2, -6]);
    doubled("i64", &[1i64 << 40], &[1 << 41]);
    doubled("ui16", &[7u16], &[14]);
    doubled("f16", &[F16::from_f32(1.25)], &[F16::from_f32(2.5)]);
    doubled("bf16", &[Bf16::from_f32(3.0)], &[Bf16::from_f32(6.0)]);
    doubled("f64", &[0.1f64], &[0.2]);
    doubled(
        "complex<f32>",
        &[Complex::new(1.0f32, 2.0)],
        &[Complex::new(2.0, 4.0)],
    );
    doubled("i1", &[true, false], &[true, false]);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let c = client();
    let err = c
        .compile(&Program::mlir("not mlir"), &CompileOptions::default())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Pjrt {
                call: "PJRT_Client_Compile",
                ..
            }
        ),
        "{err}"
    );
    let err = c
        .compile(
            &Program::HloProto(vec![0xff, 0xff]),
            &CompileOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(err, Error::Pjrt { .. }), "{err}");
    // Wrong byte count for the shape.
    let err = c
        .buffer_from_host_bytes(ElementType::F32, &[0; 7], &[2], &c.devices()[0])
        .unwrap_err();
    assert!(
        err.to_string().contains("f32[2] needs 8 bytes, got 7"),
        "{err}"
    );
    // Options that do not fit together.
    let opts =
        CompileOptions::partitioned(2).with_device_assignment(DeviceAssignment::linear(1, 4));
    assert!(opts.validate().is_err());
    assert!(DeviceAssignment::new(vec![vec![0, 0]]).is_err());
    // Wrong number of argument lists / arguments.
    let exe = c
        .compile(
            &Program::mlir(
                "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<2xf32>\n}",
            ),
            &CompileOptions::default(),
        )
        .unwrap();
    let a = upload(&[1f32, 2.0], &[2], 0);
    assert!(exe
        .execute(&[vec![&a], vec![&a]], &ExecuteOptions::default())
        .is_err());
    let err = exe
        .execute(&[vec![&a, &a]], &ExecuteOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::Pjrt { .. }), "{err}");
    let b = upload(&[1f32, 2.0, 3.0], &[3], 0);
    let err = exe
        .execute(&[vec![&b]], &ExecuteOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::Pjrt { .. }), "{err}");
}

#[test]
fn add_and_dot_on_1_2_4_8_devices() {
    for n in [1usize, 2, 4, 8] {
        let add = compile_partitioned(
            &manual_module(
                &["tensor<4xf32>", "tensor<4xf32>"],
                &["tensor<4xf32>"],
                "    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>\n    return %0 : tensor<4xf32>",
            ),
            n,
        );
        assert_eq!(add.devices().len(), n);
        assert_eq!(add.num_partitions(), n);
        let args: Vec<Vec<Buffer>> = (0..n)
            .map(|k| {
                vec![
                    upload(&input_of(k, 4), &[4], k),
                    upload(&[1f32, 2.0, 3.0, 4.0], &[4], k),
                ]
            })
            .collect();
        let out = run_f32(&add, &args);
        for (k, outs) in out.iter().enumerate() {
            let want: Vec<f32> = input_of(k, 4)
                .iter()
                .zip([1f32, 2.0, 3.0, 4.0])
                .map(|(a, b)| a + b)
                .collect();
            assert_eq!(outs[0], want, "add on {n} devices, device {k}");
        }

        // [2,3] x [3,2] per device, different data everywhere.
        let dot = compile_partitioned(
            &manual_module(
                &["tensor<2x3xf32>", "tensor<3x2xf32>"],
                &["tensor<2x2xf32>"],
                "    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>\n    return %0 : tensor<2x2xf32>",
            ),
            n,
        );
        let lhs = |k: usize| input_of(k, 6);
        let rhs = |k: usize| -> Vec<f32> { (0..6).map(|i| (i as f32) - k as f32).collect() };
        let args: Vec<Vec<Buffer>> = (0..n)
            .map(|k| vec![upload(&lhs(k), &[2, 3], k), upload(&rhs(k), &[3, 2], k)])
            .collect();
        let out = run_f32(&dot, &args);
        for (k, outs) in out.iter().enumerate() {
            let (a, b) = (lhs(k), rhs(k));
            let mut want = vec![0f32; 4];
            for i in 0..2 {
                for j in 0..2 {
                    want[i * 2 + j] = (0..3).map(|l| a[i * 3 + l] * b[l * 2 + j]).sum();
                }
            }
            assert_eq!(outs[0], want, "dot on {n} devices, device {k}");
        }
    }
}

#[test]
fn tuple_results_come_back_as_separate_buffers() {
    let text = manual_module(
        &["tensor<3xf32>", "tensor<2xi32>"],
        &["tensor<3xf32>", "tensor<2xi32>", "tensor<i32>"],
        "    %0 = stablehlo.multiply %arg0, %arg0 : tensor<3xf32>\n    %1 = stablehlo.negate %arg1 : tensor<2xi32>\n    %2 = stablehlo.constant dense<7> : tensor<i32>\n    return %0, %1, %2 : tensor<3xf32>, tensor<2xi32>, tensor<i32>",
    );
    let exe = compile_partitioned(&text, 2);
    assert_eq!(exe.num_outputs(), 3);
    let shapes: Vec<String> = exe
        .output_shapes()
        .unwrap()
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(shapes, ["f32[3]", "s32[2]", "s32[]"]);
    let args: Vec<Vec<Buffer>> = (0..2)
        .map(|k| {
            vec![
                upload(&[1f32, 2.0, 3.0 + k as f32], &[3], k),
                upload(&[5i32, -6 * k as i32], &[2], k),
            ]
        })
        .collect();
    let lists: Vec<Vec<&Buffer>> = args.iter().map(|l| l.iter().collect()).collect();
    let out = exe.execute(&lists, &ExecuteOptions::default()).unwrap();
    for (k, outs) in out.iter().enumerate() {
        let x = 3.0 + k as f32;
        assert_eq!(outs[0].to_vec::<f32>().unwrap(), vec![1.0, 4.0, x * x]);
        assert_eq!(outs[1].to_vec::<i32>().unwrap(), vec![-5, 6 * k as i32]);
        assert_eq!(outs[2].to_vec::<i32>().unwrap(), vec![7]);
    }

    // A real tuple-typed result is flattened by PJRT as well.
    let text = "func.func @main(%a: tensor<2xf32>) -> tuple<tensor<2xf32>, tensor<2xf32>> {\n  %n = stablehlo.negate %a : tensor<2xf32>\n  %t = stablehlo.tuple %a, %n : tuple<tensor<2xf32>, tensor<2xf32>>\n  return %t : tuple<tensor<2xf32>, tensor<2xf32>>\n}";
    let exe = client()
        .compile(&Program::mlir(text), &CompileOptions::default())
        .unwrap();
    let a = upload(&[1f32, -2.0], &[2], 0);
    let out = exe
        .execute(&[vec![&a]], &ExecuteOptions::default())
        .unwrap();
    let got: Vec<Vec<f32>> = out[0].iter().map(|b| b.to_vec().unwrap()).collect();
    assert_eq!(got, vec![vec![1.0, -2.0], vec![-1.0, 2.0]]);
}

fn sum_region(ty: &str) -> String {
    format!(
        "({{\n      ^bb0(%x: tensor<{ty}>, %y: tensor<{ty}>):\n        %s = stablehlo.add %x, %y : tensor<{ty}>\n        stablehlo.return %s : tensor<{ty}>\n    }})"
    )
}

#[test]
fn collectives_on_2_4_8_devices() {
    for n in [2usize, 4, 8] {
        let groups = all_devices_group(n);
        let chan = "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>";
        let inputs = |len: usize| -> Vec<Vec<Buffer>> {
            (0..n)
                .map(|k| vec![upload(&input_of(k, len), &[len as i64], k)])
                .collect()
        };

        // all-reduce (sum) of 2 elements.
        let text = manual_module(
            &["tensor<2xf32>"],
            &["tensor<2xf32>"],
            &format!(
                "    %0 = \"stablehlo.all_reduce\"(%arg0) {} {{{chan}, replica_groups = {groups}, use_global_device_ids}} : (tensor<2xf32>) -> tensor<2xf32>\n    return %0 : tensor<2xf32>",
                sum_region("f32")
            ),
        );
        let out = run_f32(&compile_partitioned(&text, n), &inputs(2));
        let want: Vec<f32> = (0..2)
            .map(|i| (0..n).map(|k| input_of(k, 2)[i]).sum())
            .collect();
        for outs in &out {
            assert_eq!(outs[0], want, "all-reduce on {n}");
        }

        // all-gather along dim 0: 2 elements each -> 2n elements.
        let text = manual_module(
            &["tensor<2xf32>"],
            &[&format!("tensor<{}xf32>", 2 * n)],
            &format!(
                "    %0 = \"stablehlo.all_gather\"(%arg0) {{all_gather_dim = 0 : i64, {chan}, replica_groups = {groups}, use_global_device_ids}} : (tensor<2xf32>) -> tensor<{m}xf32>\n    return %0 : tensor<{m}xf32>",
                m = 2 * n
            ),
        );
        let out = run_f32(&compile_partitioned(&text, n), &inputs(2));
        let want: Vec<f32> = (0..n).flat_map(|k| input_of(k, 2)).collect();
        for outs in &out {
            assert_eq!(outs[0], want, "all-gather on {n}");
        }

        // reduce-scatter: 2n elements each, device k gets the sum of chunk k.
        let text = manual_module(
            &[&format!("tensor<{}xf32>", 2 * n)],
            &["tensor<2xf32>"],
            &format!(
                "    %0 = \"stablehlo.reduce_scatter\"(%arg0) {} {{scatter_dimension = 0 : i64, {chan}, replica_groups = {groups}, use_global_device_ids}} : (tensor<{}xf32>) -> tensor<2xf32>\n    return %0 : tensor<2xf32>",
                sum_region("f32"),
                2 * n
            ),
        );
        let out = run_f32(&compile_partitioned(&text, n), &inputs(2 * n));
        for (k, outs) in out.iter().enumerate() {
            let want: Vec<f32> = (0..2)
                .map(|i| (0..n).map(|src| input_of(src, 2 * n)[2 * k + i]).sum())
                .collect();
            assert_eq!(outs[0], want, "reduce-scatter on {n}, device {k}");
        }

        // all-to-all: n elements each; device k receives element k of every device.
        let text = manual_module(
            &[&format!("tensor<{n}xf32>")],
            &[&format!("tensor<{n}xf32>")],
            &format!(
                "    %0 = \"stablehlo.all_to_all\"(%arg0) {{split_dimension = 0 : i64, concat_dimension = 0 : i64, split_count = {n} : i64, replica_groups = {groups}, {chan}}} : (tensor<{n}xf32>) -> tensor<{n}xf32>\n    return %0 : tensor<{n}xf32>"
            ),
        );
        let out = run_f32(&compile_partitioned(&text, n), &inputs(n));
        for (k, outs) in out.iter().enumerate() {
            let want: Vec<f32> = (0..n).map(|src| input_of(src, n)[k]).collect();
            assert_eq!(outs[0], want, "all-to-all on {n}, device {k}");
        }

        // collective-permute: a ring shift k -> k+1.
        let pairs: Vec<String> = (0..n).map(|k| format!("[{k}, {}]", (k + 1) % n)).collect();
        let text = manual_module(
            &["tensor<2xf32>"],
            &["tensor<2xf32>"],
            &format!(
                "    %0 = \"stablehlo.collective_permute\"(%arg0) {{source_target_pairs = dense<[{}]> : tensor<{n}x2xi64>, {chan}}} : (tensor<2xf32>) -> tensor<2xf32>\n    return %0 : tensor<2xf32>",
                pairs.join(", ")
            ),
        );
        let out = run_f32(&compile_partitioned(&text, n), &inputs(2));
        for (k, outs) in out.iter().enumerate() {
            assert_eq!(
                outs[0],
                input_of((k + n - 1) % n, 2),
                "permute on {n}, device {k}"
            );
        }

        // partition-id.
        let text = manual_module(
            &[],
            &["tensor<ui32>"],
            "    %0 = stablehlo.partition_id : tensor<ui32>\n    return %0 : tensor<ui32>",
        );
        let exe = compile_partitioned(&text, n);
        let empty: Vec<Vec<&Buffer>> = vec![Vec::new(); n];
        let out = exe.execute(&empty, &ExecuteOptions::default()).unwrap();
        let ids: Vec<u32> = out
            .iter()
            .map(|o| o[0].to_vec::<u32>().unwrap()[0])
            .collect();
        assert_eq!(
            ids,
            (0..n as u32).collect::<Vec<_>>(),
            "partition-id on {n}"
        );
    }
}

#[test]
fn device_assignment_chooses_the_devices() {
    // Two partitions placed on devices 5 and 2, in that order.
    let text = manual_module(
        &[],
        &["tensor<ui32>"],
        "    %0 = stablehlo.partition_id : tensor<ui32>\n    return %0 : tensor<ui32>",
    );
    let da = DeviceAssignment::new(vec![vec![5, 2]]).unwrap();
    let exe = client()
        .compile(
            &Program::mlir(text),
            &CompileOptions::partitioned(2).with_device_assignment(da),
        )
        .unwrap();
    let ids: Vec<i32> = exe.devices().iter().map(|d| d.id()).collect();
    assert_eq!(ids, vec![5, 2]);
    let out = exe
        .execute(&[vec![], vec![]], &ExecuteOptions::default())
        .unwrap();
    for (k, o) in out.iter().enumerate() {
        assert_eq!(o[0].device_id().unwrap(), ids[k]);
        assert_eq!(o[0].to_vec::<u32>().unwrap(), vec![k as u32]);
    }
}

#[test]
fn replicas_run_the_same_program_with_replica_ids() {
    let text = "func.func @main(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<ui32>) {\n  %0 = \"stablehlo.all_reduce\"(%a) ({\n    ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n      %s = stablehlo.add %x, %y : tensor<f32>\n      stablehlo.return %s : tensor<f32>\n  }) {replica_groups = dense<[[0, 1, 2]]> : tensor<1x3xi64>} : (tensor<2xf32>) -> tensor<2xf32>\n  %r = stablehlo.replica_id : tensor<ui32>\n  return %0, %r : tensor<2xf32>, tensor<ui32>\n}";
    let exe = client()
        .compile(&Program::mlir(text), &CompileOptions::replicated(3))
        .unwrap();
    assert_eq!(exe.num_replicas(), 3);
    let args: Vec<Vec<Buffer>> = (0..3)
        .map(|k| vec![upload(&input_of(k, 2), &[2], k)])
        .collect();
    let lists: Vec<Vec<&Buffer>> = args.iter().map(|l| l.iter().collect()).collect();
    let out = exe.execute(&lists, &ExecuteOptions::default()).unwrap();
    let want: Vec<f32> = (0..2)
        .map(|i| (0..3).map(|k| input_of(k, 2)[i]).sum())
        .collect();
    for (k, o) in out.iter().enumerate() {
        assert_eq!(o[0].to_vec::<f32>().unwrap(), want);
        assert_eq!(o[1].to_vec::<u32>().unwrap(), vec![k as u32]);
    }
}

#[test]
fn run_time_failures_surface_through_completion_events() {
    // ORACLE.md: with a channel id but without use_global_device_ids an
    // all-reduce compiles and fails only when it runs; the error must reach
    // the caller (it travels in an event).
    let n = 2;
    let text = manual_module(
        &["tensor<2xf32>"],
        &["tensor<2xf32>"],
        &format!(
            "    %0 = \"stablehlo.all_reduce\"(%arg0) {} {{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = {}}} : (tensor<2xf32>) -> tensor<2xf32>\n    return %0 : tensor<2xf32>",
            sum_region("f32"),
            all_devices_group(n)
        ),
    );
    match client().compile(&Program::mlir(text), &CompileOptions::partitioned(n)) {
        // Refused at compile time: also fine, as long as it is an error.
        Err(e) => assert!(matches!(e, Error::Pjrt { .. }), "{e}"),
        Ok(exe) => {
            let args: Vec<Vec<Buffer>> = (0..n)
                .map(|k| vec![upload(&input_of(k, 2), &[2], k)])
                .collect();
            let lists: Vec<Vec<&Buffer>> = args.iter().map(|l| l.iter().collect()).collect();
            let err = exe.execute(&lists, &ExecuteOptions::default()).unwrap_err();
            eprintln!("run-time failure: {err}");
            assert!(matches!(err, Error::Pjrt { .. }), "{err}");
        }
    }
}

#[test]
fn missing_plugin_is_a_clear_error() {
    let err = tessera_runtime::Plugin::load(std::path::Path::new("/nonexistent/xla_cpu_pjrt.so"))
        .err()
        .expect("loading a missing plugin must fail");
    assert!(err.to_string().contains("scripts/install-pjrt.sh"), "{err}");
    // A file that is not a shared object.
    let err = tessera_runtime::Plugin::load(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("Cargo.toml")
            .as_path(),
    )
    .err()
    .expect("loading a non-library must fail");
    assert!(matches!(err, Error::PluginLoad { .. }), "{err}");
}

#[test]
fn objects_of_another_client_are_refused() {
    let other = tessera_runtime::Client::cpu(1).unwrap();
    let c = client();
    let err = c
        .buffer_from_host(&[1f32], &[1], &other.devices()[0])
        .unwrap_err();
    assert!(err.to_string().contains("another client"), "{err}");
    let exe = c
        .compile(
            &Program::mlir(
                "func.func @main(%a: tensor<1xf32>) -> tensor<1xf32> {\n  return %a : tensor<1xf32>\n}",
            ),
            &CompileOptions::default(),
        )
        .unwrap();
    let foreign = other
        .buffer_from_host(&[1f32], &[1], &other.devices()[0])
        .unwrap();
    let err = exe
        .execute(&[vec![&foreign]], &ExecuteOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("another client"), "{err}");
}

#[test]
fn errors_of_already_completed_events_are_reported() {
    // A donated buffer's ready event is complete from the start and carries
    // an error; it must not read as success.
    let c = client();
    let exe = c
        .compile(
            &Program::mlir(
                "func.func @main(%a: tensor<2xf32> {tf.aliasing_output = 0 : i32}) -> tensor<2xf32> {\n  %0 = stablehlo.negate %a : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}",
            ),
            &CompileOptions::default(),
        )
        .unwrap();
    let a = upload(&[1f32, 2.0], &[2], 0);
    let out = exe
        .execute(&[vec![&a]], &ExecuteOptions::default())
        .unwrap();
    assert_eq!(out[0][0].to_vec::<f32>().unwrap(), vec![-1.0, -2.0]);
    assert!(a.is_deleted().unwrap());
    let err = a.ready().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Pjrt {
                call: "PJRT_Buffer_ReadyEvent",
                ..
            }
        ),
        "{err}"
    );
    assert!(a.to_vec::<f32>().is_err());
    // Using it again is refused, not undefined.
    let err = exe
        .execute(&[vec![&a]], &ExecuteOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::Pjrt { .. }), "{err}");
    // With the parameter marked non-donatable the plugin copies instead.
    let b = upload(&[3f32, 4.0], &[2], 0);
    let keep = ExecuteOptions {
        non_donatable_input_indices: vec![0],
        launch_id: 0,
    };
    let out = exe.execute(&[vec![&b]], &keep).unwrap();
    assert_eq!(out[0][0].to_vec::<f32>().unwrap(), vec![-3.0, -4.0]);
    assert!(!b.is_deleted().unwrap());
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![3.0, 4.0]);
}

#[test]
fn replicas_times_partitions_follow_the_device_assignment() {
    // 2 replicas x 2 partitions on devices [[3, 1], [0, 2]]: every device must
    // report the (replica, partition) pair the assignment gives it.
    let text = manual_module(
        &[],
        &["tensor<ui32>", "tensor<ui32>"],
        "    %r = stablehlo.replica_id : tensor<ui32>\n    %p = stablehlo.partition_id : tensor<ui32>\n    return %r, %p : tensor<ui32>, tensor<ui32>",
    );
    let assignment = vec![vec![3i64, 1], vec![0, 2]];
    let options = CompileOptions {
        num_replicas: 2,
        num_partitions: 2,
        use_spmd_partitioning: true,
        device_assignment: Some(DeviceAssignment::new(assignment.clone()).unwrap()),
        ..CompileOptions::default()
    };
    let exe = client().compile(&Program::mlir(text), &options).unwrap();
    assert_eq!((exe.num_replicas(), exe.num_partitions()), (2, 2));
    let out = exe
        .execute(&vec![Vec::new(); 4], &ExecuteOptions::default())
        .unwrap();
    let mut seen = Vec::new();
    for (k, o) in out.iter().enumerate() {
        let r = o[0].to_vec::<u32>().unwrap()[0] as usize;
        let p = o[1].to_vec::<u32>().unwrap()[0] as usize;
        let device = i64::from(exe.devices()[k].id());
        assert_eq!(
            assignment[r][p], device,
            "list {k}: replica {r}, partition {p}"
        );
        assert_eq!(i64::from(o[0].device_id().unwrap()), device);
        seen.push((r, p));
    }
    seen.sort();
    assert_eq!(seen, vec![(0, 0), (0, 1), (1, 0), (1, 1)]);
}
