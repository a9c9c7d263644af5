#!/bin/sh
# Issue 12's checks on a machine with an NVIDIA GPU, prepared where Go is
# and run where the GPU is (that machine needs the driver, CUDA's
# libraries and python3 with torch, not Go).
#
#   sh bench/gpu_checks.sh build   # here: out/gpu/ holds amspc, the GPU test binary, the 1B job
#   sh bench/gpu_checks.sh run     # there, from the checkout's root, with out/gpu/ carried
#
# run prints, and keeps in out/gpu/:
#   - cudalib.log: every GPU test (device query, NVRTC, each kernel and
#     matmul against the CPU kernels, tiny 50 steps against the CPU and on
#     8 ranks sharing the GPU);
#   - tiny-cpu.jsonl, tiny-gpu.jsonl: amspc run's per-step losses of
#     tiny on the CPU and on the GPU (8 ranks in one process);
#     tiny-graphs-true.jsonl and -false.jsonl: on one rank, replayed from
#     a CUDA graph and enqueued step by step; where the
#     machine has mpirun, tiny's plans on 8 MPI processes sharing the GPU
#     against one rank on the GPU (a line each);
#   - torch.txt, amspc1b.txt: TinyLlama-1.1B's shapes at seq 2048, bf16,
#     4 sequences a step, trained by PyTorch eager (bench/torch_llama.py)
#     and by amspc on the same tokens (amspc1b-tc.txt: --tensor-cores):
#     tokens/s, MFU, peak memory;
#     profile-1b.csv: amspc profile --device cuda of that job (each
#     kernel timed alone on the GPU);
#   - adamw.txt: the fused AdamW step's GB/s against a plain stream's;
#   - torch-l32.txt, amspc-l32.txt: the same for Llama-3.2-1B's shapes
#     (tied, vocab 128,256, Llama 3's RoPE scaling; amspc on tensor cores);
#   - gpu.json: those figures as JSON (bench/gpu_summary.py; commit it
#     as bench/results/gpu.json): card, date, commit, each GPU test's
#     result, per model PyTorch's and amspc's tokens/s, MFU, peak memory,
#     amspc's predicted step and losses, attention TFLOP/s.
set -eu
cd "$(dirname "$0")/.."
d=out/gpu
case ${1:-} in
build)
	mkdir -p $d
	# The commit these binaries are built from (gpu.json names it).
	echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!bench/results' || echo ' (with uncommitted changes)')" >$d/commit.txt
	go build -o $d/amspc ./cmd/amspc
	go test -c -o $d/cudalib.test ./engine/cudalib
	# amspc on Open MPI, for tiny on 8 processes sharing the GPU (run
	# skips it where the GPU machine has no mpirun).
	if pkg-config --exists ompi-c 2>/dev/null; then
		go build -tags mpi -o $d/amspc-mpi ./cmd/amspc
	fi
	go run ./cmd/amspc import hf testdata/hf/TinyLlama-1.1B-Chat-v1.0.json --force -o $d/llama1b.amsp \
		--nodes 1 --gpus-per-node 1 --seq 2048 --micro-batch 1 --global-batch 4
	# Llama-3.2-1B's shapes (vocab 128,256, tied, Llama 3's RoPE scaling).
	go run ./cmd/amspc import hf testdata/hf/Llama-3.2-1B.json --force -o $d/llama32.amsp \
		--nodes 1 --gpus-per-node 1 --seq 2048 --micro-batch 1 --global-batch 4
	ls -la $d
	;;
