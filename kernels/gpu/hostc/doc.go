// Package hostc runs kernels/gpu's CUDA C kernels on the CPU through a C
// shim (it needs cgo; without cgo it is empty and its tests skip).
package hostc
