//! Compiles the protos with the protoc that the `protoc-bin-vendored` crate ships, so a build
//! never needs a system protoc nor downloads one. Also writes the protos' FileDescriptorSet
//! (`descriptors.bin`, imports included), which the tests of `wire` hold its field numbers to.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let well_known = protoc_bin_vendored::include_path()?;
    let protos = [
        "proto/inference/grpc_service.proto",
        "proto/featurelog/v1/feature_log.proto",
        "proto/featurelog/v1/impression.proto",
        "proto/featurelog/state/v1/join_state.proto",
    ];
    // The directory, not only the files listed: a proto added to the list is a change too.
    println!("cargo:rerun-if-changed=proto");

    let out_dir =
        std::path::PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc);
    // Set on the prost config, which tonic's builder passes on as it is: written with and
    // without the `grpc` feature.
    config.file_descriptor_set_path(out_dir.join("descriptors.bin"));
    // Tensor payloads can be megabytes: `Bytes` lets the sidecar slice them without copying.
    config.bytes(["."]);
    // A state file is written the same whichever order its maps were filled in.
    config.btree_map([".featurelog.state"]);
    let includes = [std::path::PathBuf::from("proto"), well_known];
    if std::env::var_os("CARGO_FEATURE_GRPC").is_some() {
        tonic_prost_build::configure()
            .build_server(true)
            .build_client(true)
            .compile_with_config(config, &protos.map(std::path::PathBuf::from), &includes)?;
    } else {
        config.compile_protos(&protos, &includes)?;
    }
    Ok(())
}
