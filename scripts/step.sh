# Sourced by the README's scripts: `step LABEL CMD…` prints "== LABEL", runs CMD, and prints how
# long it took; while CMD runs, a line every 15 s says it is still running, so no stretch of a
# README command is silent for longer than that.
step() {
  local label=$1
  shift
  echo "== $label"
  local t0=$SECONDS rc=0
  # The sleep must not hold stdout: killed with the ticker it lingers, and a pipe reading this
  # script (CI logs, tee) would stay open until it ended.
  (while sleep 15 </dev/null >/dev/null 2>&1; do echo "   … still running ($((SECONDS - t0)) s)"; done) &
  local ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  if [ "$rc" -eq 0 ]; then
    echo "   done in $((SECONDS - t0)) s: $label"
  else
    echo "   FAILED (exit $rc) after $((SECONDS - t0)) s: $label"
  fi
  return "$rc"
}
