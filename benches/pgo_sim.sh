#!/usr/bin/env bash
# What a profile-guided (PGO) build of the simulator would gain, measured:
# builds `examples/sim_profile` three ways in their own target folders,
#   base    the release profile as shipped (fat LTO, one codegen unit)
#   pgo     the same, optimised with a profile of five training runs
#           (8 x 20 under PLE and under gang scheduling, 16 x 10, ebizzy 2x
#           under dy_eligible, the 64-vCPU scaling run), none of them the
#           run that is timed
#   native  the same with -Ctarget-cpu=native (this CPU's instruction set)
# then times the 8 x 20 PLE run (300 ms simulated, seed 1, not a training
# run) with each binary in turn, ROUNDS rounds, user CPU time, and prints each
# binary's result fingerprint (equal fingerprints: bit-identical results).
#
#   bash benches/pgo_sim.sh            # ~6 min on a 2-CPU machine
#   ROUNDS=8 bash benches/pgo_sim.sh
#
# Needs the `llvm-tools` rustup component (llvm-profdata of rustc's own LLVM):
# `rustup component add llvm-tools`. Not part of the wheel's build: a PGO
# wheel needs the training runs in the build, which `pip install .` does not do.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-4}"
WORK="${WORK:-$(mktemp -d /tmp/vcpulab-pgo.XXXX)}"
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
    echo "pgo_sim.sh: $profdata is missing; run: rustup component add llvm-tools" >&2
    exit 2
fi
PY="${PYTHON:-python}"
"$PY" - "$WORK" <<'EOF'
import sys
from vcpulab.sim import scenarios as S, policies as P, presets
from vcpulab import sim
w = sys.argv[1]
def save(name, cfg):
    open(f"{w}/{name}.json", "w").write(cfg.to_json())
save("timed", S.sched_map_2012(8, 20, scheduler="fair", duration_ns=300_000_000, warmup_ns=40_000_000, seed=1))
save("t_ple", S.sched_map_2012(8, 20, scheduler="fair", duration_ns=150_000_000, warmup_ns=40_000_000, seed=2))
save("t_gang", S.sched_map_2012(8, 20, scheduler="gang", duration_ns=300_000_000, warmup_ns=40_000_000, seed=2))
save("t_16x10", S.sched_map_2012(16, 10, scheduler="fair", duration_ns=100_000_000, warmup_ns=20_000_000, seed=3))
save("t_ebizzy", S.ebizzy_2012(2, P.dy_eligible(), duration_ns=100_000_000))
save("t_scale64", sim.Config(host=sim.Host(n_pcpus=32),
     vms=(sim.Vm(vcpus=16, count=4, workload=presets.spinlock_microbench()),), duration_ns=1_200_000_000, seed=1))
EOF
build() {  # build NAME RUSTFLAGS
    echo "building $1 ..." >&2
    RUSTFLAGS="$2" CARGO_TARGET_DIR="$WORK/target-$1" cargo build --release --example sim_profile -q
    cp "$WORK/target-$1/release/examples/sim_profile" "$WORK/sim_$1"
}
build base ""
rm -rf "$WORK/raw"
build gen "-Cprofile-generate=$WORK/raw"
for t in "$WORK"/t_*.json; do "$WORK/sim_gen" "$t" > /dev/null 2>&1; done
"$profdata" merge -o "$WORK/merged.profdata" "$WORK/raw"
build pgo "-Cprofile-use=$WORK/merged.profdata"
build native "-Ctarget-cpu=native"
echo "timed: 8 x 20 under PLE, 300 ms simulated; user CPU s per binary, $ROUNDS rounds (load average $(cut -d' ' -f1 /proc/loadavg))"
for r in $(seq "$ROUNDS"); do
    line="round $r:"
    for b in base pgo native; do
        out=$( { /usr/bin/time -f "%U" "$WORK/sim_$b" "$WORK/timed.json" > /dev/null; } 2>&1 )
        fp=$(echo "$out" | sed -n 's/^result fingerprint //p')
        line="$line $b $(echo "$out" | tail -1) s ($fp)"
    done
    echo "$line"
done
echo "binaries and profiles in $WORK"
