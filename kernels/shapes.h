// Shape letters used in every buffer comment across kernels/, core/ and tests/.
//   B   batch (sequences)            T   positions per sequence (predicted tokens)
//   C   model width (= D)            V   vocabulary size
//   L   decoder blocks               NH  query heads, NKV key/value heads, HS head size
//   F   SwiGLU hidden width          H   latent bits per position; 2^H codes
//   N   rows = B*T when batch and time are folded for GEMMs
// Layouts follow PyTorch: activations (B, T, C) row-major, weights nn.Linear [out, in].
#pragma once
