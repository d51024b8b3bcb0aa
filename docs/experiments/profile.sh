#!/bin/bash
# ncu counters of our kernels at a few points (and cuBLAS's), one launch each, NN; by default h, ≫ L2,
# beta = 0 (each point's words are profile_launch.py's arguments after LIB.so: --prec, --batch, --beta,
# --arrays). Usage (on a GPU, repository root):
#   bash docs/experiments/profile.sh LIB.so OUTDIR "ours square 72" "cublas square 96 --batch 1000" ...
export PYTHONPATH=$PWD
L=$1; O=$2; shift 2
S=${PROFILE_LAUNCH:-docs/experiments/profile_launch.py}   # another launcher takes the same place
st=smsp__average_warps_issue_stalled
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
M=$M,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
M=$M,launch__occupancy_limit_warps,launch__grid_size,launch__block_size,launch__shared_mem_per_block_dynamic
M=$M,launch__shared_mem_per_block_static,sm__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
M=$M,smsp__inst_executed.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second
M=$M,sm__warps_active.avg.per_cycle_active,lts__t_sector_hit_rate.pct
for s in barrier long_scoreboard short_scoreboard mio_throttle lg_throttle math_pipe_throttle wait \
         not_selected selected drain membar dispatch_stall no_instruction imc_miss sleeping tex_throttle; do
    M=$M,${st}_${s}_per_issue_active.ratio
done
for p in "$@"; do
    f=$O/${p// /_}; f=${f//--/}.csv
    ncu --clock-control none --kernel-name-base demangled --kernel-name regex:'gemmgen|nvjet|gemm|Kernel|sm90' --launch-skip 2 --launch-count 1 \
        --metrics $M --csv python3 $S $L $p > $f 2>&1
    echo "=== $p"
    python3 - "$f" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = None
for r in rows:
    if "Metric Name" in r:
        head = r
        continue
    if head and len(r) == len(head):
        d = dict(zip(head, r))
        name = d["Metric Name"].replace("smsp__average_warps_issue_stalled_", "stall_")
        print(f"{d['Kernel Name'][:40]:40s} {name[:62]:62s} {d['Metric Value']}")
    elif r and r[0].startswith("kernel"):
        print(",".join(r))
PY
done
