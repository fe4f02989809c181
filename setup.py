"""The native half of the Python package: `cargo build --release` of the command and of
liboomscope.so, copied into the package as `oomscope/bin/oomscope` and
`oomscope/bin/liboomscope.so`. Side by side they find each other (`oomscope run` loads the
library beside itself), and the wheel is `py3-none-<platform>`: nothing in it depends on the
Python version. The rest of the metadata is in pyproject.toml."""

import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools before 70.1
    from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))
NATIVE = ("oomscope", "liboomscope.so")


class BuildWithCargo(build_py):
    def run(self):
        super().run()
        if shutil.which("cargo") is None:
            raise SystemExit(
                "oomscope: building from source needs Rust's cargo (https://rustup.rs); or install a wheel"
            )
        subprocess.check_call(
            ["cargo", "build", "--release", "--locked", "-p", "oomscope", "-p", "oomscope-ffi"], cwd=ROOT
        )
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
        out = os.path.join(self.build_lib, "oomscope", "bin")
        os.makedirs(out, exist_ok=True)
        for name in NATIVE:
            dest = os.path.join(out, name)
            shutil.copy2(os.path.join(target, "release", name), dest)
            # Debug information is most of their size and nothing a user runs needs.
            if shutil.which("strip"):
                subprocess.check_call(["strip", "--strip-debug", dest])


class NativeDistribution(Distribution):
    """Native code inside: installed where platform-specific files go."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(distclass=NativeDistribution, cmdclass={"build_py": BuildWithCargo, "bdist_wheel": PlatformWheel})
