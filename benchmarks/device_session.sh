#!/bin/bash
# One call on the lent many-core machine (issue 33): the machine, its costs and polling A/B, then
# peers.py's rows, each step under its own time limit, every row printed as it is measured.
#   bash ../shared/tools/device-bundle.sh          # here, once: prepares .device/
#   run(command="bash benchmarks/device_session.sh", carry=[".device"], timeout_s=345)
# Outputs land in $OUT (the device tool brings them back). STEPS picks (default: costs pair mlp
# collectives; 'big' is the 64 MiB collectives, 'loops' the pair's rows on uvloop and with it hidden,
# 'anatomy' where a small Megatron step's time goes (step_anatomy.py) and a message's whole path on
# one core (hop_path.py), 'sweep' the all-reduce's algorithms by size): about 40, 70, 55, 30, 65,
# 70, 25 and 15 s on the 16-core machine (2026-11-27; hop_path.py's 10 s, and 'loops' as the
# 'nouvloop' step it replaced, estimated; all sides measured then: the collectives and Megatron
# steps now measure simshard on Ray and torch gloo only unless SIDES says otherwise, and one Ray
# configuration where the defaults are one device per process), a round each; ROUNDS=2 or 3
# multiply the peers.py steps and their limits. For a lease of 15 minutes: ROUNDS=2 STEPS="pair
# mlp", then ROUNDS=2 STEPS="collectives big loops", then goals.py here on both calls' JSON (the
# limits are generous: each step prints its time). Each peers.py step leaves its
# rows as JSON too, and the call ends with issue 33's goals read off them ($OUT/goals.txt).
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
R=${ROUNDS:-1}  # rounds of each peers.py row (every side in each, the best kept): 3 fit for two groups of rows
# who the collectives and Megatron rows measure: the goals' sides unless told (SIDES="ray local torch jax": all)
S=${SIDES:-ray torch}
{ date -u; nproc; uname -r; uptime; python3 -c "import torch, jax, numpy, uvloop; print('torch', torch.__version__, 'jax', jax.__version__, 'numpy', numpy.__version__, 'uvloop', uvloop.__version__)"; lscpu | grep -E 'Model name|^CPU\(s\)'; } > "$O/machine.txt" 2>&1
cat "$O/machine.txt"
step() { local limit=$1 name=$2; shift 2; local S=$SECONDS
  timeout "$limit" bash .device/run.sh "$@" 2>&1 | grep -v "logging.cc\|^    @\|^PC:\|SIGTERM\|RAW:\|^\[20" | tee "$O/$name.txt"
  echo "[$name took $((SECONDS-S)) s; load $(cut -d' ' -f1-3 /proc/loadavg)]" | tee -a "$O/machine.txt"; }
for s in ${STEPS:-costs pair mlp collectives}; do
  case $s in
    costs) step 90 costs python benchmarks/machine_costs.py --polling ;;
    pair) step $((75 * R)) pair python benchmarks/peers.py --rounds $R --rows messages pair --json "$O/pair.json" ;;
    mlp) step $((100 * R)) mlp python benchmarks/peers.py --rounds $R --rows mlp --sides $S --json "$O/mlp.json" ;;
    collectives) step $((90 * R)) collectives python benchmarks/peers.py --rounds $R --rows collectives --sizes small --sides $S --json "$O/collectives.json" ;;
    big) step $((150 * R)) big python benchmarks/peers.py --rounds $R --rows collectives --sizes large --sides $S --json "$O/big.json" ;;
    loops) step $((90 * R)) loops python benchmarks/peers.py --rounds $R --rows loops --json "$O/loops.json" ;;
    anatomy) step 40 anatomy python benchmarks/step_anatomy.py --steps 300
             step 30 hop_path python benchmarks/hop_path.py --seconds 3 --segments --poll ;;
    sweep) step 60 sweep python benchmarks/allreduce_algorithms.py --groups 4,8 --sizes 16,64,256,1024 ;;
  esac
done
# issue 33's goals from whatever this call measured (benchmarks/goals.py; rows measured over two
# calls: run it here on both calls' files)
J=$(ls "$O"/pair.json "$O"/mlp.json "$O"/collectives.json "$O"/big.json "$O"/loops.json 2>/dev/null)
if [ -n "$J" ]; then
  bash .device/run.sh python benchmarks/goals.py $J 2>&1 | tee "$O/goals.txt"
fi
