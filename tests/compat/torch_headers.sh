#!/usr/bin/env bash
# Compiles the torch extension (python/csrc/gotree_backend.cpp) against the
# headers of other torch releases without installing them: for each version,
# downloads its wheel from PyPI (no dependencies), unpacks torch/include and
# the extension builder, and runs the compiler with -fsyntax-only and the C++
# standard that release's BuildExtension adds. A syntax check, not a test:
# the full check is tests/python under that torch (see README.md).
#
#   tests/compat/torch_headers.sh 2.12.1 2.13.0 2.14.1
#
# PY names the Python whose pip downloads (default .venv/bin/python); the
# unpacked headers stay in build/torch-headers/<version>, so a version is
# downloaded once.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
[ $# -gt 0 ] || { echo "usage: $0 TORCH_VERSION..." >&2; exit 2; }
pyinc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
fail=0
for v in "$@"; do
	dir=build/torch-headers/$v
	if [ ! -f "$dir/torch/utils/cpp_extension.py" ]; then
		mkdir -p "$dir/whl"
		"$PY" -m pip download -q --no-deps --only-binary=:all: "torch==$v" -d "$dir/whl"
		"$PY" - "$dir" <<'PYEOF'
import glob, sys, zipfile
d = sys.argv[1]
with zipfile.ZipFile(glob.glob(d + "/whl/torch-*.whl")[0]) as z:
    z.extractall(d, [n for n in z.namelist() if n.startswith("torch/include/") or n == "torch/utils/cpp_extension.py"])
PYEOF
		rm -rf "$dir/whl"
	fi
	std=c++17
	if grep -q "cpp_flag_prefix + 'c++20'" "$dir/torch/utils/cpp_extension.py"; then
		std=c++20
	fi
	if g++ -fsyntax-only -std=$std -O2 -fvisibility=hidden -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C \
		-Icapi -I"$dir/torch/include" -I"$dir/torch/include/torch/csrc/api/include" -I"$pyinc" \
		python/csrc/gotree_backend.cpp; then
		echo "torch $v (-std=$std): the extension compiles"
	else
		echo "torch $v (-std=$std): the extension does NOT compile" >&2
		fail=1
	fi
done
exit $fail
