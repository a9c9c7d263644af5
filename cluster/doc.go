// Package cluster holds what a cluster section can name: the GPU presets
// (datasheet figures and their sources, docs/clusters.md) and the shard
// presets (DDP, ZeRO-1/2/3, MiCS, HSDP, ZeRO++), each a point of the AMSP
// space. The frontend resolves names through it; ir keeps only the types.
package cluster