run)
	# Logs go to $OUT when the device tool runs this (what it brings
	# back), else next to the binaries.
	o=${OUT:-$d}
	mkdir -p "$o"
	if [ -z "${AMSPC_CUDA_LIBS:-}" ]; then
		# CUDA's libraries where the toolkit or Python's wheels put them.
		AMSPC_CUDA_LIBS=$(find /usr/local /usr/lib /opt -xdev \( -name 'libnccl.so.2' -o -name 'libcublasLt.so.1[23]' -o -name 'libnvrtc.so.1[23]' \) 2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
		export AMSPC_CUDA_LIBS
	fi
	echo "AMSPC_CUDA_LIBS=$AMSPC_CUDA_LIBS"
	nvidia-smi -L || true
	for t in TestGPUSaxpy:30 TestGPUMatMul:60 TestGPUOps:90 TestGPUKernels:90 TestGPUStoredKernels:60 TestGPUMMA:30 TestGPUAttentionMMA:60 TestGPUTrainsTiny:120 TestGPUStreamsWait:60 TestGPUStreamsConcurrent:60 TestGPUNCCLOneRank:90 TestGPUDeviceCollectives:90 TestGPUGraphSteps:90; do
		(cd engine/cudalib && AMSPC_REQUIRE_GPU=1 timeout ${t#*:} ../../$d/cudalib.test -test.v -test.run "^${t%:*}\$") >>$o/cudalib.log 2>&1 || echo "${t%:*} failed: see cudalib.log"
	done
	grep -E '^(--- |ok|FAIL|PASS|panic)|largest relative|GPU [0-9]|CUDA|op kinds|Error|error:|graphs:' $o/cudalib.log | head -60 || true
	# Attention forward at TinyLlama's shapes: fp32 CUDA cores against
	# bf16 tensor cores (mma.cu).
	(cd engine/cudalib && timeout 60 ../../$d/cudalib.test -test.run '^$' -test.bench GPUAttention -test.benchtime 20x) 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee $o/attention.txt || true
	# The fused AdamW step (adamw_st with the bf16 copy of P) against a
	# plain stream's bandwidth on a 64M-element shard.
	(cd engine/cudalib && timeout 60 ../../$d/cudalib.test -test.run '^$' -test.bench GPUAdamW -test.benchtime 20x) 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee $o/adamw.txt || true
	timeout 30 $d/amspc run --steps 50 --log $o/tiny-cpu.jsonl testdata/models/tiny.amsp 2>&1 | grep -E '^(measured|step 50)|rror' || true
	timeout 60 $d/amspc run --steps 50 --device cuda --log $o/tiny-gpu.jsonl testdata/models/tiny.amsp 2>&1 | grep -E '^(measured|GPU memory|step 50)|rror|CUDA' || true
	# tiny on one rank, its steps replayed from a CUDA graph (the
	# default) and every step enqueued: the launch overhead graphs save,
	# in the measured step times.
	printf 'cluster one { nodes = 1 gpus_per_node = 1 gpu = "cpu" }\n' >$d/one.amsp
	for g in true false; do
		echo "tiny on one GPU rank, --graphs=$g:"
		timeout 60 $d/amspc run --steps 50 --device cuda --graphs=$g --cluster $d/one.amsp --shard ddp --log $o/tiny-graphs-$g.jsonl testdata/models/tiny.amsp 2>&1 | grep -E '^(measured|step 50)|rror|CUDA' || true
	done
	if command -v mpirun >/dev/null && [ -x $d/amspc-mpi ]; then
		# tiny's plans on 8 MPI processes sharing the GPU against one rank
		# on the GPU: per-step losses within 1e-5.
		timeout 60 $d/amspc run --steps 20 --device ${DEVICE:-cuda} --cluster $d/one.amsp --shard ddp --log $d/tiny-one.jsonl testdata/models/tiny.amsp >/dev/null 2>&1 || echo "tiny on one GPU rank failed"
		i=0
		for plan in "{ params = 2x1, grads = 2x1, optim = 4x2 }" "{ params = 1x1, grads = 1x1, optim = 1x1 }" "{ params = 4x2, grads = 4x2, optim = 4x2 }" "{ params = 1x1, grads = 4x2, optim = 4x2 }"; do
			i=$((i + 1))
			rm -f $d/tiny-mpi$i.jsonl
			timeout 90 mpirun --allow-run-as-root --oversubscribe -n 8 $d/amspc-mpi run --steps 20 --device ${DEVICE:-cuda} --shard "$plan" \
				--log $d/tiny-mpi$i.jsonl testdata/models/tiny.amsp 2>&1 | grep -E '^(measured)|rror|CUDA|MPI' || true
			python3 - $d/tiny-one.jsonl $d/tiny-mpi$i.jsonl "$plan" <<'PY' || true
import json, sys
load = lambda p: [json.loads(l)["loss"] for l in open(p) if l.strip()]
one, mpi = load(sys.argv[1]), load(sys.argv[2])
worst = max(abs(a - b) / b for a, b in zip(mpi, one)) if mpi else float("nan")
ok = len(mpi) == len(one) and worst <= 1e-5
print(f"tiny, plan {sys.argv[3]}, 8 MPI processes vs one rank: {len(mpi)} steps, largest relative difference {worst:.2g}: {'ok' if ok else 'FAIL'}")
PY
		done
	else
		echo "no mpirun here (or no amspc-mpi): tiny on 8 MPI processes not run"
	fi
	if [ -n "${SKIP_TORCH:-}" ]; then
		python3 bench/torch_llama.py --data $d/tok.bin --write-tokens 2000000 --steps 0 || true # the tokens amspc trains on
	else
		PYTHONUNBUFFERED=1 timeout 120 python3 bench/torch_llama.py --data $d/tok.bin --write-tokens 2000000 --batch 4 --steps 8 2>&1 | tee $o/torch.txt || true
	fi
	timeout 150 $d/amspc run --device cuda --steps 6 --data $d/tok.bin --log $o/amspc1b.jsonl $d/llama1b.amsp 2>&1 | tee $o/amspc1b.txt || true
	# The same with attention on bf16 tensor cores (mma.cu).
	timeout 150 $d/amspc run --device cuda --tensor-cores --steps 6 --data $d/tok.bin --log $o/amspc1b-tc.jsonl $d/llama1b.amsp 2>&1 | tee $o/amspc1b-tc.txt || true
	timeout 120 $d/amspc profile --device cuda --reps 3 -o $o/profile-1b.csv $d/llama1b.amsp 2>&1 | head -12 || true
	timeout 120 $d/amspc profile --device cuda --tensor-cores --reps 3 -o $d/profile-1b-tc.csv $d/llama1b.amsp 2>&1 | head -12 || true
	if [ -n "${NCU:-}" ]; then
		# Nsight Compute on the 1B job's attention kernels and the norm's
		# column sum (what limits them), where the machine has ncu.
		ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1 || true)
		if [ -n "$ncu" ]; then
			timeout 150 $ncu -k 'regex:^(attention_f32|attention_dq_f32|attention_dkv_f32|rmsnorm_grad_w_f32)$' -c 8 \
				--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
				$d/amspc profile --device cuda --reps 1 -o /tmp/ncu-profile.csv $d/llama1b.amsp 2>&1 | grep -v '^==PROF==' | tail -n 400 || true
		fi
	fi
	nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv || true
	# The figures as JSON: commit it as bench/results/gpu.json. Written
	# now and again after the last part, so a run cut short keeps them.
	python3 bench/gpu_summary.py "$o" $d >$o/gpu.json && echo "wrote $o/gpu.json" || echo "gpu_summary.py failed"
	# Last (the longest to start): Llama-3.2-1B's shapes, PyTorch eager
	# then amspc on tensor cores, on the same tokens (ids below 65,536:
	# uint16 files).
	if [ -z "${SKIP_TORCH:-}" ]; then
		PYTHONUNBUFFERED=1 timeout 100 python3 bench/torch_llama.py --data $d/tok.bin --batch 4 --steps 6 --d 2048 --layers 16 --heads 32 \
			--kv-heads 8 --ffn 8192 --vocab 128256 --theta 500000 --rope-scaling 32 1 4 8192 --tied 2>&1 | tee $o/torch-l32.txt || true
	fi
	timeout 120 $d/amspc run --device cuda --tensor-cores --steps 5 --data $d/tok.bin --log $o/amspc-l32.jsonl $d/llama32.amsp 2>&1 | tee $o/amspc-l32.txt || true
	python3 bench/gpu_summary.py "$o" $d >$o/gpu.json && echo "wrote $o/gpu.json" || echo "gpu_summary.py failed"
	;;
*)
	echo "usage: sh bench/gpu_checks.sh build|run" >&2
	exit 2
	;;
esac
