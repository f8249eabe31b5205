//! Compiles the MPI shim (`csrc/mpi_shim.c`) against the system's MPI (Open MPI from Debian:
//! `libopenmpi-dev`, found through pkg-config as `ompi-c`; MPICH as `mpich`).
fn main() {
    println!("cargo:rerun-if-changed=csrc/mpi_shim.c");
    println!("cargo::rustc-check-cfg=cfg(mpi_comm_is_int)");
    let lib = ["ompi-c", "mpich"]
        .iter()
        .find_map(|name| {
            let lib = pkg_config::Config::new().probe(name).ok()?;
            // MPI_Comm is a pointer in Open MPI, an int in MPICH.
            if *name == "mpich" {
                println!("cargo:rustc-cfg=mpi_comm_is_int");
            }
            Some(lib)
        })
        .unwrap_or_else(|| {
            panic!(
                "no MPI development files found (pkg-config ompi-c or mpich); install them: \
                 `make deps`, or apt-get install libopenmpi-dev openmpi-bin"
            )
        });
    let mut build = cc::Build::new();
    build
        .file("csrc/mpi_shim.c")
        .warnings(true)
        .extra_warnings(true);
    for dir in &lib.include_paths {
        build.include(dir);
    }
    build.compile("kioku_mpi_shim");
}
