#!/bin/sh
# Tokens/s of tiny and d512x8 on 2, 4 and 8 ranks: amspc on local
# goroutines and on MPI processes (DDP and ZeRO-3), and PyTorch DDP over
# gloo (bench/torch_ddp.py, one thread per process, OpenBLAS), measured in
# one run.
# Prints a markdown table (bench/README.md). Needs an mpi build's
# prerequisites (Open MPI) and Debian's python3-torch with libopenblas0-pthread.
#
#   sh bench/throughput.sh [STEPS_TINY [STEPS_D512]]
set -eu
cd "$(dirname "$0")/.."
st=${1:-12}
sd=${2:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/amspc" ./cmd/amspc
go build -tags mpi -o "$tmp/amspc-mpi" ./cmd/amspc
for n in 2 4; do
	printf 'cluster cpu_1x%s {\n  nodes = 1\n  gpus_per_node = %s\n  gpu = "cpu"\n  intra_node_bw = 10 GB/s\n  inter_node_bw = 1 GB/s\n}\n' $n $n >"$tmp/c$n.amsp"
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
py=/usr/bin/python3

# median step in seconds from run's summary line
median() { sed -n 's/^measured: step \([0-9.]*\) \([mµ]*s\) (median).*/\1 \2/p' | awk '{v=$1; if ($2=="ms") v/=1e3; if ($2=="µs") v/=1e6; print v}'; }

echo "| model | ranks | plan | local goroutines | MPI processes | torch DDP (gloo) |"
echo "|---|---:|---|---:|---:|---:|"
for model in tiny d512x8; do
	if [ $model = tiny ]; then
		file=testdata/models/tiny.amsp steps=$st tokens=2048 targs="--d 64 --layers 2 --heads 4 --ffn 172 --seq 64 --batch 32"
	else
		file=bench/models/d512x8.amsp steps=$sd tokens=2048 targs="--d 512 --layers 8 --heads 8 --ffn 1376 --seq 128 --batch 16"
	fi
	for n in 2 4 8; do
		cl=""
		[ $n -lt 8 ] && cl="--cluster $tmp/c$n.amsp"
		torch=$($py bench/torch_ddp.py --procs $n $targs --steps $((steps + 1)) | sed -n 's/.* \([0-9]*\) tokens\/s.*/\1/p')
		for plan in ddp zero3; do
			l=$("$tmp/amspc" run --steps "$steps" $cl --shard $plan "$file" | median)
			m=$(mpirun --oversubscribe -n $n "$tmp/amspc-mpi" run --steps "$steps" $cl --shard $plan "$file" | tr '\r' '\n' | median)
			awk -v model=$model -v n=$n -v plan=$plan -v l="$l" -v m="$m" -v t="$torch" -v tok=$tokens 'BEGIN {
				printf "| %s | %d | %s | %.0f | %.0f | %s |\n", model, n, plan, tok/l, tok/m, t }'
		done
	done
done
