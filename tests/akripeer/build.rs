//! Compiles edgehub's committed copy of Akri's v0 discovery.proto with tonic-build, as Akri's
//! discovery-utils does, using the protoc binary vendored by the protoc-bin-vendored crate.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = "../../discovery/proto";
    let proto = format!("{proto_dir}/discovery.proto");
    println!("cargo:rerun-if-changed={proto}");
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&[proto.as_str()], &[proto_dir])?;
    Ok(())
}
