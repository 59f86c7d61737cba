"""Builds the gotree wheel: the Go library (libgotree.so) and the thin C++
torch extension (gotree._C) that loads it at run time, both shipped inside the
`gotree` package folder.

    python -m pip wheel . -w dist --no-build-isolation   # torch must be importable
    python setup.py build_ext --inplace                   # development: into python/gotree/

Go (1.22 or newer) must be on PATH, or named by $GO. GOTREE_SKIP_GO=1 skips the
Go build (then libgotree.so must already be in place).
"""

import os
import shutil
import subprocess
import sys

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError as e:  # pragma: no cover - build-time message
    sys.exit(
        "gotree: building needs torch importable at build time ({}). Install torch, then "
        "build with `python -m pip wheel . -w dist --no-build-isolation`.".format(e)
    )

VERSION = "0.1.0"
TORCH_MM = ".".join(torch.__version__.split("+")[0].split(".")[:2])


def find_go():
    go = os.environ.get("GO") or shutil.which("go")
    if not go and os.path.exists("/usr/local/go/bin/go"):
        go = "/usr/local/go/bin/go"
    if not go:
        sys.exit(
            "gotree: the Go toolchain is needed to build libgotree.so but `go` is not on PATH "
            "(nor $GO, nor /usr/local/go/bin/go). Install Go 1.22+ (https://go.dev/dl) and retry."
        )
    return go


class BuildGotree(BuildExtension):
    """build_ext that first builds libgotree.so into the package folder and
    records the torch the extension is compiled against."""

    def run(self):
        dest = self.package_folder()
        self.write_build_info(dest)
        self.build_go_library(dest)
        super().run()

    def package_folder(self):
        if self.inplace:
            dest = os.path.join(ROOT, "python", "gotree")
        else:
            dest = os.path.join(os.path.abspath(self.build_lib), "gotree")
        os.makedirs(dest, exist_ok=True)
        return dest

    def write_build_info(self, dest):
        # So that loading the extension under another torch can say so
        # (gotree.load_library).
        with open(os.path.join(dest, "_build_info.py"), "w") as f:
            f.write("# Written by setup.py: the torch gotree._C was compiled against.\n")
            f.write("TORCH_VERSION = {!r}\n".format(torch.__version__))

    def build_go_library(self, dest):
        out = os.path.join(dest, "libgotree.so")
        if os.environ.get("GOTREE_SKIP_GO") == "1":
            if not os.path.exists(out):
                print("gotree: warning: GOTREE_SKIP_GO=1 and {} does not exist".format(out))
            return
        go = find_go()
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./capi"]
        print("gotree: building the Go library: {} (in {})".format(" ".join(cmd), ROOT), flush=True)
        subprocess.check_call(cmd, cwd=ROOT)
        # c-shared also writes the cgo-generated header next to the library;
        # the public header is capi/gotree.h, so do not ship the generated one.
        gen_header = os.path.join(dest, "libgotree.h")
        if os.path.exists(gen_header):
            os.remove(gen_header)


ext = CppExtension(
    name="gotree._C",
    sources=["python/csrc/gotree_backend.cpp"],
    include_dirs=[os.path.join(ROOT, "capi")],
    # No -std flag: torch's BuildExtension adds the standard its headers
    # need when none is given: C++17 up to torch 2.11, C++20 from 2.12,
    # whose headers refuse to compile as C++17.
    extra_compile_args={"cxx": ["-O2", "-fvisibility=hidden"]},
    # Some toolchains link part or all of libstdc++ statically into what
    # they build (the g++ of the CUDA image gotree's GPU checks run on put
    # 102 std::basic_ostream functions into the extension). Exported, those
    # copies bind half to themselves and half to the libstdc++ torch loaded,
    # and the first std::ostream << long crashed the process. Hidden, the
    # extension uses its own copy throughout; with a shared libstdc++ the
    # flag changes nothing.
    extra_link_args=["-Wl,--exclude-libs,ALL"],
    libraries=["dl"],
)

setup(
    name="gotree",
    version=VERSION,
    description="gotree: a torch.distributed backend whose core is a Go library",
    packages=["gotree"],
    package_dir={"": "python"},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildGotree},
    python_requires=">=3.9",
    # The C++ Backend API is not a stable ABI: the extension matches the torch
    # it was built with (same major.minor).
    install_requires=["torch=={}.*".format(TORCH_MM)],
    entry_points={"torch.backends": ["gotree = gotree:_autoload"]},
    zip_safe=False,
)
