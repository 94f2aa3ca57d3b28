//! Client creation per plugin: the CPU plugin gets `cpu_device_count`, any plugin takes the
//! caller's options, and the CUDA plugin (jax-cuda12-pjrt's `xla_cuda_plugin.so`) runs a
//! program where there is an NVIDIA GPU.

use tessera_runtime::{ClientOption, CompileOptions, ExecuteOptions, Plugin, Program};

const ADD: &str = "func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}";

#[test]
fn the_cpu_plugin_gets_its_device_count() {
    let plugin = Plugin::load_default().unwrap();
    for n in [3, 1, 5] {
        let c = plugin.client(n).unwrap();
        assert_eq!(c.platform_name().unwrap(), "cpu");
        assert_eq!(c.devices().len(), n);
    }
    let c = plugin
        .client_with_options(&[("cpu_device_count".into(), ClientOption::Int(2))])
        .unwrap();
    assert_eq!(c.devices().len(), 2);
    // Without options, the plugin decides.
    assert!(!plugin
        .client_with_options(&[])
        .unwrap()
        .devices()
        .is_empty());
}

/// `TESSERA_CUDA_PLUGIN` names `xla_cuda_plugin.so` (pip's jax-cuda12-pjrt, with jax[cuda12]'s
/// NVIDIA packages in the same site-packages); without it, or without a GPU, the test says so
/// in one line and passes.
#[test]
fn cuda_plugin_runs_where_there_is_a_gpu() {
    let path = std::env::var_os("TESSERA_CUDA_PLUGIN").filter(|p| !p.is_empty());
    let gpu = std::path::Path::new("/dev/nvidiactl").exists();
    let Some(path) = path.filter(|_| gpu) else {
        eprintln!(
            "skipped: no NVIDIA GPU here or TESSERA_CUDA_PLUGIN unset (gpu device: {gpu}); the \
             CUDA plugin test needs both"
        );
        return;
    };
    let plugin = Plugin::load(std::path::Path::new(&path)).unwrap();
    // The CUDA plugin refuses cpu_device_count; `client` must not pass it.
    let c = plugin.client(1).unwrap();
    assert_eq!(c.platform_name().unwrap(), "cuda");
    assert!(!c.devices().is_empty());
    let exe = c
        .compile(&Program::mlir(ADD), &CompileOptions::default())
        .unwrap();
    let d = &c.devices()[0];
    let a = c.buffer_from_host(&[1f32, 2., 3., 4.], &[4], d).unwrap();
    let b = c
        .buffer_from_host(&[10f32, 20., 30., 40.], &[4], d)
        .unwrap();
    let out = exe
        .execute(&[vec![&a, &b]], &ExecuteOptions::default())
        .unwrap();
    assert_eq!(out[0][0].to_vec::<f32>().unwrap(), vec![11., 22., 33., 44.]);
    // Options go to the plugin as given.
    let c = plugin
        .client_with_options(&[("preallocate".into(), ClientOption::Bool(false))])
        .unwrap();
    assert_eq!(c.platform_name().unwrap(), "cuda");
    eprintln!("cuda: {} device(s), add ok", c.devices().len());
}
