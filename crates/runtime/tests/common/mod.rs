//! Shared helpers of the integration tests: one 8-device CPU client per test
//! binary, and StableHLO programs written for N devices.
#![allow(dead_code)]

use std::sync::OnceLock;

use tessera_runtime::Client;

/// The plugin must be installed: a missing plugin fails the test, it is never
/// skipped.
pub fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::cpu(8).unwrap_or_else(|e| panic!("cannot create the PJRT CPU client: {e}"))
    })
}

/// `[[0, 1, ..., n-1]]` as a StableHLO replica-group attribute.
pub fn all_devices_group(n: usize) -> String {
    let ids: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    format!("dense<[[{}]]> : tensor<1x{n}xi64>", ids.join(", "))
}

/// Wraps a per-device body into a module whose parameters and results carry
/// MANUAL shardings, so the plugin runs it as is on every partition.
pub fn manual_module(params: &[&str], results: &[&str], body: &str) -> String {
    let ps: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, t)| format!("%arg{i}: {t} {{mhlo.sharding = \"{{manual}}\"}}"))
        .collect();
    let rs: Vec<String> = results
        .iter()
        .map(|t| format!("{t} {{mhlo.sharding = \"{{manual}}\"}}"))
        .collect();
    format!(
        "module @m {{\n  func.func public @main({}) -> ({}) {{\n{body}\n  }}\n}}\n",
        ps.join(", "),
        rs.join(", ")
    )
}
