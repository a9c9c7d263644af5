package cluster

import "amspc/ir"

const (
	giB = 1 << 30
	miB = 1 << 20
	gB  = 1e9
	tF  = 1e12
)

// gpuReserve is what a training process holds on a datacenter GPU
// besides tensors (docs/planner.md, "Memory per GPU"): the CUDA context
// with lazily loaded modules (about 0.5 GiB on Ampere and Hopper with
// CUDA 12), NCCL's buffers for the job's communicators (NCCL_BUFFSIZE
// 4 MiB per channel and peer, about 1 GiB for a few communicators), and
// the cuBLASLt and attention workspaces (a few hundred MiB).
const gpuReserve = 2 * giB

// GPUPresets are the accelerators a cluster section can name. Memory is
// what the driver reports (nvidia-smi's total), FLOP/s the dense tensor-core
// peak for bf16/fp16, bandwidths one direction. Sources are NVIDIA's data
// sheets and DGX reference designs; see docs/clusters.md. Efficiency is
// the achievable fraction of peak: 0.55 on Ampere (Megatron-LM reports
// 52-56% MFU for GPT-3-scale training on A100), 0.45 on Hopper (published
// large-scale runs land at 38-50% MFU). The bus efficiencies are the
// default bandwidth profile: nccl-tests all-reduce on 8 x A100 reaches
// about 235 GB/s bus bandwidth of NVLink 3's 300 GB/s, on 8 x H200 (NVLink
// 4, 450 GB/s, NVLS off) about 368 GB/s; the same ratios are assumed for
// the A800 and H800's narrower NVLink. InfiniBand reaches about 90% of its
// line rate in nccl-tests' inter-node runs. MemBW is the HBM bandwidth of
// the data sheet; MatMulHalf the GEMM dimension at which a GEMM reaches
// half of Efficiency: 64, where a dimension fills half of cuBLAS's
// 128-wide tiles (docs/planner.md).
var GPUPresets = []ir.GPU{
	{Name: "A100-80GB", MemoryBytes: 80 * giB, PeakFLOPS: 312 * tF, MemBW: 2039 * gB, MatMulHalf: 64, IntraBW: 300 * gB, InterBW: 200 * gB, Efficiency: 0.55, IntraBusEff: 235.0 / 300, InterBusEff: 0.9, ReserveBytes: gpuReserve,
		Source: "NVIDIA A100 datasheet (SXM4 80GB: 312 TFLOP/s bf16 dense, HBM2e 2039 GB/s, NVLink3 600 GB/s bidirectional); DGX A100: 8x 200 Gb/s HDR"},
	{Name: "A800-80GB", MemoryBytes: 80 * giB, PeakFLOPS: 312 * tF, MemBW: 2039 * gB, MatMulHalf: 64, IntraBW: 200 * gB, InterBW: 200 * gB, Efficiency: 0.55, IntraBusEff: 235.0 / 300, InterBusEff: 0.9, ReserveBytes: gpuReserve,
		Source: "NVIDIA A800 datasheet (SXM4 80GB: 312 TFLOP/s bf16 dense, HBM2e 2039 GB/s, NVLink 400 GB/s bidirectional); 8x 200 Gb/s HDR"},
	{Name: "H100-80GB", MemoryBytes: 80 * giB, PeakFLOPS: 989 * tF, MemBW: 3350 * gB, MatMulHalf: 64, IntraBW: 450 * gB, InterBW: 400 * gB, Efficiency: 0.45, IntraBusEff: 368.0 / 450, InterBusEff: 0.9, ReserveBytes: gpuReserve,
		Source: "NVIDIA H100 datasheet (SXM5: 989 TFLOP/s bf16 dense, HBM3 3.35 TB/s, NVLink4 900 GB/s bidirectional); DGX H100: 8x 400 Gb/s NDR"},
	{Name: "H800-80GB", MemoryBytes: 80 * giB, PeakFLOPS: 989 * tF, MemBW: 3350 * gB, MatMulHalf: 64, IntraBW: 200 * gB, InterBW: 400 * gB, Efficiency: 0.45, IntraBusEff: 368.0 / 450, InterBusEff: 0.9, ReserveBytes: gpuReserve,
		Source: "NVIDIA H800 SXM5 (989 TFLOP/s bf16 dense, HBM3 3.35 TB/s, NVLink 400 GB/s bidirectional); 8x 400 Gb/s NDR"},
	{Name: "H200-141GB", MemoryBytes: 143771 * miB, PeakFLOPS: 989 * tF, MemBW: 4800 * gB, MatMulHalf: 64, IntraBW: 450 * gB, InterBW: 400 * gB, Efficiency: 0.45, IntraBusEff: 368.0 / 450, InterBusEff: 0.9, ReserveBytes: gpuReserve,
		Source: "NVIDIA H200 datasheet (SXM: 141 GB HBM3e at 4.8 TB/s, 143771 MiB usable per nvidia-smi, 989 TFLOP/s bf16 dense, NVLink4 900 GB/s bidirectional)"},
	// CPU ranks: nominal figures for planning a CPU run; the runtime's
	// calibration replaces them with measured ones.
	{Name: "cpu", MemoryBytes: 8 * giB, PeakFLOPS: 50e9, MemBW: 20 * gB, MatMulHalf: 8, IntraBW: 10 * gB, InterBW: 1 * gB, Efficiency: 0.5, IntraBusEff: 1, InterBusEff: 1, SharedCores: true,
		Source: "nominal CPU worker (8 GiB, 50 GFLOP/s, 20 GB/s memory); not a measurement"},
}

// LookupGPU finds a preset by name.
func LookupGPU(name string) (ir.GPU, bool) {
	for _, g := range GPUPresets {
		if g.Name == name {
			return g, true
		}
	}
	return ir.GPU{}, false
}
