#!/usr/bin/env bash
# Every test: the Rust suite, the kill-anywhere / full-disk tests (apart, printing each job as it
# finishes), rustdoc with warnings as errors, the Rust suite again with the `cuda` feature (no GPU
# or CUDA needed: libraries are loaded at run time; the kill tests are not repeated, the writers
# are the same code), then the Python package: `pip install .` into a fresh venv (maturin builds
# the wheel; pip fetches maturin and pytest from PyPI) and pytest on the committed fixtures
# against the installed wheel. Needs the Rust toolchain and python3 (3.9 or newer) with venv/pip.
# Each step says what it does and how long it took; a line every 15 s says a long step is still
# running.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/step.sh
t_all=$SECONDS
# The kill tests by name: run apart below, skipped in the suites.
kill_tests=(--skip killing_a_writing_binary_anywhere --skip running_out_of_disk_space
  --skip kill_anywhere_leaves_old_file --skip the_pause_hook_really_slows)
step "Rust tests (build + cargo test; kill tests next, apart)" \
  cargo test --locked -- "${kill_tests[@]}"
step "kill-anywhere and full-disk tests (~2 min: 11 writing jobs killed at 50 random points each)" \
  cargo test --locked --test kill_binaries --test kill_write -- --nocapture --test-threads 1
step "rustdoc of every item, private ones too, warnings as errors (links in doc comments resolve)" \
  env RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps --document-private-items --quiet
step "Rust tests again with --features cuda (no GPU needed: CUDA is loaded at run time, the kernels' logic runs on the CPU)" \
  cargo test --locked --features cuda -- "${kill_tests[@]}"
venv=target/python-test-venv
rm -rf "$venv"
step "Python venv + wheel (pip install . builds the extension with maturin, release profile)" \
  bash -c '"${PYTHON:-python3}" -m venv "$0" && "$0/bin/pip" install --quiet --disable-pip-version-check . pytest' "$venv"
# From outside the source tree, so `import ckpt_surgery` can only find the installed wheel.
step "pytest against the installed wheel" \
  bash -c 'cd target && python-test-venv/bin/python -m pytest -q -p no:cacheprovider ../python/tests'
echo "all tests passed in $((SECONDS - t_all)) s"
