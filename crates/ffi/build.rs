//! Compiles the C++ helper that lets `oomscope_torch_malloc` throw the exception PyTorch
//! turns into a Python `RuntimeError` (`src/throw.cpp`). Needs a C++ compiler (g++).

fn main() {
    println!("cargo:rerun-if-changed=src/throw.cpp");
    cc::Build::new().cpp(true).file("src/throw.cpp").flag_if_supported("-std=c++17").compile("oomscope_throw");
}
