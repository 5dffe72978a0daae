#!/bin/sh
# A stand-in for keepalloc-harness that keeps its contract (`--list`, one RESULT line,
# exit codes), for the campaign driver's own tests: `cargo xtask fault-test --harness
# xtask/src/fault_test/fake-harness.sh` runs a whole campaign against it in a second.
#
#   keepalloc      passes (with FAKE_KEEPALLOC=crash, seeds divisible by 4 die by SIGSEGV)
#   racy           caught with the window held; bare, one seed in 3 shows identity-mismatch
#   naive-retry    reports only `leak`, outside its signature: inconclusive, never caught
#   FAKE_MUTANT=N  "built with cell mutant N": keepalloc shows owner-rebuilt in
#                  retry-after-capture
if [ "$1" = "--list" ]; then
  if [ -n "$FAKE_MUTANT" ]; then
    mutant="{\"name\": \"$FAKE_MUTANT\", \"signature\": [\"owner-rebuilt\"], \"scenarios\": [\"retry-after-capture\"]}"
  else
    mutant=null
  fi
  cat <<JSON
{
  "contract": 1,
  "cell_mutant": $mutant,
  "scenarios": [{"name": "cold-start", "summary": "threads acquire at once"},
                {"name": "retry-after-capture", "summary": "init fails after capture"}],
  "variants": [{"name": "keepalloc", "control": false, "built": true, "summary": "ours"},
               {"name": "racy", "control": true, "built": true, "summary": "the ORT bug"},
               {"name": "naive-retry", "control": true, "built": true, "summary": "once_cell retry"}],
  "windows": [{"name": "held", "summary": "held open"}, {"name": "yield", "summary": "yield_now"},
              {"name": "bare", "summary": "nothing"}],
  "rows": [{"scenario": "cold-start", "variant": "keepalloc", "signature": []},
           {"scenario": "cold-start", "variant": "racy",
            "signature": ["second-owner", "identity-mismatch", "use-after-free"]},
           {"scenario": "retry-after-capture", "variant": "keepalloc", "signature": []},
           {"scenario": "retry-after-capture", "variant": "naive-retry",
            "signature": ["second-owner", "use-after-free"]}],
  "cell_mutants": [{"name": "rebuild_in_place", "signature": ["owner-rebuilt"],
                    "scenarios": ["retry-after-capture"]}],
  "exit_codes": {"pass": 0, "harness-error": 1, "usage": 2, "not-built": 3,
                 "not-applicable": 4, "use-after-free": 10, "identity-mismatch": 20,
                 "invariant": 21}
}
JSON
  exit 0
fi
while [ $# -gt 1 ]; do
  case "$1" in
    --scenario) scenario=$2 ;;
    --variant) variant=$2 ;;
    --seed) seed=$2 ;;
    --threads) threads=$2 ;;
    --window) window=$2 ;;
    *) echo "fake-harness: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
result() {
  echo "RESULT scenario=$scenario variant=$variant seed=$seed threads=$threads window=$window status=$1 exit=$2 detections=$3"
  exit "$2"
}
case "$variant:$window" in
  keepalloc:*)
    if [ -n "$FAKE_MUTANT" ] && [ "$scenario" = retry-after-capture ]; then
      echo "keepalloc-fault: owner-rebuilt: the owner was built again in place" >&2
      result fail 21 owner-rebuilt
    fi
    if [ "$FAKE_KEEPALLOC" = crash ] && [ $((seed % 4)) = 0 ]; then kill -SEGV $$; fi
    result pass 0 none ;;
  racy:held) result fail 10 identity-mismatch,use-after-free ;;
  racy:*)
    if [ $((seed % 3)) = 0 ]; then result fail 20 identity-mismatch; fi
    result pass 0 none ;;
  naive-retry:*)
    echo "keepalloc-fault: leak: 1 block still live" >&2
    result fail 21 leak ;;
esac
echo "fake-harness: no row $scenario/$variant" >&2
exit 4
