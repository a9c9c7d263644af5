#!/bin/sh
# Issue 11's comparison with PyTorch, in one run: tokens/s of tiny and of
# bench/models/d512x8.amsp trained by amspc on 2 and on 8 local ranks
# (goroutines of one process) and by PyTorch DDP over gloo on 2 processes
# (bench/torch_ddp.py, one thread each), in ROUNDS rotations (every run
# once per round, so a slow minute slows all alike), medians over rounds.
# Each amspc run's micro-batch is the global batch over the ranks, as
# torch's per-process batch is (one micro-batch a step). Local ranks are
# goroutines of one process on one machine, so their cluster is one node
# (1 x 2, 1 x 8): the model file's 2 x 4 cluster would make the compiler
# lower collectives in two levels for a network that is not there.
# Needs Debian's python3-torch with libopenblas0-pthread.
#
#   sh bench/vs_torch.sh [ROUNDS [STEPS_TINY [STEPS_D512]]]
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-3}
st=${2:-20}
sd=${3:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/amspc" ./cmd/amspc
for n in 2 8; do
	printf 'cluster cpu_1x%d {\n  nodes = 1\n  gpus_per_node = %d\n  gpu = "cpu"\n  intra_node_bw = 10 GB/s\n  inter_node_bw = 1 GB/s\n}\n' $n $n >"$tmp/c$n.amsp"
done
py=/usr/bin/python3

# median step in seconds from run's summary line
median() { sed -n 's/^measured: step \([0-9.]*\) \([mµ]*s\) (median).*/\1 \2/p' | awk '{v=$1; if ($2=="ms") v/=1e3; if ($2=="µs") v/=1e6; print v}'; }
# train section of $1 with micro_batch $2
train() { sed -n '/^train/,/^}/p' "$1" | sed "s/micro_batch *= *[0-9]*/micro_batch = $2/"; }

for model in tiny d512x8; do
	if [ $model = tiny ]; then
		file=testdata/models/tiny.amsp steps=$st batch=32 seq=64 targs="--d 64 --layers 2 --heads 4 --ffn 172 --seq 64 --batch 32"
	else
		file=bench/models/d512x8.amsp steps=$sd batch=16 seq=128 targs="--d 512 --layers 8 --heads 8 --ffn 1376 --seq 128 --batch 16"
	fi
	train $file $((batch / 2)) >"$tmp/t2.amsp"
	train $file $((batch / 8)) >"$tmp/t8.amsp"
	for r in $(seq "$rounds"); do
		$py bench/torch_ddp.py --procs 2 $targs --steps $((steps + 1)) |
			sed -n 's/.* \([0-9]*\) tokens\/s.*/torch 2 ddp \1/p' >>"$tmp/$model"
		for plan in ddp zero2 zero3; do
			s=$("$tmp/amspc" run --steps "$steps" --cluster "$tmp/c2.amsp" --train "$tmp/t2.amsp" --shard $plan "$file" | median)
			echo "amspc 2 $plan $(awk -v s="$s" -v t=$((batch * seq)) 'BEGIN { printf "%.0f", t / s }') $r" >>"$tmp/$model"
		done
		for plan in ddp zero1 zero2 zero3; do
			s=$("$tmp/amspc" run --steps "$steps" --cluster "$tmp/c8.amsp" --train "$tmp/t8.amsp" --shard $plan "$file" | median)
			echo "amspc 8 $plan $(awk -v s="$s" -v t=$((batch * seq)) 'BEGIN { printf "%.0f", t / s }') $r" >>"$tmp/$model"
		done
	done
done

echo "| model | system | ranks | plan | tokens/s (median of $rounds) | of torch DDP, 2 processes |"
echo "|---|---|---:|---|---:|---:|"
for model in tiny d512x8; do
	sort -k1,1r -k2,2n -k3,3 -s "$tmp/$model" | awk -v model=$model '
		{ key = $1 " " $2 " " $3; v[key, ++n[key]] = $4; if (!(key in seen)) { seen[key] = 1; keys[++k] = key } }
		END {
			for (i = 1; i <= k; i++) {
				key = keys[i]; m = n[key]
				for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (v[key, b] < v[key, a]) { t = v[key, a]; v[key, a] = v[key, b]; v[key, b] = t }
				med[key] = (m % 2) ? v[key, (m + 1) / 2] : (v[key, m / 2] + v[key, m / 2 + 1]) / 2
			}
			ref = med["torch 2 ddp"]
			for (i = 1; i <= k; i++) {
				split(keys[i], f, " ")
				plan = f[3] == "ddp" ? "DDP" : "ZeRO-" substr(f[3], 5)
				printf "| %s | %s | %s | %s | %.0f | %.2fx |\n", model, (f[1] == "torch" ? "PyTorch DDP (gloo)" : "amspc, local"), f[2], plan, med[keys[i]], med[keys[i]] / ref
			}
		}'
done

# 8 ranks against 2, round by round: a round's best plan on 8 ranks over
# its best on 2, measured a minute or two apart, so a slow minute of the machine
# (whose speed drifts by 15-25 %) weighs on both.
echo
for model in tiny d512x8; do
	awk -v model=$model '
		$1 == "amspc" {
			if ($4 > best[$5, $2]) best[$5, $2] = $4; if ($5 > rounds) rounds = $5
			key = $2 " " $3; v[key, ++n[key]] = $4; rk[key] = $2
		}
		END {
			for (key in n) {
				m = n[key]
				for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (v[key, b] < v[key, a]) { t = v[key, a]; v[key, a] = v[key, b]; v[key, b] = t }
				md = (m % 2) ? v[key, (m + 1) / 2] : (v[key, m / 2] + v[key, m / 2 + 1]) / 2
				if (md > bm[rk[key]]) bm[rk[key]] = md
			}
			line = ""
			for (r = 1; r <= rounds; r++) { q[r] = best[r, 8] / best[r, 2]; line = line sprintf(" %.2f", q[r]) }
			for (a = 1; a <= rounds; a++) for (b = a + 1; b <= rounds; b++) if (q[b] < q[a]) { t = q[a]; q[a] = q[b]; q[b] = t }
			med = (rounds % 2) ? q[(rounds + 1) / 2] : (q[rounds / 2] + q[rounds / 2 + 1]) / 2
			printf "%s: best plan on 8 ranks over best on 2, by round:%s; median %.2fx; of the medians above %.2fx\n", model, line, med, bm[8] / bm[2]
		}' "$tmp/$model"
done
