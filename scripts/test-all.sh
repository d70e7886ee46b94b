#!/usr/bin/env bash
# Every test: the Rust suite, again with the `cuda` feature (no GPU or CUDA needed: libraries are
# loaded at run time), then the Python package: `pip install .` into a fresh venv (maturin builds
# the wheel; pip fetches maturin and pytest from PyPI) and pytest on the committed fixtures
# against the installed wheel. Needs the Rust toolchain and python3 (3.9 or newer) with venv/pip.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked
cargo test --locked --features cuda
venv=target/python-test-venv
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check . pytest
# From outside the source tree, so `import ckpt_surgery` can only find the installed wheel.
(cd target && "python-test-venv/bin/python" -m pytest -q -p no:cacheprovider ../python/tests)
